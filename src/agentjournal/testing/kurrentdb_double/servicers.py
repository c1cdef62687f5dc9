"""The double's gRPC services: v1 streams and gossip, and what the v2 streams service shares.

They implement the servicer stubs ``kurrentdbclient`` ships, decode requests
into :mod:`.state` writes and reads, and answer with :mod:`.answers`. Where the
server's order of checks matters (size before validity, validity before the
write) it is followed; the source files are named at each method.
"""

from __future__ import annotations

import asyncio
import bisect
import re
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, NoReturn

import grpc
import grpc.aio
from google.protobuf import (  # type: ignore[import-untyped, unused-ignore]
    empty_pb2,
    json_format,
    timestamp_pb2,
)
from kurrentdbclient.protos.v1 import (
    gossip_pb2,
    gossip_pb2_grpc,
    shared_pb2,
    streams_pb2,
    streams_pb2_grpc,
)

from agentjournal.testing.kurrentdb_double.answers import (
    MAX_V1_MESSAGE_BYTES,
    Rpc,
    batch_status,
)
from agentjournal.testing.kurrentdb_double.faults import Faults
from agentjournal.testing.kurrentdb_double.state import (
    ANY,
    EXISTS,
    NO_STREAM,
    Database,
    InvalidPosition,
    Proposed,
    Record,
    StreamDeleted,
    WrongExpectedVersion,
)

SCHEMA_NAME = {
    "26.0": re.compile(r"[a-zA-Z0-9_.$:-]+"),  # SchemaNameValidator, 26.0.2
    "26.1": re.compile(r"[\w.$:-]+"),  # 26.1: ^[\p{L}\p{N}_.$:-]+$ (letters of any script)
}
EFFECTIVE_MAX_RECORD = 16 * 1024 * 1024 - 10_000  # Event's SizeOnDisk limit (TFConsts)
_STALL_LIMIT = 60.0  # seconds a stalled answer waits for its caller to give up


class Limits:
    """The size limits the double enforces, as the server's options name them.

    Args:
        max_append_size: ``MaxAppendSize``: the sum of the record sizes of one append.
        max_append_event_size: ``MaxAppendEventSize``: one record.
    """

    def __init__(self, *, max_append_size: int, max_append_event_size: int) -> None:
        self.max_append_size = max_append_size
        self.max_append_event_size = max_append_event_size


def size_on_disk(event_type: str, data: bytes, metadata: bytes) -> int:
    """``Event.SizeOnDisk``: data, metadata, and the type counted as UTF-16 (two bytes a char)."""
    return len(data) + len(metadata) + 2 * len(event_type)


async def hold(context: grpc.aio.ServicerContext[Any, Any]) -> NoReturn:
    """Never answer: wait until the caller gives up (the call is then cancelled)."""
    del context
    await asyncio.sleep(_STALL_LIMIT)
    raise asyncio.CancelledError


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
        else "expected_stream_revision"
    )
    which = options.WhichOneof(group)
    if which in ("stream_position", "revision"):
        return int(getattr(options, which))
    return {"no_stream": NO_STREAM, "any": ANY, "stream_exists": EXISTS}.get(which or "any", ANY)


def _timestamp_now() -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.GetCurrentTime()
    return stamp


def property_text(value: Any) -> Any:
    if value.WhichOneof("kind") == "string_value":
        return value.string_value
    return json_format.MessageToDict(value)


