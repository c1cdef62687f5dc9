"""``agentjournal trace export``: eval scores of real runs as ``gen_ai.evaluation.result``
span events (the OpenTelemetry GenAI conventions) on the run span of the turn they score,
a session's score on its first run span; the same output every time; a sealed reason
withheld; received by a real OTLP collector."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, events
from agentjournal.engine.evals import session_sealer
from agentjournal.store import open_store
from agentjournal.walk import read_tree
from cli_run import run
from eval_runs import Given, run_branched, run_session, write_rating, write_run
from otlp_collector import Collector, collector
from scenarios import run_turn

EVALUATION = "gen_ai.evaluation.result"


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('evaltraces') / 'journal.db'}"

    async def write() -> None:
        await run_session(uri, "s1", turns=2)
        store = await open_store(uri)
        try:
            await write_run(
                store,
                "nightly",
                [
                    Given("s1", 1, "exact", 1.0, "pass", reason="names order 42"),
                    Given("s1", 2, "exact", 0.0, "fail", reason="no amount"),
                ],
            )
            await write_rating(store, "s1", 2, 0.75, by="ana", label="good", reason="fine")
        finally:
            await store.close()

    asyncio.run(write())
    return uri


def _jsonl(uri: str, path: Path, *target: str) -> list[dict[str, Any]]:
    done = run("trace", "export", *target, "--jsonl", str(path), "--uri", uri)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _turn_times(uri: str, session: str) -> dict[int, int]:
    """When each turn's user message was recorded (ns)."""
    store = await open_store(uri, create=False)
    try:
        tree = await read_tree(store, session)
    finally:
        await store.close()
    out = {}
    for record in tree.streams[f"AgentSession-{session}"]:
        turn = events.turn_of(record.metadata)
        if turn is not None and record.recorded_at is not None:
            out[turn] = int(record.recorded_at.timestamp() * 1_000_000) * 1000
    return out


def _evaluations(span: dict[str, Any]) -> list[dict[str, Any]]:
    return [e["attributes"] for e in span["events"] if e["name"] == EVALUATION]


def test_each_score_is_an_evaluation_event_on_its_turns_run_span(
    scored: str, tmp_path: Path
) -> None:
    spans = _jsonl(scored, tmp_path / "a.jsonl", "s1")
    runs = sorted(
        (s for s in spans if s["parent_span_id"] is None), key=lambda s: s["start_time_unix_nano"]
    )
    assert len(runs) == 2  # one run per turn
    times = asyncio.run(_turn_times(scored, "s1"))
    for turn, span in zip((1, 2), runs, strict=True):
        assert span["start_time_unix_nano"] <= times[turn] <= span["end_time_unix_nano"]
    first, second = (_evaluations(span) for span in runs)
    turn_one = [e for e in first if e.get("agentjournal.turn") == 1]
    assert turn_one == [
        {
            "gen_ai.evaluation.name": "exact",
            "gen_ai.evaluation.score.value": 1.0,
            "gen_ai.evaluation.score.label": "pass",
            "gen_ai.evaluation.explanation": "names order 42",
            "agentjournal.eval_run": "nightly",
            "agentjournal.line": "main",
            "agentjournal.turn": 1,
        }
    ]
    # The session's score on the line's first run span: the root of its first trace.
    session = [e for e in first if "agentjournal.turn" not in e]
    assert [(e["gen_ai.evaluation.name"], e["gen_ai.evaluation.score.value"]) for e in session] == [
        ("session", 0.5)
    ]
    assert session[0]["gen_ai.evaluation.score.label"] == "pass"
    # Turn 2: the scorer's score, then the person's rating, each marked.
    assert [(e["gen_ai.evaluation.name"], e["gen_ai.evaluation.score.value"]) for e in second] == [
        ("exact", 0.0),
        ("human", 0.75),
    ]
    rating = second[1]
    assert rating["agentjournal.human"] is True
    assert rating["agentjournal.rated_by"] == "ana"
    assert rating["agentjournal.eval_run"] == "feedback-s1"
    # Every other span carries no evaluation.
    assert not any(_evaluations(s) for s in spans if s["parent_span_id"] is not None)


