"""What the verifier reads of a function tool approval's events, from their data or from a
redacted bundle's view of them alike (the view withholds the call's arguments and the
answer's reason, and keeps the digest of the call's payload the question is about)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentjournal import events
from agentjournal._calls import tool_call_payload
from agentjournal._digests import value_digest
from agentjournal.ledger import redaction
from agentjournal.records import Record


@dataclass(frozen=True, slots=True)
class Question:
    """An ``InterruptIssued`` of a function tool call.

    Attributes:
        request_id: The call's id.
        tool: The tool.
        payload_digest: The digest of the call's payload it asks about (the one the call's
            marker holds).
    """

    request_id: str
    tool: str
    payload_digest: str


@dataclass(frozen=True, slots=True)
class Answer:
    """An ``InterruptResolved`` of a function tool call's approval.

    Attributes:
        request_id: The call's id.
        outcome: ``approved`` or ``rejected``.
        issued: The event id of the question it answers.
    """

    request_id: str
    outcome: str
    issued: str


def _approval_body(record: Record, type_: str) -> dict[str, Any] | None:
    if record.type != type_ or record.metadata.get(events.INTERRUPT_KEY) != events.TOOL_APPROVAL:
        return None
    return record.body


def question_of(record: Record) -> Question | None:
    """The question ``record`` asks (None: not a readable function tool approval question)."""
    body = _approval_body(record, events.INTERRUPT_ISSUED)
    if body is None:
        return None
    request_id, tool, prompt = body.get("request_id"), body.get("tool_name"), body.get("prompt", "")
    if not isinstance(request_id, str) or not request_id or not isinstance(tool, str):
        return None
    if isinstance(prompt, str):
        return Question(request_id, tool, value_digest(tool_call_payload(request_id, tool, prompt)))
    digest = prompt.get("payload_digest") if redaction.is_withheld(prompt) else None
    return Question(request_id, tool, digest) if isinstance(digest, str) else None


def answer_of(record: Record) -> Answer | None:
    """The answer ``record`` gives (None: not a readable function tool approval answer)."""
    body = _approval_body(record, events.INTERRUPT_RESOLVED)
    if body is None:
        return None
    extensions = body.get("extensions")
    extension = extensions.get("agentjournal") if isinstance(extensions, dict) else None
    request_id, outcome = body.get("request_id"), body.get("outcome")
    issued = extension.get("issued") if isinstance(extension, dict) else None
    if not isinstance(request_id, str) or not isinstance(issued, str):
        return None
    if outcome not in events.APPROVAL_OUTCOMES:
        return None
    return Answer(request_id, str(outcome), issued)
