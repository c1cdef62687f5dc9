"""``trace export --all`` (without ``--follow``): every tree of the store, folded in one
process or in two parts, this process's and a forked child's
(:mod:`agentjournal.read.traces.parts`), put together in one process's order; and the
warning that a damaged event is left out, which the follower gives too.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from agentjournal.errors import JournalError

if TYPE_CHECKING:
    from agentjournal._forked import Child
    from agentjournal.cli._trace_sinks import _Destination
    from agentjournal.read.traces import ProjectedSpan
    from agentjournal.read.traces.parts import Part, Place
    from agentjournal.store.contract import EventStore

PAGE: Final = 5000
"""Events per read of a one-shot export of every tree."""


S = TypeVar("S")
# What one part of an export of every tree sends: its spans as its output makes them,
# placed, and the damaged events it left out (position, stream, what is wrong).
# Where each span was sent, the spans, the damaged events left out, and the end of what was
# read: the position after its last event (0: none).
_Projected = tuple[list["Place"], list[S], list[tuple[int, str, str]], int]


_Line = tuple[str, str]
"""A span's trace id and its ``--jsonl`` line: a plain tuple, which a child sends through
its pipe at a third of the cost of a named tuple."""


def _lines() -> Callable[[ProjectedSpan], _Line]:
    """What makes a span's :data:`_Line` (the printer imported once, not per span)."""
    from agentjournal.read.traces.jsonl import span_line

    def line(span: ProjectedSpan) -> _Line:
        return span.trace_id, span_line(span)

    return line


def _as_is(span: ProjectedSpan) -> ProjectedSpan:
    return span


def _output(destination: _Destination) -> Callable[[ProjectedSpan], Any]:
    """What a part of an export of every tree makes of each span for ``destination``: its
    line for ``--jsonl`` (printed in the part's process), else the span itself."""
    return _lines() if destination.kind == "jsonl" else _as_is


def _second_part(uri: str | None, output: Callable[[ProjectedSpan], Any]) -> Child | None:
    """A child process folding the second half of the trees (:mod:`.parts`) of the store
    at ``uri``, each span sent as ``output`` makes it, when a second core is free and
    forking is safe; else None."""
    from agentjournal._forked import core_to_spare, forked

    _import_parts(uri)  # first: whether forking is safe is then judged after the imports
    if not core_to_spare():
        return None
    return forked(lambda: asyncio.run(_part_of(uri, 1, 2, output)))


def _import_parts(uri: str | None) -> None:
    """Import what both parts run (the projector, the printer, the store's backend) before
    the fork: the child then has them without importing them again (imported once, not
    twice: about a tenth of a second of CPU). One process imports them all the same."""
    import agentjournal._gc
    import agentjournal.cli._render
    import agentjournal.read.traces
    import agentjournal.read.traces.evaluations
    import agentjournal.read.traces.jsonl
    import agentjournal.read.traces.parts
    from agentjournal.store import store_uri

    if store_uri(uri).startswith("sqlite://"):
        import agentjournal.store.sqlite  # noqa: F401


async def _part_of(
    uri: str | None, index: int, count: int, output: Callable[[ProjectedSpan], S]
) -> _Projected[S]:
    """What the child sends: one part's spans of every tree of the store at ``uri``."""
    from agentjournal.read.traces.parts import Part
    from agentjournal.store import open_store, store_uri

    store = await open_store(store_uri(uri), create=False)
    try:
        return await _project(store, Part(index, count), output)
    finally:
        await store.close()


