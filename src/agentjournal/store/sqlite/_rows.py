"""The events table's rows: inserting a write's events, and rows back into recorded events."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any, Final

from agentjournal.errors import (
    UndecodableEvent,
)
from agentjournal.store.contract import (
    NewEvent,
    RecordedEvent,
    encode_metadata,
)
from agentjournal.store.sqlite._stored import Packer, Unpacker

# A row's columns as :func:`_recorded` takes them (after the stream's name).
_EVENT_COLUMNS = (
    "e.position, e.revision, e.id, e.type, e.data, e.metadata, e.recorded_at, e.dictionary"
)


def _fetch_events(
    db: sqlite3.Connection, stream: str, sql: str, params: tuple[Any, ...]
) -> list[Any]:
    """Rows of events; a text column that is not UTF-8 (written by something else) is
    damage, not an outage: :class:`UndecodableEvent`, which no retry can cure."""
    try:
        return db.execute(sql, params).fetchall()
    except sqlite3.OperationalError as error:
        if "decode" not in str(error).lower():
            raise
        raise UndecodableEvent(stream, f"{stream}: an event cannot be read: {error}") from None


def _stream_id(db: sqlite3.Connection, name: str) -> int | None:
    row = db.execute("SELECT id FROM streams WHERE name = ?", (name,)).fetchone()
    return None if row is None else int(row[0])


# One INSERT of up to this many rows (8 parameters each; SQLite's default cap is 32,766).
_ROWS_PER_INSERT: Final = 64
_INSERT_EVENTS: Final = (
    "INSERT INTO events(stream_id, revision, id, type, data, metadata, dictionary, recorded_at)"
    " VALUES "
)
_EVENT_ROW: Final = "(?, ?, ?, ?, ?, ?, ?, ?)"


@functools.cache
def _insert_sql(rows: int) -> str:
    return _INSERT_EVENTS + ", ".join([_EVENT_ROW] * rows)


def _insert_events(
    db: sqlite3.Connection,
    stream_id: int,
    current: int,
    new: Sequence[NewEvent],
    now: int,
    packer: Packer,
) -> int:
    """Insert ``new`` after revision ``current`` in their stored form (``packer``); the
    position of the last one.

    A write of a few events is one statement whose rows SQLite inserts in order, so
    its last row id is the write's position (no ``last_insert_rowid()`` query).
    """
    pack = packer.pack
    rows = [
        (
            stream_id,
            current + offset,
            event.id.bytes,
            event.type,
            *pack(event.data, encode_metadata(event.metadata)),
            now,
        )
        for offset, event in enumerate(new, start=1)
    ]
    if len(rows) <= _ROWS_PER_INSERT:
        position = db.execute(_insert_sql(len(rows)), [v for row in rows for v in row]).lastrowid
        assert position is not None
        return position
    db.executemany(_INSERT_EVENTS + _EVENT_ROW, rows)
    return int(db.execute("SELECT last_insert_rowid()").fetchone()[0])


def _last_position(db: sqlite3.Connection) -> int:
    row = db.execute("SELECT max(position) FROM events").fetchone()
    return int(row[0] or 0)


_EARLIEST_US: Final = -62_135_510_400_000_000  # 0001-01-02T00:00:00Z
_LATEST_US: Final = 253_402_214_400_000_000  # 9999-12-31T00:00:00Z
"""The recorded times a row may hold: what ``datetime`` represents, a day clear of its ends
(a time is a row's integer microseconds, which something other than agentjournal can rewrite)."""


def _recorded(
    unpacker: Unpacker,
    stream: str,
    position: int,
    revision: int,
    event_id: bytes,
    type_: object,
    data: object,
    metadata: object,
    recorded_at: object,
    dictionary: int | None,
) -> RecordedEvent:
    """The recorded event of one row (``_EVENT_COLUMNS``), its values as written."""
    if dictionary is None:
        stored_data, stored_metadata = _as_bytes(data), _as_bytes(metadata)
    else:
        unpack = unpacker.unpack
        stored_data = unpack(_as_bytes(data), dictionary, stream)
        stored_metadata = unpack(_as_bytes(metadata), dictionary, stream)
    if type(recorded_at) is not int or not _EARLIEST_US <= recorded_at <= _LATEST_US:
        raise UndecodableEvent(
            stream, f"{stream}@{revision}: the recorded time is not a time (UTC microseconds)"
        )
    return RecordedEvent.from_raw(
        stream=stream,
        position=position,
        revision=revision,
        raw_id=event_id,
        type=_as_text(stream, revision, type_),
        data=stored_data,
        raw_metadata=stored_metadata,
        recorded_at_us=recorded_at,
    )


# SQLite keeps a value's type per row: something other than agentjournal can rewrite a
# column with another type (``UPDATE events SET data = replace(data, ...)`` stores TEXT).
# The read side hands out the types the contract promises all the same, so an edit reaches
# a reader as what it is, changed content (the chain hash no longer matches), never as a
# TypeError deep in a reader.


def _as_bytes(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):  # sqlite3 decoded it from UTF-8: it encodes back exactly
        return value.encode("utf-8")
    return b"" if value is None else str(value).encode("utf-8")


def _as_text(stream: str, revision: int, value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise UndecodableEvent(
                stream, f"{stream}@{revision}: the event type is not UTF-8 text"
            ) from None
    return "" if value is None else str(value)
