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
from dataclasses import dataclass, field
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
    "CHAIN_KEY",
    "CHAIN_KEYS",
    "EXTENSION_EVENT_TYPE",
    "GENESIS",
    "HASH_KEY",
    "ITEM_EVENT_TYPES",
    "PREV_KEY",
    "SEQ_KEY",
    "BRANCH_ADDED",
    "BRANCH_DELETED",
    "BRANCH_EVENTS",
    "BRANCH_FORKED",
    "BRANCH_REMOVED",
    "BRANCH_STARTED",
    "LINE_GUARDED",
    "SUBAGENT_CONTINUED",
    "TURN_KEY",
    "TURN_USAGE",
    "BranchAdded",
    "BranchDeleted",
    "BranchForked",
    "BranchRemoved",
    "BranchStarted",
    "Cut",
    "ItemPlace",
    "LineGuarded",
    "StreamPlace",
    "SubagentContinued",
    "TurnUsage",
    "cut_words",
    "turn_of",
    "CALL_ID_KEY",
    "CLOSES_HASH_KEY",
    "GUARDED_KEY",
    "ITEM_TYPE_KEY",
    "TOOL_RULE_KEY",
    "CLOSES_KEY",
    "INDEX_KEY",
    "LINE_END_KEY",
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

# --- The chain keys every sealed event carries (see agentjournal.ledger.chain) and the item
# event types a session reads items from (see agentjournal.engine.codec): vocabulary every
# layer reads.

SEQ_KEY: Final = "aj.seq"
PREV_KEY: Final = "aj.prev"
HASH_KEY: Final = "aj.hash"
CHAIN_KEY: Final = "aj.chain"
CHAIN_KEYS: Final = frozenset({SEQ_KEY, PREV_KEY, HASH_KEY, CHAIN_KEY})
GENESIS: Final = "0" * 64
"""The ``aj.prev`` of a stream's first event."""

EXTENSION_EVENT_TYPE: Final = "OpenAIItemRecorded"
"""Event type of every item without a canonical counterpart (JSON, not protobuf)."""

ITEM_EVENT_TYPES: Final = frozenset(
    {
        "UserMessageReceived",
        "AssistantTextGenerated",
        "AssistantToolCallsGenerated",
        "ToolResultReceived",
        "AssistantThinkingGenerated",
        "InterruptIssued",
        "InterruptResolved",
        EXTENSION_EVENT_TYPE,
    }
)
"""The event types the codec writes items as: the ones a session reads items from."""

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
"""One model response: usage, model, agent, times (:class:`agentjournal.tokens.ModelResponse`)."""
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
LINE_END_KEY: Final = "aj.line_end"
"""On both copies of each ``SubagentCompleted`` that the end of a branch line writes (a
subagent open on a line that ``delete_branch`` or ``clear_session`` ends, closed
``cancelled`` in the same write): the id of that line's ``agentjournal.BranchDeleted``."""


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


# -- branches (issue 19, DESIGN §17) -------------------------------------------------

BRANCH_FORKED: Final = "agentjournal.BranchForked"
BRANCH_STARTED: Final = "agentjournal.BranchStarted"
SUBAGENT_CONTINUED: Final = "agentjournal.SubagentContinued"
BRANCH_DELETED: Final = "agentjournal.BranchDeleted"
BRANCH_ADDED: Final = "agentjournal.BranchAdded"
BRANCH_REMOVED: Final = "agentjournal.BranchRemoved"
TURN_USAGE: Final = "agentjournal.TurnUsage"
LINE_GUARDED: Final = "agentjournal.LineGuarded"
BRANCH_EVENTS: Final = frozenset(
    {
        LINE_GUARDED,
        BRANCH_FORKED,
        BRANCH_STARTED,
        SUBAGENT_CONTINUED,
        BRANCH_DELETED,
        BRANCH_ADDED,
        BRANCH_REMOVED,
        TURN_USAGE,
    }
)
"""The event types of branches: none holds conversation (a redacted bundle keeps them)."""

TURN_KEY: Final = "aj.turn"
"""On an item event whose item has ``role == "user"``: its turn number on its line when it
was written (decimal, from 1)."""

CUT_KINDS: Final = ("index", "turn", "revision")
DELETE_REASONS: Final = ("deleted", "cleared")


