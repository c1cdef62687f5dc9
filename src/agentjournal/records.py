"""A session tree as frozen, typed records (pure: no store, no Agents SDK).

A session tree is its session stream, every subsession a handoff opened (at any
depth), its authority log, its checkpoint stream and the journal's key
rotations; and, for a session with branches, every line: each branch's top
stream, the subsessions and continuations on it, its own authority log, and the
session's branch registry. :class:`Record` is one stored event decoded once, with
its chain position; :class:`TreeRecords` is a whole tree of them, as
:func:`agentjournal.walk.read_tree` reads it from a store and a bundle holds it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from itertools import repeat
from types import MappingProxyType
from typing import Any, Final

from agentjournal import events
from agentjournal._digests import data_digest
from agentjournal._fastjson import loads as fast_loads
from agentjournal.errors import (
    JournalError,
)
from agentjournal.events import HASH_KEY, PREV_KEY, SEQ_KEY
from agentjournal.store.contract import RecordedEvent
from agentjournal.streams import (
    KEYS_STREAM,
    authority_stream,
    ledger_stream,
    session_stream,
)

__all__ = ["DamagedEvent", "Record", "TreeRecords", "opened_stream"]

logger = logging.getLogger("agentjournal.records")


class DamagedEvent(JournalError):
    """Raised when a stored event cannot be read as any event agentjournal writes can: its
    data is not UTF-8, its metadata not an object of strings, its id malformed.

    Its message starts with ``stream@revision`` (``stream`` alone when the store could
    not say the revision).

    Attributes:
        stream: Where it is.
        revision: Its revision, when the store could say.
        message: What is wrong with it, without where.
    """

    def __init__(self, stream: str, revision: int | None, message: str) -> None:
        where = stream if revision is None else f"{stream}@{revision}"
        super().__init__(f"{where}: {message}")  # the one line a command prints says where
        self.stream, self.revision, self.message = stream, revision, message


def stored_columns(event: RecordedEvent) -> tuple[str, dict[str, str], str]:
    """A stored event's id as text, its metadata as a dict of its own, and its data as text,
    checked as every record is.

    Raises:
        DamagedEvent: It cannot be read as any event agentjournal writes can.
    """
    where = (event.stream, event.revision)
    try:
        event_id = event.id_text
    except (ValueError, TypeError):
        raise DamagedEvent(*where, "the event id is not 16 bytes") from None
    try:
        stored = event.metadata
        # A proxy's own copy is a dict's copy (dict() of a proxy goes key by key).
        metadata: Any = stored.copy() if type(stored) is MappingProxyType else dict(stored)
    except (ValueError, TypeError, RecursionError):
        raise DamagedEvent(*where, "the metadata is not a UTF-8 JSON object") from None
    if not (
        all(map(isinstance, metadata, repeat(str)))
        and all(map(isinstance, metadata.values(), repeat(str)))
    ):
        raise DamagedEvent(*where, "the metadata does not map strings to strings")
    if not isinstance(event.type, str) or not isinstance(event.data, bytes):
        raise DamagedEvent(*where, "the event type or data has the wrong column type")
    try:
        text = event.data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DamagedEvent(*where, f"the data is not UTF-8 text (byte {error.start})") from None
    return event_id, metadata, text


@dataclass(frozen=True)
class Record:
    """One event of a session tree, as read from a store or from a bundle.

    Attributes:
        stream: Its stream.
        revision: Its place there (from 0).
        id: Its event id (dashed lowercase UUID).
        type: Its type.
        data: Its data as UTF-8 text; None when a redacted bundle withheld it.
        data_sha256: The hex SHA-256 of its data.
        metadata: Its metadata (strings to strings).
        view: Its redacted view, when the data is withheld and it has one.
        position: Its place in the store's global order (None from a bundle).
        recorded_at: When the store recorded it (None from a bundle).
    """

    stream: str
    revision: int
    id: str
    type: str
    data: str | None
    data_sha256: str
    metadata: Mapping[str, str] = field(hash=False)
    view: Mapping[str, Any] | None = field(default=None, hash=False)
    position: int | None = None
    recorded_at: datetime | None = None

    def __post_init__(self) -> None:
        # Read-only: a record is evidence; nothing downstream may edit it in place.
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))

    @cached_property
    def body(self) -> dict[str, Any] | None:
        """The data as a JSON object (decoded once), else the view, else None."""
        if self.data is None:
            return dict(self.view) if self.view is not None else None
        try:  # NaN and Infinity are not JSON: such data is shown as text, never as a body
            parsed = fast_loads(self.data, _STRICT_JSON)
        except (ValueError, RecursionError):
            return None
        return parsed if isinstance(parsed, dict) else None

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data: its place, ids, type, metadata (with its chain
        position) and data — parsed when it is a JSON object, else the text as stored (None
        when withheld). What ``show --json``, ``tail --json`` and the viewer print."""
        return {
            "stream": self.stream,
            "revision": self.revision,
            "position": self.position,
            "id": self.id,
            "type": self.type,
            "recorded_at": self.recorded_at.isoformat() if self.recorded_at else None,
            "data_sha256": self.data_sha256,
            "metadata": dict(self.metadata),
            "data": self.body if self.body is not None else self.data,
        }

    @property
    def seq(self) -> str | None:
        """``aj.seq``: its place in its stream's chain, as written."""
        return self.metadata.get(SEQ_KEY)

    @property
    def prev(self) -> str | None:
        """``aj.prev``: the hash of the event before it, as written."""
        return self.metadata.get(PREV_KEY)

    @property
    def hash(self) -> str | None:
        """``aj.hash``: its chain hash, as written."""
        return self.metadata.get(HASH_KEY)

    @property
    def opens(self) -> str | None:
        """The subsession this parent copy of ``SubagentStarted`` opens, else None."""
        if self.type != events.SUBAGENT_STARTED:
            return None
        return _child_of(self.stream, self.body)

    @classmethod
    def of(cls, event: RecordedEvent) -> Record:
        """A stored event as a record.

        Raises:
            DamagedEvent: It cannot be read as any event agentjournal writes can.
        """
        event_id, metadata, text = stored_columns(event)
        fields = (
            event.stream,
            event.revision,
            event_id,
            event.type,
            text,
            metadata,
            None,
            event.position,
            event.recorded_at,
        )
        if cls is not Record or type(metadata) is not dict:
            return cls(*fields[:5], data_digest(event.data), *fields[5:])
        # What __init__ and __post_init__ leave, set at once (a frozen dataclass sets each
        # field by a call): the metadata is this record's own copy, read-only behind a proxy.
        # The data's digest is left out: made from the data when first asked (_LazyDigest).
        record = object.__new__(cls)
        record.__dict__.update(zip(_FIELDS_BUT_DIGEST, fields, strict=True))
        record.__dict__["metadata"] = MappingProxyType(metadata)
        return record


