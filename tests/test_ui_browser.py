"""The viewer in a real browser: headless Chromium (Debian's ``chromium``) via Playwright.

One browser for the module; the viewer runs on a real uvicorn server on loopback over a
store written by real runs (``ui_support``). Every page is checked for console errors
and for requests to any other host; a screenshot of each page is saved in the test's
temporary folder (``AGENTJOURNAL_UI_SCREENSHOTS=DIR`` keeps them in DIR instead).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Page,
    Request,
    Route,
    expect,
    sync_playwright,
)
from playwright.sync_api import Error as PlaywrightError

from cli_run import run
from ui_support import (
    HOSTILE,
    Stored,
    in_thread,
    serving,
    tamper,
    write_forked_in_handoff,
    write_in_thread,
    write_listed,
    write_paused,
    write_session,
    write_store,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.path.exists("/usr/bin/chromium"):
    CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.slow,  # a real browser
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no chromium executable (Debian: apt-get install chromium; .ci/run installs it)",
    ),
]

TIMEOUT_MS = 15_000
_SHOT_TRIES = 3


def screenshot(page: Page, path: Path) -> None:
    """Save a screenshot of ``page`` at ``path`` (for a person to look at). Headless
    Chromium now and then refuses a capture asked while it composites the page ("Unable to
    capture screenshot"): it is asked again, a fifth of a second later, up to three times in
    all, before that fails the test."""
    for attempt in range(1, _SHOT_TRIES + 1):
        try:
            page.screenshot(path=str(path))
            return
        except PlaywrightError as error:
            if "Unable to capture screenshot" not in str(error) or attempt == _SHOT_TRIES:
                raise
            page.wait_for_timeout(200)


@dataclass
class Watched:
    """A page and what it did: console errors, uncaught errors, every request's URL."""

    page: Page
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    def others(self, origin: str) -> list[str]:
        """Requests to anything but ``origin`` (and inline ``data:``)."""
        return [u for u in self.requests if not u.startswith((origin + "/", "data:"))]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    return in_thread(write_store, tmp_path_factory.mktemp("ui-browser"))


@pytest.fixture(scope="module")
def url(stored: Stored) -> Iterator[str]:
    with serving(stored.uri, pubkey=stored.pubkey) as base:
        yield base


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wanted = os.environ.get("AGENTJOURNAL_UI_SCREENSHOTS")
    if wanted:
        Path(wanted).mkdir(parents=True, exist_ok=True)
        return Path(wanted)
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def watched(browser: Browser) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    seen = Watched(page)

    def console(message: ConsoleMessage) -> None:
        if message.type == "error":
            seen.errors.append(message.text)

    page.on("console", console)
    page.on("pageerror", lambda error: seen.errors.append(str(error)))
    page.on("request", lambda request: seen.requests.append(request.url))
    try:
        yield seen
    finally:
        context.close()


def test_the_demo_session_shows_lanes_decisions_grants_and_a_verified_ledger(
    watched: Watched, url: str, shots: Path
) -> None:
    page = watched.page
    page.goto(f"{url}/sessions/demo-1")
    expect(page.locator("#ledger")).to_contain_text("VERIFIED: checkpoints signed by ")
    expect(page.locator("#status")).to_have_text("live")
    page.locator("#tab-timeline").click()
    lanes = page.locator(".lane-head").all_inner_texts()
    assert [lane for lane in lanes if lane != "authority"] == ["triage", "billing", "refunds"]
    modify = page.locator('.event.decision-MODIFY[data-agent="billing"]')
    expect(modify).to_have_count(1)
    expect(modify.locator(".diff .del")).to_contain_text("ann@example.com")
    expect(modify.locator(".diff .add")).to_contain_text("[REDACTED]")
    block = page.locator('.event.decision-BLOCK[data-agent="refunds"]')
    expect(block).to_have_count(1)
    expect(block).to_contain_text("issue_refund: BLOCK")
    # Grants: the run's root authority, and what each handoff granted its receiver.
    assert page.locator(".event.kind-AuthorityGranted").count() >= 1
    handoffs = page.locator(".event.kind-SubagentStarted", has_text="granted [orders.")
    expect(handoffs).to_have_count(2)
    expect(page.locator("#tree li")).to_have_count(3)
    expect(page.locator("#usage")).to_contain_text("total")
    screenshot(page, shots / "ui-session.png")
    # Clicking an event shows its exact stored record, chain position included, beside the
    # timeline and in view, however far down the event is.
    block.scroll_into_view_if_needed()
    block.click()
    record = page.locator("#record")
    expect(record).to_contain_text('"type": "agentjournal.GuardrailDecided"')
    expect(record).to_contain_text('"aj.hash"')
    expect(record).to_contain_text("CEILING_EXCEEDED")
    shown = page.locator("#detail").bounding_box()
    timeline = page.locator("#timeline").bounding_box()
    assert shown is not None
    assert timeline is not None
    assert shown["x"] >= timeline["x"] + timeline["width"]  # beside, not below
    assert 0 <= shown["y"] < 1000  # in the viewport
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400  # no page scroll
    page.locator("#tab-integrity").click()
    expect(page.locator("#integrity h2").first).to_have_text("verified")
    screenshot(page, shots / "ui-integrity.png")
    page.locator("#tab-replay").click()
    page.locator("#replay-at").select_option("3")
    expect(page.locator("#replay > li")).to_have_count(3)
    # The history reads as a conversation; the stored item is one click away.
    expect(page.locator("#replay > li .said").first).to_have_text(
        "user Why was I charged twice for order 42?"
    )
    expect(page.locator("#replay > li details pre").first).not_to_be_visible()
    screenshot(page, shots / "ui-replay.png")
    assert watched.errors == []
    assert watched.others(url) == []


def test_a_tampered_copy_shows_the_failure_at_the_edited_event(
    watched: Watched, stored: Stored, tmp_path: Path, shots: Path
) -> None:
    copy, stream, revision = tamper(
        stored, tmp_path, b"refund of 1250 cents", b"refund of 9999 cents"
    )
    with serving(f"sqlite:///{copy}", pubkey=stored.pubkey) as base:
        page = watched.page
        page.goto(f"{base}/sessions/demo-1")
        expect(page.locator("#ledger")).to_contain_text("FAILED: ")
        page.locator("#tab-timeline").click()
        failed = page.locator(".event.failed")
        expect(failed).to_have_count(1)
        assert failed.get_attribute("data-stream") == stream
        assert failed.get_attribute("data-revision") == str(revision)
        expect(failed).to_contain_text("9999 cents")
        screenshot(page, shots / "ui-tampered.png")
        page.locator("#tab-integrity").click()
        expect(page.locator("#integrity h2").first).to_have_text("FAILED")
        page.locator("#goto-failure").click()
        expect(page.locator(".event.failed.selected")).to_have_count(1)
        assert watched.errors == []
        assert watched.others(base) == []


def test_a_session_written_while_the_pages_are_open_appears_without_reload(
    watched: Watched, browser: Browser, stored: Stored, url: str, shots: Path
) -> None:
    page = watched.page
    page.goto(url + "/")
    expect(page.locator('tr[data-session="demo-1"]')).to_have_count(1)
    expect(page.locator("#status")).to_have_text("live")
    key = stored.pubkey.with_suffix("")
    write_in_thread(stored.uri, key, "live-1", "first words")
    expect(page.locator('tr[data-session="live-1"]')).to_have_count(1)
    page.locator("#q").fill("live-")
    expect(page.locator("#rows tr")).to_have_count(1)
    # Under a search, a new matching session joins the rows; the search box keeps its text.
    write_in_thread(stored.uri, key, "live-2", "other words")
    expect(page.locator("#rows tr")).to_have_count(2)
    expect(page.locator("#q")).to_have_value("live-")
    screenshot(page, shots / "ui-sessions.png")
    # The session page follows its own tree: a new run's events arrive without a reload.
    page.goto(f"{url}/sessions/live-1")
    expect(page.locator("#status")).to_have_text("live")
    page.locator("#tab-timeline").click()
    before = page.locator(".event").count()
    write_in_thread(stored.uri, key, "live-1", "second words")
    expect(page.locator(".event", has_text="second words")).to_have_count(1)
    assert page.locator(".event").count() > before
    assert watched.errors == []
    assert watched.others(url) == []


def test_html_in_a_message_is_shown_as_text_and_never_runs(
    watched: Watched, url: str, tmp_path: Path, stored: Stored
) -> None:
    page = watched.page
    page.goto(f"{url}/sessions/hostile-1")
    page.locator("#tab-timeline").click()
    expect(page.locator(".event.kind-UserMessageReceived").first).to_contain_text(
        "<script>window.__pwned = 1</script>"
    )
    page.locator("#tab-replay").click()
    expect(page.locator("#replay")).to_contain_text("</script><img src=")
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img").count() == 0
    assert page.locator("#app b", has_text="bold?").count() == 0
    assert watched.errors == []
    assert watched.others(url) == []
    assert not any(u.endswith("/x.png") for u in watched.requests)
    # The same in the one-file export.
    out = tmp_path / "hostile.html"
    done = in_thread(run, "view", "hostile-1", "-o", str(out), "--uri", stored.uri)
    assert done.returncode == 0, done.stderr
    page.goto(out.as_uri())
    page.locator("#tab-timeline").click()
    expect(page.locator(".event.kind-UserMessageReceived").first).to_contain_text(HOSTILE[:40])
    assert page.evaluate("window.__pwned") is None


def test_the_view_file_opens_from_file_with_every_request_blocked(
    watched: Watched, stored: Stored, tmp_path: Path, shots: Path
) -> None:
    out = tmp_path / "session.html"
    done = in_thread(
        run,
        "view",
        "demo-1",
        "-o",
        str(out),
        "--at",
        "5",
        "--uri",
        stored.uri,
        "--pubkey",
        str(stored.pubkey),
    )
    assert done.returncode == 0, done.stderr
    page = watched.page
    blocked: list[str] = []

    def refuse(route: Route, request: Request) -> None:
        if request.url.startswith("file://"):
            route.continue_()
        else:
            blocked.append(request.url)
            route.abort()

    page.route("**/*", refuse)
    page.goto(out.as_uri())
    # Opened at --at 5: the Replay tab, the five items before #5.
    expect(page.locator("#replay > li")).to_have_count(5)
    page.locator("#tab-timeline").click()
    expect(page.locator("#ledger")).to_contain_text("VERIFIED: checkpoints signed by ")
    expect(page.locator(".event.decision-MODIFY .diff .add")).to_contain_text("[REDACTED]")
    expect(page.locator(".event.decision-BLOCK")).to_have_count(1)
    page.locator("#tab-replay").click()
    page.locator("#replay-at").select_option("9")
    expect(page.locator("#replay > li")).to_have_count(9)
    screenshot(page, shots / "ui-file.png")
    assert blocked == []
    assert watched.errors == []
    assert all(u.startswith("file://") or u.startswith("data:") for u in watched.requests)


def test_an_unknown_session_is_a_404_page(watched: Watched, url: str, shots: Path) -> None:
    page = watched.page
    answer = page.goto(f"{url}/sessions/nope-1")
    assert answer is not None
    assert answer.status == 404
    expect(page.locator(".missing")).to_have_text("no session 'nope-1' in this store")
    screenshot(page, shots / "ui-404.png")
    assert watched.others(url) == []


# -- branches ------------------------------------------------------------------------------


async def _run_on_branch(uri: str, key: str) -> None:
    from agentjournal import Journal
    from drive import drive
    from handoff_scenarios import top_level

    # Signed, as the demo and the fork are: an unsigned run would leave the branch's
    # events after the last checkpoint, and the ledger would say so.
    async with Journal.open(uri, signing_key=key) as journal:
        branch = journal.session("demo-1", branch="retry")
        await drive(top_level(), "One more question", session=branch, hooks=branch)


@pytest.fixture(scope="module")
def branched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stored, str]]:
    """The demo forked before its second user message (#14) into ``retry`` by the command
    line (with the signing key configured, so main's marker is signed), then a real run
    on ``retry``; served."""
    import asyncio

    stored = in_thread(write_store, tmp_path_factory.mktemp("ui-branches"))
    key = str(stored.pubkey).removesuffix(".pub")
    forked = in_thread(
        lambda *args: run(*args, env={"AGENTJOURNAL_SIGNING_KEY_FILE": key}),
        "fork",
        "demo-1",
        "--at",
        "14",
        "--name",
        "retry",
        "--uri",
        stored.uri,
    )
    assert forked.returncode == 0, forked.stderr
    in_thread(asyncio.run, _run_on_branch(stored.uri, key))
    with serving(stored.uri, pubkey=stored.pubkey) as base:
        yield stored, base