def test_exporting_twice_gives_the_same_output_and_all_agrees_with_one(
    scored: str, tmp_path: Path
) -> None:
    once = (tmp_path / "1.jsonl", tmp_path / "2.jsonl")
    _jsonl(scored, once[0], "s1")
    _jsonl(scored, once[1], "s1")
    assert once[0].read_text() == once[1].read_text()
    every = _jsonl(scored, tmp_path / "all.jsonl", "--all")
    one = [json.loads(line) for line in once[0].read_text().splitlines()]
    assert {s["span_id"]: s["events"] for s in every} == {s["span_id"]: s["events"] for s in one}


def test_a_sealed_reason_is_withheld_from_the_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTJOURNAL_KEYS", raising=False)
    uri, keys = f"sqlite:///{tmp_path / 'journal.db'}", tmp_path / "keys.db"

    async def write() -> None:
        async with Journal.open(uri, keys=keys) as journal:
            session = journal.session("sealed-1", user_id="alice")
            await run_turn("run", 0, session)
            sealer = await session_sealer(journal.store, "sealed-1", journal.keys)
            await write_run(
                journal.store,
                "judged",
                [Given("sealed-1", 1, "judge", 0.9, "pass", reason="secret-reason-77")],
                sealers={"sealed-1": sealer} if sealer is not None else None,
            )

    asyncio.run(write())
    for target in (["sealed-1"], ["--all"]):
        path = tmp_path / "sealed.jsonl"
        text = json.dumps(_jsonl(uri, path, *target))
        assert "secret-reason-77" not in text
        found = [e for s in json.loads(text) for e in _evaluations(s)]
        assert [e["gen_ai.evaluation.name"] for e in found] == ["judge", "session"]
        assert all("gen_ai.evaluation.explanation" not in e for e in found[:1])
        assert found[0]["gen_ai.evaluation.score.value"] == 0.9


@pytest.fixture(scope="module")
def otlp() -> Iterator[Collector]:
    with collector() as sink:
        yield sink


@pytest.mark.slow
def test_a_collector_receives_the_evaluation_events(otlp: Collector, scored: str) -> None:
    otlp.clear()
    done = run("trace", "export", "s1", "--otlp", otlp.http_url, "--uri", scored)
    assert done.returncode == 0, done.stderr
    received = [
        attrs for span in otlp.snapshot() for name, attrs in span.events if name == EVALUATION
    ]
    assert sorted(
        (a["gen_ai.evaluation.name"], a["gen_ai.evaluation.score.value"]) for a in received
    ) == [("exact", 0.0), ("exact", 1.0), ("human", 0.75), ("session", 0.5)]


def test_a_branch_lines_scores_go_on_the_branchs_own_run_spans(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'journal.db'}"

    async def write() -> None:
        await run_branched(uri, "b1")  # turn 2 again, on branch alt
        store = await open_store(uri)
        try:
            await write_run(
                store,
                "lines",
                [
                    Given("b1", 2, "exact", 0.0, "fail"),
                    Given("b1", 2, "exact", 1.0, "pass", line="alt"),
                ],
            )
        finally:
            await store.close()

    asyncio.run(write())
    spans = _jsonl(uri, tmp_path / "b.jsonl", "b1")
    runs = sorted(
        (s for s in spans if s["parent_span_id"] is None), key=lambda s: s["start_time_unix_nano"]
    )
    placed = [
        (
            s["attributes"].get("agentjournal.branch", "main"),
            [
                (
                    e.get("agentjournal.turn", "session"),
                    e["gen_ai.evaluation.score.value"],
                )
                for e in _evaluations(s)
            ],
        )
        for s in runs
    ]
    assert placed == [
        ("main", [("session", 0.0)]),
        ("main", [(2, 0.0)]),
        ("alt", [(2, 1.0), ("session", 1.0)]),
    ]
    only = _jsonl(uri, tmp_path / "alt.jsonl", "b1", "--branch", "alt")
    assert [e["agentjournal.line"] for s in only for e in _evaluations(s)] == ["alt", "alt"]


def test_an_export_that_meets_no_eval_run_imports_no_eval_fold() -> None:
    script = (
        "import sys\n"
        "from agentjournal.read.traces.evaluations import Evaluations\n"
        "Evaluations().on([])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('agentjournal.read.evals', "
        "'agentjournal.read.catalog'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
