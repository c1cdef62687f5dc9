"""Where a fork cuts a line: the position, the fork point and the line's top streams, read
from the store's read model when it can say exactly, else from the line's events; the
authority log in force there; the subagents open there.
"""

from __future__ import annotations

import bisect
import json
import operator
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

from agentjournal import events
from agentjournal.engine.fork import (
    HIDING,
    ForkPoint,
    cut_position,
    decode_line,
    fork_point,
    next_index_of_rows,
    read_types,
    revision_at,
    subagent_opened,
    turn_position,
)
from agentjournal.engine.line import Line
from agentjournal.engine.reader import continued_from
from agentjournal.engine.timeline import model_items
from agentjournal.engine.turns import is_user
from agentjournal.errors import CodecError, InvalidInput, StreamNotFound
from agentjournal.ledger.chain import HASH_KEY
from agentjournal.store.contract import ModelCopy, RecordedEvent, model_place
from agentjournal.streams import authority_stream, branch_authority_stream


def _started(first: RecordedEvent | None) -> events.BranchStarted | None:
    """The fork a line's first event is (None: the main line, or unreadable)."""
    if first is None or first.type != events.BRANCH_STARTED or first.revision != 0:
        return None
    try:
        return events.BranchStarted.decode(first.data)
    except CodecError:
        return None


def _line_tops(
    read: Mapping[str, Sequence[RecordedEvent]], top: str
) -> list[tuple[str, RecordedEvent | None]]:
    """The top streams of a line and the lines below it, nearest first, each with its
    first event (a ``BranchStarted``, or the main line's first event)."""
    tops: list[tuple[str, RecordedEvent | None]] = []
    stream: str | None = top
    while stream is not None and all(stream != seen for seen, _ in tops):
        events_ = read.get(stream, ())
        first = events_[0] if events_ and events_[0].revision == 0 else None
        tops.append((stream, first))
        below = continued_from(first) if first is not None else None
        stream = below.stream if below is not None else None
    return tops


def place(event: RecordedEvent) -> events.StreamPlace:
    """The stream place of an event (what a fork binds to)."""
    return events.StreamPlace(event.stream, event.revision, event.metadata.get(HASH_KEY, ""))


CutAt: TypeAlias = tuple[
    int,
    ForkPoint,
    list[tuple[str, RecordedEvent | None]],
    ModelCopy | None,
    Mapping[str, Sequence[RecordedEvent]],
]
"""A fork's cut: its position, the fork point, the line's top streams, the read model's
copy (None: the branch reads its events) and the line's events as read (none from the
model)."""


async def cut_from_events(line: Line, kind: str, value: int, branch_name: str) -> CutAt:
    """The cut, read from the line's events: each segment read once and decoded once
    (the turn's user message and the items visible at the cut from the same fold)."""
    top = line.facts.stream
    read = dict(await line.reader.line_events())
    lines = _line_tops(read, top)
    decoded = decode_line((e for stream in read.values() for e in stream), top)
    if kind == "turn":
        position = turn_position(read, decoded, top, value, branch_name)
    else:
        position = cut_position(read, top, kind, value)
        if kind == "revision" and value == line.tree.heads[top]:
            # At the head: as of the line's newest event. Open subagents write after
            # the top stream's last event, and a write's authority log entries follow
            # its tree's events: all of them are the line's now.
            position = await _head_position(line, read, position)
    point = fork_point(read, top, position, below=[t for t, _ in lines[1:]], decoded=decoded)
    return position, point, lines, None, read


