"""The KurrentDB event store: the contract on ``kurrentdbclient.AsyncKurrentDBClient``.

``KurrentDBEventStore.open("kurrentdb://host:2113?Tls=false")`` connects and
checks that the server answers; any connection string ``kurrentdbclient``
accepts works (``kurrentdb+discover://`` for clusters, TLS options, ...).

How the contract maps onto KurrentDB:

* ``append`` is ``append_to_stream`` (one atomic write) and ``append_many`` is
  ``multi_append_to_stream`` (one atomic transaction over several streams,
  KurrentDB >= 25.1.1). Event ids pass through unchanged, so a retry carries
  the ids of the first attempt and the server recognises it.
* Both client calls report only the commit position of the write's last
  event. The revision a stream reached is computed when the writer gave an
  exact revision (``expected + len(events)``); for ``NO_STREAM``, ``ANY`` and
  ``EXISTS`` it is read back: the stream's tail is read backwards to the first
  event at or below the write's position, which is the write's last event in
  that stream (a transaction's events are contiguous in the log, and later
  writes have higher positions). A tail read costs one round trip.
* ``position`` is the event's commit position. KurrentDB writes every event of
  an append as its own self-committed log record, so each event has its own
  commit position (equal to its prepare position) and positions are strictly
  increasing, with gaps. KurrentDB accepts only record boundaries as start
  positions: ``read_all``/``subscribe`` with any other position first find the
  last event before it (a backwards read from the end) and start there.
* ``read_all`` and ``subscribe`` exclude system streams (names starting with
  ``$``) on the server and system events (types starting with ``$``, such as
  the ``$streamDeleted`` record of a tombstone) on the client.
* Metadata is written as a JSON object of strings; on read the keys the
  server adds (``$schema.name``, ``$schema.format``, ``$schema.id``,
  ``$record.timestamp``) are dropped.
* Client errors are translated into :mod:`agentjournal.errors`; no ``grpc`` or
  ``kurrentdbclient`` exception reaches a caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit, urlunsplit

import grpc.aio
from kurrentdbclient import AsyncKurrentDBClient
from kurrentdbclient import NewEvent as KdbNewEvent
from kurrentdbclient import NewEvents as KdbNewEvents
from kurrentdbclient import RecordedEvent as KdbRecordedEvent
from kurrentdbclient import StreamState as KdbStreamState
from kurrentdbclient.exceptions import (
    AbortedByServerError,
    AccessDeniedError,
    BadRequestError,
    CancelledByClientError,
    DeadlineExceededError,
    DiscoveryFailedError,
    ExceptionThrownByHandlerError,
    InvalidArgumentError,
    InvalidCommitPositionError,
    KurrentDBClientError,
    MaximumAppendSizeExceededError,
    MultiAppendToSameStreamError,
    NodeIsNotLeaderError,
    NotFoundError,
    ProgrammingError,
    ServiceUnavailableError,
    StreamIsDeletedError,
    StreamTombstonedError,
    TransactionMaxSizeExceededError,
    UnauthenticatedError,
    WrongCurrentVersionError,
)
from kurrentdbclient.exceptions import (
    CancelledError as ServerCancelledError,
)

from agentjournal.errors import (
    ConcurrencyError,
    InvalidInput,
    JournalError,
    StoreError,
    StoreUnavailable,
    StreamDeleted,
    StreamNotFound,
)
from agentjournal.store.base import (
    AppendRequest,
    AppendResult,
    Expected,
    NewEvent,
    RecordedEvent,
    StreamState,
    encode_metadata,
    expected_label,
    expected_matches,
    validate_append,
    validate_stream_name,
)

__all__ = ["KurrentDBEventStore", "redact_uri"]

SERVER_METADATA_KEYS: Final = frozenset(
    {"$schema.name", "$schema.format", "$schema.id", "$record.timestamp"}
)
"""Metadata keys KurrentDB adds to events; dropped on read."""

_NOT_SYSTEM_STREAMS: Final = (r"\$.*",)  # filter_exclude on stream names
_PROBE_STREAM: Final = "agentjournal-connection-probe"
_PROBE_TIMEOUT: Final = 10.0
_SCAN_PAGE: Final = 256
_RESUBSCRIBE_ATTEMPTS: Final = 3
_EPOCH: Final = datetime.fromtimestamp(0, UTC)
_T = TypeVar("_T")

_INPUT_ERRORS: Final = (
    MultiAppendToSameStreamError,
    MaximumAppendSizeExceededError,
    TransactionMaxSizeExceededError,
    InvalidArgumentError,
    BadRequestError,
    ProgrammingError,
)
_CONNECTION_ERRORS: Final = (
    ServiceUnavailableError,
    DeadlineExceededError,
    DiscoveryFailedError,
    NodeIsNotLeaderError,
    grpc.aio.UsageError,
)
_UNAVAILABLE_ERRORS: Final = (
    *_CONNECTION_ERRORS,
    AbortedByServerError,  # e.g. a subscriber too slow for the server
    ExceptionThrownByHandlerError,  # KurrentDB throws it "from time to time"
    ServerCancelledError,
)


def redact_uri(uri: str) -> str:
    """Return ``uri`` without the ``user:password@`` part, safe to log or show."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparseable KurrentDB URI>"
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


