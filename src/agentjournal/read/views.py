"""How a session tree reads to a person: one line per event, streams nested (pure).

The one view of a stored session that ``agentjournal show`` and ``agentjournal
demo`` print (on a terminal ``show`` draws it as a rich tree; in a pipe both print
the same indented text). :func:`tree_view` turns a
:class:`~agentjournal.records.TreeRecords` into :class:`StreamView` values, each
event described by :func:`describe_record` where it happened: items with their
message index, every guardrail decision, authority refusal and grant, subagent
outcome, model response (usage), pop, clear and checkpoint. Long text is cut
with "…"; control characters in stored text are shown escaped
(:func:`~agentjournal._text.printable`), so no stored value can forge a line or
drive the terminal.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from agentjournal import events
from agentjournal._text import cut, plural, printable
from agentjournal.events import EXTENSION_EVENT_TYPE
from agentjournal.ledger.checkpoints import CHECKPOINT
from agentjournal.ledger.keys import KEY_ROTATED
from agentjournal.records import Record, TreeRecords
from agentjournal.streams import KEYS_STREAM, authority_stream, ledger_stream

__all__ = [
    "LEGEND",
    "Line",
    "StreamView",
    "describe_item",
    "describe_record",
    "is_approval",
    "plain_lines",
    "print_tree",
    "tree_view",
]

LEGEND: Final = (
    "@N: the event's revision on its stream · #N: the item's message index (its place "
    "in get_items) · long text is cut with …"
)

_TEXT: Final = 50

UNNAMED: Final = "(unnamed)"
"""What a nameless model, agent or session is called wherever one is printed."""


@dataclass(frozen=True)
class Line:
    """One event as a line: its revision, its type (without ``agentjournal.``), what it
    says, and its tone (:func:`tone_of`)."""

    revision: int
    kind: str
    text: str
    tone: Tone = ""


@dataclass(frozen=True)
class StreamView:
    """One stream of the tree: nested ``depth`` subagents deep (0: the session, and the
    logs beside it)."""

    stream: str
    depth: int
    lines: tuple[Line, ...]


def tree_view(
    tree: TreeRecords,
    *,
    stream: str | None = None,
    logs: bool = True,
    root: str | None = None,
) -> list[StreamView]:
    """The session stream, each subsession after the stream that opened it (one level
    deeper), then with ``logs`` the authority log, the checkpoints and the key rotations.

    Args:
        tree: The session tree as read (:func:`~agentjournal.walk.read_tree`).
        stream: Only this stream (at depth 0).
        logs: Include the authority log, the checkpoint stream and the key stream.
        root: The stream to start from instead of the session stream: a branch's top
            stream, whose streams ``tree`` then holds
            (:func:`agentjournal.read.lines.line_records`).
    """
    views: list[StreamView] = []

    def lines(name: str) -> tuple[Line, ...]:
        return tuple(
            Line(
                r.revision,
                printable(r.type.removeprefix("agentjournal.")),
                describe_record(r),
                tone_of(r),
            )
            for r in tree.streams.get(name, ())
        )

    if stream is not None:
        return [StreamView(stream, 0, lines(stream))]

    seen: set[str] = set()
    continued = continuations(tree)

    def visit(name: str, depth: int) -> None:
        seen.add(name)
        views.append(StreamView(name, depth, lines(name)))
        # A subagent open at a fork goes on in its continuation, open from the line's start.
        children = [*continued.get(name, ()), *(r.opens for r in tree.streams.get(name, ()))]
        for child in children:
            if child is not None and child not in seen and child in tree.streams:
                visit(child, depth + 1)

    visit(root if root is not None else tree.session_stream, 0)
    if logs:
        for name in (authority_stream(tree.session_id), ledger_stream(tree.session_id)):
            if name in tree.streams:
                views.append(StreamView(name, 0, lines(name)))
        if KEYS_STREAM in tree.streams:
            views.append(StreamView(KEYS_STREAM, 0, lines(KEYS_STREAM)))
    return views


def continuations(tree: TreeRecords) -> dict[str, list[str]]:
    """Stream -> the continuation streams it holds (pure): each stream that begins with
    ``agentjournal.SubagentContinued`` (a subagent open at a fork, going on on the branch)
    under the stream its ``parent_stream`` names, in the order of the tree."""
    found: dict[str, list[str]] = {}
    for name, records in tree.streams.items():
        first = records[0] if records else None
        if first is None or first.type != events.SUBAGENT_CONTINUED:
            continue
        parent = first.body.get("parent_stream") if isinstance(first.body, dict) else None
        if isinstance(parent, str) and parent != name:
            found.setdefault(parent, []).append(name)
    return found


def plain_lines(views: Sequence[StreamView]) -> list[str]:
    """The views as indented text (what a pipe and the demo get)."""
    out: list[str] = []
    for view in views:
        pad = "    " * view.depth
        out.append(f"{pad}{printable(view.stream)}")
        for line in view.lines:
            out.append(f"{pad}  @{line.revision:<2} {line.kind:<28} {line.text}".rstrip())
    return out


def print_tree(tree: TreeRecords, out: Callable[[str], None]) -> None:
    """Print the session stream, then each subsession it opened, indented under it."""
    for text in plain_lines(tree_view(tree, logs=False)):
        out(text)


Tone = Literal["", "allowed", "modified", "blocked", "refused", "failed"]
"""What an event means for an auditor at a glance: a guardrail's ALLOW, MODIFY or BLOCK, an
authority refusal, a subagent that did not succeed; ``""`` for the rest. A terminal colours
by it, so a BLOCK never looks like an ALLOW."""


def tone_of(record: Record) -> Tone:
    """The tone of one event (see :data:`Tone`)."""
    body = record.body if isinstance(record.body, dict) else {}
    if record.type == events.GUARDRAIL_DECIDED:
        decision = body.get("decision")
        if decision == "BLOCK":
            return "blocked"
        if decision == "MODIFY":
            return "modified"
        return "allowed" if decision == "ALLOW" else "failed"
    if record.type == events.AUTHORITY_REFUSED:
        return "refused"
    if record.type == events.SUBAGENT_COMPLETED and body.get("outcome") not in (None, "success"):
        return "failed"
    return ""


def is_approval(record: Record) -> bool:
    """Whether the event is an approval's: a question (``InterruptIssued``), an answer
    (``InterruptResolved``) or a paused run (``RunPaused``); the codec's MCP approval
    items, of the same canonical types, are not."""
    if record.type == events.RUN_PAUSED:
        return True
    return (
        record.type in (events.INTERRUPT_ISSUED, events.INTERRUPT_RESOLVED)
        and events.INTERRUPT_KEY in record.metadata
    )


def describe_record(record: Record) -> str:
    """What one event says, in a line (see the module docs)."""
    body = record.body
    index = record.metadata.get(events.INDEX_KEY)
    prefix = f"#{index} " if index is not None else ""
    describe = _DESCRIBE.get(record.type)
    try:
        if body is None:
            text = "(withheld)" if record.data is None else "(not a JSON object)"
        else:
            text = describe(record, body) if describe is not None else _content(body)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        text = "(unreadable)"
    if events.holds_item(record.type, record.metadata) or (
        record.type == events.SUBAGENT_STARTED and record.opens
    ):
        text = prefix + text
    # Stored text is anyone's: never let it end the line or drive the terminal.
    return printable(text)


def describe_item(item: Any) -> str:
    """One SDK item as a line (the flat history the SDK gets back)."""
    return printable(_item_line(item))


def _item_line(item: Any) -> str:
    kind = item.get("type", "message")
    if kind == "message":
        content = item.get("content")
        text = (
            content
            if isinstance(content, str)
            else " ".join(p.get("text", "") for p in content or [])
        )
        return f"{item.get('role')}: {cut(text, 60)}"
    if kind == "function_call":
        return f"function_call {item.get('name')}({item.get('arguments')})"
    if kind == "function_call_output":
        return f"function_call_output {cut(str(item.get('output')), 60)}"
    return str(kind)


# -- one line per event type -------------------------------------------------------------


def _content(body: Mapping[str, Any]) -> str:
    return cut(str(body.get("content", "")), _TEXT)


def _tokens(record: Record) -> str:
    usage = record.metadata.get(events.USAGE_KEY)
    return f" [{json.loads(usage).get('total_tokens')} tokens]" if usage else ""


def _authority(value: Any) -> str:
    """An authority's JSON form, short: its scopes and ceilings."""
    if not isinstance(value, Mapping):
        return "nothing"
    scopes = ",".join(value.get("scopes", [])) or "no scopes"
    ceilings = value.get("ceilings") or {}
    capped = ", ".join(
        f"{name}≤{rule.get('limit')}" if isinstance(rule, Mapping) else name
        for name, rule in sorted(ceilings.items())
    )
    return f"[{scopes}]" + (f" {capped}" if capped else "")


