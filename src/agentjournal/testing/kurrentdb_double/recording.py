"""Record the gRPC exchanges of a run, and replay them against the double.

The real-server leg of the tests (``KURRENTDB_URI=... KURRENTDB_RECORD=file.jsonl
pytest -m kurrentdb_server``) records every call the conformance suite makes to
a real KurrentDB: request messages, response messages, the final status and
its rich details. Replaying the file against a fresh double
(``python -m agentjournal.testing.kurrentdb_double.recording replay file.jsonl``)
sends the same requests and reports every answer whose shape differs: another
status code, other error detail types or reasons, other kinds of responses
(an event where the server said "stream not found", a success where it
refused).

What a replay can and cannot compare:

* Exchanges are logged when they end (answered, failed, or cancelled by the
  client), in that order, and replayed one at a time in it. For calls that
  overlap, the order their answers arrived in is the order the server decided
  them in (the winner of a race for a revision answers first; a subscription
  ends after the writes it saw), so concurrent writers and readers replay as
  the server saw them. Calls the server decided in one order but answered in
  the other (a race within one network round trip) cannot be told apart and
  may show as a difference.
* A subscription is compared by what it delivered (its confirmation, events,
  "stream not found", its end): when it caught up, fell behind or sent a
  checkpoint depends on timing and is not compared.
* Values that depend on the log (positions, ids, timestamps) are not
  compared, and calls that carry positions of the recorded server's ``$all``
  (reads and subscriptions of ``$all``) and gossip are skipped: they mean
  nothing to another log.
* Only the recording process's calls are recorded: writes made by other OS
  processes are missing from the file, so the real-server leg skips the test
  that writes from other processes while it records.

Use :class:`Recorder` in tests::

    recorder = Recorder()
    with recorder.installed():        # channels created meanwhile are recorded
        store = await open_store(uri)
        ...
    recorder.save("exchanges.jsonl")
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import grpc
import grpc.aio
from google.rpc import (
    error_details_pb2,  # type: ignore[import-untyped, unused-ignore]
    status_pb2,  # type: ignore[import-untyped, unused-ignore]
)
from kurrentdbclient.protos.v1 import streams_pb2
from kurrentdbclient.protos.v2.streams import streams_pb2 as v2_pb2

_READ = "/event_store.client.streams.Streams/Read"
_BATCH_APPEND = "/event_store.client.streams.Streams/BatchAppend"
_APPEND_SESSION = "/kurrentdb.protocol.v2.streams.StreamsService/AppendSession"
_UNARY = (
    "/event_store.client.streams.Streams/Delete",
    "/event_store.client.streams.Streams/Tombstone",
)
_STATUS_KEY = "grpc-status-details-bin"
_CALL_TIMEOUT = 10.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass
class Exchange:
    """One recorded call."""

    method: str
    requests: list[str] = field(default_factory=list)  # base64 of each request message
    responses: list[str] = field(default_factory=list)  # base64 of each response message
    code: str = "OK"
    details: str = ""
    status: str = ""  # base64 of grpc-status-details-bin (rich status), "" if none
    cancelled_by_client: bool = False

    def to_json(self) -> str:
        """One line of a recording file."""
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Exchange:
        """Parse one line of a recording file."""
        return cls(**json.loads(line))

    def finish(self, error: grpc.aio.AioRpcError | None) -> None:
        """Record how the call ended."""
        if error is None:
            return
        self.code = error.code().name
        self.details = error.details() or ""
        for key, value in error.trailing_metadata() or ():
            if key == _STATUS_KEY and isinstance(value, bytes):
                self.status = _b64(value)


class _Log:
    """Exchanges in the order they ended, and those still open."""

    def __init__(self) -> None:
        self.ended: list[Exchange] = []
        self.open: dict[int, Exchange] = {}

    def started(self, exchange: Exchange) -> None:
        self.open[id(exchange)] = exchange

    def ended_now(self, exchange: Exchange) -> None:
        # The first end counts (a stream may also see its end as an error later).
        if self.open.pop(id(exchange), None) is not None:
            self.ended.append(exchange)

    def all(self) -> list[Exchange]:
        return [*self.ended, *self.open.values()]


class _Recording:
    """What the four interceptors share: where exchanges go, how they are recorded."""

    def __init__(self, log: _Log) -> None:
        self._log = log

    def _start(self, details: grpc.aio.ClientCallDetails) -> Exchange:
        method = details.method
        name = method.decode() if isinstance(method, bytes) else str(method)
        exchange = Exchange(name)
        self._log.started(exchange)
        return exchange

    def _track(self, exchange: Exchange, call: Any) -> Any:
        # Logged when the call ends, however it ends (a client's cancel too): the
        # order calls end in is the order the server decided them in.
        call.add_done_callback(lambda _: self._log.ended_now(exchange))
        return call

    @staticmethod
    def _requests(exchange: Exchange, requests: Iterable[Any]) -> Iterator[Any]:
        for request in requests:
            exchange.requests.append(_b64(request.SerializeToString()))
            yield request

    @staticmethod
    async def _single(exchange: Exchange, call: Any) -> Any:
        # Await the call to record its answer, then hand the call itself on: the
        # caller's await gets the same (cached) response or error.
        try:
            response = await call
        except grpc.aio.AioRpcError as error:
            exchange.finish(error)
            return call
        exchange.responses.append(_b64(response.SerializeToString()))
        return call

    @staticmethod
    async def _stream(exchange: Exchange, call: Any) -> AsyncIterator[Any]:
        # Until the stream ends by itself, the caller may drop it (a subscription,
        # a batch append read up to its one answer): that is a cancel by the client.
        exchange.code, exchange.cancelled_by_client = "CANCELLED", True
        try:
            async for response in call:
                exchange.responses.append(_b64(response.SerializeToString()))
                yield response
        except grpc.aio.AioRpcError as error:
            exchange.cancelled_by_client = False
            exchange.finish(error)
            raise
        exchange.code, exchange.cancelled_by_client = "OK", False


# A channel files each interceptor under the first kind it is an instance of: one class per kind.
class _UnaryUnary(_Recording, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        exchange = self._start(client_call_details)
        exchange.requests.append(_b64(request.SerializeToString()))
        call = self._track(exchange, await continuation(client_call_details, request))
        return await self._single(exchange, call)


class _UnaryStream(_Recording, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request: Any
    ) -> Any:
        exchange = self._start(client_call_details)
        exchange.requests.append(_b64(request.SerializeToString()))
        call = self._track(exchange, await continuation(client_call_details, request))
        return self._stream(exchange, call)


class _StreamUnary(_Recording, grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_unary(
        self, continuation: Callable[..., Any], client_call_details: Any, request_iterator: Any
    ) -> Any:
        exchange = self._start(client_call_details)
        call = await continuation(client_call_details, self._requests(exchange, request_iterator))
        return await self._single(exchange, self._track(exchange, call))


class _StreamStream(_Recording, grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_stream(
        self, continuation: Callable[..., Any], client_call_details: Any, request_iterator: Any
    ) -> Any:
        exchange = self._start(client_call_details)
        call = await continuation(client_call_details, self._requests(exchange, request_iterator))
        return self._stream(exchange, self._track(exchange, call))


class Recorder:
    """Records the calls of every ``grpc.aio`` channel created while :meth:`installed`."""

    def __init__(self) -> None:
        self._log = _Log()

    @property
    def exchanges(self) -> list[Exchange]:
        """The calls recorded so far: those that ended, in that order, then those still open."""
        return self._log.all()

    def interceptors(self) -> list[grpc.aio.ClientInterceptor]:
        """Client interceptors (one per call kind) that log to :attr:`exchanges`."""
        return [
            kind(self._log) for kind in (_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream)
        ]

    @contextlib.contextmanager
    def installed(self) -> Iterator[Recorder]:
        """Add the interceptor to every ``grpc.aio`` channel created in the block.

        ``kurrentdbclient`` creates its channels itself; this is how a test
        records them without changing the client or the store.
        """
        insecure, secure = grpc.aio.insecure_channel, grpc.aio.secure_channel

        def insecure_channel(*args: Any, **kwargs: Any) -> grpc.aio.Channel:
            kwargs["interceptors"] = [*(kwargs.get("interceptors") or ()), *self.interceptors()]
            return insecure(*args, **kwargs)

        def secure_channel(*args: Any, **kwargs: Any) -> grpc.aio.Channel:
            kwargs["interceptors"] = [*(kwargs.get("interceptors") or ()), *self.interceptors()]
            return secure(*args, **kwargs)

        with (
            mock.patch.object(grpc.aio, "insecure_channel", insecure_channel),
            mock.patch.object(grpc.aio, "secure_channel", secure_channel),
        ):
            yield self

    def save(self, path: str | Path) -> None:
        """Append the exchanges to ``path`` (JSON lines)."""
        with open(path, "a", encoding="utf-8") as out:
            for exchange in self.exchanges:
                out.write(exchange.to_json() + "\n")


def load(path: str | Path) -> list[Exchange]:
    """Read a recording file."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [Exchange.from_json(line) for line in lines if line.strip()]


