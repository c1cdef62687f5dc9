"""The twins stage: each handoff's and completion's two copies name each other and agree,
and every subsession was opened by a handoff in the bundle (:func:`check_twins`)."""

from __future__ import annotations

from agentjournal import events
from agentjournal._text import plural
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Tree
from agentjournal.ledger.chain import HASH_KEY


def check_twins(report: Report, tree: Tree) -> None:
    started = completed = 0
    for child, parent in tree.opened_by.items():
        started += 1
        events_of_child = tree.streams.get(child)
        if not events_of_child:
            report.fail("twins", parent.stream, parent.revision, f"subsession {child} is missing")
            continue
        twin = events_of_child[0]
        if (
            twin.type != events.SUBAGENT_STARTED
            or parent.metadata.get(events.TWIN_KEY) != twin.id
            or twin.metadata.get(events.TWIN_KEY) != parent.id
        ):
            report.fail("twins", child, 0, "SubagentStarted twins do not name each other")
        elif tree.authority(parent) != tree.authority(twin):
            report.fail(
                "twins", child, 0, "the two copies of SubagentStarted grant different authorities"
            )
    for name in tree.streams:
        if (
            tree.is_top(name)
            or name in tree.continued
            or not tree.is_tree_stream(name)
            or name in tree.opened_by
        ):
            continue  # a line's top stream or a continuation: the branches check's
        if name.startswith(tree.branch_prefix):
            report.fail("twins", name, 0, "a branch stream that does not begin with BranchStarted")
        else:
            report.fail("twins", name, None, "a subsession no handoff in the bundle opened")
    for _, event in tree.noted:  # every stream's events of the types it holds, in order
        if event.type != events.SUBAGENT_COMPLETED:
            continue
        closes = event.metadata.get(events.CLOSES_KEY)
        if closes is None:
            continue
        completed += 1
        mate = tree.twin_of(event)
        last = tree.head(closes)
        if (
            mate is None
            or mate.stream != closes
            or mate.type != events.SUBAGENT_COMPLETED
            or mate.metadata.get(events.TWIN_KEY) != event.id
        ):
            report.fail("twins", event.stream, event.revision, "SubagentCompleted has no twin")
        elif last is not mate:
            report.fail("twins", closes, mate.revision + 1, "events after the subagent closed")
        elif event.metadata.get(events.CLOSES_HASH_KEY) != mate.metadata.get(HASH_KEY):
            report.fail(
                "twins", event.stream, event.revision, "aj.closes_hash is not the subsession's"
            )
    if not report.failed("twins"):
        report.lines.append(
            f"twins: {plural(started, 'subagent')} started, {completed} closed, links ok"
            if started
            else "twins: no subagents"
        )
