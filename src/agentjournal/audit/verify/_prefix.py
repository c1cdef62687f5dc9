"""A fork's shared prefix: the places it binds hold the recorded hashes, its base, cut,
next index and inherited authority log agree with the parent line, and each continuation
matches the subagent it continues (:func:`check_prefix`, part of the branches stage)."""

from __future__ import annotations

from agentjournal import events
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Tree, metadata_int
from agentjournal.records import Record


def check_prefix(
    report: Report, tree: Tree, name: str, started: events.BranchStarted, parent_top: str
) -> bool:
    """The branch's shared prefix is its parent's: each place it binds holds the hash it
    recorded, its base is the parent line's (or a line below it, for a cut in the parent's
    prefix), the cut is at its base, and its next index follows the prefix."""
    where = ("branches", name, 0)
    places = [*started.base, *([started.authority] if started.authority is not None else [])]
    for place in places:
        found = tree.streams.get(place.stream)
        if not found:
            report.fail(*where, f"the stream it continues, {place.stream}, is missing")
            return False
        if place.revision >= len(found) or found[place.revision].hash != place.hash:
            report.fail(
                *where,
                f"the shared prefix is not the parent's: {place.stream}@{place.revision} is not "
                "the event the fork bound (history behind the fork was rewritten, or the fork "
                "point forged)",
            )
            return False
    top = started.base[0]
    below = _lines_below(tree, parent_top)
    if top.stream not in below:
        report.fail(*where, f"its base {top.stream} is not on line {started.parent!r} or below")
        return False
    base_event = tree.streams[top.stream][top.revision]
    open_chain = [place.stream for place in started.base[1:]]
    opened = base_event.metadata.get(events.OPEN_KEY) or None
    if (open_chain[0] if open_chain else None) != opened or set(open_chain) != set(
        started.continuations
    ):
        report.fail(*where, "its base is not the parent's open subagents at the cut")
        return False
    if not _cut_at_base(tree, started, parent_top):
        report.fail(
            *where,
            f"the cut ({started.cut.kind} {started.cut.value}) is not where its base is: the "
            "cut was moved",
        )
        return False
    expected = _next_index(tree, started)
    if started.next_index != expected:
        report.fail(
            *where, f"next index {started.next_index}, but the parent's prefix gives {expected}"
        )
        return False
    own = next((r for r in tree.streams[name] if events.INDEX_KEY in r.metadata), None)
    if own is not None and own.metadata[events.INDEX_KEY] != str(started.next_index):
        report.fail(
            "branches",
            name,
            own.revision,
            f"the branch's first item is #{own.metadata[events.INDEX_KEY]}, not "
            f"#{started.next_index}",
        )
        return False
    problem = _authority_problem(tree, started)
    if problem is not None:
        report.fail(
            *where,
            f"its authority ({_shown(started.authority)}) is not the log in force at its cut: "
            f"{problem}",
        )
        return False
    return _check_continuations(report, tree, name, started)


def _reached(record: Record) -> str | None:
    """The stream whose events a prefix holds because it holds ``record``: the subsession a
    parent copy of ``SubagentStarted`` opens, or the one a ``SubagentCompleted`` closes
    (a continuation was opened by no event of its line: its close is what reaches it)."""
    if record.opens is not None:
        return record.opens
    if record.type == events.SUBAGENT_COMPLETED:
        return record.metadata.get(events.CLOSES_KEY) or None
    return None


def _prefix_ids(tree: Tree, started: events.BranchStarted) -> set[str]:
    """The ids of the events before a fork's cut, on every line it continues: each base
    stream up to its base revision, a continuation's original up to the place it continues,
    a branch's parent line up to its own fork's base (recursively), and every subsession
    opened or closed in those parts (whole: it closed before the cut, unless it is itself
    bound). What the engine's ``prefix`` holds when it binds the authority log."""
    bound: dict[str, int] = {}
    places = list(started.base)
    while places:
        place = places.pop()
        if bound.get(place.stream, -1) >= place.revision:
            continue
        bound[place.stream] = place.revision
        below = tree.started.get(place.stream, (None, None))[1]
        if below is not None:
            places.extend(below.base)
        continued = tree.continued.get(place.stream, (None, None))[1]
        if continued is not None:
            places.append(continued.continues)
    found: set[str] = set()
    done: dict[str, int] = {}
    pending = list(bound.items())
    while pending:
        name, upto = pending.pop()
        if done.get(name, -1) >= upto:
            continue
        done[name] = upto
        for record in tree.streams.get(name, [])[: upto + 1]:
            found.add(record.id)
            child = _reached(record)
            if child is not None and child in tree.streams:
                pending.append((child, bound.get(child, len(tree.streams[child]) - 1)))
    return found


