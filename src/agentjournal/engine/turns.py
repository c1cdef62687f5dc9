"""Turns of a line, as the SDK's ``AdvancedSQLiteSession`` counts them (pure, SDK-free).

A turn opens at each item whose ``role`` is ``"user"``; every other item belongs to the
current turn (0 before any user message). The SDK stores a message type and a tool name per
row; here both are derived from the item itself, with the SDK's exact rules (DESIGN, "Branches"),
so the four read methods return what the SDK's return for the same items.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentjournal import events

if TYPE_CHECKING:
    from agentjournal.engine.timeline import Entry
    from agentjournal.store.contract import RecordedEvent

TOOL_CALL_TYPES = frozenset(
    {
        "tool_call",
        "function_call",
        "computer_call",
        "file_search_call",
        "web_search_call",
        "code_interpreter_call",
        "tool_search_call",
        "custom_tool_call",
        "mcp_call",
        "mcp_approval_request",
        "shell_call",
        "apply_patch_call",
    }
)
"""The message types the SDK's ``get_tool_usage`` counts as calls."""

_TYPED_TOOLS = frozenset(
    {
        "computer_call",
        "file_search_call",
        "web_search_call",
        "code_interpreter_call",
        "shell_call",
        "apply_patch_call",
        "tool_search_call",
        "tool_search_output",
    }
)


def is_user(item: Any) -> bool:
    """Whether ``item`` opens a turn (a dict whose ``role`` is ``"user"``)."""
    return isinstance(item, dict) and item.get("role") == "user"


def classify(item: Any) -> str:
    """The SDK's message type: ``"user"``/``"assistant"`` by role, else the item's truthy
    ``type``, else ``"other"``."""
    if isinstance(item, dict):
        role = item.get("role")
        if role == "user":
            return "user"
        if role == "assistant":
            return "assistant"
        if item.get("type"):
            return str(item.get("type"))
    return "other"


def tool_name(item: Any) -> str | None:
    """The SDK's tool name of an item (None for items that name no tool).

    MCP calls and approval requests: ``server_label.name`` (or whichever is set); the
    built-in tools without a name: their type (``"tool_search"`` for tool search); any other
    item with a ``name``: ``namespace.name``, or ``name`` alone when the namespace equals it
    (the reserved deferred shape) or is empty.
    """
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if kind in ("mcp_call", "mcp_approval_request") and "server_label" in item:
        label, name = item.get("server_label"), item.get("name")
        if name and label:
            return f"{label}.{name}"
        if label:
            return str(label)
        if name:
            return str(name)
        return None
    if kind in _TYPED_TOOLS:
        return "tool_search" if kind in ("tool_search_call", "tool_search_output") else str(kind)
    if "name" in item:
        name = item.get("name")
        if name is None:
            return None
        text = str(name)
        namespace = item.get("namespace")
        space = str(namespace) if namespace is not None else None
        if text and space and space != text:
            return f"{space}.{text}"
        return text
    return None


@dataclass(frozen=True, slots=True)
class Turned:
    """One visible item of a line with what its turn needs.

    Attributes:
        item: The SDK item.
        turn: The ``aj.turn`` its event carries, or None (a user message written before
            turns were recorded).
        recorded_at: When its event was recorded, if known.
    """

    item: Any
    turn: int | None = None
    recorded_at: datetime | None = None


def number(items: Iterable[Turned]) -> list[tuple[int, Turned]]:
    """Each visible item with its turn number, oldest first.

    A user message's number is its recorded ``aj.turn``; one written before ``aj.turn``
    existed counts on from the previous visible user message (or from 0). Every other item
    belongs to the turn of the newest user message before it. For items written with
    ``aj.turn`` this is the SDK's numbering: both give a new user message the newest visible
    one's number + 1, and only pops from the end or clears take items away.
    """
    current = 0
    numbered: list[tuple[int, Turned]] = []
    for turned in items:
        if is_user(turned.item):
            current = turned.turn if turned.turn is not None else current + 1
        numbered.append((current, turned))
    return numbered


def sdk_timestamp(moment: datetime | None) -> str | None:
    """``moment`` as SQLite's ``CURRENT_TIMESTAMP`` writes it (UTC, ``YYYY-MM-DD HH:MM:SS``)."""
    return None if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _preview(content: Any, limit: int | None) -> str:
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if limit is not None and len(text) > limit:
        return text[:limit] + "..."
    return text


