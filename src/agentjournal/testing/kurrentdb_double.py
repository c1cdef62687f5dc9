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
client talks to it over TCP:

* ``event_store.client.streams.Streams``: ``BatchAppend`` (what
  ``append_to_stream`` uses), ``Append``, ``Read`` (streams and ``$all``,
  forwards and backwards, server-side filters, catch-up subscriptions to
  ``$all`` and to a stream that then follow live appends), ``Delete`` and
  ``Tombstone``;
* ``kurrentdb.protocol.v2.streams.StreamsService``: ``AppendSession`` (what
  ``multi_append_to_stream`` uses);
* ``event_store.client.gossip.Gossip``: ``Read``, a one-node cluster, so
  ``kurrentdb+discover://`` URIs work too.

Semantics reproduced (those of KurrentDB 26.0): revisions from 0 without gaps;
expected states ``ANY``, ``NO_STREAM``, ``EXISTS`` and exact revisions;
idempotent retries (the same event ids at the same place with an exact
revision or ``NO_STREAM`` succeed without writing twice and report the first
write's revision and position; ids that only partly match are a conflict;
with ``ANY``/``EXISTS`` retries are recognised only through a bounded cache
of recent event ids, as on the server); atomic multi-stream appends in which
a stream may appear once (compared case-insensitively) and event types must
match ``^[a-zA-Z0-9_.$:-]+$``; metadata of multi-stream appends read back as a
JSON object with ``$schema.name`` and ``$schema.format`` added; one global
log with gapped, strictly increasing positions (commit position equals
prepare position for every event); a ``$streamDeleted`` record for a
tombstone and a ``$metadata`` record in ``$$stream`` for a soft delete;
reads of ``$all`` from a position that is not a record boundary fail with
``InvalidPosition``; a configurable limit on the size of one append;
errors carried exactly as the server carries them (rich ``google.rpc.Status``
details for the v2 API, ``BatchAppendResp.error`` for the v1 API), so the
client raises the same exception classes.

Not reproduced:

* TLS and authentication: the double listens in plaintext and accepts any
  (or no) credentials; access control lists are not enforced.
* Durability, scavenging, clustering, leader election and follower reads:
  state lives in memory and dies with the double; gossip reports one leader.
* System projections (``$ce-``, ``$et-``, ``$by_category`` ...), persistent
  subscriptions, the projections API, stream metadata (``$maxCount``,
  ``$maxAge``, ACLs) other than the truncation written by a soft delete, and
  the server-features, operations, users and monitoring services.
