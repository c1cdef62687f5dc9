"""``agentjournal sessions`` and the catalog: each session's latest eval score and newest
human rating, folded from eval runs written on real runs, incrementally."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentjournal.read import catalog
from agentjournal.read.catalog.live import LiveCatalog
from agentjournal.read.catalog.query import page_of, parse_query
from agentjournal.store import open_store
from cli_run import run
from eval_runs import Given, run_session, write_rating, write_run


def _uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'journal.db'}"


async def _scored_store(uri: str) -> None:
    await run_session(uri, "s1", turns=2)
    await run_session(uri, "s2", turns=1)
    store = await open_store(uri)
    try:
        await write_run(
            store,
            "run1",
            [
                Given("s1", 1, "exact", 1.0, "pass"),
                Given("s1", 2, "exact", 0.0, "fail"),
                Given("s2", 1, "exact", 0.0, "fail"),
            ],
        )
    finally:
        await store.close()


async def test_a_session_lists_its_latest_score_and_every_run_that_scored_it(
    tmp_path: Path,
) -> None:
    uri = _uri(tmp_path)
    await _scored_store(uri)
    store = await open_store(uri)
    try:
        first = await catalog.refresh(store)
        rows = {row.session_id: row for row in first.rows}
        assert rows["s1"].score is not None
        assert rows["s1"].score.score == 0.5
        assert (rows["s1"].score.label, rows["s1"].score.run) == ("pass", "run1")
        assert rows["s2"].score is not None
        assert rows["s2"].score.label == "fail"
        assert rows["s1"].eval_runs == ("run1",)
        assert rows["s1"].rating is None
        # Scoring is no activity of the session: its items and last activity stay.
        items, last = rows["s1"].items, rows["s1"].last_activity

        # A later run scores s1 again: the newest score is the one listed, and the fold
        # reads only what was written since the save.
        await write_run(store, "run2", [Given("s1", 1, "judge", 0.25, "fail")])
        await write_rating(store, "s1", 2, 1.0, by="ana", label="good")
        again = await catalog.refresh(store)
        assert again.folded == 3  # run2's two scores and the rating: the rest count for none
        row = next(r for r in again.rows if r.session_id == "s1")
        assert row.score is not None
        assert (row.score.run, row.score.score) == ("run2", 0.25)
        assert row.rating is not None
        assert (row.rating.turn, row.rating.score, row.rating.by) == (2, 1.0, "ana")
        assert row.rating.run == "feedback-s1"
        assert row.rating.scorer == "human"
        assert row.eval_runs == ("run1", "run2", "feedback-s1")
        assert (row.items, row.last_activity) == (items, last)

        # Folded from the start, the same scores.
        fresh = await catalog.refresh(store, fresh=True)
        assert {r.session_id: (r.score, r.rating, r.eval_runs) for r in fresh.rows} == {
            r.session_id: (r.score, r.rating, r.eval_runs) for r in again.rows
        }
    finally:
        await store.close()


async def test_the_list_sorts_by_score_with_unscored_sessions_lowest(tmp_path: Path) -> None:
    uri = _uri(tmp_path)
    await _scored_store(uri)
    await run_session(uri, "s3", turns=1)
    store = await open_store(uri)
    try:
        rows = (await catalog.refresh(store)).rows
    finally:
        await store.close()
    page = page_of(rows, parse_query([("sort", "score")]))
    assert [r.session_id for r in page.rows] == ["s1", "s2", "s3"]
    page = page_of(rows, parse_query([("sort", "score"), ("order", "asc")]))
    assert [r.session_id for r in page.rows] == ["s3", "s2", "s1"]


async def test_the_viewers_live_catalog_rebuilds_the_row_a_new_score_touches(
    tmp_path: Path,
) -> None:
    uri = _uri(tmp_path)
    await _scored_store(uri)
    store = await open_store(uri)
    try:
        live = LiveCatalog()
        before = {r.session_id: r for r in (await live.refresh(store)).rows}
        assert before["s2"].score is not None
        assert before["s2"].score.score == 0.0
        await write_run(
            store,
            "run2",
            [Given("s2", 1, "judge", 0.75, "ok")],
            by_session={("s2", "main"): (0.75, "pass")},
        )
        after = {r.session_id: r for r in (await live.refresh(store)).rows}
        assert after["s2"].score is not None
        assert after["s2"].score.run == "run2"
        assert after["s2"].score.score == 0.75
    finally:
        await store.close()


def test_sessions_prints_the_score_column_and_its_json(tmp_path: Path) -> None:
    uri = _uri(tmp_path)
    asyncio.run(_scored_store(uri))

    async def rate() -> None:
        store = await open_store(uri)
        try:
            await write_rating(store, "s2", 1, 0.9, by="bo")
        finally:
            await store.close()

    asyncio.run(rate())
    done = run("sessions", "--json", "--uri", uri)
    assert done.returncode == 0, done.stderr
    rows = {row["session_id"]: row for row in json.loads(done.stdout)}
    assert rows["s1"]["score"] == {
        "run": "run1",
        "score": 0.5,
        "label": "pass",
        "line": "main",
        "at": rows["s1"]["score"]["at"],
    }
    assert rows["s2"]["rating"]["by"] == "bo"
    assert rows["s2"]["rating"]["turn"] == 1
    assert rows["s2"]["eval_runs"] == ["run1", "feedback-s2"]
    table = run("sessions", "--uri", uri)
    assert table.returncode == 0, table.stderr
    assert "score" in table.stdout
    assert "0.50 pass" in table.stdout
    assert "0.00 fail · rated 0.90" in table.stdout


async def test_a_run_of_real_scorers_shows_in_sessions_show_and_the_trace(
    tmp_path: Path,
) -> None:
    from agentjournal.evals.run import run_eval
    from eval_sessions import AnswerScorer

    uri = _uri(tmp_path)
    await run_session(uri, "s1", turns=2)
    store = await open_store(uri)
    try:
        await run_eval(
            store, [AnswerScorer("charged", wanted="charged")], [("s1", "main")], run_id="real"
        )
        row = next(r for r in (await catalog.refresh(store)).rows if r.session_id == "s1")
    finally:
        await store.close()
    assert row.score is not None
    assert (row.score.run, row.score.score, row.score.label) == ("real", 0.5, "pass")
    shown = await asyncio.to_thread(run, "show", "s1", "--uri", uri)
    assert "main turn 1 · charged 1.00 pass: answer: 'Order 42 was charged twice" in shown.stdout
    assert "main turn 2 · charged 0.00 fail" in shown.stdout
    lines = tmp_path / "spans.jsonl"
    done = await asyncio.to_thread(
        run, "trace", "export", "s1", "--jsonl", str(lines), "--uri", uri
    )
    assert done.returncode == 0, done.stderr
    found = [
        (e["attributes"]["gen_ai.evaluation.name"], e["attributes"].get("agentjournal.turn"))
        for span in map(json.loads, lines.read_text().splitlines())
        for e in span["events"]
        if e["name"] == "gen_ai.evaluation.result"
    ]
    assert sorted(found, key=str) == sorted(
        [("charged", 1), ("charged", 2), ("session", None)], key=str
    )


def test_the_fold_takes_scores_from_eval_runs_only_and_skips_a_malformed_one() -> None:
    import uuid
    from datetime import UTC, datetime

    from agentjournal.read.catalog import Catalog
    from agentjournal.store.contract import RecordedEvent

    def event(stream: str, type_: str, data: bytes, position: int) -> RecordedEvent:
        return RecordedEvent(
            id=uuid.uuid4(),
            type=type_,
            data=data,
            metadata={},
            stream=stream,
            revision=position,
            position=position,
            recorded_at=datetime(2026, 12, 1, tzinfo=UTC),
        )

    body = json.dumps({"session_id": "s1", "score": 0.9, "score_label": "pass"}).encode()
    catalog = Catalog()
    assert catalog.fold(event("AgentSession-s1", "SessionStarted", b"{}", 1))
    # Not on an eval run's stream: no score of anything.
    assert not catalog.fold(event("Elsewhere-1", "SessionScored", body, 2))
    # Not JSON, or naming no session: nothing.
    assert not catalog.fold(event("EvalRun-r1", "SessionScored", b"{nope", 3))
    assert not catalog.fold(event("EvalRun-r1", "SessionScored", b'{"score": 1}', 4))
    unscored = catalog.row("s1", {})
    assert unscored is not None
    assert unscored.score is None
    assert catalog.fold(event("EvalRun-r1", "SessionScored", body, 5))
    row = catalog.row("s1", {})
    assert row is not None
    assert row.score is not None
    assert (row.score.run, row.score.score, row.eval_runs) == ("r1", 0.9, ("r1",))
    # The state saved and loaded folds on the same.
    again = Catalog.load(catalog.dump())
    assert again is not None
    assert again.row("s1", {}) == row


@pytest.mark.slow
def test_sessions_and_show_read_scores_on_the_kurrentdb_double() -> None:
    from agentjournal.testing.kurrentdb_double import KurrentDBDouble

    with KurrentDBDouble.in_thread() as served:
        asyncio.run(_scored_store(served.uri))
        listed = run("sessions", "--json", "--uri", served.uri)
        assert listed.returncode == 0, listed.stderr
        rows = {row["session_id"]: row for row in json.loads(listed.stdout)}
        assert (rows["s1"]["score"]["score"], rows["s2"]["score"]["label"]) == (0.5, "fail")
        shown = run("show", "s1", "--uri", served.uri)
        assert shown.returncode == 0, shown.stderr
        assert "main turn 2 · exact 0.00 fail" in shown.stdout


async def test_a_branch_score_stands_for_the_session_only_until_its_main_line_is_scored(
    tmp_path: Path,
) -> None:
    # An experiment scores the recorded line and then the candidate's branch: the
    # session's latest score is its recorded line's, however new the branch's is.
    from agentjournal.read.evals.runs import latest_scores

    uri = _uri(tmp_path)
    await run_session(uri, "s1", turns=1)
    store = await open_store(uri)
    try:
        await write_run(store, "only-branch", [Given("s1", 1, "exact", 0.0, "fail", line="b")])
        rows = {row.session_id: row for row in (await catalog.refresh(store)).rows}
        assert rows["s1"].score is not None
        assert (rows["s1"].score.line, rows["s1"].score.score) == ("b", 0.0)

        await write_run(store, "main-then-branch", [Given("s1", 1, "exact", 1.0, "pass")])
        await write_run(store, "later-branch", [Given("s1", 1, "exact", 0.0, "fail", line="b")])
        rows = {row.session_id: row for row in (await catalog.refresh(store)).rows}
        assert rows["s1"].score is not None
        assert (rows["s1"].score.run, rows["s1"].score.line) == ("main-then-branch", "main")
        latest = (await latest_scores(store))["s1"]
        assert (latest.run_id, latest.line, latest.score) == ("main-then-branch", "main", 1.0)
    finally:
        await store.close()
