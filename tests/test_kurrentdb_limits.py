"""Sizes follow the server: what KurrentDB 25.1+ takes, and refusals before any I/O.

KurrentDB (``ClusterVNodeOptions``, ``TFConsts``, ``ApiV2Plugin``): a record of at
most ``MaxAppendEventSize`` (16 MiB) whose stored size (``Event.SizeOnDisk``) is
at most 16 MiB - 10,000 bytes, an append of at most ``MaxAppendSize`` (256 MiB;
1 MiB before 25.1), and a v1 streams request message of at most 16 MiB - 10,000
bytes (the v2 service takes 1.5 x ``MaxAppendSize``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from google.protobuf import struct_pb2  # type: ignore[import-untyped, unused-ignore]
from kurrentdbclient import NewEvent as KdbNewEvent
from kurrentdbclient import StreamState as KdbStreamState
from kurrentdbclient.streams import BaseStreamsService

from agentjournal.errors import InvalidInput
from agentjournal.store import MAX_EVENT_BYTES, AppendRequest, NewEvent
from agentjournal.store import StreamState as State
from agentjournal.store.contract import encode_metadata
from agentjournal.store.kurrentdb import (
    MAX_V1_MESSAGE_BYTES,
    KurrentDBEventStore,
)
from agentjournal.store.kurrentdb._limits import _v1_message_size, struct_size
from agentjournal.testing.kurrentdb_double import KurrentDBDouble, ThreadedKurrentDBDouble

MIB = 1024 * 1024


@pytest.fixture
def double() -> Iterator[ThreadedKurrentDBDouble]:
    with KurrentDBDouble.in_thread() as double:
        yield double


@pytest.fixture
def stream() -> str:
    return f"Limits-{uuid.uuid4().hex}"


async def test_an_append_over_the_v1_message_limit_goes_through(
    double: ThreadedKurrentDBDouble, stream: str
) -> None:
    # 18 MiB in one append: too large for the v1 service's message limit, well
    # within MaxAppendSize. The v2 call carries it; nothing is retried or lost.
    events = [NewEvent(type="Big", data=bytes([n]) * (9 * MIB)) for n in range(2)]
    async with await KurrentDBEventStore.open(double.uri) as store:
        result = await store.append(stream, events, expected=State.NO_STREAM)
        assert result.revision == 1
        assert [e.data for e in await store.read(stream)] == [e.data for e in events]
    assert double.faults.calls["AppendSession"] == 1
    assert double.faults.calls["BatchAppend"] == 0


@pytest.mark.parametrize("many", [False, True], ids=["append", "append_many"])
async def test_an_append_over_max_append_size_is_invalid_input_before_any_io(
    stream: str, many: bool
) -> None:
    # A 25.0 server (or one configured so) takes 1 MiB per append.
    with KurrentDBDouble.in_thread(max_append_size=MIB) as double:
        async with await KurrentDBEventStore.open(double.uri, max_append_size=MIB) as store:
            events = [NewEvent(type="Half", data=b"x" * (600 * 1024)) for _ in range(2)]
            with pytest.raises(InvalidInput, match=r"MaxAppendSize is 1048576"):
                await _write(store, stream, events, many)
            assert double.faults.calls["BatchAppend"] + double.faults.calls["AppendSession"] == 0
            # One that fits goes through.
            assert (await store.append(stream, events[:1], expected=State.NO_STREAM)).revision == 0


@pytest.mark.parametrize("many", [False, True], ids=["append", "append_many"])
async def test_a_server_refusing_an_append_for_its_size_is_invalid_input(
    stream: str, many: bool
) -> None:
    # The store was not told of the server's smaller limit: the server refuses,
    # and that is still bad input, never a transport error or a retry.
    with KurrentDBDouble.in_thread(max_append_size=MIB) as double:
        async with await KurrentDBEventStore.open(double.uri) as store:
            events = [NewEvent(type="Half", data=b"x" * (600 * 1024)) for _ in range(2)]
            with pytest.raises(InvalidInput, match=r"1048576|1\.000 MB"):
                await _write(store, stream, events, many)
            assert await store.head(stream) is None
    assert sum(double.faults.calls.values()) >= 1


async def _write(
    store: KurrentDBEventStore, stream: str, events: list[NewEvent], many: bool
) -> None:
    if many:
        await store.append_many([AppendRequest(stream, events, State.NO_STREAM)])
    else:
        await store.append(stream, events, expected=State.NO_STREAM)


async def test_an_event_larger_than_kurrentdb_stores_is_invalid_input_before_any_io(
    double: ThreadedKurrentDBDouble, stream: str
) -> None:
    # Within MAX_EVENT_BYTES as its JSON metadata counts, over it as the protobuf
    # Struct the v2 call stores the metadata in (two more bytes per key).
    metadata = {f"k{n:04}": "v" for n in range(2000)}
    data = b"x" * (MAX_EVENT_BYTES - len(encode_metadata(metadata)) - 2 * len("Big"))
    event = NewEvent(type="Big", data=data, metadata=metadata)
    async with await KurrentDBEventStore.open(double.uri) as store:
        for write in (
            store.append(stream, [event], expected=State.NO_STREAM),
            store.append_many([AppendRequest(stream, [event], State.NO_STREAM)]),
        ):
            with pytest.raises(InvalidInput, match=r"16 MiB - 10,000"):
                await write
    assert double.faults.calls["BatchAppend"] + double.faults.calls["AppendSession"] == 0


@pytest.mark.parametrize(
    "metadata",
    [
        {},
        {"a": ""},
        {"key": "value", "ключ": "значение", "$schema_version": "2"},
        {"k" * 200: "v" * 70_000},
        {f"k{n}": "x" * n for n in range(300)},
    ],
    ids=["empty", "empty-value", "unicode", "long", "many"],
)
def test_struct_size_is_what_protobuf_encodes(metadata: dict[str, str]) -> None:
    fields = {key: struct_pb2.Value(string_value=value) for key, value in metadata.items()}
    assert struct_size(metadata) == struct_pb2.Struct(fields=fields).ByteSize()


def test_the_v1_message_size_bounds_what_the_client_sends() -> None:
    events = [
        NewEvent(type="Tested", data=b"x" * n, metadata={"n": str(n)}, id=uuid.uuid4())
        for n in (0, 1, 200, 70_000)
    ]
    kdb_events = [
        KdbNewEvent(
            type=e.type,
            data=e.data,
            metadata=encode_metadata(e.metadata),
            content_type="application/json",
            id=e.id,
        )
        for e in events
    ]
    sent = BaseStreamsService._construct_batch_append_req(
        stream_name="Limits-size",
        current_version=12,
        events=kdb_events,
        correlation_id=uuid.uuid4(),
        timeout=10.0,
    )
    assert sent.ByteSize() <= _v1_message_size("Limits-size", kdb_events) <= sent.ByteSize() + 32
    no_state = BaseStreamsService._construct_batch_append_req(
        stream_name="Limits-size",
        current_version=KdbStreamState.ANY,
        events=[],
        correlation_id=uuid.uuid4(),
        timeout=None,
    )
    assert no_state.ByteSize() <= _v1_message_size("Limits-size", [])
    assert MAX_V1_MESSAGE_BYTES == 16 * MIB - 10_000 == MAX_EVENT_BYTES


@pytest.mark.parametrize("many", [False, True], ids=["append", "append_many"])
async def test_a_server_with_a_lower_max_append_event_size_is_invalid_input(
    stream: str, many: bool
) -> None:
    # An operator lowered MaxAppendEventSize. Not told, the store sends the event
    # and the server refuses it (v1: a MaximumAppendEventSizeExceeded status, v2:
    # APPEND_RECORD_SIZE_EXCEEDED): bad input naming the limit, one line.
    event = NewEvent(type="Big", data=b"x" * 4096)
    with KurrentDBDouble.in_thread(max_append_event_size=1024) as double:
        async with await KurrentDBEventStore.open(double.uri) as store:
            with pytest.raises(InvalidInput, match=r"MaxAppendEventSize of 1024|1\.000 KB") as e:
                await _write(store, stream, [event], many)
            assert "\n" not in str(e.value)
            assert await store.head(stream) is None
        # Told, it refuses before sending anything.
        calls = sum(double.faults.calls.values())
        async with await KurrentDBEventStore.open(double.uri, max_append_event_size=1024) as store:
            opened = sum(double.faults.calls.values())
            with pytest.raises(InvalidInput, match=r"MaxAppendEventSize is 1024"):
                await _write(store, stream, [event], many)
            assert sum(double.faults.calls.values()) == opened > calls
            small = NewEvent(type="Small", data=b"x" * 900)
            await _write(store, stream, [small], many)
            assert await store.head(stream) == 0
