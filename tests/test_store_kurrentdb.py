"""The KurrentDB store: the conformance suite on the gRPC double and on a real server.

Plus what is specific to KurrentDB: error translation, connection failures,
server-added metadata, system events, size limits, and the double itself as
the unmodified client sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import threading
import time
import uuid
import weakref
from asyncio import base_events
from collections.abc import AsyncGenerator, AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kurrentdbclient import AsyncKurrentDBClient, NewEvents, StreamState
from kurrentdbclient import NewEvent as KdbNewEvent
from kurrentdbclient.exceptions import (
    MultiAppendToSameStreamError,
    NotFoundError,
    ProgrammingError,
    WrongCurrentVersionError,
)

from agentjournal.errors import (
    InvalidInput,
    StoreError,
    StoreUnavailable,
    StreamDeleted,
    StreamNotFound,
)
from agentjournal.store import AppendRequest, EventStore, NewEvent, RecordedEvent, open_store
from agentjournal.store import StreamState as State
from agentjournal.store.kurrentdb import KurrentDBEventStore, redact_uri
from agentjournal.testing.kurrentdb_double import (
    KurrentDBDouble,
    ThreadedKurrentDBDouble,
    bench_store,
    kurrentdb_store_on_double,
)
from agentjournal.testing.kurrentdb_double.recording import Recorder
from agentjournal.testing.store_conformance import EventStoreConformance, make_events

KURRENTDB_IMAGE = "kurrentplatform/kurrentdb:26.0.2"
_T = TypeVar("_T")


@pytest.fixture(scope="session")
def shared_double() -> Iterator[ThreadedKurrentDBDouble]:
    """One double for the session, serving from its own thread like a shared server."""
    with KurrentDBDouble.in_thread() as double:
        yield double


class TestKurrentDBOnDouble(EventStoreConformance):
    @pytest.fixture
    def store_uri(self, shared_double: ThreadedKurrentDBDouble) -> str | None:
        return shared_double.uri

    @pytest.fixture
    async def store(self, store_uri: str) -> AsyncIterator[EventStore]:
        store = await open_store(store_uri)
        yield store
        await store.close()


# -- the real-server leg ---------------------------------------------------------


@pytest.fixture(scope="session")
def kurrentdb_server_uri() -> Iterator[str]:
    """``KURRENTDB_URI`` if set, else a container on a Docker engine, else skip."""
    uri = os.environ.get("KURRENTDB_URI")
    if uri:
        yield uri
        return
    try:
        from testcontainers.core.docker_client import DockerClient

        DockerClient().client.ping()
    except Exception as error:
        pytest.skip(
            "no KurrentDB server: set KURRENTDB_URI (e.g. kurrentdb://127.0.0.1:2113?Tls=false "
            f"after `docker compose up -d`) or provide a Docker engine ({type(error).__name__})"
        )
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import HttpWaitStrategy

    container = (
        DockerContainer(KURRENTDB_IMAGE)
        .with_envs(
            KURRENTDB_INSECURE="true",
            KURRENTDB_RUN_PROJECTIONS="All",
            KURRENTDB_START_STANDARD_PROJECTIONS="true",
            KURRENTDB_ENABLE_ATOM_PUB_OVER_HTTP="true",
        )
        .with_exposed_ports(2113)
        .waiting_for(
            HttpWaitStrategy(2113, "/health/live")
            .for_status_code_matching(lambda code: 200 <= code < 300)
            .with_startup_timeout(180)
        )
    )
    with container:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(2113)
        yield f"kurrentdb://{host}:{port}?Tls=false"


@pytest.fixture(scope="session")
def kurrentdb_recorder() -> Iterator[Recorder | None]:
    """With ``KURRENTDB_RECORD=path``, record the real-server leg's gRPC exchanges there.

    Replay them against the double with
    ``python -m agentjournal.testing.kurrentdb_double.recording replay path``.
    """
    path = os.environ.get("KURRENTDB_RECORD")
    if not path:
        yield None
        return
    recorder = Recorder()
    yield recorder
    recorder.save(path)


@pytest.mark.kurrentdb_server
class TestKurrentDBOnServer(EventStoreConformance):
    @pytest.fixture
    def store_uri(self, kurrentdb_server_uri: str) -> str | None:
        return kurrentdb_server_uri

    @pytest.fixture
    async def store(
        self, store_uri: str, kurrentdb_recorder: Recorder | None
    ) -> AsyncIterator[EventStore]:
        with contextlib.ExitStack() as recording:
            if kurrentdb_recorder is not None:
                recording.enter_context(kurrentdb_recorder.installed())
            store = await open_store(store_uri)
            yield store
            await store.close()

    async def test_several_processes_write_one_stream(
        self, store: EventStore, store_uri: str | None, stream: str
    ) -> None:
        if os.environ.get("KURRENTDB_RECORD"):
            # The writer processes' calls are not recorded: a replay without their
            # writes would report differences that are not the double's.
            pytest.skip("writes from other processes are not recorded (KURRENTDB_RECORD is set)")
        await super().test_several_processes_write_one_stream(store, store_uri, stream)


# -- KurrentDB specifics, on the double ---------------------------------------------


@pytest.fixture
async def store(shared_double: ThreadedKurrentDBDouble) -> AsyncIterator[KurrentDBEventStore]:
    store = await KurrentDBEventStore.open(shared_double.uri)
    yield store
    await store.close()


@pytest.fixture
async def client(shared_double: ThreadedKurrentDBDouble) -> AsyncIterator[AsyncKurrentDBClient]:
    client = AsyncKurrentDBClient(shared_double.uri)
    await client.connect()
    yield client
    await client.close()


@pytest.fixture
def stream() -> str:
    return f"Kdb-{uuid.uuid4().hex}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.slow
@pytest.mark.parametrize(
    "template",
    [
        "kurrentdb://admin:s3cret-pw@127.0.0.1:{port}?Tls=false",
        "kurrentdb+discover://admin:s3cret-pw@127.0.0.1:{port}"
        "?Tls=false&MaxDiscoverAttempts=1&GossipTimeout=1",
    ],
    ids=["direct", "discover"],
)
async def test_unreachable_server_is_one_clear_error_without_credentials(template: str) -> None:
    uri = template.format(port=_free_port())
    with pytest.raises(StoreUnavailable) as raised:
        await open_store(uri)
    message = str(raised.value)
    assert redact_uri(uri) in message
    assert "s3cret" not in message
    assert "admin" not in message
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__


async def test_invalid_uri_is_invalid_input_without_credentials() -> None:
    with pytest.raises(InvalidInput) as raised:
        await open_store("kurrentdb://admin:s3cret-pw@127.0.0.1:2113?NoSuchOption=1")
    assert "s3cret" not in str(raised.value)
    assert "NOSUCHOPTION" in str(raised.value)


def test_redact_uri() -> None:
    assert redact_uri("kurrentdb://u:p@h:2113?Tls=false") == "kurrentdb://h:2113?Tls=false"
    assert redact_uri("kurrentdb+discover://u:p@a,b:2113") == "kurrentdb+discover://a,b:2113"
    assert redact_uri("kurrentdb://h:2113") == "kurrentdb://h:2113"


async def test_discover_uri_reaches_the_double(
    shared_double: ThreadedKurrentDBDouble, stream: str
) -> None:
    async with await KurrentDBEventStore.open(shared_double.discover_uri) as store:
        await store.append(stream, make_events(2), expected=State.NO_STREAM)
        assert await store.head(stream) == 1


async def test_server_schema_keys_are_dropped_on_read(
    store: KurrentDBEventStore, client: AsyncKurrentDBClient, stream: str
) -> None:
    events = make_events(2)
    await store.append_many([AppendRequest(stream, events, State.NO_STREAM)])
    raw = await client.get_stream(stream)
    assert b'"$schema.name":"Tested"' in raw[0].metadata  # what the server hands back
    assert [dict(e.metadata) for e in await store.read(stream)] == [
        dict(e.metadata) for e in events
    ]


async def test_metadata_without_keys_round_trips_through_both_apis(
    store: KurrentDBEventStore, stream: str
) -> None:
    bare = [NewEvent(type="Bare", data=b"{}")]
    await store.append(stream + "-one", bare, expected=State.NO_STREAM)
    await store.append_many([AppendRequest(stream + "-many", bare, State.NO_STREAM)])
    for name in (stream + "-one", stream + "-many"):
        (event,) = await store.read(name)
        assert dict(event.metadata) == {}


async def test_foreign_metadata_reads_as_strings(
    store: KurrentDBEventStore, client: AsyncKurrentDBClient, stream: str
) -> None:
    await client.append_to_stream(
        stream,
        events=[
            KdbNewEvent(type="Foreign", data=b"{}", metadata=b'{"n": 1, "s": "x", "o": {}}'),
            KdbNewEvent(type="Foreign", data=b"{}", metadata=b"not json"),
        ],
        current_version=StreamState.NO_STREAM,
    )
    first, second = await store.read(stream)
    assert dict(first.metadata) == {"n": "1", "s": "x", "o": "{}"}
    assert dict(second.metadata) == {}


async def test_client_refuses_non_string_metadata_in_a_multi_append(
    client: AsyncKurrentDBClient, stream: str
) -> None:
    with pytest.raises(ProgrammingError):
        await client.multi_append_to_stream(
            [NewEvents(stream, [KdbNewEvent(type="T", data=b"{}", metadata=b'{"n": 1}')], 0)]
        )


async def test_double_refuses_a_stream_twice_case_insensitively(
    client: AsyncKurrentDBClient, stream: str
) -> None:
    with pytest.raises(MultiAppendToSameStreamError):
        await client.multi_append_to_stream(
            [
                NewEvents(stream, [KdbNewEvent(type="A", data=b"{}")], StreamState.ANY),
                NewEvents(stream.upper(), [KdbNewEvent(type="B", data=b"{}")], StreamState.ANY),
            ]
        )
    for name in (stream, stream.upper()):
        with pytest.raises(NotFoundError):
            await client.get_stream(name)


async def test_double_refuses_bad_event_types_in_a_multi_append(
    client: AsyncKurrentDBClient, stream: str
) -> None:
    with pytest.raises(Exception, match="Schema name can only contain"):
        await client.multi_append_to_stream(
            [NewEvents(stream, [KdbNewEvent(type="has space", data=b"{}")], StreamState.ANY)]
        )
    with pytest.raises(NotFoundError):
        await client.get_stream(stream)


async def test_double_reports_conflicts_like_the_server(
    client: AsyncKurrentDBClient, stream: str
) -> None:
    await client.append_to_stream(
        stream, events=[KdbNewEvent(type="A", data=b"{}")], current_version=StreamState.NO_STREAM
    )
    with pytest.raises(WrongCurrentVersionError) as single:
        await client.append_to_stream(
            stream, events=[KdbNewEvent(type="B", data=b"{}")], current_version=5
        )
    assert single.value.actual_version == 0
    with pytest.raises(WrongCurrentVersionError) as multi:
        await client.multi_append_to_stream(
            [NewEvents(stream, [KdbNewEvent(type="B", data=b"{}")], StreamState.NO_STREAM)]
        )
    assert (multi.value.stream_name, multi.value.actual_version) == (stream, 0)


async def test_positions_of_one_append_are_distinct_and_increasing(
    store: KurrentDBEventStore, client: AsyncKurrentDBClient, stream: str
) -> None:
    await store.append_many(
        [
            AppendRequest(stream + "-a", make_events(3), State.NO_STREAM),
            AppendRequest(stream + "-b", make_events(3), State.NO_STREAM),
        ]
    )
    raw = [*await client.get_stream(stream + "-a"), *await client.get_stream(stream + "-b")]
    assert all(e.commit_position == e.prepare_position for e in raw)
    positions = [e.commit_position for e in raw]
    assert positions == sorted(set(positions))


async def test_tombstoned_stream_is_stream_deleted(
    store: KurrentDBEventStore, client: AsyncKurrentDBClient, stream: str
) -> None:
    await store.append(stream, make_events(2), expected=State.NO_STREAM)
    start = (await store.read(stream))[0].position
    await client.tombstone_stream(stream, current_version=1)
    with pytest.raises(StreamDeleted) as raised:
        await store.append(stream, make_events(1, prefix="x"), expected=State.ANY)
    assert raised.value.stream == stream
    with pytest.raises(StreamDeleted):
        await store.append_many([AppendRequest(stream, make_events(1, prefix="y"), State.ANY)])
    with pytest.raises(StreamDeleted):
        await store.read(stream)
    with pytest.raises(StreamDeleted):
        await store.head(stream)
    # The tombstone record ($streamDeleted) is a system event: global reads never show it.
    after = await store.read_all(from_position=start)
    assert [e.revision for e in after if e.stream == stream] == [0, 1]
    assert all(not e.type.startswith("$") for e in after)


async def test_soft_deleted_stream_reads_as_missing_and_continues_its_revisions(
    store: KurrentDBEventStore, client: AsyncKurrentDBClient, stream: str
) -> None:
    first = await store.append(stream, make_events(2), expected=State.NO_STREAM)
    await client.delete_stream(stream, current_version=1)
    with pytest.raises(StreamNotFound):
        await store.read(stream)
    assert await store.head(stream) is None
    again = await store.append(stream, make_events(1, prefix="again"), expected=State.NO_STREAM)
    assert again.revision == 2  # read back from the server, not assumed
    assert [e.revision for e in await store.read(stream)] == [2]
    # The soft delete wrote a $metadata event to the system stream $$<stream>.
    everything = await store.read_all(from_position=first.position)
    assert all(not e.stream.startswith("$") for e in everything)


async def test_a_retry_the_server_answers_without_a_position_is_not_a_missing_stream(
    store: KurrentDBEventStore, client: AsyncKurrentDBClient, stream: str
) -> None:
    # KurrentDB's when_soft_deleted_stream_is_written_to_idempotently: a retry of a
    # write whose stream was soft-deleted since is recognised, with no position.
    events = make_events(2)
    first = await store.append(stream, events, expected=State.NO_STREAM)
    await client.delete_stream(stream, current_version=1)
    again = await store.append(stream, events, expected=State.NO_STREAM)
    assert (again.stream, again.revision, again.position) == (stream, first.revision, 0)
    exact = make_events(1, prefix="exact")
    await store.append(stream + "-x", make_events(1), expected=State.NO_STREAM)
    await store.append(stream + "-x", exact, expected=0)
    await client.delete_stream(stream + "-x", current_version=1)
    assert (await store.append(stream + "-x", exact, expected=0)).revision == 1
    (many,) = await store.append_many([AppendRequest(stream, events, State.NO_STREAM)])
    assert (many.revision, many.position) == (1, 0)
    with pytest.raises(StreamNotFound):
        await store.read(stream)


async def test_any_and_exists_report_the_revision_reached(
    store: KurrentDBEventStore, stream: str
) -> None:
    await store.append(stream, make_events(2), expected=State.ANY)
    result = await store.append(stream, make_events(3, start=2), expected=State.EXISTS)
    assert result.revision == 4
    assert result.position == (await store.read(stream))[-1].position
    many = await store.append_many(
        [
            AppendRequest(stream, make_events(1, start=5), State.ANY),
            AppendRequest(stream + "-new", make_events(2), State.ANY),
        ]
    )
    assert [r.revision for r in many] == [5, 1]
    # A retry with ANY is recognised through the server's id cache: no duplicate.
    retried = await store.append(stream, make_events(3, start=2), expected=State.ANY)
    assert (retried.revision, retried.position) == (4, result.position)
    assert await store.head(stream) == 5


async def test_racing_any_appends_each_report_their_own_revision(
    store: KurrentDBEventStore, stream: str
) -> None:
    async def one(n: int) -> tuple[uuid.UUID, int, int]:
        events = make_events(2, prefix=f"r{n}")
        many = n % 2 == 1
        if many:
            (result,) = await store.append_many([AppendRequest(stream, events, State.ANY)])
        else:
            result = await store.append(stream, events, expected=State.ANY)
        return events[-1].id, result.revision, result.position

    outcomes = await asyncio.gather(*(one(n) for n in range(16)))
    recorded = {e.id: (e.revision, e.position) for e in await store.read(stream)}
    assert len(recorded) == 32
    for last_id, revision, position in outcomes:
        assert recorded[last_id] == (revision, position)


async def test_append_over_the_servers_size_limit_is_invalid_input(stream: str) -> None:
    async with (
        KurrentDBDouble(max_append_size=1000) as double,
        await KurrentDBEventStore.open(double.uri) as small,
    ):
        big = [NewEvent(type="Big", data=b"x" * 600) for _ in range(2)]
        with pytest.raises(InvalidInput):
            await small.append(stream, big, expected=State.NO_STREAM)
        with pytest.raises(InvalidInput):
            await small.append_many([AppendRequest(stream, big, State.NO_STREAM)])
        assert await small.head(stream) is None


async def test_read_all_and_subscribe_accept_any_position(
    store: KurrentDBEventStore, stream: str
) -> None:
    await store.append(stream, make_events(3), expected=State.NO_STREAM)
    positions = [e.position for e in await store.read(stream)]
    # position + 1 is not a record boundary; KurrentDB refuses it, the store does not.
    from_next = await store.read_all(from_position=positions[0] + 1)
    assert [e.position for e in from_next if e.stream == stream] == positions[1:]
    received: list[int] = []
    async for event in store.subscribe(after_position=positions[0] + 1):
        if event.stream == stream:
            received.append(event.position)
            if len(received) == 2:
                break
    assert received == positions[1:]


async def test_empty_append_reports_the_last_position(
    store: KurrentDBEventStore, stream: str
) -> None:
    written = await store.append(stream, make_events(1), expected=State.NO_STREAM)
    checked = await store.append(stream, [], expected=0)
    assert checked.revision == 0
    assert checked.position >= written.position


async def test_closed_store_refuses_work_and_ends_subscriptions(
    shared_double: ThreadedKurrentDBDouble, stream: str
) -> None:
    store = await KurrentDBEventStore.open(shared_double.uri)
    await store.append(stream, make_events(1), expected=State.NO_STREAM)
    seen = asyncio.Event()

    async def follow() -> None:
        async for event in store.subscribe():
            if event.stream == stream:
                seen.set()

    task = asyncio.create_task(follow())
    await asyncio.wait_for(seen.wait(), 5)
    await store.close()
    await asyncio.wait_for(task, 5)  # ends instead of hanging or raising
    with pytest.raises(StoreUnavailable, match="closed"):
        await store.head(stream)


# -- one store, many event loops (Runner.run_sync in thread pools) -------------------------


class LoopThread:
    """An event loop running in its own thread for as long as the block lasts."""

    def __enter__(self) -> LoopThread:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()

    async def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coroutine`` on this loop; wait for it from the caller's loop."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        return await asyncio.wait_for(asyncio.wrap_future(future), 10)


async def _next_on(subscription: AsyncIterator[RecordedEvent], stream: str) -> RecordedEvent:
    async for event in subscription:
        if event.stream == stream:
            return event
    raise AssertionError("the subscription ended")


async def _end(subscription: AsyncIterator[RecordedEvent]) -> None:
    assert isinstance(subscription, AsyncGenerator)
    await subscription.aclose()


def _events_for_closed_loops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What gRPC tries to hand to a closed loop made from now on (the loops the test makes),
    recorded as it happens; gRPC then logs an error on whichever loop handled the event.
    Loops made before are left out: gRPC's poller serves every loop that ever used it, and
    an earlier test's loop, closed, may be handed a last event at any time later (seen on a
    loaded machine), which says nothing of the test that runs then."""
    mine: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
    found: list[str] = []
    made = base_events.BaseEventLoop.__init__
    handed = base_events.BaseEventLoop.call_soon_threadsafe

    def init(self: base_events.BaseEventLoop, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        mine.add(self)

    def call_soon_threadsafe(self: base_events.BaseEventLoop, *args: Any, **kwargs: Any) -> Any:
        if self in mine and self.is_closed():
            found.append(repr(args[0]))
        return handed(self, *args, **kwargs)

    monkeypatch.setattr(base_events.BaseEventLoop, "__init__", init)
    monkeypatch.setattr(base_events.BaseEventLoop, "call_soon_threadsafe", call_soon_threadsafe)
    return found


async def test_one_store_serves_event_loops_in_several_threads(
    shared_double: ThreadedKurrentDBDouble, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed_loop_events = _events_for_closed_loops(monkeypatch)
    store = await KurrentDBEventStore.open(shared_double.uri)
    first = await store.append(stream, make_events(1, prefix="main"), expected=State.NO_STREAM)
    together = threading.Barrier(2, timeout=10)

    async def elsewhere(name: str) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
        # A new loop in another thread, as asyncio.run per call in a thread pool makes.
        mine = f"{stream}-{name}"
        subscription = store.subscribe(after_position=first.position)
        together.wait()  # both loops use the store at once
        await store.append(mine, make_events(2, prefix=name), expected=State.NO_STREAM)
        await store.append_many([AppendRequest(mine, make_events(1, prefix=name, start=2), 1)])
        read = [event.id for event in await store.read(mine)]
        seen = [(await _next_on(subscription, mine)).id for _ in range(3)]
        await _end(subscription)
        return read, seen

    results = await asyncio.gather(
        *(asyncio.to_thread(asyncio.run, elsewhere(name)) for name in "ab")
    )
    for name, (read, seen) in zip("ab", results, strict=True):
        want = [event.id for event in make_events(3, prefix=name)]
        assert read == seen == want
        assert [event.id for event in await store.read(f"{stream}-{name}")] == want
    for _ in range(5):  # short-lived loops: asyncio.run per call
        assert await asyncio.to_thread(asyncio.run, store.head(stream)) == 0
        assert await asyncio.to_thread(asyncio.run, store.read_all(limit=1))

    # Closed from this loop while a subscription waits in a live loop elsewhere.
    with LoopThread() as follower:
        following = threading.Event()

        async def follow() -> int:
            count = 0
            async for event in store.subscribe(after_position=first.position):
                count += event.stream.startswith(stream)
                if count == 6:
                    following.set()
            return count  # after the store closed

        follows = asyncio.run_coroutine_threadsafe(follow(), follower.loop)
        assert await asyncio.to_thread(following.wait, 10)
        clients = [store._home_client, store._io_client]
        started = time.monotonic()
        await asyncio.wait_for(store.close(), 15)
        took = time.monotonic() - started
        assert await asyncio.wait_for(asyncio.wrap_future(follows), 5) == 6  # ended quietly
        with pytest.raises(StoreUnavailable, match="closed"):
            await follower.run(store.head(stream))
    print(f"close of a store used from 10 event loops: {took:.3f} s")
    assert all(client is not None and client.is_closed for client in clients)
    with pytest.raises(StoreUnavailable, match="closed"):
        await store.head(stream)
    # No channel was left on a loop that closed: gRPC had no events for one.
    assert closed_loop_events == []


async def test_a_subscription_follows_its_consumer_to_another_event_loop(
    store: KurrentDBEventStore, stream: str
) -> None:
    events = make_events(4)
    subscription = store.subscribe()
    got: list[RecordedEvent] = []
    with LoopThread() as other:
        for n, event in enumerate(events):
            # The consumer moves, waits, and only then is the event written: one
            # already received would be handed out without a call on the old loop.
            step = _next_on(subscription, stream)
            waiting = asyncio.ensure_future(other.run(step) if n % 2 == 0 else step)
            await asyncio.sleep(0.05)
            await store.append(stream, [event], expected=n - 1 if n else State.NO_STREAM)
            got.append(await asyncio.wait_for(waiting, 10))
    await _end(subscription)
    assert [event.id for event in got] == [event.id for event in events]  # no gap, no repeat


@pytest.mark.parametrize("home", ["stopped", "closed"])
async def test_a_store_outlives_the_loop_that_opened_it(
    shared_double: ThreadedKurrentDBDouble, stream: str, home: str
) -> None:
    # Opened on a loop that then stops (Runner.run_sync's, between runs) or closes
    # (asyncio.run's), then used and closed from this one: nothing waits for it.
    opened_on = asyncio.new_event_loop()

    def open_there() -> KurrentDBEventStore:
        store = opened_on.run_until_complete(KurrentDBEventStore.open(shared_double.uri))
        opened_on.run_until_complete(store.append(stream, make_events(1), expected=State.NO_STREAM))
        if home == "closed":
            opened_on.close()
        return store

    try:
        store = await asyncio.to_thread(open_there)
        assert await store.append(stream, make_events(2, start=1), expected=0)
        assert [event.revision for event in await store.read(stream)] == [0, 1, 2]
        started = time.monotonic()
        await asyncio.wait_for(store.close(), 5)
        print(f"close with its home loop {home}: {time.monotonic() - started:.3f} s")
    finally:
        opened_on.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        await store.head(stream)


def test_a_store_made_outside_a_loop_belongs_to_the_first_loop_that_uses_it(
    shared_double: ThreadedKurrentDBDouble, stream: str
) -> None:
    store = KurrentDBEventStore(AsyncKurrentDBClient(shared_double.uri), shared_double.uri)

    async def write(n: int) -> int:
        expected = n - 1 if n else State.NO_STREAM
        return (await store.append(stream, make_events(1, start=n), expected=expected)).revision

    assert asyncio.run(write(0)) == 0  # its home, closed when asyncio.run returns
    assert asyncio.run(write(1)) == 1  # another loop: the I/O loop serves it
    assert asyncio.run(store.head(stream)) == 1
    asyncio.run(store.close())
    with pytest.raises(StoreUnavailable, match="closed"):
        asyncio.run(store.head(stream))


@pytest.mark.slow
async def test_subscription_gives_up_after_reconnect_for_seconds(stream: str) -> None:
    double = KurrentDBDouble()
    await double.start()
    store = await KurrentDBEventStore.open(double.uri, deadline=0.5, reconnect_for=1.0)
    try:
        await store.append(stream, make_events(1), expected=State.NO_STREAM)
        subscription = store.subscribe()
        assert (await anext(subscription)).stream == stream
        await double.stop()
        started = asyncio.get_running_loop().time()
        with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1.*kept failing for 1 s"):
            await asyncio.wait_for(anext(subscription), 10)
        assert asyncio.get_running_loop().time() - started < 3
    finally:
        await store.close()
        await double.stop()


async def test_cancelled_append_still_lands_whole(store: KurrentDBEventStore, stream: str) -> None:
    events = make_events(50)
    task = asyncio.create_task(store.append(stream, events, expected=State.NO_STREAM))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    for _ in range(100):
        if await store.head(stream) == 49:
            break
        await asyncio.sleep(0.01)
    assert await store.head(stream) == 49
    retry = await store.append(stream, events, expected=State.NO_STREAM)
    assert retry.revision == 49


async def test_double_serves_other_processes_from_its_command_line(stream: str) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agentjournal.testing.kurrentdb_double",
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        uri = line.decode().strip()
        assert uri.startswith("kurrentdb://127.0.0.1:")
        async with await KurrentDBEventStore.open(uri) as remote:
            await remote.append(stream, make_events(2), expected=State.NO_STREAM)
            assert [e.revision for e in await remote.read(stream)] == [0, 1]
    finally:
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 30) == 0


async def test_bench_helpers_yield_a_working_store(tmp_path: Path, stream: str) -> None:
    async with bench_store(str(tmp_path)) as bench:
        await bench.append(stream, make_events(2), expected=State.NO_STREAM)
        assert await bench.head(stream) == 1
    async with kurrentdb_store_on_double() as other:
        assert await other.head(stream) is None  # a fresh double each time


@pytest.mark.slow
async def test_append_many_on_a_server_without_the_v2_service_says_it_is_too_old(
    stream: str,
) -> None:
    # KurrentDB 25.0 has no v2 streams service: AppendSession is UNIMPLEMENTED.
    # Single appends work (1 MiB each); a multi-stream append is a clear refusal.
    async with (
        KurrentDBDouble(server_version="25.0") as double,
        await KurrentDBEventStore.open(double.uri, max_append_size=1024 * 1024) as old,
    ):
        assert (await old.append(stream, make_events(2), expected=State.NO_STREAM)).revision == 1
        with pytest.raises(StoreError, match=r"needs KurrentDB 25\.1 or newer") as raised:
            await old.append_many([AppendRequest(stream + "-b", make_events(1), State.NO_STREAM)])
        assert type(raised.value) is StoreError
        assert "\n" not in str(raised.value)
        assert await old.head(stream + "-b") is None


@pytest.mark.parametrize("version", ["26.0", "26.1"])
@pytest.mark.parametrize("how", ["tombstoned", "soft-deleted"])
async def test_append_many_blames_the_deleted_stream_not_a_conflicting_one(
    stream: str, version: str, how: str
) -> None:
    # The first stream only conflicts; the second is deleted (tombstoned, or soft-
    # deleted and expected to exist). 26.0 names the deleted stream; 26.1 names the
    # first stream that failed its check, the conflicting one.
    conflicting, deleted = stream + "-conflicting", stream + "-deleted"
    with KurrentDBDouble.in_thread(server_version=version) as double:
        async with await KurrentDBEventStore.open(double.uri) as store:
            await store.append(conflicting, make_events(1), expected=State.NO_STREAM)
            await store.append(deleted, make_events(1), expected=State.NO_STREAM)
            client = AsyncKurrentDBClient(double.uri)
            await client.connect()
            if how == "tombstoned":
                await client.tombstone_stream(deleted, current_version=0)
            else:
                await client.delete_stream(deleted, current_version=0)
            await client.close()
            requests = [
                AppendRequest(conflicting, make_events(1, prefix="c"), 5),
                AppendRequest(deleted, make_events(1, prefix="d"), State.EXISTS),
            ]
            with pytest.raises(StreamDeleted) as raised:
                await store.append_many(requests)
            assert raised.value.stream == deleted
            assert await store.head(conflicting) == 0
