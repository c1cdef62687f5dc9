"""The guards stage: each ``LineGuarded`` sits on its line's top stream beside the clear or
reset it guards, which names it back (:func:`check_guards`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from agentjournal import events
from agentjournal._text import cut, plural
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Tree, decoded
from agentjournal.records import Record

_GUARDED: Final = frozenset({events.SESSION_CLEARED, events.AUTHORITY_RESET})
"""What a ``LineGuarded`` may guard: a clear on a subagent's stream of its line, a reset on
its line's authority log."""


def check_guards(report: Report, tree: Tree) -> None:
    """Each ``agentjournal.LineGuarded`` sits on a line's top stream and names
    the event it guards, which names it back (``aj.twin``): a ``SessionCleared`` on a
    subagent's stream of that line, or an ``AuthorityReset`` on that line's own log; and
    every clear or reset that names a guard has it. One line per guard that fails."""
    guards = 0
    owner: dict[str, str] | None = None
    for _, event in tree.noted:  # every stream's events of the types it holds, in order
        if event.type == events.LINE_GUARDED:
            guards += 1
            if owner is None:
                owner = tree.line_streams()
            problem = _guard_problem(tree, event, owner)
            if problem is not None:
                report.fail("guards", event.stream, event.revision, problem)
        elif event.type in _GUARDED and events.TWIN_KEY in event.metadata:
            mate = tree.twin_of(event)
            if (
                mate is None
                or mate.type != events.LINE_GUARDED
                or mate.metadata.get(events.TWIN_KEY) != event.id
            ):
                report.fail(
                    "guards",
                    event.stream,
                    event.revision,
                    f"its {event.type} names a LineGuarded that is not there",
                )
    if guards and not report.failed("guards"):
        report.lines.append(
            f"guards: {plural(guards, 'guard')} (LineGuarded), each beside the clear or reset it "
            "guards"
        )


def _guard_problem(tree: Tree, guard: Record, owner: Mapping[str, str]) -> str | None:
    """Why a ``LineGuarded`` is not what its write made, if it is not."""
    body = decoded(events.LineGuarded, guard)
    if body is None:
        return "a LineGuarded that does not read as one"
    if not tree.is_top(guard.stream):
        return "a LineGuarded off a line's top stream"
    mate = tree.twin_of(guard)
    if mate is None or mate.id != body.event or mate.stream != body.stream:
        return "the LineGuarded does not name the event it guards, or that event is missing"
    if mate.metadata.get(events.TWIN_KEY) != guard.id:
        return f"the {mate.type} it guards does not name it"
    if mate.type == events.SESSION_CLEARED:
        if mate.stream == guard.stream or owner.get(mate.stream) != guard.stream:
            return "it guards a SessionCleared that is not on a subagent's stream of its line"
    elif mate.type == events.AUTHORITY_RESET:
        if tree.line_logs().get(guard.stream) != mate.stream:
            return "it guards an AuthorityReset that is not on its line's authority log"
    else:
        return f"it guards a {cut(mate.type, 80)}, which nothing guards"
    return None
