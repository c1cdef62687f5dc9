"""A write's request and result, the checks it passes before a store takes it, metadata."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from types import MappingProxyType
from typing import Final

from agentjournal.errors import InvalidInput
from agentjournal.store._events import (
    _EVENT_TYPE,
    _STREAM_NAME,
    MAX_EVENT_BYTES,
    MAX_STREAM_NAME_BYTES,
    RESERVED_METADATA_PREFIXES,
    Expected,
    NewEvent,
    StreamState,
)
from agentjournal.store.model import ModelChange


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """One stream's share of an :meth:`EventStore.append_many` transaction.

    Attributes:
        stream: The stream to append to.
        events: Its events.
        expected: What the stream must be before the write.
        model: What the write does to the stream's tree in a store that keeps a
            read model (see the module docs); None: nothing said, which leaves a
            modelled stream behind.
    """

    stream: str
    events: Sequence[NewEvent]
    expected: Expected
    model: ModelChange | None = None


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Where a successful append left a stream.

    Attributes:
        stream: The stream written to.
        revision: The revision of the stream's last event after the append.
        position: The global position of the append's commit: the position of
            its last event (for :meth:`EventStore.append_many`, the last event
            of the whole transaction).
    """

    stream: str
    revision: int
    position: int


def validate_stream_name(stream: object) -> str:
    """Return ``stream`` if it is a valid stream name, else raise InvalidInput.

    A stream name is 1 to 1024 bytes of printable ASCII without whitespace and
    must not start with ``$`` (KurrentDB reserves those for system streams).
    """
    if type(stream) is str and stream in _VALID_NAMES:
        return stream
    if not isinstance(stream, str) or not stream:
        raise InvalidInput(f"a stream name must be a non-empty string, got {stream!r}")
    if len(stream) > MAX_STREAM_NAME_BYTES or not _STREAM_NAME.fullmatch(stream):
        raise InvalidInput(
            f"invalid stream name {stream[:80]!r}: use at most {MAX_STREAM_NAME_BYTES} "
            "printable ASCII characters without whitespace"
        )
    if stream.startswith("$"):
        raise InvalidInput(f"invalid stream name {stream!r}: names starting with '$' are reserved")
    _remember(_VALID_NAMES, stream)
    return stream


# Names and event types found valid (exactly ``str``: a subclass could compare equal and
# differ), so that a process's few streams and types are checked once, not on every
# write; bounded, as a long-lived store writes to ever more streams.
_VALID_NAMES: Final[dict[str, None]] = {}
_VALID_TYPES: Final[dict[str, None]] = {}
_VALID_KEPT: Final = 4096


def _remember(valid: dict[str, None], text: str) -> None:
    if type(text) is str:
        if len(valid) >= _VALID_KEPT:
            valid.clear()
        valid[text] = None


def _validate_expected(stream: str, expected: object) -> None:
    if isinstance(expected, StreamState):
        return
    if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
        raise InvalidInput(
            f"expected state for {stream!r} must be a StreamState or a revision >= 0, "
            f"got {expected!r}"
        )


def _validate_event(stream: str, event: object) -> None:
    if not isinstance(event, NewEvent):
        raise InvalidInput(f"events for {stream!r} must be NewEvent instances, got {event!r}")
    if type(event.type) is not str or event.type not in _VALID_TYPES:
        _validate_type(stream, event.type)
    if not isinstance(event.data, bytes):
        raise InvalidInput(f"event data for {stream!r} must be bytes, got {type(event.data)}")
    if not isinstance(event.id, uuid.UUID):
        raise InvalidInput(f"event id for {stream!r} must be a UUID, got {event.id!r}")
    if event.id.int == 0:
        raise InvalidInput(
            f"event {event.type} on {stream!r} has the nil UUID as its id; KurrentDB refuses it"
        )
    fixed = len(event.data) + 2 * len(event.type)
    if _metadata_fits(event.metadata, fixed):
        return
    chars = 0  # of the metadata's keys and values, for a bound on its JSON's size
    for key, value in event.metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidInput(
                f"metadata of {event.type} on {stream!r} must map strings to strings; "
                f"{key!r} maps to {type(value).__name__}"
            )
        if not key:
            raise InvalidInput(
                f"metadata of {event.type} on {stream!r} has an empty key; KurrentDB refuses it"
            )
        if key.startswith(RESERVED_METADATA_PREFIXES):
            raise InvalidInput(
                f"metadata key {key!r} of {event.type} on {stream!r} is reserved: KurrentDB "
                f"writes keys starting with {' or '.join(RESERVED_METADATA_PREFIXES)} itself"
            )
        chars += len(key) + len(value)
    # Encoding the metadata only to measure it is skipped when it provably fits: as JSON
    # (``encode_metadata``) a character takes at most 6 bytes (an escape such as \u001f;
    # UTF-8 takes at most 4), a pair 6 more (quotes, colon, comma), the object 2. Text
    # that is not valid Unicode is encoded all the same, and refused as before.
    bound = 6 * chars + 6 * len(event.metadata) + 2
    if fixed + bound <= MAX_EVENT_BYTES and all(
        key.isascii() and value.isascii() for key, value in event.metadata.items()
    ):
        return
    size = fixed + len(encode_metadata(event.metadata))
    if size > MAX_EVENT_BYTES:
        raise InvalidInput(
            f"event {event.type} on {stream!r} is {size} bytes (data, metadata, type twice); "
            f"the limit is {MAX_EVENT_BYTES} (MAX_EVENT_BYTES, KurrentDB's largest event)"
        )


