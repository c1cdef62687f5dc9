"""What the session page draws besides its lanes: the conversation and the waterfall (pure).

Both take the events of one line in commit order (the page's ``events`` list: the index
of an event here is its index there) and return JSON-ready data that names events by
that index, so a click anywhere selects the same stored record.

:func:`conversation` nests each handoff: the parent's ``SubagentStarted`` opens a block
that holds what the receiver did, up to the parent's ``SubagentCompleted``. A
guardrail decision or an authority refusal that names a call is attached to that call
(or to the handoff it judged) where it happened; one that names none (an agent's
input, its response) stays in its place. A subagent continued on a branch
(``SubagentContinued``) is a block of its own under the stream it continues.

:func:`waterfall` places what took time, in milliseconds from the line's first
moment: each run (the events of one ``trace_id``), each model call (``ModelResponded``
``started_at``/``ended_at``), each tool call (``aj.started_at``/``aj.ended_at`` on its
output's event) and each guardrail check (``latency_ms`` up to its own append). Only
recorded times are drawn: an event without them has no bar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from agentjournal import events
from agentjournal.records import Record

STARTED_KEY: Final = "aj.started_at"
"""Metadata of a tool call's output event: when the tool started (RFC 3339 UTC)."""
ENDED_KEY: Final = "aj.ended_at"
"""Metadata of a tool call's output event: when the tool ended (RFC 3339 UTC)."""

_USER_MESSAGE_RECEIVED: Final = "UserMessageReceived"
_ASSISTANT_TEXT_GENERATED: Final = "AssistantTextGenerated"
_ASSISTANT_THINKING_GENERATED: Final = "AssistantThinkingGenerated"
_ASSISTANT_TOOL_CALLS_GENERATED: Final = "AssistantToolCallsGenerated"
_TOOL_RESULT_RECEIVED: Final = "ToolResultReceived"
_JUDGES: Final = frozenset({events.GUARDRAIL_DECIDED, events.AUTHORITY_REFUSED})


def said(record: Record) -> dict[str, Any] | None:
    """What an item event says, whole (the conversation's bubble), or None for an event
    that is no item: ``{"role", "text"}``, or ``{"role": "call", "calls": [...]}`` for
    tool calls (name and arguments as JSON text), ``{"role": "result", "text"}``."""
    body = record.body
    if not isinstance(body, dict):
        return None
    kind = record.type
    if kind == _USER_MESSAGE_RECEIVED:
        return {"role": "user", "text": _as_text(body.get("content"))}
    if kind == _ASSISTANT_TEXT_GENERATED:
        return {"role": "assistant", "text": _as_text(body.get("content"))}
    if kind == _ASSISTANT_THINKING_GENERATED:
        return {"role": "thinking", "text": _as_text(body.get("content"))}
    if kind == _ASSISTANT_TOOL_CALLS_GENERATED:
        calls = body.get("tool_calls")
        return {
            "role": "call",
            "calls": [
                {
                    "name": _as_text(call.get("tool_name")),
                    "call_id": _as_text(call.get("call_id")),
                    "arguments": _as_text(call.get("arguments")),
                }
                for call in (calls if isinstance(calls, list) else [])
                if isinstance(call, dict)
            ],
        }
    if kind == _TOOL_RESULT_RECEIVED:
        return {"role": "result", "text": _as_text(body.get("result"))}
    return None


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def conversation(
    records: Sequence[Record], agents: Mapping[str, str], top: str
) -> list[dict[str, Any]]:
    """The line's conversation as nested nodes (see the module docs).

    A node is ``{"event": i, "checks": [j, ...]}`` (an event and the decisions that
    judged it) or ``{"block": {...}}``: ``agent``, ``stream``, ``open`` (the parent's
    ``SubagentStarted``, or the ``SubagentContinued``), ``close`` (the parent's
    ``SubagentCompleted``, or None while open), ``outcome``, ``checks`` and ``nodes``.

    Args:
        records: The line's events in commit order (logs excluded).
        agents: Stream -> the agent speaking there.
        top: The line's top stream.
    """
    root: list[dict[str, Any]] = []
    blocks: dict[str, dict[str, Any]] = {}
    children: dict[str, list[dict[str, Any]]] = {top: root}
    # Where a decision that names a call goes: that call's node (a tool call, a handoff).
    by_call: dict[str, dict[str, Any]] = {}
    waiting: dict[str, list[int]] = {}
    open_streams: list[str] = [top]

    def home(stream: str) -> list[dict[str, Any]]:
        found = children.get(stream)
        if found is not None:
            return found
        # A stream nobody opened on this line (a decision on the authority log): the
        # innermost block still open.
        return children[open_streams[-1]]

    for index, record in enumerate(records):
        body = record.body if isinstance(record.body, dict) else {}
        child = record.opens
        if child is not None:
            block = _block(record, index, agents.get(child, child), child)
            home(record.stream).append({"block": block})
            blocks[child] = block
            children[child] = block["nodes"]
            open_streams.append(child)
            _learn_call(by_call, waiting, _handoff_call(body), block)
            continue
        if record.type == events.SUBAGENT_CONTINUED:
            parent = body.get("parent_stream")
            block = _block(record, index, agents.get(record.stream, record.stream), record.stream)
            home(parent if isinstance(parent, str) else top).append({"block": block})
            blocks[record.stream] = block
            children[record.stream] = block["nodes"]
            open_streams.append(record.stream)
            continue
        if record.type == events.SUBAGENT_STARTED:
            continue  # the twin on the subsession: its block says it
        if record.type == events.SUBAGENT_COMPLETED:
            closes = record.metadata.get(events.CLOSES_KEY)
            if closes is None:
                continue  # the twin's copy: the parent's copy closes the block
            closed = blocks.get(closes)
            if closed is not None:
                closed["close"] = index
                closed["outcome"] = _as_text(body.get("outcome"))
                if closes in open_streams:
                    open_streams.remove(closes)
                continue
        node: dict[str, Any] = {"event": index, "checks": []}
        if record.type in _JUDGES:
            call = body.get("call_id")
            target = by_call.get(call) if isinstance(call, str) else None
            if target is not None:
                target["checks"].append(index)
                continue
            if isinstance(call, str) and call:
                # Decided before its call's item was written: it joins the call when it
                # comes, and stays here if it never does (a run stopped).
                waiting.setdefault(call, []).append(index)
            home(record.stream).append(node)
            continue
        for call in _calls_of(record, body):
            _learn_call(by_call, waiting, call, node)
        home(record.stream).append(node)
    _drop_moved(root, waiting)
    return root


