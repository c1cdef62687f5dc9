"""The double, pinned to the KurrentDB server's own source (tag v26.0.2).

Three kinds of tables, each transcribed from the server, checked against the
double on the wire with raw gRPC calls (the client's stubs, no client logic):

* ``ANSWERS``: the server's exact answer (status code, message, trailing
  metadata or ``google.rpc.Status`` detail types and ``ErrorInfo`` reasons) to
  every error the store can meet, with the file it comes from;
* ``IDEMPOTENCY``: ``Core.Tests/Services/Storage/Idempotency/*`` and
  ``Integration/Idempotency/when_soft_deleted_stream_is_written_to_idempotently``
  (the decisions of ``IndexWriter.CheckCommit``), over both append APIs;
* ``POSITIONS``: ``Core.Tests/Services/Transport/Enumerators/
  Enumerator.AllSubscription.CombinationTests.cs`` (where a subscription to
  ``$all`` may start);
* ``StreamsServiceTests``: ``src/KurrentDB.Api.V2.Tests/Modules/Streams/
  StreamsServiceTests.cs`` (v2 append errors and limits).

Paths are in the public ``kurrent-io/KurrentDB`` repository. Where 26.1 answers
differently, the row says so and the double is run with ``server_version="26.1"``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
import pytest
from google.protobuf import struct_pb2  # type: ignore[import-untyped, unused-ignore]
from google.rpc import error_details_pb2  # type: ignore[import-untyped, unused-ignore]
from grpc_status import rpc_status  # type: ignore[import-untyped, unused-ignore]
from kurrentdbclient.protos.v1 import shared_pb2, streams_pb2, streams_pb2_grpc
from kurrentdbclient.protos.v2.streams import streams_pb2 as v2_pb2
from kurrentdbclient.protos.v2.streams import streams_pb2_grpc as v2_pb2_grpc

from agentjournal.testing.kurrentdb_double import KurrentDBDouble

# -- wire helpers --------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """An answer as it arrives: code, message, detail types/reasons, trailing metadata."""

    code: str
    message: str
    details: tuple[str, ...] = ()
    metadata: tuple[tuple[str, str], ...] = ()


def _seen_error(error: grpc.aio.AioRpcError) -> Seen:
    details: list[str] = []
    status = rpc_status.from_call(error)
    if status is not None:
        for detail in status.details:
            details.append(detail.TypeName())
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                details.append(f"{info.domain}/{info.reason}")
    metadata = tuple(
        (key, value)
        for key, value in (error.trailing_metadata() or ())
        if isinstance(value, str) and key not in ("grpc-status-details-bin",)
    )
    return Seen(error.code().name, error.details() or "", tuple(details), metadata)


def _seen_status(status: Any) -> Seen:
    """A v1 BatchAppendResp.error (a google.rpc.Status carried in the response)."""
    code = grpc.StatusCode.OK.name
    for candidate in grpc.StatusCode:
        if candidate.value[0] == status.code:
            code = candidate.name
    return Seen(code, status.message, (status.details.TypeName(),))


class Wire:
    """Raw calls to a double through the client's generated stubs."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.v1 = streams_pb2_grpc.StreamsStub(channel)  # type: ignore[no-untyped-call]
        self.v2 = v2_pb2_grpc.StreamsServiceStub(channel)  # type: ignore[no-untyped-call]

    async def batch_append(
        self, stream: str, expected: int | str, events: list[tuple[str, str]], *, pad: int = 0
    ) -> streams_pb2.BatchAppendResp:
        options = streams_pb2.BatchAppendReq.Options(
            stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
        )
        if isinstance(expected, int):
            options.stream_position = expected
        else:
            getattr(options, expected).SetInParent()
        options.deadline.seconds = 10
        request = streams_pb2.BatchAppendReq(
            correlation_id=shared_pb2.UUID(string=str(uuid.uuid4())),
            options=options,
            proposed_messages=[
                streams_pb2.BatchAppendReq.ProposedMessage(
                    id=shared_pb2.UUID(string=event_id),
                    metadata={"type": event_type, "content-type": "application/json"},
                    data=b"x" * pad,
                )
                for event_id, event_type in events
            ],
            is_final=True,
        )
        call = self.v1.BatchAppend(iter([request]))
        async for response in call:
            call.cancel()
            return response  # type: ignore[no-any-return]
        raise AssertionError("no BatchAppend answer")

    async def append_session(
        self, requests: list[tuple[str, int | None, list[v2_pb2.AppendRecord]]]
    ) -> v2_pb2.AppendSessionResponse:
        messages = [
            v2_pb2.AppendRequest(stream=stream, records=records, expected_revision=expected)
            for stream, expected, records in requests
        ]
        response: v2_pb2.AppendSessionResponse = await self.v2.AppendSession(iter(messages))
        return response

    async def read(self, options: streams_pb2.ReadReq.Options) -> list[streams_pb2.ReadResp]:
        return [response async for response in self.v1.Read(streams_pb2.ReadReq(options=options))]


