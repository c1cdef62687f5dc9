"""The KurrentDB store under the faults a real server shows, staged on the gRPC double.

Unknown outcomes (a commit whose answer is lost or is a timeout), not-ready
answers, a server that hangs, a server that restarts under a subscription:
each is a real behaviour on the wire (see ``agentjournal.testing.kurrentdb_double.faults``),
met by the unmodified ``kurrentdbclient``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from agents import Runner
from google.protobuf import descriptor_pool
from kurrentdbclient import AsyncKurrentDBClient
from kurrentdbclient import StreamState as KdbStreamState

from agentjournal import Journal, JournalSession, read_tree
from agentjournal.audit.export import export_bundle
from agentjournal.errors import ConcurrencyError, StoreError, StoreUnavailable
from agentjournal.store import AppendRequest, AppendResult, NewEvent, RecordedEvent, open_store
from agentjournal.store import StreamState as State
from agentjournal.store.kurrentdb import KurrentDBEventStore
from agentjournal.store.kurrentdb._reconnect import _Reconnect
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.testing.kurrentdb_double import (
    KurrentDBDouble,
    SilentServer,
    ThreadedKurrentDBDouble,
)
from agentjournal.testing.store_conformance import make_events
from drive import CONFIG
from handoff_scenarios import single

DEADLINE = 0.4


@pytest.fixture
def double() -> Iterator[ThreadedKurrentDBDouble]:
    with KurrentDBDouble.in_thread() as double:
        yield double


@pytest.fixture
async def store(double: ThreadedKurrentDBDouble) -> AsyncIterator[KurrentDBEventStore]:
    store = await KurrentDBEventStore.open(double.uri, deadline=DEADLINE)
    yield store
    await store.close()


@pytest.fixture
def stream() -> str:
    return f"Fault-{uuid.uuid4().hex}"


async def _ids(store: KurrentDBEventStore, name: str) -> list[uuid.UUID]:
    return [event.id for event in await store.read(name)]


# -- 1. an unknown outcome is never a conflict, never written twice ------------------------


async def test_append_many_whose_commit_times_out_is_unavailable_then_its_retry_succeeds(
    store: KurrentDBEventStore, double: ThreadedKurrentDBDouble, stream: str
) -> None:
    await store.append(stream + "-a", make_events(2, prefix="seed"), expected=State.NO_STREAM)
    requests = [
        AppendRequest(stream + "-a", make_events(2, prefix="a"), 1),
        AppendRequest(stream + "-b", make_events(1, prefix="b"), State.NO_STREAM),
    ]
    # The server commits, then answers with its own commit timeout (v2 OperationTimeout,
    # DEADLINE_EXCEEDED): the heads moved, but the write is ours, not a conflict.
    double.faults.timeout_after_commit("AppendSession")
    with pytest.raises(StoreUnavailable, match="timed out"):
        await store.append_many(requests)
    again = await store.append_many(requests)  # the same ids: recognised
    assert [(r.stream, r.revision) for r in again] == [(stream + "-a", 3), (stream + "-b", 0)]
    assert await _ids(store, stream + "-a") == [
        e.id for e in make_events(2, prefix="seed") + make_events(2, prefix="a")
    ]
    assert await _ids(store, stream + "-b") == [e.id for e in make_events(1, prefix="b")]


@pytest.mark.slow
@pytest.mark.parametrize("many", [False, True], ids=["append", "append_many"])
async def test_commit_without_an_answer_is_unavailable_within_the_deadline(
    store: KurrentDBEventStore, double: ThreadedKurrentDBDouble, stream: str, many: bool
) -> None:
    events = make_events(3)
    double.faults.stall_after_commit("AppendSession" if many else "BatchAppend")
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="may or may not have landed"):
        await asyncio.wait_for(_append(store, stream, events, many), 5)
    assert time.monotonic() - started < DEADLINE + 1
    result = await _append(store, stream, events, many)  # the retry: recognised, not a conflict
    assert result.revision == 2
    assert await _ids(store, stream) == [e.id for e in events]


async def _append(
    store: KurrentDBEventStore, stream: str, events: list[NewEvent], many: bool
) -> AppendResult:
    if many:
        (result,) = await store.append_many([AppendRequest(stream, events, State.NO_STREAM)])
        return result
    return await store.append(stream, events, expected=State.NO_STREAM)


async def test_v1_commit_timeout_is_unavailable(
    store: KurrentDBEventStore, double: ThreadedKurrentDBDouble, stream: str
) -> None:
    double.faults.timeout_after_commit("BatchAppend")
    with pytest.raises(StoreUnavailable):
        await store.append(stream, make_events(2), expected=State.NO_STREAM)
    assert (await store.append(stream, make_events(2), expected=State.NO_STREAM)).revision == 1


@pytest.mark.parametrize("version", ["26.0", "26.1"])
async def test_a_partly_retried_append_many_is_a_conflict_on_both_server_versions(
    stream: str, version: str
) -> None:
    # One stream repeats an earlier write (its ids are in place), the other is new:
    # 26.0 refuses with an internal error, 26.1 with a conflict naming the retried
    # stream. Either way nothing is written and the caller learns which stream moved.
    with KurrentDBDouble.in_thread(server_version=version) as double:
        async with await KurrentDBEventStore.open(double.uri, deadline=DEADLINE) as store:
            first = make_events(2, prefix="first")
            await store.append_many([AppendRequest(stream + "-a", first, State.NO_STREAM)])
            with pytest.raises(ConcurrencyError) as raised:
                await store.append_many(
                    [
                        AppendRequest(stream + "-a", first, State.NO_STREAM),
                        AppendRequest(stream + "-b", make_events(1, prefix="b"), State.NO_STREAM),
                    ]
                )
            assert (raised.value.stream, raised.value.actual) == (stream + "-a", 1)
            assert await store.head(stream + "-b") is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault", ["timeout_after_commit", "stall_after_commit"], ids=["timeout", "no-answer"]
)
async def test_session_never_duplicates_an_item_after_an_unknown_outcome(
    double: ThreadedKurrentDBDouble, fault: str
) -> None:
    async with Journal.open(double.uri, deadline=DEADLINE) as journal:
        session = journal.session("fault-handoff", agent_name="triage")
        # Every write of the handoff run meets the fault once (v1 and v2 calls).
        getattr(double.faults, fault)("AppendSession", times=3)
        getattr(double.faults, fault)("BatchAppend", times=3)
        await Runner.run(
            single(), "Why was I charged twice?", session=session, hooks=session, run_config=CONFIG
        )
        stored: list[RecordedEvent] = []
        names, seen = [session.stream], set()
        while names:
            name = names.pop()
            seen.add(name)
            events = await journal.store.read(name)
            stored.extend(events)
            names.extend(
                sub
                for e in events
                if e.type == "SubagentStarted"
                and (sub := json.loads(e.data)["subsession_stream"]) not in seen
            )
        assert len({e.id for e in stored}) == len(stored)
        indices = [int(e.metadata["aj.index"]) for e in stored if "aj.index" in e.metadata]
        assert sorted(indices) == list(range(len(indices)))  # every item once
        items = await JournalSession(journal.store, "fault-handoff").get_items()
        assert len(items) == len(indices) == 6
    assert double.faults.used  # the faults did happen


class _LostAnswers(SQLiteEventStore):
    """A real store whose answer to the first multi-stream write is lost after it landed.

    What the old KurrentDB store reported after a commit timeout (a conflict naming
    one of the write's own streams, here the new subsession): the session must find
    its own events and go on, not write the items again under a new subagent.
    """

    lose = 1

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        results = await super().append_many(requests)
        if self.lose:
            self.lose -= 1
            raise ConcurrencyError(requests[-1].stream, "no_stream", results[-1].revision)
        return results


async def test_session_treats_its_own_landed_write_as_written_whatever_the_store_says(
    tmp_path: Path,
) -> None:
    store = await _LostAnswers.open(str(tmp_path / "journal.db"))
    assert isinstance(store, _LostAnswers)
    journal = Journal(store, "sqlite:///journal.db")
    session = journal.session("lost-answer", agent_name="triage")
    await Runner.run(
        single(), "Why was I charged twice?", session=session, hooks=session, run_config=CONFIG
    )
    assert store.lose == 0
    parent = await store.read(session.stream)
    assert [e.type for e in parent] == [
        "SessionStarted",
        "UserMessageReceived",
        "agentjournal.ModelResponded",  # triage's handoff, once although its answer was lost
        "SubagentStarted",
        "SubagentCompleted",
    ]
    child = await store.read(json.loads(parent[3].data)["subsession_stream"])
    indices = [int(e.metadata["aj.index"]) for e in parent + child if "aj.index" in e.metadata]
    assert sorted(indices) == list(range(6))
    assert len(await JournalSession(store, "lost-answer").get_items()) == 6
    await journal.close()


# -- not ready, hung, silent: StoreUnavailable within the deadline ------------------------


@pytest.mark.slow
@pytest.mark.parametrize("method", ["BatchAppend", "AppendSession", "Read"])
async def test_not_ready_answers_are_store_unavailable(
    double: ThreadedKurrentDBDouble, stream: str, method: str
) -> None:
    # A deadline long enough for the client's own retries of a read to run out.
    async with await KurrentDBEventStore.open(double.uri, deadline=5) as store:
        double.faults.not_ready(method, times=10)
        operation = {"BatchAppend": "append", "AppendSession": "append_many"}.get(method, "read")
        with pytest.raises(StoreUnavailable, match=r"[Nn]ot (yet )?[Rr]eady"):
            await _call(store, stream, operation)
        double.faults.clear()
        assert await store.head(stream) is None  # nothing was written


@pytest.mark.slow
@pytest.mark.parametrize(
    "operation", ["append", "append_many", "read", "head", "read_all", "subscribe"]
)
async def test_every_call_has_a_deadline(
    double: ThreadedKurrentDBDouble, stream: str, operation: str
) -> None:
    # A subscription would keep reconnecting; reconnect_for=0 lets the first failure show.
    async with await KurrentDBEventStore.open(
        double.uri, deadline=DEADLINE, reconnect_for=0
    ) as store:
        method = {"append": "BatchAppend", "append_many": "AppendSession"}.get(operation, "Read")
        double.faults.stall(method, times=10)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"within 0\.4 s"):
            await asyncio.wait_for(_call(store, stream, operation), 5)
        assert time.monotonic() - started < DEADLINE + 1


async def _call(store: KurrentDBEventStore, stream: str, operation: str) -> object:
    if operation == "append":
        return await store.append(stream, make_events(1), expected=State.NO_STREAM)
    if operation == "append_many":
        return await store.append_many([AppendRequest(stream, make_events(1), State.NO_STREAM)])
    if operation == "read":
        return await store.read(stream)
    if operation == "head":
        return await store.head(stream)
    if operation == "read_all":
        return await store.read_all()
    return await anext(store.subscribe())


@pytest.mark.slow
async def test_a_server_that_never_answers_is_unavailable_within_the_deadline() -> None:
    with SilentServer() as silent:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=r"no answer within 0\.5 s|within 0\.5 s"):
            await asyncio.wait_for(open_store(silent.uri, deadline=0.5), 10)
        assert time.monotonic() - started < 2
        assert silent.accepted >= 1  # it did connect: the server just never answered
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(Journal.open(silent.uri + "&DefaultDeadline=0.3"), 10)
        assert time.monotonic() - started < 3


async def test_deadline_comes_from_the_uri_or_the_caller(double: ThreadedKurrentDBDouble) -> None:
    async with await KurrentDBEventStore.open(double.uri + "&DefaultDeadline=2.5") as store:
        assert store.deadline == 2.5
    async with Journal.open(double.uri + "&DefaultDeadline=2.5", deadline=0.75) as journal:
        assert isinstance(journal.store, KurrentDBEventStore)
        assert journal.store.deadline == 0.75
    async with await KurrentDBEventStore.open(double.uri) as store:
        assert store.deadline == 10.0
        # Keepalive is on: a dead connection under an idle subscription is noticed.
        options = dict(store._client().grpc_options)
        assert options["grpc.keepalive_time_ms"] == 10_000
        assert options["grpc.keepalive_timeout_ms"] == 10_000


# -- 3. subscriptions outlive restarts -------------------------------------------------------


@pytest.mark.slow
async def test_an_idle_subscription_survives_any_number_of_restarts(
    double: ThreadedKurrentDBDouble, stream: str
) -> None:
    uri = double.uri + "&DefaultDeadline=1"  # the deadline the URI asks for
    async with (
        await KurrentDBEventStore.open(uri) as reader,
        await KurrentDBEventStore.open(uri) as writer,
    ):
        await writer.append(stream, make_events(1), expected=State.NO_STREAM)
        subscription = reader.subscribe()
        assert (await anext(subscription)).revision == 0
        pending = asyncio.ensure_future(anext(subscription))
        for _ in range(8):  # idle drops, far more than the old limit of three
            await double.restart(down_for=0.1)
            await asyncio.sleep(0.3)
            assert not pending.done()
        await _append_retrying(writer, stream, make_events(1, start=1), 0)
        event = await asyncio.wait_for(pending, 10)
        assert (event.stream, event.revision) == (stream, 1)


@pytest.mark.slow
async def test_a_subscription_resumes_after_a_restart_without_gap_or_duplicate(
    double: ThreadedKurrentDBDouble, stream: str, caplog: pytest.LogCaptureFixture
) -> None:
    uri = double.uri + "&DefaultDeadline=1"
    async with (
        await KurrentDBEventStore.open(uri) as reader,
        await KurrentDBEventStore.open(uri) as writer,
    ):
        await writer.append(stream, make_events(3), expected=State.NO_STREAM)
        received: list[int] = []
        got = asyncio.Event()

        async def follow() -> None:
            async for event in reader.subscribe():
                if event.stream == stream:
                    received.append(event.revision)
                    got.set()

        task = asyncio.create_task(follow())
        try:
            await _until(lambda: len(received) == 3)
            with caplog.at_level(logging.WARNING, logger="agentjournal.store.kurrentdb"):
                await double.restart(down_for=4.0)  # longer than the old give-up time allowed
                # Right after a restart a write may meet a channel still reconnecting:
                # StoreUnavailable, retried with the same ids, as the session does.
                await _append_retrying(writer, stream, make_events(2, start=3), 2)
                await _until(lambda: len(received) == 5)
                await _append_retrying(writer, stream, make_events(1, start=5), 4)
                await _until(lambda: len(received) == 6)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert received == [0, 1, 2, 3, 4, 5]
        assert "reconnecting in" in caplog.text


async def _append_retrying(
    store: KurrentDBEventStore, stream: str, events: list[NewEvent], expected: int
) -> None:
    for _ in range(20):
        try:
            await store.append(stream, events, expected=expected)
            return
        except StoreUnavailable:
            await asyncio.sleep(0.1)
    raise AssertionError("the store did not come back")


async def _until(condition: object, within: float = 10.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.02)


# -- one store for reading, writing and following: its subscription outlives the rest -----


async def _follow(
    store: KurrentDBEventStore, stream: str, received: list[int], outcome: list[str]
) -> None:
    """Record ``stream``'s revisions from a subscription, and how the subscription ended."""
    try:
        async for event in store.subscribe():
            if event.stream == stream:
                received.append(event.revision)
        outcome.append("ended")
    except Exception as error:
        outcome.append(f"raised {type(error).__name__}: {error}")


async def test_a_subscription_outlives_a_reconnect_caused_by_another_call(
    double: ThreadedKurrentDBDouble, stream: str
) -> None:
    # The client answers a not-ready read by opening a new connection and closing
    # the old one, which cancels every call on it "by the client", the store's
    # own subscription too. The subscription must not take that for its store's
    # close: it resubscribes after the last event it delivered.
    async with await KurrentDBEventStore.open(double.uri, deadline=5) as store:
        await store.append(stream, make_events(1), expected=State.NO_STREAM)
        received: list[int] = []
        outcome: list[str] = []
        task = asyncio.create_task(_follow(store, stream, received, outcome))
        try:
            await _until(lambda: received == [0])
            double.faults.not_ready("Read")
            assert await store.head(stream) == 0  # the client reconnected and retried
            assert ("Read", "not_ready") in double.faults.used
            await store.append(stream, make_events(1, start=1), expected=0)
            await _until(lambda: len(received) == 2 or bool(outcome))
            assert (received, outcome) == ([0, 1], [])
        finally:
            await store.close()
            await asyncio.wait_for(task, 5)
    assert outcome == ["ended"]  # our close ends it quietly


@pytest.mark.slow
async def test_a_shared_store_rides_out_a_restart_with_a_not_ready_start_up(
    double: ThreadedKurrentDBDouble, stream: str
) -> None:
    # KurrentDB listens before it is ready: after the restart every call is "Server
    # Is Not Ready" for a while. The subscription keeps trying, the writer retries;
    # once the subscription is back, a read that still meets a not-ready answer makes
    # the client replace the connection under it. Nothing is lost or repeated.
    async with await KurrentDBEventStore.open(double.uri, deadline=2) as store:
        await store.append(stream, make_events(1), expected=State.NO_STREAM)
        received: list[int] = []
        outcome: list[str] = []
        task = asyncio.create_task(_follow(store, stream, received, outcome))
        try:
            await _until(lambda: received == [0])
            await double.restart(down_for=0.2, not_ready_for=1.0)
            await _append_retrying(store, stream, make_events(1, start=1), 0)
            assert ("BatchAppend", "not_ready") in double.faults.used
            await _until(lambda: len(received) == 2 or bool(outcome))  # it is back
            double.faults.not_ready("Read")  # a late answer from the start-up
            assert await store.head(stream) == 1
            for revision in range(2, 4):
                await _append_retrying(store, stream, make_events(1, start=revision), revision - 1)
            await _until(lambda: len(received) == 4 or bool(outcome))
            assert (received, outcome) == ([0, 1, 2, 3], [])
        finally:
            await store.close()
            await asyncio.wait_for(task, 5)
    assert outcome == ["ended"]


@pytest.mark.slow
async def test_finding_the_start_of_a_non_boundary_position_rides_out_not_ready_answers(
    double: ThreadedKurrentDBDouble, stream: str
) -> None:
    # subscribe(after_position=inside a record): the server confirms, then refuses
    # the position; the store scans back for the record before it, and those reads
    # meet not-ready answers. A subscription that reconnects for ever retries the
    # scan like any other attempt instead of raising.
    async with await KurrentDBEventStore.open(double.uri, deadline=2) as store:
        await store.append(stream, make_events(3), expected=State.NO_STREAM)
        second = (await store.read(stream))[1].position
        # The subscription's own call goes through; the scan's next reads do not
        # (the client retries each once after reconnecting).
        double.faults.not_ready("Read", times=3, after=1)
        event = await asyncio.wait_for(anext(store.subscribe(after_position=second - 1)), 10)
        assert (event.stream, event.revision) == (stream, 1)
        assert double.faults.used.count(("Read", "not_ready")) == 3


@pytest.mark.slow
async def test_a_server_that_confirms_and_then_fails_every_subscription_is_given_up_on(
    double: ThreadedKurrentDBDouble, stream: str
) -> None:
    # A confirmation is not progress: the give-up clock keeps running until an
    # event arrives or a connection holds for a while.
    async with await KurrentDBEventStore.open(
        double.uri, deadline=DEADLINE, reconnect_for=1.0
    ) as store:
        await store.append(stream, make_events(1), expected=State.NO_STREAM)
        subscription = store.subscribe()
        assert (await anext(subscription)).stream == stream
        double.faults.not_ready_after_confirmation("Read", times=1000)
        pending = asyncio.ensure_future(anext(subscription))
        await double.restart()  # the live subscription drops; every new one fails
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="kept failing for 1 s"):
            await asyncio.wait_for(pending, 8)
        assert time.monotonic() - started < 3
        assert double.faults.used.count(("Read", "not_ready_after_confirmation")) >= 2


