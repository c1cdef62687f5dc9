"""The store's event records: stream states, new and recorded events, and event ids."""

from __future__ import annotations

import enum
import hashlib
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final, TypeAlias

from agentjournal._fastjson import loads_utf8
from agentjournal.errors import UnreadableMetadata

MAX_EVENT_BYTES = 16 * 1024 * 1024 - 10_000
"""The largest event a store accepts: KurrentDB's largest stored event.

Counted as KurrentDB counts it (``Event.SizeOnDisk``): the data, the metadata's
JSON bytes, and the type twice (two bytes a character); the server refuses an
event over its largest log record less 10,000 bytes of overhead
(``TFConsts.EffectiveMaxLogRecordSize``). Every store enforces it, so a store
swap cannot fail later.
"""

MAX_STREAM_NAME_BYTES = 1024

RESERVED_METADATA_PREFIXES = ("$schema.", "$record.")
"""Metadata keys KurrentDB adds on read; a writer may not use them."""

# Matched with fullmatch: "$" would also match before a trailing newline.
_EVENT_TYPE = re.compile(r"[a-zA-Z0-9_.$:-]+")
_STREAM_NAME = re.compile(r"[!-~]+")  # printable ASCII, no whitespace

_ID_NAMESPACE = uuid.UUID("5d7e1c0a-3f7b-4c5e-9a3e-6a2f0c1d9b42")


class StreamState(enum.Enum):
    """What a writer expects of a stream other than an exact revision."""

    ANY = "any"
    """Append whatever the stream's state."""
    NO_STREAM = "no_stream"
    """The stream must not exist yet."""
    EXISTS = "exists"
    """The stream must already hold at least one event."""


Expected: TypeAlias = StreamState | int
"""A stream state, or the exact revision of the stream's last event."""