* ``AppendRecords`` (the 26.1 API) and ``resolve_links`` (there are no links).
* Record sizes are counted as data plus metadata bytes; the server also
  counts the event type and record headers, so an event right at the limit
  may be refused by a real server and accepted here. The default limit is
  16 MiB per append (the server's default ``MaxAppendSize`` is 1 MiB; the
  repository's docker-compose file raises it to 16 MiB).
* A multi-stream append in which some streams are idempotent retries and
  others are new writes is answered with a revision conflict naming the
  retried stream; KurrentDB 26.0 has no stream to name there and fails the
  call with a non-conflict error.
* With ``ANY``/``EXISTS`` a retry is recognised when its ids sit at
  consecutive revisions from the first one found in the cache (the server
  checks each id against its cache); the cache is never reset (the
  server's is lost on restart). Event ids are not checked for uniqueness
  across streams.
* No server-side deadlines: the double never answers with a timeout, never
  says it is busy or not the leader, and a subscriber never falls behind.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import re
import signal
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

import grpc
import grpc.aio
from google.protobuf import (  # type: ignore[import-untyped, unused-ignore]
    any_pb2,
    empty_pb2,
    json_format,
    timestamp_pb2,
)
from google.rpc import status_pb2 as rpc_status_pb2  # type: ignore[import-untyped, unused-ignore]
from grpc_status import rpc_status  # type: ignore[import-untyped, unused-ignore]
from kurrentdbclient.protos.v1 import (
    gossip_pb2,
    gossip_pb2_grpc,
    shared_pb2,
    status_pb2,
    streams_pb2,
    streams_pb2_grpc,
)
from kurrentdbclient.protos.v2.streams import errors_pb2 as v2_errors_pb2
from kurrentdbclient.protos.v2.streams import streams_pb2 as v2_pb2
from kurrentdbclient.protos.v2.streams import streams_pb2_grpc as v2_pb2_grpc

if TYPE_CHECKING:
    from agentjournal.store.kurrentdb import KurrentDBEventStore

__all__ = [
    "DEFAULT_MAX_APPEND_SIZE",
    "KurrentDBDouble",
    "ThreadedKurrentDBDouble",
    "bench_store",
    "kurrentdb_store_on_double",
]

DEFAULT_MAX_APPEND_SIZE = 16 * 1024 * 1024
"""Largest append (sum of data and metadata bytes) the double accepts by default."""

_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
_EVENT_TYPE = re.compile(r"^[a-zA-Z0-9_.$:-]+$")
_FIRST_POSITION = 1024  # a fresh server's log starts with system records
_RECORD_OVERHEAD = 96  # bytes a log record adds besides its payload
_TOMBSTONE_REVISION = 2**63 - 1

# Expected-revision codes of the v2 protocol, used internally for both APIs.
_NO_STREAM = -1
_ANY = -2
_EXISTS = -4


# --------------------------------------------------------------------- state


@dataclass(slots=True)
class _Record:
    id: str
    stream: str
    revision: int
    position: int
    type: str
    content_type: str
    data: bytes
    metadata: bytes
    created: int  # 100 ns ticks since the Unix epoch, as the server reports it


@dataclass(slots=True)
class _Stream:
    name: str
    records: list[_Record] = field(default_factory=list)
    truncate_before: int = 0  # set by a soft delete: earlier revisions are hidden
    tombstoned: bool = False

    @property
    def last_revision(self) -> int:
        return len(self.records) - 1

    @property
    def visible(self) -> bool:
        return len(self.records) > self.truncate_before


@dataclass(frozen=True, slots=True)
class _Proposed:
    id: str
    type: str
    content_type: str
    data: bytes
    metadata: bytes  # as a read returns it
    size: int  # what counts against the append size limit


@dataclass(frozen=True, slots=True)
class _Written:
    stream: str
    revision: int  # -1 when an empty write found no stream
    position: int | None  # None when nothing was written (an empty write)


class _WrongExpectedVersion(Exception):
    def __init__(self, stream: str, expected: int, actual: int) -> None:
        super().__init__(stream)
        self.stream = stream
        self.expected = expected
        self.actual = actual


class _StreamDeleted(Exception):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.stream = stream


class _InvalidPosition(Exception):
    pass


class _Database:
    """The in-memory log. Used only from the server's event loop."""

    def __init__(self, *, max_append_size: int, idempotency_cache_size: int) -> None:
        self.max_append_size = max_append_size
        self.log: list[_Record] = []
        self.log_positions: list[int] = []
        self.streams: dict[str, _Stream] = {}
        self.next_position = _FIRST_POSITION
        self._recent_ids: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._cache_size = idempotency_cache_size
        self._changed: asyncio.Event | None = None

    # -- notifications

    def changed(self) -> asyncio.Event:
        """Return an event that is set at the next commit."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    # -- positions

    def is_valid_position(self, position: int) -> bool:
        if position in (0, self.next_position):
            return True
        index = bisect.bisect_left(self.log_positions, position)
        return index < len(self.log_positions) and self.log_positions[index] == position

    # -- writes

    def write(self, requests: Sequence[tuple[str, int, Sequence[_Proposed]]]) -> list[_Written]:
        """Check every request, then write all of them or none.

        Raises:
            _WrongExpectedVersion: A stream is not in its expected state.
            _StreamDeleted: A stream is tombstoned.
        """
        decisions = [self._check(stream, expected, events) for stream, expected, events in requests]
        idempotent = [d for d in decisions if d is not None]
        if idempotent and len(idempotent) == len(decisions):
            return idempotent
        if idempotent:
            # KurrentDB refuses a mix of retried and new writes; see module docs.
            for (name, expected, _), decision in zip(requests, decisions, strict=True):
                if decision is not None:
                    raise _WrongExpectedVersion(name, expected, self._actual(name))
        results: list[_Written] = []
        for stream_name, _, events in requests:
            stream = self.streams.get(stream_name)
            if not events:
                results.append(_Written(stream_name, stream.last_revision if stream else -1, None))
                continue
            if stream is None:
                stream = self.streams[stream_name] = _Stream(stream_name)
            for event in events:
                record = self._append_record(
                    stream_name,
                    stream.last_revision + 1,
                    event.id,
                    event.type,
                    event.content_type,
                    event.data,
                    event.metadata,
                )
                stream.records.append(record)
                self._remember(record)
            results.append(_Written(stream_name, stream.last_revision, stream.records[-1].position))
        self._notify()
        return results

    def delete(self, stream_name: str, expected: int, *, tombstone: bool) -> int:
        """Soft-delete or tombstone a stream; return the position of the record written.

        Raises:
            _WrongExpectedVersion: The stream is not in the expected state (or,
                for a soft delete, does not exist).
            _StreamDeleted: The stream is tombstoned.
        """
        stream = self.streams.get(stream_name)
        if stream is not None and stream.tombstoned:
            raise _StreamDeleted(stream_name)
        exists = stream is not None and stream.visible
        current = stream.last_revision if stream is not None and exists else -1
        if (
            (expected == _EXISTS and not exists)
            or (expected == _NO_STREAM and exists)
            or (expected >= 0 and expected != current)
            or (not tombstone and not exists)
        ):
            raise _WrongExpectedVersion(stream_name, expected, current)
        if stream is None:
            stream = self.streams[stream_name] = _Stream(stream_name)
        if tombstone:
            stream.tombstoned = True
            record = self._append_record(
                stream_name,
                _TOMBSTONE_REVISION,
                str(uuid.uuid4()),
                "$streamDeleted",
                "application/json",
                b"",
                b"",
            )
        else:
            stream.truncate_before = stream.last_revision + 1
            meta_name = f"$${stream_name}"
            meta_stream = self.streams.setdefault(meta_name, _Stream(meta_name))
            record = self._append_record(
                meta_name,
                meta_stream.last_revision + 1,
                str(uuid.uuid4()),
                "$metadata",
                "application/json",
                json.dumps({"$tb": stream.truncate_before}).encode(),
                b"",
            )
            meta_stream.records.append(record)
        self._notify()
        return record.position

    def _append_record(
        self,
        stream: str,
        revision: int,
        event_id: str,
        event_type: str,
        content_type: str,
        data: bytes,
        metadata: bytes,
    ) -> _Record:
        record = _Record(
            id=event_id,
            stream=stream,
            revision=revision,
            position=self.next_position,
            type=event_type,
            content_type=content_type,
            data=data,
            metadata=metadata,
            created=time.time_ns() // 100,
        )
        self.next_position += _RECORD_OVERHEAD + len(data) + len(metadata) + len(event_type)
        self.log.append(record)
        self.log_positions.append(record.position)
        return record

    def _remember(self, record: _Record) -> None:
        self._recent_ids[record.id] = (record.stream, record.revision)
        while len(self._recent_ids) > self._cache_size:
            self._recent_ids.popitem(last=False)

    def _actual(self, stream_name: str) -> int:
        stream = self.streams.get(stream_name)
        return stream.last_revision if stream is not None and stream.visible else -1

    def _check(
        self, stream_name: str, expected: int, events: Sequence[_Proposed]
    ) -> _Written | None:
        """Return None to write, a result for an idempotent retry, or raise."""
        stream = self.streams.get(stream_name)
        if stream is not None and stream.tombstoned:
            raise _StreamDeleted(stream_name)
        exists = stream is not None and stream.visible
        current = stream.last_revision if stream is not None else -1
        ids = [event.id for event in events]
        if expected in (_ANY, _EXISTS):
            if expected == _EXISTS and not exists:
                raise _WrongExpectedVersion(stream_name, expected, -1)
            return self._check_cached(stream_name, stream, expected, ids)
        if expected == _NO_STREAM:
            if not exists:
                return None
            assert stream is not None
            return self._check_retry(stream, expected, stream.truncate_before - 1, ids)
        if expected == current:
            return None
        if stream is not None and exists and expected < current:
            return self._check_retry(stream, expected, expected, ids)
        raise _WrongExpectedVersion(stream_name, expected, current if exists else -1)

    def _check_retry(
        self, stream: _Stream, expected: int, base: int, ids: Sequence[str]
    ) -> _Written:
        """Recognise a retry of the write that followed revision ``base``."""
        if not ids:
            raise _WrongExpectedVersion(stream.name, expected, stream.last_revision)
        for offset, event_id in enumerate(ids):
            revision = base + 1 + offset
            if revision > stream.last_revision or stream.records[revision].id != event_id:
                raise _WrongExpectedVersion(stream.name, expected, stream.last_revision)
        last = stream.records[base + len(ids)]
        return _Written(stream.name, last.revision, last.position)

    def _check_cached(
        self, stream_name: str, stream: _Stream | None, expected: int, ids: Sequence[str]
    ) -> _Written | None:
        if not ids or stream is None:
            return None
        hit = self._recent_ids.get(ids[0])
        if hit is None or hit[0] != stream_name:
            return None
        return self._check_retry(stream, expected, hit[1] - 1, ids)


# ------------------------------------------------------------------ helpers


def _uuid_message(value: str, *, structured: bool) -> shared_pb2.UUID:
    if not structured:
        return shared_pb2.UUID(string=value)
    number = uuid.UUID(value).int
    high, low = number >> 64, number & (2**64 - 1)
    return shared_pb2.UUID(
        structured=shared_pb2.UUID.Structured(
            most_significant_bits=high - 2**64 if high >= 2**63 else high,
            least_significant_bits=low - 2**64 if low >= 2**63 else low,
        )
    )


def _uuid_text(message: shared_pb2.UUID) -> str:
    if message.WhichOneof("value") == "structured":
        high = message.structured.most_significant_bits % 2**64
        low = message.structured.least_significant_bits % 2**64
        return str(uuid.UUID(int=(high << 64) | low))
    return str(uuid.UUID(message.string)) if message.string else str(uuid.uuid4())


def _v1_expected(options: Any) -> int:
    oneofs = options.DESCRIPTOR.oneofs_by_name
    group = (
        "expected_stream_position"
        if "expected_stream_position" in oneofs
        else ("expected_stream_revision")
    )
    which = options.WhichOneof(group)
    if which in ("stream_position", "revision"):
        return int(getattr(options, which))
    return {"no_stream": _NO_STREAM, "any": _ANY, "stream_exists": _EXISTS}.get(
        which or "any", _ANY
    )


def _wrong_expected_version_v1(error: _WrongExpectedVersion) -> shared_pb2.WrongExpectedVersion:
    message = shared_pb2.WrongExpectedVersion()
    if error.actual < 0:
        message.current_no_stream.CopyFrom(empty_pb2.Empty())
    else:
        message.current_stream_revision = error.actual
    if error.expected >= 0:
        message.expected_stream_position = error.expected
    elif error.expected == _NO_STREAM:
        message.expected_no_stream.CopyFrom(empty_pb2.Empty())
    elif error.expected == _EXISTS:
        message.expected_stream_exists.CopyFrom(empty_pb2.Empty())
    else:
        message.expected_any.CopyFrom(empty_pb2.Empty())
    return message


async def _abort_rich(
    context: grpc.aio.ServicerContext[Any, Any],
    code: grpc.StatusCode,
    message: str,
    detail: Any = None,
) -> NoReturn:
    """End the call with a google.rpc.Status, as KurrentDB's v2 API does."""
    status = rpc_status_pb2.Status(code=code.value[0], message=message)
    if detail is not None:
        packed = any_pb2.Any()
        packed.Pack(detail)
        status.details.append(packed)
    grpc_status = rpc_status.to_status(status)
    await context.abort(grpc_status.code, grpc_status.details, grpc_status.trailing_metadata)
    raise AssertionError("unreachable")  # pragma: no cover


def _timestamp_now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp


def _property_text(value: Any) -> Any:
    if value.WhichOneof("kind") == "string_value":
        return value.string_value
    return json_format.MessageToDict(value)


# ----------------------------------------------------------------- services


class _Streams(streams_pb2_grpc.StreamsServicer):
    """The v1 streams service: appends, reads, subscriptions, deletes."""

    def __init__(self, db: _Database) -> None:
        self._db = db

    # -- appends

    def _proposed_v1(self, message: Any) -> _Proposed:
        data, metadata = bytes(message.data), bytes(message.custom_metadata)
        return _Proposed(
            id=_uuid_text(message.id),
            type=message.metadata.get("type", ""),
            content_type=message.metadata.get("content-type", "application/octet-stream"),
            data=data,
            metadata=metadata,
            size=len(data) + len(metadata),
        )

    async def BatchAppend(
        self,
        request_iterator: AsyncIterator[streams_pb2.BatchAppendReq],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[streams_pb2.BatchAppendResp]:
        pending: dict[str, tuple[Any, list[_Proposed]]] = {}
        async for request in request_iterator:
            correlation = _uuid_text(request.correlation_id)
            if correlation not in pending:
                pending[correlation] = (request.options, [])
            options, events = pending[correlation]
            events.extend(self._proposed_v1(message) for message in request.proposed_messages)
            if request.is_final:
                del pending[correlation]
                yield self._batch_append(request.correlation_id, options, events)

    def _batch_append(
        self, correlation_id: Any, options: Any, events: list[_Proposed]
    ) -> streams_pb2.BatchAppendResp:
        stream = options.stream_identifier.stream_name.decode()
        expected = _v1_expected(options)
        response = streams_pb2.BatchAppendResp(
            correlation_id=correlation_id, stream_identifier=options.stream_identifier
        )
        if expected >= 0:
            response.stream_position = expected
        elif expected == _NO_STREAM:
            response.no_stream.CopyFrom(empty_pb2.Empty())
        elif expected == _EXISTS:
            response.stream_exists.CopyFrom(empty_pb2.Empty())
        else:
            response.any.CopyFrom(empty_pb2.Empty())
        size = sum(event.size for event in events)
        try:
            if size > self._db.max_append_size:
                detail: Any = shared_pb2.MaximumAppendSizeExceeded(
                    maxAppendSize=self._db.max_append_size
                )
                response.error.CopyFrom(
                    self._status(grpc.StatusCode.INVALID_ARGUMENT, "too big", detail)
                )
                return response
            [written] = self._db.write([(stream, expected, events)])
        except _WrongExpectedVersion as error:
            detail = _wrong_expected_version_v1(error)
            response.error.CopyFrom(
                self._status(grpc.StatusCode.FAILED_PRECONDITION, "WrongExpectedVersion", detail)
            )
            return response
        except _StreamDeleted:
            detail = shared_pb2.StreamDeleted(stream_identifier=options.stream_identifier)
            response.error.CopyFrom(
                self._status(grpc.StatusCode.FAILED_PRECONDITION, "StreamDeleted", detail)
            )
            return response
        success = response.success
        if written.revision < 0:
            success.no_stream.CopyFrom(empty_pb2.Empty())
        else:
            success.current_revision = written.revision
        if written.position is None:
            success.no_position.CopyFrom(empty_pb2.Empty())
        else:
            success.position.commit_position = written.position
            success.position.prepare_position = written.position
        return response

    @staticmethod
    def _status(code: grpc.StatusCode, message: str, detail: Any) -> status_pb2.Status:
        packed = any_pb2.Any()
        packed.Pack(detail)
        return status_pb2.Status(code=code.value[0], message=message, details=packed)

    async def Append(
        self,
        request_iterator: AsyncIterator[streams_pb2.AppendReq],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> streams_pb2.AppendResp:
        options: Any = None
        events: list[_Proposed] = []
        async for request in request_iterator:
            if request.WhichOneof("content") == "options":
                options = request.options
            else:
                events.append(self._proposed_v1(request.proposed_message))
        if options is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "append without options")
        stream = options.stream_identifier.stream_name.decode()
        expected = _v1_expected(options)
        response = streams_pb2.AppendResp()
        try:
            if sum(event.size for event in events) > self._db.max_append_size:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"Maximum Append Size of {self._db.max_append_size} Exceeded.",
                )
            [written] = self._db.write([(stream, expected, events)])
        except _WrongExpectedVersion as error:
            wrong = response.wrong_expected_version
            if error.actual < 0:
                wrong.current_no_stream.CopyFrom(shared_pb2.Empty())
            else:
                wrong.current_revision = error.actual
            if expected >= 0:
                wrong.expected_revision = expected
            elif expected == _NO_STREAM:
                wrong.expected_no_stream.CopyFrom(shared_pb2.Empty())
            elif expected == _EXISTS:
                wrong.expected_stream_exists.CopyFrom(shared_pb2.Empty())
            else:
                wrong.expected_any.CopyFrom(shared_pb2.Empty())
            return response
        except _StreamDeleted:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"Event stream '{stream}' is deleted."
            )
        if written.revision < 0:
            response.success.no_stream.CopyFrom(shared_pb2.Empty())
        else:
            response.success.current_revision = written.revision
        if written.position is None:
            response.success.no_position.CopyFrom(shared_pb2.Empty())
        else:
            response.success.position.commit_position = written.position
            response.success.position.prepare_position = written.position
        return response

    # -- deletes

    async def Delete(
        self, request: streams_pb2.DeleteReq, context: grpc.aio.ServicerContext[Any, Any]
    ) -> streams_pb2.DeleteResp:
        position = await self._delete(request.options, context, tombstone=False)
        return streams_pb2.DeleteResp(
            position=streams_pb2.DeleteResp.Position(
                commit_position=position, prepare_position=position
            )
        )

    async def Tombstone(
        self, request: streams_pb2.TombstoneReq, context: grpc.aio.ServicerContext[Any, Any]
    ) -> streams_pb2.TombstoneResp:
        position = await self._delete(request.options, context, tombstone=True)
        return streams_pb2.TombstoneResp(
            position=streams_pb2.TombstoneResp.Position(
                commit_position=position, prepare_position=position
            )
        )

    async def _delete(
        self, options: Any, context: grpc.aio.ServicerContext[Any, Any], *, tombstone: bool
    ) -> int:
        stream = options.stream_identifier.stream_name.decode()
        expected = _v1_expected(options)
        try:
            return self._db.delete(stream, expected, tombstone=tombstone)
        except _WrongExpectedVersion as error:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"WrongExpectedVersion. Stream: {stream}, Expected version: "
                f"{error.expected}, Actual version: {error.actual}",
            )
        except _StreamDeleted:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"Event stream '{stream}' is deleted."
            )
        raise AssertionError("unreachable")  # pragma: no cover

    # -- reads

    async def Read(
        self, request: streams_pb2.ReadReq, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[streams_pb2.ReadResp]:
        options = request.options
        structured = options.uuid_option.WhichOneof("content") == "structured"
        subscribe = options.WhichOneof("count_option") == "subscription"
        backwards = options.read_direction == streams_pb2.ReadReq.Options.Backwards
        filtered = options.WhichOneof("filter_option") == "filter"
        if options.WhichOneof("stream_option") == "stream":
            reader = (
                self._subscribe_stream(options.stream, structured)
                if subscribe
                else self._read_stream(options.stream, backwards, options.count, structured)
            )
        else:
            accept, checkpoint_every = self._filter(options)
            if subscribe:
                reader = self._subscribe_all(options.all, accept, checkpoint_every, structured)
            else:
                reader = self._read_all(options.all, backwards, options.count, accept, structured)
        try:
            async for response in reader:
                yield response
        except _StreamDeleted as error:
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"Event stream '{error.stream}' is deleted."
            )
        except _InvalidPosition:
            kind = "FilteredReadAllResult" if filtered else "ReadAllResult"
            await context.abort(grpc.StatusCode.UNKNOWN, f"Unexpected {kind}: InvalidPosition")

    def _event(self, record: _Record, structured: bool) -> streams_pb2.ReadResp:
        recorded = streams_pb2.ReadResp.ReadEvent.RecordedEvent(
            id=_uuid_message(record.id, structured=structured),
            stream_identifier=shared_pb2.StreamIdentifier(stream_name=record.stream.encode()),
            stream_revision=record.revision,
            prepare_position=record.position,
            commit_position=record.position,
            metadata={
                "type": record.type,
                "content-type": record.content_type,
                "created": str(record.created),
            },
            custom_metadata=record.metadata,
            data=record.data,
        )
        return streams_pb2.ReadResp(
            event=streams_pb2.ReadResp.ReadEvent(event=recorded, commit_position=record.position)
        )

    async def _read_stream(
        self, options: Any, backwards: bool, count: int, structured: bool
    ) -> AsyncIterator[streams_pb2.ReadResp]:
        name = options.stream_identifier.stream_name.decode()
        stream = self._db.streams.get(name)
        if stream is not None and stream.tombstoned:
            raise _StreamDeleted(name)
        if stream is None or not stream.visible:
            yield streams_pb2.ReadResp(
                stream_not_found=streams_pb2.ReadResp.StreamNotFound(
                    stream_identifier=options.stream_identifier
                )
            )
            return
        which = options.WhichOneof("revision_option")
        records = stream.records
        if backwards:
            start = (
                stream.last_revision if which == "end" else min(options.revision, len(records) - 1)
            )
            indexes: Iterator[int] = iter(range(start, stream.truncate_before - 1, -1))
        else:
            start = 0 if which == "start" else options.revision
            start = max(start, stream.truncate_before)
            indexes = iter(range(start, len(records)))
        for sent, index in enumerate(indexes):
            if sent >= count:
                break
            yield self._event(records[index], structured)

    def _start_index(self, options: Any, *, backwards: bool, exclusive: bool) -> int:
        which = options.WhichOneof("all_option")
        if which == "start":
            return 0
        if which == "end":
            return len(self._db.log)
        position = options.position.commit_position
        if not self._db.is_valid_position(position):
            raise _InvalidPosition
        if backwards or not exclusive:
            return bisect.bisect_left(self._db.log_positions, position)
        return bisect.bisect_right(self._db.log_positions, position)

    async def _read_all(
        self,
        options: Any,
        backwards: bool,
        count: int,
        accept: Callable[[_Record], bool],
        structured: bool,
    ) -> AsyncIterator[streams_pb2.ReadResp]:
        index = self._start_index(options, backwards=backwards, exclusive=False)
        log = self._db.log
        indexes = range(index - 1, -1, -1) if backwards else range(index, len(log))
        count = count or sys.maxsize  # as on the server, 0 reads all of $all
        sent = 0
        for i in indexes:
            if sent >= count:
                return
            if accept(log[i]):
                sent += 1
                yield self._event(log[i], structured)

    async def _subscribe_all(
        self,
        options: Any,
        accept: Callable[[_Record], bool],
        checkpoint_every: int,
        structured: bool,
    ) -> AsyncIterator[streams_pb2.ReadResp]:
        yield streams_pb2.ReadResp(
            confirmation=streams_pb2.ReadResp.SubscriptionConfirmation(
                subscription_id=str(uuid.uuid4())
            )
        )
        cursor = self._start_index(options, backwards=False, exclusive=True)
        considered = 0
        caught_up = False
        log = self._db.log
        while True:
            while cursor < len(log):
                record = log[cursor]
                cursor += 1
                considered += 1
                if accept(record):
                    yield self._event(record, structured)
                elif checkpoint_every and considered % checkpoint_every == 0:
                    yield streams_pb2.ReadResp(
                        checkpoint=streams_pb2.ReadResp.Checkpoint(
                            commit_position=record.position,
                            prepare_position=record.position,
                            timestamp=_timestamp_now(),
                        )
                    )
            if not caught_up:
                caught_up = True
                yield streams_pb2.ReadResp(
                    caught_up=streams_pb2.ReadResp.CaughtUp(
                        timestamp=_timestamp_now(),
                        position=streams_pb2.ReadResp.Position(
                            commit_position=self._db.next_position,
                            prepare_position=self._db.next_position,
                        ),
                    )
                )
            changed = self._db.changed()
            if cursor >= len(log):
                await changed.wait()

    async def _subscribe_stream(
        self, options: Any, structured: bool
    ) -> AsyncIterator[streams_pb2.ReadResp]:
        yield streams_pb2.ReadResp(
            confirmation=streams_pb2.ReadResp.SubscriptionConfirmation(
                subscription_id=str(uuid.uuid4())
            )
        )
        name = options.stream_identifier.stream_name.decode()
        which = options.WhichOneof("revision_option")
        stream = self._db.streams.get(name)
        if which == "end":
            cursor = len(stream.records) if stream else 0
        elif which == "revision":
            cursor = options.revision + 1
        else:
            cursor = 0
        caught_up = False
        while True:
            stream = self._db.streams.get(name)
            if stream is not None and stream.tombstoned:
                raise _StreamDeleted(name)
            records = stream.records if stream is not None else []
            while cursor < len(records):
                if cursor >= (stream.truncate_before if stream else 0):
                    yield self._event(records[cursor], structured)
                cursor += 1
            if not caught_up:
                caught_up = True
                yield streams_pb2.ReadResp(
                    caught_up=streams_pb2.ReadResp.CaughtUp(
                        timestamp=_timestamp_now(), stream_revision=max(cursor - 1, 0)
                    )
                )
            changed = self._db.changed()
            current = self._db.streams.get(name)
            if current is None or cursor >= len(current.records):
                await changed.wait()

    @staticmethod
    def _filter(options: Any) -> tuple[Callable[[_Record], bool], int]:
        """Return a predicate for ``$all`` records and the checkpoint interval (0: none)."""
        if options.WhichOneof("filter_option") != "filter":
            return (lambda record: True), 0
        filter_options = options.filter
        on_stream = filter_options.WhichOneof("filter") == "stream_identifier"
        expression = filter_options.stream_identifier if on_stream else filter_options.event_type
        regex = re.compile(expression.regex) if expression.regex else None
        prefixes = tuple(expression.prefix)

        def accept(record: _Record) -> bool:
            target = record.stream if on_stream else record.type
            if regex is not None:
                return regex.search(target) is not None
            return target.startswith(prefixes)

        window = filter_options.max if filter_options.WhichOneof("window") == "max" else 1
        every = max(window, 1) * max(filter_options.checkpointIntervalMultiplier, 1)
        return accept, every