def test_a_branch_is_named_its_timeline_shown_and_its_replay_is_its_line(
    watched: Watched, branched: tuple[Stored, str], shots: Path
) -> None:
    _, url = branched
    page = watched.page
    page.goto(f"{url}/sessions/demo-1")
    expect(page.locator("#line")).to_have_text("main")
    expect(page.locator("#ledger")).to_contain_text(
        "VERIFIED: checkpoints signed by "
    )  # the fork was signed
    page.locator("#tab-timeline").click()
    expect(page.locator(".event.kind-BranchForked")).to_contain_text("branch 'retry' forked")
    # Choosing the branch opens its line: its own streams, named with its parent and cut.
    page.locator("#branch-select").select_option("retry")
    page.wait_for_url(f"{url}/sessions/demo-1?branch=retry")
    expect(page.locator("#line")).to_have_text(
        "branch retry \u2190 main before #14 · shares 14 items with main before #14"
    )
    expect(page.locator("#status")).to_have_text("live")
    page.locator("#tab-timeline").click()
    expect(page.locator("#tree li")).to_have_count(1)
    expect(page.locator("#tree li")).to_have_attribute("data-stream", "AgentBranch-demo-1@retry")
    expect(page.locator("#tree li")).to_contain_text("triage")  # named by its agent
    expect(page.locator(".event.kind-BranchStarted")).to_have_count(1)
    expect(page.locator(".event.kind-UserMessageReceived")).to_contain_text("One more question")
    expect(page.locator(".event.kind-AssistantTextGenerated")).to_contain_text("Anything else?")
    screenshot(page, shots / "ui-branch.png")
    # Replay on the line: below the cut the parent's history, then the branch's own items.
    page.locator("#tab-replay").click()
    expect(page.locator("#replay > li")).to_have_count(16)  # now: 14 shared + 2 own
    page.locator("#replay-at").select_option("15")
    expect(page.locator("#replay > li")).to_have_count(15)
    expect(page.locator("#replay > li").last).to_contain_text("One more question")
    page.locator("#replay-at").select_option("14")
    expect(page.locator("#replay > li")).to_have_count(14)
    expect(page.locator("#replay > li").last).not_to_contain_text("One more question")
    screenshot(page, shots / "ui-branch-replay.png")
    assert watched.errors == []
    assert watched.others(url) == []


