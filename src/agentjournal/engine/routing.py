"""Where each item of a write goes, and which subagents open or close (pure, no I/O).

:func:`plan_write` takes what the session knows — the chain of open
subagents, which stream each pending tool call belongs to, the handoffs the
hooks matched — and a batch of SDK items, and returns the events to write as
a :class:`Plan`. The session encodes and appends the plan in one atomic store
transaction, and adopts its new chain only after the store accepted it.

The rules (DESIGN, "Handoffs"):

* The innermost open subagent's stream owns the write (the session's stream
  when none is open).
* A ``function_call`` matched to a handoff becomes ``start``: ``SubagentStarted``
  on the owner (carrying the call) and its twin opening the receiver's stream.
* An output goes where its call went while that stream is still open (else
  to the owner); the handoff's own output (its acknowledgement) is the first
  item of the receiver's stream.
* A receiver's stream must be new: if its name is taken (a reused call id),
  the id gets ``.{message_index}`` appended.
* ``closing`` closes every open subagent; a write that starts a new run
  closes subagents an earlier run left open (``error``); the write after the
  last agent finished closes them with ``success``. Closes are innermost first.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentjournal.events import Subagent
from agentjournal.streams import branch_subagent_id, subagent_id, subsession_stream
from agentjournal.streams import session_stream as main_session_stream

REMEMBERED_CALLS: Final = 1024
# Every write asks whether it is on the main line: the name without checking the id again.
_main_stream: Final = functools.lru_cache(maxsize=1024)(main_session_stream)
SUMMARY_CHARS: Final = 2000


@dataclass(frozen=True, slots=True)
class Op:
    """One planned write: an item, a subagent start, or a subagent close.

    Attributes:
        kind: ``"item"``, ``"start"`` or ``"close"``.
        stream: The stream the item (or the parent's copy) goes to.
        item: The SDK item (``item`` and ``start``).
        index: Its ``message_index`` (``item`` and ``start``).
        subagent: The subagent opened or closed.
        outcome, summary, reason: How a ``close`` ended.
    """

    kind: str
    stream: str
    item: Mapping[str, Any] | None = None
    index: int | None = None
    subagent: Subagent | None = None
    outcome: str = "success"
    summary: str = ""
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """The events of one write, and the routing state after it.

    Attributes:
        ops: In write order.
        chain: The open subagents after the write, outermost first.
        call_owner: Where the outputs of calls still pending go.
        indexed: How many items take a message index.
        unmatched_outputs: Outputs routed as ordinary tool results that look
            like a handoff's acknowledgement (the hooks were not wired).
    """

    ops: list[Op]
    chain: list[Subagent]
    call_owner: OrderedDict[str, str]
    indexed: int
    unmatched_outputs: list[Mapping[str, Any]]


def looks_like_a_handoff(item: Mapping[str, Any]) -> bool:
    """Whether an item is shaped like the SDK's handoff output, ``{"assistant": name}``."""
    output = item.get("output")
    if item.get("type") != "function_call_output" or not isinstance(output, str):
        return False
    if not output.lstrip().startswith("{"):
        return False  # no JSON object: skip the parse and its exception (most tool outputs)
    try:
        parsed = json.loads(output)
    except ValueError:
        return False
    return isinstance(parsed, dict) and set(parsed) == {"assistant"}


def starts_a_run(item: Mapping[str, Any]) -> bool:
    """A run's own input opens with a user message; a resumed run continues with outputs."""
    return item.get("role") == "user" and item.get("type", "message") == "message"


def plan_write(
    items: Sequence[Mapping[str, Any]],
    *,
    session_id: str,
    session_stream: str,
    chain: Sequence[Subagent],
    call_owner: Mapping[str, str],
    first_index: int,
    handoffs: Mapping[str, tuple[str, str]],
    taken: frozenset[str] | set[str] = frozenset(),
    closing: tuple[str, str] | None = None,
    finished: str | None = None,
    new_run: bool = False,
) -> Plan:
    """Plan one write (see the module docs).

    Args:
        items: The SDK items of one ``add_items`` call (may be empty for a close).
        session_id: The session's id (for subsession stream names).
        session_stream: The line's top stream: ``AgentSession-{session_id}``, or a
            branch's ``AgentBranch-{session_id}@{key}``.
        chain: Open subagents, outermost first.
        call_owner: Stream of each call whose output has not come yet.
        first_index: The ``message_index`` of the first item.
        handoffs: Calls the hooks matched to a handoff: call id -> (from, to).
        taken: Subsession streams that exist already (a reused call id).
        closing: Close every open subagent with (outcome, reason).
        finished: The last agent's final output, when it has finished.
        new_run: The items begin a new run: subagents still open are abandoned.
    """
    open_ = list(chain)
    owners = OrderedDict(call_owner)
    # On a branch the receiver's id hashes the line's stream with the call id: two lines
    # share message indexes and models reuse call ids (DESIGN, "Branches").
    main_line = session_stream == _main_stream(session_id)

    def receiver_id(target: str, call_id: str) -> str:
        if main_line:
            return subagent_id(target, call_id)
        return branch_subagent_id(target, session_stream, call_id)

    ops: list[Op] = []
    unmatched: list[Mapping[str, Any]] = []

    def close_all(outcome: str, summary: str, reason: str | None) -> None:
        for subagent in reversed(open_):
            ops.append(
                Op(
                    "close",
                    subagent.parent_stream,
                    subagent=subagent,
                    outcome=outcome,
                    summary=summary,
                    reason=reason,
                )
            )
        open_.clear()

    if closing is not None:
        outcome, reason = closing
        close_all(outcome, (finished or "")[:SUMMARY_CHARS], reason or None)
    elif open_ and new_run:
        reason = (
            f"the run ended after {open_[-1].agent_name} finished without recording its reply"
            if finished is not None
            else "the run ended before this subagent completed; found when the next run began"
        )
        close_all("error", "", reason)
    owner = open_[-1].stream if open_ else session_stream
    index = first_index
    for item in items:
        kind = item.get("type")
        call_id = item.get("call_id")
        call_id = call_id if isinstance(call_id, str) else None
        if kind == "function_call" and call_id is not None and call_id in handoffs:
            source, target = handoffs[call_id]
            agent_id = receiver_id(target, call_id)
            stream_name = subsession_stream(session_id, agent_id)
            if stream_name in taken or any(s.stream == stream_name for s in open_):
                agent_id = receiver_id(target, f"{call_id}.{index}")
            arguments = item.get("arguments")
            subagent = Subagent(
                agent_id=agent_id,
                agent_name=target,
                source_agent=source,
                call_id=call_id,
                stream=subsession_stream(session_id, agent_id),
                parent_stream=owner,
                prompt=arguments if isinstance(arguments, str) and arguments != "{}" else "",
            )
            ops.append(Op("start", owner, item=item, index=index, subagent=subagent))
            owners[call_id] = subagent.stream
            open_.append(subagent)
        else:
            stream = owner
            if call_id is not None and isinstance(kind, str):
                if kind.endswith("_output"):
                    stream = owners.pop(call_id, owner)
                    if stream != session_stream and all(s.stream != stream for s in open_):
                        stream = owner  # its call's subagent has closed since: stay in the open one
                    if looks_like_a_handoff(item) and all(s.call_id != call_id for s in open_):
                        unmatched.append(item)
                else:
                    owners[call_id] = owner
            ops.append(Op("item", stream, item=item, index=index))
        index += 1
    while len(owners) > REMEMBERED_CALLS:
        owners.popitem(last=False)
    if closing is None and finished is not None and items and open_:
        close_all("success", finished[:SUMMARY_CHARS], None)
    return Plan(ops, open_, owners, index - first_index, unmatched)
