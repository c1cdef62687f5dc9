"""``agentjournal show SESSION``: after the session's events, its scores from every eval run
(run, scorer, turn, score, label, reason; people's ratings marked), sealed reasons opened
with ``--keys`` only."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.engine.evals import session_sealer
from agentjournal.store import open_store
from cli_run import run
from eval_runs import Given, run_branched, run_session, write_rating, write_run
from scenarios import run_turn


@pytest.fixture
def scored(tmp_path: Path) -> str:
    uri = f"sqlite:///{tmp_path / 'journal.db'}"

    async def write() -> None:
        await run_session(uri, "s1", turns=2)
        await run_session(uri, "other", turns=1)
        store = await open_store(uri)
        try:
            await write_run(
                store,
                "nightly",
                [
                    Given("s1", 1, "exact", 1.0, "pass", reason="the answer names order 42"),
                    Given("s1", 2, "exact", 0.0, "fail", reason="no refund amount"),
                    Given("other", 1, "exact", 0.5, "meh", reason="not this session's"),
                ],
            )
            await write_rating(store, "s1", 2, 0.8, by="ana", label="good", reason="fine")
        finally:
            await store.close()

    asyncio.run(write())
    return uri


def test_show_lists_the_sessions_scores_after_its_events(scored: str) -> None:
    done = run("show", "s1", "--uri", scored)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("AgentSession-s1") < out.index("eval scores") < out.index("integrity:")
    scores = out[out.index("eval scores") :]
    assert "run nightly (eval, completed, scorers exact)" in scores
    assert "main turn 1 · exact 1.00 pass: the answer names order 42" in scores
    assert "main turn 2 · exact 0.00 fail: no refund amount" in scores
    assert "main session · 0.50 pass: 2 scores" in scores
    assert "run feedback-s1 (feedback, ratings by people)" in scores
    assert "main turn 2 · rated by ana 0.80 good: fine" in scores
    assert "not this session's" not in out  # another session's score of the same run


def test_show_json_carries_the_scores_of_each_run(scored: str) -> None:
    done = run("show", "s1", "--json", "--uri", scored)
    assert done.returncode == 0, done.stderr
    runs = {r["run_id"]: r for r in json.loads(done.stdout)["scores"]}
    assert set(runs) == {"nightly", "feedback-s1"}
    nightly = runs["nightly"]
    assert [(t["turn"], t["scorer"], t["score"], t["label"]) for t in nightly["turns"]] == [
        (1, "exact", 1.0, "pass"),
        (2, "exact", 0.0, "fail"),
    ]
    assert nightly["session_scores"][0]["score"] == 0.5
    assert nightly["status"] == "completed"
    rating = runs["feedback-s1"]["turns"][0]
    assert (rating["human"], rating["by"], rating["reason"]) == (True, "ana", "fine")


def test_show_of_an_unscored_session_prints_no_scores(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    asyncio.run(run_session(uri, "plain", turns=1))
    done = run("show", "plain", "--uri", uri)
    assert done.returncode == 0, done.stderr
    assert "eval scores" not in done.stdout
    assert json.loads(run("show", "plain", "--json", "--uri", uri).stdout)["scores"] == []


def test_a_sealed_sessions_reasons_open_with_keys_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTJOURNAL_KEYS", raising=False)
    uri, keys = f"sqlite:///{tmp_path / 'journal.db'}", tmp_path / "keys.db"

    async def write() -> None:
        async with Journal.open(uri, keys=keys) as journal:
            session = journal.session("sealed-1", user_id="alice")
            await run_turn("run", 0, session)
            sealer = await session_sealer(journal.store, "sealed-1", journal.keys)
            assert sealer is not None
            await write_run(
                journal.store,
                "judged",
                [Given("sealed-1", 1, "judge", 0.9, "pass", reason="secret-reason-77")],
                sealers={"sealed-1": sealer},
            )

    asyncio.run(write())
    closed = run("show", "sealed-1", "--uri", uri)
    assert closed.returncode == 0, closed.stderr
    assert "secret-reason-77" not in closed.stdout
    assert "judge 0.90 pass: [sealed]" in closed.stdout
    opened = run("show", "sealed-1", "--keys", str(keys), "--uri", uri)
    assert opened.returncode == 0, opened.stderr
    assert "judge 0.90 pass: secret-reason-77" in opened.stdout


def test_show_branch_keeps_that_lines_scores(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'journal.db'}"

    async def write() -> None:
        await run_branched(uri, "b1")
        store = await open_store(uri)
        try:
            await write_run(
                store,
                "lines",
                [
                    Given("b1", 2, "exact", 0.0, "fail", reason="main's"),
                    Given("b1", 2, "exact", 1.0, "pass", line="alt", reason="alt's"),
                ],
            )
        finally:
            await store.close()

    asyncio.run(write())
    every = run("show", "b1", "--uri", uri).stdout
    assert "main turn 2 · exact 0.00 fail: main's" in every
    assert "alt turn 2 · exact 1.00 pass: alt's" in every
    alt = run("show", "b1", "--branch", "alt", "--uri", uri).stdout
    assert "alt turn 2 · exact 1.00 pass: alt's" in alt
    assert "main's" not in alt
    main = run("show", "b1", "--branch", "main", "--uri", uri).stdout
    assert "main turn 2" in main
    assert "alt's" not in main
