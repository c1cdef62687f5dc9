"""The one writer of eval runs: every event a kurrent-agent-schema message (checked with the
schema package's own ``from_json``), chained like every stream, each written once whatever
is retried, on SQLite and on the KurrentDB double."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import kurrent_agent_schema
import pytest
from kurrent_agent_schema import EVENT_TYPE_BY_NAME

from agentjournal import Journal, events
from agentjournal.engine.eval_events import RunStart, RunTotals, SessionScore, TurnScore
from agentjournal.engine.evals import EvalWriter
from agentjournal.errors import InvalidInput
from agentjournal.evals.run import run_eval
from agentjournal.ledger.chain import GENESIS, HASH_KEY, PREV_KEY, chain_hash
from agentjournal.store import EventStore, open_store
from agentjournal.store.contract import RecordedEvent
from agentjournal.testing.kurrentdb_double import ThreadedKurrentDBDouble
from eval_sessions import AnswerScorer, record_support

START = RunStart(
    "run-1",
    "eval",
    (("support-1", "main"),),
    ({"name": "answered", "version": "1", "kind": "rule"},),
    "sha256:" + "0" * 64,
)


def scores(turns: int) -> list[TurnScore | SessionScore]:
    made: list[TurnScore | SessionScore] = [
        TurnScore("support-1", "main", n, "answered", "1", 0.5, "pass", "why", "q", "a", "h")
        for n in range(1, turns + 1)
    ]
    made.append(SessionScore("support-1", "main", 0.5, "pass", "mean", {"answered": 0.5}, turns))
    return made


@pytest.fixture(params=["sqlite", "kurrentdb"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, kurrentdb_double: ThreadedKurrentDBDouble
) -> AsyncIterator[EventStore]:
    uri = (
        f"sqlite:///{tmp_path / 'evals.db'}" if request.param == "sqlite" else kurrentdb_double.uri
    )
    opened = await open_store(uri)
    yield opened
    await opened.close()


async def stream_of(store: EventStore, name: str = "EvalRun-run-1") -> list[RecordedEvent]:
    return await store.read(name)


def chained(found: list[RecordedEvent]) -> bool:
    prev = GENESIS
    for event in found:
        digest = chain_hash(
            event.stream,
            event.revision,
            str(event.id),
            event.type,
            hashlib.sha256(event.data).hexdigest(),
            event.metadata,
        )
        if event.metadata[PREV_KEY] != prev or event.metadata[HASH_KEY] != digest:
            return False
        prev = digest
    return True


async def test_the_writer_appends_each_event_once_however_often_it_is_asked(
    store: EventStore,
) -> None:
    writer = await EvalWriter.open(store, "run-1")
    assert await writer.start(START)
    assert await writer.add(scores(3)) == 4
    assert not await writer.start(START)
    assert await writer.add(scores(3)) == 0
    again = await EvalWriter.open(store, "run-1")  # a rerun, in another process
    assert again.started
    assert not again.completed
    assert await again.add(scores(4)) == 1  # only turn 4 is new
    totals = RunTotals("support-1", 4, 0.5, 0.0, {"answered": 0.5}, {"main": 0.5}, {}, 1)
    assert await again.complete(totals)
    assert not await again.complete(totals)
    found = await stream_of(store)
    assert [e.type for e in found] == [
        "EvalRunStarted",
        *["TurnScored"] * 3,
        "SessionScored",
        "TurnScored",
        "EvalRunCompleted",
    ]
    assert len({e.id for e in found}) == len(found)
    assert chained(found)


async def test_two_writers_of_one_run_racing_write_each_score_once(store: EventStore) -> None:
    first = await EvalWriter.open(store, "run-1")
    await first.start(START)
    second = await EvalWriter.open(store, "run-1")
    await asyncio.gather(first.add(scores(5)), second.add(scores(5)))
    await first.add(scores(6))
    # The second sends the same ids at a revision now taken: its write is recognised as
    # landed (writer.append), though what landed is the first's (another timestamp); it
    # goes on from the head as stored.
    await second.add(scores(6))
    await second.add(scores(7))
    await first.add(scores(8))
    totals = RunTotals("support-1", 8, 0.5, 0.0, {"answered": 0.5}, {"main": 0.5}, {}, 1)
    await asyncio.gather(first.complete(totals), second.complete(totals))
    found = await stream_of(store)
    assert len(found) == 11
    assert len({e.id for e in found}) == 11
    assert found[-1].type == "EvalRunCompleted"
    assert chained(found)


async def test_a_score_outside_zero_to_one_is_refused_with_nothing_written(
    store: EventStore,
) -> None:
    writer = await EvalWriter.open(store, "run-1")
    await writer.start(START)
    for bad in (1.5, -0.1, float("nan"), float("inf")):
        with pytest.raises(InvalidInput, match=r"\[0, 1\]"):
            await writer.add([TurnScore("support-1", "main", 1, "answered", "1", bad), *scores(1)])
    assert len(await stream_of(store)) == 1


async def test_scores_before_the_start_are_refused(store: EventStore) -> None:
    writer = await EvalWriter.open(store, "run-1")
    with pytest.raises(InvalidInput, match="not started"):
        await writer.add(scores(1))
    assert await store.head("EvalRun-run-1") is None


async def test_every_event_of_an_eval_run_is_a_schema_event(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1")
        scorers = [AnswerScorer(), AnswerScorer("refund", "12.50", whole=True)]
        await run_eval(journal.store, scorers, [("support-1", "main")], run_id="run-1")
        found = await stream_of(journal.store)
    assert [e.type for e in found] == [
        "EvalRunStarted",
        *["TurnScored"] * 6,
        "SessionScored",
        "EvalRunCompleted",
    ]
    for event in found:
        message_type = EVENT_TYPE_BY_NAME[event.type]
        message = kurrent_agent_schema.from_json(message_type, event.data.decode())
        assert kurrent_agent_schema.to_json(message)  # a whole message, printable again
        body = json.loads(event.data)
        assert set(body) <= {f.name for f in message_type.DESCRIPTOR.fields}
        assert event.metadata[events.SCHEMA_VERSION_KEY] == events.SCHEMA_VERSION_VALUE
        facts = message.extensions["agentjournal"]
        if event.type == "EvalRunStarted":
            assert message.session_id == "support-1"
            assert message.scorer == "answered,refund"
            assert facts["kind"] == "eval"
            assert facts["run_id"] == "run-1"
            assert [s["name"] for s in facts["scorers"]] == ["answered", "refund"]
        elif event.type == "TurnScored":
            assert 1 <= message.turn_index <= 3
            assert message.score in (0.0, 1.0)
            assert message.input
            assert message.output
            assert facts["line"] == "main"
            assert len(facts["head"]) == 64
            assert facts["human"] is False
        elif event.type == "EvalRunCompleted":
            assert message.turns_scored == 6
            assert message.average_score == pytest.approx(5 / 6)
    assert chained(found)