def _frozen_metadata(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append.

    Attributes:
        type: Event type; must match ``^[a-zA-Z0-9_.$:-]+$``.
        data: The JSON payload as UTF-8 bytes; the store keeps it byte for byte.
        metadata: String keys to string values (KurrentDB's multi-stream append
            accepts nothing else).
        id: The event id. Pass a deterministic id (:func:`event_id`) when the
            write may be retried.
    """

    type: str
    data: bytes
    metadata: Mapping[str, str] = field(default_factory=dict)
    id: uuid.UUID = field(default_factory=uuid.uuid4)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", _frozen_metadata(self.metadata))


_new: Final = object.__new__
_set: Final = object.__setattr__


def new_event(type_: str, data: bytes, metadata: Mapping[str, str], id_: uuid.UUID) -> NewEvent:
    """``NewEvent(type_, data, metadata, id_)``, built without the frozen dataclass's
    ``__init__`` and ``__post_init__`` (the engine makes one per event it writes): the
    same fields, the metadata copied read-only as ``__post_init__`` does. Nothing is
    checked here, as in the constructor: the store checks what it is asked to append
    (``tests/test_write_path.py`` compares the two)."""
    event: NewEvent = _new(NewEvent)
    _set(event, "type", type_)
    _set(event, "data", data)
    _set(event, "metadata", MappingProxyType(dict(metadata)))
    _set(event, "id", id_)
    return event


class RecordedEvent:
    """An event as the store holds it; immutable.

    Attributes:
        id: The id it was appended with.
        type: Its event type.
        data: The payload bytes exactly as appended.
        metadata: The metadata exactly as appended (store-added keys removed).
        stream: The stream it belongs to.
        revision: Its place in the stream, from 0.
        position: Its place in the global order over all streams.
        recorded_at: When the store committed it (UTC).

    Compares and hashes by value, like a frozen dataclass. A store may build
    it from raw columns (:meth:`from_raw`): the id, metadata and time are then
    decoded on first access, because replaying a long session reads many
    events whose ids and times nobody looks at.
    """

    __slots__ = (
        "_data",
        "_id",
        "_metadata",
        "_position",
        "_raw_id",
        "_raw_metadata",
        "_raw_time",
        "_recorded_at",
        "_revision",
        "_stream",
        "_type",
    )

    def __init__(
        self,
        *,
        id: uuid.UUID,
        type: str,
        data: bytes,
        metadata: Mapping[str, str],
        stream: str,
        revision: int,
        position: int,
        recorded_at: datetime,
    ) -> None:
        self._id: uuid.UUID | None = id
        self._type = type
        self._data = data
        self._metadata: Mapping[str, str] | None = _frozen_metadata(metadata)
        self._stream = stream
        self._revision = revision
        self._position = position
        self._recorded_at: datetime | None = recorded_at
        self._raw_id = b""
        self._raw_metadata = b""
        self._raw_time: int | None = None  # set from the store's column (from_raw)

    @classmethod
    def from_raw(
        cls,
        *,
        stream: str,
        position: int,
        revision: int,
        raw_id: bytes,
        type: str,
        data: bytes,
        raw_metadata: bytes,
        recorded_at_us: int,
    ) -> RecordedEvent:
        """Build from stored columns: 16 id bytes, metadata JSON, microseconds since the epoch."""
        event = cls.__new__(cls)
        event._id = None
        event._type = type
        event._data = data
        event._metadata = None
        event._stream = stream
        event._revision = revision
        event._position = position
        event._recorded_at = None
        event._raw_id = raw_id
        event._raw_metadata = raw_metadata
        event._raw_time = recorded_at_us
        return event

    @property
    def id(self) -> uuid.UUID:
        if self._id is None:
            self._id = uuid.UUID(bytes=self._raw_id)
        return self._id

    @property
    def id_text(self) -> str:
        """``str(event.id)``, the dashed lowercase hex of the id: for an event a store built
        from its columns, made from the stored 16 bytes with no ``uuid.UUID`` in between.

        Raises:
            ValueError, TypeError: The stored id is not 16 bytes (as :attr:`id` raises).
        """
        raw = self._raw_id
        if self._id is not None or type(raw) is not bytes or len(raw) != 16:
            return str(self.id)
        h = raw.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

    @property
    def type(self) -> str:
        return self._type

    @property
    def data(self) -> bytes:
        return self._data

    @property
    def metadata(self) -> Mapping[str, str]:
        if self._metadata is None:
            try:
                parsed = loads_utf8(self._raw_metadata)
            except (ValueError, TypeError, RecursionError):
                parsed = None
            if type(parsed) is not dict:  # a proxy would take a string for a mapping
                raise UnreadableMetadata(self._stream, self._revision)
            self._metadata = MappingProxyType(parsed)
        return self._metadata

    @property
    def stream(self) -> str:
        return self._stream

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def position(self) -> int:
        return self._position

    @property
    def recorded_at(self) -> datetime:
        if self._recorded_at is None:
            assert self._raw_time is not None  # from_raw sets one of the two
            self._recorded_at = datetime.fromtimestamp(self._raw_time / 1_000_000, UTC)
        return self._recorded_at

    @property
    def recorded_micros(self) -> int:
        """:attr:`recorded_at` as whole microseconds since the epoch: the stored column
        itself for an event a store built from its columns (no ``datetime`` made)."""
        if self._raw_time is None:
            return int(self.recorded_at.timestamp() * 1_000_000)
        return self._raw_time

    def _fields(self) -> tuple[Any, ...]:
        return (
            self.id,
            self.type,
            self.data,
            dict(self.metadata),
            self.stream,
            self.revision,
            self.position,
            self.recorded_at,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RecordedEvent):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash((self.id, self.stream, self.revision, self.position))

    def __repr__(self) -> str:
        return (
            f"RecordedEvent(id={self.id!r}, type={self.type!r}, stream={self.stream!r}, "
            f"revision={self.revision}, position={self.position}, data={self.data[:60]!r}, "
            f"metadata={dict(self.metadata)!r}, recorded_at={self.recorded_at!r})"
        )


def event_id(*parts: str | int) -> uuid.UUID:
    """Return a deterministic event id derived from ``parts``.

    The same parts always give the same id, so a retried write carries the
    ids of the first attempt and the store can recognise it.
    """
    return uuid.uuid5(_ID_NAMESPACE, "\x1f".join(str(part) for part in parts))


# What ``uuid.UUID(bytes=..., version=5)`` does to a SHA-1 digest: version 5, RFC 4122 variant.
_V5_CLEAR: Final = ~((0xF000 << 64) | (0xC000 << 48))
_V5_SET: Final = (5 << 76) | (0x8000 << 48)


def event_id_series(*parts: str | int) -> Callable[[int], uuid.UUID]:
    """Return ``n -> event_id(*parts, n)``, cheaper per id when one write needs several.

    The name's common prefix is joined once, each id is one SHA-1 of it and ``n`` (for
    names this short, cheaper than copying a hash of the prefix), and the UUID is made
    from its integer without ``uuid.UUID.__init__``'s checks: the same ids, bit for bit
    (``tests/test_write_path.py`` compares them).
    """
    prefix = _NAMESPACE_BYTES + "".join([f"{part}\x1f" for part in parts]).encode()

    def nth(n: int) -> uuid.UUID:
        digest = _sha1(prefix + str(n).encode(), usedforsecurity=False).digest()
        made: uuid.UUID = _new(uuid.UUID)
        _set(made, "int", (int.from_bytes(digest[:16], "big") & _V5_CLEAR) | _V5_SET)
        _set(made, "is_safe", _UNKNOWN_SAFETY)
        return made

    return nth


_NAMESPACE_BYTES: Final = _ID_NAMESPACE.bytes
_UNKNOWN_SAFETY: Final = uuid.SafeUUID.unknown
_sha1: Final = hashlib.sha1


def expected_matches(expected: Expected, head: int | None) -> bool:
    """Whether a stream whose last revision is ``head`` (None: no stream) is as ``expected``."""
    if expected is StreamState.ANY:
        return True
    if expected is StreamState.NO_STREAM:
        return head is None
    if expected is StreamState.EXISTS:
        return head is not None
    return expected == head


def expected_label(expected: Expected) -> int | str:
    """Return ``expected`` as it appears in a :class:`ConcurrencyError`."""
    return expected.value if isinstance(expected, StreamState) else expected
