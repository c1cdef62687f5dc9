"""The viewer's eval scores in a real browser (headless Chromium via Playwright): a badge
per score on each turn, the session's score, the score column, the runs list and a run's
page linking back to its sessions — no console error, no request to another host."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from test_eval_readers_ui import write_scored
from test_ui_browser import screenshot
from ui_support import in_thread, serving

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None and os.path.exists("/usr/bin/chromium"):
    CHROMIUM = "/usr/bin/chromium"

pytestmark = [
    pytest.mark.slow,  # a real browser
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium executable"),
]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('browser-evals') / 'journal.db'}"
    in_thread(lambda: asyncio.run(write_scored(uri)))
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


@pytest.fixture
def page(browser: Browser, url: str) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    opened = context.new_page()
    opened.set_default_timeout(15_000)
    errors: list[str] = []
    requests: list[str] = []
    opened.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.on("request", lambda request: requests.append(request.url))
    try:
        yield opened
    finally:
        context.close()
    assert errors == []
    assert [u for u in requests if not u.startswith((url + "/", "data:"))] == []


def test_turns_carry_score_badges_and_the_page_its_session_score(
    page: Page, url: str, tmp_path: Path
) -> None:
    page.goto(f"{url}/sessions/s1")
    first = page.locator('.scores[data-turn="1"] .score-badge')
    expect(first).to_have_count(1)
    expect(first).to_have_text("1.00 pass \u00b7 exact")
    expect(first).to_have_class("score-badge pass")
    expect(first).to_have_attribute("title", "names order 42 (run nightly)")
    second = page.locator('.scores[data-turn="2"] .score-badge')
    expect(second).to_have_text(["0.00 fail \u00b7 exact", "\u2605 0.75 good \u00b7 rated by ana"])
    expect(second.nth(1)).to_have_class("score-badge pass human")
    # The badges sit on the turn's user message.
    expect(page.locator(".msg.role-user", has=page.locator(".scores"))).to_have_count(2)
    expect(page.locator("#session-scores")).to_contain_text("0.50 pass")
    screenshot(page, tmp_path / "session-scores.png")


def test_from_the_list_to_a_run_and_back_to_its_session(page: Page, url: str) -> None:
    page.goto(url + "/")
    row = page.locator('tr[data-session="s1"]')
    expect(row).to_contain_text("0.50 pass \u00b7 rated 0.75")
    page.locator("#f-label").select_option("fail")
    expect(page.locator("#rows tr")).to_have_count(1)
    expect(page.locator('tr[data-session="s2"]')).to_contain_text("0.25 fail")
    expect(page).to_have_url(f"{url}/?label=fail")
    page.locator("a.evals-link").click()
    expect(page).to_have_url(f"{url}/evals")
    runs = page.locator("#eval-runs tbody tr")
    expect(runs).to_have_count(3)
    page.locator("#eval-runs a", has_text="nightly").click()
    expect(page).to_have_url(f"{url}/evals/nightly")
    expect(page.locator("#run-facts")).to_contain_text("completed")
    expect(page.locator("#run-scorers")).to_contain_text("exact")
    expect(page.locator("h2.run-line")).to_have_count(2)
    expect(page.locator('h2.run-line[data-session="s2"]')).to_contain_text("0.25 fail")
    expect(page.locator("#run-completion")).to_contain_text("3 turns scored")
    page.locator('h2.run-line[data-session="s1"] a').click()
    expect(page).to_have_url(f"{url}/sessions/s1")
    expect(page.locator(".score-badge").first).to_be_visible()
