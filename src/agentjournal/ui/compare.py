"""Two lines of one session side by side, from where they part (the page's Compare tab).

:func:`compare_lines` finds where two lines part: their nearest common line (main, or a
branch one of them descends from) and, below it, the branch on each side's way that
leaves it — the earlier of those cuts is the parting point. The items they share are
the fewest any branch on either way shares with its parent; after them, each side shows
its own items, and counts, from the events its line is made of since the parting point,
model requests, tokens, cost, tool calls, guardrail blocks and authority refusals, and
takes its final answer. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from agentjournal import events
from agentjournal.errors import InvalidInput
from agentjournal.records import Record
from agentjournal.streams import MAIN_BRANCH
from agentjournal.ui.console import said

if TYPE_CHECKING:
    from agentjournal.engine.fork import Branch
    from agentjournal.store.contract import EventStore


async def compare_lines(store: EventStore, session_id: str, a: str, b: str) -> dict[str, Any]:
    """Lines ``a`` and ``b`` (``"main"`` or branch names) compared (see the module docs):
    ``{"a": side, "b": side, "shared": N, "parting": position}``, each side ``{"name",
    "where", "deleted", "items", "summary"}`` with ``items`` the line's items after the
    shared ones; ``"scores"``: both lines' scores when one is an experiment's branch
    (:func:`~agentjournal.ui.experiments.line_scores`), else None.

    Raises:
        InvalidInput: A line does not exist, or the two are the same line.
        StoreUnavailable: The store could not be read.
    """
    from agentjournal.engine.fork import read_branches
    from agentjournal.read.lines import find_branch, line_path, line_replay

    if a == b:
        raise InvalidInput(f"compare two different lines, got {a!r} twice")
    branches = {branch.name: branch for branch in await read_branches(store, session_id)}
    for name in (a, b):
        if name != MAIN_BRANCH and name not in branches:
            await find_branch(store, session_id, name)  # raises, naming the branches it has
    ways = {name: _way(name, branches) for name in (a, b)}
    common = next((name for name in ways[a] if name in ways[b]), None)
    if common is None:  # a registry whose parents do not lead to main: the verifier says why
        raise InvalidInput(f"lines {a!r} and {b!r} of session {session_id} have no common line")
    below = [ways[n][ways[n].index(common) - 1] for n in (a, b) if n != common]
    parting = min(branches[name].cut.position for name in below)
    shared = min(
        branches[step].prefix_items for n in (a, b) for step in ways[n][: ways[n].index(common)]
    )
    sides = {}
    for name in (a, b):
        branch = branches.get(name)
        try:
            items = await line_replay(store, session_id, name)
        except InvalidInput:  # a deleted branch reads nothing now
            items = []
        path = await line_path(store, session_id, branch)
        since = [r for r in path if r.position is not None and r.position >= parting]
        sides[name] = {
            "name": name,
            "where": "main" if branch is None else f"{name} ← {branch.parent} {branch.cut.text()}",
            "deleted": None if branch is None else branch.deleted,
            "items": items[shared:],
            "summary": _summary(since),
        }
    from agentjournal.ui.experiments import line_scores

    return {
        "a": sides[a],
        "b": sides[b],
        "shared": shared,
        "parting": parting,
        "scores": await line_scores(store, session_id, a, b),
    }


def _way(name: str, branches: Mapping[str, Branch]) -> list[str]:
    """A line and the lines below it, down to main: ``[name, its parent, ..., "main"]``."""
    way = [name]
    while way[-1] != MAIN_BRANCH and len(way) <= len(branches):
        way.append(branches[way[-1]].parent)
    return way


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
