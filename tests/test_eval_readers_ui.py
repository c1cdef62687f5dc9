"""The viewer's eval pages without a browser: a session page's scores by turn, the list of
eval runs, a run's page, the score column and its sort, the one-file export — the real
Starlette application on a real uvicorn server on loopback, over real runs."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentjournal.store import open_store
from cli_run import run
from eval_runs import Given, run_branched, run_session, write_rating, write_run
from ui_support import in_thread, serving


async def write_scored(uri: str) -> None:
    """Two sessions scored by one run, a person's rating of s1's second turn, and a branch
    line scored by another run."""
    await run_session(uri, "s1", turns=2)
    await run_session(uri, "s2", turns=1)
    await run_branched(uri, "b1")
    store = await open_store(uri)
    try:
        await write_run(
            store,
            "nightly",
            [
                Given("s1", 1, "exact", 1.0, "pass", reason="names order 42"),
                Given("s1", 2, "exact", 0.0, "fail", reason="no amount"),
                Given("s2", 1, "exact", 0.25, "fail", reason="off topic"),
            ],
        )
        await write_run(store, "lines", [Given("b1", 2, "exact", 1.0, "pass", line="alt")])
        await write_rating(store, "s1", 2, 0.75, by="ana", label="good", reason="fine by me")
    finally:
        await store.close()


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    found = f"sqlite:///{tmp_path_factory.mktemp('ui-evals') / 'journal.db'}"
    in_thread(lambda: asyncio.run(write_scored(found)))
    return found


@pytest.fixture(scope="module")
def url(uri: str) -> Iterator[str]:
    with serving(uri) as base:
        yield base


def _get(url: str) -> Any:
    answer = httpx.get(url, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_session_page_carries_each_turns_scores_and_the_sessions_score(url: str) -> None:
    scores = _get(f"{url}/api/sessions/s1")["scores"]
    assert scores["line"] == "main"
    assert scores["runs"] == ["nightly", "feedback-s1"]
    one, two = scores["turns"]["1"], scores["turns"]["2"]
    assert [(b["scorer"], b["score"], b["label"], b["run"]) for b in one] == [
        ("exact", 1.0, "pass", "nightly")
    ]
    assert one[0]["reason"] == "names order 42"
    assert [(b["scorer"], b["score"], b["human"], b["by"]) for b in two] == [
        ("exact", 0.0, False, None),
        ("human", 0.75, True, "ana"),
    ]
    assert scores["sessions"] == [
        {"run": "nightly", "score": 0.5, "label": "pass", "reason": "2 scores"}
    ]
    # The other session's scores of the same run are its own.
    other = _get(f"{url}/api/sessions/s2")["scores"]
    assert list(other["turns"]) == ["1"]
    assert other["turns"]["1"][0]["reason"] == "off topic"


def test_the_runs_list_and_a_runs_page(url: str) -> None:
    runs = {r["run_id"]: r for r in _get(f"{url}/api/evals")["runs"]}
    assert set(runs) == {"nightly", "feedback-s1", "lines"}
    assert runs["nightly"]["status"] == "completed"
    assert runs["nightly"]["turns_scored"] == 3
    assert runs["feedback-s1"]["kind"] == "feedback"
    assert runs["feedback-s1"]["human"] is True
    page = _get(f"{url}/api/evals/nightly")
    assert page["kind"] == "eval_run"
    assert page["run"]["scorers"] == [{"name": "exact", "version": "1", "kind": "rule"}]
    assert page["run"]["completion"]["turns_scored"] == 3
    lines = {(line["session"], line["line"]): line for line in page["lines"]}
    assert set(lines) == {("s1", "main"), ("s2", "main")}
    assert (lines["s1", "main"]["score"], lines["s1", "main"]["label"]) == (0.5, "pass")
    assert [t["turn"] for t in lines["s1", "main"]["turns"]] == [1, 2]
    html = httpx.get(f"{url}/evals/nightly", timeout=30)
    assert html.status_code == 200
    assert '<script src="/static/evals.js"></script><script src="/static/ui.js">' in html.text
    assert "eval run nightly" in html.text
    assert httpx.get(f"{url}/static/evals.js", timeout=30).status_code == 200
    assert httpx.get(f"{url}/static/evals.css", timeout=30).status_code == 200


def test_an_unknown_run_is_a_404_page_and_a_bad_id_too(url: str) -> None:
    missing = httpx.get(f"{url}/evals/nope", timeout=30)
    assert missing.status_code == 404
    assert "no eval run &#x27;nope&#x27; in the store" in missing.text
    bad = httpx.get(f"{url}/api/evals/..%20x", timeout=30)
    assert bad.status_code == 404
    assert "error" in bad.json()


def test_the_list_shows_and_sorts_by_the_latest_score(url: str) -> None:
    rows = _get(f"{url}/api/sessions?sort=score")["rows"]
    assert [(r["session_id"], r["score"]["score"]) for r in rows] == [
        ("b1", 1.0),
        ("s1", 0.5),
        ("s2", 0.25),
    ]
    assert rows[0]["score"]["line"] == "alt"  # the latest score of any line
    assert rows[1]["rating"]["by"] == "ana"
    failed = _get(f"{url}/api/sessions?label=fail")
    assert [r["session_id"] for r in failed["rows"]] == ["s2"]
    assert failed["query"] == {"label": "fail"}
    never = _get(f"{url}/api/sessions?label=-")["rows"]
    assert "s1" not in {r["session_id"] for r in never}


def test_the_one_file_page_carries_the_scores(uri: str, tmp_path: Path) -> None:
    out = tmp_path / "s1.html"
    done = run("view", "s1", "-o", str(out), "--uri", uri)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    found = re.search(r'<script type="application/json" id="aj-data">(.*?)</script>', text, re.S)
    assert found is not None
    data = json.loads(found.group(1))
    assert data["scores"]["turns"]["1"][0]["reason"] == "names order 42"
    assert "agentjournalEvals" in text  # the eval script is inline, like the page's own


def test_a_branch_page_carries_that_lines_scores(url: str) -> None:
    alt = _get(f"{url}/api/sessions/b1?branch=alt")["scores"]
    assert alt["line"] == "alt"
    assert [(b["run"], b["score"]) for b in alt["turns"]["2"]] == [("lines", 1.0)]
    assert alt["sessions"][0]["score"] == 1.0
    main = _get(f"{url}/api/sessions/b1")["scores"]
    assert (main["turns"], main["sessions"]) == ({}, [])
    assert main["runs"] == []  # no score of main: the run is kept to the line's scores