async def _every_tree(
    store: EventStore, second: Child | None, output: Callable[[ProjectedSpan], S]
) -> list[S]:
    """Every span of every tree in the store, each run span with the evaluation events of
    the eval scores of its turns: on one process, or in two parts, this process's and
    ``second``'s (a child folding the other part with the same ``output``; if it fails,
    this process folds that part too), each as ``output`` makes it. The spans and the
    warnings are those of one process, in its order."""
    from agentjournal.read.traces.parts import Part, in_order

    warned: set[str] = set()
    if second is None:
        _, made, damaged, _ = await _project(store, None, output, shown=True)
        for _, stream, problem in damaged:
            _skipped(stream, problem, warned)
        return made
    mine = await _project(store, Part(0, 2), output, shown=True)
    sent: _Projected[S] | None = second.result()
    if sent is None or sent[3] != mine[3]:
        # The child failed, or read up to another end (a writer appended meanwhile): its part
        # is folded here, up to where this process read, so both parts are of one prefix of
        # the global order, as one process's export is.
        sent = await _project(store, Part(1, 2), output, until=mine[3])
    parts = [mine, sent]
    for _, stream, problem in in_order(
        [[((0, at, ""), (at, s, p)) for at, s, p in part[2]] for part in parts]
    ):
        _skipped(stream, problem, warned)
    return in_order([list(zip(places, made, strict=True)) for places, made, _, _ in parts])


async def _project(
    store: EventStore,
    part: Part | None,
    output: Callable[[ProjectedSpan], S],
    *,
    shown: bool = False,
    until: int | None = None,
) -> _Projected[S]:
    """Where each span was sent (with a ``part`` only: :func:`.parts.in_order` puts parts
    together by it), the spans of the trees of ``part`` (None: every tree) with the
    evaluation events of the eval scores of their turns, each as ``output`` makes it, the
    damaged events it left out, and the end of what it read. ``shown``: with a progress
    bar (on a terminal); ``until``: the events before that position only."""
    from agentjournal._gc import no_collection, settled
    from agentjournal.cli._render import progress
    from agentjournal.read.traces import Projector
    from agentjournal.read.traces.evaluations import Evaluations
    from agentjournal.read.traces.parts import FINISHED
    from agentjournal.read.traces.stored import StoredEvent
    from agentjournal.records import DamagedEvent

    projector = Projector(part=part)
    spans: list[ProjectedSpan] = []
    places: list[Place] = []
    evaluations = Evaluations()
    damaged: list[tuple[int, str, str]] = []
    end = 0
    feed, of, skips, folds = projector.feed, StoredEvent.of, projector.skips, projector.folds
    with (
        progress("reading the store") if shown else contextlib.nullcontext(_no_progress) as advance,
        settled() as settle,
    ):
        # The next page is read on the store's side while this one is projected.
        reading = asyncio.ensure_future(store.read_all(from_position=0, limit=PAGE))
        try:
            while True:
                page = await reading
                more = len(page) == PAGE
                if until is not None and page and page[-1].position >= until:
                    page = [event for event in page if event.position < until]
                    more = False
                if more:
                    after = page[-1].position + 1
                    reading = asyncio.ensure_future(store.read_all(from_position=after, limit=PAGE))
                if page:
                    end = page[-1].position + 1
                with no_collection():  # records, spans and state: acyclic, and many
                    for event in page:
                        evaluations.see(event)  # every part sees every score and turn
                        if part is not None and skips(event.stream, event.type):
                            continue
                        try:
                            sent = feed(of(event))
                        except DamagedEvent as bad:  # one damaged event must not cost all
                            if folds(event.stream):  # another part's: that part warns
                                damaged.append((event.position, bad.stream, str(bad)))
                            continue
                        if sent:
                            spans += sent
                            if part is not None:
                                places += [(0, event.position, "")] * len(sent)
                    settle()  # kept to the end: no collection between pages scans it again
                advance(len(page))
                if not more:
                    break
        finally:
            if not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError, JournalError):
                    await reading
    with no_collection():  # the spans left open, and every span's output: acyclic, and many
        for key, finished in projector.finish_by_tree():
            spans += finished
            if part is not None:
                places += [(FINISHED, 0, key)] * len(finished)
        made = list(map(output, evaluations.on(spans)))
    return places, made, damaged, end


def _no_progress(done: int) -> None:
    """No progress bar."""


def _skipped(stream: str, problem: str, warned: set[str]) -> None:
    """Warn on stderr that a damaged event is left out (once per stream: its next events
    are likely damaged the same way)."""
    from agentjournal._text import printable

    if stream not in warned:
        warned.add(stream)
        print(f"agentjournal: skipped {printable(problem)}", file=sys.stderr, flush=True)
