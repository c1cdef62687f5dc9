"""Recording gRPC exchanges and replaying them against the double (the real-server leg's tool)."""

from __future__ import annotations

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
    import asyncio

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
        streams_pb2.ReadReq.FromString(__import__("base64").b64decode(e.requests[0]))
        for e in recorder.exchanges
        if e.method.endswith("/Read")
    ]
    backwards_all = [r for r in reads if r.options.WhichOneof("stream_option") == "all"]
    assert backwards_all, "the last position comes from $all"
    assert [r.options.count for r in backwards_all] == [1]
