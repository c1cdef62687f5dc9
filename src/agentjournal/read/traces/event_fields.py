"""What the trace projector reads off an event: its kind, its author, the tool calls it holds."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from agentjournal import events
from agentjournal._calls import CALL_KINDS, call_of
from agentjournal._fastjson import loads
from agentjournal.read.traces.stored import Event

_USER_MESSAGE: Final = "UserMessageReceived"
INPUT: Final = frozenset({events.SESSION_STARTED, _USER_MESSAGE})
"""What a run's input writes: a trace-less one after other events starts the next run."""
TOOL_CALLS: Final = "AssistantToolCallsGenerated"
TOOL_RESULT: Final = "ToolResultReceived"
OTHER_ITEM: Final = "OpenAIItemRecorded"
OUTPUT_TYPES: Final = frozenset(f"{kind}_output" for kind in CALL_KINDS)
FAILED: Final = frozenset({"error", "cancelled"})
"""The outcomes that end a subagent's span with status ERROR."""
LINE_EVENTS: Final = frozenset(
    {
        events.BRANCH_FORKED,
        events.BRANCH_STARTED,
        events.SUBAGENT_CONTINUED,
        events.BRANCH_DELETED,
        events.LINE_GUARDED,
    }
)
"""A line's own events: they open, continue, guard or end a line and belong to no run (a
``LineGuarded`` is written beside a reset or a clear, outside any run)."""


def author(record: Event) -> str | None:
    """The agent an event speaks for, when it says."""
    body = record.body or {}
    if record.type == events.SUBAGENT_STARTED:
        source = body.get("extensions", {}).get("openai", {}).get("source_agent")
        return source if isinstance(source, str) else None
    for key in ("author_name", "agent"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def calls(record: Event, body: Mapping[str, Any]) -> list[tuple[str, str, str, Any]]:
    """The locally executed calls an item event holds: (kind, call id, name, arguments)."""
    item: Any = None
    if record.type == OTHER_ITEM:
        item = body.get("item")
    else:
        text = body.get("extensions", {}).get("openai", {}).get("item_json")
        if isinstance(text, str):
            try:
                item = loads(text)  # json.loads's value, through orjson where it is the same
            except ValueError:
                item = None
    call = call_of(item) if item is not None else None
    if call is not None:
        return [(call.kind, call.call_id, call.name, call.arguments)]
    if record.type != TOOL_CALLS:
        return []
    found = []  # another integration's event: the canonical fields only
    for entry in body.get("tool_calls", []) or []:
        if isinstance(entry, dict) and isinstance(entry.get("call_id"), str):
            arguments = json.dumps(entry.get("arguments", {}), sort_keys=True)
            found.append(
                ("function_call", entry["call_id"], str(entry.get("tool_name", "")), arguments)
            )
    return found
