"""Metadata keys and agentjournal's own session events (pure).

Item events are the codec's (:mod:`agentjournal.engine.codec`); this module holds what
the session adds around them: the metadata keys every event carries and the two
history-editing events, which *hide* items from ``get_items`` without removing
anything from the stream.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Final, Self

from kurrent_agent_schema import (
    SCHEMA_VERSION,
    USAGE_METADATA_KEY,
    SessionStarted,
    SubagentCompleted,
    SubagentStarted,
    to_json,
)

from agentjournal.errors import CodecError, InvalidInput

__all__ = [
    "CALL_ID_KEY",
    "CLOSES_HASH_KEY",
    "GUARDED_KEY",
    "ITEM_TYPE_KEY",
    "TOOL_RULE_KEY",
    "CLOSES_KEY",
    "INDEX_KEY",
    "OPEN_KEY",
    "OUTCOMES",
    "SUBAGENT_COMPLETED",
    "SUBAGENT_STARTED",
    "TWIN_KEY",
    "Subagent",
    "decode_subagent_completed",
    "decode_subagent_started",
    "granted_authority",
    "encode_subagent_completed",
    "encode_subagent_started",
    "AUTHORITY_GRANTED",
    "AUTHORITY_HELD",
    "AUTHORITY_REFUSED",
    "AUTHORITY_RESET",
    "AuthorityHeld",
    "AuthorityReset",
    "POLICY_KEY",
    "POLICY_RECORDED",
    "PolicyRecorded",
    "OPAQUE_KEY",
    "REDACTED_KEY",
    "VIEWED_KEY",
    "AuthorityRefused",
    "Enforcement",
    "GUARDRAIL_DECIDED",
    "GuardrailDecided",
    "ITEM_POPPED",
    "MODEL_RESPONDED",
    "NEXT_INDEX_KEY",
    "RESPONSE_ID_KEY",
    "SCHEMA_VERSION_KEY",
    "SESSION_CLEARED",
    "SESSION_STARTED",
    "SPAN_ID_KEY",
    "TRACE_ID_KEY",
    "USAGE_KEY",
    "ItemPopped",
    "SessionCleared",
    "encode_session_started",
]

SCHEMA_VERSION_KEY: Final = "$schema_version"
"""``"2"`` on every event (schema v2)."""
USAGE_KEY: Final = USAGE_METADATA_KEY
"""``$usage``: the model response's token usage (TokenUsage JSON) on assistant events."""
INDEX_KEY: Final = "aj.index"
"""The item's session-wide ``message_index``, on item events."""
NEXT_INDEX_KEY: Final = "aj.next_index"
"""The next free ``message_index`` after this event, on every session event: a new
process learns where to continue from the stream's last event alone."""
RESPONSE_ID_KEY: Final = "aj.response_id"
"""The model response that produced an assistant item (groups ``$usage``)."""
TRACE_ID_KEY: Final = "trace_id"
"""W3C trace id (32 lowercase hex) of the span that produced the event."""
SPAN_ID_KEY: Final = "span_id"
"""W3C span id (16 lowercase hex) of the span that produced the event: the
speaking agent's span for items, the guardrail call's span for decisions."""

CALL_ID_KEY: Final = "aj.call_id"
"""The item's ``call_id``, on tool call and tool output item events."""
ITEM_TYPE_KEY: Final = "aj.item_type"
"""The item's ``type`` (``function_call``, ``function_call_output``, ...), with ``aj.call_id``."""
GUARDED_KEY: Final = "aj.guarded"
"""``"1"`` on a tool call item (any kind the runner executes locally) written by a
session with a guardrail: a verifier expects a decision for it."""
TOOL_RULE_KEY: Final = "aj.tool_rule"
"""On a tool call item written by a session with a policy: the tool's rule as JSON
(``{"scope", "ceilings"}``, or ``null`` when the policy has none)."""

SCHEMA_VERSION_VALUE: Final = str(SCHEMA_VERSION)