def test_only_progress_resets_the_reconnect_clock() -> None:
    now = [0.0]
    retry = _Reconnect(5.0, clock=lambda: now[0])
    for _ in range(10):  # confirmed, then failed at once: still failing
        retry.connected()
        now[0] += 1.0
        if retry.next_delay() is None:
            break
    assert now[0] <= 6.0
    assert retry.next_delay() is None
    fresh = _Reconnect(5.0, clock=lambda: now[0])
    fresh.connected()
    now[0] += 4.0
    first = fresh.next_delay()
    assert first is not None
    fresh.connected()
    now[0] += 30.0  # this connection held: it was working
    assert fresh.next_delay() is not None
    assert fresh.attempt == 1  # the backoff started over too
    fresh.connected()
    now[0] += 4.0
    assert fresh.next_delay() is not None  # 4 s into a new failing period of 5
    fresh.delivered()
    now[0] += 4.0
    assert fresh.next_delay() is not None


# -- an earlier attempt that landed is recognised where the server does not -------------------


@pytest.mark.parametrize("many", [False, True], ids=["append", "append_many"])
async def test_a_lost_answer_on_a_soft_deleted_stream_is_found_by_reading_back(
    store: KurrentDBEventStore, double: ThreadedKurrentDBDouble, stream: str, many: bool
) -> None:
    # A NO_STREAM write to a soft-deleted stream commits (undeleting it at revision
    # 2), its answer is a commit timeout. The retry with the same ids meets a
    # conflict: the stream now exists, and KurrentDB does not recognise a NO_STREAM
    # retry there. The store reads back, finds its own events, and succeeds.
    await store.append(stream, make_events(2, prefix="old"), expected=State.NO_STREAM)
    client = AsyncKurrentDBClient(double.uri)
    await client.connect()
    await client.delete_stream(stream, current_version=KdbStreamState.ANY)
    await client.close()
    events = make_events(1, prefix="new")
    double.faults.timeout_after_commit("AppendSession" if many else "BatchAppend")
    with pytest.raises(StoreUnavailable):
        await _append(store, stream, events, many)
    result = await _append(store, stream, events, many)
    (written,) = await store.read(stream)
    assert (written.id, written.revision) == (events[0].id, 2)
    assert (result.stream, result.revision, result.position) == (stream, 2, written.position)


