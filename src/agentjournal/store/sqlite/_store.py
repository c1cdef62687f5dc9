"""The SQLite store's class: opening and closing, its thread, reads, the heads probe and
subscriptions; writes go to its write path (``_writes``)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Final, TypeVar

from agentjournal._gc import no_collection
from agentjournal.errors import InvalidInput, StoreUnavailable, StreamNotFound
from agentjournal.store.abilities import (
    BatchedReads,
    HeadsProbe,
    Purge,
    ReadModel,
    RevisionIndex,
    TypedReads,
)
from agentjournal.store.contract import (
    AppendRequest,
    AppendResult,
    Expected,
    ModelSnapshot,
    NewEvent,
    RecordedEvent,
    validate_append,
    validate_stream_name,
)
from agentjournal.store.sqlite._handoff import Listeners, _translated
from agentjournal.store.sqlite._model import read_model
from agentjournal.store.sqlite._purge import purge_model
from agentjournal.store.sqlite._read_only import ReadGuard, refused_write
from agentjournal.store.sqlite._rows import _EVENT_COLUMNS, _fetch_events, _recorded
from agentjournal.store.sqlite._schema import _probe_connection, _resolved_connect, read_only
from agentjournal.store.sqlite._stored import Unpacker
from agentjournal.store.sqlite._wal_index import KnownHeads, WalIndex, wal_index_of
from agentjournal.store.sqlite._writes import Writes

_POLL_SECONDS: Final = 0.05
_SUBSCRIBE_BATCH: Final = 500
_SMALL_READ: Final = 256  # reads up to this many events run with the collector as it is
_T = TypeVar("_T")


class SQLiteEventStore(ReadModel, HeadsProbe, BatchedReads, RevisionIndex, TypedReads, Purge):
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
        compress: bool = False,
    ):
        self._path = path
        # The file the probe opens, resolved when the store was opened: a relative path
        # read later would name another file once the process changed directory.
        self._file = os.path.abspath(path) if file is None else file
        self._db = connection
        self._executor = executor
        self._closed = False
        # Opened read-only, as a store this process cannot write is: every write is refused
        # before it reaches the connection (which would refuse it too), and every read is
        # guarded against the writes of those who can write it.
        self._read_only = path != ":memory:" and read_only(connection)
        self._guard = ReadGuard(path, self._file) if self._read_only else None
        # Subscribers waiting for appends, woken by a commit (on the store's thread) or a close.
        self._listeners = Listeners()
        # The loop thread's read-only probe of stream heads (see :meth:`heads_now`), opened
        # on first use; its lock is only ever tried, never waited for.
        self._probe: sqlite3.Connection | None = None
        self._probe_lock = threading.Lock()
        # In memory, another connection would see another database; read-only, every read
        # goes through the guard, which the probe's answers would pass by.
        self._probe_failed = path == ":memory:" or self._read_only
        # The file's WAL index, read by the probe (under its lock) and by the store's thread
        # (the write path's own), and heads known as of one of its headers: (header, stream ->
        # head, -1 for no such stream). Replaced whole, never changed in place: any pair
        # ever stored is true of the content that header names (see :meth:`heads_now`).
        self._wal: WalIndex | None = None
        self._known = KnownHeads()
        # The stored form (``_stored``) as read on the store's thread: the values it reads
        # decompressed with the file's dictionaries.
        self._unpacker = Unpacker(connection)
        # The write path: the queue, group commit and each write's transaction. It is handed
        # what it shares with the rest (the connection, the thread, the known heads it tells
        # its commits to, the listeners it wakes) and holds no reference back to the store.
        self._writes = Writes(
            path,
            connection,
            executor,
            self._known,
            self._listeners,
            compress=compress,
            learn_heads=not self._probe_failed,
        )

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        create: bool = True,
        compress: bool = False,
    ) -> SQLiteEventStore:
        """Open (creating if needed) the store in ``path`` without blocking the loop.

        Args:
            path: The database file, or ``":memory:"``.
            busy_timeout: Seconds a writer waits for another process's write
                lock before raising :class:`StoreUnavailable` (0 to about 24.8 days:
                SQLite counts milliseconds in 32 bits).
            create: With False, only an existing store is opened: a missing or
                empty file raises instead of becoming a new store (what
                read-only commands want).
            compress: Store the events this store writes compressed (zstd with a
                dictionary kept in the file: about a third of the bytes, for about 4 us
                more per event read; DESIGN, "The embedded SQLite store"). Rows are read
                whatever form they were written in.

        Raises:
            StoreUnavailable: The file cannot be opened, holds something else,
                or (``create=False``) holds no store.
            InvalidInput: ``busy_timeout`` is not a number from 0 to 2147483.647.
        """
        path = os.fspath(path)
        executor = _executor()
        stop = threading.Event()
        opening = executor.submit(_resolved_connect, path, busy_timeout, create, stop)
        try:
            file, connection = await asyncio.wrap_future(opening)
        except BaseException:
            # Given up (cancelled, timed out): the open stops waiting for a lock at its
            # next try, and a connection it made all the same is closed, not left open.
            stop.set()
            opening.add_done_callback(_close_made)
            executor.shutdown(wait=False)
            raise
        return cls(path, connection, executor, file=file, compress=compress)

    @classmethod
    def connect(
        cls, path: str | os.PathLike[str], *, busy_timeout: float = 30.0, compress: bool = False
    ) -> SQLiteEventStore:
        """Open the store from synchronous code (blocks while the file is opened).

        The same as :meth:`open` for callers without a running event loop, such
        as a constructor; the store may then be used from any event loop.
        """
        path = os.fspath(path)
        file, connection = _resolved_connect(path, busy_timeout)
        return cls(path, connection, _executor(), file=file, compress=compress)

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
        self._writes.close()  # commits what is queued, before the connection closes
        self._db.close()

    def _mark_closed(self) -> bool:
        if self._closed:
            return False
        self._closed = True
        self._listeners.notify()
        with self._probe_lock:  # waits for a probe in flight (a few microseconds)
            probe, self._probe, self._probe_failed = self._probe, None, True
            self._writes.learn_no_heads()
            wal, self._wal = self._wal, None
        if wal is not None:
            wal.close()
        if probe is not None:
            probe.close()
        return True

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

    def _write(self, requests: list[AppendRequest]) -> asyncio.Future[list[AppendResult]]:
        """The future of ``requests``' results (no coroutine of its own on a turn's path)."""
        if self._read_only and not any(request.events for request in requests):
            # Nothing to write: answered by a read, as a read-only store can.
            return self._submit(self._writes.check_sync, requests)
        self._check_writable()
        return self._writes.write(requests)

    @property
    def read_only(self) -> bool:
        """Whether the store was opened read-only, as an existing store this process cannot
        write is: it is read as it was when opened (a read after someone else wrote it raises
        :class:`StoreUnavailable`), and every write raises :class:`StoreUnavailable`."""
        return self._read_only

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreUnavailable(f"SQLite store {self._path} is closed")
        if self._read_only:
            raise StoreUnavailable(refused_write(self._path, self._file))

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
                self._wal = wal_index_of(db)
            # The WAL index's header as of now: when it names the content of which the
            # heads asked are known (this thread's earlier answer, or the store's thread's
            # own last commit), they are the answer, without a read transaction.
            wal = self._wal
            header = None if wal is None else wal.header()
            answer = self._known.answer(header, streams)
            if answer is not None:
                return answer
            marks = ",".join("?" * len(streams))
            rows = db.execute(
                f"SELECT name, head FROM streams WHERE name IN ({marks})", tuple(streams)
            ).fetchall()
            found = dict(rows)
            # The same header after the read: no commit in between, so the read saw its
            # content (a read sees every commit made before it began).
            if header is not None and wal is not None and wal.header() == header:
                self._known.learn(
                    header, {stream: found.get(stream, -1) for stream in streams}, since=header
                )
            return found
        except sqlite3.Error:
            # Busy (a checkpoint, a recovering WAL index) or worse: this time, the slow path;
            # a connection that cannot even open is not tried again.
            if self._probe is None:
                self._probe_failed = True
                self._writes.learn_no_heads()
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
        (:func:`agentjournal.engine.fork.revision_at`, DESIGN, "Branches").
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
        (:func:`agentjournal.engine.fork.read_types`, DESIGN, "Branches").
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
        return [_recorded(self._unpacker, stream, *row) for row in rows]

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
            return [_recorded(self._unpacker, stream, *r) for r in rows]
        with no_collection():  # a long read: thousands of rows and events, no cycles
            rows = _fetch_events(self._db, stream, sql, params)
            return [_recorded(self._unpacker, stream, *r) for r in rows]

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
        return read_model(self._db, tree, self._unpacker)

    async def purge(self, streams: Sequence[str]) -> None:
        """Drop the read model of every tree holding an item of ``streams``, with
        ``secure_delete`` on, and truncate the WAL (see
        :class:`~agentjournal.store.abilities.Purge`)."""
        for stream in streams:
            validate_stream_name(stream)
        self._check_writable()
        await self._submit(purge_model, self._db, list(streams))

    async def read_all(
        self, *, from_position: int | None = None, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read all streams in global order from ``from_position`` (inclusive)."""
        _check_non_negative("from_position", from_position)
        _check_non_negative("limit", limit)
        return await self._submit(self._read_all_sync, from_position or 0, limit)

    def _read_all_sync(self, from_position: int, limit: int | None) -> list[RecordedEvent]:
        sql = (
            f"SELECT s.name, {_EVENT_COLUMNS} FROM events e JOIN streams s ON s.id = e.stream_id "
            "WHERE e.position >= ? ORDER BY e.position LIMIT ?"
        )
        params = (from_position, -1 if limit is None else limit)
        unpacker = self._unpacker
        if limit is not None and limit <= _SMALL_READ:
            return [_recorded(unpacker, *r) for r in _fetch_events(self._db, "$all", sql, params)]
        # A page of the global order: thousands of rows and events, no cycles; the
        # collector would scan everything its reader holds again and again.
        with no_collection():
            return [_recorded(unpacker, *r) for r in _fetch_events(self._db, "$all", sql, params)]

    async def subscribe(self, *, after_position: int | None = None) -> AsyncIterator[RecordedEvent]:
        """Yield every event after ``after_position``, then follow new ones."""
        _check_non_negative("after_position", after_position)
        position = after_position or 0
        listener = (asyncio.get_running_loop(), asyncio.Event())
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
            self._listeners.discard(listener)

    # -- plumbing -------------------------------------------------------------

    def _fetchone(self, sql: str, params: tuple[Any, ...]) -> Any:
        return self._db.execute(sql, params).fetchone()

    def _submit(self, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        if self._closed:
            raise StoreUnavailable(f"SQLite store {self._path} is closed")
        call = functools.partial(_translated, self._path, fn, *args)
        if self._guard is not None:
            call = functools.partial(self._guard.around, call)
        return asyncio.get_running_loop().run_in_executor(self._executor, call)


def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentjournal-sqlite")


def _check_non_negative(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidInput(f"{name} must be an integer >= 0 or None, got {value!r}")


def _close_made(opening: Future[tuple[str, sqlite3.Connection]]) -> None:
    """Close the connection an abandoned open made after all: on the open's thread as it
    ends, or on the caller's if it had ended already (nobody else holds that connection)."""
    if not opening.cancelled() and opening.exception() is None:
        opening.result()[1].close()
