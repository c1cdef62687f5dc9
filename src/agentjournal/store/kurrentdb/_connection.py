"""The KurrentDB store's connection: a client per event loop, the deadline, closing, errors."""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
from collections.abc import (
    Awaitable,
    Callable,
)
from typing import Final

import grpc
import grpc.aio
from kurrentdbclient import AsyncKurrentDBClient
from kurrentdbclient.exceptions import (
    AccessDeniedError,
    CancelledByClientError,
    NotFoundError,
    StreamIsDeletedError,
    StreamTombstonedError,
    UnauthenticatedError,
)

from agentjournal.errors import (
    InvalidInput,
    JournalError,
    StoreError,
    StoreUnavailable,
    StreamDeleted,
    StreamNotFound,
)
from agentjournal.store.kurrentdb import _loop
from agentjournal.store.kurrentdb._errors import (
    _ACCESS_CODES,
    _INPUT_ERRORS,
    _NOT_HANDLED_TEXTS,
    _UNAVAILABLE_CODES,
    _UNAVAILABLE_ERRORS,
    _batch_status,
    _describe,
    _refused_batch,
    _refused_before_writing,
    _status_code,
)
from agentjournal.store.kurrentdb._limits import (
    MAX_APPEND_SIZE,
    MAX_RECORD_SIZE,
)
from agentjournal.store.kurrentdb._loop import (
    _T,
    _io_loop,
    _quietly,
    _run_on,
)
from agentjournal.store.kurrentdb._reconnect import _BACKOFF_CAP, _BACKOFF_FIRST
from agentjournal.store.kurrentdb._uri import _scrub, _userinfo, redact_uri

DEFAULT_DEADLINE: Final = 10.0
"""Seconds a call may take before it is ``StoreUnavailable`` (the official clients' default)."""


_PROBE_STREAM: Final = "agentjournal-connection-probe"


_CHANNEL_OPTIONS: Final = (
    ("grpc.initial_reconnect_backoff_ms", int(_BACKOFF_FIRST * 1000)),
    ("grpc.max_reconnect_backoff_ms", int(_BACKOFF_CAP * 1000)),
)


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


class _Connection:
    """What :class:`KurrentDBEventStore` stands on: its clients (one per event loop),
    the deadline of each call, closing, and the translation of the client's errors."""

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

    async def _probe(self) -> None:
        client = self._client()
        await client.connect()
        with contextlib.suppress(NotFoundError):
            await client.get_stream(_PROBE_STREAM, limit=1, timeout=self._deadline)

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
        # Through the module: _io_loop rebinds _io, an imported name would stay None.
        if loop is self._home or (_loop._io is not None and loop is _loop._io[1]):
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