class Streams(streams_pb2_grpc.StreamsServicer):
    """The v1 streams service: appends, reads, subscriptions, deletes.

    Source: ``src/KurrentDB.Core/Services/Transport/Grpc/Streams.*.cs`` and the
    read enumerators in ``.../Transport/Enumerators/``.
    """

    def __init__(self, db: Database, limits: Limits, faults: Faults) -> None:
        self._db = db
        self._limits = limits
        self._faults = faults

    # -- appends (Streams.BatchAppend.cs, Streams.Append.cs)

    @staticmethod
    def _proposed_v1(message: Any) -> Proposed:
        return Proposed(
            id=_uuid_text(message.id),
            type=message.metadata.get("type", ""),
            content_type=message.metadata.get("content-type", "application/octet-stream"),
            data=bytes(message.data),
            metadata=bytes(message.custom_metadata),
        )

    async def BatchAppend(
        self,
        request_iterator: AsyncIterator[streams_pb2.BatchAppendReq],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[streams_pb2.BatchAppendResp]:
        pending: dict[str, tuple[Any, list[Any]]] = {}
        async for request in request_iterator:
            if request.ByteSize() > MAX_V1_MESSAGE_BYTES:
                await Rpc.message_too_large().abort(context)
            correlation = _uuid_text(request.correlation_id)
            if correlation not in pending:
                pending[correlation] = (request.options, [])
            options, messages = pending[correlation]
            messages.extend(request.proposed_messages)
            if request.is_final:
                del pending[correlation]
                yield await self._batch_append(request.correlation_id, options, messages, context)

    async def _batch_append(
        self,
        correlation_id: Any,
        options: Any,
        messages: list[Any],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> streams_pb2.BatchAppendResp:
        fault = self._faults.take("BatchAppend")
        stream = options.stream_identifier.stream_name.decode()
        expected = _v1_expected(options)
        response = streams_pb2.BatchAppendResp(
            correlation_id=correlation_id, stream_identifier=options.stream_identifier
        )
        if expected >= 0:
            response.stream_position = expected
        elif expected == NO_STREAM:
            response.no_stream.CopyFrom(empty_pb2.Empty())
        elif expected == EXISTS:
            response.stream_exists.CopyFrom(empty_pb2.Empty())
        else:
            response.any.CopyFrom(empty_pb2.Empty())
        events: list[Proposed] = []
        total = 0
        for message in messages:
            event = self._proposed_v1(message)
            size = size_on_disk(event.type, event.data, event.metadata)
            if size > EFFECTIVE_MAX_RECORD:  # new Event(...) throws; caught as a bad request
                response.error.CopyFrom(
                    batch_status.bad_request("Record is too big. (Parameter 'data')")
                )
                return response
            if size > self._limits.max_append_event_size:
                response.error.CopyFrom(
                    batch_status.maximum_append_event_size_exceeded(
                        event.id, size, self._limits.max_append_event_size
                    )
                )
                return response
            total += size
            if total > self._limits.max_append_size:
                response.error.CopyFrom(
                    batch_status.maximum_append_size_exceeded(self._limits.max_append_size)
                )
                return response
            events.append(event)
        if fault == "not_ready":
            response.error.CopyFrom(batch_status.not_handled("NotReady"))
            return response
        if fault == "no_leader":
            response.error.CopyFrom(batch_status.not_handled("NotLeader"))
            return response
        if fault == "access_denied":
            response.error.CopyFrom(batch_status.access_denied())
            return response
        if fault == "stall":
            await hold(context)
        try:
            [written] = self._db.write([(stream, expected, events)])
        except WrongExpectedVersion as error:
            current = error.failures[0].current if error.failures else -1
            response.error.CopyFrom(batch_status.wrong_expected_version(current, expected))
            return response
        except StreamDeleted:
            response.error.CopyFrom(batch_status.stream_deleted(stream))
            return response
        if fault == "stall_after_commit":
            await hold(context)
        if fault == "timeout_after_commit":
            response.error.CopyFrom(batch_status.timeout())
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

    async def Append(
        self,
        request_iterator: AsyncIterator[streams_pb2.AppendReq],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> streams_pb2.AppendResp:
        options: Any = None
        events: list[Proposed] = []
        async for request in request_iterator:
            if request.WhichOneof("content") == "options":
                options = request.options
            else:
                events.append(self._proposed_v1(request.proposed_message))
        if options is None:
            await context.abort(grpc.StatusCode.UNKNOWN, "Exception was thrown by handler.")
        stream = options.stream_identifier.stream_name.decode()
        expected = _v1_expected(options)
        size = sum(size_on_disk(e.type, e.data, e.metadata) for e in events)
        if size > self._limits.max_append_size:
            await Rpc.max_append_size_exceeded(self._limits.max_append_size).abort(context)
        response = streams_pb2.AppendResp()
        try:
            [written] = self._db.write([(stream, expected, events)])
        except WrongExpectedVersion as error:
            current = error.failures[0].current if error.failures else -1
            wrong = response.wrong_expected_version
            if current < 0:
                wrong.current_no_stream.CopyFrom(shared_pb2.Empty())
            else:
                wrong.current_revision = current
            if expected >= 0:
                wrong.expected_revision = expected
            elif expected == NO_STREAM:
                wrong.expected_no_stream.CopyFrom(shared_pb2.Empty())
            elif expected == EXISTS:
                wrong.expected_stream_exists.CopyFrom(shared_pb2.Empty())
            else:
                wrong.expected_any.CopyFrom(shared_pb2.Empty())
            return response
        except StreamDeleted:
            await Rpc.stream_deleted(stream).abort(context)
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

    # -- deletes (Streams.Delete.cs)

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
        except WrongExpectedVersion as error:
            # DeleteInternal names the operation "Delete" for a tombstone too.
            await Rpc.wrong_expected_version(
                "Delete", stream, expected, error.failures[0].current
            ).abort(context)
        except StreamDeleted:
            await Rpc.stream_deleted(stream).abort(context)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- reads (Streams.Read.cs, Enumerators/*)

    async def Read(
        self, request: streams_pb2.ReadReq, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[streams_pb2.ReadResp]:
        fault = self._faults.take("Read")
        options = request.options
        structured = options.uuid_option.WhichOneof("content") == "structured"
        subscribe = options.WhichOneof("count_option") == "subscription"
        if fault == "not_ready" or (fault == "not_ready_after_confirmation" and not subscribe):
            await Rpc.server_not_ready().abort(context)
        if fault == "no_leader":
            await Rpc.no_leader_info().abort(context)
        if fault == "access_denied":
            await Rpc.access_denied().abort(context)
        if fault == "stall":
            await hold(context)
        if fault == "not_ready_after_confirmation":
            # The enumerator confirms, then its catch-up read is refused (NotHandled).
            yield streams_pb2.ReadResp(
                confirmation=streams_pb2.ReadResp.SubscriptionConfirmation(
                    subscription_id=str(uuid.uuid4())
                )
            )
            await Rpc.server_not_ready().abort(context)
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
        except StreamDeleted as error:
            await Rpc.stream_deleted(error.stream).abort(context)
        except InvalidPosition:
            if subscribe:  # Enumerator.AllSubscription*: after the confirmation
                await Rpc.invalid_position().abort(context)
            kind = "FilteredReadAllResult" if filtered else "ReadAllResult"
            await Rpc.unknown_error(kind, "InvalidPosition", "Invalid position.").abort(context)

    def _event(self, record: Record, structured: bool) -> streams_pb2.ReadResp:
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
            raise StreamDeleted(0, name)
        if stream is None or not stream.readable:
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

    def _read_start(self, options: Any, *, backwards: bool) -> int:
        """Index into the log where a read of ``$all`` starts (raises InvalidPosition)."""
        which = options.WhichOneof("all_option")
        if which == "start":
            return 0
        if which == "end":
            return len(self._db.log)
        position = options.position.commit_position
        if position >= self._db.next_position:
            return len(self._db.log)  # at or past the end of the log: nothing to read
        if not self._db.is_record_boundary(position):
            raise InvalidPosition
        return bisect.bisect_left(self._db.log_positions, position)

    async def _read_all(
        self,
        options: Any,
        backwards: bool,
        count: int,
        accept: Callable[[Record], bool],
        structured: bool,
    ) -> AsyncIterator[streams_pb2.ReadResp]:
        index = self._read_start(options, backwards=backwards)
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

    def _subscribe_start(self, options: Any) -> int:
        """Index of the first record a subscription to ``$all`` sends.

        ``Enumerator.AllSubscription.MainLoop``: a start at or after the last
        indexed position goes live at once (skipping what is not after it);
        an earlier one catches up by reading from it, which fails inside a record.
        """
        which = options.WhichOneof("all_option")
        if which == "start":
            return 0
        if which == "end":
            return len(self._db.log)
        position = options.position.commit_position
        if position >= self._db.last_position:
            return bisect.bisect_right(self._db.log_positions, position)
        if not self._db.is_record_boundary(position):
            raise InvalidPosition
        return bisect.bisect_right(self._db.log_positions, position)

    async def _subscribe_all(
        self,
        options: Any,
        accept: Callable[[Record], bool],
        checkpoint_every: int,
        structured: bool,
    ) -> AsyncIterator[streams_pb2.ReadResp]:
        yield streams_pb2.ReadResp(
            confirmation=streams_pb2.ReadResp.SubscriptionConfirmation(
                subscription_id=str(uuid.uuid4())
            )
        )
        cursor = self._subscribe_start(options)
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
                            commit_position=self._db.last_position,
                            prepare_position=self._db.last_position,
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
                raise StreamDeleted(0, name)
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
    def _filter(options: Any) -> tuple[Callable[[Record], bool], int]:
        """Return a predicate for ``$all`` records and the checkpoint interval (0: none)."""
        if options.WhichOneof("filter_option") != "filter":
            return (lambda record: True), 0
        filter_options = options.filter
        on_stream = filter_options.WhichOneof("filter") == "stream_identifier"
        expression = filter_options.stream_identifier if on_stream else filter_options.event_type
        regex = re.compile(expression.regex) if expression.regex else None
        prefixes = tuple(expression.prefix)

        def accept(record: Record) -> bool:
            target = record.stream if on_stream else record.type
            if regex is not None:
                return regex.search(target) is not None
            return target.startswith(prefixes)

        window = filter_options.max if filter_options.WhichOneof("window") == "max" else 1
        every = max(window, 1) * max(filter_options.checkpointIntervalMultiplier, 1)
        return accept, every


class Gossip(gossip_pb2_grpc.GossipServicer):
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