def test_an_unknown_branch_is_a_404_page(watched: Watched, branched: tuple[Stored, str]) -> None:
    _, url = branched
    answer = watched.page.goto(f"{url}/sessions/demo-1?branch=nope")
    assert answer is not None
    assert answer.status == 404
    expect(watched.page.locator(".missing")).to_contain_text("has no branch 'nope'")


def test_the_view_file_of_a_branch_opens_offline_on_its_line(
    watched: Watched, branched: tuple[Stored, str], tmp_path: Path
) -> None:
    stored, _ = branched
    out = tmp_path / "branch.html"
    done = in_thread(
        run,
        "view",
        "demo-1",
        "--branch",
        "retry",
        "-o",
        str(out),
        "--uri",
        stored.uri,
        "--pubkey",
        str(stored.pubkey),
    )
    assert done.returncode == 0, done.stderr
    assert "branch 'retry'" in done.stderr
    page = watched.page
    page.route(
        "**/*",
        lambda route, request: (
            route.continue_() if request.url.startswith("file://") else route.abort()
        ),
    )
    page.goto(out.as_uri())
    expect(page.locator("#line")).to_contain_text("branch retry \u2190 main before #14")
    expect(page.locator("#branch-select")).to_be_disabled()
    page.locator("#tab-replay").click()
    page.locator("#replay-at").select_option("15")  # carried in the file: no server
    expect(page.locator("#replay > li")).to_have_count(15)
    assert watched.errors == []


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_list_and_a_session_fit_the_width_without_scrolling_sideways(
    browser: Browser, url: str, shots: Path, width: int
) -> None:
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{url}/")
        expect(page.locator("#rows tr")).not_to_have_count(0)
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        expect(page.locator("table.sessions th").last).to_have_text("integrity")
        screenshot(page, shots / f"ui-list-{width}.png")
        page.goto(f"{url}/sessions/demo-1")
        expect(page.locator("#ledger")).to_contain_text("VERIFIED: ")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.locator("#tab-timeline").click()
        page.locator('.event.decision-MODIFY[data-agent="billing"]').click()
        expect(page.locator("#record")).to_contain_text("PII_REDACTED")
        screenshot(page, shots / f"ui-session-{width}.png")
    finally:
        context.close()


