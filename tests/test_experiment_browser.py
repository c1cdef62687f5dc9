"""An experiment in the viewer, in a real browser (Debian's ``chromium`` via Playwright): its
page lists the sessions with both lines' scores, and each links to the session's Compare
tab, which shows the two lines' scores beside their summaries.

``AGENTJOURNAL_UI_DOCS=1`` writes ``docs/images/compare.png`` and
``docs/images/experiment.png`` (what README and docs/experiments.md show); else the
screenshots go to a temporary folder.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from playwright.sync_api import Browser, expect, sync_playwright

from agentjournal import Journal
from agentjournal.evals.experiment import run_experiment
from agentjournal.evals.scorers import load_scorers
from experiment_sessions import SESSIONS, candidate_script, record, scorers_document
from test_ui_browser import CHROMIUM, TIMEOUT_MS, screenshot
from ui_support import in_thread, serving

pytestmark = [
    pytest.mark.slow,  # a real browser
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable"),
]

DOCS = Path(__file__).parent.parent / "docs" / "images"
EXPERIMENT = "exp-support-v2"


async def write(folder: Path) -> str:
    uri = f"sqlite:///{folder / 'journal.db'}"
    script = folder / "script.yml"
    script.write_text(yaml.safe_dump(candidate_script()), encoding="utf-8")
    scorers = folder / "scorers.yml"
    scorers.write_text(yaml.safe_dump(scorers_document()), encoding="utf-8")
    async with Journal.open(uri) as journal:
        await record(journal)
        await run_experiment(
            journal,
            SESSIONS,
            "experiment_sessions:candidate",
            scorers=load_scorers(scorers),
            model_script=script,
            experiment_id=EXPERIMENT,
        )
    return uri


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    uri = in_thread(asyncio.run, write(tmp_path_factory.mktemp("experiment-ui")))
    with serving(uri) as base:
        yield base


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


def test_the_experiment_page_links_each_session_to_its_two_lines_scored(
    browser: Browser, url: str, tmp_path: Path
) -> None:
    folder = DOCS if os.environ.get("AGENTJOURNAL_UI_DOCS") == "1" else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    try:
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("request", lambda request: requests.append(request.url))

        page.goto(f"{url}/experiments/{EXPERIMENT}")
        rows = page.locator("#experiment-sessions tr[data-session]")
        expect(rows).to_have_count(5)
        returns = page.locator('#experiment-sessions tr[data-session="exp-returns"]')
        expect(returns).to_have_class("differs")
        expect(returns.locator("td").nth(3)).to_have_text("+1.00")
        cancel = page.locator('#experiment-sessions tr[data-session="exp-cancel"]')
        expect(cancel.locator("td").nth(3)).to_have_text("-1.00")
        expect(page.locator('#experiment-sessions tr[data-session="exp-hours"]')).not_to_have_class(
            "differs"
        )
        screenshot(page, folder / "experiment.png")

        cancel.locator("a.compare-link").click()
        expect(page.locator("#compare-summary")).to_contain_text("Sorry, I cannot cancel orders.")
        scores = page.locator("#compare-scores")
        expect(scores).to_contain_text(f"scores of experiment {EXPERIMENT}")
        expect(scores.locator("tr.differs").first).to_contain_text("session score1.000.00")
        expect(page.locator("#compare-a")).to_have_value("main")
        expect(page.locator("#compare-b")).to_have_value(EXPERIMENT)
        assert page.evaluate("document.documentElement.scrollWidth") <= 1280
        screenshot(page, folder / "compare.png")
    finally:
        context.close()
    assert errors == []
    assert [u for u in requests if not u.startswith((url + "/", "data:"))] == []


def test_a_run_that_is_no_experiment_is_not_found(url: str) -> None:
    import httpx

    answer = httpx.get(f"{url}/api/experiments/exp-none")
    assert answer.status_code == 404
    assert "no experiment 'exp-none'" in answer.json()["error"]