SESSION_STARTED: Final = "SessionStarted"
ITEM_POPPED: Final = "agentjournal.ItemPopped"
MODEL_RESPONDED: Final = "agentjournal.ModelResponded"
"""One model response: usage, model, agent, times (:class:`agentjournal.usage.ModelResponse`)."""
SESSION_CLEARED: Final = "agentjournal.SessionCleared"
GUARDRAIL_DECIDED: Final = "agentjournal.GuardrailDecided"
AUTHORITY_REFUSED: Final = "agentjournal.AuthorityRefused"
AUTHORITY_GRANTED: Final = "agentjournal.AuthorityGranted"
POLICY_RECORDED: Final = "agentjournal.PolicyRecorded"
AUTHORITY_HELD: Final = "agentjournal.AuthorityHeld"
AUTHORITY_RESET: Final = "agentjournal.AuthorityReset"
POLICY_KEY: Final = "aj.policy"
"""On tool call items, guardrail decisions of tool calls and authority refusals written by a
session with a policy: the digest of that policy (``PolicyRecorded.digest``)."""
OPAQUE_KEY: Final = "aj.opaque"
"""``"1"`` on the event of an item that names no kind (neither ``type`` nor ``role``: e.g. an
``EncryptedSession`` envelope): nobody can tell what it holds, a verifier least of all."""
VIEWED_KEY: Final = "aj.viewed"
"""``"1"`` on a guardrail decision or refusal written by a session with
``record_payloads=False``: its data is already its redacted view (no conversation)."""
REDACTED_KEY: Final = "aj.redacted"
"""On events whose data mixes conversation with what a verifier needs: the hex SHA-256 of
the RFC 8785 bytes of the event's redacted view (:mod:`agentjournal.ledger.redaction`)."""


def encode_session_started(
    *, app_name: str | None, agent_name: str | None, user_id: str | None, timestamp: datetime
) -> bytes:
    """Return the data of the canonical ``SessionStarted`` event."""
    message = SessionStarted(
        app_name=app_name or "", agent_name=agent_name or "", user_id=user_id or ""
    )
    message.timestamp.FromDatetime(timestamp)
    text: str = to_json(message)
    return text.encode()


@dataclass(frozen=True, slots=True)
class ItemPopped:
    """``agentjournal.ItemPopped``: ``pop_item`` hid one item.

    Attributes:
        stream: The stream of the popped item's event.
        revision: That event's revision.
        part: Which item of that event (0 unless a foreign event holds several).
        message_index: The popped item's ``message_index``.
    """

    stream: str
    revision: int
    part: int
    message_index: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "stream": self.stream,
                "revision": self.revision,
                "part": self.part,
                "message_index": self.message_index,
            }
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> ItemPopped:
        body = _object(data, ITEM_POPPED)
        try:
            return cls(
                stream=_typed(body, "stream", str),
                revision=_typed(body, "revision", int),
                part=_typed(body, "part", int),
                message_index=_typed(body, "message_index", int),
            )
        except KeyError as missing:
            raise CodecError(f"{ITEM_POPPED} lacks {missing}") from None


@dataclass(frozen=True, slots=True)
class SessionCleared:
    """``agentjournal.SessionCleared``: ``clear_session`` hid every earlier item.

    Attributes:
        through_index: The highest ``message_index`` hidden (-1 if none existed).
    """

    through_index: int

    def encode(self) -> bytes:
        return json.dumps({"through_index": self.through_index}).encode()

    @classmethod
    def decode(cls, data: bytes) -> SessionCleared:
        body = _object(data, SESSION_CLEARED)
        try:
            return cls(through_index=_typed(body, "through_index", int))
        except KeyError as missing:
            raise CodecError(f"{SESSION_CLEARED} lacks {missing}") from None