class _StreamsV2(v2_pb2_grpc.StreamsServiceServicer):
    """The v2 streams service: atomic multi-stream appends."""

    def __init__(self, db: _Database) -> None:
        self._db = db

    async def AppendSession(
        self,
        request_iterator: AsyncIterator[v2_pb2.AppendRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> v2_pb2.AppendSessionResponse:
        seen: set[str] = set()
        requests: list[tuple[str, int, list[_Proposed]]] = []
        total = 0
        async for request in request_iterator:
            folded = request.stream.casefold()
            if folded in seen:
                await _abort_rich(
                    context,
                    grpc.StatusCode.ABORTED,
                    f"Stream '{request.stream}' already has a different group of messages in "
                    "this session. Appends for the same stream must currently be grouped "
                    "together and not interleaved with appends for other streams.",
                    v2_errors_pb2.StreamAlreadyInAppendSessionErrorDetails(stream=request.stream),
                )
            seen.add(folded)
            events: list[_Proposed] = []
            for record in request.records:
                proposed = await self._proposed(request.stream, record, context)
                size = proposed.size
                if size > self._db.max_append_size:
                    await _abort_rich(
                        context,
                        grpc.StatusCode.INVALID_ARGUMENT,
                        f"Record {proposed.id} in stream '{request.stream}' is {size} bytes, "
                        f"larger than the maximum of {self._db.max_append_size} bytes.",
                        v2_errors_pb2.AppendRecordSizeExceededErrorDetails(
                            stream=request.stream,
                            record_id=proposed.id,
                            size=size,
                            max_size=self._db.max_append_size,
                        ),
                    )
                total += size
                if total > self._db.max_append_size:
                    await _abort_rich(
                        context,
                        grpc.StatusCode.ABORTED,
                        f"The append transaction is {total} bytes, larger than the maximum "
                        f"of {self._db.max_append_size} bytes.",
                        v2_errors_pb2.AppendTransactionSizeExceededErrorDetails(
                            size=total, max_size=self._db.max_append_size
                        ),
                    )
                events.append(proposed)
            expected = request.expected_revision if request.HasField("expected_revision") else _ANY
            requests.append((request.stream, expected, events))
        if not requests:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "An append session needs at least one request."
            )
        try:
            written = self._db.write(requests)
        except _WrongExpectedVersion as error:
            await _abort_rich(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Append failed due to a revision conflict on stream '{error.stream}'. "
                f"Expected revision: {error.expected}. Actual revision: {error.actual}.",
                v2_errors_pb2.StreamRevisionConflictErrorDetails(
                    stream=error.stream,
                    expected_revision=error.expected,
                    actual_revision=error.actual,
                ),
            )
        except _StreamDeleted as error:
            await _abort_rich(
                context,
                grpc.StatusCode.FAILED_PRECONDITION,
                f"Stream '{error.stream}' has been tombstoned.",
                v2_errors_pb2.StreamTombstonedErrorDetails(stream=error.stream),
            )
        positions = [result.position for result in written if result.position is not None]
        return v2_pb2.AppendSessionResponse(
            output=[
                v2_pb2.AppendResponse(
                    stream=result.stream,
                    stream_revision=result.revision,
                    position=result.position,
                )
                for result in written
            ],
            position=max(positions, default=0),
        )

    async def _proposed(
        self, stream: str, record: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> _Proposed:
        name = record.schema.name
        if not _EVENT_TYPE.match(name):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Invalid schema name {name!r} in stream '{stream}': it must match "
                "^[a-zA-Z0-9_.$:-]+$",
            )
        try:
            record_id = str(uuid.UUID(record.record_id)) if record.record_id else str(uuid.uuid4())
        except ValueError:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"Invalid record id {record.record_id!r}"
            )
        data = bytes(record.data)
        properties = {key: _property_text(value) for key, value in record.properties.items()}
        user_metadata = (
            json.dumps(properties, separators=(",", ":"), ensure_ascii=False) if properties else ""
        )
        # The server stores the properties and synthesises this JSON on read.
        read_back = dict(properties)
        read_back["$schema.name"] = name
        schema_format = v2_pb2.SchemaFormat.Name(record.schema.format)
        read_back["$schema.format"] = schema_format.removeprefix("SCHEMA_FORMAT_").title()
        is_json = record.schema.format == v2_pb2.SCHEMA_FORMAT_JSON
        return _Proposed(
            id=record_id,
            type=name,
            content_type="application/json" if is_json else "application/octet-stream",
            data=data,
            metadata=json.dumps(read_back, separators=(",", ":"), ensure_ascii=False).encode(),
            size=len(data) + len(user_metadata.encode()),
        )


