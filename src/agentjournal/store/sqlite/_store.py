"""The SQLite store's class: its thread, writes with group commit, reads and subscriptions."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import sqlite3
import threading
import time
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
)
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
    StreamState,
    expected_label,
    expected_matches,
    validate_append,
    validate_stream_name,
)
from agentjournal.store.sqlite._handoff import _Pending, _settle_all
from agentjournal.store.sqlite._model import _apply_model, read_model
from agentjournal.store.sqlite._purge import purge_model
from agentjournal.store.sqlite._rows import (
    _EVENT_COLUMNS,
    _fetch_events,
    _insert_events,
    _last_position,
    _recorded,
)
from agentjournal.store.sqlite._schema import _probe_connection, _resolved_connect
from agentjournal.store.sqlite._stored import (
    DICTIONARY,
    PLAIN,
    Packer,
    Unpacker,
    writing_dictionary,
)
from agentjournal.store.sqlite._wal_index import KnownHeads, WalIndex, open_wal_index

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


class _Conflict(Exception):
    """Raised inside a write transaction to roll it back with a ConcurrencyError."""

    def __init__(self, error: ConcurrencyError) -> None:
        self.error = error


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
        # The file's WAL index, read by the probe (under its lock) and by the store's thread
        # (its own descriptor), and heads known as of one of its headers: (header, stream ->
        # head, -1 for no such stream). Replaced whole, never changed in place: any pair
        # ever stored is true of the content that header names (see :meth:`heads_now`).
        self._wal: WalIndex | None = None
        self._writer_wal: WalIndex | None = None
        self._writer_wal_tried = False
        self._known = KnownHeads()
        # Stream name -> row id, as seen by the store's thread (for :meth:`_claim`).
        self._stream_ids: dict[str, int] = {}
        # The stored form (``_stored``), used on the store's thread only: the values it
        # reads decompressed with the file's dictionaries; the writer, once the file has
        # the dictionary it writes with (:meth:`_packer_now`).
        self._unpacker = Unpacker(connection)
        self._packer: Packer | None = None if compress else PLAIN

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
                lock before raising :class:`StoreUnavailable`.
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
        self._drain_all()
        if self._writer_wal is not None:
            self._writer_wal.close()  # before the connection whose descriptor it reads
        self._db.close()

    def _mark_closed(self) -> bool:
        if self._closed:
            return False
        self._closed = True
        self._notify()
        with self._probe_lock:  # waits for a probe in flight (a few microseconds)
            probe, self._probe, self._probe_failed = self._probe, None, True
            wal, self._wal = self._wal, None
        if wal is not None:
            wal.close()
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

    def _write(self, requests: list[AppendRequest]) -> asyncio.Future[list[AppendResult]]:
        """Queue ``requests`` for the store's thread; the future of their results, which
        the caller awaits (no coroutine of its own between the caller and the commit)."""
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
        return future

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

    def _header_now(self) -> bytes | None:
        """The WAL index's header, read on the store's thread inside its write transaction
        (no other commit can happen until it ends); None when not known."""
        wal = self._writer_wal
        if wal is None:
            if self._writer_wal_tried or self._probe_failed:
                return None
            self._writer_wal_tried = True
            wal = self._writer_wal = _wal_index_of(self._db)
            if wal is None:
                return None
        return wal.header()

    def _committed(self, before: bytes | None, moved: dict[str, int]) -> None:
        """Learn the heads this thread's commit moved (``moved``), begun at ``before``."""
        if before is not None and moved and self._writer_wal is not None:
            self._known.committed(before, self._writer_wal.header(), moved)

    def _packer_now(self) -> Packer:
        """The writer of the stored form; on first use, the file gets its dictionary in a
        transaction of its own, committed before any row names it (a write's rollback
        must not take away a dictionary this object would go on naming)."""
        if self._packer is None:
            content = DICTIONARY.encode("utf-8")
            self._packer = Packer(writing_dictionary(self._db, content), content)
        return self._packer

    def _write_sync(self, requests: list[AppendRequest]) -> list[AppendResult]:
        """One write in its own transaction."""
        db = self._db
        try:
            self._packer_now()
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            raise StoreUnavailable(f"SQLite store {self._path} is busy: {error}") from error
        try:
            before = self._header_now()
            moved: dict[str, int] = {}
            results = self._apply(db, requests, time.time_ns() // 1000, moved)
            db.execute("COMMIT")
            self._committed(before, moved)
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

        The writes are applied one after the other in one transaction, which commits
        them together, with one fsync. Writes see the earlier ones of the group,
        exactly as if they had committed one after the other. If any of them fails (a
        conflict, as a rule), the whole transaction is rolled back — nothing of it was
        committed — and the group is written again by :meth:`_write_each`, each write
        in a SAVEPOINT of its own, so that the failure is that write's alone; the
        common group, in which every write lands, pays no savepoint. If the group's
        transaction itself fails (BEGIN, COMMIT), every write of it gets
        :class:`StoreUnavailable` — an unknown outcome, which the writer settles by
        resending the same ids.
        """
        db = self._db
        begun = self._begin(len(group))
        if begun is not None:
            return begun
        try:
            now = time.time_ns() // 1000
            before = self._header_now()
            moved: dict[str, int] = {}
            try:
                landed: list[list[AppendResult] | BaseException] = [
                    self._apply(db, requests, now, moved) for requests in group
                ]
            except Exception:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                return self._write_each(group)
            db.execute("COMMIT")
            self._committed(before, moved)
        except BaseException as error:
            return self._abandoned(error, len(group))
        return landed

    def _abandoned(
        self, error: BaseException, writes: int
    ) -> list[list[AppendResult] | BaseException]:
        """What each write of a group gets when its transaction failed as a whole (rolled
        back here if SQLite has not): an unknown outcome."""
        with contextlib.suppress(sqlite3.Error):
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
        return [
            StoreUnavailable(f"SQLite store {self._path} failed: {error}") for _ in range(writes)
        ]

    def _begin(self, writes: int) -> list[list[AppendResult] | BaseException] | None:
        """Start a group's transaction; None, or (it could not start) what each write gets."""
        try:
            self._packer_now()
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            # One exception object per caller: each is raised in its own task.
            return [
                StoreUnavailable(f"SQLite store {self._path} cannot start a write: {error}")
                for _ in range(writes)
            ]
        return None

    def _write_each(
        self, group: list[list[AppendRequest]]
    ) -> list[list[AppendResult] | BaseException]:
        """:meth:`_write_group` with each write inside its own SAVEPOINT: a conflict or a
        failure rolls back that write alone and is reported to its caller alone; the
        others commit together. If the transaction itself fails (BEGIN, COMMIT, or an
        error after which SQLite abandoned it), every write gets
        :class:`StoreUnavailable`."""
        db = self._db
        begun = self._begin(len(group))
        if begun is not None:
            return begun
        outcomes: list[list[AppendResult] | BaseException] = []
        try:
            now = time.time_ns() // 1000
            before = self._header_now()
            moved: dict[str, int] = {}
            for requests in group:
                db.execute("SAVEPOINT aj_write")
                try:
                    each: dict[str, int] = {}
                    outcomes.append(self._apply(db, requests, now, each))
                    moved.update(each)  # a write rolled back to its savepoint moved nothing
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
            self._committed(before, moved)
        except BaseException as error:
            return self._abandoned(error, len(group))
        return outcomes

    def _apply(
        self,
        db: sqlite3.Connection,
        requests: list[AppendRequest],
        now: int,
        moved: dict[str, int],
    ) -> list[AppendResult]:
        """Check and insert one write inside an open transaction; its results. ``moved``
        is told each stream's new head (a recognised retry moves none)."""
        lone = len(requests) == 1  # a turn's write: one stream
        claimed = [self._claim(db, request, modelled=lone) for request in requests]
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
            packer = self._packer_now()
            last_position = _insert_events(db, stream_id, current, request.events, now, packer)
            _apply_model(
                db, request, stream_id, current, head, packer, followed=lone and claim is not None
            )
            moved[request.stream] = head
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
        self, db: sqlite3.Connection, request: AppendRequest, *, modelled: bool = False
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
        head = expected + len(request.events)
        model = request.model if modelled else None
        if model is None:
            moved = db.execute(
                "UPDATE streams SET head = ? WHERE id = ? AND head = ? AND name = ?",
                (head, stream_id, expected, request.stream),
            ).rowcount
        else:
            # ``modelled``: the read model's row follows the head in the same statement, as
            # _apply_model's own UPDATE would right after it (the write's only stream:
            # nothing in between looks at the row), one statement less a turn.
            moved = db.execute(
                "UPDATE streams SET head = ?1, "
                "modelled = CASE WHEN modelled = ?3 AND tree = ?4 THEN ?1 ELSE modelled END "
                "WHERE id = ?2 AND head = ?3 AND name = ?5",
                (head, stream_id, expected, model.tree, request.stream),
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
                self._wal = _wal_index_of(db)
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


def _wal_index_of(db: sqlite3.Connection) -> WalIndex | None:
    """The WAL index SQLite keeps for ``db``'s file: beside the file SQLite opened, which
    is not the path given when that is a symlink (SQLite follows it)."""
    try:
        file = db.execute("PRAGMA database_list").fetchone()[2]
    except sqlite3.Error:
        return None
    return open_wal_index(file) if file else None


def _executor() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentjournal-sqlite")


def _translated(path: str, fn: Callable[..., _T], *args: Any) -> _T:
    try:
        return fn(*args)
    except sqlite3.Error as error:
        raise StoreUnavailable(f"SQLite store {path} failed: {error}") from error


def _check_non_negative(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise InvalidInput(f"{name} must be an integer >= 0 or None, got {value!r}")