def _validate_type(stream: str, type_: object) -> None:
    if not isinstance(type_, str) or not _EVENT_TYPE.fullmatch(type_):
        raise InvalidInput(
            f"invalid event type {type_!r} for {stream!r}: must match ^[a-zA-Z0-9_.$:-]+$"
        )
    if type_.startswith("$"):
        raise InvalidInput(
            f"invalid event type {type_!r} for {stream!r}: types starting with '$' are "
            "KurrentDB system events"
        )
    _remember(_VALID_TYPES, type_)


# A NewEvent's metadata is a read-only view of its own dict (_frozen_metadata).
_PLAIN_MAPPINGS: Final = (dict, MappingProxyType)
_RESERVED_AFTER_NUL: Final = tuple(f"\x00{prefix}" for prefix in RESERVED_METADATA_PREFIXES)


def _metadata_fits(metadata: Mapping[str, str], fixed: int) -> bool:
    """Whether ``metadata`` is provably valid and small enough, checked in a few C calls
    instead of a Python loop over its keys; False sends it to the exact checks (and their
    messages) in :func:`_validate_event`, which decide.

    Joining refuses anything but text; a NUL before each key makes "a key starts with a
    reserved prefix" a substring test (a key holding NUL and a prefix inside only takes
    the exact checks); the size bound is the one of the exact checks.
    """
    if type(metadata) not in _PLAIN_MAPPINGS or "" in metadata:
        return False
    try:
        keys = "\x00" + "\x00".join(metadata)
        values = "".join(metadata.values())
    except TypeError:
        return False
    for prefix in _RESERVED_AFTER_NUL:
        if prefix in keys:
            return False
    chars = len(keys) - len(metadata) + len(values)
    bound = 6 * chars + 6 * len(metadata) + 2
    return fixed + bound <= MAX_EVENT_BYTES and keys.isascii() and values.isascii()


def validate_append(requests: Sequence[AppendRequest], *, many: bool) -> None:
    """Raise InvalidInput unless ``requests`` is a valid write; nothing is written.

    Args:
        requests: The streams and events of one append or append_many call.
        many: True for ``append_many``, where KurrentDB refuses an empty call,
            a stream without events, and a stream named twice (compared
            case-insensitively). A single ``append`` may carry no events: it
            then only checks the expected state.
    """
    if many and not requests:
        raise InvalidInput("append_many needs at least one stream")
    seen: set[str] = set()
    for request in requests:
        if not isinstance(request, AppendRequest):
            raise InvalidInput(f"append_many takes AppendRequest items, got {request!r}")
        stream = validate_stream_name(request.stream)
        folded = stream.casefold()
        if folded in seen:
            raise InvalidInput(f"stream {stream!r} appears more than once in one append_many")
        seen.add(folded)
        _validate_expected(stream, request.expected)
        if type(request.events) is not list and (
            isinstance(request.events, (str, bytes)) or not isinstance(request.events, Sequence)
        ):
            raise InvalidInput(f"events for {stream!r} must be a list of NewEvent")
        if many and not request.events:
            raise InvalidInput(f"append_many got no events for {stream!r}")
        if request.model is not None and not isinstance(request.model, ModelChange):
            raise InvalidInput(f"the model change for {stream!r} must be a ModelChange")
        for event in request.events:
            _validate_event(stream, event)


def _metadata_encoder() -> Callable[[dict[str, str]], str]:
    """``json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode``, with its C
    encoder made once: ``JSONEncoder.encode`` makes a new one on every call (through
    ``iterencode``), about a third of encoding a metadata object. The same C function
    with the same options prints the same text; what is left out is the encoder's
    circular-reference bookkeeping, which a flat map of strings never needs (and which,
    shared, could go stale after an error or be shared between threads)."""
    if c_make_encoder is None:  # pragma: no cover - a Python without _json
        return json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    chunks = c_make_encoder(
        None,  # markers: none kept (see above)
        json.JSONEncoder().default,  # raises TypeError, as the encoder's own default
        encode_basestring,  # ensure_ascii=False
        None,  # indent
        ":",
        ",",
        False,  # sort_keys
        False,  # skipkeys
        True,  # allow_nan, JSONEncoder's default
    )

    def encode(metadata: dict[str, str]) -> str:
        return "".join(chunks(metadata, 0))

    return encode


_METADATA_JSON: Final = _metadata_encoder()


def encode_metadata(metadata: Mapping[str, str]) -> bytes:
    """Return the canonical JSON bytes under which metadata is stored."""
    return _METADATA_JSON(metadata if type(metadata) is dict else dict(metadata)).encode()