# -- the console -----------------------------------------------------------------------------


def test_the_conversation_nests_handoffs_and_shows_each_decision_beside_its_call(
    watched: Watched, url: str, shots: Path
) -> None:
    page = watched.page
    page.goto(f"{url}/sessions/demo-1")
    expect(page.locator("#tab-conversation")).to_have_class("active")  # what a page opens on
    talk = page.locator("#conversation")
    expect(talk.locator(".msg.role-user").first).to_have_text(
        re.compile(r"user\s*#0\s*Why was I charged twice for order 42\?")
    )
    billing = talk.locator('details.handoff[data-block$="call_to_billing"]')
    refunds = billing.locator('details.handoff[data-block$="call_to_refunds"]')
    expect(billing).to_have_count(1)
    expect(refunds).to_have_count(1)  # nested inside billing's block
    expect(billing.locator("summary").first).to_contain_text("billing")
    expect(billing.locator("summary .badge").first).to_have_text("success")
    # Each decision where it was taken: the MODIFY on add_note's call with its diff, the
    # BLOCK on the refund that ran over the ceiling, the handoff's check on the handoff.
    note = billing.locator(".msg.role-call", has_text="add_note(")
    expect(note.locator(".verdict.decision-MODIFY")).to_have_count(1)
    expect(note.locator(".diff .del")).to_contain_text("ann@example.com")
    expect(note.locator(".diff .add")).to_contain_text("[REDACTED]")
    blocked = refunds.locator(".msg.role-call", has_text='"amount_cents": 2500')
    expect(blocked.locator(".verdict.decision-BLOCK")).to_contain_text("CEILING_EXCEEDED")
    expect(billing.locator(":scope > .verdict").first).to_contain_text("AGENT_HANDOFF billing")
    screenshot(page, shots / "ui-conversation.png")
    # The record of what was clicked, beside the conversation and in view.
    blocked.locator(".verdict.decision-BLOCK").click()
    expect(page.locator("#record")).to_contain_text('"decision": "BLOCK"')
    expect(page.locator(".verdict.decision-BLOCK.selected")).to_have_count(1)
    shown = page.locator("#detail").bounding_box()
    talk_box = talk.bounding_box()
    assert shown is not None
    assert talk_box is not None
    assert shown["x"] >= talk_box["x"] + talk_box["width"]
    assert 0 <= shown["y"] < 1000
    # A block folds away and back.
    billing.locator("summary .fold").first.click()
    expect(refunds).not_to_be_visible()
    billing.locator("summary .fold").first.click()
    expect(refunds).to_be_visible()
    assert watched.errors == []
    assert watched.others(url) == []


