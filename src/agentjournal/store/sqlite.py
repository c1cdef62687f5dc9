"""The embedded event store: KurrentDB stream semantics in one SQLite file.

Layout (schema version 2, kept in ``PRAGMA user_version``)::

    streams(id, name UNIQUE, head,          one row per stream; head = last revision;
            tree, modelled)                 its tree's root stream, and the revision
                                            the read model reflects (see below)
    events(position INTEGER PRIMARY KEY,     the global order: rowids, which only grow
           stream_id, revision,              because no row is ever deleted
           id, type, data, metadata,         UNIQUE(stream_id, revision): tail reads
           recorded_at)                      are an index range scan, O(limit)
    items(tree, idx, stream_id, revision,    the read model: each tree's visible items,
          part, item)                        keyed by (root stream id, message index)
    trees(tree, floor, mixed)                the highest index a clear has hidden; whether
                                             an item not marked plain was ever added

The read model (``items``, ``trees``, ``streams.tree``/``modelled``) is derived
from the events, written in the same transaction as they are, and read only to
answer a full read of a session quickly (:meth:`SQLiteEventStore.read_model`);
it is a cache with a high-water mark per stream, never a record. A version 1
file is upgraded in place when opened (one transaction): its streams join no
tree, so their sessions are read from their events as before.

Every call runs on one worker thread that owns the connection, so the event
loop never blocks on SQLite. Writes take ``BEGIN IMMEDIATE``: the expected-state
check and the insert happen under SQLite's single write lock, which serialises
writers in this process and in other processes on the same file (WAL mode,
``synchronous=FULL``: a returned append is on disk). A writer that cannot get
the lock within ``busy_timeout`` gets :class:`StoreUnavailable`. Writes that
wait for the thread together commit together (group commit: one transaction,
one fsync, a SAVEPOINT per write so each is still all-or-nothing on its own);
a write's drain starts at the end of its event loop's current pass, so the
writes of sessions woken by one commit share the next.

Subscriptions wake at once for appends made through this object and notice
appends by other processes with a cheap check every 50 ms.

One read runs on the caller's thread instead: :meth:`SQLiteEventStore.heads_now`,
a few streams' heads on a read-only connection of its own, which never waits
(a warm session read asks it whether anything moved before hopping).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import sqlite3
import threading
import time
import urllib.parse
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

from agentjournal._gc import no_collection
from agentjournal.errors import (
    ConcurrencyError,
    InvalidInput,
    StoreUnavailable,
    StreamNotFound,
    UndecodableEvent,
)
from agentjournal.store.abilities import (
    BatchedReads,
    HeadsProbe,
    ReadModel,
    RevisionIndex,
    TypedReads,
)
from agentjournal.store.contract import (
    MODEL_PARTS,
    MODEL_REVISIONS,
    AppendRequest,
    AppendResult,
    Expected,
    ModelAdd,
    ModelClear,
    ModelCopy,
    ModelItems,
    ModelSnapshot,
    NewEvent,
    RecordedEvent,
    StreamState,
    encode_metadata,
    expected_label,
    expected_matches,
    model_key,
    validate_append,
    validate_stream_name,
)

__all__ = ["SQLiteEventStore"]

SCHEMA_VERSION: Final = 2
_POLL_SECONDS: Final = 0.05
_SUBSCRIBE_BATCH: Final = 500
_SMALL_READ: Final = 256  # reads up to this many events run with the collector as it is
# At most this many writes share one transaction: a bound on how long one group
# holds the write lock and how much one failed commit sends back for a retry.
_GROUP_LIMIT: Final = 256
# The compare-and-set's stream ids are a cache: a long-lived store writes to ever more
# streams (one tree per session), so it is emptied when it holds this many (~10 MiB).
_STREAM_IDS_KEPT: Final = 65_536
_T = TypeVar("_T")

# The read model (schema version 2). WITHOUT ROWID: a full read is one range scan of the
# primary key, with the row in the key's b-tree (no second lookup per item).
_MODEL_SCHEMA = """
CREATE INDEX IF NOT EXISTS streams_by_tree ON streams(tree);
CREATE TABLE IF NOT EXISTS items (
    tree      INTEGER NOT NULL,
    idx       INTEGER NOT NULL,
    stream_id INTEGER NOT NULL,
    revision  INTEGER NOT NULL,
    part      INTEGER NOT NULL,
    item      TEXT    NOT NULL,
    PRIMARY KEY (tree, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trees (
    tree  INTEGER PRIMARY KEY,
    floor INTEGER NOT NULL,
    mixed INTEGER NOT NULL
);
"""

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS streams (
    id       INTEGER PRIMARY KEY,
    name     TEXT    NOT NULL UNIQUE,
    head     INTEGER NOT NULL,
    tree     TEXT    NULL,
    modelled INTEGER NULL
);
CREATE TABLE IF NOT EXISTS events (
    position    INTEGER PRIMARY KEY,
    stream_id   INTEGER NOT NULL REFERENCES streams(id),
    revision    INTEGER NOT NULL,
    id          BLOB    NOT NULL,
    type        TEXT    NOT NULL,
    data        BLOB    NOT NULL,
    metadata    BLOB    NOT NULL,
    recorded_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_stream ON events(stream_id, revision);
"""
    + _MODEL_SCHEMA
)

_TABLES: Final = frozenset({"streams", "events", "items", "trees"})

# A model read packs each item's place in one integer (store.base.model_key) in the query:
# one column a row instead of three. SQLite's integers have 64 bits, so stream numbers
# from this one are packed in Python instead.
_SQL_KEYS = 1 << 23
_MODEL_ITEMS: Final = (
    "SELECT idx, (stream_id << 40) | (revision << 8) | part, item FROM items "
    "WHERE tree = ? ORDER BY idx"
)
# A model read's items in one row (store.base.ModelItems.joined): the texts joined by
# ",\n", the keys as decimals, their count, the first and last index, and how many items
# name a stream outside the tree's (?2..?3: the tree's stream numbers, when they have no
# gap; see _ITEMS_ELSEWHERE). One row instead of one per item: each row costs sqlite3 a
# tuple and its objects (~0.45 µs); group_concat appends in C. Its order is the scan's:
# the primary key's b-tree from (tree, lowest idx) up, the only way SQLite reads
# ``WHERE tree = ?`` here (no other index; ``reverse_unordered_selects`` never set).
_MODEL_JOINED: Final = (
    "SELECT group_concat(item, ',' || char(10)), "
    "group_concat((stream_id << 40) | (revision << 8) | part), count(*), "
    "(SELECT min(idx) FROM items WHERE tree = ?1), (SELECT max(idx) FROM items WHERE tree = ?1), "
    "count(*) FILTER (WHERE {elsewhere}) FROM items WHERE tree = ?1"
)
_ITEMS_BETWEEN: Final = _MODEL_JOINED.format(elsewhere="stream_id NOT BETWEEN ?2 AND ?3")
# Streams numbered with gaps (sessions written side by side): each item's looked up.
_ITEMS_ELSEWHERE: Final = _MODEL_JOINED.format(
    elsewhere="stream_id NOT IN (SELECT id FROM streams WHERE tree = ?2)"
)

_EVENT_COLUMNS = "e.position, e.revision, e.id, e.type, e.data, e.metadata, e.recorded_at"


class _Conflict(Exception):
    """Raised inside a write transaction to roll it back with a ConcurrencyError."""

    def __init__(self, error: ConcurrencyError) -> None:
        self.error = error


class _Pending:
    """One write waiting for the store's thread, and where to hand its outcome."""

    __slots__ = ("future", "loop", "requests")

    def __init__(
        self,
        requests: list[AppendRequest],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[list[AppendResult]],
    ) -> None:
        self.requests = requests
        self.loop = loop
        self.future = future

    def settle(self, outcome: list[AppendResult] | BaseException) -> None:
        """Hand the outcome to the caller's loop (from any thread)."""
        with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits
            self.loop.call_soon_threadsafe(_settle, self.future, outcome)


def _settle_all(settled: list[tuple[asyncio.Future[Any], Any]]) -> None:
    """Settle a group's writes of one loop, in order; one that fails to settle is reported
    as its own callback's error would be, and the others are settled all the same."""
    for future, outcome in settled:
        try:
            _settle(future, outcome)
        except Exception as error:
            future.get_loop().call_exception_handler(
                {"message": "a write's outcome could not be handed over", "exception": error}
            )


def _settle(
    future: asyncio.Future[list[AppendResult]], outcome: list[AppendResult] | BaseException
) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class SQLiteEventStore(ReadModel, HeadsProbe, BatchedReads, RevisionIndex, TypedReads):
    """An :class:`~agentjournal.store.contract.EventStore` in one SQLite file.

    Open it with :meth:`open`; pass ``":memory:"`` for a store that lives as
    long as the object (tests). Safe for many asyncio tasks and for several
    processes on one file.
    """

    def __init__(
        self,
        path: str,
        connection: sqlite3.Connection,
        executor: ThreadPoolExecutor,
        *,
        file: str | None = None,
    ):
        self._path = path
        # The file the probe opens, resolved when the store was opened: a relative path
        # read later would name another file once the process changed directory.
        self._file = os.path.abspath(path) if file is None else file
        self._db = connection
        self._executor = executor
        self._closed = False
        # Subscribers waiting for appends, each woken on its own event loop.
        self._listeners: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._listeners_lock = threading.Lock()
        # Writes waiting for the store's thread; one drain job commits them as a group.
        self._queue: list[_Pending] = []
        self._queue_lock = threading.Lock()
        self._drain_scheduled = False
        # Event loops whose writes wait for the end of the loop's pass to start a drain.
        self._kicking: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        # The loop thread's read-only probe of stream heads (see :meth:`heads_now`), opened
        # on first use; its lock is only ever tried, never waited for.
        self._probe: sqlite3.Connection | None = None
        self._probe_lock = threading.Lock()
        self._probe_failed = path == ":memory:"  # another connection would see another database
        # Stream name -> row id, as seen by the store's thread (for :meth:`_claim`).
        self._stream_ids: dict[str, int] = {}

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, busy_timeout: float = 30.0, create: bool = True
    ) -> SQLiteEventStore:
        """Open (creating if needed) the store in ``path`` without blocking the loop.

        Args:
            path: The database file, or ``":memory:"``.
            busy_timeout: Seconds a writer waits for another process's write
                lock before raising :class:`StoreUnavailable`.
            create: With False, only an existing store is opened: a missing or
                empty file raises instead of becoming a new store (what
                read-only commands want).

        Raises:
            StoreUnavailable: The file cannot be opened, holds something else,
                or (``create=False``) holds no store.
        """
        path = os.fspath(path)
        executor = _executor()
        loop = asyncio.get_running_loop()
        try:
            file, connection = await loop.run_in_executor(
                executor, _resolved_connect, path, busy_timeout, create
            )
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(path, connection, executor, file=file)

    @classmethod
    def connect(
        cls, path: str | os.PathLike[str], *, busy_timeout: float = 30.0
    ) -> SQLiteEventStore:
        """Open the store from synchronous code (blocks while the file is opened).

        The same as :meth:`open` for callers without a running event loop, such
        as a constructor; the store may then be used from any event loop.
        """
        path = os.fspath(path)
        file, connection = _resolved_connect(path, busy_timeout)
        return cls(path, connection, _executor(), file=file)

    @property
    def path(self) -> str:
        """The database file (or ``":memory:"``)."""
        return self._path

    async def __aenter__(self) -> SQLiteEventStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; waits for a write in flight to finish."""
        if not self._mark_closed():
            return
        await asyncio.get_running_loop().run_in_executor(self._executor, self._close_db)
        self._executor.shutdown(wait=True)

    def close_sync(self) -> None:
        """Close from synchronous code (blocks until a write in flight finishes)."""
        if not self._mark_closed():
            return
        self._executor.submit(self._close_db).result()
        self._executor.shutdown(wait=True)

    def _close_db(self) -> None:
        self._drain_all()
        self._db.close()

    def _mark_closed(self) -> bool:
        if self._closed:
            return False
        self._closed = True
        self._notify()
        with self._probe_lock:  # waits for a probe in flight (a few microseconds)
            probe, self._probe, self._probe_failed = self._probe, None, True
        if probe is not None:
            probe.close()
        return True

    def _notify(self) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for loop, event in listeners:
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(event.set)

    # -- writes ---------------------------------------------------------------

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        """Append ``events`` to ``stream`` (see :class:`EventStore.append`)."""
        request = AppendRequest(stream, events, expected)
        validate_append([request], many=False)
        (result,) = await self._write([request])
        return result

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        """Append to several streams atomically (see :class:`EventStore.append_many`)."""
        requests = list(requests)
        validate_append(requests, many=True)
        return await self._write(requests)

    async def _write(self, requests: list[AppendRequest]) -> list[AppendResult]:
        if self._closed:
            raise StoreUnavailable(f"SQLite store {self._path} is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[AppendResult]] = loop.create_future()
        # Nothing else ready in this pass of the loop (asyncio's own loop: its ready
        # queue is empty; so no kick of this loop's is pending either, it would be
        # there): no write can join this one before the pass ends, and starting the
        # drain now is what the kick would do as the first thing of the next pass —
        # without that pass (the lone writer's common case).
        ready = getattr(loop, "_ready", None)
        idle = type(ready) is collections.deque and not ready
        start = kick = False
        with self._queue_lock:
            self._queue.append(_Pending(requests, loop, future))
            if idle:
                start = not self._drain_scheduled
                self._drain_scheduled = True
            else:
                kick = loop not in self._kicking
                if kick:
                    self._kicking.add(loop)
        if start:
            self._schedule_drain()
        elif kick:
            # The drain starts once this loop has run what is ready now, not at once:
            # sessions woken by one commit each plan their next write in this same pass,
            # and all of them share the next transaction instead of the first committing
            # alone while the others queue.
            loop.call_soon(self._kick, loop)
        # A cancelled caller cannot abandon a commit half-way: the store's thread takes
        # every queued write and finishes its transaction whatever became of the future
        # (a cancelled one is simply not settled), and subscribers hear of it from there.
        # So no shield and no callback on the way back: one hop there, one back.
        return await future

    def _kick(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start a drain for what ``loop``'s writes queued (unless one is on its way)."""
        with self._queue_lock:
            self._kicking.discard(loop)
            if self._drain_scheduled or not self._queue:
                return
            self._drain_scheduled = True
        self._schedule_drain()

    def _drain_all(self) -> None:
        """Commit everything still queued (on the store's thread, before it closes): a
        write whose loop has not yet started its drain is committed, not dropped."""
        while True:
            with self._queue_lock:
                if not self._queue:
                    return
            self._drain()

    def _schedule_drain(self) -> None:
        try:
            self._executor.submit(self._drain)
        except RuntimeError:  # the executor shut down (closed meanwhile): fail what waits
            with self._queue_lock:
                waiting, self._queue = self._queue, []
                self._drain_scheduled = False
            closed = StoreUnavailable(f"SQLite store {self._path} is closed")
            for pending in waiting:
                pending.settle(closed)

    def _drain(self) -> None:
        """Commit the writes waiting now as one group (on the store's thread).

        Writes that arrive while a group commits wait for the next group, so
        under load many sessions' writes share one transaction and one fsync;
        alone, a write commits by itself as before.
        """
        with self._queue_lock:
            group, self._queue = self._queue[:_GROUP_LIMIT], self._queue[_GROUP_LIMIT:]
            more = bool(self._queue)
            self._drain_scheduled = more
        if more:
            self._schedule_drain()
        if not group:
            return
        if len(group) == 1:
            outcomes: list[list[AppendResult] | BaseException] = []
            try:
                outcomes.append(_translated(self._path, self._write_sync, group[0].requests))
            except BaseException as error:  # handed to its caller
                outcomes.append(error)
        else:
            outcomes = self._write_group([pending.requests for pending in group])
        if any(
            not isinstance(outcome, BaseException) and any(r.events for r in pending.requests)
            for pending, outcome in zip(group, outcomes, strict=True)
        ):
            self._notify()  # subscribers, even when every caller was cancelled meanwhile
        # Settling is the last thing this thread does for the group: the callers' loop
        # wakes to a thread that is about to wait, not to one that still wants the GIL.
        # One hand-off per loop, not per write: a group's callers on one loop are settled
        # by one callback, in the group's order (one wake-up, one write to the loop's
        # self-pipe, instead of one each).
        if len(group) == 1:
            group[0].settle(outcomes[0])
            return
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any]]] = {}
        for pending, outcome in zip(group, outcomes, strict=True):
            by_loop.setdefault(pending.loop, []).append((pending.future, outcome))
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits
                loop.call_soon_threadsafe(_settle_all, settled)

    def _write_sync(self, requests: list[AppendRequest]) -> list[AppendResult]:
        """One write in its own transaction."""
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            raise StoreUnavailable(f"SQLite store {self._path} is busy: {error}") from error
        try:
            results = self._apply(db, requests, time.time_ns() // 1000)
            db.execute("COMMIT")
        except _Conflict as conflict:
            db.execute("ROLLBACK")
            raise conflict.error from None
        except sqlite3.Error as error:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreUnavailable(f"SQLite store {self._path} failed: {error}") from error
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return results

    def _write_group(
        self, group: list[list[AppendRequest]]
    ) -> list[list[AppendResult] | BaseException]:
        """Several writes in one transaction (group commit), each all-or-nothing.

        Each write runs inside its own SAVEPOINT: a conflict or a failure rolls
        back that write alone and is reported to its caller alone; the others
        commit together, with one fsync. Writes see the earlier ones of the
        group, exactly as if they had committed one after the other. If the
        group's transaction itself fails (BEGIN, COMMIT, or an error after
        which SQLite abandoned the transaction), every write of it gets
        :class:`StoreUnavailable` — an unknown outcome, which the writer
        settles by resending the same ids.
        """
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            # One exception object per caller: each is raised in its own task.
            return [
                StoreUnavailable(f"SQLite store {self._path} cannot start a write: {error}")
                for _ in group
            ]
        outcomes: list[list[AppendResult] | BaseException] = []
        try:
            now = time.time_ns() // 1000
            for requests in group:
                db.execute("SAVEPOINT aj_write")
                try:
                    outcomes.append(self._apply(db, requests, now))
                except _Conflict as conflict:
                    outcomes.append(conflict.error)
                    db.execute("ROLLBACK TO aj_write")
                except sqlite3.Error as error:
                    if not db.in_transaction:
                        raise  # SQLite rolled the whole group back: fail it as one
                    outcomes.append(StoreUnavailable(f"SQLite store {self._path} failed: {error}"))
                    db.execute("ROLLBACK TO aj_write")
                except Exception as error:  # a bug in one write stays that write's
                    outcomes.append(error)
                    db.execute("ROLLBACK TO aj_write")
                db.execute("RELEASE aj_write")
            db.execute("COMMIT")
        except BaseException as error:
            with contextlib.suppress(sqlite3.Error):
                if db.in_transaction:
                    db.execute("ROLLBACK")
            return [StoreUnavailable(f"SQLite store {self._path} failed: {error}") for _ in group]
        return outcomes

    def _apply(
        self, db: sqlite3.Connection, requests: list[AppendRequest], now: int
    ) -> list[AppendResult]:
        """Check and insert one write inside an open transaction; its results."""
        claimed = [self._claim(db, request) for request in requests]
        pending = [
            self._check(db, request) if claim is None else claim
            for request, claim in zip(requests, claimed, strict=True)
        ]
        last_position = 0
        for request, (stream_id, current, replay), claim in zip(
            requests, pending, claimed, strict=True
        ):
            if replay is not None or not request.events:
                continue
            head = current + len(request.events)
            if stream_id is None:
                created = db.execute(
                    "INSERT INTO streams(name, head) VALUES (?, ?)", (request.stream, head)
                ).lastrowid
                assert created is not None
                stream_id = created
            elif claim is None:
                db.execute("UPDATE streams SET head = ? WHERE id = ?", (head, stream_id))
            last_position = _insert_events(db, stream_id, current, request.events, now)
            _apply_model(db, request, stream_id, current, head)
        if last_position == 0:
            last_position = _last_position(db)
        results = []
        for request, (_, current, replay) in zip(requests, pending, strict=True):
            if replay is not None:
                results.append(replay)
            else:
                head = current + len(request.events)
                results.append(AppendResult(request.stream, head, last_position))
        return results

    def _claim(
        self, db: sqlite3.Connection, request: AppendRequest
    ) -> tuple[int, int, None] | None:
        """Move a known stream's head from the exact expected revision in one statement.

        The common write (events at the revision the writer last saw, on a stream this
        store has seen) is a compare-and-set: ``UPDATE .. WHERE head = expected``. It
        matches no row when the stream moved (a conflict or a retry) or the cached id
        is stale (a stream created in a transaction that was then rolled back: the name
        is compared too); then None, and :meth:`_check` decides as before.
        """
        expected = request.expected
        if type(expected) is not int or not request.events:
            return None
        stream_id = self._stream_ids.get(request.stream)
        if stream_id is None:
            return None
        moved = db.execute(
            "UPDATE streams SET head = ? WHERE id = ? AND head = ? AND name = ?",
            (expected + len(request.events), stream_id, expected, request.stream),
        ).rowcount
        return (stream_id, expected, None) if moved == 1 else None

    def _check(
        self, db: sqlite3.Connection, request: AppendRequest
    ) -> tuple[int | None, int, AppendResult | None]:
        """Check one request's expected state inside the write transaction.

        Returns the stream's row id (None if new), its current revision (-1 if
        new) and, for a recognised retry, the result of the original write.
        """
        row = db.execute(
            "SELECT id, head FROM streams WHERE name = ?", (request.stream,)
        ).fetchone()
        stream_id, current = (None, -1) if row is None else (row[0], row[1])
        if stream_id is not None:
            if len(self._stream_ids) >= _STREAM_IDS_KEPT:
                self._stream_ids.clear()  # bounded; an id not held costs one SELECT again
            self._stream_ids[request.stream] = stream_id  # ids never change: nothing is deleted
        expected = request.expected
        actual = None if row is None else current

        if expected_matches(expected, actual):
            return stream_id, current, None
        conflict = _Conflict(ConcurrencyError(request.stream, expected_label(expected), actual))
        if expected is StreamState.EXISTS:
            raise conflict
        # A retry of a write that landed: the same ids right after the expected revision.
        exact = -1 if expected is StreamState.NO_STREAM else expected
        assert isinstance(exact, int)
        if stream_id is None or current < exact or not request.events:
            raise conflict
        replay = self._replay(db, stream_id, request, exact)
        if replay is None:
            raise conflict
        return stream_id, current, replay

    def _replay(
        self, db: sqlite3.Connection, stream_id: int, request: AppendRequest, exact: int
    ) -> AppendResult | None:
        """Return the original result if ``request`` repeats events already written."""
        count = len(request.events)
        rows = db.execute(
            "SELECT id, position FROM events WHERE stream_id = ? AND revision > ? "
            "ORDER BY revision LIMIT ?",
            (stream_id, exact, count),
        ).fetchall()
        if len(rows) != count:
            return None
        if any(row[0] != event.id.bytes for row, event in zip(rows, request.events, strict=True)):
            return None
        return AppendResult(request.stream, exact + count, rows[-1][1])

    # -- reads ----------------------------------------------------------------

    def heads_now(self, streams: Sequence[str]) -> dict[str, int] | None:
        """The current head of each of ``streams`` (absent: no such stream), read on the
        calling thread; None when that cannot be answered at once (ask :meth:`read`).

        A session's warm ``get_items`` asks this instead of hopping to the store's
        thread: when no followed stream moved past what its cache holds, nothing
        needs reading. It runs on its own read-only connection in WAL mode, where a
        read never waits for a writer and sees every transaction committed before
        it began, by this object or any other process. Anything that would make
        the caller wait or fail — the connection busy with another thread's probe,
        a locked or damaged file, a closed store, an in-memory store (whose other
        connections see another database) — gives None, and the caller takes the
        ordinary path.
        """
        if self._probe_failed or not self._probe_lock.acquire(blocking=False):
            return None
        try:
            db = self._probe
            if db is None:
                if self._probe_failed:
                    return None
                db = self._probe = _probe_connection(self._file)
            marks = ",".join("?" * len(streams))
            rows = db.execute(
                f"SELECT name, head FROM streams WHERE name IN ({marks})", tuple(streams)
            ).fetchall()
            return dict(rows)
        except sqlite3.Error:
            # Busy (a checkpoint, a recovering WAL index) or worse: this time, the slow path;
            # a connection that cannot even open is not tried again.
            if self._probe is None:
                self._probe_failed = True
            return None
        finally:
            self._probe_lock.release()

    async def head(self, stream: str) -> int | None:
        """Return the revision of the stream's last event, or None."""
        validate_stream_name(stream)
        row = await self._submit(
            self._fetchone, "SELECT head FROM streams WHERE name = ?", (stream,)
        )
        return None if row is None else int(row[0])

    async def revision_at(self, stream: str, position: int) -> int:
        """The revision of ``stream``'s last event before global position ``position``
        (-1: none, or no such stream): one walk down the stream's index from its head.

        The optional store method the engine asks where a branch leaves a stream
        (:func:`agentjournal.engine.fork.revision_at`, DESIGN §17).
        """
        validate_stream_name(stream)
        _check_non_negative("position", position)
        row = await self._submit(
            self._fetchone,
            "SELECT e.revision FROM events e JOIN streams s ON e.stream_id = s.id "
            "WHERE s.name = ? AND e.position < ? ORDER BY e.revision DESC LIMIT 1",
            (stream, position),
        )
        return -1 if row is None else int(row[0])

    async def read_types(
        self, stream: str, after: int, types: Sequence[str]
    ) -> list[RecordedEvent]:
        """``stream``'s events after revision ``after`` whose type is one of ``types``,
        oldest first (none: no such stream): one range scan of the stream's index that
        builds no other event.

        The optional store method a fork asks whether anything since its cut hides an item
        (:func:`agentjournal.engine.fork.read_types`, DESIGN §17.6 step 7).
        """
        validate_stream_name(stream)
        kinds = sorted(set(types))
        if not kinds:
            return []
        marks = ", ".join("?" * len(kinds))
        sql = (
            f"SELECT {_EVENT_COLUMNS} FROM events e JOIN streams s ON e.stream_id = s.id "
            f"WHERE s.name = ? AND e.revision > ? AND e.type IN ({marks}) ORDER BY e.revision"
        )
        rows = await self._submit(_fetch_events, self._db, stream, sql, (stream, after, *kinds))
        return [_recorded(stream, *row) for row in rows]

    async def read(
        self,
        stream: str,
        *,
        from_revision: int | None = None,
        backwards: bool = False,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        """Read events of ``stream`` (see :class:`EventStore.read`)."""
        validate_stream_name(stream)
        _check_non_negative("from_revision", from_revision)
        _check_non_negative("limit", limit)
        return await self._submit(self._read_sync, stream, from_revision, backwards, limit)

    def _read_sync(
        self, stream: str, from_revision: int | None, backwards: bool, limit: int | None
    ) -> list[RecordedEvent]:
        row = self._db.execute("SELECT id, head FROM streams WHERE name = ?", (stream,)).fetchone()
        if row is None:
            raise StreamNotFound(stream)
        stream_id, head = row
        if backwards:
            where = "revision <= ? ORDER BY revision DESC"
            start = head if from_revision is None else from_revision
        else:
            start = from_revision or 0
            if start > head:
                return []  # the common "anything new?" read costs one lookup
            where = "revision >= ? ORDER BY revision"
        sql = f"SELECT {_EVENT_COLUMNS} FROM events e WHERE stream_id = ? AND {where} LIMIT ?"
        params = (stream_id, start, -1 if limit is None else limit)
        count = start + 1 if backwards else head - start + 1  # at most this many events
        if min(count, limit if limit is not None else count) <= _SMALL_READ:
            rows = _fetch_events(self._db, stream, sql, params)
            return [_recorded(stream, *r) for r in rows]
        with no_collection():  # a long read: thousands of rows and events, no cycles
            rows = _fetch_events(self._db, stream, sql, params)
            return [_recorded(stream, *r) for r in rows]

    async def read_streams(
        self, reads: Sequence[tuple[str, int | None]]
    ) -> list[list[RecordedEvent] | None]:
        """Read several whole streams forwards in one trip to the store's thread.

        Args:
            reads: (stream, limit) pairs; each stream is read from revision 0, at
                most ``limit`` events (None: all).

        Returns:
            Per pair, its events, or None when the stream does not exist. A tree of
            many small subsessions is read in one hop instead of one per stream
            (:func:`agentjournal.walk.walk_tree` uses it).
        """
        for stream, limit in reads:
            validate_stream_name(stream)
            _check_non_negative("limit", limit)
        return await self._submit(self._read_streams_sync, list(reads))

    def _read_streams_sync(
        self, reads: list[tuple[str, int | None]]
    ) -> list[list[RecordedEvent] | None]:
        found: list[list[RecordedEvent] | None] = []
        for stream, limit in reads:
            try:
                found.append(self._read_sync(stream, None, False, limit))
            except StreamNotFound:
                found.append(None)
        return found

    async def read_model(self, tree: str) -> ModelSnapshot | None:
        """The read model of the tree whose root stream is ``tree``, in one read transaction.

        None unless every stream of the tree is current (each event on it was
        appended with a :class:`~agentjournal.store.contract.ModelChange`): the caller
        then reads the events. See the module docs of :mod:`agentjournal.store.contract`.
        """
        validate_stream_name(tree)
        return await self._submit(self._read_model_sync, tree)

    def _read_model_sync(self, tree: str) -> ModelSnapshot | None:
        db = self._db
        db.execute("BEGIN")  # one snapshot of the file for all three queries
        try:
            streams = db.execute(
                "SELECT id, name, head, modelled FROM streams WHERE tree = ?", (tree,)
            ).fetchall()
            names = {row[0]: row[1] for row in streams}
            heads = {row[1]: row[2] for row in streams}
            root = next((row[0] for row in streams if row[1] == tree), None)
            if root is None or any(row[2] != row[3] for row in streams):
                return None
            # Only the root's last event: a reader needs another stream's only while a
            # subagent is open on it, and reads it apart (checked against ``heads``).
            last = db.execute(
                f"SELECT {_EVENT_COLUMNS} FROM events e WHERE e.stream_id = ? AND e.revision = ?",
                (root, heads[tree]),
            ).fetchone()
            if last is None:
                return None
            if max(heads.values()) >= MODEL_REVISIONS:
                return None  # a key could not hold the revision: the events answer
            found = db.execute("SELECT floor, mixed FROM trees WHERE tree = ?", (root,)).fetchone()
            items = _model_items(db, root, tree, names)
            if items is None:
                return None  # an item on a stream not of the tree (a hand-edited file)
        finally:
            db.execute("COMMIT")
        floor, mixed = (-1, 0) if found is None else found
        return ModelSnapshot(heads, _recorded(tree, *last), names, items, int(floor), not mixed)

    async def read_all(
        self, *, from_position: int | None = None, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read all streams in global order from ``from_position`` (inclusive)."""
        _check_non_negative("from_position", from_position)
        _check_non_negative("limit", limit)
        return await self._submit(self._read_all_sync, from_position or 0, limit)

    def _read_all_sync(self, from_position: int, limit: int | None) -> list[RecordedEvent]:
        rows = _fetch_events(
            self._db,
            "$all",
            f"SELECT s.name, {_EVENT_COLUMNS} FROM events e JOIN streams s ON s.id = e.stream_id "
            "WHERE e.position >= ? ORDER BY e.position LIMIT ?",
            (from_position, -1 if limit is None else limit),
        )
        return [_recorded(*r) for r in rows]

    async def subscribe(self, *, after_position: int | None = None) -> AsyncIterator[RecordedEvent]:
        """Yield every event after ``after_position``, then follow new ones."""
        _check_non_negative("after_position", after_position)
        position = after_position or 0
        listener = (asyncio.get_running_loop(), asyncio.Event())
        with self._listeners_lock:
            self._listeners.add(listener)
        try:
            while not self._closed:
                listener[1].clear()  # before the read: no wake-up is missed
                batch = await self.read_all(from_position=position + 1, limit=_SUBSCRIBE_BATCH)
                for event in batch:
                    yield event
                    position = event.position
                if len(batch) == _SUBSCRIBE_BATCH:
                    continue
                # Appends through this object wake us at once; other processes'
                # appends are noticed by the next read after a short timeout. Not
                # ``wait_for``: on Python 3.11 it swallows a cancel that meets a wake-up
                # in the same loop step, and the subscription read on (a follower's own
                # write wakes it: `tail` and `trace export --follow` hung on SIGTERM).
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_POLL_SECONDS):
                        await listener[1].wait()
        finally:
            with self._listeners_lock:
                self._listeners.discard(listener)

    # -- plumbing -------------------------------------------------------------

    def _fetchone(self, sql: str, params: tuple[Any, ...]) -> Any:
        return self._db.execute(sql, params).fetchone()

    def _submit(self, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        if self._closed:
            raise StoreUnavailable(f"SQLite store {self._path} is closed")
        return asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(_translated, self._path, fn, *args)
        )


def _model_items(
    db: sqlite3.Connection, root: int, tree: str, names: dict[int, str]
) -> ModelItems | None:
    """The visible items of the tree ``tree`` (root stream number ``root``, streams
    ``names``), in one row when it can be (:class:`ModelItems`); None if an item names a
    stream that is neither the tree's nor one of a copied prefix (:func:`_copied_prefix`,
    which adds those streams to ``names``)."""
    if max(names) >= _SQL_KEYS:  # a key does not fit SQLite's 64 bits: packed here
        if not _copied_prefix(db, root, tree, names):
            return None
        with no_collection():  # thousands of rows, no cycles
            return ModelItems.of_rows(
                [
                    (index, model_key(stream, revision, part), text)
                    for index, stream, revision, part, text in db.execute(
                        "SELECT idx, stream_id, revision, part, item FROM items "
                        "WHERE tree = ? ORDER BY idx",
                        (root,),
                    )
                ]
            )
    low, high = min(names), max(names)
    if high - low + 1 == len(names):  # no gap: a range check of each item's stream
        found = db.execute(_ITEMS_BETWEEN, (root, low, high)).fetchone()
    else:
        found = db.execute(_ITEMS_ELSEWHERE, (root, tree)).fetchone()
    texts, keys, count, first, last, elsewhere = found
    if elsewhere and not _copied_prefix(db, root, tree, names):
        return None  # an item on a stream that is not the tree's (a hand-edited file)
    if not count:
        return ModelItems.joined("", "", range(0), 0)
    if texts.count("\n") != count - 1:
        # A text with a newline of its own (none this engine writes: its item texts are
        # compact JSON) would not split back: the rows, as they are.
        with no_collection():
            return ModelItems.of_rows(db.execute(_MODEL_ITEMS, (root,)).fetchall())
    indexes: str | range = range(first, last + 1)
    if last - first + 1 != count:  # a gap (a popped item): every index
        indexes = db.execute(
            "SELECT group_concat(idx) FROM items WHERE tree = ?", (root,)
        ).fetchone()[0]
    return ModelItems.joined(texts, keys, indexes, count)


_FOREIGN_ROWS: Final = (
    "SELECT max(idx) FILTER (WHERE NOT own), min(idx) FILTER (WHERE own), "
    "group_concat(DISTINCT stream_id) FILTER (WHERE NOT own) FROM ("
    "SELECT idx, stream_id, stream_id IN (SELECT id FROM streams WHERE tree = ?2) AS own "
    "FROM items WHERE tree = ?1)"
)


def _copied_prefix(db: sqlite3.Connection, root: int, tree: str, names: dict[int, str]) -> bool:
    """Whether the tree's items on other trees' streams, if any, are a copied prefix (a
    :class:`~agentjournal.store.contract.ModelCopy`: a branch's rows below its cut, on its
    parent's streams): every one before every row on the tree's own streams, each on a
    stream that exists and whose packed key SQLite could hold. ``names`` gains those
    streams. A row moved anywhere else (a hand edit) is not."""
    last_foreign, first_own, numbers = db.execute(_FOREIGN_ROWS, (root, tree)).fetchone()
    if numbers is None:
        return True  # every row on the tree's own streams
    if first_own is not None and last_foreign > first_own:
        return False
    for number in map(int, str(numbers).split(",")):
        row = db.execute("SELECT name FROM streams WHERE id = ?", (number,)).fetchone()
        if row is None or number >= _SQL_KEYS:
            return False
        names[number] = row[0]
    return True


def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentjournal-sqlite")


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


def _translated(path: str, fn: Callable[..., _T], *args: Any) -> _T:
    try:
        return fn(*args)
    except sqlite3.Error as error:
        raise StoreUnavailable(f"SQLite store {path} failed: {error}") from error


def _resolved_connect(
    path: str, busy_timeout: float, create: bool = True
) -> tuple[str, sqlite3.Connection]:
    """The file's absolute path as it is resolved now (for the heads probe, opened later,
    perhaps after the process changed directory) and the store's connection to it."""
    return os.path.abspath(path), _connect(path, busy_timeout, create)


def _connect(path: str, busy_timeout: float, create: bool = True) -> sqlite3.Connection:
    if path != ":memory:":
        if not create and not os.path.isfile(path):
            raise StoreUnavailable(f"no store at {path}: check the path or --uri")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise StoreUnavailable(
                f"cannot open SQLite store {path}: directory {directory} does not exist "
                "(create it first)"
            )
    target, as_uri = path, False
    if not create and path != ":memory:":
        # mode=rw: SQLite itself refuses to create the file (no race with the check above).
        target, as_uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=rw", True
    try:
        db = sqlite3.connect(
            target, timeout=busy_timeout, isolation_level=None, check_same_thread=False, uri=as_uri
        )
    except sqlite3.Error as error:
        raise StoreUnavailable(f"cannot open SQLite store {path}: {error}") from error
    try:
        _refuse_foreign(db, path)  # before anything could change the file
        if not create and db.execute("PRAGMA user_version").fetchone()[0] == 0:
            raise StoreUnavailable(f"no store at {path}: the file is empty")
        db.execute(
            "PRAGMA journal_mode = WAL" if path != ":memory:" else "PRAGMA journal_mode = MEMORY"
        )
        db.execute("PRAGMA synchronous = FULL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            _create_schema(db, path)
        elif version == 1:
            _upgrade_schema(db, path)
    except sqlite3.DatabaseError as error:
        db.close()
        raise StoreUnavailable(f"cannot open SQLite store {path}: {error}") from error
    except BaseException:
        db.close()
        raise
    return db


def _probe_connection(path: str) -> sqlite3.Connection:
    """A read-only connection for :meth:`SQLiteEventStore.heads_now` (any thread, waits at
    most 5 ms for a lock: the loop thread must not stall on it); ``path`` is absolute."""
    uri = f"file:{urllib.parse.quote(path)}?mode=ro"
    db = sqlite3.connect(
        uri, timeout=0.005, isolation_level=None, check_same_thread=False, uri=True
    )
    try:
        db.execute("PRAGMA query_only = 1")
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            raise sqlite3.OperationalError("not in WAL mode: readers could wait for writers")
    except BaseException:
        db.close()
        raise
    return db


def _refuse_foreign(db: sqlite3.Connection, path: str) -> None:
    """Raise unless the file is empty or an agentjournal store of this schema version."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version not in (0, 1, SCHEMA_VERSION):
        raise StoreUnavailable(
            f"SQLite store {path} has schema version {version}; this agentjournal "
            f"reads versions 1 and {SCHEMA_VERSION}: upgrade agentjournal, or choose another file"
        )
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    # Version 1 had streams and events only; the model's tables come with version 2.
    ours = _TABLES if version != 1 else {"streams", "events"}
    foreign = sorted(tables - ours - {"sqlite_sequence"})
    needed = _TABLES if version == SCHEMA_VERSION else {"streams", "events"}
    if foreign or (version != 0 and not needed <= tables):
        shown = foreign[0] if foreign else "missing tables of its version"
        raise StoreUnavailable(
            f"{path} is a SQLite database of something else ({shown!r}); choose another file"
        )


def _create_schema(db: sqlite3.Connection, path: str) -> None:
    _migrate(db, path, 0, _SCHEMA)


def _upgrade_schema(db: sqlite3.Connection, path: str) -> None:
    """Version 1 -> 2: the model's columns and tables, empty. No stream joins a tree, so
    every session is read from its events until written again from scratch (a stream's
    model starts with its first event)."""
    _migrate(
        db,
        path,
        1,
        "ALTER TABLE streams ADD COLUMN tree TEXT NULL;"
        "ALTER TABLE streams ADD COLUMN modelled INTEGER NULL;" + _MODEL_SCHEMA,
    )


def _migrate(db: sqlite3.Connection, path: str, version: int, script: str) -> None:
    """Run ``script`` and set the current schema version, in one transaction under the
    write lock, if the file is still at ``version`` (another process may have got there
    first) and, checked again under the lock, no file of something else."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] == version:
            _refuse_foreign(db, path)
            for statement in script.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _apply_model(
    db: sqlite3.Connection, request: AppendRequest, stream_id: int | None, current: int, head: int
) -> None:
    """Apply one appended request's read model change (inside its write's transaction).

    A new stream joins the request's tree; an existing one's ``modelled`` revision
    follows its head if it was current before (and of this tree): one append without
    a change (``model`` None) leaves it behind for good, and ``read_model`` of its
    tree answers None from then on. An item added at an index already taken (two
    writers that did not see each other; never this engine's own writes) makes the
    whole tree not current rather than pick one.
    """
    change = request.model
    if change is None:
        return  # modelled stays where it was: behind the head now
    created = current < 0 and request.stream == change.tree  # a new tree's root
    if current < 0:  # a new stream joins its tree (set once: ``tree`` is indexed)
        db.execute(
            "UPDATE streams SET tree = ?, modelled = ? WHERE id = ?", (change.tree, head, stream_id)
        )
    else:
        db.execute(
            "UPDATE streams SET modelled = ? WHERE id = ? AND modelled = ? AND tree = ?",
            (head, stream_id, current, change.tree),
        )
    if not change.ops:
        return
    ids: dict[str, int] = {} if stream_id is None else {request.stream: stream_id}
    root = ids.get(change.tree) or _stream_id(db, change.tree)
    if root is None:
        raise InvalidInput(f"the model's tree {change.tree!r} names no stream")

    def id_of(name: str) -> int:
        found = ids.get(name)
        if found is None:
            found = _stream_id(db, name)
            if found is None:
                raise InvalidInput(f"a model change names stream {name!r}, which does not exist")
            ids[name] = found
        return found

    row = db.execute("SELECT floor FROM trees WHERE tree = ?", (root,)).fetchone()
    floor = -1 if row is None else int(row[0])
    adds: list[tuple[int, int, int, int, int, str]] = []
    current = True  # False: an item at a taken index, or one without an index

    def add_all() -> bool:
        """Insert the adds so far in one statement; False if any index was taken."""
        if not adds:
            return True
        before = db.total_changes
        db.executemany(
            "INSERT OR IGNORE INTO items(tree, idx, stream_id, revision, part, item) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            adds,
        )
        inserted = db.total_changes - before
        count = len(adds)
        adds.clear()
        return inserted == count

    for n, op in enumerate(change.ops):
        if isinstance(op, ModelCopy):
            copied = _copy_model(db, op, root) if created and n == 0 else None
            current = current and copied is not None
            floor = max(floor, -1 if copied is None else copied)
            continue
        if isinstance(op, ModelAdd):
            if not op.plain:
                db.execute(
                    "INSERT INTO trees(tree, floor, mixed) VALUES (?, -1, 1) "
                    "ON CONFLICT(tree) DO UPDATE SET mixed = 1",
                    (root,),
                )
            if 0 <= op.index <= floor:
                continue  # hidden by an earlier clear, as the timeline hides it
            # A place its packed key cannot hold (store.base.model_key) is not modelled; the
            # heads bound read_model checks holds only for revisions of events that exist.
            current = (
                current
                and op.index >= 0
                and 0 <= op.part < MODEL_PARTS
                and 0 <= op.revision < MODEL_REVISIONS
            )
            adds.append((root, op.index, id_of(op.stream), op.revision, op.part, op.text))
            continue
        current = add_all() and current
        if isinstance(op, ModelClear):
            floor = max(floor, op.through_index)
            db.execute("DELETE FROM items WHERE tree = ? AND idx <= ?", (root, floor))
            db.execute(
                "INSERT INTO trees(tree, floor, mixed) VALUES (?, ?, 0) "
                "ON CONFLICT(tree) DO UPDATE SET floor = excluded.floor",
                (root, floor),
            )
        elif op.index < 0:  # not this engine's: the model cannot find it
            current = False
        else:
            db.execute(
                "DELETE FROM items WHERE tree = ? AND idx = ? AND stream_id = ? "
                "AND revision = ? AND part = ?",
                (root, op.index, id_of(op.stream), op.revision, op.part),
            )
    if not add_all() or not current:
        db.execute("UPDATE streams SET modelled = NULL WHERE tree = ?", (change.tree,))


def _copy_model(db: sqlite3.Connection, op: ModelCopy, root: int) -> int | None:
    """Start the new tree ``root`` as the source tree's rows below ``op.below`` (one
    ``INSERT ... SELECT``, same places and text) with the source's floor and plain mark;
    its floor, or None (nothing copied) unless every stream of the source tree is current
    and exactly at ``op.heads`` (store.base.ModelCopy)."""
    streams = db.execute(
        "SELECT id, name, head, modelled FROM streams WHERE tree = ?", (op.source,)
    ).fetchall()
    source = next((row[0] for row in streams if row[1] == op.source), None)
    if (
        source is None
        or source == root
        or {row[1]: row[2] for row in streams} != dict(op.heads)
        or any(row[2] != row[3] or row[2] >= MODEL_REVISIONS for row in streams)
    ):
        return None
    db.execute(
        "INSERT INTO items(tree, idx, stream_id, revision, part, item) "
        "SELECT ?, idx, stream_id, revision, part, item FROM items WHERE tree = ? AND idx < ?",
        (root, source, op.below),
    )
    db.execute(
        "INSERT INTO trees(tree, floor, mixed) SELECT ?, floor, mixed FROM trees WHERE tree = ?",
        (root, source),
    )
    row = db.execute("SELECT floor FROM trees WHERE tree = ?", (root,)).fetchone()
    return -1 if row is None else int(row[0])


def _stream_id(db: sqlite3.Connection, name: str) -> int | None:
    row = db.execute("SELECT id FROM streams WHERE name = ?", (name,)).fetchone()
    return None if row is None else int(row[0])


# One INSERT of up to this many rows (7 parameters each; SQLite's default cap is 32,766).
_ROWS_PER_INSERT: Final = 64
_INSERT_EVENTS: Final = (
    "INSERT INTO events(stream_id, revision, id, type, data, metadata, recorded_at) VALUES "
)
_EVENT_ROW: Final = "(?, ?, ?, ?, ?, ?, ?)"


@functools.cache
def _insert_sql(rows: int) -> str:
    return _INSERT_EVENTS + ", ".join([_EVENT_ROW] * rows)


def _insert_events(
    db: sqlite3.Connection, stream_id: int, current: int, new: Sequence[NewEvent], now: int
) -> int:
    """Insert ``new`` after revision ``current``; the position of the last one.

    A write of a few events is one statement whose rows SQLite inserts in order, so
    its last row id is the write's position (no ``last_insert_rowid()`` query).
    """
    rows = [
        (
            stream_id,
            current + offset,
            event.id.bytes,
            event.type,
            event.data,
            encode_metadata(event.metadata),
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


def _recorded(
    stream: str,
    position: int,
    revision: int,
    event_id: bytes,
    type_: object,
    data: object,
    metadata: object,
    recorded_at: int,
) -> RecordedEvent:
    return RecordedEvent.from_raw(
        stream=stream,
        position=position,
        revision=revision,
        raw_id=event_id,
        type=_as_text(stream, revision, type_),
        data=_as_bytes(data),
        raw_metadata=_as_bytes(metadata),
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


def _check_non_negative(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidInput(f"{name} must be an integer >= 0 or None, got {value!r}")