def turn_of(metadata: Mapping[str, str]) -> int | None:
    """The ``aj.turn`` of an event's metadata: None when absent or not a turn number (>= 1)."""
    text = metadata.get(TURN_KEY)
    if text is None or not text.isascii() or not text.isdigit():
        return None
    turn = int(text)
    return turn if turn >= 1 and str(turn) == text else None


def _int(body: Mapping[str, Any], key: str, type_: str, *, least: int = 0) -> int:
    try:
        value = body[key]
    except KeyError:
        raise CodecError(f"{type_} lacks {key!r}") from None
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise CodecError(f"{type_}: {key} must be an integer >= {least}, got {value!r}")
    return value


def _str(body: Mapping[str, Any], key: str, type_: str, *, empty: bool = False) -> str:
    try:
        value = body[key]
    except KeyError:
        raise CodecError(f"{type_} lacks {key!r}") from None
    if not isinstance(value, str) or (not value and not empty):
        raise CodecError(f"{type_}: {key} must be a non-empty string, got {value!r}")
    return value


def _event_id(body: Mapping[str, Any], key: str, type_: str) -> str:
    """``body[key]``: the text of an event id (a UUID)."""
    value = _str(body, key, type_)
    try:
        uuid.UUID(value)
    except ValueError:
        raise CodecError(f"{type_}: {key} must be an event id, got {value!r}") from None
    return value


def _optional_str(body: Mapping[str, Any], key: str, type_: str) -> str | None:
    if body.get(key) is None:
        if key not in body:
            raise CodecError(f"{type_} lacks {key!r}")
        return None
    return _str(body, key, type_, empty=True)


def _mapping(body: Mapping[str, Any], key: str, type_: str) -> Mapping[str, Any]:
    try:
        value = body[key]
    except KeyError:
        raise CodecError(f"{type_} lacks {key!r}") from None
    if not isinstance(value, dict):
        raise CodecError(f"{type_}: {key} must be a JSON object, got {value!r}")
    return value


