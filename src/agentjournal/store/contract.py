"""The event store contract: records, expected states and the ``EventStore`` protocol.

Both backends (:mod:`agentjournal.store.sqlite`, :mod:`agentjournal.store.kurrentdb`)
implement this contract with KurrentDB's stream semantics, and both pass the one
conformance suite in :mod:`agentjournal.testing.store_conformance`:

* A stream is an ordered list of events. Revisions start at 0 and are gapless.
* Every write states what it expects of the stream: :attr:`StreamState.ANY`,
  :attr:`StreamState.NO_STREAM`, :attr:`StreamState.EXISTS` or an exact revision
  (the revision of the stream's last event). A mismatch raises
  :class:`~agentjournal.errors.ConcurrencyError` and writes nothing.
* :meth:`EventStore.append_many` is one atomic transaction across streams: all
  of its streams are written or none is. A stream appears at most once per call
  (compared case-insensitively, as KurrentDB does).
* Idempotency: re-sending the same event ids at the same position with an exact
  revision or ``NO_STREAM`` succeeds without writing twice and returns what the
  first write returned; ids that only partly match are a conflict. With ``ANY``
  or ``EXISTS`` a retry is not guaranteed to be recognised: writers that retry
  should use exact revisions and deterministic ids (see :func:`event_id`).
* Every event also has a global position: one total order over all streams,
  strictly increasing, not necessarily gapless.
* Invalid input raises :class:`~agentjournal.errors.InvalidInput` before
  anything is written (see :func:`validate_append`).

A store may also keep a **read model** (optional; SQLite does, KurrentDB does not):
the visible items of each session tree, changed in the same transaction as the
events that change them. A writer that knows what its events do to a tree says so
on each request (:attr:`AppendRequest.model`, a :class:`ModelChange`); a store
without the capability ignores it. What the contract promises of a store that has
it (``read_model``, see :class:`ModelSnapshot`):

* The model is derived, never a source of truth: events are stored unchanged, and
  nothing that verifies or shows a session reads the model.
* A stream created by a request with a :class:`ModelChange` joins its tree. Its
  model stays *current* while every event appended to it came with a change for
  that tree (its ``modelled`` revision follows its head); one append without one
  (another writer, an older agentjournal, a plain :meth:`EventStore.append`)
  leaves it behind for good, and then ``read_model`` of its tree answers None:
  the reader reads the events, as a store without the capability always does. A
  stream that existed before it was first written with a change never is current.
* The changes of one request are applied once: a retry the store recognises
  (same ids at the same revision) changes nothing, a write that fails or
  conflicts changes nothing.
* An item's place must fit its packed key (:func:`model_key`): an item of a part
  from :data:`MODEL_PARTS`, or of a revision below 0 or from :data:`MODEL_REVISIONS`,
  makes its tree not current, and ``read_model`` answers None for a tree with a head
  revision from :data:`MODEL_REVISIONS`.
* A tree started by a :class:`ModelCopy` holds rows whose places are on another tree's
  streams; its snapshot's ``names`` name those streams too (its ``heads`` only its own).
* ``read_model`` answers None when an item is on a stream that is not one of the tree's,
  unless it is in a copied prefix (every such row before every row on the tree's own
  streams, each on a stream that exists): a hand-edited file; the events answer.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from types import MappingProxyType
from typing import Any, Final, Protocol, TypeAlias, overload, runtime_checkable

from agentjournal.errors import InvalidInput

__all__ = [
    "MAX_EVENT_BYTES",
    "RESERVED_METADATA_PREFIXES",
    "AppendRequest",
    "AppendResult",
    "EventStore",
    "ModelAdd",
    "ModelChange",
    "ModelClear",
    "ModelCopy",
    "ModelOp",
    "ModelRemove",
    "ModelItems",
    "ModelRow",
    "ModelSnapshot",
    "MODEL_PARTS",
    "MODEL_REVISIONS",
    "model_key",
    "model_place",
    "Expected",
    "NewEvent",
    "RecordedEvent",
    "StreamState",
    "event_id",
    "expected_label",
    "expected_matches",
    "validate_append",
    "validate_stream_name",
]

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
        self._raw_time = 0

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
    def type(self) -> str:
        return self._type

    @property
    def data(self) -> bytes:
        return self._data

    @property
    def metadata(self) -> Mapping[str, str]:
        if self._metadata is None:
            self._metadata = MappingProxyType(json.loads(self._raw_metadata.decode()))
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
            self._recorded_at = datetime.fromtimestamp(self._raw_time / 1_000_000, UTC)
        return self._recorded_at

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


@dataclass(frozen=True, slots=True)
class ModelAdd:
    """A read model change: the item at ``index`` is visible (see :class:`ModelChange`).

    Attributes:
        index: Its session-wide ``message_index`` (>= 0).
        stream: The stream of the event that holds it.
        revision: That event's revision.
        part: Which item of that event (0 unless an event holds several).
        text: The item's exact JSON text.
        plain: The writer's mark that ``text`` is plain for a fast JSON parser (for
            agentjournal: no 19 digits in a row); a snapshot says whether every item
            ever added to its tree was so marked (:attr:`ModelSnapshot.plain`).
    """

    index: int
    stream: str
    revision: int
    part: int
    text: str
    plain: bool = False


@dataclass(frozen=True, slots=True)
class ModelRemove:
    """A read model change: the item at ``index``, held at (stream, revision, part), is hidden."""

    index: int
    stream: str
    revision: int
    part: int


@dataclass(frozen=True, slots=True)
class ModelClear:
    """A read model change: every item up to ``through_index`` is hidden, and no item
    added later at or below it is visible."""

    through_index: int


@dataclass(frozen=True, slots=True)
class ModelCopy:
    """A read model change that starts a new tree as another tree's prefix (a branch,
    DESIGN §17.2 #3): the ``source`` tree's visible items below index ``below`` become
    this tree's, each at the same place (the source's stream, revision and part) with the
    same text, and the source's clear floor and plain mark with them.

    Only as the first op of the request that creates the tree's root stream. The copy is
    applied only if, at that moment (after the requests before it in the same write),
    every stream of the source tree is current and exactly at ``heads``, one entry per
    stream; otherwise (or anywhere else) the new tree is not current, and its reads take
    the events. A writer sends it only when it knows the source's rows below ``below``
    are exactly the items visible at the new tree's start.

    Attributes:
        source: The source tree's root stream.
        below: Rows with an index below this are copied.
        heads: Every stream of the source tree -> the revision it must be at.
    """

    source: str
    below: int
    heads: Mapping[str, int]


ModelOp: TypeAlias = ModelAdd | ModelRemove | ModelClear | ModelCopy
"""One change to a tree's visible items."""