def test_the_waterfall_draws_runs_model_calls_and_checks_with_their_durations(
    watched: Watched, url: str, shots: Path
) -> None:
    page = watched.page
    page.goto(f"{url}/sessions/demo-1")
    page.locator("#tab-waterfall").click()
    # The first turn, its resume after the refund's approval, and the thanks.
    expect(page.locator("#waterfall .row-run")).to_have_count(3)
    expect(page.locator("#waterfall .row-model")).to_have_count(8)
    # lookup_order, add_note, the BLOCKed issue_refund (refused inside the SDK's tool call:
    # it has its times too), and the approved refund the resumed run ran.
    expect(page.locator("#waterfall .row-tool")).to_have_count(4)
    assert page.locator("#waterfall .row-guardrail").count() >= 8
    expect(page.locator("#waterfall .row-guardrail .bar.decision-BLOCK")).to_have_count(1)
    for text in page.locator("#waterfall .row-model .bar-ms").all_inner_texts():
        assert re.fullmatch(r"[0-9.]+ (ms|s)", text), text
    widths = page.locator("#waterfall .row-run .bar").evaluate_all(
        "bars => bars.map(b => b.getBoundingClientRect().width)"
    )
    assert all(w > 0 for w in widths)
    page.locator("#waterfall .row-model").first.click()
    expect(page.locator("#record")).to_contain_text('"type": "agentjournal.ModelResponded"')
    expect(page.locator("#record")).to_contain_text('"started_at"')
    screenshot(page, shots / "ui-waterfall.png")
    assert watched.errors == []


def test_usage_and_cost_by_agent_and_by_model_are_on_the_page(watched: Watched, url: str) -> None:
    page = watched.page
    page.goto(f"{url}/sessions/demo-1")
    by_agent = page.locator("#usage")
    expect(by_agent.locator("tr", has_text="billing")).to_have_count(1)
    total = by_agent.locator("tr", has_text="total")
    expect(total).to_contain_text("1200")
    # The demo's scripted model is priced as a named model: its cost is a number.
    assert re.fullmatch(r"[0-9.]+", total.locator("td").last.inner_text())
    expect(page.locator("#usage-model tr", has_text="scripted-demo")).to_have_count(1)


@pytest.fixture(scope="module")
def forked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stored, str]]:
    """The store, plus ``paused-1``: forked while billing waited for an approval."""
    import asyncio

    stored = in_thread(write_store, tmp_path_factory.mktemp("ui-forked"))
    key = str(stored.pubkey).removesuffix(".pub")
    in_thread(asyncio.run, write_forked_in_handoff(stored.uri, key))
    with serving(stored.uri, pubkey=stored.pubkey) as base:
        yield stored, base


