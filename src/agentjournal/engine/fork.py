"""Branches: where a fork leaves its parent line, and the fork's write plan.

A branch is a *line*: its top stream ``AgentBranch-{session}@{key}`` starts with
``agentjournal.BranchStarted``, which names the exact place (stream, revision, chain
hash) of every parent-line stream it continues; nothing is copied. A fork is one
atomic write (:func:`plan_fork`): ``BranchForked`` at the parent line's head,
``BranchStarted`` as the branch stream's first event (``NO_STREAM``: the name is
taken by the stream itself, so two racing forks of one name cannot both land) and
``BranchAdded`` on the session's registry ``AgentBranches-{session}``.

Every fork is *as of a moment*: a global position P, the parent line's events before it
being the branch's prefix (:class:`~agentjournal.events.Cut`). :func:`cut_position`
turns an item index or a revision into P, :func:`fork_point` reads the parent line as
of P (its last event before P, the next free index, the items visible then), both
pure over the events the caller read. :func:`revision_at` asks a store which revision
of a stream is the last before P.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeAlias

from agentjournal import events
from agentjournal.engine.plan import SessionFacts, WritePlan
from agentjournal.engine.sealing import seal_event
from agentjournal.engine.timeline import Entry, Timeline, TimelineEvent, fold
from agentjournal.engine.tree import Commit, SessionTree, index_of
from agentjournal.engine.turns import is_user
from agentjournal.errors import CodecError, InvalidInput, StreamNotFound
from agentjournal.ledger.chain import GENESIS
from agentjournal.records import opened_stream
from agentjournal.store.abilities import abilities_of
from agentjournal.store.contract import (
    AppendRequest,
    EventStore,
    ModelChange,
    ModelCopy,
    NewEvent,
    RecordedEvent,
    StreamState,
    event_id,
)
from agentjournal.streams import branches_stream

logger = logging.getLogger("agentjournal.engine")


async def revision_at(store: EventStore, stream: str, position: int) -> int:
    """The revision of ``stream``'s last event before global position ``position`` (-1:
    none, or no such stream).

    A store that declares a :class:`~agentjournal.store.abilities.RevisionIndex` answers
    it (SQLite: one indexed query); any other is searched by halves,
    ``read(stream, from_revision=k, limit=1)`` each (O(log n) reads: positions grow with
    revisions within a stream).
    """
    index = abilities_of(store).revisions
    if index is not None:
        return await index.revision_at(stream, position)
    head = await store.head(stream)
    if head is None:
        return -1
    low, high = -1, head + 1  # the answer is in [low, high): low's event is before P
    while high - low > 1:
        middle = (low + high) // 2
        try:
            found = await store.read(stream, from_revision=middle, limit=1)
        except StreamNotFound:
            return -1
        if found and found[0].position < position:
            low = middle
        else:
            high = middle
    return low


async def read_types(
    store: EventStore, stream: str, after: int, types: frozenset[str]
) -> list[RecordedEvent]:
    """``stream``'s events after revision ``after`` whose type is one of ``types``, oldest
    first (none: no such stream).

    A store that declares :class:`~agentjournal.store.abilities.TypedReads` answers it
    (SQLite: one range scan that builds no other event); any other's events after
    ``after`` are read and filtered.
    """
    typed = abilities_of(store).typed
    if typed is not None:
        return await typed.read_types(stream, after, sorted(types))
    try:
        read = await store.read(stream, from_revision=after + 1)
    except StreamNotFound:
        return []
    return [event for event in read if event.type in types]


HIDING: Final = frozenset({events.ITEM_POPPED, events.SESSION_CLEARED, events.BRANCH_DELETED})
"""The event types that hide items already written (a pop, a clear, a deleted branch)."""


def _is_item(event: RecordedEvent) -> bool:
    """Whether an event with ``aj.index`` is an item (a parent copy of ``SubagentStarted``
    stands for the handoff call; a twin or a ``SubagentCompleted`` is none)."""
    if event.type == events.SUBAGENT_STARTED:
        return opened_stream(event) is not None
    return event.type != events.SUBAGENT_COMPLETED


def cut_position(
    tree: Mapping[str, Sequence[RecordedEvent]], top: str, kind: str, value: int
) -> int:
    """The global position a cut of ``kind`` (``index`` or ``revision``) resolves to (pure).

    ``index``: the position of item ``value``'s event (the cut of ``replay --at``: the
    items written before it by the same ``add_items`` are in). ``revision``: just after
    that revision of ``top``.

    Args:
        tree: The parent line's events, stream by stream.
        top: The parent line's top stream.
        kind: ``index`` or ``revision``.
        value: The index or revision.

    Raises:
        InvalidInput: There is no such item or revision.
    """
    if kind == "revision":
        found = next((e for e in tree.get(top, ()) if e.revision == value), None)
        if found is None:
            raise InvalidInput(f"{top} has no revision {value}")
        return found.position + 1
    wanted = str(value)
    for stream_events in tree.values():
        for event in stream_events:
            if event.metadata.get(events.INDEX_KEY) == wanted and _is_item(event):
                return event.position
    raise InvalidInput(f"{top} has no item #{value}")


def visible_at(events_: Iterable[RecordedEvent], top: str, position: int) -> list[Entry]:
    """The items a session tree showed just before global position ``position`` (pure),
    oldest first: every event before it folded as ``get_items`` folds them."""
    return visible_before(decode_line(events_, top, position), position)


Decoded: TypeAlias = list[tuple[int, TimelineEvent]]
"""What a line's events add to its history, each with its event's global position."""


def decode_line(events_: Iterable[RecordedEvent], top: str, position: int | None = None) -> Decoded:
    """Decode a line's events once (those before ``position``; None: all) into what
    they add to its history, for :func:`visible_before` at any cut (pure)."""
    reader = SessionTree(top)
    decoded: Decoded = []
    for event in events_:
        if (position is None or event.position < position) and (
            event.type != events.SUBAGENT_COMPLETED
        ):
            at = event.position
            decoded.extend((at, change) for change in reader.apply_recorded(event))
    return decoded


def visible_before(decoded: Decoded, position: int | None) -> list[Entry]:
    """The items visible just before global position ``position`` (None: after
    everything), oldest first, from a line decoded by :func:`decode_line` (pure)."""
    timeline = Timeline()
    fold(timeline, [c for at, c in decoded if position is None or at < position])
    return timeline.latest(None)


def subagent_opened(first: RecordedEvent) -> tuple[events.Subagent, Any]:
    """The subagent a subsession's first event opens, and its granted authority (JSON form,
    or None): a ``SubagentStarted`` twin, or a branch's ``SubagentContinued`` (which
    carries its original's identity and grant, and no prompt).

    Raises:
        CodecError: The event is neither, or unreadable.
    """
    if first.type == events.SUBAGENT_CONTINUED:
        continued = events.SubagentContinued.decode(first.data)
        subagent = events.Subagent(
            agent_id=continued.agent_id,
            agent_name=continued.agent_type,
            source_agent=continued.source_agent,
            call_id=continued.call_id,
            stream=continued.subsession_stream,
            parent_stream=continued.parent_stream,
            prompt="",
        )
        return subagent, continued.granted_authority
    if first.type != events.SUBAGENT_STARTED:
        raise CodecError(f"{first.type} opens no subagent")
    try:
        body = json.loads(first.data)
    except ValueError as error:
        raise CodecError(f"{first.type} is not JSON: {error}") from None
    return events.decode_subagent_started(first.data)[0], events.granted_authority(body)


def continues(event: RecordedEvent) -> events.StreamPlace | None:
    """Where a continuation stream whose first event is ``event`` goes on below the fork:
    the original subsession and its last revision before the cut (None: ``event`` is no
    ``SubagentContinued`` at revision 0, or it is unreadable)."""
    if event.type != events.SUBAGENT_CONTINUED or event.revision != 0:
        return None
    try:
        return events.SubagentContinued.decode(event.data).continues
    except CodecError as error:
        logger.warning("skipping the unreadable continuation %s: %s", event.stream, error)
        return None


def turn_position(
    tree: Mapping[str, Sequence[RecordedEvent]], decoded: Decoded, top: str, turn: int, line: str
) -> int:
    """The cut before turn ``turn``: the position of the ``turn``-th user message visible
    now, from the line's events decoded once (pure; no second read of the line).

    Raises:
        InvalidInput: Fewer user messages are visible (the SDK's text).
    """
    users = [entry for entry in visible_before(decoded, None) if is_user(entry.item())]
    if turn > len(users):
        raise InvalidInput(f"Turn {turn} does not contain a user message in branch '{line}'")
    return cut_position(tree, top, "index", users[turn - 1].index)


def next_index_of_rows(
    rows: Sequence[tuple[int, int, str]], before: Mapping[int, int], now: int
) -> int | None:
    """The next free index at a cut, from a read model's rows (pure), when nothing since
    the cut hid an item (the caller checked): every item written since is then a row.

    ``before`` maps each row's stream number to its last revision before the cut, so a
    row is written since the cut when its revision is above that. Indexes are given out
    in write order, gapless per line: the items since the cut must be exactly the
    indexes from the first of them to ``now`` (the line's next index), and the cut's next
    index is that first one (``now`` when there is none). None when they are not (an
    index cut that one write's streams straddle): the events then say.
    """
    since = [
        index for index, key, _ in rows if (key >> 8) & 0xFFFF_FFFF > before.get(key >> 40, -1)
    ]
    if not since:
        return now
    first = since[0]
    if since[-1] != now - 1 or len(since) != now - first:
        return None
    return first


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """The parent line as of a cut (:func:`fork_point`).

    Attributes:
        base: The top stream's last event before the cut.
        open: The subsession open on the top stream then (``aj.open`` of ``base``), if any.
        next_index: The next free message index then.
        prefix_items: How many items were visible then.
        chain: The last event before the cut of each subsession open then, outermost
            first (the ``aj.open`` chain from ``base``): what the branch's continuations
            continue (DESIGN, "Branches").
    """

    base: RecordedEvent
    open: str | None
    next_index: int
    prefix_items: int
    chain: tuple[RecordedEvent, ...] = ()


def fork_point(
    tree: Mapping[str, Sequence[RecordedEvent]],
    top: str,
    position: int,
    *,
    below: Sequence[str] = (),
    decoded: Decoded | None = None,
) -> ForkPoint:
    """The parent line as of global position ``position`` (pure).

    Args:
        tree: The parent line's events, stream by stream (its segments' too).
        top: The parent line's top stream.
        position: The cut.
        below: The top streams of the lines below it, nearest first: when nothing of
            ``top`` precedes the cut (a cut in a branch's prefix), the base is the
            nearest of them that has an event before it.
        decoded: The same events already decoded (:func:`decode_line`), if they were.

    Raises:
        InvalidInput: Nothing of ``top`` (or of those below) precedes the cut (a branch
            needs a parent event to bind to).
    """
    base = None
    for line in (top, *below):
        for event in tree.get(line, ()):
            if event.position < position:
                base = event
        if base is not None:
            break
    if base is None:
        raise InvalidInput(f"nothing of {top} precedes the cut: there is nothing to fork")
    before = [event for stream in tree.values() for event in stream if event.position < position]
    # From the items' own indexes, not ``aj.next_index``: every event of one write carries
    # the write's final next index, and a cut may fall between the items of one write.
    found = (index_of(event) for event in before)
    return ForkPoint(
        base=base,
        open=base.metadata.get(events.OPEN_KEY) or None,
        next_index=max((index + 1 for index in found if index is not None), default=0),
        prefix_items=len(
            visible_at(before, top, position)
            if decoded is None
            else visible_before(decoded, position)
        ),
        chain=open_at(tree, base, position),
    )


def open_at(
    tree: Mapping[str, Sequence[RecordedEvent]], base: RecordedEvent, position: int
) -> tuple[RecordedEvent, ...]:
    """The subsessions open at global position ``position`` (pure): for each, its last
    event before it, outermost first.

    Followed as a reader follows them: ``aj.open`` of the top stream's last event before
    the cut names the outermost, whose own last event before the cut names the next, and
    so on (every event on a stream with an open child carries it; a close carries none).

    Raises:
        InvalidInput: An open subsession has no event before the cut in ``tree`` (the
            line was read incompletely, or its events are damaged): no branch is made
            rather than one that drops the subagent.
    """
    chain: list[RecordedEvent] = []
    seen = {base.stream}
    child = base.metadata.get(events.OPEN_KEY)
    while child and child not in seen:
        seen.add(child)
        last = None
        for event in tree.get(child, ()):
            if event.position < position:
                last = event
        if last is None:
            raise InvalidInput(
                f"the subagent stream {child}, open at the cut, has nothing before it: "
                "the fork cannot continue it"
            )
        chain.append(last)
        child = last.metadata.get(events.OPEN_KEY)
    return tuple(chain)


def plan_fork(
    tree: SessionTree,
    facts: SessionFacts,
    started: events.BranchStarted,
    *,
    next_index: int,
    registry: tuple[int, str],
    nonce: str,
    trace: Mapping[str, str],
    continued: Sequence[events.SubagentContinued] = (),
    copy: ModelCopy | None = None,
) -> WritePlan:
    """The fork's one atomic write (pure): ``BranchForked`` at the parent line's head,
    ``BranchStarted`` creating the branch stream, a ``SubagentContinued`` creating each
    continuation stream, ``BranchAdded`` at the registry's head.

    Args:
        tree: The parent line (its top stream is ``facts.stream``), loaded.
        facts: The parent line's session facts.
        started: The branch's first event (``BranchForked`` carries the same fields).
        next_index: The parent line's next free index now (its marker's ``aj.next_index``).
        registry: The registry's head: its last revision (-1: none) and chain hash.
        nonce: Unique to this fork: the three event ids derive from it, so every attempt
            carries the same ids and a retry of a write that landed is recognised.
        trace: The caller's metadata (only ``trace_id``/``span_id`` are kept).
        continued: The continuation of each subagent open at the cut, outermost first
            (``started.continuations`` maps their originals to them). Each is its
            stream's first event (``NO_STREAM``), carries ``aj.open`` of the next one as
            ``BranchStarted`` carries the first's: the branch's open chain, found by a
            reader exactly as on any line.
        copy: The branch's read model, as a copy of the parent line's (DESIGN, "Branches"):
            the branch stream's request carries it (a store that keeps a model starts the
            branch's tree with it); None: no change, so the branch's tree is never
            current and its full reads take the events.
    """
    top = facts.stream
    head = tree.heads.get(top, -1)
    assert head >= 0, "a fork needs its parent line's stream"
    ids = [event_id(top, nonce, "fork", n) for n in range(3 + len(continued))]
    forked_id, started_id, added_id = ids[:3]
    opens = [c.subsession_stream for c in continued]
    assert sorted(opens) == sorted(started.continuations.values()), "not the branch's"
    traced = {k: v for k, v in trace.items() if k in (events.TRACE_ID_KEY, events.SPAN_ID_KEY)}
    version = {events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE}
    forked = events.BranchForked(
        **{
            field.name: getattr(started, field.name)
            for field in dataclasses.fields(events.BranchForked)
        }
    )

    marker = {**version, events.NEXT_INDEX_KEY: str(next_index), events.TWIN_KEY: str(started_id)}
    if tree.chain:  # the parent line's open subagent stays open after the marker
        marker[events.OPEN_KEY] = tree.chain[0].stream
    marker.update(traced)
    data = forked.encode()
    marker_hash = seal_event(
        top, head + 1, forked_id, events.BRANCH_FORKED, data, marker, tree.hashes.get(top, "")
    )
    first = {
        **version,
        events.NEXT_INDEX_KEY: str(started.next_index),
        events.TWIN_KEY: str(forked_id),
        **traced,
    }
    if opens:
        first[events.OPEN_KEY] = opens[0]
    first_data = started.encode()
    seal_event(
        started.branch_stream, 0, started_id, events.BRANCH_STARTED, first_data, first, GENESIS
    )
    continuations: list[AppendRequest] = []
    for n, continuation in enumerate(continued):
        meta = {
            **version,
            events.NEXT_INDEX_KEY: str(started.next_index),
            events.TWIN_KEY: str(started_id),
            **traced,
        }
        if n + 1 < len(opens):
            meta[events.OPEN_KEY] = opens[n + 1]
        body = continuation.encode()
        stream = continuation.subsession_stream
        seal_event(stream, 0, ids[3 + n], events.SUBAGENT_CONTINUED, body, meta, GENESIS)
        continuations.append(
            AppendRequest(
                stream,
                [NewEvent(events.SUBAGENT_CONTINUED, body, meta, ids[3 + n])],
                StreamState.NO_STREAM,
            )
        )
    registry_stream = branches_stream(facts.session_id)
    entry = events.BranchAdded(
        started.branch, started.branch_stream, started.parent, str(started_id)
    )
    entry_meta = {**version, **traced}
    entry_data = entry.encode()
    registry_head, registry_hash = registry
    seal_event(
        registry_stream,
        registry_head + 1,
        added_id,
        events.BRANCH_ADDED,
        entry_data,
        entry_meta,
        registry_hash if registry_head >= 0 else GENESIS,
    )
    requests = [
        AppendRequest(top, [NewEvent(events.BRANCH_FORKED, data, marker, forked_id)], head),
        AppendRequest(
            started.branch_stream,
            [NewEvent(events.BRANCH_STARTED, first_data, first, started_id)],
            StreamState.NO_STREAM,
            None if copy is None else ModelChange(started.branch_stream, [copy]),
        ),
        AppendRequest(
            registry_stream,
            [NewEvent(events.BRANCH_ADDED, entry_data, entry_meta, added_id)],
            StreamState.NO_STREAM if registry_head < 0 else registry_head,
        ),
        *continuations,
    ]
    commit = Commit(heads={top: head + 1}, hashes={top: marker_hash}, written=1)
    return WritePlan(
        requests,
        commit,
        foreign=frozenset({started.branch_stream, registry_stream, *opens}),
    )


@dataclass(frozen=True, slots=True)
class LineHead:
    """A branch line's top stream as a write that ends it must know it.

    Attributes:
        name: The branch's name.
        stream: Its top stream.
        parent: Its parent line's name.
        revision: The stream's last revision.
        hash: That event's chain hash.
        next_index: The line's next free message index (its ``BranchDeleted`` hides every
            index below).
        open: The outermost subagent open on the line (``aj.open`` of the top stream's
            last event), None when none is: the end must close it (and any inside it).
    """

    name: str
    stream: str
    parent: str
    revision: int
    hash: str
    next_index: int
    open: str | None = None


def line_end_id(session_id: str, nonce: str, n: int) -> uuid.UUID:
    """The id of the ``BranchDeleted`` that ends the ``n``-th line of an end planned with
    ``nonce`` (:func:`plan_line_ends`): the subagents that end closes name it
    (``aj.line_end``) before it is planned."""
    return event_id(branches_stream(session_id), nonce, "end", 2 * n)


def line_end_reason(branch: str, reason: str) -> str:
    """The ``reason`` of a ``SubagentCompleted`` the end of branch line ``branch`` writes
    (``reason``: ``deleted`` or ``cleared``)."""
    if reason == "deleted":
        return f"branch {branch!r} was deleted (delete_branch) while this subagent was open"
    return (
        f"the session was cleared (clear_session) while this subagent was open on branch {branch!r}"
    )


def plan_line_ends(
    session_id: str,
    lines: Sequence[LineHead],
    *,
    reason: str,
    registry: tuple[int, str],
    nonce: str,
    trace: Mapping[str, str],
    closes: Mapping[str, WritePlan] | None = None,
) -> tuple[list[AppendRequest], dict[str, str]]:
    """The requests that end branch lines (pure): ``BranchDeleted`` at each line's top
    stream's exact head and one ``BranchRemoved`` per line at the registry's head.

    A delete writes one line; a clear (``reason="cleared"``) every live one, beside the
    main line's ``SessionCleared`` in the same transaction. Ids derive from ``nonce``
    (``event_id(session registry, nonce, "end", n)``, :func:`line_end_id`): every attempt
    carries the same ids, so a retry of a write that landed is recognised. Returns the
    requests and each line's chain hash after its ``BranchDeleted``.

    ``closes``: per line's top stream, the plan that closes the subagents open on it
    (``plan_items`` with ``closing``, as ``close_subagents`` plans it): its requests join
    this write, and the ``BranchDeleted`` follows its last event on the top stream, in one
    request with it (a stream appears once per transaction). That line's ``revision`` and
    ``hash`` are then the top stream's after those closes.
    """
    registry_stream = branches_stream(session_id)
    hashes: dict[str, str] = {}
    traced = {k: v for k, v in trace.items() if k in (events.TRACE_ID_KEY, events.SPAN_ID_KEY)}
    version = {events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE}
    requests: list[AppendRequest] = []
    entries: list[NewEvent] = []
    registry_head, registry_hash = registry
    prev = registry_hash if registry_head >= 0 else GENESIS
    for n, line in enumerate(lines):
        deleted_id = line_end_id(session_id, nonce, n)
        removed_id = event_id(registry_stream, nonce, "end", 2 * n + 1)
        deleted = events.BranchDeleted(line.name, reason, line.next_index - 1).encode()
        meta = {**version, events.NEXT_INDEX_KEY: str(line.next_index), **traced}
        hashes[line.stream] = seal_event(
            line.stream,
            line.revision + 1,
            deleted_id,
            events.BRANCH_DELETED,
            deleted,
            meta,
            line.hash if line.revision >= 0 else GENESIS,
        )
        end = NewEvent(events.BRANCH_DELETED, deleted, meta, deleted_id)
        close = (closes or {}).get(line.stream)
        if close is None:
            requests.append(AppendRequest(line.stream, [end], line.revision))
        else:
            (top,) = [r for r in close.requests if r.stream == line.stream]
            requests.extend(r for r in close.requests if r.stream != line.stream)
            requests.append(AppendRequest(line.stream, [*top.events, end], top.expected))
        entry = events.BranchRemoved(line.name, line.stream, line.parent, str(deleted_id)).encode()
        entry_meta = {**version, **traced}
        prev = seal_event(
            registry_stream,
            registry_head + 1 + n,
            removed_id,
            events.BRANCH_REMOVED,
            entry,
            entry_meta,
            prev,
        )
        entries.append(NewEvent(events.BRANCH_REMOVED, entry, entry_meta, removed_id))
    if entries:
        requests.append(
            AppendRequest(
                registry_stream,
                entries,
                StreamState.NO_STREAM if registry_head < 0 else registry_head,
            )
        )
    return requests, hashes


@dataclass(frozen=True, slots=True)
class Branch:
    """A branch of a session, as its registry entry and first event say.

    Attributes:
        name: Its name.
        stream: Its top stream.
        parent: Its parent line's name (``"main"`` or a branch's).
        cut: Where it leaves its parent line.
        next_index: The message index of its first own item.
        prefix_items: How many items it shares with its parent line.
        created: When it was forked.
        deleted: ``"deleted"`` or ``"cleared"`` once it was, else None.
    """

    name: str
    stream: str
    parent: str
    cut: events.Cut
    next_index: int
    prefix_items: int
    created: datetime
    deleted: str | None = None


async def read_branches(store: EventStore, session_id: str) -> list[Branch]:
    """Every branch of a session, in the order they were forked (deleted ones included).

    Read from the registry, then each branch's first event (O(branches) reads). An
    entry that does not match its branch's first event is skipped with a warning (the
    verifier reports it).

    Raises:
        StoreUnavailable: The store could not be read.
    """
    stream = branches_stream(session_id)
    try:
        entries = await store.read(stream)
    except StreamNotFound:
        return []
    found: dict[str, Branch] = {}
    for entry in entries:
        try:
            if entry.type == events.BRANCH_ADDED:
                added = events.BranchAdded.decode(entry.data)
                branch = await _branch_of(store, session_id, added)
                if branch is not None:
                    found[added.stream] = branch
            elif entry.type == events.BRANCH_REMOVED:
                removed = events.BranchRemoved.decode(entry.data)
                branch = found.get(removed.stream)
                if branch is not None:
                    reason = await _deleted_reason(store, removed)
                    found[removed.stream] = _with_deleted(branch, reason)
        except CodecError as error:
            logger.warning(
                "skipping unreadable %s at %s@%d: %s", entry.type, stream, entry.revision, error
            )
    return list(found.values())


async def _branch_of(
    store: EventStore, session_id: str, added: events.BranchAdded
) -> Branch | None:
    try:
        first = await store.read(added.stream, limit=1)
    except StreamNotFound:
        first = []
    if not first or first[0].type != events.BRANCH_STARTED or str(first[0].id) != added.event:
        logger.warning(
            "the registry of %s names %s, whose first event is not its fork",
            session_id,
            added.stream,
        )
        return None
    started = events.BranchStarted.decode(first[0].data)
    if (started.branch, started.branch_stream, started.session_id) != (
        added.branch,
        added.stream,
        session_id,
    ):
        logger.warning("the registry of %s disagrees with the fork of %s", session_id, added.stream)
        return None
    return Branch(
        name=started.branch,
        stream=started.branch_stream,
        parent=started.parent,
        cut=started.cut,
        next_index=started.next_index,
        prefix_items=started.prefix_items,
        created=first[0].recorded_at,
    )


async def _deleted_reason(store: EventStore, removed: events.BranchRemoved) -> str:
    try:
        last = await store.read(removed.stream, backwards=True, limit=1)
    except StreamNotFound:
        last = []
    if last and last[0].type == events.BRANCH_DELETED and str(last[0].id) == removed.event:
        return events.BranchDeleted.decode(last[0].data).reason
    return "deleted"


def _with_deleted(branch: Branch, reason: str) -> Branch:
    return Branch(
        branch.name,
        branch.stream,
        branch.parent,
        branch.cut,
        branch.next_index,
        branch.prefix_items,
        branch.created,
        reason,
    )