async def cut_from_model(line: Line, kind: str, value: int, branch_name: str) -> CutAt | None:
    """The cut, read from the store's read model of the line (None: it cannot say
    exactly, then :func:`cut_from_events` reads it).

    The model holds the items visible now, each at its event's place: the cut is
    that event's position (a turn's user message, an item, or a revision of the top
    stream). Its rows below the cut's next index are the items visible at the cut
    unless an event of the line at or after the cut hides one of them, so those
    events are read (types and indexes only, :func:`next_index_since`); the branch's
    model then starts as a copy of those rows (:class:`ModelCopy`, in the fork's own
    write). O(the line's events since the cut) instead of O(its history).
    """
    store = line.store
    tree = line.tree
    top = line.facts.stream
    snapshot = await line.reader.model_at_heads()
    if snapshot is None:
        return None
    rows = snapshot.items
    if kind == "revision":
        if value > tree.heads[top]:
            raise InvalidInput(f"{top} has no revision {value}")
        found = await store.read(top, from_revision=value, limit=1)
        if not found or found[0].revision != value:
            return None
        position = found[0].position + 1
    else:
        if kind == "turn":
            users = [
                row
                for row, item in zip(rows, model_items(rows, snapshot.plain), strict=True)
                if is_user(item)
            ]
            if value > len(users):
                raise InvalidInput(
                    f"Turn {value} does not contain a user message in branch '{branch_name}'"
                )
            _, key, _ = users[value - 1]
        else:
            at = bisect.bisect_left(rows, value, key=operator.itemgetter(0))
            if at == len(rows) or rows[at][0] != value:
                return None  # not visible now: the events find it (or say it is not)
            _, key, _ = rows[at]
        number, revision, _ = model_place(key)
        found = await store.read(snapshot.names[number], from_revision=revision, limit=1)
        if not found or found[0].revision != revision:
            return None
        position = found[0].position
    base_revision = await revision_at(store, top, position)
    if base_revision < 0:
        return None  # the cut is in a branch's prefix: the line below holds the base
    (base_event,) = await store.read(top, from_revision=base_revision, limit=1)
    if base_event.metadata.get(events.OPEN_KEY):
        return None  # a subagent open at the cut: its continuation needs the events
    if await _log_at_or_after(line, position):
        return None  # the authority in force may include entries after the cut
    # Nothing at or after the cut may hide an item (a pop, a clear): then every item
    # visible at the cut is still a row, and every item written since is one too. The
    # line's events since the cut are all on the tree's own streams (the cut is in the
    # line's own part); a store that can looks for those types alone (SQLite).
    before: dict[int, int] = {}
    numbers = {name: number for number, name in snapshot.names.items()}
    for stream, head in snapshot.heads.items():
        last = base_revision if stream == top else await revision_at(store, stream, position)
        if last < head and await read_types(store, stream, last, HIDING):
            return None
        if stream in numbers:
            before[numbers[stream]] = last
    for number, stream in snapshot.names.items():
        if number not in before:  # a stream of the lines below (a branch's prefix rows)
            before[number] = await revision_at(store, stream, position)
    next_index = next_index_of_rows(rows, before, await line.reader.next_index())
    if next_index is None:
        return None
    point = ForkPoint(
        base=base_event,
        open=base_event.metadata.get(events.OPEN_KEY) or None,
        next_index=next_index,
        prefix_items=bisect.bisect_left(rows, next_index, key=operator.itemgetter(0)),
    )
    heads = dict(snapshot.heads)
    heads[top] += 1  # the marker, appended before the branch stream in the same write
    copy = ModelCopy(top, next_index, heads)
    return (
        position,
        point,
        await _line_tops_read(
            line,
        ),
        copy,
        {},
    )


async def _head_position(
    line: Line, read: Mapping[str, Sequence[RecordedEvent]], position: int
) -> int:
    """Just after the line's newest event: its streams' (as read) and its own authority
    log's (at least ``position``)."""
    newest = [event.position for recorded in read.values() for event in recorded[-1:]]
    try:
        log = await line.store.read(line.facts.authority_stream, backwards=True, limit=1)
    except StreamNotFound:
        log = []
    newest.extend(event.position for event in log)
    return max([position - 1, *newest]) + 1


