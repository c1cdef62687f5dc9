"""The guardrail service contract: ``POST {base_url}/v1/validate`` (pure models, no I/O).

Request and response bodies follow the agent protocol reference (seed 000,
"Input/Output Guardrail Contract"). The response model is strict: unknown
fields, wrong types and unknown decisions are protocol errors, and a runner
that meets one must BLOCK (see :mod:`agentjournal.guardrails.client`).
"""

from __future__ import annotations

import enum
import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, StringConstraints

TraceId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")]
SpanId = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16}$")]

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


class ActionType(enum.StrEnum):
    """What a guardrail is asked to validate."""

    AGENT_INPUT = "AGENT_INPUT"
    TOOL_CALL = "TOOL_CALL"
    AGENT_RESPONSE = "AGENT_RESPONSE"
    AGENT_HANDOFF = "AGENT_HANDOFF"


class Decision(enum.StrEnum):
    """What the guardrail decided."""

    ALLOW = "ALLOW"
    BLOCK = "BLOCK"
    MODIFY = "MODIFY"


class ReasonCode(enum.StrEnum):
    """Reason codes the runner itself gives when it blocks without a usable answer."""

    GUARDRAIL_UNAVAILABLE = "GUARDRAIL_UNAVAILABLE"
    """Timeout, connection error, HTTP 5xx or 429."""
    GUARDRAIL_PROTOCOL_ERROR = "GUARDRAIL_PROTOCOL_ERROR"
    """A reply that breaks the contract: status, content type, size, body, action id."""
    GUARDRAIL_INVALID_MODIFICATION = "GUARDRAIL_INVALID_MODIFICATION"
    """MODIFY without a payload, or with one that does not fit the action."""
    GUARDRAIL_UNENFORCEABLE = "GUARDRAIL_UNENFORCEABLE"
    """A MODIFY the wiring cannot carry out (hooks alone cannot change a call): blocked."""
    GUARDRAIL_WIDENS_AUTHORITY = "GUARDRAIL_WIDENS_AUTHORITY"
    """A MODIFY whose payload the acting agent's authority would refuse: blocked."""
    GUARDRAIL_FAILED_OPEN = "GUARDRAIL_FAILED_OPEN"
    """A fault was let through because the client was explicitly set to fail open."""


class TraceRef(BaseModel):
    """The W3C trace context of the action: 32 and 16 lowercase hex digits."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trace_id: TraceId
    span_id: SpanId


class FunctionCall(BaseModel):
    """The called function of a ``TOOL_CALL``: its name, and its arguments as the model wrote
    them (a JSON string for a function tool; a custom tool's raw input)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: Annotated[str, StringConstraints(min_length=1)]
    arguments: str


class ToolCallPayload(BaseModel):
    """The payload of a ``TOOL_CALL``: the tool call as the OpenAI API shapes it (``type``:
    ``function``, or the kind of another local call, such as ``custom_tool_call``).

    The service refuses any other shape (422): a guardrail that cannot tell which tool
    is called, with which arguments, must not answer ALLOW.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: str
    type: Annotated[str, StringConstraints(min_length=1)]
    function: FunctionCall


class ValidateRequest(BaseModel):
    """The body of ``POST /v1/validate``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action_id: str
    action_type: ActionType
    source_agent_id: str
    thread_id: str
    trace: TraceRef
    payload: Any


class ValidateResponse(BaseModel):
    """The guardrail's answer; strict: anything else is a protocol error."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    action_id: str
    decision: Decision
    reason_code: str | None = None
    reason_message: str | None = None
    modified_payload: Any = None


def traceparent(trace: TraceRef, *, sampled: bool = True) -> str:
    """Return the W3C ``traceparent`` header value for ``trace``."""
    return f"00-{trace.trace_id}-{trace.span_id}-{'01' if sampled else '00'}"


def parse_traceparent(value: str) -> TraceRef | None:
    """Parse a W3C ``traceparent`` header; None when it is malformed or all zeros."""
    match = _TRACEPARENT.match(value.strip())
    if match is None:
        return None
    trace_id, span_id, _ = match.groups()
    if set(trace_id) == {"0"} or set(span_id) == {"0"}:
        return None
    return TraceRef(trace_id=trace_id, span_id=span_id)