def _guardrail(record: Record, body: Mapping[str, Any]) -> str:
    reason = f" {body['reason_code']}" if body.get("reason_code") else ""
    return f"{body.get('action_type')} {body.get('subject')}: {body.get('decision')}{reason}"


def _refused(record: Record, body: Mapping[str, Any]) -> str:
    return (
        f"{body.get('kind')} {body.get('subject')} refused to {body.get('agent')} at "
        f"{body.get('gate')} ({body.get('enforcement')}): {cut(str(body.get('reason')), 40)}"
    )


def _granted(record: Record, body: Mapping[str, Any]) -> str:
    return f"{body.get('agent')} holds {_authority(body.get('authority'))} ({body.get('cause')})"


def _held(record: Record, body: Mapping[str, Any]) -> str:
    return f"{body.get('agent')} holds {_authority(body.get('authority'))} ({body.get('cause')})"


def _started(record: Record, body: Mapping[str, Any]) -> str:
    if record.opens is None:
        openai = body.get("extensions", {}).get("openai", {})
        return f"twin: opened by {openai.get('source_agent')}"
    granted = events.granted_authority(body)
    grant = f", granted {_authority(granted)}" if granted is not None else ""
    return f"opens {body.get('agent_type')}{grant}"


def _completed(record: Record, body: Mapping[str, Any]) -> str:
    summary = str(body.get("summary") or "")
    reason = body.get("extensions", {}).get("openai", {}).get("reason")
    return (
        f"{body.get('agent_id')} {body.get('outcome')}"
        + (f": {cut(summary, 40)}" if summary else "")
        + (f" ({cut(str(reason), 40)})" if reason else "")
    )


