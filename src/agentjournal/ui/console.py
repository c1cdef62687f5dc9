"""What the session page draws besides its lanes: the conversation and the waterfall (pure).

Both take the events of one line in commit order (the page's ``events`` list: the index
of an event here is its index there) and return JSON-ready data that names events by
that index, so a click anywhere selects the same stored record.

:func:`conversation` nests each handoff: the parent's ``SubagentStarted`` opens a block
that holds what the receiver did, up to the parent's ``SubagentCompleted``. A
guardrail decision or an authority refusal that names a call is attached to the item
(or the handoff) that makes that call in the same run (its trace); one whose call never
came, or that names none (an agent's input, its response), stays in its place. A
subagent continued on a branch (``SubagentContinued``) is a block of its own under the
stream it continues.

:func:`waterfall` places what took time, in milliseconds from the line's first
moment: each run (the events of one ``trace_id``, split at each user message), each
model call (``ModelResponded`` ``started_at``/``ended_at``), each tool call
(``aj.started_at``/``aj.ended_at`` on its output's event) and each guardrail check
(``latency_ms`` up to its own append). Only recorded times are drawn, and only times a
call can have: an event without them has no bar.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from agentjournal import events
from agentjournal.records import Record

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
    # First the calls: which event makes each call of each run, and so which decisions
    # go on it (a decision is written before its call's item; a call id can come again
    # in a later run, so a decision only ever joins a call of its own run).
    makers: dict[tuple[str, str], int] = {}
    for index, record in enumerate(records):
        body = record.body if isinstance(record.body, dict) else {}
        if events.INTERRUPT_KEY in record.metadata:
            continue  # a question about a call (or its answer) makes none
        made = [_handoff_call(body)] if record.opens is not None else _calls_of(record, body)
        for call in made:
            if call:
                makers.setdefault((_run_of(record), call), index)
    attached: dict[int, list[int]] = {}
    placed: set[int] = set()
    latest: dict[str, int] = {}  # call id -> the newest event so far that made it
    for index, record in enumerate(records):
        body = record.body if isinstance(record.body, dict) else {}
        call = body.get("call_id") if record.type in _JUDGES else None
        target = makers.get((_run_of(record), call)) if isinstance(call, str) else None
        if target is None and isinstance(call, str):
            # A resumed run judging the call its paused run made: on that call.
            target = latest.get(call)
        if events.INTERRUPT_KEY in record.metadata:
            # A person's question about a call, and the answer (often from another
            # process, in no run): on the newest call of that id made before it.
            target = latest.get(record.metadata.get(events.CALL_ID_KEY, ""))
        elif makers.get((_run_of(record), record.metadata.get(events.CALL_ID_KEY, ""))) == index:
            latest[record.metadata[events.CALL_ID_KEY]] = index
        if target is not None:
            attached.setdefault(target, []).append(index)
            placed.add(index)

    root: list[dict[str, Any]] = []
    blocks: dict[str, dict[str, Any]] = {}
    children: dict[str, list[dict[str, Any]]] = {top: root}
    open_streams: list[str] = [top]

    def home(stream: str) -> list[dict[str, Any]]:
        found = children.get(stream)
        if found is not None:
            return found
        # A stream nobody opened on this line (a decision on the authority log): the
        # innermost block still open.
        return children[open_streams[-1]]

    def opened(index: int, record: Record, stream: str, parent: str) -> None:
        block = _block(record, index, agents.get(stream, stream), stream)
        block["checks"] = attached.get(index, [])
        home(parent).append({"block": block})
        children[stream] = block["nodes"]
        blocks[stream] = block
        open_streams.append(stream)

    for index, record in enumerate(records):
        if index in placed:
            continue
        body = record.body if isinstance(record.body, dict) else {}
        child = record.opens
        if child is not None:
            opened(index, record, child, record.stream)
            continue
        if record.type == events.SUBAGENT_CONTINUED:
            parent = body.get("parent_stream")
            opened(index, record, record.stream, parent if isinstance(parent, str) else top)
            continue
        if record.type == events.SUBAGENT_STARTED:
            continue  # the twin on the subsession: its block says it
        if record.type == events.SUBAGENT_COMPLETED:
            closes = _closes(record, body)
            if closes is None:
                continue  # the twin's copy: the parent's copy closes the block
            closed = blocks.get(closes)
            if closed is not None:
                closed["close"] = index
                closed["outcome"] = _as_text(body.get("outcome"))
                if closes in open_streams:
                    open_streams.remove(closes)
                continue
        home(record.stream).append({"event": index, "checks": attached.get(index, [])})
    return root


def _run_of(record: Record) -> str:
    """The run an event was written in, as far as the record tells: its trace."""
    return record.metadata.get(events.TRACE_ID_KEY, "")


def _closes(record: Record, body: Mapping[str, Any]) -> str | None:
    """The subsession the parent's copy of a ``SubagentCompleted`` closes (``aj.closes``,
    else its data); None for the subsession's own copy."""
    named = record.metadata.get(events.CLOSES_KEY)
    if named is not None:
        return named
    extensions = body.get("extensions")
    openai = extensions.get("openai") if isinstance(extensions, dict) else None
    stream = openai.get("subsession_stream") if isinstance(openai, dict) else None
    stream = stream if isinstance(stream, str) else body.get("subsession_stream")
    return stream if isinstance(stream, str) and stream != record.stream else None


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


