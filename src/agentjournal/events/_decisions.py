"""Decisions on an agent's actions: a guardrail's (``GuardrailDecided``), an authority gate's
refusal (``AuthorityRefused``), and how either was carried out (:class:`Enforcement`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from agentjournal.events._codec import Event
from agentjournal.events._names import AUTHORITY_REFUSED, GUARDRAIL_DECIDED


@dataclass(frozen=True, slots=True)
class GuardrailDecided(Event):
    """``agentjournal.GuardrailDecided``: a guardrail's decision on one action and what was done.

    Written to the stream of the agent that acts, before the action (a
    decision that cannot be recorded is not acted on).

    Attributes:
        action_id: The id sent to the guardrail (uuid4).
        action_type: ``AGENT_INPUT``, ``TOOL_CALL``, ``AGENT_HANDOFF`` or ``AGENT_RESPONSE``.
        decision: What the runner acts on: ``ALLOW``, ``BLOCK`` or ``MODIFY``.
        guardrail_decision: What the service answered; None when it gave no usable answer.
        reason_code: The guardrail's reason code, or the runner's.
        reason_message: Human-readable reason.
        enforcement: How the decision was carried out (see SCHEMA.md).
        agent: The agent that acts (``source_agent_id``).
        subject: The tool, the handoff's target agent, or the agent.
        call_id: The tool or handoff call id, when there is one.
        payload: The payload sent.
        modified_payload: The guardrail's replacement (MODIFY), else None.
        payload_digest: ``sha256:`` of the canonical JSON of ``payload``.
        modified_payload_digest: The same for ``modified_payload``, else None.
        latency_ms: Time the guardrail took to decide.
        trace_id: W3C trace id of the guardrail call's span.
        span_id: W3C span id of that span.
    """

    action_id: str
    action_type: str
    decision: str
    guardrail_decision: str | None
    reason_code: str | None
    reason_message: str | None
    enforcement: str
    agent: str
    subject: str
    call_id: str | None
    payload: Any
    modified_payload: Any
    payload_digest: str
    modified_payload_digest: str | None
    latency_ms: float
    trace_id: str
    span_id: str

    EVENT_TYPE = GUARDRAIL_DECIDED


@dataclass(frozen=True, slots=True)
class AuthorityRefused(Event):
    """``agentjournal.AuthorityRefused``: a gate refused an action outside the agent's authority.

    Attributes:
        gate: ``tool_visibility``, ``mcp_visibility``, ``handoff_visibility`` or ``invocation``.
        agent: The agent that would have acted (the sender, for a handoff).
        subject: The tool, or the handoff's receiver.
        kind: ``tool`` or ``handoff``.
        reason: Human-readable reason.
        scope: The scope that was needed, when a scope was the problem.
        ceiling: The ceiling that refused, when one did.
        limit: That ceiling's JSON form.
        value: The argument value it refused.
        call_id: The refused call's id (invocation), else None.
        arguments_digest: ``sha256:`` of the call's arguments text, else None.
        authority: The agent's effective authority (JSON form).
        enforcement: ``hidden``, ``tool_refused`` or ``run_stopped``.
    """

    gate: str
    agent: str
    subject: str
    kind: str
    reason: str
    scope: str | None
    ceiling: str | None
    limit: Any
    value: Any
    call_id: str | None
    arguments_digest: str | None
    authority: dict[str, Any]
    enforcement: str

    EVENT_TYPE = AUTHORITY_REFUSED


class Enforcement:
    """How a decision or refusal was carried out (the ``enforcement`` field of the events)."""

    PROCEEDED: Final = "proceeded"
    """ALLOW: the action went ahead as asked."""
    MODIFIED: Final = "modified"
    """MODIFY: the action went ahead with the modified payload."""
    TOOL_REFUSED: Final = "tool_refused"
    """TOOL_CALL BLOCK: the body did not run; the model got an error output."""
    RUN_STOPPED: Final = "run_stopped"
    """BLOCK: the run ended with ``GuardrailBlocked`` before the action."""
    UNENFORCEABLE: Final = "unenforceable"
    """MODIFY this wiring cannot apply: recorded as BLOCK, the run stopped."""
    HIDDEN: Final = "hidden"
    """An authority refusal at a visibility gate: the model was not offered it."""