def test_a_fork_inside_a_handoff_is_shown_whole_and_compared_with_its_parent(
    watched: Watched, forked: tuple[Stored, str], shots: Path
) -> None:
    _, url = forked
    page = watched.page
    page.goto(f"{url}/sessions/paused-1?branch=rejected")
    continued = page.locator("details.handoff", has_text="continued on this line")
    expect(continued).to_have_count(1)
    expect(continued.locator(".msg.role-assistant")).to_contain_text("Not refunded.")
    expect(continued.locator("summary .badge")).to_have_text("success")
    page.locator("#tab-compare").click()
    expect(page.locator("#compare-a")).to_have_value("main")
    expect(page.locator("#compare-b")).to_have_value("rejected")
    expect(page.locator("#compare-shared")).to_contain_text("share their first")
    answers = page.locator("#compare-summary tr.differs td.answer").all_inner_texts()
    assert answers == ["Refunded.", "Not refunded."]
    screenshot(page, shots / "ui-compare.png")
    # From main, any two lines: fetched from the server.
    page.goto(f"{url}/sessions/paused-1")
    page.locator("#tab-compare").click()
    expect(page.locator("#compare-b")).to_have_value("rejected")
    expect(page.locator("#compare-summary")).to_contain_text("Not refunded.")
    page.locator("#compare-b").select_option("main")
    expect(page.locator("#compare")).to_contain_text("pick two different lines")
    # In the list, the fork's continuation is no open subagent.
    page.goto(f"{url}/")
    row = page.locator('tr[data-session="paused-1"]')
    expect(row).to_have_count(1)
    expect(row.locator("td").nth(5)).to_have_text("0/1/0")
    assert watched.errors == []
    assert watched.others(url) == []


def test_the_four_integrity_states_read_as_four_in_the_list_and_on_the_pages(
    watched: Watched, stored: Stored, tmp_path: Path, shots: Path
) -> None:
    """verified (the trusted key), untrusted (a key not given), unsigned, FAILED (an edited
    event), in one store."""
    import asyncio

    other = tmp_path / "other.pem"
    assert in_thread(run, "keygen", "-o", str(other)).returncode == 0
    copy, _, _ = tamper(stored, tmp_path, b"refund of 1250 cents", b"refund of 9999 cents")
    uri = f"sqlite:///{copy}"
    in_thread(asyncio.run, write_session(uri, other, "other-1", "signed elsewhere"))
    in_thread(asyncio.run, write_session(uri, None, "unsigned-1", "never signed"))
    expected = {
        "hostile-1": ("verified", "VERIFIED: "),
        "other-1": ("untrusted key", "SIGNED BY AN UNTRUSTED KEY: "),
        "unsigned-1": ("unsigned", "UNSIGNED"),
        "demo-1": ("FAILED", "FAILED: "),
    }
    with serving(uri, pubkey=stored.pubkey) as base:
        page = watched.page
        page.goto(f"{base}/")
        for session_id, (word, _) in expected.items():
            cell = page.locator(f'tr[data-session="{session_id}"] td.state')
            expect(cell).to_have_text(word)
        screenshot(page, shots / "ui-list-states.png")
        for session_id, (word, text) in expected.items():
            page.goto(f"{base}/sessions/{session_id}")
            expect(page.locator("#ledger")).to_contain_text(text)
            page.locator("#tab-integrity").click()
            expect(page.locator("#integrity h2").first).to_have_text(word)
        assert watched.errors == []