def record(
    name: str = "Tested",
    record_id: str | None = None,
    data: bytes = b"{}",
    properties: dict[str, str] | None = None,
) -> v2_pb2.AppendRecord:
    message = v2_pb2.AppendRecord(
        record_id=str(uuid.uuid4()) if record_id is None else record_id,
        schema=v2_pb2.SchemaInfo(name=name, format=v2_pb2.SCHEMA_FORMAT_JSON),
        data=data,
    )
    for key, value in (properties or {}).items():
        message.properties[key].CopyFrom(struct_pb2.Value(string_value=value))
    return message


def stream_options(stream: str, *, backwards: bool = False) -> streams_pb2.ReadReq.Options:
    options = streams_pb2.ReadReq.Options(
        stream=streams_pb2.ReadReq.Options.StreamOptions(
            stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
        ),
        read_direction=streams_pb2.ReadReq.Options.Backwards
        if backwards
        else streams_pb2.ReadReq.Options.Forwards,
        count=100,
    )
    options.uuid_option.string.SetInParent()
    if backwards:
        options.stream.end.SetInParent()
    else:
        options.stream.start.SetInParent()
    return options


def all_options(
    position: int | None, *, subscribe: bool = False, end: bool = False
) -> streams_pb2.ReadReq.Options:
    options = streams_pb2.ReadReq.Options(read_direction=streams_pb2.ReadReq.Options.Forwards)
    options.uuid_option.string.SetInParent()
    options.filter.stream_identifier.regex = r"^(?!\$)"
    options.filter.max = 32
    options.filter.checkpointIntervalMultiplier = 1
    if end:
        options.all.end.SetInParent()
    elif position is None:
        options.all.start.SetInParent()
    else:
        options.all.position.commit_position = position
        options.all.position.prepare_position = position
    if subscribe:
        options.subscription.CopyFrom(streams_pb2.ReadReq.Options.SubscriptionOptions())
    else:
        options.count = 1000
    return options


@pytest.fixture
async def double() -> AsyncIterator[KurrentDBDouble]:
    async with KurrentDBDouble(max_append_size=5000, max_append_event_size=1000) as double:
        yield double


@pytest.fixture
async def wire(double: KurrentDBDouble) -> AsyncIterator[Wire]:
    async with grpc.aio.insecure_channel(f"{double.host}:{double.port}") as channel:
        yield Wire(channel)


@pytest.fixture
def stream() -> str:
    return f"Answer-{uuid.uuid4().hex}"


def _id() -> str:
    return str(uuid.uuid4())


# -- ANSWERS: the server's exact answers ---------------------------------------------------

V1 = "src/KurrentDB.Core/Services/Transport/Grpc/"
V2 = "src/KurrentDB.Api.V2/Modules/"
INTERNAL = (
    "An internal server error occurred. Please contact support if the problem persists.\n"
    "Append session failed to map error: Index was outside the bounds of the array."
)


@dataclass(frozen=True)
class Row:
    """One answer of the server, transcribed, and how to make the double give it."""

    name: str
    source: str
    expected: Seen
    provoke: Callable[[Wire, KurrentDBDouble, str], Awaitable[Seen]]


async def _v1_error(call: Awaitable[Any]) -> Seen:
    try:
        await call
    except grpc.aio.AioRpcError as error:
        return _seen_error(error)
    raise AssertionError("the call succeeded")


async def _read_error(wire: Wire, options: streams_pb2.ReadReq.Options) -> Seen:
    return await _v1_error(wire.read(options))


async def _tombstoned(wire: Wire, stream: str) -> None:
    await wire.batch_append(stream, "no_stream", [(_id(), "Tested")])
    await wire.v1.Tombstone(_tombstone_request(stream))


def _tombstone_request(stream: str) -> streams_pb2.TombstoneReq:
    options = streams_pb2.TombstoneReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
    )
    options.any.SetInParent()
    return streams_pb2.TombstoneReq(options=options)


async def _inside_a_record(wire: Wire, stream: str) -> int:
    await wire.batch_append(stream, "no_stream", [(_id(), "Tested"), (_id(), "Tested")])
    events = await wire.read(stream_options(stream))
    return int(events[1].event.event.commit_position) - 1