async def opened_by(
    line: Line, read: Mapping[str, Sequence[RecordedEvent]], stream: str
) -> tuple[events.Subagent, Any]:
    """The subagent a subsession open at a cut runs, and its grant, from its first event
    (as read with the line, else from the store).

    Raises:
        InvalidInput: It cannot be read: no branch rather than one that loses it.
    """
    known = read.get(stream, ())
    first = list(known[:1]) if known and known[0].revision == 0 else []
    if not first:
        try:
            first = await line.store.read(stream, from_revision=0, limit=1)
        except StreamNotFound:
            first = []
    try:
        if not first:
            raise CodecError("it has no first event")
        return subagent_opened(first[0])
    except CodecError as error:
        raise InvalidInput(
            f"the subagent stream {stream}, open at the cut, cannot be read ({error}): "
            "the fork cannot continue it"
        ) from None


async def _log_at_or_after(line: Line, position: int) -> bool:
    """Whether the line's own authority log has an entry at or after ``position``."""
    try:
        last = await line.store.read(line.facts.authority_stream, backwards=True, limit=1)
    except StreamNotFound:
        return False
    return bool(last) and last[0].position >= position


async def _line_tops_read(line: Line) -> list[tuple[str, RecordedEvent | None]]:
    """The line's top streams and their first events (:func:`_line_tops`), read."""
    tops: list[tuple[str, RecordedEvent | None]] = []
    stream: str | None = line.facts.stream
    while stream is not None and all(stream != seen for seen, _ in tops):
        try:
            found = await line.store.read(stream, from_revision=0, limit=1)
        except StreamNotFound:
            found = []
        first = found[0] if found and found[0].revision == 0 else None
        tops.append((stream, first))
        below = continued_from(first) if first is not None else None
        stream = below.stream if below is not None else None
    return tops


async def log_place(
    line: Line,
    position: int,
    lines: list[tuple[str, RecordedEvent | None]],
    prefix: set[str] | frozenset[str] = frozenset(),
) -> events.StreamPlace | None:
    """The line's authority log in force at ``position``: its last entry before it on
    the log of the line whose own part holds ``position`` — and the entries right after
    it whose grant event is in the prefix (``prefix``: the ids of the line's events
    before the cut) — else what that line inherited at its fork (its
    ``BranchStarted.authority``), if any.

    A write's log entries follow its tree's events, so an index cut between a handoff
    and its acknowledgement (one write) falls before the handoff's entry: without
    them the branch would inherit what the receiver held before the narrowing."""
    store = line.store
    session_id = line.facts.session_id
    for _, first in lines:
        started = _started(first)
        if started is not None and first is not None and position <= first.position:
            continue  # the cut is in this line's prefix: the line below decides
        stream = (
            authority_stream(session_id)
            if started is None
            else branch_authority_stream(session_id, started.branch)
        )
        revision = await _through_prefix(
            line, stream, await revision_at(store, stream, position), prefix
        )
        if revision >= 0:
            (event,) = await store.read(stream, from_revision=revision, limit=1)
            return events.StreamPlace(stream, revision, event.metadata.get(HASH_KEY, ""))
        return None if started is None else started.authority
    return None


async def _through_prefix(
    line: Line, stream: str, revision: int, prefix: set[str] | frozenset[str]
) -> int:
    """``revision`` of an authority log, moved on over the entries after it that record
    grants made by events in ``prefix`` (and the ``PolicyRecorded`` written with them)."""
    pending, start = revision, revision + 1
    while True:
        try:
            page = await line.store.read(stream, from_revision=start, limit=16)
        except StreamNotFound:
            return pending
        for entry in page:
            if entry.type == events.POLICY_RECORDED:
                continue  # in if an entry of its write is
            if entry.type != events.AUTHORITY_HELD:
                return pending
            try:
                body = json.loads(entry.data)
            except ValueError:
                return pending
            if not isinstance(body, dict) or body.get("event") not in prefix:
                return pending
            pending = entry.revision
        if len(page) < 16:
            return pending
        start = page[-1].revision + 1