@pytest.mark.parametrize("version", ["26.0", "26.1"])
async def test_a_lost_answer_over_two_streams_one_soft_deleted_is_found_by_reading_back(
    stream: str, version: str
) -> None:
    # The retry is idempotent for the new stream and a conflict for the undeleted
    # one: 26.0 answers with an internal error, 26.1 with a conflict. Both times the
    # events are in place, so the write succeeds with its original revisions.
    with KurrentDBDouble.in_thread(server_version=version) as double:
        async with await KurrentDBEventStore.open(double.uri, deadline=DEADLINE) as store:
            await store.append(
                stream + "-a", make_events(2, prefix="old"), expected=State.NO_STREAM
            )
            client = AsyncKurrentDBClient(double.uri)
            await client.connect()
            await client.delete_stream(stream + "-a", current_version=1)
            await client.close()
            requests = [
                AppendRequest(stream + "-a", make_events(1, prefix="a"), State.NO_STREAM),
                AppendRequest(stream + "-b", make_events(2, prefix="b"), State.NO_STREAM),
            ]
            double.faults.timeout_after_commit("AppendSession")
            with pytest.raises(StoreUnavailable):
                await store.append_many(requests)
            results = await store.append_many(requests)
            assert [(r.stream, r.revision) for r in results] == [
                (stream + "-a", 2),
                (stream + "-b", 1),
            ]
            assert await _ids(store, stream + "-a") == [e.id for e in requests[0].events]
            assert await _ids(store, stream + "-b") == [e.id for e in requests[1].events]


