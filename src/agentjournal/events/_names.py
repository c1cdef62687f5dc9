"""Event type names and metadata keys: the chain's, the items', and agentjournal's own.

Every layer reads these; none of them depends on how an event's data is encoded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from kurrent_agent_schema import SCHEMA_VERSION, USAGE_METADATA_KEY

# --- The chain keys every sealed event carries (see agentjournal.ledger.chain).

SEQ_KEY: Final = "aj.seq"
PREV_KEY: Final = "aj.prev"
HASH_KEY: Final = "aj.hash"
CHAIN_KEY: Final = "aj.chain"
CHAIN_KEYS: Final = frozenset({SEQ_KEY, PREV_KEY, HASH_KEY, CHAIN_KEY})
GENESIS: Final = "0" * 64
"""The ``aj.prev`` of a stream's first event."""

# --- The item event types a session reads items from (see agentjournal.engine.codec).

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

# --- Metadata keys.

SCHEMA_VERSION_KEY: Final = "$schema_version"
"""``"2"`` on every event (schema v2)."""
SCHEMA_VERSION_VALUE: Final = str(SCHEMA_VERSION)
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
STARTED_AT_KEY: Final = "aj.started_at"
"""On the event of a tool call's output: when the tool started (RFC 3339 UTC)."""
ENDED_AT_KEY: Final = "aj.ended_at"
"""On the event of a tool call's output: when the tool returned or raised (RFC 3339 UTC)."""
"""The item's ``call_id``, on tool call and tool output item events."""
ITEM_TYPE_KEY: Final = "aj.item_type"
"""The item's ``type`` (``function_call``, ``function_call_output``, ...), with ``aj.call_id``."""
GUARDED_KEY: Final = "aj.guarded"
"""``"1"`` on a tool call item (any kind the runner executes locally) written by a
session with a guardrail: a verifier expects a decision for it."""
TOOL_RULE_KEY: Final = "aj.tool_rule"
"""On a tool call item written by a session with a policy: the tool's rule as JSON
(``{"scope", "ceilings"}``, or ``null`` when the policy has none)."""
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
LINE_END_KEY: Final = "aj.line_end"
"""On both copies of each ``SubagentCompleted`` that the end of a branch line writes (a
subagent open on a line that ``delete_branch`` or ``clear_session`` ends, closed
``cancelled`` in the same write): the id of that line's ``agentjournal.BranchDeleted``."""

INTERRUPT_KEY: Final = "aj.interrupt"
"""On the ``InterruptIssued``/``InterruptResolved`` agentjournal writes for a function tool's
approval: the interrupt's kind (``"tool_approval"``). Such an event is no item: readers of
a session's items skip it (the codec's MCP approval items carry ``aj.index`` and no
``aj.interrupt``)."""

TURN_KEY: Final = "aj.turn"
"""On an item event whose item has ``role == "user"``: its turn number on its line when it
was written (decimal, from 1)."""


def holds_item(type_: str, metadata: Mapping[str, str]) -> bool:
    """Whether an event of ``type_`` with ``metadata`` holds session items: one of the item
    event types, and not an interrupt agentjournal wrote beside the items (``aj.interrupt``)."""
    return type_ in ITEM_EVENT_TYPES and INTERRUPT_KEY not in metadata


def turn_of(metadata: Mapping[str, str]) -> int | None:
    """The ``aj.turn`` of an event's metadata: None when absent or not a turn number (>= 1)."""
    text = metadata.get(TURN_KEY)
    if text is None or not text.isascii() or not text.isdigit():
        return None
    turn = int(text)
    return turn if turn >= 1 and str(turn) == text else None


# --- Event types: the canonical ones agentjournal writes itself, then its own.

SESSION_STARTED: Final = "SessionStarted"
SUBAGENT_STARTED: Final = "SubagentStarted"
SUBAGENT_COMPLETED: Final = "SubagentCompleted"

ITEM_POPPED: Final = "agentjournal.ItemPopped"
SESSION_CLEARED: Final = "agentjournal.SessionCleared"
MODEL_RESPONDED: Final = "agentjournal.ModelResponded"
"""One model response: usage, model, agent, times (:class:`agentjournal.tokens.ModelResponse`)."""
GUARDRAIL_DECIDED: Final = "agentjournal.GuardrailDecided"
AUTHORITY_REFUSED: Final = "agentjournal.AuthorityRefused"
AUTHORITY_GRANTED: Final = "agentjournal.AuthorityGranted"
POLICY_RECORDED: Final = "agentjournal.PolicyRecorded"
AUTHORITY_HELD: Final = "agentjournal.AuthorityHeld"
AUTHORITY_RESET: Final = "agentjournal.AuthorityReset"

BRANCH_FORKED: Final = "agentjournal.BranchForked"
BRANCH_STARTED: Final = "agentjournal.BranchStarted"
SUBAGENT_CONTINUED: Final = "agentjournal.SubagentContinued"
BRANCH_DELETED: Final = "agentjournal.BranchDeleted"
BRANCH_ADDED: Final = "agentjournal.BranchAdded"
BRANCH_REMOVED: Final = "agentjournal.BranchRemoved"
TURN_USAGE: Final = "agentjournal.TurnUsage"
INTERRUPT_ISSUED: Final = "InterruptIssued"
INTERRUPT_RESOLVED: Final = "InterruptResolved"
RUN_PAUSED: Final = "agentjournal.RunPaused"
"""A run stopped on approvals: its SDK ``RunState`` as text, so any process can resume it."""
RUN_RESUMED: Final = "agentjournal.RunResumed"
"""A paused run taken up to be resumed: at most one process resumes it (unless retaken)."""
LINE_GUARDED: Final = "agentjournal.LineGuarded"
SUBJECT_ERASED: Final = "agentjournal.SubjectErased"
"""A data subject's keys were destroyed: its sealed content reads ``[erased]``."""
EVAL_RUN_STARTED: Final = "EvalRunStarted"
"""An eval run began: what it scores and with which scorers (on ``EvalRun-{run_id}``)."""
TURN_SCORED: Final = "TurnScored"
"""One scorer's score of one turn of one session line (or a person's rating)."""
SESSION_SCORED: Final = "SessionScored"
"""A session line's score in an eval run: the mean of its scores."""
EVAL_RUN_COMPLETED: Final = "EvalRunCompleted"
"""An eval run ended: turns scored, the averages, what the judge cost."""
EVAL_EVENTS: Final = frozenset({EVAL_RUN_STARTED, TURN_SCORED, SESSION_SCORED, EVAL_RUN_COMPLETED})
"""The canonical eval event types, written on ``EvalRun-{run_id}`` streams only."""
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