async def p_read_tombstoned(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    await _tombstoned(wire, stream)
    return await _read_error(wire, stream_options(stream))


async def p_read_all_inside_a_record(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    return await _read_error(wire, all_options(await _inside_a_record(wire, stream)))


async def p_subscribe_inside_a_record(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    position = await _inside_a_record(wire, stream)
    kinds: list[str] = []
    try:
        async for response in wire.v1.Read(
            streams_pb2.ReadReq(options=all_options(position, subscribe=True))
        ):
            kinds.append(str(response.WhichOneof("content")))
    except grpc.aio.AioRpcError as error:
        assert kinds == ["confirmation"]  # the server confirms, then fails
        return _seen_error(error)
    raise AssertionError("the subscription did not fail")


async def p_read_not_ready(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    double.faults.not_ready("Read")
    return await _read_error(wire, stream_options(stream))


async def p_read_no_leader(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    double.faults.no_leader("Read")
    return await _read_error(wire, stream_options(stream))


async def p_read_access_denied(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    double.faults.access_denied("Read")
    return await _read_error(wire, stream_options(stream))


async def p_subscription_refused_after_confirming(
    wire: Wire, double: KurrentDBDouble, stream: str
) -> Seen:
    double.faults.not_ready_after_confirmation("Read")
    kinds: list[str] = []
    try:
        async for response in wire.v1.Read(
            streams_pb2.ReadReq(options=all_options(None, subscribe=True))
        ):
            kinds.append(str(response.WhichOneof("content")))
    except grpc.aio.AioRpcError as error:
        assert kinds == ["confirmation"]
        return _seen_error(error)
    raise AssertionError("the subscription did not fail")


async def p_delete_wrong_version(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    await wire.batch_append(stream, "no_stream", [(_id(), "Tested")])
    options = streams_pb2.DeleteReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode()), revision=5
    )
    return await _v1_error(wire.v1.Delete(streams_pb2.DeleteReq(options=options)))


async def p_tombstone_tombstoned(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    await _tombstoned(wire, stream)
    return await _v1_error(wire.v1.Tombstone(_tombstone_request(stream)))


async def p_batch_wrong_version(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    await wire.batch_append(stream, "no_stream", [(_id(), "Tested")])
    return _seen_status((await wire.batch_append(stream, 5, [(_id(), "Tested")])).error)


async def p_batch_tombstoned(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    await _tombstoned(wire, stream)
    return _seen_status((await wire.batch_append(stream, "any", [(_id(), "Tested")])).error)


async def p_batch_too_large(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    events = [(_id(), "Tested") for _ in range(8)]
    return _seen_status((await wire.batch_append(stream, "any", events, pad=900)).error)


async def p_batch_not_ready(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    double.faults.not_ready("BatchAppend")
    return _seen_status((await wire.batch_append(stream, "any", [(_id(), "Tested")])).error)


async def p_batch_timeout(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    double.faults.timeout_after_commit("BatchAppend")
    return _seen_status((await wire.batch_append(stream, "any", [(_id(), "Tested")])).error)


async def p_batch_event_too_large(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    return _seen_status((await wire.batch_append(stream, "any", [(_id(), "T")], pad=1500)).error)


async def p_batch_no_leader(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    double.faults.no_leader("BatchAppend")
    return _seen_status((await wire.batch_append(stream, "any", [(_id(), "Tested")])).error)


async def p_batch_access_denied(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    double.faults.access_denied("BatchAppend")
    return _seen_status((await wire.batch_append(stream, "any", [(_id(), "Tested")])).error)


async def p_batch_message_too_large(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    big = 16 * 1024 * 1024 - 10_000
    return await _v1_error(wire.batch_append(stream, "any", [(_id(), "Tested")], pad=big))


async def _session_error(wire: Wire, requests: list[Any]) -> Seen:
    return await _v1_error(wire.append_session(requests))


async def p_v2_conflict(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    await wire.append_session([(stream, -1, [record()])])
    return await _session_error(wire, [(stream, -1, [record()])])


async def p_v2_tombstoned(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    await _tombstoned(wire, stream)
    return await _session_error(wire, [(stream, -2, [record()])])


async def p_v2_twice(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    return await _session_error(wire, [(stream, -2, [record()]), (stream.upper(), -2, [record()])])


async def p_v2_record_too_large(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    one = record(record_id="8d0bd9a4-f2b9-4c1b-9c1e-1f4a6a1b2c3d", data=b"x" * 1494)
    return await _session_error(wire, [(stream, -2, [one])])


async def p_v2_transaction_too_large(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    records = [record(data=b"x" * 994) for _ in range(6)]  # 1000 bytes each, 5000 allowed
    return await _session_error(wire, [(stream, -2, records)])


async def p_v2_no_requests(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    return await _session_error(wire, [])


async def p_v2_no_records(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    return await _session_error(wire, [(stream, -2, [])])


async def p_v2_nil_record_id(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    return await _session_error(wire, [(stream, -2, [record(record_id=str(uuid.UUID(int=0)))])])


async def p_v2_bad_schema_name(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    return await _session_error(wire, [(stream, -2, [record(name="has space")])])


async def p_v2_empty_property_key(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    return await _session_error(wire, [(stream, -2, [record(properties={"": "x"})])])


async def p_v2_partly_retried(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    first = record()
    await wire.append_session([(stream + "-a", -1, [first])])
    return await _session_error(
        wire, [(stream + "-a", -1, [first]), (stream + "-b", -1, [record()])]
    )


async def p_v2_not_ready(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    double.faults.not_ready("AppendSession")
    return await _session_error(wire, [(stream, -2, [record()])])


async def p_v2_access_denied(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    double.faults.access_denied("AppendSession")
    return await _session_error(wire, [(stream, -2, [record()])])


async def p_v2_timeout(wire: Wire, double: KurrentDBDouble, stream: str) -> Seen:
    double.faults.timeout_after_commit("AppendSession")
    return await _session_error(wire, [(stream, -2, [record()])])


def _error_info(reason: str, domain: str = "streams") -> tuple[str, str]:
    return ("google.rpc.ErrorInfo", f"{domain}/{reason}")


ANSWERS = [
    Row(
        "read a tombstoned stream",
        V1 + "RpcExceptions.cs StreamDeleted",
        Seen(
            "FAILED_PRECONDITION",
            "Event stream '{s}' is deleted.",
            metadata=(("exception", "stream-deleted"), ("stream-name", "{s}")),
        ),
        p_read_tombstoned,
    ),
    Row(
        "read $all from inside a record",
        "src/KurrentDB.Core/Services/Transport/Enumerators/Enumerator.ReadAllForwardsFiltered.cs"
        " (UnknownError), RpcExceptions.cs UnknownError; the text after >> varies",
        Seen("UNKNOWN", "Unexpected FilteredReadAllResult: InvalidPosition >> Invalid position."),
        p_read_all_inside_a_record,
    ),
    Row(
        "subscribe to $all from inside a record",
        "Enumerators/Enumerator.AllSubscriptionFiltered.cs, RpcExceptions.cs "
        "InvalidPositionException",
        Seen("INVALID_ARGUMENT", "Trying to read from an invalid position."),
        p_subscribe_inside_a_record,
    ),
    Row(
        "read while the server is not ready",
        V1 + "RpcExceptions.cs ServerNotReady",
        Seen("UNAVAILABLE", "Server Is Not Ready"),
        p_read_not_ready,
    ),
    Row(
        "read while no leader is known",
        V1 + "RpcExceptions.cs NoLeaderInfo (NotHandled NotLeader/IsReadOnly without leader "
        "info), Streams.Read.cs ConvertReadResponseException",
        Seen("UNKNOWN", "No leader info available in response"),
        p_read_no_leader,
    ),
    Row(
        "read without access",
        V1 + "RpcExceptions.cs AccessDenied",
        Seen("PERMISSION_DENIED", "Access Denied", metadata=(("exception", "access-denied"),)),
        p_read_access_denied,
    ),
    Row(
        "subscription whose catch-up read is refused",
        "Enumerators/Enumerator.AllSubscriptionFiltered.cs (MainLoop confirms, then CatchUp "
        "meets NotHandled NotReady), RpcExceptions.cs ServerNotReady",
        Seen("UNAVAILABLE", "Server Is Not Ready"),
        p_subscription_refused_after_confirming,
    ),
    Row(
        "delete at a wrong expected version",
        V1 + "Streams.Delete.cs, RpcExceptions.cs WrongExpectedVersion",
        Seen(
            "FAILED_PRECONDITION",
            "Delete failed due to WrongExpectedVersion. Stream: {s}, Expected version: 5, "
            "Actual version: 0",
            metadata=(
                ("exception", "wrong-expected-version"),
                ("stream-name", "{s}"),
                ("expected-version", "5"),
                ("actual-version", "0"),
            ),
        ),
        p_delete_wrong_version,
    ),
    Row(
        "tombstone a tombstoned stream",
        V1 + "Streams.Delete.cs, RpcExceptions.cs StreamDeleted",
        Seen(
            "FAILED_PRECONDITION",
            "Event stream '{s}' is deleted.",
            metadata=(("exception", "stream-deleted"), ("stream-name", "{s}")),
        ),
        p_tombstone_tombstoned,
    ),
    Row(
        "batch append at a wrong expected version",
        V1 + "Status.cs WrongExpectedVersion (BatchAppendResp.error)",
        Seen(
            "ALREADY_EXISTS", "WrongExpectedVersion", ("event_store.client.WrongExpectedVersion",)
        ),
        p_batch_wrong_version,
    ),
    Row(
        "batch append to a tombstoned stream",
        V1 + "Status.cs StreamDeleted",
        Seen("NOT_FOUND", "StreamDeleted", ("event_store.client.StreamDeleted",)),
        p_batch_tombstoned,
    ),
    Row(
        "batch append over MaxAppendSize",
        V1 + "Status.cs MaximumAppendSizeExceeded, Streams.BatchAppend.cs",
        Seen(
            "INVALID_ARGUMENT",
            "MaximumAppendSizeExceeded",
            ("event_store.client.MaximumAppendSizeExceeded",),
        ),
        p_batch_too_large,
    ),
    Row(
        "batch append event over MaxAppendEventSize",
        V1 + "Status.cs MaximumAppendEventSizeExceeded, Streams.BatchAppend.cs AddEvents",
        Seen(
            "INVALID_ARGUMENT",
            "MaximumAppendEventSizeExceeded",
            ("event_store.client.MaximumAppendEventSizeExceeded",),
        ),
        p_batch_event_too_large,
    ),
    Row(
        "batch append while no leader is known",
        V1 + "Streams.BatchAppend.cs ConvertMessage (NotHandled NotLeader without leader info)",
        Seen("OK", "No leader info available in response", ("google.protobuf.Empty",)),
        p_batch_no_leader,
    ),
    Row(
        "batch append without access",
        V1 + "Status.cs AccessDenied (OperationResult.AccessDenied)",
        Seen("PERMISSION_DENIED", "AccessDenied", ("event_store.client.AccessDenied",)),
        p_batch_access_denied,
    ),
    Row(
        "batch append while the server is not ready",
        V1 + "Streams.BatchAppend.cs ConvertMessage (NotHandled: no code, an empty detail)",
        Seen("OK", "Server Is Not Ready", ("google.protobuf.Empty",)),
        p_batch_not_ready,
    ),
    Row(
        "batch append whose commit times out",
        V1 + "Status.cs Timeout (CommitTimeout)",
        Seen("DEADLINE_EXCEEDED", "Timeout", ("event_store.client.Timeout",)),
        p_batch_timeout,
    ),
    Row(
        "batch append message over 16 MiB - 10,000 bytes",
        "src/KurrentDB.Core/ClusterVNodeStartup.cs (MaxReceiveMessageSize = "
        "TFConsts.EffectiveMaxLogRecordSize); grpc-dotnet's refusal",
        Seen("RESOURCE_EXHAUSTED", "Received message exceeds the maximum configured message size."),
        p_batch_message_too_large,
    ),
    Row(
        "append session at a wrong expected revision",
        V2 + "Streams/ApiErrors.cs StreamRevisionConflict",
        Seen(
            "FAILED_PRECONDITION",
            "Append failed due to a revision conflict on stream '{s}'. Expected revision: -1. "
            "Actual revision: 0.",
            (
                *_error_info("STREAM_REVISION_CONFLICT"),
                "kurrentdb.protocol.v2.streams.errors.StreamRevisionConflictErrorDetails",
            ),
        ),
        p_v2_conflict,
    ),
    Row(
        "append session to a tombstoned stream",
        V2 + "Streams/ApiErrors.cs StreamTombstoned",
        Seen(
            "FAILED_PRECONDITION",
            "Stream '{s}' has been tombstoned. It has been permanently removed from the system "
            "and cannot be restored.",
            (
                *_error_info("STREAM_TOMBSTONED"),
                "kurrentdb.protocol.v2.streams.errors.StreamTombstonedErrorDetails",
            ),
        ),
        p_v2_tombstoned,
    ),
    Row(
        "append session naming a stream twice",
        V2 + "Streams/ApiErrors.cs StreamAlreadyInAppendSession",
        Seen(
            "ABORTED",
            "Stream '{S}' already has a different group of messages in this session. Appends "
            "for the same stream must currently be grouped together and not interleaved with "
            "appends for other streams.",
            (
                *_error_info("STREAM_ALREADY_IN_APPEND_SESSION"),
                "kurrentdb.protocol.v2.streams.errors.StreamAlreadyInAppendSessionErrorDetails",
            ),
        ),
        p_v2_twice,
    ),
    Row(
        "append session record over MaxAppendEventSize",
        V2 + "Streams/ApiErrors.cs AppendRecordSizeExceeded",
        Seen(
            "INVALID_ARGUMENT",
            "The size of record 8d0bd9a4-f2b9-4c1b-9c1e-1f4a6a1b2c3d (1.465 KB) exceeds the "
            "maximum allowed size of 1000.000 B bytes by 500.000 B",
            (
                *_error_info("APPEND_RECORD_SIZE_EXCEEDED"),
                "kurrentdb.protocol.v2.streams.errors.AppendRecordSizeExceededErrorDetails",
            ),
        ),
        p_v2_record_too_large,
    ),
    Row(
        "append session over MaxAppendSize",
        V2 + "Streams/ApiErrors.cs AppendTransactionSizeExceeded",
        Seen(
            "ABORTED",
            "Transaction size (5.859 KB) exceeded the maximum allowed size of 4.883 KB by "
            "1000.000 B, after 6 record(s).",
            (
                *_error_info("APPEND_TRANSACTION_SIZE_EXCEEDED"),
                "kurrentdb.protocol.v2.streams.errors.AppendTransactionSizeExceededErrorDetails",
            ),
        ),
        p_v2_transaction_too_large,
    ),
    Row(
        "append session without requests",
        V2 + "Streams/ApiErrors.cs AppendTransactionNoRequests",
        Seen(
            "FAILED_PRECONDITION",
            "Append session started, but no append requests were sent before ending the session.",
            _error_info("APPEND_SESSION_NO_REQUESTS"),
        ),
        p_v2_no_requests,
    ),
    Row(
        "append request without records",
        V2 + "ApiErrors.cs InvalidRequest, Streams/Validators/AppendRequestValidator.cs",
        Seen(
            "INVALID_ARGUMENT",
            "The 'AppendRequest' is invalid: Stream append request must contain at least one "
            "record",
            (*_error_info("BAD_REQUEST", "server"), "google.rpc.BadRequest"),
        ),
        p_v2_no_records,
    ),
    Row(
        "append record with the nil UUID",
        V2 + "Streams/Validators/RecordIdValidator.cs",
        Seen(
            "INVALID_ARGUMENT",
            "The 'AppendRequest' is invalid: Record ID must be a valid and non-empty UUID.",
            (*_error_info("BAD_REQUEST", "server"), "google.rpc.BadRequest"),
        ),
        p_v2_nil_record_id,
    ),
    Row(
        "append record with a bad schema name",
        V2 + "Streams/Validators/SchemaNameValidator.cs",
        Seen(
            "INVALID_ARGUMENT",
            "The 'AppendRequest' is invalid: Schema name can only contain alphanumeric "
            "characters, underscores, dashes, periods, colons, and dollar signs. Attempted "
            "Value: has space",
            (*_error_info("BAD_REQUEST", "server"), "google.rpc.BadRequest"),
        ),
        p_v2_bad_schema_name,
    ),
    Row(
        "append record with an empty property key",
        V2 + "Streams/Validators/AppendRecordValidator.cs",
        Seen(
            "INVALID_ARGUMENT",
            "The 'AppendRequest' is invalid: Property keys must not be empty.",
            (*_error_info("BAD_REQUEST", "server"), "google.rpc.BadRequest"),
        ),
        p_v2_empty_property_key,
    ),
    Row(
        "append session partly retried (26.0)",
        "src/KurrentDB.Core/Services/Storage/StorageWriterService.cs VerifyCommitChecks (no "
        "failure to name), StreamsService.cs MapToError, Infrastructure/ApiCallback.cs",
        Seen(
            "INTERNAL",
            INTERNAL,
            (*_error_info("SERVER_MALFUNCTION", "server"), "google.rpc.DebugInfo"),
        ),
        p_v2_partly_retried,
    ),
    Row(
        "append session while the server is not ready",
        V2 + "ApiErrors.cs ServerNotReady, Infrastructure/ApiCallback.cs",
        Seen(
            "UNAVAILABLE",
            "The server is not yet ready to handle requests. Please try again after 5 seconds.",
            (*_error_info("SERVER_NOT_READY", "server"), "google.rpc.RetryInfo"),
        ),
        p_v2_not_ready,
    ),
    Row(
        "append session without access",
        V2 + "ApiErrors.cs AccessDenied (without detailed errors)",
        Seen(
            "PERMISSION_DENIED",
            "Access denied. Insufficient permissions to perform Append session",
            (*_error_info("ACCESS_DENIED", "server"), "kurrent.rpc.AccessDeniedErrorDetails"),
        ),
        p_v2_access_denied,
    ),
    Row(
        "append session whose commit times out",
        V2 + "ApiErrors.cs OperationTimeout, Streams/StreamsService.cs (CommitTimeout)",
        Seen(
            "DEADLINE_EXCEEDED",
            "Operation timed out: Append session timed out while waiting for commit Please try "
            "again after 5 seconds.",
            (*_error_info("OPERATION_TIMEOUT", "server"), "google.rpc.RetryInfo"),
        ),
        p_v2_timeout,
    ),
]


@pytest.mark.parametrize("row", ANSWERS, ids=[row.name for row in ANSWERS])
async def test_the_double_answers_as_the_server(
    row: Row, wire: Wire, double: KurrentDBDouble, stream: str
) -> None:
    seen = await row.provoke(wire, double, stream)
    expected = row.expected

    def fill(text: str) -> str:
        return text.replace("{s}", stream).replace("{S}", stream.upper())

    assert seen == Seen(
        expected.code,
        fill(expected.message),
        expected.details,
        tuple((key, fill(value)) for key, value in expected.metadata),
    ), row.source


async def test_26_1_names_the_retried_stream_of_a_partly_retried_append_session(
    stream: str,
) -> None:
    # src/KurrentDB.Core/Services/Storage/StorageWriterService.cs at v26.1.0: the
    # idempotent stream is reported as a consistency check failure.
    async with (
        KurrentDBDouble(server_version="26.1") as double,
        grpc.aio.insecure_channel(f"{double.host}:{double.port}") as channel,
    ):
        seen = await p_v2_partly_retried(Wire(channel), double, stream)
    assert seen.code == "FAILED_PRECONDITION"
    assert seen.message == (
        f"Append failed due to a revision conflict on stream '{stream}-a'. "
        "Expected revision: -1. Actual revision: 0."
    )


@pytest.mark.parametrize("version", ["26.0", "26.1"])
async def test_a_deleted_stream_beside_a_conflicting_one_is_named_as_each_version_does(
    stream: str, version: str
) -> None:
    # 26.0: VerifyCommitChecks answers StreamDeleted for the first deleted stream.
    # 26.1 (StorageWriterService.VerifyCommitChecks, RequestManagerBase.Handle(
    # ConsistencyChecksFailed), StreamsService.MapToError): every failed stream is a
    # consistency-check failure; one tombstone makes the answer "tombstoned", and it
    # names ConsistencyCheckFailures[0], here the stream that only conflicts.
    async with (
        KurrentDBDouble(server_version=version) as double,
        grpc.aio.insecure_channel(f"{double.host}:{double.port}") as channel,
    ):
        wire = Wire(channel)
        await wire.append_session([(stream + "-a", -1, [record()])])
        await _tombstoned(wire, stream + "-b")
        seen = await _session_error(
            wire, [(stream + "-a", 5, [record()]), (stream + "-b", -2, [record()])]
        )
    named = stream + ("-a" if version == "26.1" else "-b")
    assert (seen.code, seen.message) == (
        "FAILED_PRECONDITION",
        f"Stream '{named}' has been tombstoned. It has been permanently removed from the system "
        "and cannot be restored.",
    )


# -- IDEMPOTENCY: IndexWriter.CheckCommit, through both append APIs ------------------------


@dataclass(frozen=True)
class Retry:
    """A second write after a first batch of ``size`` events written at NoStream."""

    name: str
    size: int
    expected: str  # "no_stream", "any", "next", "wrong"
    ids: str  # "same", "other-first", "other-later"
    decision: str  # Idempotent, Ok, WrongExpectedVersion (CorruptedIdempotency reads as it)


IDEMPOTENCY = [
    # when_writing_a_second_event_after_the_first_event_has_been_replicated
    Retry("event: same expected version", 1, "no_stream", "same", "Idempotent"),
    Retry("event: expected version any", 1, "any", "same", "Idempotent"),
    Retry("event: next expected version", 1, "next", "same", "Ok"),
    Retry("event: incorrect expected version", 1, "wrong", "same", "WrongExpectedVersion"),
    # when_writing_a_second_batch_of_events_after_the_first_batch_has_been_replicated
    Retry("batch: same expected version", 10, "no_stream", "same", "Idempotent"),
    Retry("batch: expected version any", 10, "any", "same", "Idempotent"),
    Retry("batch: next expected version", 10, "next", "same", "Ok"),
    Retry("batch: incorrect expected version", 10, "wrong", "same", "WrongExpectedVersion"),
    Retry("batch: different non-first id", 10, "no_stream", "other-later", "WrongExpectedVersion"),
    Retry("batch: different first id", 10, "no_stream", "other-first", "WrongExpectedVersion"),
]


def _expected_of(retry: Retry) -> int | str:
    if retry.expected in ("no_stream", "any"):
        return retry.expected
    return retry.size - 1 if retry.expected == "next" else retry.size


async def _append_v1(wire: Wire, stream: str, expected: int | str, ids: list[str]) -> str:
    response = await wire.batch_append(stream, expected, [(i, "Tested") for i in ids])
    if response.WhichOneof("result") == "success":
        return "Ok"
    return str(response.error.message)


async def _append_v2(wire: Wire, stream: str, expected: int | str, ids: list[str]) -> str:
    revision = {"no_stream": -1, "any": -2}.get(str(expected), expected)
    assert isinstance(revision, int)
    try:
        await wire.append_session([(stream, revision, [record(record_id=i) for i in ids])])
    except grpc.aio.AioRpcError as error:
        if "revision conflict" in (error.details() or ""):
            return "WrongExpectedVersion"
        raise
    return "Ok"


@pytest.mark.parametrize("api", ["v1", "v2"])
@pytest.mark.parametrize("retry", IDEMPOTENCY, ids=[r.name for r in IDEMPOTENCY])
async def test_idempotency_decisions_as_the_server_makes_them(
    retry: Retry, api: str, wire: Wire, stream: str
) -> None:
    append = _append_v1 if api == "v1" else _append_v2
    first = [_id() for _ in range(retry.size)]
    assert await append(wire, stream, "no_stream", first) == "Ok"
    ids = list(first)
    if retry.ids == "other-first":
        ids[0] = _id()
    elif retry.ids == "other-later":
        ids[-2] = _id()
    outcome = await append(wire, stream, _expected_of(retry), ids)
    stored = [r.event.event.id.string for r in await wire.read(stream_options(stream))]
    if retry.decision == "Idempotent":
        assert outcome == "Ok"
        assert stored == first  # acknowledged, nothing written twice
    elif retry.decision == "Ok":
        assert outcome == "Ok"
        assert stored == first + ids  # the server writes the same ids again
    else:
        assert outcome == "WrongExpectedVersion"
        assert stored == first


async def test_a_retry_to_a_soft_deleted_stream_is_acknowledged_without_a_position(
    wire: Wire, stream: str
) -> None:
    # Integration/Idempotency/when_soft_deleted_stream_is_written_to_idempotently:
    # should_return_negative_1_as_log_position.
    ids = [_id()]
    await wire.batch_append(stream, "no_stream", [(ids[0], "event-type")])
    delete = streams_pb2.DeleteReq.Options(
        stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
    )
    delete.any.SetInParent()
    await wire.v1.Delete(streams_pb2.DeleteReq(options=delete))
    response = await wire.batch_append(stream, "no_stream", [(ids[0], "event-type")])
    assert response.WhichOneof("result") == "success"
    assert response.success.WhichOneof("position_option") == "no_position"
    assert response.success.current_revision == 0
    session = await wire.append_session([(stream, -1, [record(record_id=ids[0])])])
    assert session.position == -1


# -- POSITIONS: Enumerator.AllSubscription.CombinationTests --------------------------------

POSITIONS = [
    ("subscribe to $all from start", "start", 0),
    ("subscribe to $all from end", "end", 10),
    ("subscribe to $all at position zero", "zero", 0),
    ("subscribe to $all at one before last event", "one-before-last", 9),
    ("subscribe to $all at last event", "last", 10),
    ("subscribe to $all at one byte after last event", "one-byte-after-last", 10),
    ("subscribe to $all at an invalid position", "invalid", None),
]


@pytest.mark.parametrize(("name", "checkpoint", "first"), POSITIONS, ids=[p[0] for p in POSITIONS])
async def test_where_a_subscription_to_all_may_start(
    name: str, checkpoint: str, first: int | None, wire: Wire
) -> None:
    prefix = f"stream-{uuid.uuid4()}-"
    for n in range(10):
        await wire.batch_append(f"{prefix}{n}", "any", [(_id(), "type")])
    events = [r.event.event for r in await wire.read(all_options(None))]
    positions = [int(e.commit_position) for e in events]
    position = {
        "start": None,
        "end": None,
        "zero": 0,
        "one-before-last": positions[-2],
        "last": positions[-1],
        "one-byte-after-last": positions[-1] + 1,
        "invalid": positions[-1] - 1,
    }[checkpoint]
    call = wire.v1.Read(
        streams_pb2.ReadReq(options=all_options(position, subscribe=True, end=checkpoint == "end"))
    )
    responses = aiter(call)
    assert (await anext(responses)).WhichOneof("content") == "confirmation"
    if first is None:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await anext(responses)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        return
    received: list[int] = []
    for _ in range(len(events) - first):
        received.append(int((await anext(responses)).event.event.commit_position))
    assert received == positions[first:]
    assert (await anext(responses)).WhichOneof("content") == "caught_up"
    for n in range(3):  # live events follow
        await wire.batch_append(f"{prefix}live-{n}", "any", [(_id(), "type")])
    live = [(await anext(responses)).event.event.stream_identifier.stream_name for _ in range(3)]
    assert live == [f"{prefix}live-{n}".encode() for n in range(3)]
    call.cancel()


# -- StreamsServiceTests (v2 appends) ------------------------------------------------------


class TestStreamsServiceTests:
    """``src/KurrentDB.Api.V2.Tests/Modules/Streams/StreamsServiceTests.cs``."""

    @pytest.mark.parametrize(("streams", "events"), [(1, 1), (1, 10), (10, 1), (10, 10)])
    async def test_append_session_appends_records(
        self, wire: Wire, streams: int, events: int
    ) -> None:
        prefix = f"home-{uuid.uuid4().hex}"
        response = await wire.append_session(
            [(f"{prefix}-{n}", None, [record() for _ in range(events)]) for n in range(streams)]
        )
        assert len(response.output) == streams
        assert response.position >= streams

    async def test_append_session_appends_records_with_expected_revision(
        self, wire: Wire, stream: str
    ) -> None:
        await wire.append_session([(stream, -1, [record() for _ in range(3)])])
        response = await wire.append_session([(stream, 2, [record(), record()])])
        assert response.output[0].stream_revision == 4

    async def test_append_session_throws_on_stream_revision_conflict(
        self, wire: Wire, stream: str
    ) -> None:
        await wire.append_session([(stream, -1, [record()])])
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await wire.append_session([(stream, -1, [record()])])
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "StreamRevisionConflictErrorDetails" in str(_seen_error(raised.value).details)

    @pytest.mark.parametrize(
        ("provoke", "code", "detail"),
        [
            (p_v2_no_records, "INVALID_ARGUMENT", "google.rpc.BadRequest"),
            (p_v2_no_requests, "FAILED_PRECONDITION", "streams/APPEND_SESSION_NO_REQUESTS"),
            (p_v2_twice, "ABORTED", "StreamAlreadyInAppendSessionErrorDetails"),
            (p_v2_tombstoned, "FAILED_PRECONDITION", "StreamTombstonedErrorDetails"),
            (p_v2_record_too_large, "INVALID_ARGUMENT", "AppendRecordSizeExceededErrorDetails"),
            (p_v2_transaction_too_large, "ABORTED", "AppendTransactionSizeExceededErrorDetails"),
        ],
        ids=[
            "when_request_has_no_records",
            "when_no_requests_are_sent",
            "when_stream_already_in_session",
            "when_a_stream_is_tombstoned",
            "when_record_is_larger_than_configured_limit",
            "when_transaction_is_too_large",
        ],
    )
    async def test_append_session_throws(
        self,
        provoke: Callable[[Wire, KurrentDBDouble, str], Awaitable[Seen]],
        code: str,
        detail: str,
        wire: Wire,
        double: KurrentDBDouble,
        stream: str,
    ) -> None:
        seen = await provoke(wire, double, stream)
        assert seen.code == code
        assert any(detail in entry for entry in seen.details)