def _session(record: Record, body: Mapping[str, Any]) -> str:
    return f"app={body.get('app_name')} user={body.get('user_id')} agent={body.get('agent_name')}"


def _tool_calls(record: Record, body: Mapping[str, Any]) -> str:
    names = ", ".join(str(call.get("tool_name")) for call in body.get("tool_calls", []))
    return f"{cut(names, _TEXT)}{_tokens(record)}"


def _text(record: Record, body: Mapping[str, Any]) -> str:
    return f"{_content(body)}{_tokens(record)}"


def _result(record: Record, body: Mapping[str, Any]) -> str:
    return cut(str(body.get("result", "")), _TEXT)


def _foreign(record: Record, body: Mapping[str, Any]) -> str:
    return str(record.metadata.get(events.ITEM_TYPE_KEY) or body.get("type") or "item")


def _responded(record: Record, body: Mapping[str, Any]) -> str:
    usage = body.get("usage") or {}
    model = body.get("model") or UNNAMED
    return (
        f"{body.get('agent')} ← {model}: {usage.get('total_tokens', 0)} tokens "
        f"({usage.get('input_tokens', 0)} in, {usage.get('output_tokens', 0)} out)"
    )


def _popped(record: Record, body: Mapping[str, Any]) -> str:
    return f"pops #{body.get('message_index')} ({body.get('stream')}@{body.get('revision')})"


def _cleared(record: Record, body: Mapping[str, Any]) -> str:
    return f"clears every item through #{body.get('through_index')}"


def _policy(record: Record, body: Mapping[str, Any]) -> str:
    return f"policy {cut(str(body.get('digest')), 24)}"


def _reset(record: Record, body: Mapping[str, Any]) -> str:
    return f"{body.get('agent')} starts again from its policy: {cut(str(body.get('reason')), 40)}"


def _thread_state(record: Record, body: Mapping[str, Any]) -> str:
    # The state's keys only, never its values: a thread's state may hold anything.
    state = body.get("state")
    keys = ", ".join(sorted(map(str, state))) if isinstance(state, Mapping) else ""
    run, status, agent = (body.get(name) or "?" for name in ("run_id", "status", "agent_id"))
    return cut(f"run {run} {status} by {agent}; state keys: {keys or 'none'}", _TEXT * 2)


def _checkpoint(record: Record, body: Mapping[str, Any]) -> str:
    heads = body.get("heads") or {}
    return f"signed by {body.get('key_id')}: heads of {plural(len(heads), 'stream')}"


def _rotated(record: Record, body: Mapping[str, Any]) -> str:
    return f"{body.get('old_key_id')} hands over to {body.get('new_key_id')}"


def _cut(body: Mapping[str, Any]) -> str:
    """Where a fork leaves its parent line, in words (``before #7``)."""
    return events.cut_words(body["cut"]["kind"], body["cut"]["value"])


def _forked(record: Record, body: Mapping[str, Any]) -> str:
    return f"branch {body['branch']!r} forked {_cut(body)} → {body['branch_stream']}"