class _LazyDigest:
    """``Record.data_sha256`` when a record was built without it (:meth:`Record.of`): the
    digest of the data's UTF-8 bytes — the stored bytes, which decoded strictly as UTF-8 —
    made on first access and kept in the record's ``__dict__``, where every record built
    with it holds it. A non-data descriptor: the instance's value, when set, comes first,
    so ``__init__``, equality, hashing, ``repr``, pickling and ``vars`` see the field as
    any dataclass field."""

    def __get__(self, record: Record | None, owner: type[Record]) -> Any:
        if record is None:
            raise AttributeError("data_sha256")  # no class default: the field stays required
        if record.data is None:  # withheld data: a record is built with its digest then
            raise AttributeError("data_sha256")
        digest = record.__dict__["data_sha256"] = data_digest(record.data.encode())
        return digest


_FIELDS: Final = tuple(f.name for f in dataclasses.fields(Record))
_FIELDS_BUT_DIGEST: Final = tuple(name for name in _FIELDS if name != "data_sha256")
Record.data_sha256 = _LazyDigest()  # type: ignore[assignment]  # after @dataclass


@dataclass(frozen=True)
class TreeRecords:
    """A session tree as records, stream by stream.

    Attributes:
        session_id: The session.
        streams: Stream -> its records in revision order: the session stream, every
            subsession a handoff opened, then each branch's streams (its top stream, its
            subsessions and continuations), then the authority logs (the session's, then
            each branch's), the branch registry, the checkpoint stream and the journal's
            key rotations when they exist.
    """

    session_id: str
    streams: Mapping[str, Sequence[Record]] = field(default_factory=dict)

    @property
    def session_stream(self) -> str:
        return session_stream(self.session_id)

    def records(self) -> list[Record]:
        """Every record, stream by stream."""
        return [record for stream in self.streams.values() for record in stream]

    def main_line(self) -> TreeRecords:
        """The main line alone (pure): the session stream, the subsessions reached from it
        through their ``SubagentStarted`` (at any depth), the session's authority log, the
        checkpoints and the key rotations; no branch stream, branch log or registry. What a
        reader of the session's own history (``replay --at``) folds: two lines share
        message indexes below their fork."""
        keep = {authority_stream(self.session_id), ledger_stream(self.session_id), KEYS_STREAM}
        pending = [self.session_stream]
        while pending:
            name = pending.pop()
            if name in keep:
                continue
            keep.add(name)
            pending.extend(r.opens for r in self.streams.get(name, ()) if r.opens is not None)
        return TreeRecords(
            self.session_id, {name: rs for name, rs in self.streams.items() if name in keep}
        )

    def checkpoint_heads(self) -> dict[str, tuple[int, str]]:
        """What one checkpoint of every line names (pure): each stream's last revision and
        ``aj.hash`` — every line's top stream (a deleted branch's too), its open subsessions
        and continuations, every authority log, the registry — but the checkpoint stream's,
        the key rotations' and a subsession's closed by its twin: a verifier covers that one
        through its covered close. What ``bundle export`` signs with a key."""
        closes = {
            record.id: record.metadata[events.CLOSES_KEY]
            for stream in self.streams.values()
            for record in stream
            if events.CLOSES_KEY in record.metadata
        }
        heads: dict[str, tuple[int, str]] = {}
        for name, stream in self.streams.items():
            last = stream[-1] if stream else None
            if (
                last is None
                or last.hash is None
                or name in (ledger_stream(self.session_id), KEYS_STREAM)
            ):
                continue  # nothing to vouch for (an unchained event fails the chain check)
            twin = last.metadata.get(events.TWIN_KEY, "")
            if last.type == events.SUBAGENT_COMPLETED and closes.get(twin) == name:
                continue
            heads[name] = (last.revision, last.hash)
        return heads


def opened_stream(event: RecordedEvent) -> str | None:
    """The subsession a stored parent copy of ``SubagentStarted`` opens; None for anything
    else, and for a damaged event (a verifier reports what it cannot find)."""
    if event.type != events.SUBAGENT_STARTED:
        return None
    try:
        body = json.loads(event.data)
    except (ValueError, RecursionError):
        return None
    return _child_of(event.stream, body)


def _child_of(stream: str, body: object) -> str | None:
    """The ``subsession_stream`` of a ``SubagentStarted`` body when it names another stream
    than the event's own: the parent copy (the twin on the subsession names itself). Told
    by the data, not by ``aj.*`` metadata, so a tree written by another writer walks too."""
    child = body.get("subsession_stream") if isinstance(body, dict) else None
    return child if isinstance(child, str) and child != stream else None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


# Made once: json.loads with an option builds a decoder per call.
_STRICT_JSON = json.JSONDecoder(parse_constant=_not_json).decode