class _Gossip(gossip_pb2_grpc.GossipServicer):
    """Cluster discovery: one node, the leader."""

    def __init__(self, host: str, port: Callable[[], int]) -> None:
        self._host = host
        self._port = port
        self._instance = str(uuid.uuid4())

    async def Read(
        self, request: shared_pb2.Empty, context: grpc.aio.ServicerContext[Any, Any]
    ) -> gossip_pb2.ClusterInfo:
        return gossip_pb2.ClusterInfo(
            members=[
                gossip_pb2.MemberInfo(
                    instance_id=shared_pb2.UUID(string=self._instance),
                    time_stamp=time.time_ns() // 100,
                    state=gossip_pb2.MemberInfo.VNodeState.Leader,
                    is_alive=True,
                    http_end_point=gossip_pb2.EndPoint(address=self._host, port=self._port()),
                )
            ]
        )


# ------------------------------------------------------------------- public


class KurrentDBDouble:
    """A KurrentDB test double served by ``grpc.aio`` in the running event loop.

    Use it as an async context manager, or call :meth:`start` and :meth:`stop`.
    The server answers only while its event loop runs: to let other OS
    processes (or code that blocks the loop) reach it, use :meth:`in_thread`
    or run ``python -m agentjournal.testing.kurrentdb_double``.

    Args:
        host: Interface to listen on.
        port: TCP port; 0 picks a free one (see :attr:`port` once started).
        max_append_size: Largest append, in data plus metadata bytes.
        idempotency_cache_size: How many recent event ids the server remembers
            to recognise retries with ``ANY``/``EXISTS``.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_append_size: int = DEFAULT_MAX_APPEND_SIZE,
        idempotency_cache_size: int = 10_000,
    ) -> None:
        self._host = host
        self._requested_port = port
        self._port = 0
        self._db = _Database(
            max_append_size=max_append_size, idempotency_cache_size=idempotency_cache_size
        )
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

    async def start(self) -> None:
        """Start serving; the port is known when this returns."""
        if self._server is not None:
            raise RuntimeError("the KurrentDB double is already running")
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ]
        )
        gossip = _Gossip(self._host, lambda: self._port)
        # The generated registration functions are untyped.
        streams_pb2_grpc.add_StreamsServicer_to_server(_Streams(self._db), server)  # type: ignore[no-untyped-call]
        v2_pb2_grpc.add_StreamsServiceServicer_to_server(_StreamsV2(self._db), server)  # type: ignore[no-untyped-call]
        gossip_pb2_grpc.add_GossipServicer_to_server(gossip, server)  # type: ignore[no-untyped-call]
        self._port = server.add_insecure_port(f"{self._host}:{self._requested_port}")
        if self._port == 0:
            raise OSError(f"cannot listen on {self._host}:{self._requested_port}")
        await server.start()
        self._server = server

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving; open calls are cancelled after ``grace`` seconds."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)

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
    def in_thread(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_append_size: int = DEFAULT_MAX_APPEND_SIZE,
        idempotency_cache_size: int = 10_000,
    ) -> ThreadedKurrentDBDouble:
        """Return a double that serves from its own thread and event loop.

        Use it as a (sync) context manager. It keeps answering while the
        caller's thread blocks, so other OS processes and other event loops
        can use it.
        """
        return ThreadedKurrentDBDouble(
            cls(
                host=host,
                port=port,
                max_append_size=max_append_size,
                idempotency_cache_size=idempotency_cache_size,
            )
        )


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
async def kurrentdb_store_on_double(
    *, max_append_size: int = DEFAULT_MAX_APPEND_SIZE
) -> AsyncIterator[KurrentDBEventStore]:
    """Yield an open :class:`~agentjournal.store.kurrentdb.KurrentDBEventStore` on a fresh double.

    The double serves from its own thread (see :meth:`KurrentDBDouble.in_thread`),
    so its work does not share the caller's event loop; benchmarks measure
    client, gRPC and double together. Both are closed on exit.
    """
    from agentjournal.store.kurrentdb import KurrentDBEventStore

    with KurrentDBDouble.in_thread(max_append_size=max_append_size) as double:
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
    parser.add_argument("--max-append-size", type=int, default=DEFAULT_MAX_APPEND_SIZE)
    args = parser.parse_args(argv)

    async def serve() -> None:
        double = KurrentDBDouble(
            host=args.host, port=args.port, max_append_size=args.max_append_size
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


if __name__ == "__main__":
    sys.exit(main())