class KurrentDBEventStore:
    """An :class:`~agentjournal.store.base.EventStore` on a KurrentDB server.

    Create it with :meth:`open`; close it with :meth:`close` or use it as an
    async context manager. Safe to share between asyncio tasks of one event
    loop. Needs KurrentDB >= 25.1.1 for :meth:`append_many`, and permission to
    read ``$all`` for :meth:`read_all` and :meth:`subscribe`.
    """

    def __init__(self, client: AsyncKurrentDBClient, uri: str) -> None:
        """Wrap a connected client; prefer :meth:`open`.

        Args:
            client: A connected ``AsyncKurrentDBClient``; the store closes it.
            uri: The connection string, used (redacted) in error messages.
        """
        self._client = client
        self._uri = redact_uri(uri)
        self._secret = _userinfo(uri)
        self._closed = False

    @classmethod
    async def open(cls, uri: str) -> KurrentDBEventStore:
        """Connect to the KurrentDB server ``uri`` names and check that it answers.

        Raises:
            InvalidInput: ``uri`` is not a valid KurrentDB connection string.
            StoreUnavailable: The server cannot be reached; the message names
                the URI without credentials.
        """
        safe = redact_uri(uri)
        secret = _userinfo(uri)
        try:
            client = AsyncKurrentDBClient(uri)
        except (ValueError, TypeError, KeyError, OSError, KurrentDBClientError) as error:
            raise InvalidInput(
                f"invalid KurrentDB URI {safe}: {_scrub(str(error), secret)}; use "
                "kurrentdb://host:2113?Tls=false or kurrentdb+discover://host1,host2:2113"
            ) from None
        try:
            await client.connect()
            with contextlib.suppress(NotFoundError):
                await client.get_stream(_PROBE_STREAM, limit=1, timeout=_PROBE_TIMEOUT)
        except (KurrentDBClientError, grpc.aio.UsageError, grpc.RpcError, OSError) as error:
            with contextlib.suppress(Exception):
                await client.close()
            reason = _scrub(str(error) or type(error).__name__, secret)
            raise StoreUnavailable(
                f"cannot reach KurrentDB at {safe}: {reason}. Check that the server runs, "
                "that host and port are right, and that Tls= matches the server"
            ) from None
        return cls(client, uri)

    async def __aenter__(self) -> KurrentDBEventStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; open subscriptions end."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            await self._client.close()

    # -- writes ---------------------------------------------------------------

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        """Append ``events`` to ``stream`` (see :meth:`EventStore.append`)."""
        request = AppendRequest(stream, events, expected)
        validate_append([request], many=False)
        self._check_open()
        if not request.events:
            return await self._check_expected(request)
        new_events = [_to_kdb(event) for event in request.events]
        try:
            position = await _shielded(
                self._client.append_to_stream(
                    stream, events=new_events, current_version=_kdb_expected(expected)
                )
            )
        except WrongCurrentVersionError as error:
            raise _conflict(request, error) from None
        except Exception as error:
            raise self._translate(error, stream) from None
        return await self._result(request, position)

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        """Append to several streams atomically (see :meth:`EventStore.append_many`)."""
        requests = list(requests)
        validate_append(requests, many=True)
        self._check_open()
        batches = [
            KdbNewEvents(
                stream_name=request.stream,
                events=[_to_kdb(event) for event in request.events],
                current_version=_kdb_expected(request.expected),
            )
            for request in requests
        ]
        try:
            position = await _shielded(self._client.multi_append_to_stream(batches))
        except WrongCurrentVersionError as error:
            by_name = {request.stream.casefold(): request for request in requests}
            culprit = by_name.get((error.stream_name or "").casefold())
            if culprit is None:
                raise await self._explain_failure(requests, error) from None
            raise _conflict(culprit, error) from None
        except (StreamIsDeletedError, StreamTombstonedError) as error:
            named = (getattr(error, "stream_name", None) or "").casefold()
            deleted = next((r.stream for r in requests if r.stream.casefold() == named), None)
            raise self._translate(error, deleted) from None
        except (*_INPUT_ERRORS, *_CONNECTION_ERRORS) as error:
            raise self._translate(error, None) from None
        except KurrentDBClientError as error:
            # A mix of retried and new streams gets an internal error from
            # KurrentDB 26.0 rather than a conflict: find out what happened.
            raise await self._explain_failure(requests, error) from None
        except Exception as error:  # anything else the client lets through: still our tree
            raise self._translate(error, None) from None
        if position <= 0:  # a server that reports no position for a retry
            position = await self._locate(requests[-1], 0)
        revisions = await asyncio.gather(
            *(self._revision(request, position) for request in requests)
        )
        return [
            AppendResult(request.stream, revision, position)
            for request, revision in zip(requests, revisions, strict=True)
        ]

    async def _result(self, request: AppendRequest, position: int) -> AppendResult:
        if position <= 0:
            position = await self._locate(request, 0)
        return AppendResult(request.stream, await self._revision(request, position), position)

    async def _revision(self, request: AppendRequest, position: int) -> int:
        """Return the revision ``request``'s stream reached in the write at ``position``."""
        if isinstance(request.expected, int):
            return request.expected + len(request.events)
        # NO_STREAM, ANY, EXISTS: read it back (a soft-deleted stream that is
        # written again continues its old revisions, so NO_STREAM is not -1).
        try:
            return await self._locate_revision(request, position)
        except Exception as error:
            raise self._translate(error, request.stream) from None

    async def _locate(self, request: AppendRequest, position: int) -> int:
        """Return the position of ``request``'s last event (found by id)."""
        try:
            event = await self._find_last(request, position)
        except Exception as error:
            raise self._translate(error, request.stream) from None
        return event.commit_position if event is not None else position

    async def _locate_revision(self, request: AppendRequest, position: int) -> int:
        event = await self._find_last(request, position)
        if event is not None:
            return event.stream_position
        # Not found (the stream was deleted meanwhile): the best answer left.
        head = await self.head(request.stream)
        return -1 if head is None else head

    async def _find_last(self, request: AppendRequest, position: int) -> KdbRecordedEvent | None:
        """Scan ``request.stream`` backwards for the write's last event.

        With a known ``position`` it is the first event at or below it; without
        one it is the newest event carrying the request's last id.
        """
        last_id = request.events[-1].id
        from_revision: int | None = None
        page = 1  # without a concurrent writer the newest event is the one
        while True:
            events = await self._client.get_stream(
                request.stream, stream_position=from_revision, backwards=True, limit=page
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

    async def _explain_failure(
        self, requests: Sequence[AppendRequest], error: Exception
    ) -> JournalError:
        """Turn an unexplained multi-append failure into a conflict if a stream moved."""
        for request in requests:
            head = await self.head(request.stream)
            if not expected_matches(request.expected, head):
                return ConcurrencyError(request.stream, expected_label(request.expected), head)
        return self._translate(error, None)

    # -- reads ----------------------------------------------------------------

    async def read(
        self,
        stream: str,
        *,
        from_revision: int | None = None,
        backwards: bool = False,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        """Read events of ``stream`` (see :meth:`EventStore.read`)."""
        validate_stream_name(stream)
        _check_non_negative("from_revision", from_revision)
        _check_non_negative("limit", limit)
        self._check_open()
        try:
            events = await self._client.get_stream(
                stream,
                stream_position=from_revision,
                backwards=backwards,
                limit=1 if limit == 0 else (sys.maxsize if limit is None else limit),
            )
        except Exception as error:
            raise self._translate(error, stream) from None
        if limit == 0:
            return []
        return [_from_kdb(event) for event in events]

    async def head(self, stream: str) -> int | None:
        """Return the revision of the stream's last event, or None if it does not exist."""
        validate_stream_name(stream)
        self._check_open()
        try:
            events = await self._client.get_stream(stream, backwards=True, limit=1)
        except NotFoundError:
            return None
        except Exception as error:
            raise self._translate(error, stream) from None
        return events[0].stream_position if events else None

    async def read_all(
        self, *, from_position: int | None = None, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read all non-system streams in global order, from ``from_position`` inclusive."""
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
            want = None if limit is None else limit - len(results) + (1 if resume else 0)
            seen = 0
            last = cursor
            async for event in await self._client.read_all(
                commit_position=cursor,
                limit=sys.maxsize if want is None else want,
                filter_exclude=_NOT_SYSTEM_STREAMS,
                filter_by_stream_name=True,
            ):
                seen += 1
                if resume and event.commit_position == cursor:
                    continue
                last = event.commit_position
                if _is_system(event):
                    continue
                results.append(_from_kdb(event))
                if limit is not None and len(results) == limit:
                    return results
            if want is None or seen < want:
                return results
            cursor, resume = last, True

    async def _position_before(self, position: int) -> int | None:
        """Return the position of the last event before ``position``, or None."""
        cursor: int | None = None
        while True:
            page = [
                event
                async for event in await self._client.read_all(
                    commit_position=cursor,
                    backwards=True,
                    limit=_SCAN_PAGE,
                    filter_exclude=_NOT_SYSTEM_STREAMS,
                    filter_by_stream_name=True,
                )
            ]
            for event in page:
                if event.commit_position < position:
                    return event.commit_position
            if len(page) < _SCAN_PAGE:
                return None
            cursor = page[-1].commit_position

    async def _last_position(self) -> int:
        try:
            before = await self._position_before(sys.maxsize)
        except Exception as error:
            raise self._translate(error, None) from None
        return before or 0

    async def subscribe(self, *, after_position: int | None = None) -> AsyncIterator[RecordedEvent]:
        """Yield every non-system event after ``after_position``, then follow new ones.

        A catch-up subscription to ``$all``. It ends when the consumer stops
        iterating or the store is closed; if the connection drops it resumes
        from the last event delivered, and raises
        :class:`~agentjournal.errors.StoreUnavailable` when that keeps failing.
        """
        _check_non_negative("after_position", after_position)
        self._check_open()
        cursor = after_position
        delivered = fell_back = False
        failures = 0
        while not self._closed:
            try:
                subscription = await self._client.subscribe_to_all(
                    commit_position=cursor,
                    filter_exclude=_NOT_SYSTEM_STREAMS,
                    filter_by_stream_name=True,
                )
            except Exception as error:
                if self._closed:
                    return
                failures += 1
                if failures > _RESUBSCRIBE_ATTEMPTS or not _transient(error):
                    raise self._translate(error, None) from None
                await asyncio.sleep(0.2 * failures)
                continue
            try:
                async for event in subscription:
                    failures = 0
                    cursor = event.commit_position
                    if _is_system(event):
                        continue
                    delivered = True
                    yield _from_kdb(event)
            except CancelledByClientError:
                return
            except Exception as error:
                if self._closed:
                    return
                if _invalid_position(error) and not (delivered or fell_back or cursor is None):
                    # Not a record boundary: start after the last event before
                    # it (or at the very beginning when there is none).
                    fell_back = True
                    cursor = await self._position_before_translated(cursor)
                    continue
                failures += 1
                if failures > _RESUBSCRIBE_ATTEMPTS or not _transient(error):
                    raise self._translate(error, None) from None
                await asyncio.sleep(0.2 * failures)
            else:
                # The server ended the subscription without an error (a node
                # shutting down): resume like after a dropped connection.
                if self._closed:
                    return
                failures += 1
                if failures > _RESUBSCRIBE_ATTEMPTS:
                    raise StoreUnavailable(
                        f"KurrentDB at {self._uri} keeps ending the subscription to $all"
                    )
                await asyncio.sleep(0.2 * failures)
            finally:
                with contextlib.suppress(Exception):
                    await subscription.stop()

    async def _position_before_translated(self, position: int) -> int | None:
        try:
            return await self._position_before(position)
        except Exception as error:
            raise self._translate(error, None) from None

    # -- plumbing -------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable(f"KurrentDB store {self._uri} is closed")

    def _translate(self, error: BaseException, stream: str | None) -> JournalError:
        """Map a client error onto the agentjournal error tree."""
        if isinstance(error, JournalError):
            return error
        text = _scrub(str(error) or type(error).__name__, self._secret)
        if isinstance(error, NotFoundError) and stream is not None:
            return StreamNotFound(stream)
        if isinstance(error, StreamIsDeletedError | StreamTombstonedError):
            return StreamDeleted(stream or getattr(error, "stream_name", "") or "?")
        if isinstance(error, _INPUT_ERRORS):
            return InvalidInput(f"KurrentDB refused the request: {text}")
        if isinstance(error, AccessDeniedError | UnauthenticatedError):
            return StoreError(
                f"KurrentDB at {self._uri} refused access ({text}): check the user and "
                "password in the URI and the stream's access control list"
            )
        if self._closed or isinstance(error, CancelledByClientError):
            return StoreUnavailable(f"KurrentDB store {self._uri} is closed")
        if isinstance(error, _UNAVAILABLE_ERRORS):
            return StoreUnavailable(f"KurrentDB at {self._uri} is unavailable: {text}")
        return StoreError(f"KurrentDB at {self._uri} failed: {type(error).__name__}: {text}")


# ------------------------------------------------------------------ helpers


async def _shielded(call: Awaitable[_T]) -> _T:
    """Await ``call`` so that a cancelled caller does not cancel the request in flight.

    The write then completes (or fails) on its own and its outcome stands; a
    retry with the same event ids is recognised either way.
    """
    task = asyncio.ensure_future(call)
    task.add_done_callback(_consume_outcome)
    return await asyncio.shield(task)


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    # Mark an abandoned write's exception as retrieved: nobody is left to see it.
    if not task.cancelled():
        task.exception()


def _userinfo(uri: str) -> str | None:
    try:
        netloc = urlsplit(uri).netloc
    except ValueError:
        return None
    return netloc.rsplit("@", 1)[0] if "@" in netloc else None


def _scrub(text: str, secret: str | None) -> str:
    if not secret:
        return text
    text = text.replace(secret + "@", "").replace(secret, "***")
    _, _, password = secret.partition(":")
    return text.replace(password, "***") if password else text


def _check_non_negative(name: str, value: object) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{name} must be an int >= 0 or None, got {value!r}")


def _kdb_expected(expected: Expected) -> int | KdbStreamState:
    if expected is StreamState.ANY:
        return KdbStreamState.ANY
    if expected is StreamState.NO_STREAM:
        return KdbStreamState.NO_STREAM
    if expected is StreamState.EXISTS:
        return KdbStreamState.EXISTS
    assert isinstance(expected, int)
    return expected


def _conflict(request: AppendRequest, error: WrongCurrentVersionError) -> ConcurrencyError:
    actual = error.actual_version
    return ConcurrencyError(
        request.stream,
        expected_label(request.expected),
        actual if isinstance(actual, int) and actual >= 0 else None,
    )


def _invalid_position(error: BaseException) -> bool:
    """Whether KurrentDB refused a start position that is not a record boundary."""
    return isinstance(error, InvalidCommitPositionError) or "InvalidPosition" in str(error)


def _transient(error: BaseException) -> bool:
    return isinstance(error, _UNAVAILABLE_ERRORS) and not isinstance(error, _INPUT_ERRORS)


def _to_kdb(event: NewEvent) -> KdbNewEvent:
    return KdbNewEvent(
        type=event.type,
        data=event.data,
        metadata=encode_metadata(event.metadata) if event.metadata else b"",
        content_type="application/json",
        id=event.id,
    )


def _is_system(event: KdbRecordedEvent) -> bool:
    return event.type.startswith("$") or event.stream_name.startswith("$")


def _from_kdb(event: KdbRecordedEvent) -> RecordedEvent:
    return RecordedEvent(
        id=event.id,
        type=event.type,
        data=event.data,
        metadata=_decode_metadata(event.metadata),
        stream=event.stream_name,
        revision=event.stream_position,
        position=event.commit_position,
        recorded_at=event.recorded_at or _EPOCH,
    )


def _decode_metadata(raw: bytes) -> MappingProxyType[str, str]:
    """Parse stored metadata; drop the keys the server adds.

    Metadata this library did not write may be anything: a value that is not
    a string is returned as its JSON text, and bytes that are not a JSON
    object read as no metadata.
    """
    if not raw:
        return MappingProxyType({})
    try:
        parsed = json.loads(raw)
    except ValueError:
        return MappingProxyType({})
    if not isinstance(parsed, dict):
        return MappingProxyType({})
    return MappingProxyType(
        {
            str(key): value if isinstance(value, str) else json.dumps(value)
            for key, value in parsed.items()
            if key not in SERVER_METADATA_KEYS
        }
    )
