"""Guardrails: the ``/v1/validate`` protocol and a client that fails closed.

Work in progress (issue 6): the protocol models and the client are here and
tested; wiring them into the session's hooks, the decision events, the
reference service and OpenTelemetry spans come next.
"""

from __future__ import annotations

from agentjournal.guardrails.client import GuardrailClient, Verdict
from agentjournal.guardrails.protocol import (
    ActionType,
    Decision,
    ReasonCode,
    TraceRef,
    ValidateRequest,
    ValidateResponse,
)

__all__ = [
    "ActionType",
    "Decision",
    "GuardrailClient",
    "ReasonCode",
    "TraceRef",
    "ValidateRequest",
    "ValidateResponse",
    "Verdict",
]