@dataclass(frozen=True, slots=True)
class ModelChange:
    """What a request does to its tree's read model (a store without one ignores it).

    Attributes:
        tree: The tree's root stream (a session's stream names its tree).
        ops: The changes, applied in order, after every request of the write has
            been appended; a request of the tree that changes nothing visible
            still carries its tree (no ops), so the stream stays current.
    """

    tree: str
    ops: Sequence[ModelOp] = ()


MODEL_PARTS: Final = 256
"""A read model keeps items of parts below this (a part is 0 unless an event holds several
items); an item of a higher part makes its tree not current (the events answer)."""

MODEL_REVISIONS: Final = 1 << 32
"""A read model answers for trees whose streams' revisions are below this (else None)."""


def model_key(stream: int, revision: int, part: int) -> int:
    """A read model item's place, (stream number, revision, part), packed in one integer
    (:attr:`ModelSnapshot.items`): ``stream << 40 | revision << 8 | part``, for a
    revision below :data:`MODEL_REVISIONS` and a part below :data:`MODEL_PARTS`."""
    return stream << 40 | revision << 8 | part


def model_place(key: int) -> tuple[int, int, int]:
    """The (stream number, revision, part) packed in ``key`` (:func:`model_key`)."""
    return key >> 40, (key >> 8) & 0xFFFF_FFFF, key & 0xFF


ModelRow: TypeAlias = tuple[int, int, str]
"""A read model's item: ``(index, key, text)``, the key its place (:func:`model_key`)."""

_JOIN: Final = ",\n"


