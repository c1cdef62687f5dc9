"""Running the double: in the caller's loop, in a thread, or as a process."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import threading
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from kurrentdbclient.protos.v1 import gossip_pb2_grpc, streams_pb2_grpc
from kurrentdbclient.protos.v2.streams import streams_pb2_grpc as v2_pb2_grpc

from agentjournal.testing.kurrentdb_double.answers import MAX_V1_MESSAGE_BYTES
from agentjournal.testing.kurrentdb_double.faults import Faults
from agentjournal.testing.kurrentdb_double.servicers import Gossip, Limits, Streams
from agentjournal.testing.kurrentdb_double.state import Database
from agentjournal.testing.kurrentdb_double.streams_v2 import StreamsV2

if TYPE_CHECKING:
    from agentjournal.store.kurrentdb import KurrentDBEventStore

DEFAULT_MAX_APPEND_SIZE = 256 * 1024 * 1024
"""The server's default ``MaxAppendSize`` since 25.1 (``TFConsts.ChunkSize``, 256 MiB)."""
DEFAULT_MAX_APPEND_EVENT_SIZE = 16 * 1024 * 1024
"""The server's default ``MaxAppendEventSize`` (``TFConsts.MaxLogRecordSize``, 16 MiB)."""


class KurrentDBDouble:
    """A KurrentDB test double served by ``grpc.aio`` in the running event loop.

    Use it as an async context manager, or call :meth:`start` and :meth:`stop`.
    The server answers only while its event loop runs: to let other OS
    processes (or code that blocks the loop) reach it, use :meth:`in_thread`
    or run ``python -m agentjournal.testing.kurrentdb_double``.

    Args:
        host: Interface to listen on.
        port: TCP port; 0 picks a free one (see :attr:`port` once started).
        max_append_size: ``MaxAppendSize``: the largest append (the sum of its
            records' sizes as the server counts them); default 256 MiB (25.0: 1 MiB).
        max_append_event_size: ``MaxAppendEventSize``: the largest record.
        idempotency_cache_size: How many recent event ids the server remembers
            to recognise retries with ``ANY``/``EXISTS``.
        server_version: ``"26.0"`` (default, as ``docker-compose.yml`` runs) or
            ``"26.1"``, where the two differ (see :mod:`.state`); ``"25.0"``
            serves no v2 streams service (``AppendSession`` is ``UNIMPLEMENTED``,
            as on KurrentDB 25.0.x) and takes 1 MiB per append by default.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_append_size: int | None = None,
        max_append_event_size: int = DEFAULT_MAX_APPEND_EVENT_SIZE,
        idempotency_cache_size: int = 10_000,
        server_version: str = "26.0",
    ) -> None:
        self._host = host
        self._requested_port = port
        self._port = 0
        self._db = Database(
            idempotency_cache_size=idempotency_cache_size, server_version=server_version
        )
        self._v2 = server_version != "25.0"
        if max_append_size is None:
            max_append_size = DEFAULT_MAX_APPEND_SIZE if self._v2 else 1024 * 1024
        self._limits = Limits(
            max_append_size=max_append_size, max_append_event_size=max_append_event_size
        )
        self.faults = Faults()
        """Faults staged for the next calls (see :mod:`.faults`)."""
        self._server: grpc.aio.Server | None = None

    @property
    def host(self) -> str:
        """The interface the double listens on."""
        return self._host

    @property
    def port(self) -> int:
        """The TCP port the double listens on (0 before :meth:`start`)."""
        return self._port

    @property
    def uri(self) -> str:
        """A ``kurrentdb://`` connection string for this double."""
        return f"kurrentdb://{self._host}:{self._port}?Tls=false"

    @property
    def discover_uri(self) -> str:
        """A ``kurrentdb+discover://`` connection string (cluster discovery via gossip)."""
        return f"kurrentdb+discover://{self._host}:{self._port}?Tls=false"

    @property
    def running(self) -> bool:
        """Whether the double is serving."""
        return self._server is not None

    async def start(self) -> None:
        """Start serving; the port is known when this returns.

        After a :meth:`stop` it starts again on the same port, with the same data.
        """
        if self._server is not None:
            raise RuntimeError("the KurrentDB double is already running")
        # gRPC here has one message limit per server; KurrentDB has one per service
        # (v1: 16 MiB - 10,000, ClusterVNodeStartup.cs; v2: 1.5 x MaxAppendSize,
        # ApiV2Plugin.cs): take the larger, each servicer checks its own.
        receive = max(int(self._limits.max_append_size * 1.5), MAX_V1_MESSAGE_BYTES) + 1024 * 1024
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", receive),
                ("grpc.max_send_message_length", receive),
                ("grpc.so_reuseport", 0),
            ]
        )
        gossip = Gossip(self._host, lambda: self._port)
        # The generated registration functions are untyped.
        streams = Streams(self._db, self._limits, self.faults)
        streams_v2 = StreamsV2(self._db, self._limits, self.faults)
        streams_pb2_grpc.add_StreamsServicer_to_server(streams, server)  # type: ignore[no-untyped-call]
        if self._v2:
            v2_pb2_grpc.add_StreamsServiceServicer_to_server(streams_v2, server)  # type: ignore[no-untyped-call]
        gossip_pb2_grpc.add_GossipServicer_to_server(gossip, server)  # type: ignore[no-untyped-call]
        port = self._port or self._requested_port
        bound = server.add_insecure_port(f"{self._host}:{port}")
        if bound == 0:
            raise OSError(f"cannot listen on {self._host}:{port}")
        self._port = bound
        await server.start()
        self._server = server

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving; open calls are cancelled after ``grace`` seconds."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)

    async def restart(self, *, down_for: float = 0.0, not_ready_for: float = 0.0) -> None:
        """Stop the gRPC server and start a new one on the same port with the same data.

        Open calls (subscriptions too) end as they do when a node goes down;
        clients must reconnect. ``down_for`` seconds pass in between. For
        ``not_ready_for`` seconds after it is back, the node answers every call
        with "not ready", as KurrentDB does while it starts (it accepts
        connections before it can serve).
        """
        await self.stop(grace=0)
        if down_for:
            await asyncio.sleep(down_for)
        if not_ready_for:
            self.faults.not_ready_for(not_ready_for)
        await self.start()

    async def __aenter__(self) -> KurrentDBDouble:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    @classmethod
    def in_thread(cls, **options: Any) -> ThreadedKurrentDBDouble:
        """Return a double that serves from its own thread and event loop.

        Takes the constructor's options. Use it as a (sync) context manager. It
        keeps answering while the caller's thread blocks, so other OS processes
        and other event loops can use it.
        """
        return ThreadedKurrentDBDouble(cls(**options))


