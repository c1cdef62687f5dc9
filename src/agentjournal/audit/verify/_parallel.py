"""The integrity stage on a second core: a large tree's chains checked in two processes.

Each event's integrity check reads only the event and its predecessor's stored hash
(:func:`._integrity.first_problem`), so the events can be checked in any order and in
parts, and an event's view (the costliest check, the last) apart from the others
(:func:`._integrity.first_view_problem`). Python runs one thread of Python code at a
time and the checks are Python code (hashlib releases the lock only for buffers over 2
KiB; cryptography's Ed25519 verification releases it from version 50 on, but a thread
checking the signatures ahead, each taking the lock back after its check, measured no
faster), so the second core is a second process: a child forked (copy-on-write: nothing
is sent to it) checks the views of the events (:data:`CHILD_SHARE` of them, from the end
of the tree) while this process checks everything else; the child then runs, as if every
chain were sound, its part of the checks after integrity (the one that reads the call
markers its views gave: containment, which would compute the others again; and all the
others but the checkpoints', which evens out the two processes' shares), and sends back
the first bad view of each of its parts and their reports; meanwhile this process, once
its own checks found nothing, runs the checkpoints' check. All those reports count if
every chain is sound (else those checks do not run at all, as on one process). The
integrity report is the one one process would write: per stream, the first bad event,
and at one event the problem of the checks before its view.

Only where forking is safe and pays: on Linux (fork without exec is what
``multiprocessing`` avoids on macOS), with no other thread running (a lock another
thread holds stays held in the child), with a core to spare (the threads ready to run
now below the cores this process may use, less half a core: ``_forked.core_to_spare``),
for a tree of at least :data:`MIN_EVENTS` events (forking, and the pages both
processes then copy, cost about 15 ms for a tree of 8,000 events). Whatever goes wrong
in the child (it dies, is killed, sends nothing) costs only time: this process then
checks its views and runs the checks after integrity itself. Nothing here imports
``multiprocessing`` (its import is heavier than the verifier's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from agentjournal import _forked
from agentjournal.audit.verify._integrity import (
    Markers,
    Problem,
    first_problem,
    first_view_problem,
)
from agentjournal.audit.verify._report import Report
from agentjournal.records import Record

MIN_EVENTS: Final = 4000
"""The fewest events worth a second process (forking, and the pages both processes then
copy as they touch the records, cost about 15 ms for a tree of 8,000 events)."""

CHILD_SHARE: Final = 1.0
"""The share of the events whose views the child checks: all of them. Views are most of
the integrity check's cost, and the child's checks after integrity need their call
markers: containment would compute the markers of views checked here again, at about two
thirds of a view's cost each, which leaves nothing to gain by checking views here."""

# One part of the tree: a stream's name and the range of its revisions [start, stop).
Part = tuple[str, int, int]
# What checking one part found: its first bad event, or None.
Found = Problem | None
# The checks after integrity the child runs, given the call markers computed so far: each
# check's report, by name.
Then = Callable[[Markers], dict[str, Report]]