def _replayable(exchange: Exchange) -> bool:
    if exchange.method in (_BATCH_APPEND, _APPEND_SESSION, *_UNARY):
        return True
    if exchange.method != _READ or not exchange.requests:
        return False
    request = streams_pb2.ReadReq.FromString(base64.b64decode(exchange.requests[0]))
    return bool(request.options.WhichOneof("stream_option") == "stream")


def _is_subscription(exchange: Exchange) -> bool:
    if exchange.method != _READ or not exchange.requests:
        return False
    request = streams_pb2.ReadReq.FromString(base64.b64decode(exchange.requests[0]))
    return bool(request.options.WhichOneof("count_option") == "subscription")


# Responses of a subscription whose place depends on timing, not on what it delivers.
_TIMING = frozenset({"caught_up", "fell_behind", "checkpoint"})


def _delivered(exchange: Exchange, responses: Sequence[str]) -> list[str]:
    """The responses a replay compares: a subscription's timing markers left out."""
    if not _is_subscription(exchange):
        return list(responses)
    return [r for r in responses if _response_shape(exchange.method, r) not in _TIMING]


def _error_shape(code: str, status: str) -> tuple[str, ...]:
    """Status code, detail types and ErrorInfo reasons of a failed call."""
    shape = [code]
    if status:
        parsed = status_pb2.Status.FromString(base64.b64decode(status))
        for detail in parsed.details:
            shape.append(detail.TypeName())
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                shape.append(f"{info.domain}/{info.reason}")
    return tuple(shape)


