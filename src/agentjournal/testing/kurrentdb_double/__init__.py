"""An in-process KurrentDB server for tests: the official KurrentDB test double.

**For tests only.** It keeps everything in memory, has no security and no
durability. Use it where a test needs KurrentDB semantics and no server is
reachable, the way httpx's ``MockTransport`` stands in for a network::

    async with KurrentDBDouble() as double:
        store = await open_store(double.uri)  # "kurrentdb://127.0.0.1:PORT?Tls=false"

It answers only while the event loop that started it runs. When other OS
processes, other event loops or blocking code must reach it, serve it from a
thread (``with KurrentDBDouble.in_thread() as double: ...``) or a process
(``python -m agentjournal.testing.kurrentdb_double`` prints the URI, then
serves until SIGINT/SIGTERM). ``kurrentdb_store_on_double()`` yields an open
``KurrentDBEventStore`` on a fresh threaded double; ``bench_store`` is the same
in the shape ``bench/store.py`` expects.

It is a real gRPC server on loopback (``grpc.aio``, an ephemeral port) that
implements the servicer stubs ``kurrentdbclient`` ships, so the unmodified
client talks to it over TCP: v1 streams (``BatchAppend``, ``Append``, ``Read``
of streams and ``$all`` with filters and catch-up subscriptions, ``Delete``,
``Tombstone``), v2 ``AppendSession``, and gossip (one node, the leader).

It is pinned to KurrentDB 26.0.2's source (``kurrent-io/KurrentDB``):

* :mod:`.state`: the log and the commit decisions of ``IndexWriter.CheckCommit``
  and ``StorageWriterService.VerifyCommitChecks`` (idempotency, conflicts,
  soft deletes and their undelete, tombstones), with 26.1's answers to a partly
  retried multi-stream append and to one that meets a deleted stream as an
  option (``server_version="26.1"``); ``server_version="25.0"`` serves no v2
  streams service;
* :mod:`.answers`: every error in the server's exact shape (code, message,
  trailing metadata or ``google.rpc.Status`` details);
* :mod:`.servicers` (v1 streams, gossip) and :mod:`.streams_v2` (``AppendSession``):
  the services, with the server's size limits (per record,
  per append, and the v1 service's message cap of 16 MiB - 10,000 bytes),
  validations and positions (``$all`` refuses a start inside a record:
  reads with an ``Unexpected ...ReadAllResult: InvalidPosition`` error,
  subscriptions with ``INVALID_ARGUMENT`` after confirming);
* :mod:`.faults`: commit-then-stall, commit-then-timeout, not-ready (also after
  a subscription's confirmation), no-leader and access-denied answers staged
  per call, :meth:`KurrentDBDouble.restart` (a new gRPC server on the same port
  with the same data, optionally "not ready" for a while as a node starts), and
  :class:`SilentServer`, a listener that never answers;
* :mod:`.recording`: a client interceptor that records the gRPC exchanges of
  a run (against a real server) and replays them against the double.

What it does not reproduce is listed in ``docs/kurrentdb.md``.
"""

from __future__ import annotations

from agentjournal.testing.kurrentdb_double.faults import Faults, SilentServer
from agentjournal.testing.kurrentdb_double.runner import (
    DEFAULT_MAX_APPEND_EVENT_SIZE,
    DEFAULT_MAX_APPEND_SIZE,
    KurrentDBDouble,
    ThreadedKurrentDBDouble,
    bench_store,
    kurrentdb_store_on_double,
    main,
)

__all__ = [
    "DEFAULT_MAX_APPEND_EVENT_SIZE",
    "DEFAULT_MAX_APPEND_SIZE",
    "Faults",
    "KurrentDBDouble",
    "SilentServer",
    "ThreadedKurrentDBDouble",
    "bench_store",
    "kurrentdb_store_on_double",
    "main",
]