class ModelItems(Sequence[ModelRow]):
    """A read model's visible items by ascending index (:attr:`ModelSnapshot.items`), as
    a store read them: a sequence of ``(index, key, text)`` rows, made only when asked.

    A store that reads them in one row (SQLite: one aggregate, no row per item) gives
    :meth:`joined`: every text in order joined by ``",\n"``, which no text holds, so that
    ``"[" + texts + "]"`` is the JSON array of the items (one parse for all) and the texts
    split back exactly; the keys and indexes as comma-separated decimals (or a ``range``
    of indexes when they have no gap), parsed only when rows are made. :meth:`of_rows`
    holds rows as they are (a text with a newline, a store that reads rows).
    """

    __slots__ = ("_indexes", "_keys", "_length", "_rows", "texts")

    def __init__(
        self,
        texts: str | None,
        keys: str,
        indexes: str | range,
        count: int,
        rows: list[ModelRow] | None = None,
    ) -> None:
        self.texts = texts
        """Every item's text in index order joined by ``",\n"`` (None: held as rows)."""
        self._length = count
        self._keys = keys
        self._indexes = indexes
        self._rows = rows

    @classmethod
    def joined(cls, texts: str, keys: str, indexes: str | range, count: int) -> ModelItems:
        """Items read in one row: ``count`` texts joined by ``",\n"`` (none holding a
        newline), their keys and indexes (comma-separated, or a range of indexes)."""
        return cls(texts, keys, indexes, count)

    @classmethod
    def of_rows(cls, rows: Sequence[ModelRow]) -> ModelItems:
        """Items held as ``(index, key, text)`` rows."""
        return cls(None, "", "", len(rows), list(rows))

    def rows(self) -> list[ModelRow]:
        """Every item as an ``(index, key, text)`` row (made once)."""
        if self._rows is None:
            if not self._length:
                self._rows = []
            else:
                assert self.texts is not None
                self._rows = list(
                    zip(
                        _numbers(self._indexes),
                        map(int, self._keys.split(",")),
                        self.texts.split(_JOIN),
                        strict=True,
                    )
                )
        return self._rows

    def last(self, n: int) -> list[ModelRow]:
        """The newest ``n`` (> 0) items as rows, without making the others'."""
        if self._rows is not None or self.texts is None or n >= self._length:
            return self.rows()[-n:]
        indexes = self._indexes
        return list(
            zip(
                indexes[-n:] if isinstance(indexes, range) else _numbers(indexes, n),
                map(int, self._keys.rsplit(",", n)[-n:]),
                self.texts.rsplit(_JOIN, n)[-n:],
                strict=True,
            )
        )

    def chars(self) -> int:
        """The length of every item's text together."""
        if self._rows is not None or self.texts is None:
            return sum(len(text) for _, _, text in self.rows())
        return len(self.texts) - len(_JOIN) * (self._length - 1) if self._length else 0

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> ModelRow: ...
    @overload
    def __getitem__(self, index: slice) -> list[ModelRow]: ...
    def __getitem__(self, index: int | slice) -> ModelRow | list[ModelRow]:
        return self.rows()[index]

    def __iter__(self) -> Iterator[ModelRow]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return self.rows() == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable rows cache: not hashable

    def __repr__(self) -> str:
        return f"ModelItems({self.rows()!r})"


def _numbers(text: str | range, last: int | None = None) -> Sequence[int]:
    """Comma-separated decimals as integers (only the ``last`` ones if given); a range
    as it is."""
    if isinstance(text, range):
        return text if last is None else text[-last:]
    if last is None:
        return list(map(int, text.split(",")))
    return list(map(int, text.rsplit(",", last)[-last:]))


