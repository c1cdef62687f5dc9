"""The KurrentDB server's answers, transcribed from its source at tag v26.0.2.

Every error the double sends is built here, in the server's exact shape: the
status code, the message text, the trailing metadata of the v1 API, the
``google.rpc.Status`` details of the v2 API (an ``ErrorInfo`` first, then the
typed details), and the ``BatchAppendResp.error`` status of v1 batch appends.
Paths are in the public ``kurrent-io/KurrentDB`` repository:

* v1 streams service: ``src/KurrentDB.Core/Services/Transport/Grpc/RpcExceptions.cs``
  (:class:`Rpc` answers) and ``.../Grpc/Status.cs`` (:func:`batch_status`
  answers of ``Streams.BatchAppend.cs``);
* v2 streams service: ``src/KurrentDB.Api.V2/Modules/ApiErrors.cs`` and
  ``.../Modules/Streams/ApiErrors.cs``, packed by
  ``src/KurrentDB.Api.V2/Infrastructure/Errors/RpcExceptions.cs``; codes and
  reasons from ``proto/kurrent/rpc/errors.proto`` and
  ``proto/kurrentdb/protocol/v2/streams/errors.proto``;
* gRPC's own refusal of an oversized message comes from grpc-dotnet
  (``Grpc.AspNetCore.Server``), with the limit KurrentDB sets for its v1 streams
  service in ``src/KurrentDB.Core/ClusterVNodeStartup.cs``
  (``TFConsts.EffectiveMaxLogRecordSize``).

``tests/test_kurrentdb_answers.py`` holds the same answers as a table and checks
the double against it on the wire.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import (  # type: ignore[import-untyped, unused-ignore]
    any_pb2,
    duration_pb2,
    empty_pb2,
)
from google.rpc import (  # type: ignore[import-untyped, unused-ignore]
    error_details_pb2,
    status_pb2,
)
from grpc_status import rpc_status  # type: ignore[import-untyped, unused-ignore]
from kurrentdbclient.protos.kurrent.rpc import errors_pb2 as rpc_errors_pb2
from kurrentdbclient.protos.v1 import shared_pb2
from kurrentdbclient.protos.v1 import status_pb2 as v1_status_pb2
from kurrentdbclient.protos.v2.streams import errors_pb2 as v2_errors_pb2

MAX_V1_MESSAGE_BYTES = 16 * 1024 * 1024 - 10_000
"""The largest request message the v1 streams service takes (``EffectiveMaxLogRecordSize``)."""

_RETRY_AFTER_SECONDS = 5  # ApiErrors.DefaultRetryDelay
_CONTACT_SUPPORT = (
    "An internal server error occurred. Please contact support if the problem persists."
)


@dataclass(frozen=True)
class Answer:
    """A call's end: status code, message, trailing metadata (details ride in it for v2)."""

    code: grpc.StatusCode
    message: str
    metadata: tuple[tuple[str, str | bytes], ...] = field(default=())

    async def abort(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        """End the call with this answer (raises, as ``context.abort`` does)."""
        await context.abort(self.code, self.message, self.metadata)


# -- v1 streams service (RpcExceptions.cs) -----------------------------------------------


class Rpc:
    """The v1 service's ``RpcException`` answers (``Grpc/RpcExceptions.cs``)."""

    @staticmethod
    def server_not_ready() -> Answer:
        return Answer(grpc.StatusCode.UNAVAILABLE, "Server Is Not Ready")

    @staticmethod
    def server_busy() -> Answer:
        return Answer(grpc.StatusCode.UNAVAILABLE, "Server Is Too Busy")

    @staticmethod
    def no_leader_info() -> Answer:
        """A node that is not the leader and knows none (an election): ``NoLeaderInfo``."""
        return Answer(grpc.StatusCode.UNKNOWN, "No leader info available in response")

    @staticmethod
    def access_denied() -> Answer:
        return Answer(
            grpc.StatusCode.PERMISSION_DENIED, "Access Denied", (("exception", "access-denied"),)
        )

    @staticmethod
    def timeout(message: str) -> Answer:
        return Answer(grpc.StatusCode.ABORTED, f"Operation timed out: {message}")

    @staticmethod
    def stream_deleted(stream: str) -> Answer:
        return Answer(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"Event stream '{stream}' is deleted.",
            (("exception", "stream-deleted"), ("stream-name", stream)),
        )

    @staticmethod
    def wrong_expected_version(operation: str, stream: str, expected: int, actual: int) -> Answer:
        return Answer(
            grpc.StatusCode.FAILED_PRECONDITION,
            f"{operation} failed due to WrongExpectedVersion. Stream: {stream}, "
            f"Expected version: {expected}, Actual version: {actual}",
            (
                ("exception", "wrong-expected-version"),
                ("stream-name", stream),
                ("expected-version", str(expected)),
                ("actual-version", str(actual)),
            ),
        )

    @staticmethod
    def max_append_size_exceeded(max_append_size: int) -> Answer:
        return Answer(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"Maximum Append Size of {max_append_size} Exceeded.",
            (
                ("exception", "maximum-append-size-exceeded"),
                ("maximum-append-size", str(max_append_size)),
            ),
        )

    @staticmethod
    def invalid_position() -> Answer:
        """A subscription to ``$all`` asked to start inside a record."""
        return Answer(grpc.StatusCode.INVALID_ARGUMENT, "Trying to read from an invalid position.")

    @staticmethod
    def unknown_error(result_type: str, result: str, error_message: str = "") -> Answer:
        """E.g. a read of ``$all`` from inside a record (``ReadResponseException.UnknownError``)."""
        text = f"Unexpected {result_type}: {result}"
        return Answer(
            grpc.StatusCode.UNKNOWN, f"{text} >> {error_message}" if error_message else text
        )

    @staticmethod
    def message_too_large() -> Answer:
        """grpc-dotnet's refusal of a request over the service's MaxReceiveMessageSize."""
        return Answer(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "Received message exceeds the maximum configured message size.",
        )


# -- v1 BatchAppendResp.error (Status.cs, Streams.BatchAppend.cs) --------------------------


def _pack(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


class batch_status:
    """``google.rpc.Status`` values a v1 ``BatchAppendResp`` carries as its error."""

    @staticmethod
    def wrong_expected_version(current: int, expected: int) -> v1_status_pb2.Status:
        detail = shared_pb2.WrongExpectedVersion()
        if current < 0:
            detail.current_no_stream.CopyFrom(empty_pb2.Empty())
        else:
            detail.current_stream_revision = current
        if expected >= 0:
            detail.expected_stream_position = expected
        elif expected == -1:
            detail.expected_no_stream.CopyFrom(empty_pb2.Empty())
        elif expected == -4:
            detail.expected_stream_exists.CopyFrom(empty_pb2.Empty())
        else:
            detail.expected_any.CopyFrom(empty_pb2.Empty())
        return v1_status_pb2.Status(
            code=grpc.StatusCode.ALREADY_EXISTS.value[0],
            message="WrongExpectedVersion",
            details=_pack(detail),
        )

    @staticmethod
    def stream_deleted(stream: str) -> v1_status_pb2.Status:
        detail = shared_pb2.StreamDeleted(
            stream_identifier=shared_pb2.StreamIdentifier(stream_name=stream.encode())
        )
        return v1_status_pb2.Status(
            code=grpc.StatusCode.NOT_FOUND.value[0], message="StreamDeleted", details=_pack(detail)
        )

    @staticmethod
    def access_denied() -> v1_status_pb2.Status:
        return v1_status_pb2.Status(
            code=grpc.StatusCode.PERMISSION_DENIED.value[0],
            message="AccessDenied",
            details=_pack(shared_pb2.AccessDenied()),
        )

    @staticmethod
    def timeout() -> v1_status_pb2.Status:
        return v1_status_pb2.Status(
            code=grpc.StatusCode.DEADLINE_EXCEEDED.value[0],
            message="Timeout",
            details=_pack(shared_pb2.Timeout()),
        )

    @staticmethod
    def maximum_append_size_exceeded(max_append_size: int) -> v1_status_pb2.Status:
        return v1_status_pb2.Status(
            code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
            message="MaximumAppendSizeExceeded",
            details=_pack(shared_pb2.MaximumAppendSizeExceeded(maxAppendSize=max_append_size)),
        )

    @staticmethod
    def maximum_append_event_size_exceeded(
        event_id: str, size: int, max_size: int
    ) -> v1_status_pb2.Status:
        # kurrentdbclient's shared.proto lacks this message: pack it by hand, as
        # the server's shared.proto defines it (string 1, uint32 2, uint32 3).
        raw = (
            _field_bytes(1, event_id.encode()) + _field_varint(2, size) + _field_varint(3, max_size)
        )
        detail = any_pb2.Any(
            type_url="type.googleapis.com/event_store.client.MaximumAppendEventSizeExceeded",
            value=raw,
        )
        return v1_status_pb2.Status(
            code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
            message="MaximumAppendEventSizeExceeded",
            details=detail,
        )

    @staticmethod
    def bad_request(message: str) -> v1_status_pb2.Status:
        return v1_status_pb2.Status(
            code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
            message="BadRequest",
            details=_pack(shared_pb2.BadRequest(message=message)),
        )

    @staticmethod
    def not_handled(reason: str) -> v1_status_pb2.Status:
        """A NotHandled reply: no code set, an empty detail.

        ``reason`` is ``NotReady``, ``TooBusy`` or ``NotLeader`` (not the leader,
        and no leader known: with one, the server ends the call with its address).
        """
        text = {
            "NotReady": "Server Is Not Ready",
            "TooBusy": "Server Is Busy",
            "NotLeader": "No leader info available in response",
        }[reason]
        return v1_status_pb2.Status(message=text, details=_pack(empty_pb2.Empty()))


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_varint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _field_bytes(number: int, value: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(value)) + value


# -- v2 streams service (ApiErrors.cs) -----------------------------------------------------


def humanize_bytes(size: int) -> str:
    """``size.Bytes().Humanize("0.000")`` of Humanizer, as the v2 size errors print it."""
    for unit, scale in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if abs(size) >= scale:
            return f"{size / scale:.3f} {unit}"
    return f"{size:.3f} B"


class v2:
    """Rich ``google.rpc.Status`` answers of the v2 streams service."""

    @staticmethod
    def _error(
        code: grpc.StatusCode, reason: str, domain: str, message: str, *details: Any
    ) -> Answer:
        # RpcExceptions.FromError: an ErrorInfo first, then the typed details.
        status = status_pb2.Status(code=code.value[0], message=message)
        status.details.append(_pack(error_details_pb2.ErrorInfo(reason=reason, domain=domain)))
        for detail in details:
            status.details.append(_pack(detail))
        packed = rpc_status.to_status(status)
        return Answer(packed.code, packed.details, tuple(packed.trailing_metadata))

    @classmethod
    def stream_revision_conflict(cls, stream: str, expected: int, actual: int) -> Answer:
        return cls._error(
            grpc.StatusCode.FAILED_PRECONDITION,
            "STREAM_REVISION_CONFLICT",
            "streams",
            f"Append failed due to a revision conflict on stream '{stream}'. "
            f"Expected revision: {expected}. Actual revision: {actual}.",
            v2_errors_pb2.StreamRevisionConflictErrorDetails(
                stream=stream, expected_revision=expected, actual_revision=actual
            ),
        )

    @classmethod
    def stream_tombstoned(cls, stream: str) -> Answer:
        return cls._error(
            grpc.StatusCode.FAILED_PRECONDITION,
            "STREAM_TOMBSTONED",
            "streams",
            f"Stream '{stream}' has been tombstoned. It has been permanently removed from the "
            "system and cannot be restored.",
            v2_errors_pb2.StreamTombstonedErrorDetails(stream=stream),
        )

    @classmethod
    def stream_already_in_append_session(cls, stream: str) -> Answer:
        return cls._error(
            grpc.StatusCode.ABORTED,
            "STREAM_ALREADY_IN_APPEND_SESSION",
            "streams",
            f"Stream '{stream}' already has a different group of messages in this session. "
            "Appends for the same stream must currently be grouped together and not "
            "interleaved with appends for other streams.",
            v2_errors_pb2.StreamAlreadyInAppendSessionErrorDetails(stream=stream),
        )

    @classmethod
    def append_record_size_exceeded(
        cls, stream: str, record_id: str, size: int, max_size: int
    ) -> Answer:
        return cls._error(
            grpc.StatusCode.INVALID_ARGUMENT,
            "APPEND_RECORD_SIZE_EXCEEDED",
            "streams",
            f"The size of record {record_id} ({humanize_bytes(size)}) exceeds the maximum "
            f"allowed size of {humanize_bytes(max_size)} bytes by "
            f"{humanize_bytes(size - max_size)}",
            v2_errors_pb2.AppendRecordSizeExceededErrorDetails(
                stream=stream, record_id=record_id, size=size, max_size=max_size
            ),
        )

    @classmethod
    def append_transaction_size_exceeded(cls, records: int, size: int, max_size: int) -> Answer:
        return cls._error(
            grpc.StatusCode.ABORTED,
            "APPEND_TRANSACTION_SIZE_EXCEEDED",
            "streams",
            f"Transaction size ({humanize_bytes(size)}) exceeded the maximum allowed size of "
            f"{humanize_bytes(max_size)} by {humanize_bytes(size - max_size)}, "
            f"after {records} record(s).",
            v2_errors_pb2.AppendTransactionSizeExceededErrorDetails(size=size, max_size=max_size),
        )

    @classmethod
    def append_session_no_requests(cls) -> Answer:
        return cls._error(
            grpc.StatusCode.FAILED_PRECONDITION,
            "APPEND_SESSION_NO_REQUESTS",
            "streams",
            "Append session started, but no append requests were sent before ending the session.",
        )

    @classmethod
    def invalid_request(cls, failures: Sequence[tuple[str, str]]) -> Answer:
        """FluentValidation failures ``(property, message)`` of an ``AppendRequest``."""
        message = "The 'AppendRequest' is invalid:"
        if len(failures) == 1:
            message = f"{message} {failures[0][1]}"
        else:
            message = message + "\n" + "".join(f" -- {text}\n" for _, text in failures)
        detail = error_details_pb2.BadRequest(
            field_violations=[
                error_details_pb2.BadRequest.FieldViolation(field=name, description=text)
                for name, text in failures
            ]
        )
        return cls._error(
            grpc.StatusCode.INVALID_ARGUMENT, "BAD_REQUEST", "server", message, detail
        )

    @classmethod
    def operation_timeout(cls, message: str) -> Answer:
        return cls._error(
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "OPERATION_TIMEOUT",
            "server",
            f"Operation timed out: {message} "
            f"Please try again after {_RETRY_AFTER_SECONDS} seconds.",
            error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(seconds=_RETRY_AFTER_SECONDS)
            ),
        )

    @classmethod
    def access_denied(cls, operation: str) -> Answer:
        """``ApiErrors.AccessDenied`` without detailed errors (no user name, no permission)."""
        return cls._error(
            grpc.StatusCode.PERMISSION_DENIED,
            "ACCESS_DENIED",
            "server",
            f"Access denied. Insufficient permissions to perform {operation}",
            rpc_errors_pb2.AccessDeniedErrorDetails(operation=operation),
        )

    @classmethod
    def server_not_ready(cls) -> Answer:
        return cls._error(
            grpc.StatusCode.UNAVAILABLE,
            "SERVER_NOT_READY",
            "server",
            "The server is not yet ready to handle requests. "
            f"Please try again after {_RETRY_AFTER_SECONDS} seconds.",
            error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(seconds=_RETRY_AFTER_SECONDS)
            ),
        )

    @classmethod
    def server_overloaded(cls) -> Answer:
        return cls._error(
            grpc.StatusCode.UNAVAILABLE,
            "SERVER_OVERLOADED",
            "server",
            "The server is currently overloaded and cannot handle the request. "
            f"Please try again after {_RETRY_AFTER_SECONDS} seconds.",
            error_details_pb2.RetryInfo(
                retry_delay=duration_pb2.Duration(seconds=_RETRY_AFTER_SECONDS)
            ),
        )

    @classmethod
    def internal_server_error(cls, message: str, exception: str | None = None) -> Answer:
        """``InternalServerError``; with ``exception`` (its message) a ``DebugInfo`` is attached."""
        details: list[Any] = []
        if exception is not None:
            details.append(error_details_pb2.DebugInfo(detail=exception))
        return cls._error(
            grpc.StatusCode.INTERNAL,
            "SERVER_MALFUNCTION",
            "server",
            f"{_CONTACT_SUPPORT}\n{message}",
            *details,
        )
