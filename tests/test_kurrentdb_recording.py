"""Recording gRPC exchanges and replaying them against the double (the real-server leg's tool)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from pathlib import Path

import pytest
from kurrentdbclient import AsyncKurrentDBClient
from kurrentdbclient.protos.v1 import streams_pb2

from agentjournal.errors import ConcurrencyError, StreamDeleted, StreamNotFound
from agentjournal.store import AppendRequest
from agentjournal.store import StreamState as State
from agentjournal.store.kurrentdb import KurrentDBEventStore
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from agentjournal.testing.kurrentdb_double.recording import Recorder, load, main, replay
from agentjournal.testing.store_conformance import make_events


async def _scripted_run(uri: str, stream: str) -> None:
    """Successes and the errors the store meets, through the unmodified client."""
    async with await KurrentDBEventStore.open(uri) as store:
        await store.append(stream, make_events(2), expected=State.NO_STREAM)
        with pytest.raises(ConcurrencyError):
            await store.append(stream, make_events(1, prefix="x"), expected=0)
        await store.append_many(
            [
                AppendRequest(stream + "-a", make_events(1, prefix="a"), State.NO_STREAM),
                AppendRequest(stream, make_events(1, start=2), 1),
            ]
        )
        with pytest.raises(ConcurrencyError):
            await store.append_many([AppendRequest(stream, make_events(1, prefix="y"), 0)])
        with pytest.raises(StreamNotFound):
            await store.read(stream + "-missing")
        first = make_events(1, prefix="retried")
        await store.append_many([AppendRequest(stream + "-r", first, State.NO_STREAM)])
        with pytest.raises(ConcurrencyError):  # partly retried: the server's answer differs
            await store.append_many(
                [
                    AppendRequest(stream + "-r", first, State.NO_STREAM),
                    AppendRequest(stream + "-new", make_events(1), State.NO_STREAM),
                ]
            )
    client = AsyncKurrentDBClient(uri)
    await client.connect()
    await client.tombstone_stream(stream + "-a", current_version=0)
    await client.close()
    async with await KurrentDBEventStore.open(uri) as store:
        with pytest.raises(StreamDeleted):
            await store.read(stream + "-a")


async def test_a_recording_replays_against_a_fresh_double_without_differences(
    tmp_path: Path,
) -> None:
    recorder = Recorder()
    stream = f"Rec-{uuid.uuid4().hex}"
    async with KurrentDBDouble() as recorded:
        with recorder.installed():
            await _scripted_run(recorded.uri, stream)
    methods = {exchange.method.rsplit("/", 1)[1] for exchange in recorder.exchanges}
    assert {"BatchAppend", "AppendSession", "Read", "Tombstone"} <= methods
    assert any(exchange.status for exchange in recorder.exchanges)  # rich v2 errors too
    path = tmp_path / "exchanges.jsonl"
    recorder.save(path)
    assert [e.to_json() for e in load(path)] == [e.to_json() for e in recorder.exchanges]
    async with KurrentDBDouble() as fresh:
        assert await replay(load(path), f"{fresh.host}:{fresh.port}") == []
    # Replayed against 26.1, the partly retried append_many is answered differently.
    async with KurrentDBDouble(server_version="26.1") as other:
        differences = await replay(load(path), f"{other.host}:{other.port}")
    assert len(differences) == 1
    assert "SERVER_MALFUNCTION" in differences[0]
    assert "STREAM_REVISION_CONFLICT" in differences[0]


async def test_the_replay_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recorder = Recorder()
    async with KurrentDBDouble() as recorded:
        with recorder.installed():
            await _scripted_run(recorded.uri, f"Rec-{uuid.uuid4().hex}")
    path = tmp_path / "exchanges.jsonl"
    recorder.save(path)
    assert await _in_thread(lambda: main(["replay", str(path)])) == 0
    assert " 0 differ" in capsys.readouterr().out
    assert await _in_thread(lambda: main(["replay", str(path), "--server-version", "26.1"])) == 1
    assert " 1 differ" in capsys.readouterr().out


async def _in_thread(function: object) -> int:
    assert callable(function)
    result: int = await asyncio.to_thread(function)
    return result


async def test_the_last_position_is_read_with_limit_one() -> None:
    recorder = Recorder()
    stream = f"Rec-{uuid.uuid4().hex}"
    async with KurrentDBDouble() as double, await KurrentDBEventStore.open(double.uri) as store:
        await store.append(stream, make_events(1), expected=State.NO_STREAM)
        with recorder.installed():
            async with await KurrentDBEventStore.open(double.uri) as recorded:
                checked = await recorded.append(stream, [], expected=0)
    assert checked.revision == 0
    reads = [
        streams_pb2.ReadReq.FromString(base64.b64decode(e.requests[0]))
        for e in recorder.exchanges
        if e.method.endswith("/Read")
    ]
    backwards_all = [r for r in reads if r.options.WhichOneof("stream_option") == "all"]
    assert backwards_all, "the last position comes from $all"
    assert [r.options.count for r in backwards_all] == [1]


async def _concurrent_run(uri: str, stream: str) -> None:
    """A subscription that sees later writes, racing writers, reads between them."""
    client = AsyncKurrentDBClient(uri)
    await client.connect()
    subscription = await client.subscribe_to_stream(stream)
    seen: list[int] = []

    async def follow() -> None:
        async for event in subscription:
            seen.append(event.stream_position)
            if len(seen) == 4:
                return

    follower = asyncio.create_task(follow())
    async with await KurrentDBEventStore.open(uri) as store:
        await store.append(stream, make_events(3), expected=State.NO_STREAM)

        async def contender(n: int) -> bool:
            try:
                await store.append(stream, make_events(1, prefix=f"c{n}"), expected=2)
            except ConcurrencyError:
                return False
            return True

        async def reader() -> None:
            for _ in range(4):
                await store.head(stream)

        outcomes = await asyncio.gather(
            *(contender(n) for n in range(8)), reader(), reader(), return_exceptions=False
        )
        assert outcomes[:8].count(True) == 1
        await asyncio.wait_for(follower, 5)
        await subscription.stop()
        await store.read(stream)
    await client.close()


async def test_a_concurrent_recording_replays_cleanly() -> None:
    # Logged as the calls end: the subscription after the writes it saw, the race's
    # winner before its losers. Replayed in that order against a fresh double, every
    # answer has the recorded shape (the subscription compared by what it delivered).
    recorder = Recorder()
    stream = f"Rec-{uuid.uuid4().hex}"
    async with KurrentDBDouble() as recorded:
        with recorder.installed():
            await _concurrent_run(recorded.uri, stream)
    subscriptions = [
        e
        for e in recorder.exchanges
        if e.method.endswith("/Read")
        and streams_pb2.ReadReq.FromString(base64.b64decode(e.requests[0])).options.WhichOneof(
            "count_option"
        )
        == "subscription"
    ]
    assert len(subscriptions) == 1
    assert subscriptions[0].cancelled_by_client
    assert len(subscriptions[0].responses) >= 6  # confirmation, caught up, four events
    async with KurrentDBDouble() as fresh:
        assert await replay(recorder.exchanges, f"{fresh.host}:{fresh.port}") == []