class ThreadedKurrentDBDouble:
    """A :class:`KurrentDBDouble` running in a daemon thread (see ``in_thread``)."""

    def __init__(self, double: KurrentDBDouble) -> None:
        self.double = double
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def uri(self) -> str:
        """A ``kurrentdb://`` connection string for the double."""
        return self.double.uri

    @property
    def discover_uri(self) -> str:
        """A ``kurrentdb+discover://`` connection string for the double."""
        return self.double.discover_uri

    @property
    def port(self) -> int:
        """The TCP port the double listens on."""
        return self.double.port

    @property
    def faults(self) -> Faults:
        """The double's staged faults (thread-safe)."""
        return self.double.faults

    def start(self) -> None:
        """Start the thread and wait until the double listens."""
        self._thread = threading.Thread(
            target=self._run, name=f"kurrentdb-double-{id(self):x}", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError("the KurrentDB double did not start") from self._error

    def stop(self) -> None:
        """Stop the double and join its thread."""
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    async def restart(self, *, down_for: float = 0.0, not_ready_for: float = 0.0) -> None:
        """:meth:`KurrentDBDouble.restart` in the double's thread; await it from any loop."""
        assert self._loop is not None, "the double is not running"
        future = asyncio.run_coroutine_threadsafe(
            self.double.restart(down_for=down_for, not_ready_for=not_ready_for), self._loop
        )
        await asyncio.wrap_future(future)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                await self.double.start()
            except BaseException as error:
                self._error = error
                raise
            finally:
                self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await self.double.stop(grace=0)

        with contextlib.suppress(BaseException):
            asyncio.run(main())

    def __enter__(self) -> ThreadedKurrentDBDouble:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.asynccontextmanager
async def kurrentdb_store_on_double(**options: Any) -> AsyncIterator[KurrentDBEventStore]:
    """Yield an open :class:`~agentjournal.store.kurrentdb.KurrentDBEventStore` on a fresh double.

    ``options`` go to :class:`KurrentDBDouble`. The double serves from its own
    thread (see :meth:`KurrentDBDouble.in_thread`), so its work does not share
    the caller's event loop; benchmarks measure client, gRPC and double
    together. Both are closed on exit.
    """
    from agentjournal.store.kurrentdb import KurrentDBEventStore

    with KurrentDBDouble.in_thread(**options) as double:
        store = await KurrentDBEventStore.open(double.uri)
        try:
            yield store
        finally:
            await store.close()


def bench_store(directory: str) -> contextlib.AbstractAsyncContextManager[KurrentDBEventStore]:
    """The store factory ``bench/store.py`` expects: a store on a fresh threaded double.

    ``directory`` is unused: the double keeps nothing on disk.
    """
    del directory
    return kurrentdb_store_on_double()


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a double until interrupted; print its URI on the first line of stdout."""
    parser = argparse.ArgumentParser(
        prog="python -m agentjournal.testing.kurrentdb_double",
        description="Serve an in-memory KurrentDB test double (for tests only).",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--max-append-size", type=int, default=None)
    parser.add_argument("--server-version", choices=["25.0", "26.0", "26.1"], default="26.0")
    args = parser.parse_args(argv)

    async def serve() -> None:
        double = KurrentDBDouble(
            host=args.host,
            port=args.port,
            max_append_size=args.max_append_size,
            server_version=args.server_version,
        )
        await double.start()
        print(double.uri, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await double.stop(grace=0)

    asyncio.run(serve())
    return 0
