"""The canonical schema-v2 events agentjournal writes itself: ``SessionStarted`` and the
twin ``SubagentStarted``/``SubagentCompleted`` of a subagent.

Their bytes are the schema's protobuf JSON (``kurrent_agent_schema.to_json``), so they are
written through its messages, not through agentjournal's own codec; they are read back as
plain JSON (the read path meets them often; protobuf parsing costs ten times more).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from kurrent_agent_schema import SessionStarted, SubagentCompleted, SubagentStarted, to_json

from agentjournal.errors import CodecError, InvalidInput
from agentjournal.events._codec import json_body, plain
from agentjournal.events._names import SUBAGENT_COMPLETED, SUBAGENT_STARTED

OUTCOMES: Final = ("success", "error", "cancelled")

_str = plain(str)


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

    Parsed as plain JSON and checked field by field.
    """
    type_ = SUBAGENT_STARTED
    body = json_body(data, type_)
    openai = _openai(body, type_)
    prompt = body.get("prompt", "")
    subagent = Subagent(
        agent_id=_str(body, "agent_id", type_),
        agent_name=_str(body, "agent_type", type_),
        source_agent=_str(openai, "source_agent", type_),
        call_id=_str(openai, "call_id", type_),
        stream=_str(body, "subsession_stream", type_),
        parent_stream=_str(openai, "parent_stream", type_),
        prompt=prompt if isinstance(prompt, str) else "",
    )
    if not subagent.agent_id or not subagent.stream:
        raise CodecError(f"{type_} has an empty agent_id or subsession_stream")
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
    type_ = SUBAGENT_COMPLETED
    body = json_body(data, type_)
    openai = _openai(body, type_)
    outcome = _str(body, "outcome", type_)
    return _str(body, "agent_id", type_), _str(openai, "subsession_stream", type_), outcome


def _openai(body: dict[str, Any], type_: str) -> dict[str, Any]:
    extensions = body.get("extensions")
    openai = extensions.get("openai") if isinstance(extensions, dict) else None
    if not isinstance(openai, dict):
        raise CodecError(f"{type_} lacks extensions.openai")
    return openai
