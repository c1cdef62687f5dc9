"""The KurrentDB event store: the contract on ``kurrentdbclient.AsyncKurrentDBClient``.

``KurrentDBEventStore.open("kurrentdb://host:2113?Tls=false")`` connects and
checks that the server answers. Any connection string ``kurrentdbclient``
accepts works: several seeds of a cluster as
``kurrentdb://h1:2113,h2:2113,h3:2113?Tls=false``, DNS discovery of one name
as ``kurrentdb+discover://cluster.example.com:2113?Tls=false``, TLS (the
default) with credentials: ``kurrentdb://user:password@host:2113``.
``DefaultDeadline=<seconds>`` in the query sets the store's deadline (fractions
allowed); keepalive is switched on unless the URI sets
``KeepAliveInterval``/``KeepAliveTimeout``.

How the contract maps onto KurrentDB:

* ``append`` is ``append_to_stream`` (v1 ``BatchAppend``, one atomic write) and
  ``append_many`` is ``multi_append_to_stream`` (v2 ``AppendSession``, one
  atomic transaction over several streams, KurrentDB >= 25.1.1; 25.0 has no
  v2 service, and ``append_many`` there is a ``StoreError`` saying so). An
  ``append`` too large for the v1 service's message limit goes through the v2 call.
  Event ids pass through unchanged, so a retry carries the ids of the first
  attempt and the server recognises it.
* **Every event loop.** A ``grpc.aio`` channel belongs to the loop that made
  it. The store's client serves the loop that opened it (its home); a call
  from any other loop runs on the process's I/O loop, a daemon thread with a
  client of its own (made like the first on its first call) that never closes.
  So one store serves ``Runner.run_sync`` in a thread pool and ``asyncio.run``
  per call, and a subscription can be iterated from any loop.
* **Nothing hangs.** Every call has a deadline (default 10 s): a read, head
  lookup or append that gets no answer in time raises ``StoreUnavailable``.
  A write is shielded: the request in flight is not cancelled, and its outcome
  is unknown; a retry with the same ids is recognised either way.
* **An unknown outcome is never a conflict, nor a failure.** When the server
  refuses a write that may be a retry (a revision conflict, or the
  non-conflict error 26.0 gives a partly retried ``append_many``), the store
  reads the expected places back: if its own event ids are there, the write
  landed and succeeds. Only answers that say nothing was written are definite
  errors; any other error of a write is ``StoreUnavailable``.
* Both client calls report only the commit position of the write's last
  event. The revision a stream reached is computed when the writer gave an
  exact revision (``expected + len(events)``); for ``NO_STREAM``, ``ANY`` and
  ``EXISTS`` it is read back: the stream's tail is read backwards to the first
  event at or below the write's position, which is the write's last event in
  that stream. A retry whose events can no longer be read (the stream was
  soft-deleted since) reports what is known: its revision where the expected
  state gives it (else ``-1``) and position ``0``.
* ``position`` is the event's commit position. KurrentDB accepts only record
  boundaries as start positions: ``read_all``/``subscribe`` with any other
  position first find the last event before it and start there.
* ``read_all`` and ``subscribe`` exclude system streams on the server and
  system events on the client. ``subscribe`` ends only when its consumer stops
  or this store is closed: after a dropped connection, a server restart, or the
  client replacing its connection (it does that when any other call meets an
  unavailable server, cancelling every call on the old one) it reconnects with
  capped exponential backoff and jitter, resuming right after the last event it
  delivered, for ``reconnect_for`` seconds without progress (default: for ever,
  logging each attempt).
* Sizes follow the server (25.1+): a record of at most ``max_append_event_size``
  (``MaxAppendEventSize``, 16 MiB by default) whose stored size is at most
  16 MiB - 10,000 bytes, an append of at most ``max_append_size``
  (``MaxAppendSize``, 256 MiB by default), a v1 request message of at most
  16 MiB - 10,000 bytes. A write over a limit is ``InvalidInput`` before any
  I/O; a server configured lower refuses with ``InvalidInput`` naming its limit.
* Metadata is written as a JSON object of strings; on read the keys the
  server adds are dropped.
* Client errors are translated into :mod:`agentjournal.errors`; no ``grpc`` or
  ``kurrentdbclient`` exception reaches a caller.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import math
import os
import random
import threading
import time
import uuid
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Mapping,
    Sequence,
)
from datetime import UTC, datetime
from functools import partial
from types import MappingProxyType
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import grpc
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
from kurrentdbclient.protos.v1 import shared_pb2, status_pb2, streams_pb2

from agentjournal.errors import (
    ConcurrencyError,
    InvalidInput,
    JournalError,
    StoreError,
    StoreUnavailable,
    StreamDeleted,
    StreamNotFound,
)
from agentjournal.store.contract import (
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

__all__ = [
    "DEFAULT_DEADLINE",
    "MAX_APPEND_SIZE",
    "MAX_RECORD_SIZE",
    "MAX_V1_MESSAGE_BYTES",
    "KurrentDBEventStore",
    "redact_uri",
]

logger = logging.getLogger("agentjournal.store.kurrentdb")

DEFAULT_DEADLINE: Final = 10.0
"""Seconds a call may take before it is ``StoreUnavailable`` (the official clients' default)."""
MAX_APPEND_SIZE: Final = 256 * 1024 * 1024
"""KurrentDB's default ``MaxAppendSize`` since 25.1 (one append; 25.0: 1 MiB)."""
MAX_RECORD_SIZE: Final = 16 * 1024 * 1024
"""KurrentDB's ``MaxAppendEventSize``: one record (data, metadata, type)."""
MAX_V1_MESSAGE_BYTES: Final = 16 * 1024 * 1024 - 10_000
"""The largest request the v1 streams service takes (``TFConsts.EffectiveMaxLogRecordSize``);
also the largest stored event (``Event.SizeOnDisk``)."""
KEEPALIVE_MS: Final = 10_000
"""gRPC keepalive interval and timeout the store asks for (the server's defaults)."""

SERVER_METADATA_KEYS: Final = frozenset(
    {"$schema.name", "$schema.format", "$schema.id", "$record.timestamp"}
)
"""Metadata keys KurrentDB adds to events; dropped on read."""

_NOT_SYSTEM_STREAMS: Final = (r"\$.*",)  # filter_exclude on stream names
_PROBE_STREAM: Final = "agentjournal-connection-probe"
_SCAN_PAGE: Final = 256
_READ_PAGE: Final = 4096  # events per read call: each call has its own deadline
_BACKOFF_FIRST: Final = 0.1
_BACKOFF_CAP: Final = 5.0
_HEALTHY_AFTER: Final = 2 * _BACKOFF_CAP  # seconds a subscription must hold to count as working
_CHANNEL_OPTIONS: Final = (
    ("grpc.initial_reconnect_backoff_ms", int(_BACKOFF_FIRST * 1000)),
    ("grpc.max_reconnect_backoff_ms", int(_BACKOFF_CAP * 1000)),
)
_EPOCH: Final = datetime.fromtimestamp(0, UTC)
_PROTOBUF_MAX_SECONDS: Final = 315_576_000_000
_T = TypeVar("_T")
_BACKGROUND: Final[set[asyncio.Task[None]]] = set()  # closes and stops run on other loops

_INPUT_ERRORS: Final = (
    MultiAppendToSameStreamError,
    MaximumAppendSizeExceededError,
    TransactionMaxSizeExceededError,
    InvalidArgumentError,
    BadRequestError,
    ProgrammingError,
)
_UNAVAILABLE_ERRORS: Final = (
    ServiceUnavailableError,
    DeadlineExceededError,
    DiscoveryFailedError,
    NodeIsNotLeaderError,
    grpc.aio.UsageError,
    AbortedByServerError,  # a server-side timeout, a subscriber too slow for the server
    ExceptionThrownByHandlerError,  # KurrentDB throws it "from time to time"
    ServerCancelledError,
    TimeoutError,
    ConnectionError,
)
_UNAVAILABLE_CODES: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)
_ACCESS_CODES: Final = frozenset(
    {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}
)
# The server's answers to a request it did not handle (NotHandled): v1 reads end
# with UNAVAILABLE or, for "no leader" (an election in progress), UNKNOWN; v1
# BatchAppend answers with a status without a code. All mean "try again".
_NOT_HANDLED_TEXTS: Final = (
    "Server Is Not Ready",
    "Server Is Busy",
    "Server Is Too Busy",
    "No leader info available",
)
# Answers that mean the server wrote nothing, whatever an earlier attempt did.
_REFUSED_BEFORE_WRITING: Final = _ACCESS_CODES | {grpc.StatusCode.UNIMPLEMENTED}
_EVENT_SIZE_DETAIL: Final = "event_store.client.MaximumAppendEventSizeExceeded"


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

    def __init__(
        self,
        client: AsyncKurrentDBClient,
        uri: str,
        *,
        deadline: float = DEFAULT_DEADLINE,
        reconnect_for: float | None = None,
        max_append_size: int = MAX_APPEND_SIZE,
        max_append_event_size: int = MAX_RECORD_SIZE,
    ) -> None:
        """Wrap a client; prefer :meth:`open`.

        Args:
            client: An ``AsyncKurrentDBClient`` for the running event loop (or,
                created outside one, for the first loop that uses the store);
                calls from other loops use one made like it (its URI, CA and
                gRPC options) on the I/O loop. The store closes both.
            uri: The connection string, used (redacted) in error messages.
            deadline: Seconds any one call may take.
            reconnect_for: Seconds a subscription keeps reconnecting after it
                lost the server; None: for ever.
            max_append_size: The server's ``MaxAppendSize`` in bytes.
            max_append_event_size: The server's ``MaxAppendEventSize`` in bytes.
        """
        # The client serves its home loop; calls from any other loop run on the
        # process's I/O loop with a client made there from the same settings.
        self._new_client = _client_factory(client)
        self._lock = threading.Lock()  # loops in several threads share what follows
        self._home: asyncio.AbstractEventLoop | None = None  # None: the first user's
        self._home_client: AsyncKurrentDBClient | None = client
        self._io_client: AsyncKurrentDBClient | None = None
        with contextlib.suppress(RuntimeError):
            self._home = asyncio.get_running_loop()
        self._uri = redact_uri(uri)
        self._secret = _userinfo(uri)
        self._deadline = _positive("deadline", deadline)
        self._reconnect_for = (
            None if reconnect_for is None else _positive("reconnect_for", reconnect_for, zero=True)
        )
        self._max_append_size = int(_positive("max_append_size", max_append_size))
        self._max_event_size = int(_positive("max_append_event_size", max_append_event_size))
        self._closed = False

    @property
    def deadline(self) -> float:
        """Seconds any one call may take before it is ``StoreUnavailable``."""
        return self._deadline

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

    async def _probe(self) -> None:
        client = self._client()
        await client.connect()
        with contextlib.suppress(NotFoundError):
            await client.get_stream(_PROBE_STREAM, limit=1, timeout=self._deadline)

    async def __aenter__(self) -> KurrentDBEventStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections; open subscriptions end.

        Each client is closed on its own loop: at once on the running one; on
        another loop that runs, through it (waiting at most the deadline); one
        whose loop has stopped or closed is dropped (nothing can run there; its
        channel closes when freed). Calls made after this raise ``StoreUnavailable``.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            home, home_client, io_client = self._home, self._home_client, self._io_client
            self._home_client = self._io_client = None
        here = asyncio.get_running_loop()
        closing = []
        if home_client is not None:
            closing.append(self._close_on(home or here, home_client, here))
        if io_client is not None:
            closing.append(self._close_on(_io_loop(), io_client, here))
        await asyncio.gather(*closing)

    async def _close_on(
        self,
        loop: asyncio.AbstractEventLoop,
        client: AsyncKurrentDBClient,
        here: asyncio.AbstractEventLoop,
    ) -> None:
        if loop is here:
            await _quietly(client.close)
            return
        if loop.is_closed() or not loop.is_running():
            return  # a stopped loop (Runner.run_sync's between runs) would never run it
        try:
            closing = _run_on(loop, client.close)
        except RuntimeError:
            return  # closed just now
        await asyncio.wait([asyncio.wrap_future(closing)], timeout=self._deadline)
        closing.cancel()  # a loop that stopped meanwhile: call it off if it has not started

    def _elsewhere(self) -> asyncio.AbstractEventLoop | None:
        """The loop a call from the running loop must run on; None: right here.

        A ``grpc.aio`` channel belongs to the loop that created it: a call from
        another loop fails (``RuntimeError: ... attached to a different loop``),
        at times after its request went out. The client the store was opened
        with serves its home loop; every other loop's calls run on the process's
        I/O loop (:func:`_io_loop`), whose client is made on its first call.
        """
        loop = asyncio.get_running_loop()
        if loop is self._home or (_io is not None and loop is _io[1]):
            return None
        with self._lock:
            if self._home is None:  # made outside a loop: the first loop to use it
                self._home = loop
                return None
            if self._home_client is not None and self._home.is_closed():
                self._home_client = None  # nothing can run there: freed, its channel closes
        return _io_loop()

    def _client(self) -> AsyncKurrentDBClient:
        """The running loop's client: the home loop's or the I/O loop's (:meth:`_elsewhere`)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"KurrentDB store {self._uri} is closed")
            if loop is self._home and self._home_client is not None:
                return self._home_client
            assert loop is _io_loop(), "a call from another loop runs on the I/O loop"
            if self._io_client is None:
                self._io_client = self._new_client()
            return self._io_client

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

    # -- plumbing -------------------------------------------------------------

    async def _bounded(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """Await ``call()`` within the deadline; past it, ``StoreUnavailable``."""
        scope = asyncio.timeout(self._deadline)
        try:
            async with scope:
                return await call()
        except Exception as error:
            # The client may turn the cancellation into its own error: check the clock.
            if scope.expired():
                raise StoreUnavailable(
                    f"KurrentDB at {self._uri} did not answer within {self._deadline:g} s"
                ) from None
            raise error

    def _check_open(self) -> None:
        if self._closed:
            raise StoreUnavailable(f"KurrentDB store {self._uri} is closed")

    def _write_failed(self, error: BaseException, stream: str | None) -> JournalError:
        """A failed write's error: the server's refusal, else an unknown outcome.

        Only answers that say nothing was written are definite failures (bad
        input, a deleted stream, access denied, a call the server lacks); an
        error this store does not know may have come after the server wrote
        (a connection cut, a proxy's error, a client fault), so it is
        ``StoreUnavailable``: retry with the same ids, which the server recognises.
        """
        translated = self._translate(error, stream)
        if type(translated) is not StoreError or _refused_before_writing(error):
            return translated
        return self._unknown_outcome(translated)

    def _unknown_outcome(
        self, error: BaseException, stream: str | None = None, *, landed: bool = False
    ) -> StoreUnavailable:
        """``StoreUnavailable`` for a write whose outcome the store could not settle."""
        translated = self._translate(error, stream)
        if isinstance(translated, StoreUnavailable):
            return translated
        if landed:
            what = "the write landed, but reading back the revision it reached failed"
        else:
            what = "the write may or may not have landed"
        return StoreUnavailable(f"{translated}; {what}: retry it with the same event ids")

    def _translate(self, error: BaseException, stream: str | None) -> JournalError:
        """Map a client error onto the agentjournal error tree."""
        if isinstance(error, JournalError):
            return error
        text = _scrub(_describe(error, self._deadline), self._secret)
        if isinstance(error, NotFoundError) and stream is not None:
            return StreamNotFound(stream)
        if isinstance(error, StreamIsDeletedError | StreamTombstonedError):
            return StreamDeleted(stream or getattr(error, "stream_name", "") or "?")
        if isinstance(error, _INPUT_ERRORS):
            return InvalidInput(f"KurrentDB refused the request: {text}")
        code = _status_code(error)
        status = _batch_status(error)
        if isinstance(error, AccessDeniedError | UnauthenticatedError) or code in _ACCESS_CODES:
            return StoreError(
                f"KurrentDB at {self._uri} refused access ({text}): check the user and "
                "password in the URI and the stream's access control list"
            )
        if self._closed:
            return StoreUnavailable(f"KurrentDB store {self._uri} is closed")
        if isinstance(error, CancelledByClientError):
            # Not our close: the client cut the call off when it replaced its
            # connection after another call met an unavailable server.
            return StoreUnavailable(
                f"KurrentDB at {self._uri}: the call was cut off when the client replaced its "
                "connection; retry it"
            )
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED and "message" in text:
            return InvalidInput(f"KurrentDB refused a request message this large: {text}")
        if code is grpc.StatusCode.INVALID_ARGUMENT:
            return InvalidInput(f"KurrentDB refused the request: {text}")
        if status is not None and status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]:
            return InvalidInput(_refused_batch(status, text))
        if code is grpc.StatusCode.UNIMPLEMENTED:
            return StoreError(
                f"KurrentDB at {self._uri} is too old for multi-stream appends (it has no v2 "
                "streams service): append_many needs KurrentDB 25.1 or newer"
            )
        if (
            isinstance(error, _UNAVAILABLE_ERRORS)
            or code in _UNAVAILABLE_CODES
            or any(marker in text for marker in _NOT_HANDLED_TEXTS)
        ):
            return StoreUnavailable(f"KurrentDB at {self._uri} is unavailable: {text}")
        return StoreError(f"KurrentDB at {self._uri} failed: {type(error).__name__}: {text}")


# ------------------------------------------------------------------ helpers


class _Reconnect:
    """When a subscription tries again: capped exponential backoff with jitter.

    Only progress starts over (the exponent back to zero, the give-up clock
    stopped): an event delivered, or a connection that stayed up for
    ``_HEALTHY_AFTER`` seconds. A server that confirms each subscription and
    then fails it at once is still failing, and is given up on after
    ``give_up_after`` seconds like one that refuses outright.
    """

    def __init__(
        self, give_up_after: float | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._give_up_after = give_up_after
        self._clock = clock
        self.attempt = 0
        self._failing_since: float | None = None
        self._connected_at: float | None = None

    def connected(self) -> None:
        """A subscription was confirmed (not yet progress)."""
        self._connected_at = self._clock()

    def delivered(self) -> None:
        """An event arrived: progress."""
        self.attempt = 0
        self._failing_since = None

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt, or None when it is time to give up."""
        now = self._clock()
        connected_at, self._connected_at = self._connected_at, None
        if connected_at is not None and now - connected_at >= _HEALTHY_AFTER:
            self.attempt = 0  # a connection that held that long was working
            self._failing_since = None
        if self._failing_since is None:
            self._failing_since = now
        elapsed = now - self._failing_since
        if self._give_up_after is not None and elapsed >= self._give_up_after:
            return None
        self.attempt += 1
        ceiling = min(_BACKOFF_CAP, _BACKOFF_FIRST * 2 ** (self.attempt - 1))
        delay = random.uniform(ceiling / 2, ceiling)  # jitter: no lockstep reconnects
        if self._give_up_after is not None:
            delay = min(delay, max(self._give_up_after - elapsed, 0.0))
        return delay


def _client_uri(uri: str) -> tuple[str, float | None]:
    """The URI for the client, and the deadline its ``DefaultDeadline`` asks for.

    ``DefaultDeadline`` is taken out (the client takes whole seconds only and
    applies it to writes alone; the store applies it to every call) and
    keepalive is switched on when the URI does not set it.
    """
    parts = urlsplit(uri)
    query = parse_qsl(parts.query, keep_blank_values=True)
    deadline: float | None = None
    kept: list[tuple[str, str]] = []
    for key, value in query:
        if key.lower() == "defaultdeadline":
            try:
                deadline = float(value)
            except ValueError:
                raise ValueError(
                    f"DefaultDeadline must be a number of seconds, got {value!r}"
                ) from None
            if not math.isfinite(deadline) or deadline <= 0:
                raise ValueError(f"DefaultDeadline must be > 0 seconds, got {value!r}")
            continue
        kept.append((key, value))
    keys = {key.lower() for key, _ in kept}
    for option in ("KeepAliveInterval", "KeepAliveTimeout"):
        if option.lower() not in keys:
            kept.append((option, str(KEEPALIVE_MS)))
    return urlunsplit(parts._replace(query=urlencode(kept, safe=",:/"))), deadline


def _positive(name: str, value: float, *, zero: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (value == 0 and not zero)
    ):
        raise InvalidInput(f"{name} must be a number {'>=' if zero else '>'} 0, got {value!r}")
    return float(value)


def _known_revision(request: AppendRequest) -> int:
    """The revision a write reached as far as its expected state tells (-1: unknown)."""
    if isinstance(request.expected, int):
        return request.expected + len(request.events)
    if request.expected is StreamState.NO_STREAM:
        return len(request.events) - 1
    return -1


def _rpc_error(error: BaseException) -> grpc.aio.AioRpcError | None:
    """The gRPC error behind a client error: the client chains it or raises from it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, grpc.aio.AioRpcError):
            return current
        current = current.__cause__ or current.__context__
    return None


def _refused_before_writing(error: BaseException) -> bool:
    """Whether the server refused a call before writing anything (access, unimplemented)."""
    return (
        isinstance(error, AccessDeniedError | UnauthenticatedError)
        or _status_code(error) in _REFUSED_BEFORE_WRITING
    )


def _status_code(error: BaseException) -> grpc.StatusCode | None:
    """The gRPC status code behind a client error, if there is one."""
    rpc = _rpc_error(error)
    return rpc.code() if rpc is not None else None


def _describe(error: BaseException, deadline: float) -> str:
    """A one-line reason: the server's answer, not the client's repr of it."""
    if isinstance(error, TimeoutError):
        return f"no answer within {deadline:g} s"
    if isinstance(error, CancelledByClientError) and not str(error):
        return "the client replaced its connection"
    text = str(error)
    rpc = _rpc_error(error)
    if rpc is not None and (rpc is error or not text or text.startswith("<AioRpcError")):
        return f"{rpc.code().name}: {rpc.details() or ''}".strip()
    status = error.args[0] if error.args else None
    if status is not None and hasattr(status, "message") and hasattr(status, "code"):
        # A v1 BatchAppendResp status the client passes on as it is.
        return str(status.message)
    return " ".join(text.split()) or type(error).__name__


def _batch_status(error: BaseException) -> Any | None:
    """The ``BatchAppendResp.error`` status a client error carries as it is, if any."""
    status = error.args[0] if error.args else None
    if isinstance(status, status_pb2.Status):
        return status
    return None


def _refused_batch(status: Any, text: str) -> str:
    """One line for a batch append refused as bad input, naming the limit where there is one."""
    if status.details.type_url.endswith("/" + _EVENT_SIZE_DETAIL):
        fields = _proto_fields(status.details.value)
        event_id, size, limit = fields.get(1, b""), fields.get(2), fields.get(3)
        shown = event_id.decode(errors="replace") if isinstance(event_id, bytes) else "?"
        if not isinstance(size, int) or not isinstance(limit, int):
            return f"KurrentDB refused an event as over its MaxAppendEventSize: {text}"
        return (
            f"KurrentDB refused event {shown}: {size} bytes as it counts them (data, metadata, "
            f"the type twice), over its MaxAppendEventSize of {limit} bytes"
        )
    return f"KurrentDB refused the request: {text}"


def _proto_fields(raw: bytes) -> dict[int, int | bytes]:
    """The varint and length-delimited fields of a protobuf message, by number.

    For a detail kurrentdbclient's protos lack (``MaximumAppendEventSizeExceeded``:
    string 1, uint32 2, uint32 3); anything else ends the parse.
    """
    fields: dict[int, int | bytes] = {}
    offset = 0

    def varint() -> int:
        nonlocal offset
        value = shift = 0
        while offset < len(raw):
            byte = raw[offset]
            offset += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise ValueError("truncated varint")

    try:
        while offset < len(raw):
            key = varint()
            number, kind = key >> 3, key & 7
            if kind == 0:
                fields[number] = varint()
            elif kind == 2:
                length = varint()
                fields[number] = raw[offset : offset + length]
                offset += length
            else:
                break
    except ValueError:
        pass
    return fields


def _fits_v1_message(stream: str, events: Sequence[KdbNewEvent]) -> bool:
    """Whether ``append_to_stream``'s one request message stays within the v1 service's limit."""
    rough = (
        len(stream) + 256 + sum(len(e.data) + len(e.type) + len(e.metadata) + 160 for e in events)
    )
    if rough <= MAX_V1_MESSAGE_BYTES:
        return True
    return _v1_message_size(stream, events) <= MAX_V1_MESSAGE_BYTES


def _v1_message_size(stream: str, events: Sequence[KdbNewEvent]) -> int:
    """The size of the ``BatchAppendReq`` kurrentdbclient sends (at most a few bytes more)."""
    options = streams_pb2.BatchAppendReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode()),
    )
    options.deadline.seconds = _PROTOBUF_MAX_SECONDS
    options.deadline.nanos = 999_999_999
    options.stream_position = 2**63 - 1  # the widest expected-revision encoding
    message = streams_pb2.BatchAppendReq(
        correlation_id=shared_pb2.UUID(string=str(uuid.UUID(int=0))),
        options=options,
        proposed_messages=[
            streams_pb2.BatchAppendReq.ProposedMessage(
                id=shared_pb2.UUID(string=str(event.id)),
                metadata={"type": event.type, "content-type": event.content_type},
                custom_metadata=event.metadata,
                data=event.data,
            )
            for event in events
        ],
        is_final=True,
    )
    size: int = message.ByteSize()
    return size


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def struct_size(metadata: Mapping[str, str]) -> int:
    """Bytes of ``metadata`` as the protobuf ``Struct`` of string values the v2 API stores."""
    total = 0
    for key, value in metadata.items():
        key_bytes, value_bytes = len(key.encode()), len(value.encode())
        inner = 1 + _varint_size(value_bytes) + value_bytes  # Value.string_value
        entry = 1 + _varint_size(key_bytes) + key_bytes + 1 + _varint_size(inner) + inner
        total += 1 + _varint_size(entry) + entry
    return total


def _check_v1_size(
    stream: str, events: Sequence[KdbNewEvent], max_append: int, max_event: int
) -> None:
    """Refuse, before any I/O, a v1 append the server would refuse for its size.

    Each event as stored (``Event.SizeOnDisk``: data, metadata, the type two
    bytes a character) at most 16 MiB - 10,000 and at most ``MaxAppendEventSize``
    (``ClientWriteRequest.AddEvents``); their sum at most ``MaxAppendSize``.
    """
    total = 0
    for event in events:
        stored = len(event.data) + len(event.metadata) + 2 * len(event.type)
        _check_stored(stream, event.type, stored)
        _check_record(stream, event.type, stored, max_event)
        total += stored
    _check_total(total, max_append)


def _check_v2_size(requests: Sequence[AppendRequest], max_append: int, max_event: int) -> None:
    """Refuse, before any I/O, a v2 append the server would refuse for its size.

    Each record (``AppendRecordExtensions.CalculateSizeOnDisk``: data, metadata as
    the ``Struct`` it is stored as, the type's UTF-8 bytes) at most
    ``MaxAppendEventSize``, stored (``Event.SizeOnDisk``) in at most 16 MiB -
    10,000; the records' sum at most ``MaxAppendSize``.
    """
    total = 0
    for request in requests:
        for event in request.events:
            metadata = struct_size(event.metadata)
            record = len(event.data) + metadata + len(event.type.encode())
            _check_record(request.stream, event.type, record, max_event)
            _check_stored(
                request.stream, event.type, len(event.data) + metadata + 2 * len(event.type)
            )
            total += record
    _check_total(total, max_append)


def _check_record(stream: str, event_type: str, size: int, max_event: int) -> None:
    if size > max_event:
        raise InvalidInput(
            f"event {event_type} on {stream!r} is {size} bytes as KurrentDB counts it; its "
            f"MaxAppendEventSize is {max_event}"
        )


def _check_stored(stream: str, event_type: str, stored: int) -> None:
    if stored > MAX_V1_MESSAGE_BYTES:
        raise InvalidInput(
            f"event {event_type} on {stream!r} takes {stored} bytes to store; KurrentDB "
            f"stores at most {MAX_V1_MESSAGE_BYTES} (16 MiB - 10,000) per event"
        )


def _check_total(total: int, max_append: int) -> None:
    if total > max_append:
        raise InvalidInput(
            f"the append is {total} bytes as KurrentDB counts it; its MaxAppendSize is "
            f"{max_append}: split it into several appends"
        )


def _client_factory(client: AsyncKurrentDBClient) -> Callable[[], AsyncKurrentDBClient]:
    """Make clients like ``client``, for other event loops: its URI, CA and gRPC options.

    (Its private key and certificate chain come from the URI's files: the client
    reads them there and ignores the arguments.)
    """
    uri = client.connection_spec.uri
    root_certificates = client.root_certificates
    grpc_options = client.grpc_options

    def new_client() -> AsyncKurrentDBClient:
        twin = AsyncKurrentDBClient(uri, root_certificates=root_certificates)
        twin.grpc_options = grpc_options
        return twin

    return new_client


_io_lock = threading.Lock()
_io: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop)


def _io_loop() -> asyncio.AbstractEventLoop:
    """The process's I/O loop: serves store calls made on loops other than a store's home.

    A daemon thread runs it for as long as the process lives; it is never
    closed, so a channel on it never sees its loop go away (gRPC would then
    deliver the channel's last events to a closed loop: an error logged on
    whichever loop handles them). Made on first use; a forked child makes its own.
    """
    global _io
    with _io_lock:
        if _io is None or _io[0] != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="agentjournal-kurrentdb-io", daemon=True
            )
            thread.start()
            _io = (os.getpid(), loop)
        return _io[1]


async def _run_there(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Await ``coroutine`` run on ``loop`` (the I/O loop); cancelling the caller cancels it."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))


async def _next(iterator: AsyncIterator[_T]) -> _T | None:
    """The iterator's next item, None at its end (a coroutine, to run on another loop)."""
    try:
        return await anext(iterator)
    except StopAsyncIteration:
        return None


def _end_on(loop: asyncio.AbstractEventLoop, generator: AsyncGenerator[Any, None]) -> None:
    """Close an async generator on the loop it runs on, without waiting."""
    with contextlib.suppress(RuntimeError):  # that loop has closed: nothing to end
        _run_on(loop, generator.aclose)


async def _quietly(action: Callable[[], Awaitable[object]]) -> None:
    # Closing and stopping: a failure leaves nothing for anyone to do.
    with contextlib.suppress(Exception):
        await action()


def _run_on(
    loop: asyncio.AbstractEventLoop, action: Callable[[], Awaitable[object]]
) -> concurrent.futures.Future[None]:
    """Run ``action()`` quietly on ``loop`` (another thread's); the future ends when it has.

    The coroutine is made only once the loop runs the callback, so a loop that
    never does leaves no coroutine unawaited; cancel the future to call it off.

    Raises:
        RuntimeError: ``loop`` is closed.
    """
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    def start() -> None:
        if done.set_running_or_notify_cancel():
            task = loop.create_task(_quietly(action))
            _BACKGROUND.add(task)  # the loop holds tasks weakly

            def finished(task: asyncio.Task[None]) -> None:
                _BACKGROUND.discard(task)
                done.set_result(None)

            task.add_done_callback(finished)

    loop.call_soon_threadsafe(start)
    return done


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
    """Whether KurrentDB refused a start position that is not a record boundary.

    A read says ``Unexpected FilteredReadAllResult: InvalidPosition`` (UNKNOWN),
    a subscription ``Trying to read from an invalid position.`` (INVALID_ARGUMENT).
    """
    if isinstance(error, InvalidCommitPositionError):
        return True
    text = str(error)
    cause = error.__cause__ or error.__context__
    if cause is not None:
        text += " " + str(cause)
    return "InvalidPosition" in text or "invalid position" in text.lower()


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