def _response_shape(method: str, raw: str) -> str:
    data = base64.b64decode(raw)
    if method == _READ:
        return str(streams_pb2.ReadResp.FromString(data).WhichOneof("content"))
    if method == _BATCH_APPEND:
        response = streams_pb2.BatchAppendResp.FromString(data)
        kind = str(response.WhichOneof("result"))
        if kind == "error":
            return f"error {response.error.code} {response.error.message}"
        return kind
    if method == _APPEND_SESSION:
        return f"{len(v2_pb2.AppendSessionResponse.FromString(data).output)} streams"
    return "response"


def _shape(exchange: Exchange, answer: Exchange) -> tuple[Any, ...]:
    """How ``answer`` (recorded or replayed) to ``exchange``'s requests looks."""
    return (
        _error_shape(answer.code, answer.status),
        [_response_shape(exchange.method, r) for r in _delivered(exchange, answer.responses)],
    )


async def _send(channel: grpc.aio.Channel, exchange: Exchange) -> Exchange:
    """Send ``exchange``'s requests; the answer, recorded as an Exchange."""
    got = Exchange(exchange.method)
    requests = [base64.b64decode(r) for r in exchange.requests]
    want = len(_delivered(exchange, exchange.responses))
    try:
        if exchange.method == _READ:
            call = channel.unary_stream(exchange.method)(requests[0], timeout=_CALL_TIMEOUT)
        elif exchange.method == _BATCH_APPEND:
            call = channel.stream_stream(exchange.method)(iter(requests), timeout=_CALL_TIMEOUT)
        elif exchange.method == _APPEND_SESSION:
            response = await channel.stream_unary(exchange.method)(
                iter(requests), timeout=_CALL_TIMEOUT
            )
            got.responses.append(_b64(response))
            return got
        else:
            response = await channel.unary_unary(exchange.method)(
                requests[0], timeout=_CALL_TIMEOUT
            )
            got.responses.append(_b64(response))
            return got
        async for response in call:
            got.responses.append(_b64(response))
            if exchange.cancelled_by_client and len(_delivered(exchange, got.responses)) >= want:
                call.cancel()
                got.code, got.cancelled_by_client = "CANCELLED", True
                break
    except grpc.aio.AioRpcError as error:
        got.finish(error)
    return got


async def replay(exchanges: Sequence[Exchange], target: str) -> list[str]:
    """Send the replayable exchanges to ``target`` (host:port); return how answers differ."""
    mismatches: list[str] = []
    async with grpc.aio.insecure_channel(target) as channel:
        for number, exchange in enumerate(exchanges, 1):
            if not _replayable(exchange):
                continue
            got = await _send(channel, exchange)
            want_shape = _shape(exchange, exchange)
            got_shape = _shape(exchange, got)
            if want_shape != got_shape:
                mismatches.append(
                    f"#{number} {exchange.method}: recorded {want_shape}, replayed {got_shape}"
                )
    return mismatches


def main(argv: Sequence[str] | None = None) -> int:
    """``replay FILE [--target HOST:PORT]``: replay against a target or a fresh double."""
    parser = argparse.ArgumentParser(
        prog="python -m agentjournal.testing.kurrentdb_double.recording",
        description="Replay recorded KurrentDB gRPC exchanges and report differing answers.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    command = commands.add_parser("replay", help="replay a recording (JSON lines)")
    command.add_argument("file")
    command.add_argument("--target", help="host:port to replay against (default: a new double)")
    command.add_argument("--server-version", choices=["25.0", "26.0", "26.1"], default="26.0")
    args = parser.parse_args(argv)
    exchanges = load(args.file)

    async def run() -> list[str]:
        if args.target:
            return await replay(exchanges, args.target)
        from agentjournal.testing.kurrentdb_double.runner import KurrentDBDouble

        async with KurrentDBDouble(server_version=args.server_version) as double:
            return await replay(exchanges, f"{double.host}:{double.port}")

    mismatches = asyncio.run(run())
    for line in mismatches:
        print(line)
    replayed = sum(1 for exchange in exchanges if _replayable(exchange))
    print(f"{replayed} of {len(exchanges)} exchanges replayed, {len(mismatches)} differ")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
