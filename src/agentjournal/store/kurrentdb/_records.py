"""Records to and from the KurrentDB client: events, expected states, positions, metadata."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Final

from kurrentdbclient import NewEvent as KdbNewEvent
from kurrentdbclient import RecordedEvent as KdbRecordedEvent
from kurrentdbclient import StreamState as KdbStreamState
from kurrentdbclient.exceptions import (
    InvalidCommitPositionError,
    WrongCurrentVersionError,
)

from agentjournal.errors import (
    ConcurrencyError,
    InvalidInput,
)
from agentjournal.store.contract import (
    AppendRequest,
    Expected,
    NewEvent,
    RecordedEvent,
    StreamState,
    encode_metadata,
    expected_label,
)

SERVER_METADATA_KEYS: Final = frozenset(
    {"$schema.name", "$schema.format", "$schema.id", "$record.timestamp"}
)
"""Metadata keys KurrentDB adds to events; dropped on read."""

_NOT_SYSTEM_STREAMS: Final = (r"\$.*",)  # filter_exclude on stream names


_EPOCH: Final = datetime.fromtimestamp(0, UTC)
_PROTOBUF_MAX_SECONDS: Final = 315_576_000_000


def _known_revision(request: AppendRequest) -> int:
    """The revision a write reached as far as its expected state tells (-1: unknown)."""
    if isinstance(request.expected, int):
        return request.expected + len(request.events)
    if request.expected is StreamState.NO_STREAM:
        return len(request.events) - 1
    return -1


def _check_non_negative(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{name} must be an int >= 0 or None, got {value!r}")


def _kdb_expected(expected: Expected) -> int | KdbStreamState:
    if expected is StreamState.ANY:
        return KdbStreamState.ANY
    if expected is StreamState.NO_STREAM:
        return KdbStreamState.NO_STREAM
    if expected is StreamState.EXISTS:
        return KdbStreamState.EXISTS
    assert isinstance(expected, int)
    return expected


def _conflict(request: AppendRequest, error: WrongCurrentVersionError) -> ConcurrencyError:
    actual = error.actual_version
    return ConcurrencyError(
        request.stream,
        expected_label(request.expected),
        actual if isinstance(actual, int) and actual >= 0 else None,
    )


def _invalid_position(error: BaseException) -> bool:
    """Whether KurrentDB refused a start position that is not a record boundary.

    A read says ``Unexpected FilteredReadAllResult: InvalidPosition`` (UNKNOWN),
    a subscription ``Trying to read from an invalid position.`` (INVALID_ARGUMENT).
    """
    if isinstance(error, InvalidCommitPositionError):
        return True
    text = str(error)
    cause = error.__cause__ or error.__context__
    if cause is not None:
        text += " " + str(cause)
    return "InvalidPosition" in text or "invalid position" in text.lower()


def _to_kdb(event: NewEvent) -> KdbNewEvent:
    return KdbNewEvent(
        type=event.type,
        data=event.data,
        metadata=encode_metadata(event.metadata) if event.metadata else b"",
        content_type="application/json",
        id=event.id,
    )


def _is_system(event: KdbRecordedEvent) -> bool:
    return event.type.startswith("$") or event.stream_name.startswith("$")


def _from_kdb(event: KdbRecordedEvent) -> RecordedEvent:
    return RecordedEvent(
        id=event.id,
        type=event.type,
        data=event.data,
        metadata=_decode_metadata(event.metadata),
        stream=event.stream_name,
        revision=event.stream_position,
        position=event.commit_position,
        recorded_at=event.recorded_at or _EPOCH,
    )


def _decode_metadata(raw: bytes) -> MappingProxyType[str, str]:
    """Parse stored metadata; drop the keys the server adds.

    Metadata this library did not write may be anything: a value that is not
    a string is returned as its JSON text, and bytes that are not a JSON
    object read as no metadata.
    """
    if not raw:
        return MappingProxyType({})
    try:
        parsed = json.loads(raw)
    except ValueError:
        return MappingProxyType({})
    if not isinstance(parsed, dict):
        return MappingProxyType({})
    return MappingProxyType(
        {
            str(key): value if isinstance(value, str) else json.dumps(value)
            for key, value in parsed.items()
            if key not in SERVER_METADATA_KEYS
        }
    )
