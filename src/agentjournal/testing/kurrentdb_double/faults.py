"""Faults the double can stage, and a server that never answers.

Faults are real behaviours on the wire, not flags the client is told about:

* ``stall_after_commit``: the append commits, then the answer is held until the
  client gives up (its deadline passes), so the outcome is unknown to it;
* ``timeout_after_commit``: the append commits, then the server answers with
  its own commit-timeout error (v1 ``Status.Timeout``, v2 ``OperationTimeout``),
  as KurrentDB does when the commit is slow to be acknowledged;
* ``not_ready``: the call is answered with the server's not-ready error (during
  start-up or shutdown), nothing is done;
* ``not_ready_after_confirmation``: a subscription is confirmed, then ended with
  the not-ready error (its catch-up read was refused: ``Enumerator.AllSubscription*``
  confirm before they read); a plain read gets ``not_ready``;
* ``no_leader``: the v1 answer of a node that knows no leader (an election in
  progress): ``UNKNOWN "No leader info available in response"`` for a read, a
  status without a code and that text for a batch append;
* ``access_denied``: the server's access-denied answer of each API;
* ``stall``: the call is never answered and nothing is done (a server that
  hangs mid-call).

Stage them on :attr:`KurrentDBDouble.faults` by gRPC method name (``"BatchAppend"``
for ``append_to_stream``, ``"AppendSession"`` for ``multi_append_to_stream``,
``"Read"`` for reads and subscriptions); each is used by the next ``times``
calls of that method. :meth:`Faults.not_ready_for` answers every call of every
method with not-ready for a while, as a node does while it starts
(:meth:`KurrentDBDouble.restart` takes it as ``not_ready_for``). A server restart
and a too-large message need no staging: :meth:`KurrentDBDouble.restart` and the
double's size limits. :class:`SilentServer` is a TCP listener that accepts
connections and never says a word.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

FaultKind = Literal[
    "stall_after_commit",
    "timeout_after_commit",
    "not_ready",
    "not_ready_after_confirmation",
    "no_leader",
    "access_denied",
    "stall",
]
_METHODS = ("BatchAppend", "AppendSession", "Read")
_APPENDS = ("BatchAppend", "AppendSession")


@dataclass(frozen=True)
class _Staged:
    kind: FaultKind | None  # None: a call let through untouched


class Faults:
    """Faults staged for the next calls of each gRPC method; safe to use from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._staged: dict[str, deque[_Staged]] = {method: deque() for method in _METHODS}
        self.used: list[tuple[str, FaultKind]] = []
        """Every fault used so far, in order: ``(method, kind)``."""
        self.calls: Counter[str] = Counter()
        """How many calls of each method the double has received."""
        self._not_ready_until = 0.0

    def stall_after_commit(self, method: str, *, times: int = 1) -> None:
        """Commit the next ``times`` appends of ``method``, then never answer them."""
        self._stage(method, "stall_after_commit", times, _APPENDS)

    def timeout_after_commit(self, method: str, *, times: int = 1) -> None:
        """Commit the next ``times`` appends of ``method``, then answer with a commit timeout."""
        self._stage(method, "timeout_after_commit", times, _APPENDS)

    def stall(self, method: str, *, times: int = 1) -> None:
        """Never answer the next ``times`` calls of ``method``; do nothing for them."""
        self._stage(method, "stall", times, _METHODS)

    def not_ready(self, method: str, *, times: int = 1, after: int = 0) -> None:
        """Answer ``times`` calls of ``method`` with the server's not-ready error.

        The next ``after`` calls go through untouched first (e.g. a subscription's
        own call, when the reads that follow it are to be refused).
        """
        self._stage(method, None, after, _METHODS)
        self._stage(method, "not_ready", times, _METHODS)

    def not_ready_after_confirmation(self, method: str = "Read", *, times: int = 1) -> None:
        """Confirm the next ``times`` subscriptions, then end each with the not-ready error."""
        self._stage(method, "not_ready_after_confirmation", times, ("Read",))

    def no_leader(self, method: str, *, times: int = 1) -> None:
        """Answer the next ``times`` v1 calls of ``method`` as a node that knows no leader."""
        self._stage(method, "no_leader", times, ("BatchAppend", "Read"))

    def access_denied(self, method: str, *, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``method`` with the server's access-denied error."""
        self._stage(method, "access_denied", times, _METHODS)

    def not_ready_for(self, seconds: float) -> None:
        """Answer every call of every method with not-ready for the next ``seconds``.

        What a node does while it starts: it listens before it can serve, and
        refuses reads, appends and subscriptions until it is ready.
        """
        with self._lock:
            self._not_ready_until = time.monotonic() + seconds

    def clear(self) -> None:
        """Drop every staged fault (and a not-ready period)."""
        with self._lock:
            for queue in self._staged.values():
                queue.clear()
            self._not_ready_until = 0.0

    def take(self, method: str) -> FaultKind | None:
        """Count a call of ``method``; return its fault (used up), or None."""
        with self._lock:
            self.calls[method] += 1
            if time.monotonic() < self._not_ready_until:
                self.used.append((method, "not_ready"))
                return "not_ready"
            queue = self._staged[method]
            if not queue:
                return None
            kind = queue.popleft().kind
            if kind is not None:
                self.used.append((method, kind))
            return kind

    def _stage(
        self, method: str, kind: FaultKind | None, times: int, allowed: tuple[str, ...]
    ) -> None:
        if method not in allowed:
            raise ValueError(f"{kind} applies to {', '.join(allowed)}, not {method!r}")
        if times < (1 if kind is not None else 0):
            raise ValueError(f"times must be >= 1, got {times}")
        with self._lock:
            self._staged[method].extend(_Staged(kind) for _ in range(times))


class SilentServer:
    """A TCP listener on loopback that accepts connections and never answers.

    What a client meets when a server (or a proxy before it) hangs: the TCP
    connection succeeds, the HTTP/2 preface goes unanswered, every call waits
    for its deadline. Use it as a context manager; :attr:`uri` points a
    KurrentDB client at it.
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, 0))
        self._socket.listen(64)
        self.host = host
        self.port: int = self._socket.getsockname()[1]
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)

    @property
    def uri(self) -> str:
        """A ``kurrentdb://`` connection string for the listener."""
        return f"kurrentdb://{self.host}:{self.port}?Tls=false"

    def _accept(self) -> None:
        self._socket.settimeout(0.05)
        while not self._closed.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._held.append(connection)  # keep it open; read nothing, write nothing

    def __enter__(self) -> SilentServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening and drop every held connection."""
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._socket.close()
        for connection in self._held:
            connection.close()
        self._held.clear()