# -- the sessions list: search, filters, sort and pages asked of the server -----------------


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The demo, ``hostile-1`` and 30 more sessions (``write_listed``); served."""
    import asyncio

    stored = in_thread(write_store, tmp_path_factory.mktemp("ui-list"))
    in_thread(asyncio.run, write_listed(stored.uri, stored.pubkey.with_suffix("")))
    with serving(stored.uri, pubkey=stored.pubkey) as base:
        yield base


def _items(page: Page) -> list[int]:
    return [int(text) for text in page.locator("#rows tr td:nth-child(5)").all_text_contents()]


def test_the_list_searches_filters_sorts_and_pages_on_the_server(
    watched: Watched, listed: str, shots: Path
) -> None:
    page = watched.page
    page.goto(f"{listed}/?limit=10")
    rows = page.locator("#rows tr")
    expect(rows).to_have_count(10)
    expect(page.locator("#range")).to_have_text("1\u201310 of 32")
    # Typing searches the sessions' words on the server (debounced) and keeps the address.
    page.locator("#q").press_sequentially("passp")
    expect(rows).to_have_count(6)
    expect(page.locator("#range")).to_have_text("1\u20136 of 6 (32 in all)")
    assert "q=passp" in page.url
    page.locator("#q").fill("")
    expect(rows).to_have_count(10)
    # A filter: the app (hostile-1 is the shop's too).
    page.locator("#f-app").select_option("shop")
    expect(page.locator("#range")).to_have_text("1\u201310 of 11 (32 in all)")
    # A header sorts: numbers go down first, a second click up; the arrow says which.
    header = page.locator('th[data-sort="items"]')
    header.click()
    expect(header).to_contain_text("\u25bc")
    expect(rows.first).to_have_attribute("data-session", "hostile-1")  # 8 items
    descending = _items(page)
    assert descending == sorted(descending, reverse=True)
    header.click()
    expect(header).to_contain_text("\u25b2")
    expect(page).to_have_url(re.compile(r"order=asc"))
    ascending = _items(page)
    assert ascending == sorted(ascending)
    # Pages.
    page.locator("#next").click()
    expect(page.locator("#range")).to_have_text("11\u201311 of 11 (32 in all)")
    expect(rows).to_have_count(1)
    expect(page.locator("#next")).to_be_disabled()
    page.locator("#prev").click()
    expect(rows).to_have_count(10)
    expect(page.locator("#prev")).to_be_disabled()
    # More filters: with branches; then the integrity state.
    page.locator("#f-branches").check()
    expect(rows).to_have_count(2)
    assert sorted(rows.evaluate_all("rs => rs.map(r => r.dataset.session)")) == [
        "list-03",
        "list-24",
    ]
    page.locator("#f-state").select_option("failed")
    expect(rows).to_have_count(1)  # the answer came (a strict locator cannot wait for it)
    expect(page.locator("#rows td")).to_have_text("no sessions match")
    page.locator("#f-state").select_option("")
    expect(rows).to_have_count(2)
    screenshot(page, shots / "ui-list-filtered.png")
    # The address is the query: opened again, the page shows the same rows and controls.
    shared = page.url
    assert "app=shop" in shared
    assert "branches=1" in shared
    page.goto(shared)
    expect(rows).to_have_count(2)
    expect(page.locator("#f-app")).to_have_value("shop")
    expect(page.locator("#f-branches")).to_be_checked()
    expect(page.locator('th[data-sort="items"]')).to_contain_text("\u25b2")
    assert watched.errors == []
    assert watched.others(listed) == []


# -- approvals ---------------------------------------------------------------------------------

TOKEN = "s3cret-token-for-the-viewer"


@pytest.fixture
def waiting(tmp_path: Path) -> Stored:
    """A store holding ``paused-1``, whose refund waits for a person (run held), signed."""
    import asyncio

    from agentjournal.ledger import SigningKey

    key = SigningKey.generate()
    (tmp_path / "k.pem").write_text(key.private_pem(), encoding="utf-8")
    (tmp_path / "k.pem.pub").write_text(key.public_pem(), encoding="utf-8")
    path = tmp_path / "journal.db"
    stored = Stored(path, f"sqlite:///{path}", tmp_path / "k.pem.pub")
    in_thread(asyncio.run, write_paused(stored.uri, tmp_path / "k.pem", "paused-1"))
    in_thread(asyncio.run, write_session(stored.uri, tmp_path / "k.pem", "other-1", "hello"))
    return stored


def test_a_pending_approval_is_listed_shown_and_approved_from_the_page(
    watched: Watched, waiting: Stored, shots: Path
) -> None:
    import httpx

    page = watched.page
    with serving(waiting.uri, pubkey=waiting.pubkey, token=TOKEN) as base:
        page.goto(f"{base}/?token={TOKEN}")
        rows = page.locator("#rows tr")
        expect(rows).to_have_count(2)
        page.locator("#f-approvals").check()
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-session", "paused-1")
        expect(rows.first).to_contain_text("1 waiting for approval")
        assert "approvals=1" in page.url
        screenshot(page, shots / "ui-list-waiting.png")
        rows.first.locator("a").click()
        panel = page.locator("#approvals")
        expect(panel).to_contain_text("1 call waits for approval")
        asked = panel.locator('tr[data-request="r1"]')
        expect(asked).to_contain_text("billing")
        expect(asked).to_contain_text("issue_refund")
        expect(asked).to_contain_text('{"order_id":"42","amount_cents":1250}')
        expect(asked).to_contain_text(" UTC")
        expect(page.locator(".verdict.decision-ASKED")).to_have_count(1)  # on the call
        screenshot(page, shots / "ui-approval-pending.png")
        # A name is required: nothing is sent without one.
        asked.locator(".answer-approve").click()
        expect(page.locator("#approve-error")).to_contain_text("give your name")
        page.locator("#approve-by").fill("alice")
        page.locator("#approve-reason").fill("duplicate charge")
        asked.locator(".answer-approve").click()
        expect(panel).to_have_count(0)
        # The live page redraws from the record: the answer beside the call.
        expect(page.locator(".verdict.decision-APPROVED")).to_contain_text("approved by alice")
        screenshot(page, shots / "ui-approval-approved.png")
        # Read back through the API: recorded as given, nothing waits.
        with httpx.Client(
            base_url=base, timeout=30, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as client:
            data = client.get("/api/sessions/paused-1").json()
            assert data["approvals"] == []
            (resolved,) = [e for e in data["events"] if e["kind"] == "InterruptResolved"]
            body = resolved["record"]["data"]
            assert body["outcome"] == "approved"
            assert body["response"] == "duplicate charge"
            assert body["extensions"]["agentjournal"]["by"] == "alice"
            assert client.get("/api/sessions?approvals=1").json()["rows"] == []
    assert watched.errors == []
    assert watched.others(base) == []


def test_without_a_token_a_pending_approval_has_no_buttons_and_cannot_be_posted(
    watched: Watched, waiting: Stored
) -> None:
    page = watched.page
    with serving(waiting.uri, pubkey=waiting.pubkey) as base:
        page.goto(f"{base}/sessions/paused-1")
        expect(page.locator("#approvals")).to_contain_text("1 call waits for approval")
        expect(page.locator("#approvals button")).to_have_count(0)
        expect(page.locator("#approve-by")).to_have_count(0)
        # The page's own script could not answer either.
        status = page.evaluate(
            """() => fetch("/api/sessions/paused-1/approvals/r1", {method: "POST",
                 headers: {"Content-Type": "application/json"},
                 body: JSON.stringify({approve: true, by: "alice"})})
               .then(r => r.text().then(t => [r.status, t]))"""
        )
        assert status == [403, "deciding needs the viewer's token (agentjournal ui --token ...)\n"]
    assert watched.others(base) == []


# -- the screenshots in docs/ ----------------------------------------------------------------

DOCS = Path(__file__).parent.parent / "docs" / "screenshots"


@pytest.fixture(scope="module")
def pictured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """What the documentation shows: the demo, ``paused-1`` forked inside its handoff, and
    30 listed sessions; served."""
    import asyncio

    stored = in_thread(write_store, tmp_path_factory.mktemp("ui-docs"))
    key = stored.pubkey.with_suffix("")
    in_thread(asyncio.run, write_forked_in_handoff(stored.uri, str(key)))
    in_thread(asyncio.run, write_listed(stored.uri, key))
    with serving(stored.uri, pubkey=stored.pubkey) as base:
        yield base


@pytest.mark.parametrize("width", [1280, 1920])
def test_the_documentation_screenshots_are_taken_at_1280_and_1920(
    browser: Browser, pictured: str, tmp_path: Path, width: int
) -> None:
    """The list, the conversation, the waterfall, the demo's approval on its call and two
    lines compared, each at ``width``
    with nothing scrolled sideways. ``AGENTJOURNAL_UI_DOCS=1`` writes them into
    ``docs/screenshots/`` (what README and docs/viewer.md show); else a temporary folder."""
    folder = DOCS if os.environ.get("AGENTJOURNAL_UI_DOCS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)

        def shot(name: str) -> None:
            assert page.evaluate("document.documentElement.scrollWidth") <= width, name
            page.evaluate("window.scrollTo(0, 0)")
            screenshot(page, folder / f"{name}-{width}.png")

        page.goto(f"{pictured}/?sort=blocks")
        expect(page.locator("#rows tr").first).to_have_attribute("data-session", "demo-1")
        shot("list")
        page.goto(f"{pictured}/sessions/demo-1")
        expect(page.locator("#ledger")).to_contain_text("VERIFIED: ")
        page.locator(".verdict.decision-MODIFY").click()
        expect(page.locator("#record")).to_contain_text("PII_REDACTED")
        shot("conversation")
        page.locator("#tab-waterfall").click()
        page.locator("#waterfall .row-model").nth(1).click()
        expect(page.locator("#record")).to_contain_text("ModelResponded")
        shot("waterfall")
        # The person's answer on the call it answers, in the demo's refunds block.
        page.locator("#tab-conversation").click()
        answered = page.locator(".verdict.decision-APPROVED")
        expect(answered).to_contain_text("approved by demo-operator")
        answered.click()
        expect(page.locator("#record")).to_contain_text('"outcome": "approved"')
        answered.scroll_into_view_if_needed()
        page.evaluate("window.scrollBy(0, 250)")
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        screenshot(page, folder / f"approval-{width}.png")
        page.goto(f"{pictured}/sessions/paused-1?branch=rejected")
        page.locator("#tab-compare").click()
        expect(page.locator("#compare-summary")).to_contain_text("Not refunded.")
        shot("compare")
    finally:
        context.close()
