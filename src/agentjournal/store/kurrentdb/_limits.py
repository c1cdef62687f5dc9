"""KurrentDB's size limits, and checking a write against them before it is sent."""

from __future__ import annotations

import uuid
from collections.abc import (
    Mapping,
    Sequence,
)
from typing import Final

from kurrentdbclient import NewEvent as KdbNewEvent
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2

from agentjournal.errors import (
    InvalidInput,
)
from agentjournal.store.contract import (
    AppendRequest,
)
from agentjournal.store.kurrentdb._records import _PROTOBUF_MAX_SECONDS

MAX_APPEND_SIZE: Final = 256 * 1024 * 1024
"""KurrentDB's default ``MaxAppendSize`` since 25.1 (one append; 25.0: 1 MiB)."""
MAX_RECORD_SIZE: Final = 16 * 1024 * 1024
"""KurrentDB's ``MaxAppendEventSize``: one record (data, metadata, type)."""
MAX_V1_MESSAGE_BYTES: Final = 16 * 1024 * 1024 - 10_000
"""The largest request the v1 streams service takes (``TFConsts.EffectiveMaxLogRecordSize``);
also the largest stored event (``Event.SizeOnDisk``)."""


_EVENT_SIZE_DETAIL: Final = "event_store.client.MaximumAppendEventSizeExceeded"


def _proto_fields(raw: bytes) -> dict[int, int | bytes]:
    """The varint and length-delimited fields of a protobuf message, by number.

    For a detail kurrentdbclient's protos lack (``MaximumAppendEventSizeExceeded``:
    string 1, uint32 2, uint32 3); anything else ends the parse.
    """
    fields: dict[int, int | bytes] = {}
    offset = 0

    def varint() -> int:
        nonlocal offset
        value = shift = 0
        while offset < len(raw):
            byte = raw[offset]
            offset += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise ValueError("truncated varint")

    try:
        while offset < len(raw):
            key = varint()
            number, kind = key >> 3, key & 7
            if kind == 0:
                fields[number] = varint()
            elif kind == 2:
                length = varint()
                fields[number] = raw[offset : offset + length]
                offset += length
            else:
                break
    except ValueError:
        pass
    return fields


def _fits_v1_message(stream: str, events: Sequence[KdbNewEvent]) -> bool:
    """Whether ``append_to_stream``'s one request message stays within the v1 service's limit."""
    rough = (
        len(stream) + 256 + sum(len(e.data) + len(e.type) + len(e.metadata) + 160 for e in events)
    )
    if rough <= MAX_V1_MESSAGE_BYTES:
        return True
    return _v1_message_size(stream, events) <= MAX_V1_MESSAGE_BYTES


def _v1_message_size(stream: str, events: Sequence[KdbNewEvent]) -> int:
    """The size of the ``BatchAppendReq`` kurrentdbclient sends (at most a few bytes more)."""
    options = streams_pb2.BatchAppendReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode()),
    )
    options.deadline.seconds = _PROTOBUF_MAX_SECONDS
    options.deadline.nanos = 999_999_999
    options.stream_position = 2**63 - 1  # the widest expected-revision encoding
    message = streams_pb2.BatchAppendReq(
        correlation_id=shared_pb2.UUID(string=str(uuid.UUID(int=0))),
        options=options,
        proposed_messages=[
            streams_pb2.BatchAppendReq.ProposedMessage(
                id=shared_pb2.UUID(string=str(event.id)),
                metadata={"type": event.type, "content-type": event.content_type},
                custom_metadata=event.metadata,
                data=event.data,
            )
            for event in events
        ],
        is_final=True,
    )
    size: int = message.ByteSize()
    return size


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def struct_size(metadata: Mapping[str, str]) -> int:
    """Bytes of ``metadata`` as the protobuf ``Struct`` of string values the v2 API stores."""
    total = 0
    for key, value in metadata.items():
        key_bytes, value_bytes = len(key.encode()), len(value.encode())
        inner = 1 + _varint_size(value_bytes) + value_bytes  # Value.string_value
        entry = 1 + _varint_size(key_bytes) + key_bytes + 1 + _varint_size(inner) + inner
        total += 1 + _varint_size(entry) + entry
    return total


def _check_v1_size(
    stream: str, events: Sequence[KdbNewEvent], max_append: int, max_event: int
) -> None:
    """Refuse, before any I/O, a v1 append the server would refuse for its size.

    Each event as stored (``Event.SizeOnDisk``: data, metadata, the type two
    bytes a character) at most 16 MiB - 10,000 and at most ``MaxAppendEventSize``
    (``ClientWriteRequest.AddEvents``); their sum at most ``MaxAppendSize``.
    """
    total = 0
    for event in events:
        stored = len(event.data) + len(event.metadata) + 2 * len(event.type)
        _check_stored(stream, event.type, stored)
        _check_record(stream, event.type, stored, max_event)
        total += stored
    _check_total(total, max_append)


def _check_v2_size(requests: Sequence[AppendRequest], max_append: int, max_event: int) -> None:
    """Refuse, before any I/O, a v2 append the server would refuse for its size.

    Each record (``AppendRecordExtensions.CalculateSizeOnDisk``: data, metadata as
    the ``Struct`` it is stored as, the type's UTF-8 bytes) at most
    ``MaxAppendEventSize``, stored (``Event.SizeOnDisk``) in at most 16 MiB -
    10,000; the records' sum at most ``MaxAppendSize``.
    """
    total = 0
    for request in requests:
        for event in request.events:
            metadata = struct_size(event.metadata)
            record = len(event.data) + metadata + len(event.type.encode())
            _check_record(request.stream, event.type, record, max_event)
            _check_stored(
                request.stream, event.type, len(event.data) + metadata + 2 * len(event.type)
            )
            total += record
    _check_total(total, max_append)


def _check_record(stream: str, event_type: str, size: int, max_event: int) -> None:
    if size > max_event:
        raise InvalidInput(
            f"event {event_type} on {stream!r} is {size} bytes as KurrentDB counts it; its "
            f"MaxAppendEventSize is {max_event}"
        )


def _check_stored(stream: str, event_type: str, stored: int) -> None:
    if stored > MAX_V1_MESSAGE_BYTES:
        raise InvalidInput(
            f"event {event_type} on {stream!r} takes {stored} bytes to store; KurrentDB "
            f"stores at most {MAX_V1_MESSAGE_BYTES} (16 MiB - 10,000) per event"
        )


def _check_total(total: int, max_append: int) -> None:
    if total > max_append:
        raise InvalidInput(
            f"the append is {total} bytes as KurrentDB counts it; its MaxAppendSize is "
            f"{max_append}: split it into several appends"
        )
