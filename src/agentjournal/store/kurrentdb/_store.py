"""The KurrentDB store's class: appends and settling their outcome, reads and subscriptions."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Sequence,
)
from functools import partial
from typing import Final

from kurrentdbclient import AsyncKurrentDBClient
from kurrentdbclient import NewEvents as KdbNewEvents
from kurrentdbclient import RecordedEvent as KdbRecordedEvent
from kurrentdbclient.exceptions import (
    KurrentDBClientError,
    NotFoundError,
    ServiceUnavailableError,
    StreamIsDeletedError,
    StreamTombstonedError,
    WrongCurrentVersionError,
)

from agentjournal.errors import (
    ConcurrencyError,
    InvalidInput,
    JournalError,
    StoreError,
    StoreUnavailable,
    StreamDeleted,
)
from agentjournal.store.contract import (
    AppendRequest,
    AppendResult,
    Expected,
    NewEvent,
    RecordedEvent,
    StreamState,
    expected_label,
    expected_matches,
    validate_append,
    validate_stream_name,
)
from agentjournal.store.kurrentdb._connection import (
    _CHANNEL_OPTIONS,
    DEFAULT_DEADLINE,
    _Connection,
)
from agentjournal.store.kurrentdb._errors import (
    _describe,
    _refused_before_writing,
)
from agentjournal.store.kurrentdb._limits import (
    MAX_APPEND_SIZE,
    MAX_RECORD_SIZE,
    _check_v1_size,
    _check_v2_size,
    _fits_v1_message,
)
from agentjournal.store.kurrentdb._loop import (
    _T,
    _consume_outcome,
    _end_on,
    _next,
    _run_there,
)
from agentjournal.store.kurrentdb._reconnect import _Reconnect
from agentjournal.store.kurrentdb._records import (
    _NOT_SYSTEM_STREAMS,
    _check_non_negative,
    _conflict,
    _from_kdb,
    _invalid_position,
    _is_system,
    _kdb_expected,
    _known_revision,
    _to_kdb,
)
from agentjournal.store.kurrentdb._uri import _client_uri, _scrub, _userinfo, redact_uri

logger = logging.getLogger("agentjournal.store.kurrentdb")


_SCAN_PAGE: Final = 256
_READ_PAGE: Final = 4096  # events per read call: each call has its own deadline


class KurrentDBEventStore(_Connection):
    """An :class:`~agentjournal.store.contract.EventStore` on a KurrentDB server.

    Create it with :meth:`open`; close it with :meth:`close` or use it as an
    async context manager. Safe to share between asyncio tasks and between
    event loops in several threads (``Runner.run_sync`` in a thread pool): a
    ``grpc.aio`` channel belongs to the loop that created it, so calls from
    loops other than the one that opened the store run on the process's I/O
    loop (one hand-over between threads each). Needs KurrentDB >= 25.1.1 for
    :meth:`append_many`, and permission to read ``$all`` for :meth:`read_all`
    and :meth:`subscribe`.
    """

    @classmethod
    async def open(
        cls,
        uri: str,
        *,
        deadline: float | None = None,
        reconnect_for: float | None = None,
        max_append_size: int = MAX_APPEND_SIZE,
        max_append_event_size: int = MAX_RECORD_SIZE,
    ) -> KurrentDBEventStore:
        """Connect to the KurrentDB server ``uri`` names and check that it answers.

        Args:
            uri: A KurrentDB connection string (see the module docs).
            deadline: Seconds any one call may take; default the URI's
                ``DefaultDeadline``, else 10.
            reconnect_for: Seconds a subscription keeps reconnecting; None: for ever.
            max_append_size: The server's ``MaxAppendSize`` (default 256 MiB,
                25.1+; 25.0 took 1 MiB, and has no multi-stream appends).
            max_append_event_size: The server's ``MaxAppendEventSize`` (default
                16 MiB); pass a lower one the server is configured with to
                refuse larger events before sending them.

        Raises:
            InvalidInput: ``uri`` is not a valid KurrentDB connection string,
                or an option is out of range.
            StoreUnavailable: The server cannot be reached or does not answer
                within the deadline; the message names the URI without credentials.
        """
        safe = redact_uri(uri)
        secret = _userinfo(uri)
        try:
            client_uri, uri_deadline = _client_uri(uri)
            client = AsyncKurrentDBClient(client_uri)
            # gRPC's own reconnect backoff grows to two minutes: a node back after a
            # restart would wait that long for its clients. Cap it like ours.
            client.grpc_options += _CHANNEL_OPTIONS
        except (ValueError, TypeError, KeyError, OSError, KurrentDBClientError) as error:
            raise InvalidInput(
                f"invalid KurrentDB URI {safe}: {_scrub(str(error), secret)}; use "
                "kurrentdb://host:2113?Tls=false, kurrentdb://h1:2113,h2:2113,h3:2113?Tls=false "
                "(cluster seeds), kurrentdb+discover://cluster.example.com:2113?Tls=false (one "
                "DNS name) or kurrentdb://user:password@host:2113 (TLS)"
            ) from None
        chosen = deadline if deadline is not None else uri_deadline or DEFAULT_DEADLINE
        store = cls(
            client,
            uri,
            deadline=chosen,
            reconnect_for=reconnect_for,
            max_append_size=max_append_size,
            max_append_event_size=max_append_event_size,
        )
        try:
            await store._bounded(lambda: store._probe())
        except Exception as error:
            with contextlib.suppress(Exception):
                await client.close()
            reason = _scrub(_describe(error, store._deadline), secret)
            raise StoreUnavailable(
                f"cannot reach KurrentDB at {safe}: {reason}. Check that the server runs, "
                "that host and port are right, and that Tls= matches the server"
            ) from None
        return store

    async def __aenter__(self) -> KurrentDBEventStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- writes ---------------------------------------------------------------

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        """Append ``events`` to ``stream`` (see :meth:`EventStore.append`)."""
        if (there := self._elsewhere()) is not None:
            return await _run_there(there, self.append(stream, events, expected=expected))
        request = AppendRequest(stream, events, expected)
        validate_append([request], many=False)
        self._check_open()
        if not request.events:
            return await self._check_expected(request)
        new_events = [_to_kdb(event) for event in request.events]
        if not _fits_v1_message(stream, new_events):
            # Too large for the v1 service's message limit: the v2 call takes it.
            (result,) = await self.append_many([request])
            return result
        _check_v1_size(stream, new_events, self._max_append_size, self._max_event_size)
        try:
            position = await self._write(
                lambda: self._client().append_to_stream(
                    stream,
                    events=new_events,
                    current_version=_kdb_expected(expected),
                    timeout=self._deadline,
                )
            )
        except WrongCurrentVersionError as error:
            landed = await self._landed([request])
            if landed is not None:
                return landed[0]
            raise _conflict(request, error) from None
        except Exception as error:
            raise self._write_failed(error, stream) from None
        return await self._result(request, position)

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        """Append to several streams atomically (see :meth:`EventStore.append_many`)."""
        if (there := self._elsewhere()) is not None:
            return await _run_there(there, self.append_many(requests))
        requests = list(requests)
        validate_append(requests, many=True)
        self._check_open()
        _check_v2_size(requests, self._max_append_size, self._max_event_size)
        batches = [
            KdbNewEvents(
                stream_name=request.stream,
                events=[_to_kdb(event) for event in request.events],
                current_version=_kdb_expected(request.expected),
            )
            for request in requests
        ]
        try:
            position = await self._write(
                lambda: self._client().multi_append_to_stream(batches, timeout=self._deadline)
            )
        except WrongCurrentVersionError as error:
            landed = await self._landed(requests)
            if landed is not None:
                return landed
            by_name = {request.stream.casefold(): request for request in requests}
            culprit = by_name.get((error.stream_name or "").casefold())
            if culprit is None:
                raise await self._explain_failure(requests, error) from None
            raise _conflict(culprit, error) from None
        except (StreamIsDeletedError, StreamTombstonedError) as error:
            raise await self._deleted(requests, error) from None
        except Exception as error:
            translated = self._translate(error, None)
            if (
                isinstance(translated, StoreUnavailable | InvalidInput)
                or self._closed
                or _refused_before_writing(error)
            ):
                raise translated from None
            # An unexplained refusal (26.0 fails a partly retried transaction with
            # an internal error): did an earlier attempt land, did a stream move?
            landed = await self._landed(requests)
            if landed is not None:
                return landed
            raise await self._explain_failure(requests, error) from None
        results = await asyncio.gather(*(self._result(r, position) for r in requests))
        final = max((r.position for r in results), default=0)
        return [AppendResult(r.stream, r.revision, final) for r in results]

    async def _write(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """Run a write within the deadline, shielded: a cancelled or timed-out caller
        does not cancel the request in flight; its outcome stands."""
        task = asyncio.ensure_future(call())
        task.add_done_callback(_consume_outcome)
        try:
            return await asyncio.wait_for(asyncio.shield(task), self._deadline)
        except TimeoutError:
            raise StoreUnavailable(
                f"KurrentDB at {self._uri} did not answer within {self._deadline:g} s; the "
                "write may or may not have landed: retry it with the same event ids"
            ) from None

    async def _landed(self, requests: Sequence[AppendRequest]) -> list[AppendResult] | None:
        """The results of an earlier attempt of this very write, if its events are in place.

        Each stream must hold the request's event ids, in order, right after the
        expected revision (from the start for ``NO_STREAM``). ``ANY`` and
        ``EXISTS`` say nothing about where a write went: then None.

        Raises:
            StoreUnavailable: The streams could not be read: the outcome is unknown.
        """
        found: list[KdbRecordedEvent] = []
        for request in requests:
            expected = request.expected
            if not isinstance(expected, int) and expected is not StreamState.NO_STREAM:
                return None
            start = expected + 1 if isinstance(expected, int) else 0
            try:
                events = await self._bounded(
                    partial(
                        self._client().get_stream,
                        request.stream,
                        stream_position=start,
                        limit=len(request.events),
                        timeout=self._deadline,
                    )
                )
            except (NotFoundError, StreamIsDeletedError):
                return None
            except Exception as error:
                raise self._unknown_outcome(error, request.stream) from None
            if [event.id for event in events] != [event.id for event in request.events]:
                return None
            found.append(events[-1])
        position = max(event.commit_position for event in found)
        return [
            AppendResult(request.stream, event.stream_position, position)
            for request, event in zip(requests, found, strict=True)
        ]

    async def _result(self, request: AppendRequest, position: int) -> AppendResult:
        """Where ``request``'s stream stands after the write at ``position`` (<= 0: unknown)."""
        expected = request.expected
        known = _known_revision(request)
        if isinstance(expected, int) and position > 0:
            return AppendResult(request.stream, expected + len(request.events), position)
        # NO_STREAM, ANY, EXISTS, or a retry the server gave no position for: read it
        # back (a soft-deleted stream that is written again continues its old revisions).
        try:
            event = await self._find_last(request, position)
        except (NotFoundError, StreamIsDeletedError, StreamTombstonedError):
            event = None
        except Exception as error:
            raise self._unknown_outcome(error, request.stream, landed=True) from None
        if event is not None:
            return AppendResult(
                request.stream,
                event.stream_position,
                position if position > 0 else event.commit_position,
            )
        # The events cannot be read any more (deleted since): what is known.
        return AppendResult(request.stream, known, max(position, 0))

    async def _find_last(self, request: AppendRequest, position: int) -> KdbRecordedEvent | None:
        """Scan ``request.stream`` backwards for the write's last event.

        With a known ``position`` it is the first event at or below it; without
        one it is the newest event carrying the request's last id.
        """
        last_id = request.events[-1].id
        from_revision: int | None = None
        page = 1  # without a concurrent writer the newest event is the one
        while True:
            events = await self._bounded(
                partial(
                    self._client().get_stream,
                    request.stream,
                    stream_position=from_revision,
                    backwards=True,
                    limit=page,
                    timeout=self._deadline,
                )
            )
            for event in events:
                if position > 0 and event.commit_position <= position:
                    return event if event.id == last_id else None
                if position <= 0 and event.id == last_id:
                    return event
            if len(events) < page or events[-1].stream_position == 0:
                return None
            from_revision = events[-1].stream_position - 1
            page = min(page * 8, 1024)

    async def _check_expected(self, request: AppendRequest) -> AppendResult:
        """An append without events: check the expected state, report the head."""
        head = await self.head(request.stream)
        if not expected_matches(request.expected, head):
            raise ConcurrencyError(request.stream, expected_label(request.expected), head)
        return AppendResult(
            request.stream, -1 if head is None else head, await self._last_position()
        )

    async def _deleted(self, requests: Sequence[AppendRequest], error: Exception) -> JournalError:
        """``StreamDeleted`` for the stream of the write that is deleted, checked by reading.

        KurrentDB 26.1 answers "deleted" when any stream of a multi-stream write
        is, but names the first stream that failed its check, which may be one
        that only conflicts: with several streams the name is checked, not
        trusted. Deleted is a tombstone, or a soft delete under ``EXISTS``.
        """
        named = (getattr(error, "stream_name", None) or "").casefold()
        ordered = sorted(requests, key=lambda request: request.stream.casefold() != named)
        if len(requests) == 1:
            return StreamDeleted(requests[0].stream)
        missing: list[str] = []
        for request in ordered:
            try:
                head = await self.head(request.stream)
            except StreamDeleted:
                return StreamDeleted(request.stream)
            except StoreError:
                break  # cannot tell: report what the server said
            if head is None and request.expected is StreamState.EXISTS:
                missing.append(request.stream)
        return StreamDeleted(missing[0] if missing else ordered[0].stream)

    async def _explain_failure(
        self, requests: Sequence[AppendRequest], error: Exception
    ) -> JournalError:
        """Turn an unexplained multi-append failure into a conflict if a stream moved.

        Otherwise its outcome is unknown (``StoreUnavailable``): an error this
        store does not know may have come after the server wrote.
        """
        for request in requests:
            try:
                head = await self.head(request.stream)
            except StoreError as failure:
                return self._unknown_outcome(failure)
            if not expected_matches(request.expected, head):
                return ConcurrencyError(request.stream, expected_label(request.expected), head)
        return self._unknown_outcome(error)

    # -- reads ----------------------------------------------------------------

    async def read(
        self,
        stream: str,
        *,
        from_revision: int | None = None,
        backwards: bool = False,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        """Read events of ``stream`` (see :meth:`EventStore.read`).

        Long reads go in pages, each within the deadline.
        """
        if (there := self._elsewhere()) is not None:
            return await _run_there(
                there,
                self.read(stream, from_revision=from_revision, backwards=backwards, limit=limit),
            )
        validate_stream_name(stream)
        _check_non_negative("from_revision", from_revision)
        _check_non_negative("limit", limit)
        self._check_open()
        results: list[RecordedEvent] = []
        cursor = from_revision
        try:
            while True:
                want = _READ_PAGE if limit is None else min(_READ_PAGE, limit - len(results))
                page = await self._bounded(
                    partial(
                        self._client().get_stream,
                        stream,
                        stream_position=cursor,
                        backwards=backwards,
                        limit=max(want, 1),
                        timeout=self._deadline,
                    )
                )
                if limit == 0:
                    return []
                results.extend(_from_kdb(event) for event in page)
                if len(page) < want or (limit is not None and len(results) >= limit):
                    return results
                last = page[-1].stream_position
                if backwards and last == 0:
                    return results
                cursor = last - 1 if backwards else last + 1
        except Exception as error:
            raise self._translate(error, stream) from None

    async def head(self, stream: str) -> int | None:
        """Return the revision of the stream's last event, or None if it does not exist."""
        if (there := self._elsewhere()) is not None:
            return await _run_there(there, self.head(stream))
        validate_stream_name(stream)
        self._check_open()
        try:
            events = await self._bounded(
                lambda: self._client().get_stream(
                    stream, backwards=True, limit=1, timeout=self._deadline
                )
            )
        except NotFoundError:
            return None
        except Exception as error:
            raise self._translate(error, stream) from None
        return events[0].stream_position if events else None

    async def read_all(
        self, *, from_position: int | None = None, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read all non-system streams in global order, from ``from_position`` inclusive."""
        if (there := self._elsewhere()) is not None:
            return await _run_there(there, self.read_all(from_position=from_position, limit=limit))
        _check_non_negative("from_position", from_position)
        _check_non_negative("limit", limit)
        self._check_open()
        if limit == 0:
            return []
        try:
            try:
                return await self._read_all(from_position, limit, resume=False)
            except KurrentDBClientError as error:
                if from_position is None or not _invalid_position(error):
                    raise
                before = await self._position_before(from_position)
                return await self._read_all(before, limit, resume=before is not None)
        except Exception as error:
            raise self._translate(error, None) from None

    async def _read_all(
        self, cursor: int | None, limit: int | None, *, resume: bool
    ) -> list[RecordedEvent]:
        """Read forwards from ``cursor`` (exclusive when ``resume``), skipping system events."""
        results: list[RecordedEvent] = []
        while True:
            want = _READ_PAGE if limit is None else min(_READ_PAGE, limit - len(results))
            want += 1 if resume else 0
            page = await self._bounded(partial(self._read_all_page, cursor, want))
            last = cursor
            for event in page:
                if resume and event.commit_position == cursor:
                    continue
                last = event.commit_position
                if _is_system(event):
                    continue
                results.append(_from_kdb(event))
                if limit is not None and len(results) == limit:
                    return results
            if len(page) < want:
                return results
            cursor, resume = last, True

    async def _read_all_page(self, cursor: int | None, limit: int) -> list[KdbRecordedEvent]:
        response = await self._client().read_all(
            commit_position=cursor,
            limit=limit,
            filter_exclude=_NOT_SYSTEM_STREAMS,
            filter_by_stream_name=True,
            timeout=self._deadline,
        )
        return [event async for event in response]

    async def _position_before(self, position: int) -> int | None:
        """Return the position of the last event before ``position``, or None."""
        cursor: int | None = None
        while True:
            page = await self._bounded(partial(self._read_back, cursor, _SCAN_PAGE))
            for event in page:
                if event.commit_position < position:
                    return event.commit_position
            if len(page) < _SCAN_PAGE:
                return None
            cursor = page[-1].commit_position

    async def _read_back(self, cursor: int | None, limit: int) -> list[KdbRecordedEvent]:
        response = await self._client().read_all(
            commit_position=cursor,
            backwards=True,
            limit=limit,
            filter_exclude=_NOT_SYSTEM_STREAMS,
            filter_by_stream_name=True,
            timeout=self._deadline,
        )
        return [event async for event in response]

    async def _last_position(self) -> int:
        """The position of the last event (0 for none): one backward read of one event."""
        try:
            page = await self._bounded(lambda: self._read_back(None, 1))
        except Exception as error:
            raise self._translate(error, None) from None
        return page[0].commit_position if page else 0

    async def subscribe(self, *, after_position: int | None = None) -> AsyncIterator[RecordedEvent]:
        """Yield every non-system event after ``after_position``, then follow new ones.

        A catch-up subscription to ``$all``. It ends when the consumer stops
        iterating or the store is closed, and only then. When the connection
        drops, the server restarts, or the client replaces its connection
        (after another call on this store met an unavailable server) it
        reconnects (capped exponential backoff with jitter, each attempt
        logged) and resumes right after the last event delivered: no gap, no
        duplicate. It raises :class:`~agentjournal.errors.StoreUnavailable`
        only after ``reconnect_for`` seconds without progress (never by default).

        Iterate it from any event loop, even a different one from step to step:
        off the home loop its events come from the I/O loop, one hand-over each;
        when the consumer changes loops it resubscribes after the last event
        delivered, and the old call is ended on its own loop.
        """
        _check_non_negative("after_position", after_position)
        self._check_open()
        cursor = after_position
        follow: AsyncGenerator[RecordedEvent, None] | None = None
        follow_loop: asyncio.AbstractEventLoop | None = None  # the loop ``follow`` runs on
        try:
            while not self._closed:
                there = self._elsewhere()
                loop = there or asyncio.get_running_loop()
                if follow is None or loop is not follow_loop:
                    if follow is not None and follow_loop is not None:
                        _end_on(follow_loop, follow)
                    follow, follow_loop = self._follow(cursor), loop
                step = _next(follow)
                event = await (step if there is None else _run_there(there, step))
                if event is None:
                    return
                cursor = event.position
                yield event
        finally:
            if follow is not None and follow_loop is not None:
                if follow_loop is asyncio.get_running_loop():
                    await follow.aclose()
                else:
                    _end_on(follow_loop, follow)

    async def _follow(self, after_position: int | None) -> AsyncGenerator[RecordedEvent, None]:
        """:meth:`subscribe` on the running loop's client, for one loop."""
        cursor = after_position
        find_boundary = fell_back = delivered = False
        retry = _Reconnect(self._reconnect_for)
        while not self._closed:
            try:
                if find_boundary:
                    # ``cursor`` is not a record boundary: start after the last event
                    # before it (or at the very beginning when there is none).
                    cursor = await self._position_before(cursor or 0)
                    find_boundary, fell_back = False, True
                subscription = await self._bounded(
                    partial(
                        self._client().subscribe_to_all,
                        commit_position=cursor,
                        filter_exclude=_NOT_SYSTEM_STREAMS,
                        filter_by_stream_name=True,
                    )
                )
            except Exception as error:
                if self._closed:
                    return
                await self._reconnect_or_raise(error, retry)
                continue
            retry.connected()
            try:
                async for event in subscription:
                    cursor = event.commit_position
                    retry.delivered()
                    if _is_system(event):
                        continue
                    delivered = True
                    yield _from_kdb(event)
            except Exception as error:
                # CancelledByClientError lands here too: when our store is not
                # closed, the client cut the call off because it replaced its
                # connection after another call's error. Resubscribe.
                if self._closed:
                    return
                if _invalid_position(error) and not (delivered or fell_back or cursor is None):
                    find_boundary = True
                    continue
                await self._reconnect_or_raise(error, retry)
            else:
                # The server ended the subscription without an error (a node
                # shutting down): resume like after a dropped connection.
                if self._closed:
                    return
                await self._reconnect_or_raise(
                    ServiceUnavailableError("the server ended the subscription"), retry
                )
            finally:
                with contextlib.suppress(Exception):
                    await subscription.stop()

    async def _reconnect_or_raise(self, error: BaseException, retry: _Reconnect) -> None:
        """Wait before the next attempt, or raise when the error is final or time is up."""
        translated = self._translate(error, None)
        if not isinstance(translated, StoreUnavailable) or self._closed:
            raise translated
        delay = retry.next_delay()
        if delay is None:
            raise StoreUnavailable(
                f"{translated} (the subscription to $all kept failing for "
                f"{self._reconnect_for:g} s)"
            )
        logger.warning(
            "subscription to $all on %s lost (%s); reconnecting in %.2f s (attempt %d)",
            self._uri,
            _scrub(_describe(error, self._deadline), self._secret),
            delay,
            retry.attempt,
        )
        await asyncio.sleep(delay)