def waterfall(records: Sequence[Record], agents: Mapping[str, str]) -> dict[str, Any]:
    """The line's timed work as bars (see the module docs): ``{"start", "end", "bars"}``,
    times as ISO text, each bar ``{"kind", "label", "agent", "event", "from", "to"}`` with
    ``from``/``to`` in milliseconds since ``start``; kinds ``run``, ``model``, ``tool``,
    ``guardrail``. Each run comes first, then what it timed in the order it started."""
    spans: list[tuple[str, str, str, int | None, datetime, datetime, str]] = []
    runs: dict[str, list[Any]] = {}
    names: dict[str, str] = {}
    current: dict[str, list[Any]] = {}  # trace -> [its run's key, a user message seen]
    for index, record in enumerate(records):
        body = record.body if isinstance(record.body, dict) else {}
        agent = agents.get(record.stream, record.stream)
        for call in body.get("tool_calls", ()) or ():
            if isinstance(call, dict) and isinstance(call.get("call_id"), str):
                names[call["call_id"]] = _as_text(call.get("tool_name"))
        trace = _run_key(record, current)
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


def _run_key(record: Record, current: dict[str, list[Any]]) -> str:
    """The run an event belongs to: its trace, and within one trace (the SDK's
    ``trace()`` around several turns) a new run at each user message."""
    trace = record.metadata.get(events.TRACE_ID_KEY, "")
    if not trace:
        return ""
    seen = current.setdefault(trace, [trace, False])
    if record.type == _USER_MESSAGE_RECEIVED:
        if seen[1]:
            seen[0] = f"{trace}/{record.position}"
        seen[1] = True
    return str(seen[0])


def _timed(
    record: Record, body: Mapping[str, Any], names: Mapping[str, str]
) -> tuple[str, str, datetime, datetime] | None:
    """An event's own bar: (kind, label, start, end), or None when it records no time or
    a time no call can have (see :func:`_plausible`)."""
    bar = _recorded_bar(record, body, names)
    return bar if bar is not None and _plausible(record, bar[2], bar[3]) else None


_SLOP: Final = timedelta(minutes=1)
_LONGEST: Final = timedelta(days=1)


def _plausible(record: Record, start: datetime, end: datetime) -> bool:
    """Whether a bar's times can be a call's: it ended before its event was stored (give
    or take a minute of clock skew) and took less than a day. Anything else (a foreign
    writer's year 1 or 9999) would squash every other bar into a sliver: it is not drawn."""
    if end - start > _LONGEST:
        return False
    return record.recorded_at is None or end <= record.recorded_at + _SLOP


def _recorded_bar(
    record: Record, body: Mapping[str, Any], names: Mapping[str, str]
) -> tuple[str, str, datetime, datetime] | None:
    """The bar an event's recorded times give, unchecked."""
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
    start = _when(record.metadata.get(events.STARTED_AT_KEY))
    end = _when(record.metadata.get(events.ENDED_AT_KEY))
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