def _branch_started(record: Record, body: Mapping[str, Any]) -> str:
    base = body["base"][0]
    return (
        f"continues {body['parent']} {_cut(body)} from {base['stream']}@{base['revision']} "
        f"({body['prefix_items']} items shared, own items from #{body['next_index']})"
    )


def _continued(record: Record, body: Mapping[str, Any]) -> str:
    continues = body["continues"]
    return f"{body['agent_type']} continues {continues['stream']}@{continues['revision']}"


def _branch_deleted(record: Record, body: Mapping[str, Any]) -> str:
    return f"branch {body['branch']!r} {body['reason']} (items through #{body['through_index']})"


def _registry(record: Record, body: Mapping[str, Any]) -> str:
    return f"{body['branch']!r} → {body['stream']} (from {body['parent']})"


def _guarded(record: Record, body: Mapping[str, Any]) -> str:
    return f"guards the line's head for {body['stream']} ({body['event']})"


def _turn_usage(record: Record, body: Mapping[str, Any]) -> str:
    return f"turn {body['turn']}: {body['total_tokens']} tokens, {body['requests']} requests"


def _issued(record: Record, body: Mapping[str, Any]) -> str:
    if events.INTERRUPT_KEY not in record.metadata:
        return _content(body)  # an MCP approval item: the codec's
    agent = body.get("extensions", {}).get("agentjournal", {}).get("agent", "?")
    call = f"{body.get('tool_name')}({cut(str(body.get('prompt', '')), _TEXT)})"
    return f"{agent} waits for approval of {call} [request {body.get('request_id')}]"


def _resolved(record: Record, body: Mapping[str, Any]) -> str:
    if events.INTERRUPT_KEY not in record.metadata:
        return _content(body)
    by = body.get("extensions", {}).get("agentjournal", {}).get("by", "?")
    reason = str(body.get("response") or "")
    said = f": {cut(reason, _TEXT)}" if reason else ""
    return f"{body.get('outcome')} by {by} [request {body.get('request_id')}]{said}"


def _paused(record: Record, body: Mapping[str, Any]) -> str:
    # The state holds the conversation: its size only.
    requests = ", ".join(str(r.get("request_id")) for r in body.get("requests", ()))
    return f"run paused for approval of {requests or 'nothing'} ({len(str(body['state']))} chars)"


def _resumed(record: Record, body: Mapping[str, Any]) -> str:
    again = " again (retaken)" if body.get("retake") is True else ""
    return f"paused run taken up{again} to resume by {body.get('holder')}"


def _erased(record: Record, body: Mapping[str, Any]) -> str:
    return (
        f"content of subject {body['subject']} erased at {body['erased_at']} by {body['by']}: "
        f"{cut(str(body['reason']), _TEXT * 2)}"
    )


_DESCRIBE: Final[dict[str, Callable[[Record, Mapping[str, Any]], str]]] = {
    events.SUBJECT_ERASED: _erased,
    events.INTERRUPT_ISSUED: _issued,
    events.INTERRUPT_RESOLVED: _resolved,
    events.RUN_PAUSED: _paused,
    events.RUN_RESUMED: _resumed,
    events.BRANCH_FORKED: _forked,
    events.BRANCH_STARTED: _branch_started,
    events.SUBAGENT_CONTINUED: _continued,
    events.BRANCH_DELETED: _branch_deleted,
    events.BRANCH_ADDED: _registry,
    events.BRANCH_REMOVED: _registry,
    events.TURN_USAGE: _turn_usage,
    events.LINE_GUARDED: _guarded,
    events.GUARDRAIL_DECIDED: _guardrail,
    events.AUTHORITY_REFUSED: _refused,
    events.AUTHORITY_GRANTED: _granted,
    events.AUTHORITY_HELD: _held,
    events.AUTHORITY_RESET: _reset,
    events.POLICY_RECORDED: _policy,
    events.SUBAGENT_STARTED: _started,
    events.SUBAGENT_COMPLETED: _completed,
    events.SESSION_STARTED: _session,
    events.MODEL_RESPONDED: _responded,
    events.ITEM_POPPED: _popped,
    events.SESSION_CLEARED: _cleared,
    "AssistantToolCallsGenerated": _tool_calls,
    "AssistantTextGenerated": _text,
    "UserMessageReceived": _text,
    "ToolResultReceived": _result,
    "AssistantThinkingGenerated": _text,
    EXTENSION_EVENT_TYPE: _foreign,
    CHECKPOINT: _checkpoint,
    KEY_ROTATED: _rotated,
    # runner.state.THREAD_STATE, spelled out: importing the runner loads an HTTP client.
    "agentjournal.ThreadState": _thread_state,
}
