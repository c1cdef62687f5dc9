"""The branches stage: each fork's ``BranchForked`` and ``BranchStarted`` agree, the branch
registry names exactly the branches there are, in fork order, and an ended line has nothing
after its end and nothing left open (:func:`check_branches`)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Final

from agentjournal import events
from agentjournal._text import cut, plural
from agentjournal.audit.verify._prefix import check_prefix
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Tree, decoded
from agentjournal.errors import InvalidInput
from agentjournal.records import Record
from agentjournal.streams import branch_stream

_POSITIONS: Final = 2**64  # a store's global position is an unsigned 64-bit number at most


def check_branches(report: Report, tree: Tree) -> None:
    """Every fork binds its branch to its parent line: ``BranchForked`` and
    ``BranchStarted`` name each other and agree; the places the branch continues hold
    the hashes it recorded (no rewritten history behind a fork); the cut, the base and
    the next index agree with the parent's events; each continuation matches what it
    continues; the registry names exactly the branches there are. One line per branch."""
    forks = [e for _, e in tree.noted if e.type == events.BRANCH_FORKED]
    registry = tree.streams.get(tree.registry_stream, [])
    if not forks and not tree.started and not registry:
        _check_line_ends(report, tree)
        return
    failed = len(report.problems)
    for marker in forks:
        _check_marker(report, tree, marker)
    entries = _check_registry(report, tree, registry)
    lines: list[str] = []
    for name, (first, started) in tree.started.items():
        where = ("branches", name, 0)
        if started is None:
            report.fail(*where, "a BranchStarted that does not read as one")
            continue
        if started.branch_stream != name or started.session_id != tree.session_id:
            report.fail(*where, "the BranchStarted names another stream or session")
            continue
        if _stream_of(tree, started.branch) != name:
            # A branch's stream is named for it: a rename that keeps the stream is a forgery.
            named = cut(repr(started.branch), 80)
            report.fail(*where, f"the BranchStarted names branch {named}, not {name}'s")
            continue
        if not 0 <= started.cut.position < _POSITIONS:
            report.fail(
                *where,
                f"its cut's position {cut(str(started.cut.position), 40)} is not a store "
                "position (0 to 2**64 - 1)",
            )
            continue
        if entries.get(name) != first.id:
            report.fail(*where, f"branch {started.branch!r} has no entry in {tree.registry_stream}")
        twin = tree.twin_of(first)
        parent_top = tree.tops.get(started.parent)
        if twin is None or twin.type != events.BRANCH_FORKED:
            report.fail(*where, "its BranchForked is missing from the parent line")
            continue
        if parent_top is None or twin.stream != parent_top:
            report.fail(*where, f"forked from {twin.stream}, not from line {started.parent!r}")
            continue
        if not check_prefix(report, tree, name, started, parent_top):
            continue
        problem = _metadata_problem(tree, first, started)
        if problem is not None:
            report.fail("branches", problem[0], 0, problem[1])
        else:
            size = len(tree.streams[name])
            place = started.base[0]
            lines.append(
                f"  branch {started.branch!r}: {name}, {plural(size, 'event')}; forked from "
                f"{started.parent} at {started.cut.kind} {started.cut.value}, bound to "
                f"{place.stream} at revision {place.revision}"
            )
    _check_line_ends(report, tree)
    if len(report.problems) == failed:
        count = len(tree.started)
        report.lines.append(
            f"branches: {count} {'branch' if count == 1 else 'branches'}, each bound to its "
            "parent line's chain; registry ok"
        )
        report.lines.extend(lines)


def _check_line_ends(report: Report, tree: Tree) -> None:
    """A branch line that ended (a ``BranchDeleted`` is on its top stream, :meth:`Tree.ends`)
    has nothing written after its end on that stream, and no subagent open: every subsession
    and continuation of the line was closed. What the end itself closed (``aj.line_end``:
    both copies of each ``SubagentCompleted`` name the ``BranchDeleted``) is on that line,
    closed ``cancelled``, and on the top stream right before the ``BranchDeleted`` (one
    write)."""
    ends = {end.id: top for top, end in tree.ends().items()}  # the end's id -> its top stream
    marked = [event for _, event in tree.marked[events.LINE_END_KEY]]
    if not ends and not marked:
        return
    owner = tree.line_streams()
    for event in marked:
        where = ("branches", event.stream, event.revision)
        end = event.metadata[events.LINE_END_KEY]
        top = ends.get(end)
        if event.type != events.SUBAGENT_COMPLETED:
            report.fail(*where, f"aj.line_end on {event.type}: only a line's end closes carry it")
        elif top is None or owner.get(event.stream) != top:
            report.fail(*where, "aj.line_end names no end of this stream's line")
        elif (twin := tree.twin_of(event)) is None or twin.metadata.get(events.LINE_END_KEY) != end:
            report.fail(*where, "a close the line's end wrote has a twin that does not name it")
        elif (outcome := (event.body or {}).get("outcome")) != "cancelled":
            shown = cut(repr(outcome), 40)
            report.fail(*where, f"the line's end closed this subagent {shown}, not 'cancelled'")
    closed = {
        event.metadata[events.CLOSES_KEY]
        for _, event in tree.noted  # every stream's events of the types it holds, in order
        if event.type == events.SUBAGENT_COMPLETED and events.CLOSES_KEY in event.metadata
    }
    for end, top in ends.items():
        line = tree.streams[top]
        deleted = tree.ends()[top]
        if deleted.revision != len(line) - 1:
            # One line however many: nothing reads or writes an ended line again.
            report.fail(
                "branches",
                top,
                deleted.revision + 1,
                f"{plural(len(line) - 1 - deleted.revision, 'event')} written after its end "
                f"(its BranchDeleted at revision {deleted.revision})",
            )
        reason = (deleted.body or {}).get("reason")
        branch = cut(repr((deleted.body or {}).get("branch")), 80)
        for stream, its_top in owner.items():
            if its_top == top and stream != top and stream not in closed:
                report.fail(
                    "branches",
                    stream,
                    None,
                    f"left open on branch {branch}, which was {cut(str(reason), 20)}: the "
                    "end of a line closes every subagent open on it",
                )
        closes = [e.revision for e in line if e.metadata.get(events.LINE_END_KEY) == end]
        if closes != list(range(deleted.revision - len(closes), deleted.revision)):
            report.fail(
                "branches",
                top,
                deleted.revision,
                "the closes of the line's end are not right before its BranchDeleted",
            )


def _check_marker(report: Report, tree: Tree, marker: Record) -> None:
    """A ``BranchForked`` on a line's top stream has its branch in the bundle, whose
    first event is its twin ``BranchStarted`` with the same fields."""
    where = ("branches", marker.stream, marker.revision)
    forked = decoded(events.BranchForked, marker)
    if forked is None:
        report.fail(*where, "a BranchForked that does not read as one")
        return
    if not tree.is_top(marker.stream):
        report.fail(*where, "a BranchForked off a line's top stream")
        return
    branch = tree.streams.get(forked.branch_stream)
    if not branch:
        report.fail(
            *where, f"branch {forked.branch!r}: its stream {forked.branch_stream} is missing"
        )
        return
    first, started = tree.started.get(forked.branch_stream, (branch[0], None))
    if first.type != events.BRANCH_STARTED:
        report.fail(
            *where, f"branch {forked.branch!r}: its stream does not begin with BranchStarted"
        )
    elif (
        marker.metadata.get(events.TWIN_KEY) != first.id
        or first.metadata.get(events.TWIN_KEY) != marker.id
    ):
        report.fail(*where, "BranchForked and BranchStarted do not name each other")
    elif started is not None and any(
        getattr(forked, f.name) != getattr(started, f.name)
        for f in dataclasses.fields(events.BranchForked)
    ):
        report.fail(*where, "BranchForked and its BranchStarted disagree")


def _check_registry(report: Report, tree: Tree, registry: Sequence[Record]) -> dict[str, str]:
    """Each registry entry names what is there: a ``BranchAdded`` the branch's
    ``BranchStarted`` (same name, parent, event id), a ``BranchRemoved`` the branch's end,
    its ``BranchDeleted`` (:meth:`Tree.ends`; what follows an end the line-ends check
    reports); and every ended line has its one ``BranchRemoved``, or the registry would
    list as live a branch whose line ended. Returns branch stream -> the ``BranchStarted``
    id its ``BranchAdded`` names."""
    added: dict[str, str] = {}
    added_at: dict[str, int] = {}  # branch stream -> its BranchAdded's registry revision
    removed: set[str] = set()  # the branch streams a BranchRemoved names
    ends = tree.ends()
    for entry in registry:
        where = ("branches", entry.stream, entry.revision)
        if entry.type not in (events.BRANCH_ADDED, events.BRANCH_REMOVED):
            report.fail(*where, f"{entry.type} does not belong on the branch registry")
            continue
        kind = events.BranchAdded if entry.type == events.BRANCH_ADDED else events.BranchRemoved
        body = decoded(kind, entry)
        if body is None:
            report.fail(*where, f"a {entry.type} that does not read as one")
            continue
        line = tree.streams.get(body.stream)
        if not line:
            report.fail(*where, f"branch {body.branch!r}: its stream {body.stream} is missing")
            continue
        misnamed = f"{body.stream} is not the stream of branch {cut(repr(body.branch), 80)}"
        named = _stream_of(tree, body.branch) == body.stream
        if entry.type == events.BRANCH_ADDED:
            started = tree.started.get(body.stream, (None, None))[1]
            if (
                line[0].id != body.event
                or started is None
                or (started.branch, started.parent) != (body.branch, body.parent)
            ):
                report.fail(*where, f"the entry of branch {body.branch!r} is not its fork")
            elif not named:
                report.fail(*where, misnamed)
            elif body.stream in added:
                report.fail(*where, f"branch {body.branch!r} is registered twice")
            else:
                added[body.stream] = body.event
                added_at[body.stream] = entry.revision
        else:
            if not named:
                report.fail(*where, misnamed)
            elif (end := ends.get(body.stream)) is None or end.id != body.event:
                report.fail(*where, f"branch {body.branch!r} was not deleted as the entry says")
            elif added_at.get(body.stream) is None:
                report.fail(*where, f"branch {body.branch!r} is removed before it is registered")
            elif body.stream in removed:
                report.fail(*where, f"branch {body.branch!r} is removed twice")
            # Named, even if wrongly: that entry's line says what is wrong, not a second one.
            removed.add(body.stream)
    for top, end in ends.items():
        if top not in removed:
            started = tree.started[top][1]
            named = cut(repr(started.branch if started is not None else top), 80)
            report.fail(
                "branches",
                top,
                end.revision,
                f"branch {named} ended here, but no BranchRemoved in {tree.registry_stream} "
                "says so",
            )
    if not report.failed("branches"):
        _check_registry_order(report, tree, added_at)
    return added


def _check_registry_order(report: Report, tree: Tree, added_at: Mapping[str, int]) -> None:
    """The registry lists the forks in the order they were made, as far as a bundle (no
    positions) shows it: a branch after its parent branch (whose fork created the line it
    forks from), and the forks of one line in the order of their ``BranchForked`` markers
    on its top stream (each fork writes its marker and its entry at both exact heads in one
    transaction, so two forks of one line land in one order on both streams)."""
    where = ("branches", tree.registry_stream)
    for name, at in added_at.items():
        started = tree.started.get(name, (None, None))[1]
        parent = tree.tops.get(started.parent) if started is not None else None
        if started is not None and parent is not None and added_at.get(parent, -1) > at:
            report.fail(
                *where,
                at,
                f"branch {started.branch!r} is registered before its parent {started.parent!r}",
            )
            return
    for top in tree.tops.values():
        order = [
            added_at[forked.branch_stream]
            for marker in tree.streams.get(top, [])
            if marker.type == events.BRANCH_FORKED
            and (forked := decoded(events.BranchForked, marker)) is not None
            and forked.branch_stream in added_at
        ]
        for before, after in itertools.pairwise(order):
            if before > after:
                report.fail(
                    *where,
                    after,
                    f"the forks of {top} are registered out of the order of their "
                    "BranchForked markers",
                )
                return


def _stream_of(tree: Tree, branch: str) -> str | None:
    """The top stream a branch of this name has (None: no branch can have that name)."""
    try:
        return branch_stream(tree.session_id, branch)
    except InvalidInput:
        return None


def _metadata_problem(
    tree: Tree, first: Record, started: events.BranchStarted
) -> tuple[str, str] | None:
    """Where and why the metadata readers follow on a fork's new streams is not what the
    fork wrote, if it is not: ``BranchStarted``'s ``aj.open`` names the outermost
    continuation (absent when none: a reader takes the branch's open chain from it), each
    continuation's the next one (absent on the innermost); ``aj.next_index`` on each is the
    fork's ``next_index``. (After the prefix check: the continuations are the base's open
    chain, each present.)"""
    chain = [started.continuations.get(place.stream) for place in started.base[1:]]
    firsts = [first]
    for stream in chain:
        found = tree.streams.get(stream or "")
        if not found:
            break  # missing: the continuations check reports it
        firsts.append(found[0])
    for n, event in enumerate(firsts):
        expected = chain[n] if n < len(chain) else None
        written = event.metadata.get(events.OPEN_KEY) or None
        if written != expected:
            shown = "no aj.open" if written is None else f"aj.open {cut(written, 120)}"
            wanted = "no open subagent" if expected is None else f"its continuation {expected}"
            return event.stream, f"{shown}, but the fork continues {wanted} there"
        index = event.metadata.get(events.NEXT_INDEX_KEY)
        if index != str(started.next_index):
            shown = "no aj.next_index" if index is None else f"aj.next_index {cut(index, 40)}"
            return event.stream, f"{shown}, but the fork's next index is {started.next_index}"
    return None