def _block(record: Record, index: int, agent: str, stream: str) -> dict[str, Any]:
    return {
        "agent": agent,
        "stream": stream,
        "open": index,
        "close": None,
        "outcome": None,
        "continued": record.type == events.SUBAGENT_CONTINUED,
        "checks": [],
        "nodes": [],
    }


def _handoff_call(body: Mapping[str, Any]) -> str | None:
    openai = body.get("extensions", {})
    openai = openai.get("openai", {}) if isinstance(openai, dict) else {}
    call = openai.get("call_id") if isinstance(openai, dict) else None
    if isinstance(call, str):
        return call
    item = openai.get("item_json") if isinstance(openai, dict) else None
    if isinstance(item, str):
        import json

        try:
            parsed = json.loads(item)
        except ValueError:
            return None
        found = parsed.get("call_id") if isinstance(parsed, dict) else None
        return found if isinstance(found, str) else None
    return None


def _calls_of(record: Record, body: Mapping[str, Any]) -> list[str]:
    """The call ids an item event makes (a tool call item), for the decisions on them."""
    if record.type == _TOOL_RESULT_RECEIVED:
        return []
    found = [
        call["call_id"]
        for call in body.get("tool_calls", ()) or ()
        if isinstance(call, dict) and isinstance(call.get("call_id"), str)
    ]
    named = record.metadata.get(events.CALL_ID_KEY)
    if not found and named is not None:
        found.append(named)
    return found


def _learn_call(
    by_call: dict[str, dict[str, Any]],
    waiting: dict[str, list[int]],
    call: str | None,
    node: dict[str, Any],
) -> None:
    if not call or call in by_call:
        return
    by_call[call] = node
    early = waiting.pop(call, [])
    node["checks"].extend(early)
    node.setdefault("moved", []).extend(early)


def _drop_moved(nodes: list[dict[str, Any]], waiting: Mapping[str, list[int]]) -> None:
    """Remove the decisions that later joined their call from where they first stood."""
    moved: set[int] = set()

    def collect(level: list[dict[str, Any]]) -> None:
        for node in level:
            moved.update(node.pop("moved", ()))
            if "block" in node:
                moved.update(node["block"].pop("moved", ()))
                collect(node["block"]["nodes"])

    def prune(level: list[dict[str, Any]]) -> None:
        level[:] = [n for n in level if "event" not in n or n["event"] not in moved]
        for node in level:
            if "block" in node:
                prune(node["block"]["nodes"])

    collect(nodes)
    if moved:
        prune(nodes)


