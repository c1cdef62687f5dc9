"""The SQLite store's write path: the queue of writes, group commit on the store's thread,
and each write's transaction (compare-and-set, expected-state check, retry recognition)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sqlite3
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

from agentjournal.errors import ConcurrencyError, StoreUnavailable
from agentjournal.store.contract import (
    AppendRequest,
    AppendResult,
    StreamState,
    expected_label,
    expected_matches,
)
from agentjournal.store.sqlite._handoff import Listeners, _Pending, _settle_all, _translated
from agentjournal.store.sqlite._model import _apply_model
from agentjournal.store.sqlite._rows import _insert_events, _last_position
from agentjournal.store.sqlite._stored import DICTIONARY, PLAIN, Packer, writing_dictionary
from agentjournal.store.sqlite._wal_index import KnownHeads, WalIndex, wal_index_of

# At most this many writes share one transaction: a bound on how long one group
# holds the write lock and how much one failed commit sends back for a retry.
_GROUP_LIMIT: Final = 256
# The compare-and-set's stream ids are a cache: a long-lived store writes to ever more
# streams (one tree per session), so it is emptied when it holds this many (~10 MiB).
_STREAM_IDS_KEPT: Final = 65_536


class _Conflict(Exception):
    """Raised inside a write transaction to roll it back with a ConcurrencyError."""

    def __init__(self, error: ConcurrencyError) -> None:
        self.error = error


class Writes:
    """The write path of one :class:`~agentjournal.store.sqlite.SQLiteEventStore`.

    The store owns it, and the connection, executor, known heads and listeners it is
    handed; it owns the queue of writes and what only writing needs (the stream ids of
    the compare-and-set, the writer of the stored form, its own read of the WAL index).
    Everything but :meth:`write` and :meth:`learn_no_heads` runs on the store's thread.
    """

    def __init__(
        self,
        path: str,
        connection: sqlite3.Connection,
        executor: ThreadPoolExecutor,
        known: KnownHeads,
        listeners: Listeners,
        *,
        compress: bool,
        learn_heads: bool,
    ) -> None:
        self._path = path
        self._db = connection
        self._executor = executor
        self._known = known
        self._listeners = listeners
        # Writes waiting for the store's thread; one drain job commits them as a group.
        self._queue: list[_Pending] = []
        self._queue_lock = threading.Lock()
        self._drain_scheduled = False
        # Event loops whose writes wait for the end of the loop's pass to start a drain.
        self._kicking: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        # The file's WAL index as the store's thread reads it, to tell the known heads what
        # its own commits moved; looked for once, on the first commit, unless nobody will
        # ask for those heads (:meth:`learn_no_heads`).
        self._writer_wal: WalIndex | None = None
        self._writer_wal_wanted = learn_heads
        # Stream name -> row id, as seen by the store's thread (for :meth:`_claim`).
        self._stream_ids: dict[str, int] = {}
        # The writer of the stored form (``_stored``), once the file has the dictionary it
        # writes with (:meth:`_packer_now`).
        self._packer: Packer | None = None if compress else PLAIN

    def write(self, requests: list[AppendRequest]) -> asyncio.Future[list[AppendResult]]:
        """Queue ``requests`` for the store's thread; the future of their results, which
        the caller awaits (no coroutine of its own between the caller and the commit)."""
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

    def learn_no_heads(self) -> None:
        """Do not look for the WAL index to learn heads from commits (one already found is
        read on): nobody will ask for them, the heads probe being unable to open or the
        store closing. Called on the caller's thread; read on the store's."""
        self._writer_wal_wanted = False

    def close(self) -> None:
        """Commit everything still queued and stop reading the WAL index (on the store's
        thread, before the store closes the connection whose descriptor the index reads)."""
        self._drain_all()
        if self._writer_wal is not None:
            self._writer_wal.close()

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
            self._listeners.notify()  # subscribers, even when every caller was cancelled meanwhile
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
            if not self._writer_wal_wanted:
                return None
            self._writer_wal_wanted = False  # looked for once
            wal = self._writer_wal = wal_index_of(self._db)
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

    def check_sync(self, requests: list[AppendRequest]) -> list[AppendResult]:
        """The results of ``requests``, none of them with events, from one read: each
        stream's expected state checked as a write checks it. A read-only store answers
        such a write so (it writes nothing, and ``BEGIN IMMEDIATE`` is a write)."""
        assert not any(request.events for request in requests)
        db = self._db
        db.execute("BEGIN")
        try:
            checked = [self._check(db, request) for request in requests]
            position = _last_position(db)
        except _Conflict as conflict:
            raise conflict.error from None
        except sqlite3.Error as error:
            raise StoreUnavailable(f"SQLite store {self._path} failed: {error}") from error
        finally:
            if db.in_transaction:
                db.execute("COMMIT")
        return [
            AppendResult(request.stream, current, position)
            for request, (_, current, _) in zip(requests, checked, strict=True)
        ]

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