def _authority_problem(tree: Tree, started: events.BranchStarted) -> str | None:
    """Why a fork's ``authority`` is not the log in force at its cut, if it is not.

    The engine binds the last entry before the cut on the log of the line whose own part
    holds the cut (the line of ``base[0]``), then the entries right after it that record
    grants made before the cut (one write's log entries follow its tree's events); when that
    log has none, what that line inherited at its own fork (None on main). A bundle holds no
    positions, so the verifier checks it through the grants the entries name: every grant
    entry up to the bound one is of a grant in the prefix, none after it is (a reset names
    no event: one between the cut and the next grant entry cannot be placed)."""
    top = started.base[0].stream
    log = tree.line_logs().get(top)
    if log is None:
        return None  # its fork is malformed: the branches check of that line reports it
    prefix = _prefix_ids(tree, started)

    def in_prefix(entry: Record) -> bool | None:
        """Whether a grant entry records a grant in the prefix (None: not a grant entry)."""
        if entry.type != events.AUTHORITY_HELD:
            return None
        return (entry.body or {}).get("event") in prefix

    entries = tree.streams.get(log, [])
    place = started.authority
    if place is not None and place.stream == log:
        if any(in_prefix(entry) is False for entry in entries[: place.revision + 1]):
            return f"{log}@{place.revision} records grants made after the cut"
        if any(in_prefix(entry) for entry in entries[place.revision + 1 :]):
            return f"{log} records grants made before the cut after {log}@{place.revision}"
        return None
    if any(in_prefix(entry) for entry in entries):
        return f"{log} records grants made before the cut, but the fork binds another log"
    below = tree.started.get(top, (None, None))[1]
    inherited = below.authority if below is not None else None
    if place != inherited:
        return f"{top}'s line inherited {_shown(inherited)}, not {_shown(place)}"
    return None


def _shown(place: events.StreamPlace | None) -> str:
    return "no authority log" if place is None else f"{place.stream}@{place.revision}"


def _continued_fields(continued: events.SubagentContinued) -> tuple[str, str, str]:
    return continued.agent_type, continued.source_agent, continued.call_id


def _started_fields(data: str) -> tuple[str, str, str]:
    subagent, _ = events.decode_subagent_started(data.encode())
    return subagent.agent_name, subagent.source_agent, subagent.call_id


def _lines_below(tree: Tree, top: str) -> list[str]:
    """``top`` and the top streams of the lines below it, nearest first."""
    found = [top]
    while found[-1] in tree.started and len(found) <= len(tree.started):
        started = tree.started[found[-1]][1]
        parent = tree.tops.get(started.parent) if started is not None else None
        if parent is None or parent in found:
            break
        found.append(parent)
    return found


def _cut_at_base(tree: Tree, started: events.BranchStarted, parent_top: str) -> bool:
    """Whether the cut is where the base is: after revision R of the parent's top stream
    for a revision cut; for an index or turn cut, the item that starts the branch's own
    part (#next_index) is the event right after the base on one of the base streams (the
    top stream's, or an open subagent's: a cut inside a subagent falls on its stream)."""
    at, top = started.cut, started.base[0]
    if at.kind == "revision":
        return top.stream == parent_top and top.revision == at.value
    want = str(started.next_index)
    for place in started.base:
        stream = tree.streams.get(place.stream, [])
        following = stream[place.revision + 1] if place.revision + 1 < len(stream) else None
        if following is not None and following.metadata.get(events.INDEX_KEY) == want:
            return at.kind != "index" or at.value == started.next_index
    return False


def _next_index(tree: Tree, started: events.BranchStarted) -> int:
    """One more than the largest message index before the cut (0: none): on each base
    stream up to its base revision, in every subsession opened or closed there (whole: it
    closed before the cut, or is itself a base stream; a continuation closed before the
    cut is reached through its close), and the prefix of a base line."""
    bound = {place.stream: place.revision for place in started.base}
    largest = -1
    pending = list(bound)
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        stream = tree.streams.get(name, [])
        upto = bound.get(name, len(stream) - 1)
        for record in stream[: upto + 1]:
            index = metadata_int(record.metadata.get(events.INDEX_KEY))
            if index is not None:
                largest = max(largest, index)
            child = _reached(record)
            if child is not None:
                pending.append(child)
        below = tree.started.get(name, (None, None))[1]
        if below is not None:  # the base line is a branch: its own prefix is before it
            largest = max(largest, below.next_index - 1)
    return largest + 1


def _check_continuations(
    report: Report, tree: Tree, name: str, started: events.BranchStarted
) -> bool:
    """Each continuation begins with a ``SubagentContinued`` naming the ``BranchStarted``,
    continuing the original at its base place, with the original's agent, call and grant
    (the original's ``SubagentStarted``, or its ``SubagentContinued`` when the original is a
    continuation itself)."""
    bases = {place.stream: place for place in started.base[1:]}
    first = tree.started[name][0]
    for original, stream in started.continuations.items():
        where = ("branches", stream, 0)
        record, continued = tree.continued.get(stream, (None, None))
        opener = tree.opened_by.get(original)
        twin = tree.streams.get(original, [None])[0]
        if record is None or continued is None:
            report.fail(*where, f"the continuation of {original} is missing or malformed")
            return False
        if (
            record.metadata.get(events.TWIN_KEY) != first.id
            or continued.subsession_stream != stream
        ):
            report.fail(*where, "the continuation does not name its BranchStarted")
            return False
        if continued.continues != bases.get(original):
            report.fail(*where, "the continuation continues another place than the fork's base")
            return False
        # The original is a subsession a handoff opened (on the parent line, or on a branch
        # below it), or itself a continuation: a fork of a branch inside its continuations.
        # That one is checked against what it continues by its own branch's check.
        below = tree.continued.get(original, (None, None))[1]
        if below is not None:
            if (
                _continued_fields(continued) != _continued_fields(below)
                or continued.granted_authority != below.granted_authority
            ):
                report.fail(*where, "the continuation does not match the subagent it continues")
                return False
            continue
        if opener is None or twin is None or twin.type != events.SUBAGENT_STARTED:
            report.fail(*where, f"the subagent it continues, {original}, is not in the bundle")
            return False
        if twin.data is not None and (  # a redacted bundle shows the handoff as a view
            _continued_fields(continued) != _started_fields(twin.data)
            or continued.granted_authority != events.granted_authority(twin.body or {})
        ):
            report.fail(*where, "the continuation does not match the subagent it continues")
            return False
    return True