# -- the server's other refusals, as the error table says -------------------------------------


@pytest.mark.parametrize(
    ("fault", "method", "operation", "error", "text"),
    [
        # An election in progress: the node is not the leader and knows none.
        ("no_leader", "Read", "head", StoreUnavailable, "No leader info available"),
        ("no_leader", "BatchAppend", "append", StoreUnavailable, "No leader info available"),
        ("access_denied", "Read", "head", StoreError, "check the user and password"),
        ("access_denied", "BatchAppend", "append", StoreError, "check the user and password"),
        ("access_denied", "AppendSession", "append_many", StoreError, "check the user and pass"),
    ],
    ids=["read-no-leader", "append-no-leader", "read-denied", "append-denied", "many-denied"],
)
async def test_refusals_map_onto_the_error_table(
    store: KurrentDBEventStore,
    double: ThreadedKurrentDBDouble,
    stream: str,
    fault: str,
    method: str,
    operation: str,
    error: type[Exception],
    text: str,
) -> None:
    getattr(double.faults, fault)(method)
    with pytest.raises(error, match=text) as raised:
        await _call(store, stream, operation)
    assert type(raised.value) is error
    assert "\n" not in str(raised.value)
    assert double.faults.used == [(method, fault)]
    assert await store.head(stream) is None  # nothing was written