def _turn_row(turn: int, turned: Turned, limit: int | None) -> dict[str, Any]:
    content = turned.item.get("content", "")
    return {
        "turn": turn,
        "content": _preview(content, limit),
        "full_content": content,
        "timestamp": sdk_timestamp(turned.recorded_at),
        "can_branch": True,
    }


def _users(items: Iterable[Turned]) -> list[tuple[int, Turned]]:
    users = [(turn, turned) for turn, turned in number(items) if is_user(turned.item)]
    users.sort(key=lambda pair: pair[0])  # the SDK orders by turn number (a stable sort)
    return users


def conversation_turns(items: Iterable[Turned]) -> list[dict[str, Any]]:
    """``get_conversation_turns``: the user messages by turn, content cut to 100 characters."""
    return [_turn_row(turn, turned, 100) for turn, turned in _users(items)]


def find_turns(items: Iterable[Turned], search_term: str) -> list[dict[str, Any]]:
    """``find_turns_by_content``: the user messages whose text holds ``search_term``.

    Matched as the SDK matches: in the string content, or in each part's ``"text"``; ASCII
    letters case-insensitive, nothing in the term special. A content the SDK cannot read
    (a part that is not a mapping) is skipped, as it skips it.
    """
    pattern = re.compile(re.escape(search_term), re.IGNORECASE | re.ASCII)
    found: list[dict[str, Any]] = []
    for turn, turned in _users(items):
        content = turned.item.get("content", "")
        if isinstance(content, str):
            texts: Sequence[Any] = [content]
        elif isinstance(content, list) and all(isinstance(p, Mapping) for p in content):
            texts = [part.get("text", "") for part in content]
        else:
            continue
        if any(isinstance(t, str) and pattern.search(t) for t in texts):
            found.append(_turn_row(turn, turned, None))
    return found


def by_turns(items: Iterable[Turned]) -> dict[int, list[dict[str, str | None]]]:
    """``get_conversation_by_turns``: every item's type and tool name, by turn."""
    turns: dict[int, list[dict[str, str | None]]] = {}
    for turn, turned in number(items):
        turns.setdefault(turn, []).append(
            {"type": classify(turned.item), "tool_name": tool_name(turned.item)}
        )
    return turns


def tool_usage(items: Iterable[Turned]) -> list[tuple[str | None, int, int]]:
    """``get_tool_usage``: ``(tool name, count, turn)`` per tool and turn, by turn.

    Counted: every call (:data:`TOOL_CALL_TYPES`), and each ``tool_search_output`` in a turn
    with no ``tool_search_call`` (the SDK's rule). Within a turn, by name (None first): the
    SDK leaves that order to SQLite's grouping.
    """
    counts: dict[tuple[int, str | None], int] = {}
    outputs: dict[int, int] = {}
    searched: set[int] = set()
    for turn, turned in number(items):
        kind = classify(turned.item)
        name = tool_name(turned.item)
        if kind in TOOL_CALL_TYPES:
            if kind == "tool_search_call":
                searched.add(turn)
            key = (turn, name if name is not None or kind not in _NAMED_BY_TYPE else kind)
            counts[key] = counts.get(key, 0) + 1
        elif kind == "tool_search_output":
            outputs[turn] = outputs.get(turn, 0) + 1
    for turn, count in outputs.items():
        if turn not in searched:
            counts[(turn, "tool_search")] = counts.get((turn, "tool_search"), 0) + count
    ordered = sorted(counts, key=lambda k: (k[0], k[1] is not None, k[1] or ""))
    return [(name, counts[(turn, name)], turn) for turn, name in ordered]


_NAMED_BY_TYPE = frozenset({"shell_call", "apply_patch_call"})


def joined(
    visible: list[Entry], read: list[tuple[str, list[RecordedEvent]]]
) -> list[tuple[Entry, Turned]]:
    """Each visible item with its event's ``aj.turn`` and time (from ``read``, the line's
    events by stream; None for an item whose event is not among them)."""
    found: dict[tuple[str, int], RecordedEvent] = {
        (stream, event.revision): event for stream, recorded in read for event in recorded
    }
    turned: list[tuple[Entry, Turned]] = []
    for entry in visible:
        event = found.get((entry.stream, entry.revision))
        turned.append(
            (
                entry,
                Turned(
                    entry.item(),
                    None if event is None else events.turn_of(event.metadata),
                    None if event is None else event.recorded_at,
                ),
            )
        )
    return turned
