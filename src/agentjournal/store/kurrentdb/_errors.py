"""Reading the KurrentDB client's and gRPC's errors: status codes, details and descriptions."""

from __future__ import annotations

from typing import Any, Final

import grpc
import grpc.aio
from kurrentdbclient.exceptions import (
    AbortedByServerError,
    AccessDeniedError,
    BadRequestError,
    CancelledByClientError,
    DeadlineExceededError,
    DiscoveryFailedError,
    ExceptionThrownByHandlerError,
    InvalidArgumentError,
    MaximumAppendSizeExceededError,
    MultiAppendToSameStreamError,
    NodeIsNotLeaderError,
    ProgrammingError,
    ServiceUnavailableError,
    TransactionMaxSizeExceededError,
    UnauthenticatedError,
)
from kurrentdbclient.exceptions import (
    CancelledError as ServerCancelledError,
)
from kurrentdbclient.protos.v1 import status_pb2

from agentjournal.store.kurrentdb._limits import _EVENT_SIZE_DETAIL, _proto_fields

_INPUT_ERRORS: Final = (
    MultiAppendToSameStreamError,
    MaximumAppendSizeExceededError,
    TransactionMaxSizeExceededError,
    InvalidArgumentError,
    BadRequestError,
    ProgrammingError,
)
_UNAVAILABLE_ERRORS: Final = (
    ServiceUnavailableError,
    DeadlineExceededError,
    DiscoveryFailedError,
    NodeIsNotLeaderError,
    grpc.aio.UsageError,
    AbortedByServerError,  # a server-side timeout, a subscriber too slow for the server
    ExceptionThrownByHandlerError,  # KurrentDB throws it "from time to time"
    ServerCancelledError,
    TimeoutError,
    ConnectionError,
)
_UNAVAILABLE_CODES: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.CANCELLED,
    }
)
_ACCESS_CODES: Final = frozenset(
    {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}
)
# The server's answers to a request it did not handle (NotHandled): v1 reads end
# with UNAVAILABLE or, for "no leader" (an election in progress), UNKNOWN; v1
# BatchAppend answers with a status without a code. All mean "try again".
_NOT_HANDLED_TEXTS: Final = (
    "Server Is Not Ready",
    "Server Is Busy",
    "Server Is Too Busy",
    "No leader info available",
)
# Answers that mean the server wrote nothing, whatever an earlier attempt did.
_REFUSED_BEFORE_WRITING: Final = _ACCESS_CODES | {grpc.StatusCode.UNIMPLEMENTED}


def _rpc_error(error: BaseException) -> grpc.aio.AioRpcError | None:
    """The gRPC error behind a client error: the client chains it or raises from it."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, grpc.aio.AioRpcError):
            return current
        current = current.__cause__ or current.__context__
    return None


def _refused_before_writing(error: BaseException) -> bool:
    """Whether the server refused a call before writing anything (access, unimplemented)."""
    return (
        isinstance(error, AccessDeniedError | UnauthenticatedError)
        or _status_code(error) in _REFUSED_BEFORE_WRITING
    )


def _status_code(error: BaseException) -> grpc.StatusCode | None:
    """The gRPC status code behind a client error, if there is one."""
    rpc = _rpc_error(error)
    return rpc.code() if rpc is not None else None


def _describe(error: BaseException, deadline: float) -> str:
    """A one-line reason: the server's answer, not the client's repr of it."""
    if isinstance(error, TimeoutError):
        return f"no answer within {deadline:g} s"
    if isinstance(error, CancelledByClientError) and not str(error):
        return "the client replaced its connection"
    text = str(error)
    rpc = _rpc_error(error)
    if rpc is not None and (rpc is error or not text or text.startswith("<AioRpcError")):
        return f"{rpc.code().name}: {rpc.details() or ''}".strip()
    status = error.args[0] if error.args else None
    if status is not None and hasattr(status, "message") and hasattr(status, "code"):
        # A v1 BatchAppendResp status the client passes on as it is.
        return str(status.message)
    return " ".join(text.split()) or type(error).__name__


def _batch_status(error: BaseException) -> Any | None:
    """The ``BatchAppendResp.error`` status a client error carries as it is, if any."""
    status = error.args[0] if error.args else None
    if isinstance(status, status_pb2.Status):
        return status
    return None


def _refused_batch(status: Any, text: str) -> str:
    """One line for a batch append refused as bad input, naming the limit where there is one."""
    if status.details.type_url.endswith("/" + _EVENT_SIZE_DETAIL):
        fields = _proto_fields(status.details.value)
        event_id, size, limit = fields.get(1, b""), fields.get(2), fields.get(3)
        shown = event_id.decode(errors="replace") if isinstance(event_id, bytes) else "?"
        if not isinstance(size, int) or not isinstance(limit, int):
            return f"KurrentDB refused an event as over its MaxAppendEventSize: {text}"
        return (
            f"KurrentDB refused event {shown}: {size} bytes as it counts them (data, metadata, "
            f"the type twice), over its MaxAppendEventSize of {limit} bytes"
        )
    return f"KurrentDB refused the request: {text}"