def _compact(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class StreamPlace:
    """One event a fork binds to: a stream, a revision and that event's chain hash.

    The verifier checks that the stream holds at ``revision`` an event whose ``aj.hash``
    is ``hash``: everything before it on that stream is then the chain's.
    """

    stream: str
    revision: int
    hash: str

    def to_json(self) -> dict[str, Any]:
        """Its JSON object."""
        return {"stream": self.stream, "revision": self.revision, "hash": self.hash}

    @classmethod
    def from_json(cls, body: Any, type_: str) -> StreamPlace:
        """Read one back from ``type_``'s data.

        Raises:
            CodecError: ``body`` is not such an object.
        """
        if not isinstance(body, dict):
            raise CodecError(f"{type_}: a stream place must be a JSON object, got {body!r}")
        return cls(
            _str(body, "stream", type_), _int(body, "revision", type_), _str(body, "hash", type_)
        )


def cut_words(kind: str, value: object) -> str:
    """Where a branch leaves its parent, as the tools print it: ``before #N``,
    ``before turn T`` or ``after @R`` (a kind this version does not know: ``at KIND V``)."""
    return {
        "index": f"before #{value}",
        "turn": f"before turn {value}",
        "revision": f"after @{value}",
    }.get(kind, f"at {kind} {value}")


@dataclass(frozen=True, slots=True)
class Cut:
    """Where a branch leaves its parent line.

    Attributes:
        kind: ``index`` (before item #value), ``turn`` (before turn value's user message) or
            ``revision`` (after revision value of the parent line's top stream).
        value: The index, turn or revision asked for.
        position: The global position the cut resolves to: the parent line's events
            before it are the branch's prefix.
    """

    kind: str
    value: int
    position: int

    def to_json(self) -> dict[str, Any]:
        """Its JSON object."""
        return {"kind": self.kind, "value": self.value, "position": self.position}

    def text(self) -> str:
        """Where it leaves the parent, as the tools print it (:func:`cut_words`)."""
        return cut_words(self.kind, self.value)

    @classmethod
    def from_json(cls, body: Any, type_: str) -> Cut:
        """Read one back from ``type_``'s data.

        Raises:
            CodecError: ``body`` is not such an object.
        """
        if not isinstance(body, dict):
            raise CodecError(f"{type_}: cut must be a JSON object, got {body!r}")
        kind = _str(body, "kind", type_)
        if kind not in CUT_KINDS:
            raise CodecError(f"{type_}: cut kind must be one of {CUT_KINDS}, got {kind!r}")
        return cls(kind, _int(body, "value", type_), _int(body, "position", type_))


@dataclass(frozen=True, slots=True)
class BranchForked:
    """``agentjournal.BranchForked``: a branch left this line (on the parent line's top stream).

    Attributes:
        session_id: The session.
        branch: The branch's name (any non-blank text).
        branch_stream: Its top stream (``BranchStarted`` at revision 0).
        parent: The parent line's name (``"main"`` or a branch's).
        cut: Where it leaves the parent line.
        base: The parent line's last event before the cut on its top stream, then on each
            subagent open there (the ``aj.open`` chain, outermost first).
        authority: The parent line's authority log's last event before the cut, or None.
        next_index: The next free message index at the cut (the branch's first own item's).
        prefix_items: How many items were visible on the parent line at the cut.
    """

    session_id: str
    branch: str
    branch_stream: str
    parent: str
    cut: Cut
    base: tuple[StreamPlace, ...]
    authority: StreamPlace | None
    next_index: int
    prefix_items: int

    EVENT_TYPE: ClassVar[str] = BRANCH_FORKED

    def _body(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "branch": self.branch,
            "branch_stream": self.branch_stream,
            "parent": self.parent,
            "cut": self.cut.to_json(),
            "base": [place.to_json() for place in self.base],
            "authority": None if self.authority is None else self.authority.to_json(),
            "next_index": self.next_index,
            "prefix_items": self.prefix_items,
        }

    def encode(self) -> bytes:
        """Compact UTF-8 JSON."""
        return _compact(self._body())

    @classmethod
    def _fields(cls, body: Mapping[str, Any], type_: str) -> dict[str, Any]:
        base = body.get("base")
        if not isinstance(base, list) or not base:
            raise CodecError(f"{type_}: base must be a non-empty list, got {base!r}")
        places = tuple(StreamPlace.from_json(place, type_) for place in base)
        if len({place.stream for place in places}) != len(places):
            raise CodecError(f"{type_}: base names a stream twice")
        if "authority" not in body:
            raise CodecError(f"{type_} lacks 'authority'")
        authority = body["authority"]
        return {
            "session_id": _str(body, "session_id", type_),
            "branch": _str(body, "branch", type_),
            "branch_stream": _str(body, "branch_stream", type_),
            "parent": _str(body, "parent", type_),
            "cut": Cut.from_json(body.get("cut"), type_),
            "base": places,
            "authority": None if authority is None else StreamPlace.from_json(authority, type_),
            "next_index": _int(body, "next_index", type_),
            "prefix_items": _int(body, "prefix_items", type_),
        }

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Read it back.

        Raises:
            CodecError: The data is not such an event.
        """
        return cls(**cls._fields(_object(data, cls.EVENT_TYPE), cls.EVENT_TYPE))


@dataclass(frozen=True, slots=True)
class BranchStarted(BranchForked):
    """``agentjournal.BranchStarted``: revision 0 of a branch's top stream, the twin of its
    ``BranchForked``, with the same fields and ``continuations``.

    A reader meeting it going backwards carries on in the parent line below the base
    revisions, as if the prefix were the older part of this stream.

    Attributes:
        continuations: Each subagent open at the cut (its subsession stream) -> the
            stream that continues it on the branch (``SubagentContinued`` at revision 0).
    """

    continuations: Mapping[str, str] = field(default_factory=dict)

    EVENT_TYPE: ClassVar[str] = BRANCH_STARTED

    def _body(self) -> dict[str, Any]:
        return {**BranchForked._body(self), "continuations": dict(self.continuations)}

    @classmethod
    def _fields(cls, body: Mapping[str, Any], type_: str) -> dict[str, Any]:
        continuations = _mapping(body, "continuations", type_)
        if not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in continuations.items()
        ):
            raise CodecError(f"{type_}: continuations must map streams to streams")
        return {**BranchForked._fields(body, type_), "continuations": dict(continuations)}


@dataclass(frozen=True, slots=True)
class SubagentContinued:
    """``agentjournal.SubagentContinued``: revision 0 of a continuation stream, which carries a
    subagent open at a fork on the branch (its readers go on in ``continues`` below it).

    Attributes:
        agent_id: The continuation's agent id (:func:`agentjournal.streams.continuation_id`).
        agent_type: The agent's name (as on the original ``SubagentStarted``).
        source_agent: The agent that handed off (as on the original).
        call_id: The handoff's call id (as on the original).
        subsession_stream: This stream.
        parent_stream: The stream of the agent that handed off, on the branch's side.
        continues: The original subsession's last event before the cut.
        granted_authority: The original's granted authority (JSON form), or None.
    """

    agent_id: str
    agent_type: str
    source_agent: str
    call_id: str
    subsession_stream: str
    parent_stream: str
    continues: StreamPlace
    granted_authority: Any

    EVENT_TYPE: ClassVar[str] = SUBAGENT_CONTINUED

    def encode(self) -> bytes:
        """Compact UTF-8 JSON."""
        return _compact(
            {
                "agent_id": self.agent_id,
                "agent_type": self.agent_type,
                "source_agent": self.source_agent,
                "call_id": self.call_id,
                "subsession_stream": self.subsession_stream,
                "parent_stream": self.parent_stream,
                "continues": self.continues.to_json(),
                "granted_authority": self.granted_authority,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> SubagentContinued:
        """Read it back.

        Raises:
            CodecError: The data is not such an event.
        """
        type_ = cls.EVENT_TYPE
        body = _object(data, type_)
        if "granted_authority" not in body:
            raise CodecError(f"{type_} lacks 'granted_authority'")
        return cls(
            agent_id=_str(body, "agent_id", type_),
            agent_type=_str(body, "agent_type", type_, empty=True),
            source_agent=_str(body, "source_agent", type_, empty=True),
            call_id=_str(body, "call_id", type_, empty=True),
            subsession_stream=_str(body, "subsession_stream", type_),
            parent_stream=_str(body, "parent_stream", type_),
            continues=StreamPlace.from_json(body.get("continues"), type_),
            granted_authority=body["granted_authority"],
        )


@dataclass(frozen=True, slots=True)
class BranchDeleted:
    """``agentjournal.BranchDeleted``: the branch was deleted or cleared (on its top stream).

    It folds as a clear of everything on the line; nothing is written to it afterwards.

    Attributes:
        branch: The branch's name.
        reason: ``deleted`` (``delete_branch``) or ``cleared`` (``clear_session``).
        through_index: The highest message index it hides (-1: none existed).
    """

    branch: str
    reason: str
    through_index: int

    EVENT_TYPE: ClassVar[str] = BRANCH_DELETED

    def encode(self) -> bytes:
        """Compact UTF-8 JSON."""
        return _compact(
            {"branch": self.branch, "reason": self.reason, "through_index": self.through_index}
        )

    @classmethod
    def decode(cls, data: bytes) -> BranchDeleted:
        """Read it back.

        Raises:
            CodecError: The data is not such an event.
        """
        type_ = cls.EVENT_TYPE
        body = _object(data, type_)
        reason = _str(body, "reason", type_)
        if reason not in DELETE_REASONS:
            raise CodecError(f"{type_}: reason must be one of {DELETE_REASONS}, got {reason!r}")
        return cls(
            _str(body, "branch", type_), reason, _int(body, "through_index", type_, least=-1)
        )


@dataclass(frozen=True, slots=True)
class BranchAdded:
    """``agentjournal.BranchAdded``: an entry of the session's branch registry
    (``AgentBranches-{session_id}``): a branch was forked.

    Attributes:
        branch: Its name.
        stream: Its top stream.
        parent: Its parent line's name.
        event: The id of its ``BranchStarted`` (``BranchRemoved``: of its ``BranchDeleted``).
    """

    branch: str
    stream: str
    parent: str
    event: str

    EVENT_TYPE: ClassVar[str] = BRANCH_ADDED

    def encode(self) -> bytes:
        """Compact UTF-8 JSON."""
        return _compact(
            {
                "branch": self.branch,
                "stream": self.stream,
                "parent": self.parent,
                "event": self.event,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Read it back.

        Raises:
            CodecError: The data is not such an event.
        """
        type_ = cls.EVENT_TYPE
        body = _object(data, type_)
        event = _event_id(body, "event", type_)
        return cls(
            _str(body, "branch", type_),
            _str(body, "stream", type_),
            _str(body, "parent", type_),
            event,
        )


@dataclass(frozen=True, slots=True)
class BranchRemoved(BranchAdded):
    """``agentjournal.BranchRemoved``: a registry entry saying a branch was deleted or cleared
    (``event`` is its ``BranchDeleted``'s id)."""

    EVENT_TYPE: ClassVar[str] = BRANCH_REMOVED


@dataclass(frozen=True, slots=True)
class LineGuarded:
    """``agentjournal.LineGuarded``: holds nothing; it makes a write expect the exact head of
    a line's top stream it has nothing else to append to (DESIGN §17.6).

    KurrentDB's multi-stream append refuses a stream without events, so an expected
    revision alone cannot join a transaction: this event is that expectation. Written at
    the line's head in the same transaction as the event it guards, each naming the other
    (``aj.twin``): by ``clear_session`` when its ``SessionCleared`` lands on a subagent's
    stream (on main's top stream, where every fork of main writes its ``BranchForked``),
    and by ``reset_authority`` on a branch (on the branch's top stream, where its end
    writes ``BranchDeleted``). A racing fork or end conflicts, and the write plans again.

    Attributes:
        event: The id of the event it guards.
        stream: That event's stream.
    """

    event: str
    stream: str

    EVENT_TYPE: ClassVar[str] = LINE_GUARDED

    def encode(self) -> bytes:
        """Compact UTF-8 JSON."""
        return _compact({"event": self.event, "stream": self.stream})

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Read it back.

        Raises:
            CodecError: The data is not such an event.
        """
        type_ = cls.EVENT_TYPE
        body = _object(data, type_)
        event = _event_id(body, "event", type_)
        return cls(event, _str(body, "stream", type_))


@dataclass(frozen=True, slots=True)
class ItemPlace:
    """Where an item is: its event's stream and revision, and which item of the event."""

    stream: str
    revision: int
    part: int

    def to_json(self) -> dict[str, Any]:
        """Its JSON object."""
        return {"stream": self.stream, "revision": self.revision, "part": self.part}


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """``agentjournal.TurnUsage``: a run's usage booked on a turn (``store_run_usage``), on the
    line's top stream.

    Attributes:
        branch: The line's name.
        turn: The turn it is booked on (0: items before the line's first user message,
            as the SDK books them).
        anchor: The turn's first item when it was booked (the booking counts only while
            that item is still visible on the line).
        requests: Model requests.
        input_tokens: Input tokens.
        output_tokens: Output tokens.
        total_tokens: Total tokens.
        input_tokens_details: The SDK's JSON text of the input details, or None.
        output_tokens_details: The same for output, or None.
    """

    branch: str
    turn: int
    anchor: ItemPlace
    requests: int
    input_tokens: int
    output_tokens: int
    total_tokens: int
    input_tokens_details: str | None
    output_tokens_details: str | None

    EVENT_TYPE: ClassVar[str] = TURN_USAGE

    def encode(self) -> bytes:
        """Compact UTF-8 JSON."""
        return _compact(
            {
                "branch": self.branch,
                "turn": self.turn,
                "anchor": self.anchor.to_json(),
                "requests": self.requests,
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "total_tokens": self.total_tokens,
                "input_tokens_details": self.input_tokens_details,
                "output_tokens_details": self.output_tokens_details,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> TurnUsage:
        """Read it back.

        Raises:
            CodecError: The data is not such an event.
        """
        type_ = cls.EVENT_TYPE
        body = _object(data, type_)
        anchor = _mapping(body, "anchor", type_)
        return cls(
            branch=_str(body, "branch", type_),
            turn=_int(body, "turn", type_, least=0),
            anchor=ItemPlace(
                _str(anchor, "stream", type_),
                _int(anchor, "revision", type_),
                _int(anchor, "part", type_),
            ),
            requests=_int(body, "requests", type_),
            input_tokens=_int(body, "input_tokens", type_),
            output_tokens=_int(body, "output_tokens", type_),
            total_tokens=_int(body, "total_tokens", type_),
            input_tokens_details=_optional_str(body, "input_tokens_details", type_),
            output_tokens_details=_optional_str(body, "output_tokens_details", type_),
        )
