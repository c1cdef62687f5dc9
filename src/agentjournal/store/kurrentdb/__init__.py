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

The package holds the store's class (``_store``) on its connection (``_connection``),
the connection string (``_uri``), records to and from the client (``_records``), size
limits (``_limits``), the client's errors (``_errors``), the I/O loop (``_loop``) and a
subscription's reconnect backoff (``_reconnect``).
"""

from __future__ import annotations

from agentjournal.store.kurrentdb._connection import DEFAULT_DEADLINE
from agentjournal.store.kurrentdb._limits import (
    MAX_APPEND_SIZE,
    MAX_RECORD_SIZE,
    MAX_V1_MESSAGE_BYTES,
)
from agentjournal.store.kurrentdb._store import KurrentDBEventStore
from agentjournal.store.kurrentdb._uri import redact_uri

__all__ = [
    "DEFAULT_DEADLINE",
    "MAX_APPEND_SIZE",
    "MAX_RECORD_SIZE",
    "MAX_V1_MESSAGE_BYTES",
    "KurrentDBEventStore",
    "redact_uri",
]
