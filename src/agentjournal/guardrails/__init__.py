"""Guardrails: the ``/v1/validate`` protocol, a client that fails closed, and the run wiring.

- :mod:`~agentjournal.guardrails.protocol` — request and response models (pure).
- :mod:`~agentjournal.guardrails.client` — :class:`GuardrailClient`, which turns
  every fault into a BLOCK with a reason code.
- :mod:`~agentjournal.guardrails.actions` — the payload of each action type and
  how a MODIFY is checked and applied (pure).
- :mod:`~agentjournal.sdk.enforce` — what the session's hooks do with
  each decision; :mod:`~agentjournal.sdk.guard` — ``session.guard(agent)``.
- :mod:`~agentjournal.guardrails.rules` and :mod:`~agentjournal.guardrails.service`
  — the reference service (``agentjournal guardrail serve``).

Configure a session with ``journal.session(id, guardrails=url_or_client)`` or
``$AGENTJOURNAL_GUARDRAIL_URL``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentjournal._lazy import exports

if TYPE_CHECKING:
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

_NAMES = {
    "ActionType": "agentjournal.guardrails.protocol",
    "Decision": "agentjournal.guardrails.protocol",
    "GuardrailClient": "agentjournal.guardrails.client",
    "ReasonCode": "agentjournal.guardrails.protocol",
    "TraceRef": "agentjournal.guardrails.protocol",
    "ValidateRequest": "agentjournal.guardrails.protocol",
    "ValidateResponse": "agentjournal.guardrails.protocol",
    "Verdict": "agentjournal.guardrails.client",
}
__getattr__, __dir__ = exports(__name__, _NAMES)
