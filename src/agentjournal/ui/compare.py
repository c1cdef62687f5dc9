"""Two lines of one session side by side, from where they part (the page's Compare tab).

:func:`compare_lines` reads both lines as ``get_items()`` on each returns them, finds
the items they share (a branch shares its prefix with its parent line), and for what
each did after that — its items, and its own events since the fork (a branch's own
streams; the main line's own streams' events written after the branch's first) — counts model
requests, tokens, cost, tool calls, guardrail blocks and authority refusals, and
takes its final answer. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentjournal import events
from agentjournal.errors import InvalidInput
from agentjournal.records import Record
from agentjournal.streams import MAIN_BRANCH, session_stream
from agentjournal.ui.console import said

if TYPE_CHECKING:
    from agentjournal.store.contract import EventStore


async def compare_lines(store: EventStore, session_id: str, a: str, b: str) -> dict[str, Any]:
    """Lines ``a`` and ``b`` (``"main"`` or branch names) compared (see the module docs):
    ``{"a": side, "b": side, "shared": N}``, each side ``{"name", "where", "items",
    "summary"}`` with ``items`` the line's items after the shared ones.

    Raises:
        InvalidInput: A line does not exist, or the two are the same line.
        StoreUnavailable: The store could not be read.
    """
    from agentjournal.read.lines import find_branch, line_records, line_replay
    from agentjournal.walk import walk_line

    if a == b:
        raise InvalidInput(f"compare two different lines, got {a!r} twice")
    own: dict[str, list[Record]] = {}
    where: dict[str, str] = {}
    for name in (a, b):
        if name == MAIN_BRANCH:
            # The main line's own streams: its top stream and the subsessions opened on it
            # (a session's tree also holds every branch's).
            streams: dict[str, Sequence[Record]] = {}
            await walk_line(store, session_id, session_stream(session_id), streams)
            own[name] = [r for rs in streams.values() for r in rs]
            where[name] = "main"
        else:
            branch = await find_branch(store, session_id, name)
            own[name] = [
                r for rs in (await line_records(store, session_id, branch)).values() for r in rs
            ]
            where[name] = f"{branch.name} ← {branch.parent} {branch.cut.text()}"
    items = {}
    for name in (a, b):
        try:
            items[name] = await line_replay(store, session_id, name)
        except InvalidInput:  # a deleted branch reads nothing now
            items[name] = []
    shared = _shared(items[a], items[b])
    # Since the fork: a branch's own events; the other line's written after them began.
    starts = [
        min((r.position for r in own[n] if r.position is not None), default=None)
        for n in (a, b)
        if n != MAIN_BRANCH
    ]
    since = max((s for s in starts if s is not None), default=None)
    sides = {}
    for name in (a, b):
        records = own[name]
        if name == MAIN_BRANCH and since is not None:
            records = [r for r in records if r.position is not None and r.position >= since]
        records.sort(key=lambda r: (r.position is None, r.position or 0))
        sides[name] = {
            "name": name,
            "where": where[name],
            "items": items[name][shared:],
            "summary": _summary(records),
        }
    return {"a": sides[a], "b": sides[b], "shared": shared}


def _shared(first: Sequence[Mapping[str, Any]], second: Sequence[Mapping[str, Any]]) -> int:
    count = 0
    for left, right in zip(first, second, strict=False):
        if left != right:
            break
        count += 1
    return count


def _summary(records: Sequence[Record]) -> dict[str, Any]:
    """What a line did in ``records``: requests, tokens, cost, calls, blocks, refusals,
    its last answer."""
    from agentjournal.read.usage import Prices, UsageFold

    fold = UsageFold()
    fold.add_all(records)
    total = fold.report(by="agent", prices=Prices.default()).total
    calls: list[str] = []
    blocks = refusals = 0
    answer: str | None = None
    for record in records:
        body = record.body if isinstance(record.body, dict) else {}
        if record.type == events.GUARDRAIL_DECIDED and body.get("decision") == "BLOCK":
            blocks += 1
        elif record.type == events.AUTHORITY_REFUSED:
            refusals += 1
        spoken = said(record)
        if spoken is None:
            continue
        if spoken["role"] == "call":
            calls.extend(call["name"] for call in spoken["calls"])
        elif spoken["role"] == "assistant":
            answer = spoken["text"]
    return {
        "requests": total.usage.requests,
        "tokens": total.usage.total_tokens,
        "cost_usd": float(total.cost) if total.cost is not None else None,
        "tool_calls": calls,
        "blocks": blocks,
        "refusals": refusals,
        "answer": answer,
    }