# -- an answer the network loses after the commit: never a definite failure --------------------


class CuttingProxy:
    """A gRPC proxy on loopback in front of the double that can lose an append's answer.

    It forwards every call unchanged (request bytes, metadata, deadline, the
    server's errors with their trailers). :meth:`cut_after_commit` makes the next
    appends of a method reach the server, which commits and answers, and then
    ends them with ``UNKNOWN "Stream removed"``: what gRPC reports when a
    connection or a proxy drops a call whose response was on its way. No error
    the store knows, and the write landed.
    """

    def __init__(self, target_uri: str) -> None:
        self._target = target_uri.removeprefix("kurrentdb://").split("?", 1)[0]
        self._cuts: dict[str, int] = {}
        self.cut: list[str] = []
        """Every method whose answer was cut, in order."""

    async def __aenter__(self) -> CuttingProxy:
        self._channel = grpc.aio.insecure_channel(self._target)
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers((_Forward(self),))
        self._port = self._server.add_insecure_port("127.0.0.1:0")
        await self._server.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._server.stop(grace=None)
        await self._channel.close()

    @property
    def uri(self) -> str:
        return f"kurrentdb://127.0.0.1:{self._port}?Tls=false"

    def cut_after_commit(self, method: str, *, times: int = 1) -> None:
        """Lose the answers of the next ``times`` calls of ``method`` (``BatchAppend``...)."""
        self._cuts[method] = self._cuts.get(method, 0) + times

    def _take_cut(self, method: str) -> bool:
        name = method.rsplit("/", 1)[-1]
        if not self._cuts.get(name):
            return False
        self._cuts[name] -= 1
        self.cut.append(name)
        return True

    async def _lose_answer(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.UNKNOWN, "Stream removed")