@dataclass(frozen=True, slots=True)
class ModelSnapshot:
    """A tree's read model as of one moment (``read_model``, one read transaction).

    Attributes:
        heads: Every stream of the tree -> its last revision.
        last: The last event of the tree's root stream (the other streams' last events,
            where a reader needs them, are read apart and must be at :attr:`heads`).
        names: Stream number -> name, for :attr:`items`.
        items: The visible items by ascending index, each ``(index, key, text)``: the
            key is where the item lives packed in one integer, :func:`model_key`; a
            :class:`ModelItems` when the store read them in one row (SQLite).
        floor: The highest index a clear has hidden (-1: none).
        plain: Every item ever added to the tree was marked ``plain``
            (:attr:`ModelAdd.plain`).
    """

    heads: Mapping[str, int]
    last: RecordedEvent
    names: Mapping[int, str]
    items: Sequence[ModelRow]
    floor: int
    plain: bool


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

    The SHA-1 of the common prefix is computed once and copied per id, and the
    UUID is made from its integer without ``uuid.UUID.__init__``'s checks: the
    same ids, bit for bit (``tests/test_write_path.py`` compares them).
    """
    prefix = hashlib.sha1(
        _ID_NAMESPACE.bytes + "".join(f"{part}\x1f" for part in parts).encode(),
        usedforsecurity=False,
    )
    new = object.__new__
    set_field = object.__setattr__

    def nth(n: int) -> uuid.UUID:
        digest = prefix.copy()
        digest.update(str(n).encode())
        value = (int.from_bytes(digest.digest()[:16], "big") & _V5_CLEAR) | _V5_SET
        made: uuid.UUID = new(uuid.UUID)
        set_field(made, "int", value)
        set_field(made, "is_safe", uuid.SafeUUID.unknown)
        return made

    return nth


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


def validate_stream_name(stream: object) -> str:
    """Return ``stream`` if it is a valid stream name, else raise InvalidInput.

    A stream name is 1 to 1024 bytes of printable ASCII without whitespace and
    must not start with ``$`` (KurrentDB reserves those for system streams).
    """
    if not isinstance(stream, str) or not stream:
        raise InvalidInput(f"a stream name must be a non-empty string, got {stream!r}")
    if len(stream) > MAX_STREAM_NAME_BYTES or not _STREAM_NAME.fullmatch(stream):
        raise InvalidInput(
            f"invalid stream name {stream[:80]!r}: use at most {MAX_STREAM_NAME_BYTES} "
            "printable ASCII characters without whitespace"
        )
    if stream.startswith("$"):
        raise InvalidInput(f"invalid stream name {stream!r}: names starting with '$' are reserved")
    return stream


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
    if not isinstance(event.type, str) or not _EVENT_TYPE.fullmatch(event.type):
        raise InvalidInput(
            f"invalid event type {event.type!r} for {stream!r}: must match ^[a-zA-Z0-9_.$:-]+$"
        )
    if event.type.startswith("$"):
        raise InvalidInput(
            f"invalid event type {event.type!r} for {stream!r}: types starting with '$' are "
            "KurrentDB system events"
        )
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
        if isinstance(request.events, (str, bytes)) or not isinstance(request.events, Sequence):
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


@runtime_checkable
class EventStore(Protocol):
    """An append-only store of streams with KurrentDB semantics (see module docs).

    Implementations are async, safe to share between asyncio tasks, and must be
    closed with :meth:`close` (or used as an async context manager).
    """

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        """Append ``events`` to ``stream`` if it is in the ``expected`` state.

        With no events the call only checks ``expected`` and reports the
        stream's current revision (``-1`` if it does not exist) and the
        store's last position.

        Raises:
            ConcurrencyError: The stream is not in the expected state.
            StreamDeleted: The stream was deleted.
            InvalidInput: The request is malformed; nothing was written.
            StoreUnavailable: The store could not be reached.
        """
        ...

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        """Append to several streams in one atomic transaction.

        Returns one result per request, in request order. If any stream is not
        in its expected state nothing at all is written.

        Raises:
            ConcurrencyError: Some stream was not in its expected state.
            InvalidInput: The request is malformed; nothing was written.
            StoreUnavailable: The store could not be reached.
        """
        ...

    async def read(
        self,
        stream: str,
        *,
        from_revision: int | None = None,
        backwards: bool = False,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        """Read events of ``stream``.

        Forwards starts at ``from_revision`` (default 0); backwards starts at
        ``from_revision`` (default the last event) and goes down. Both include
        ``from_revision``. ``limit`` caps the count; a tail read
        (``backwards=True, limit=N``) costs O(N) whatever the stream's length.

        Raises:
            StreamNotFound: The stream does not exist.
        """
        ...

    async def head(self, stream: str) -> int | None:
        """Return the revision of the stream's last event, or None if it does not exist.

        Raises:
            StreamDeleted: The stream was tombstoned (KurrentDB).
            StoreUnavailable: The store could not be reached.
        """
        ...

    async def read_all(
        self, *, from_position: int | None = None, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read events of all streams in global order, from ``from_position`` inclusive.

        Pass positions the store gave out: on KurrentDB any other position
        costs a backward scan to the nearest event boundary.

        Raises:
            StoreUnavailable: The store could not be reached.
        """
        ...

    def subscribe(self, *, after_position: int | None = None) -> AsyncIterator[RecordedEvent]:
        """Yield every event after ``after_position`` (exclusive), then follow new ones.

        A catch-up subscription over the global order: it first delivers what
        is stored, then each new event shortly after it is committed (within
        100 ms), without busy polling. It ends only when the consumer stops
        iterating or the store is closed.

        Raises:
            StoreUnavailable: The store cannot be reached (after retries).
        """
        ...

    async def close(self) -> None:
        """Release connections; the store cannot be used afterwards."""
        ...