def waterfall(records: Sequence[Record], agents: Mapping[str, str]) -> dict[str, Any]:
    """The line's timed work as bars (see the module docs): ``{"start", "end", "bars"}``,
    times as ISO text, each bar ``{"kind", "label", "agent", "event", "from", "to"}`` with
    ``from``/``to`` in milliseconds since ``start``; kinds ``run``, ``model``, ``tool``,
    ``guardrail``. Each run comes first, then what it timed in the order it started."""
    spans: list[tuple[str, str, str, int | None, datetime, datetime, str]] = []
    runs: dict[str, list[Any]] = {}
    names: dict[str, str] = {}
    for index, record in enumerate(records):
        body = record.body if isinstance(record.body, dict) else {}
        agent = agents.get(record.stream, record.stream)
        for call in body.get("tool_calls", ()) or ():
            if isinstance(call, dict) and isinstance(call.get("call_id"), str):
                names[call["call_id"]] = _as_text(call.get("tool_name"))
        trace = record.metadata.get("trace_id", "")
        bar = _timed(record, body, names)
        if bar is not None:
            kind, label, start, end = bar
            named = body.get("agent")
            actor = named if isinstance(named, str) else agent
            spans.append((kind, label, actor, index, start, end, trace))
        moment = record.recorded_at
        if not trace or moment is None:
            continue
        run = runs.setdefault(trace, [moment, moment, None])
        run[0], run[1] = min(run[0], moment), max(run[1], moment)
        if bar is not None:
            run[0], run[1] = min(run[0], bar[2]), max(run[1], bar[3])
        if run[2] is None and record.type == _USER_MESSAGE_RECEIVED:
            run[2] = (index, _as_text(body.get("content")))
    for number, (trace, (start, end, first)) in enumerate(runs.items(), 1):
        label = f"run {number}" + (f": {first[1]}" if first is not None else "")
        at = first[0] if first is not None else None
        spans.append(("run", label, "", at, start, end, trace))
    if not spans:
        return {"start": None, "end": None, "bars": []}
    origin = min(span[4] for span in spans)
    last = max(span[5] for span in spans)
    # Each run, then what it timed in the order it started; untraced work by its start.
    began = {trace: times[0] for trace, times in runs.items()}
    spans.sort(key=lambda s: (began.get(s[6], s[4]), s[6], s[0] != "run", s[4]))
    return {
        "start": origin.isoformat(),
        "end": last.isoformat(),
        "bars": [
            {
                "kind": kind,
                "label": label,
                "agent": agent,
                "event": index,
                "from": _ms(start - origin),
                "to": _ms(end - origin),
            }
            for kind, label, agent, index, start, end, _ in spans
        ],
    }


def _timed(
    record: Record, body: Mapping[str, Any], names: Mapping[str, str]
) -> tuple[str, str, datetime, datetime] | None:
    """An event's own bar: (kind, label, start, end), or None when it records no time."""
    if record.type == events.MODEL_RESPONDED:
        start, end = _when(body.get("started_at")), _when(body.get("ended_at"))
        if start is None or end is None or end < start:
            return None
        return "model", f"{_as_text(body.get('model')) or 'model'}", start, end
    if record.type == events.GUARDRAIL_DECIDED:
        latency = body.get("latency_ms")
        end = record.recorded_at
        if end is None or isinstance(latency, bool) or not isinstance(latency, (int, float)):
            return None
        if not 0 <= latency < 86_400_000:
            return None
        label = f"{_as_text(body.get('action_type'))} {_as_text(body.get('subject'))}".strip()
        return "guardrail", label, end - timedelta(milliseconds=latency), end
    start = _when(record.metadata.get(STARTED_KEY))
    end = _when(record.metadata.get(ENDED_KEY))
    if start is None or end is None or end < start:
        return None
    call = body.get("call_id")
    label = names.get(call, "") if isinstance(call, str) else ""
    return "tool", label or _as_text(body.get("tool_name")) or "tool", start, end


def _when(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _ms(delta: timedelta) -> float:
    return round(delta.total_seconds() * 1000, 3)