class _Forward(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc's stubs leave it untyped
    """Forward any call as raw bytes; its kind comes from the protos kurrentdbclient loaded."""

    def __init__(self, proxy: CuttingProxy) -> None:
        self._proxy = proxy

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler[Any, Any] | None:
        method: str = details.method
        try:
            found = descriptor_pool.Default().FindMethodByName(method.strip("/").replace("/", "."))
        except KeyError:
            return None
        proxy, channel = self._proxy, self._proxy._channel

        def forwarded(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, Any]:
            metadata = tuple(
                (key, value)
                for key, value in context.invocation_metadata() or ()
                if not key.startswith((":", "grpc-")) and key != "user-agent"
            )
            return {"metadata": metadata, "timeout": context.time_remaining()}

        async def relay(error: grpc.aio.AioRpcError, context: Any) -> None:
            await context.abort(error.code(), error.details() or "", error.trailing_metadata())

        if found.client_streaming and found.server_streaming:

            async def stream_stream(requests: Any, context: Any) -> AsyncIterator[bytes]:
                cut = proxy._take_cut(method)
                call = channel.stream_stream(method)(requests, **forwarded(context))
                try:
                    async for response in call:
                        if cut:
                            await proxy._lose_answer(context)
                        yield response
                except grpc.aio.AioRpcError as error:
                    await relay(error, context)
                finally:
                    call.cancel()

            return grpc.stream_stream_rpc_method_handler(stream_stream)
        if found.client_streaming:

            async def stream_unary(requests: Any, context: Any) -> bytes:
                cut = proxy._take_cut(method)
                try:
                    response: bytes = await channel.stream_unary(method)(
                        requests, **forwarded(context)
                    )
                except grpc.aio.AioRpcError as error:
                    await relay(error, context)
                    raise
                if cut:
                    await proxy._lose_answer(context)
                return response

            return grpc.stream_unary_rpc_method_handler(stream_unary)
        if found.server_streaming:

            async def unary_stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
                call = channel.unary_stream(method)(request, **forwarded(context))
                try:
                    async for response in call:
                        yield response
                except grpc.aio.AioRpcError as error:
                    await relay(error, context)
                finally:
                    call.cancel()

            return grpc.unary_stream_rpc_method_handler(unary_stream)

        async def unary_unary(request: bytes, context: Any) -> bytes:
            try:
                response: bytes = await channel.unary_unary(method)(request, **forwarded(context))
            except grpc.aio.AioRpcError as error:
                await relay(error, context)
                raise
            return response

        return grpc.unary_unary_rpc_method_handler(unary_unary)


@pytest.fixture
async def proxy(double: ThreadedKurrentDBDouble) -> AsyncIterator[CuttingProxy]:
    async with CuttingProxy(double.uri) as proxy:
        yield proxy


@pytest.mark.parametrize("expected", ["no_stream", "exact"])
async def test_an_append_whose_answer_is_lost_after_the_commit_is_unavailable_never_failed(
    proxy: CuttingProxy, stream: str, expected: str
) -> None:
    async with await KurrentDBEventStore.open(proxy.uri, deadline=DEADLINE) as store:
        seed = make_events(2, prefix="seed")
        await store.append(stream, seed, expected=State.NO_STREAM)
        events = make_events(2, prefix="lost")
        at = 1 if expected == "exact" else State.NO_STREAM
        if at is State.NO_STREAM:
            stream += "-new"
        proxy.cut_after_commit("BatchAppend")
        # The server committed; the store cannot know it: StoreUnavailable (retry with
        # the same ids), never a plain StoreError that says the write failed.
        with pytest.raises(StoreUnavailable, match="may or may not have landed") as raised:
            await store.append(stream, events, expected=at)
        assert "\n" not in str(raised.value)
        assert proxy.cut == ["BatchAppend"]
        assert await _ids(store, stream) == [e.id for e in (seed if at == 1 else []) + events]
        again = await store.append(stream, events, expected=at)  # recognised, not written twice
        assert again.revision == (3 if at == 1 else 1)
        assert await _ids(store, stream) == [e.id for e in (seed if at == 1 else []) + events]


@pytest.mark.parametrize("method", ["BatchAppend", "AppendSession"])
async def test_a_session_write_whose_answer_is_lost_lands_once_and_succeeds(
    proxy: CuttingProxy, method: str
) -> None:
    async with Journal.open(proxy.uri, deadline=DEADLINE) as journal:
        session = journal.session(f"lost-{method}", agent_name="triage")
        await session.add_items([{"role": "user", "content": "first"}])
        proxy.cut_after_commit(method)
        if method == "BatchAppend":
            await session.add_items([{"role": "user", "content": "second"}])
        else:  # a handoff run: its writes span the parent and the subsession (append_many)
            await Runner.run(single(), "Why?", session=session, hooks=session, run_config=CONFIG)
        assert proxy.cut == [method]
        fresh = JournalSession(journal.store, f"lost-{method}")
        contents = [item.get("content") for item in await fresh.get_items()]
        assert contents[0] == "first"
        assert contents.count("second") == (1 if method == "BatchAppend" else 0)
        stored = await journal.store.read(session.stream)
        assert len({e.id for e in stored}) == len(stored)
        indices = [int(e.metadata["aj.index"]) for e in stored if "aj.index" in e.metadata]
        assert indices == sorted(set(indices))  # no item written twice


# -- reads during an outage ------------------------------------------------------------------


SID = "s1"


def user(text: str) -> Any:
    return {"role": "user", "content": text}


@pytest.mark.slow
async def test_export_during_an_outage_is_store_unavailable(
    kurrentdb_double: ThreadedKurrentDBDouble,
) -> None:
    # An outage is the documented StoreUnavailable (retry later), not a damaged event.
    async with Journal.open(kurrentdb_double.uri) as journal:
        await journal.session(SID).add_items([user("hi")])
        kurrentdb_double.faults.not_ready("Read", times=1000)
        try:
            with pytest.raises(StoreUnavailable):
                await export_bundle(journal.store, SID)
            with pytest.raises(StoreUnavailable):
                await read_tree(journal.store, SID)
        finally:
            kurrentdb_double.faults.clear()