def check_integrity(
    report: Report,
    streams: Mapping[str, Sequence[Record]],
    markers: Markers,
    *,
    workers: int | None,
    then: Then | None = None,
    meanwhile: Callable[[], None] | None = None,
    forms: Callable[[], bool] | None = None,
    share: float = CHILD_SHARE,
) -> dict[str, Report] | None:
    """Check every stream's chain, reporting each stream's first bad event, in stream
    order: on two processes where ``workers`` is 2 and forking is safe, or None and
    :func:`forking_pays` for a tree of its size, the child checking the views of ``share``
    of the events and then, if they are sound, running ``then`` (its part of the checks
    after integrity) with the markers it computed, while this process,
    once its own checks found nothing, runs ``meanwhile`` (its part of them). ``forms``
    (the records' form check) runs here before anything else, the child already started:
    where it fails, nothing else is checked (the child is stopped) and None is returned.

    Returns:
        The reports ``then`` made in the child, which hold for the tree if every chain is
        sound; None where no child ran it (one process, a bad view, a failed child).
    """
    total = sum(len(stream) for stream in streams.values())
    both = _forked.forking_safe() if workers == 2 else workers is None and forking_pays(total)
    mine, theirs = split(streams, share if both else 0.0)
    child = _forked.forked(lambda: _child_work(streams, theirs, then)) if theirs else None
    try:
        if forms is not None and not forms():
            return None  # the child, if any, is stopped as it closes
        found = [_check(streams, part, markers) for part in mine]
        # The child's parts: every check but their views here (all of them without a child).
        found += [_check(streams, part, markers, views=child is None) for part in theirs]
        if child is not None and meanwhile is not None and not any(found):
            meanwhile()
        sent = child.result() if child is not None else None
    finally:
        if child is not None:
            child.close()
    staged: dict[str, Report] | None = None
    if child is not None:
        if sent is None:  # it failed: its views here
            found += [_views(streams, part, markers) for part in theirs]
        else:
            viewed, their_markers, staged = sent
            found += viewed
            for (name, position), marker in their_markers.items():
                markers[id(streams[name][position])] = marker
    parts = mine + theirs + (theirs if child is not None else [])
    for name in streams:
        # The first bad event; at one event, the checks before its view (listed first).
        first = min(
            (
                (problem[0], order, problem)
                for order, (part, problem) in enumerate(zip(parts, found, strict=True))
                if part[0] == name and problem is not None
            ),
            default=None,
        )
        if first is not None:
            report.fail("integrity", name, first[2][1], first[2][2])
    return staged


def forking_pays(events: int) -> bool:
    """Whether a tree of ``events`` events is checked in two processes unless the caller
    says: it is large enough (:data:`MIN_EVENTS`), a second core is free and forking is
    safe (:func:`~agentjournal._forked.core_to_spare`: on a busy machine two processes share
    one core and only add the cost of forking)."""
    return events >= MIN_EVENTS and _forked.core_to_spare()


def split(streams: Mapping[str, Sequence[Record]], share: float) -> tuple[list[Part], list[Part]]:
    """The tree's events in parts: this process's (the first ``1 - share`` of the events
    in stream order) and the child's (the rest); each stream is one part or two."""
    total = sum(len(stream) for stream in streams.values())
    cut = total - round(total * share)
    mine: list[Part] = []
    theirs: list[Part] = []
    seen = 0
    for name, stream in streams.items():
        size = len(stream)
        here = min(max(cut - seen, 0), size)  # how many of this stream's events are mine
        if here or not size:
            mine.append((name, 0, here))
        if here < size:
            theirs.append((name, here, size))
        seen += size
    return mine, theirs


def _check(
    streams: Mapping[str, Sequence[Record]], part: Part, markers: Markers, *, views: bool = True
) -> Found:
    name, start, stop = part
    return first_problem(name, streams[name], start, stop, markers, views=views)


def _views(streams: Mapping[str, Sequence[Record]], part: Part, markers: Markers) -> Found:
    name, start, stop = part
    return first_view_problem(streams[name], start, stop, markers)


def _child_work(
    streams: Mapping[str, Sequence[Record]], parts: list[Part], then: Then | None
) -> tuple[list[Found], dict[tuple[str, int], dict[str, Any]], dict[str, Report] | None]:
    """What the child sends back: the first bad view of each part; if there is none, the
    report of ``then`` (the checks after integrity, which only count if every chain is
    sound); else, or without ``then``, the markers it computed by stream and revision (a
    record's ``id`` means nothing in another process)."""
    markers: Markers = {}
    results = [_views(streams, part, markers) for part in parts]
    if then is not None and not any(results):
        # containment computes the markers of this process's parts
        return results, {}, then(markers)
    placed = {}
    for name, start, stop in parts:
        stream = streams[name]
        for position in range(start, stop):
            marker = markers.get(id(stream[position]))
            if marker is not None:
                placed[(name, position)] = marker
    return results, placed, None