class _Record:
    """A flat extension event: its dataclass fields are its JSON object, in order."""

    __slots__ = ()
    EVENT_TYPE: ClassVar[str]

    def encode(self) -> bytes:
        """Compact UTF-8 JSON of every field."""
        names: tuple[str, ...] = type(self).__slots__
        return json.dumps(
            {name: getattr(self, name) for name in names},
            ensure_ascii=False,
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Read it back.

        Raises:
            CodecError: The data is not such an event.
        """
        body = _object(data, cls.EVENT_TYPE)
        names: tuple[str, ...] = cls.__slots__
        try:
            return cls(**{name: body[name] for name in names})
        except KeyError as missing:
            raise CodecError(f"{cls.EVENT_TYPE} lacks {missing}") from None


@dataclass(frozen=True, slots=True)
class GuardrailDecided(_Record):
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

    EVENT_TYPE: ClassVar[str] = GUARDRAIL_DECIDED


@dataclass(frozen=True, slots=True)
class AuthorityRefused(_Record):
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

    EVENT_TYPE: ClassVar[str] = AUTHORITY_REFUSED


@dataclass(frozen=True, slots=True)
class PolicyRecorded(_Record):
    """``agentjournal.PolicyRecorded``: the policy in force from here on, on the authority log.

    Attributes:
        digest: ``Policy.digest`` of ``policy``.
        policy: The policy's canonical form (``Policy.to_json``).
    """

    digest: str
    policy: dict[str, Any]

    EVENT_TYPE: ClassVar[str] = POLICY_RECORDED


@dataclass(frozen=True, slots=True)
class AuthorityHeld(_Record):
    """``agentjournal.AuthorityHeld``: an agent was granted an authority (the authority log).

    Attributes:
        agent: The agent.
        authority: What it holds now (JSON form).
        cause: ``run`` (it started a run: ``AuthorityGranted``) or ``handoff`` (it received
            one: the parent copy of ``SubagentStarted``).
        event: The id of that event.
        stream: The stream of that event.
        policy: The digest of the policy it was computed under.
        held: What every agent of the session holds after this entry (agent -> JSON form).
    """

    agent: str
    authority: dict[str, Any]
    cause: str
    event: str
    stream: str
    policy: str
    held: dict[str, Any]

    EVENT_TYPE: ClassVar[str] = AUTHORITY_HELD


@dataclass(frozen=True, slots=True)
class AuthorityReset(_Record):
    """``agentjournal.AuthorityReset``: the application let an agent start from its policy entry.

    Written by ``JournalSession.reset_authority``: the agent's next run starts from its
    policy entry again instead of at most what it last held.

    Attributes:
        agent: The agent.
        reason: Why, as the application gave it.
        policy: The digest of the policy in force.
        held: What every agent holds after this entry (the agent removed).
    """

    agent: str
    reason: str
    policy: str
    held: dict[str, Any]

    EVENT_TYPE: ClassVar[str] = AUTHORITY_RESET


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


def _object(data: bytes, type_: str) -> dict[str, Any]:
    try:
        body = json.loads(data)
    except ValueError as error:
        raise CodecError(f"{type_} data is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise CodecError(f"{type_} data is not a JSON object")
    return body


def _typed(body: dict[str, Any], key: str, kind: type[Any]) -> Any:
    value = body[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise CodecError(f"{key} must be {kind.__name__}, got {value!r}")
    return value


# -- subagents ---------------------------------------------------------------------

SUBAGENT_STARTED: Final = "SubagentStarted"
SUBAGENT_COMPLETED: Final = "SubagentCompleted"
CLOSES_HASH_KEY: Final = "aj.closes_hash"
"""On the parent's copy of ``SubagentCompleted``: the chain hash of the subsession's last
event (its own copy), so the parent's chain covers the closed subtree."""
CLOSES_KEY: Final = "aj.closes"
"""On the parent's copy of ``SubagentCompleted``: the subsession it closes (readers
walking the parent backwards open that stream there without parsing the event)."""
OPEN_KEY: Final = "aj.open"
"""On every event of a session tree: the subsession of this stream's open subagent, if
any, after the event. A new process rebuilds the chain of open subagents from it."""
TWIN_KEY: Final = "aj.twin"
"""On ``SubagentStarted``/``SubagentCompleted``: the id of the twin event on the other stream."""
OUTCOMES: Final = ("success", "error", "cancelled")


@dataclass(frozen=True, slots=True)
class Subagent:
    """A handoff receiver running as a subagent with its own stream.

    Attributes:
        agent_id: ``sub-{slug(target)}-{call id}`` (schema v2 §2.4).
        agent_name: The receiving agent's name (``agent_type`` on the wire).
        source_agent: The agent that handed off.
        call_id: The handoff tool call's id.
        stream: The subsession stream, ``AgentSubsession-{session}-{agent_id}``.
        parent_stream: The stream of the agent that handed off.
        prompt: The handoff call's arguments (``""`` when it had none).
    """

    agent_id: str
    agent_name: str
    source_agent: str
    call_id: str
    stream: str
    parent_stream: str
    prompt: str


def encode_subagent_started(
    subagent: Subagent,
    *,
    item_json: str | None,
    twin: uuid.UUID,
    timestamp: datetime,
    authority: dict[str, Any] | None = None,
) -> bytes:
    """Return ``SubagentStarted`` data: with the handoff call item on the parent's copy.

    ``authority`` (the receiver's granted authority, JSON form) goes to
    ``extensions.agentjournal.granted_authority`` as compact JSON text.
    """
    message = SubagentStarted(
        agent_id=subagent.agent_id,
        agent_type=subagent.agent_name,
        prompt=subagent.prompt,
        subsession_stream=subagent.stream,
    )
    message.timestamp.FromDatetime(timestamp)
    openai: dict[str, Any] = {
        "source_agent": subagent.source_agent,
        "call_id": subagent.call_id,
        "parent_stream": subagent.parent_stream,
        "twin_event_id": str(twin),
    }
    if item_json is not None:
        openai["item_json"] = item_json
    message.extensions["openai"].update(openai)
    if authority is not None:
        message.extensions["agentjournal"].update(
            {"granted_authority": json.dumps(authority, sort_keys=True, separators=(",", ":"))}
        )
    text: str = to_json(message)
    return text.encode()


def granted_authority(body: Mapping[str, Any]) -> Any:
    """The ``granted_authority`` JSON a ``SubagentStarted`` body carries, or None.

    Raises:
        CodecError: It is there but not JSON.
    """
    extensions = body.get("extensions")
    mine = extensions.get("agentjournal") if isinstance(extensions, Mapping) else None
    text = mine.get("granted_authority") if isinstance(mine, Mapping) else None
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError as error:
        raise CodecError(f"granted_authority is not JSON: {error}") from None


def decode_subagent_started(data: bytes) -> tuple[Subagent, str | None]:
    """Return the subagent a ``SubagentStarted`` opens and the handoff item's JSON, if held.

    Parsed as plain JSON (the read path meets these often; protobuf parsing costs
    ten times more) and checked field by field.
    """
    body = _object(data, SUBAGENT_STARTED)
    openai = _openai(body, SUBAGENT_STARTED)
    try:
        prompt = body.get("prompt", "")
        subagent = Subagent(
            agent_id=_typed(body, "agent_id", str),
            agent_name=_typed(body, "agent_type", str),
            source_agent=_typed(openai, "source_agent", str),
            call_id=_typed(openai, "call_id", str),
            stream=_typed(body, "subsession_stream", str),
            parent_stream=_typed(openai, "parent_stream", str),
            prompt=prompt if isinstance(prompt, str) else "",
        )
    except KeyError as missing:
        raise CodecError(f"{SUBAGENT_STARTED} lacks {missing}") from None
    if not subagent.agent_id or not subagent.stream:
        raise CodecError(f"{SUBAGENT_STARTED} has an empty agent_id or subsession_stream")
    item_json = openai.get("item_json")
    return subagent, item_json if isinstance(item_json, str) else None


def encode_subagent_completed(
    subagent: Subagent,
    *,
    outcome: str,
    summary: str,
    reason: str | None,
    twin: uuid.UUID,
    timestamp: datetime,
) -> bytes:
    """Return ``SubagentCompleted`` data (the same on both copies but for the twin id)."""
    if outcome not in OUTCOMES:
        raise InvalidInput(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
    message = SubagentCompleted(agent_id=subagent.agent_id, outcome=outcome, summary=summary)
    message.timestamp.FromDatetime(timestamp)
    openai: dict[str, Any] = {
        "subsession_stream": subagent.stream,
        "parent_stream": subagent.parent_stream,
        "twin_event_id": str(twin),
    }
    if reason:
        openai["reason"] = reason
    message.extensions["openai"].update(openai)
    text: str = to_json(message)
    return text.encode()


def decode_subagent_completed(data: bytes) -> tuple[str, str, str]:
    """Return (agent_id, subsession stream, outcome) of a ``SubagentCompleted``."""
    body = _object(data, SUBAGENT_COMPLETED)
    openai = _openai(body, SUBAGENT_COMPLETED)
    try:
        outcome = _typed(body, "outcome", str)
        return _typed(body, "agent_id", str), _typed(openai, "subsession_stream", str), outcome
    except KeyError as missing:
        raise CodecError(f"{SUBAGENT_COMPLETED} lacks {missing}") from None


def _openai(body: dict[str, Any], type_: str) -> dict[str, Any]:
    extensions = body.get("extensions")
    openai = extensions.get("openai") if isinstance(extensions, dict) else None
    if not isinstance(openai, dict):
        raise CodecError(f"{type_} lacks extensions.openai")
    return openai
