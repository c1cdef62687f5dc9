"""Whole-tree consistency checks of one session, straight from the store.

:func:`check_session_tree` reads every stream of a session tree and returns what is
wrong with it as sentences, so a test can assert the list is empty and show all of it
when not. It folds the flat history from the raw events itself (items by
``aj.index``, minus pops and clears) and compares a cold session's ``get_items`` with
that, so a replay bug and a storage bug look different.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agentjournal import JournalSession, events
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle
from agentjournal.store import EventStore, RecordedEvent
from agentjournal.streams import session_stream

LIFECYCLE = (events.SUBAGENT_STARTED, events.SUBAGENT_COMPLETED)
_READ_ALL_PAGE = 1000


@dataclass
class _Tree:
    """The streams of one session, read through the store."""

    root: str
    streams: dict[str, list[RecordedEvent]] = field(default_factory=dict)

    def events(self) -> list[RecordedEvent]:
        return [event for stream in self.streams.values() for event in stream]


async def tree_streams(store: EventStore, session_id: str) -> list[str]:
    """Names of the session's stream and of every ``AgentSubsession-{id}-sub-*`` stream.

    Found by a scan of the global order, so a subsession stream no parent names is
    found too. (A session whose id is ``{session_id}-sub-...`` would be mixed in;
    the tests do not use such ids.)
    """
    root = session_stream(session_id)
    prefix = f"AgentSubsession-{session_id}-sub-"
    names: dict[str, None] = {}
    position: int | None = None
    while True:
        page = await store.read_all(from_position=position, limit=_READ_ALL_PAGE)
        for event in page:
            if event.stream == root or event.stream.startswith(prefix):
                names.setdefault(event.stream)
        if len(page) < _READ_ALL_PAGE:
            return list(names)
        position = page[-1].position + 1


async def check_session_tree(
    store: EventStore, session_id: str, *, all_closed: bool = False
) -> list[str]:
    """Return every inconsistency of the session tree ``session_id``; ``[]`` if none.

    Checks: each stream's revisions are 0..n-1 and its head is n-1; each subsession
    stream opens with the twin of its ``SubagentStarted`` and nothing follows its
    ``SubagentCompleted``; every lifecycle event has its twin on the other stream
    (same type and agent id, ids cross-referenced through ``aj.twin``); ``aj.index``
    over the tree is unique and gapless 0..N-1 and the largest ``aj.next_index`` is
    N; pops name indexed items; a cold ``get_items`` (whole and windowed) equals the
    flat history folded from the raw events, and every tool output in it follows its
    call; the offline verifier passes the tree's chains and twins. With ``all_closed``,
    also that every started subagent has completed.
    """
    tree = _Tree(session_stream(session_id))
    problems: list[str] = []
    for name in await tree_streams(store, session_id):
        stream = await store.read(name)
        tree.streams[name] = stream
        revisions = [event.revision for event in stream]
        if revisions != list(range(len(stream))):
            problems.append(f"{name}: revisions are not gapless from 0: {_ranges(revisions)}")
        head = await store.head(name)
        if head != len(stream) - 1:
            problems.append(f"{name}: head is {head} but {len(stream)} events were read")
    if tree.root not in tree.streams and tree.streams:
        problems.append(f"subsession streams exist but {tree.root} does not")
    problems += _check_subsessions(tree, all_closed=all_closed)
    problems += _check_twins(tree)
    expected, index_problems = _fold(tree)
    problems += index_problems
    problems += await _check_replay(store, session_id, expected)
    if tree.root in tree.streams:  # a writer killed before its first write left nothing
        # The ledger: every stream hash-chained, twins linked, closed subsessions sealed.
        report = verify_bundle(await export_bundle(store, session_id), {}, allow_uncovered=True)
        problems += [f"ledger: {problem}" for problem in report.problems]
    return problems


def _check_subsessions(tree: _Tree, *, all_closed: bool) -> list[str]:
    problems: list[str] = []
    for name, stream in tree.streams.items():
        if name == tree.root:
            continue
        first = stream[0] if stream else None
        if (
            first is None
            or first.type != events.SUBAGENT_STARTED
            or events.INDEX_KEY in first.metadata
            or _body(first).get("subsession_stream") != name
        ):
            what = f"{first.type}@0" if first else "nothing"
            problems.append(f"{name}: does not open with its SubagentStarted twin but {what}")
        closes = [
            at
            for at, e in enumerate(stream)
            if e.type == events.SUBAGENT_COMPLETED and _child_copy(e)
        ]
        if len(closes) > 1:
            problems.append(f"{name}: closed {len(closes)} times")
        if closes and closes[0] != len(stream) - 1:
            later = [e.type for e in stream[closes[0] + 1 :]]
            problems.append(f"{name}: events after its SubagentCompleted: {later}")
        if all_closed and not closes:
            problems.append(f"{name}: subagent never completed")
    return problems


def _check_twins(tree: _Tree) -> list[str]:
    problems: list[str] = []
    by_id = {event.id: event for event in tree.events()}
    for event in tree.events():
        if event.type not in LIFECYCLE:
            continue
        where = f"{event.type} {event.stream}@{event.revision}"
        body = _body(event)
        parent = body.get("extensions", {}).get("openai", {}).get("parent_stream")
        child = _subsession_of(event)
        if event.stream not in (parent, child):
            problems.append(f"{where}: on neither of its streams ({parent}, {child})")
            continue
        other = child if event.stream == parent else parent
        raw = event.metadata.get(events.TWIN_KEY)
        twin_id = _uuid(raw) if raw else None
        twin = by_id.get(twin_id) if twin_id else None
        if twin is None:
            problems.append(f"{where}: no twin on {other} (aj.twin={raw})")
            continue
        if twin.stream != other or twin.type != event.type:
            problems.append(f"{where}: twin is {twin.type} {twin.stream}@{twin.revision}")
        if twin.metadata.get(events.TWIN_KEY) != str(event.id):
            problems.append(f"{where}: its twin {twin.stream}@{twin.revision} names another twin")
        if _body(twin).get("agent_id") != body.get("agent_id"):
            problems.append(f"{where}: its twin has another agent_id")
    return problems


def _fold(tree: _Tree) -> tuple[list[str], list[str]]:
    """The flat history from raw events (item JSON texts by index), and index problems."""
    problems: list[str] = []
    items: dict[tuple[str, int], tuple[int, str]] = {}
    popped: list[tuple[str, int]] = []
    floor = -1
    next_indices: list[int] = []
    for event in tree.events():
        if events.NEXT_INDEX_KEY in event.metadata:
            next_indices.append(int(event.metadata[events.NEXT_INDEX_KEY]))
        if event.type == events.ITEM_POPPED:
            popped_item = events.ItemPopped.decode(event.data)
            popped.append((popped_item.stream, popped_item.revision))
        elif event.type == events.SESSION_CLEARED:
            floor = max(floor, events.SessionCleared.decode(event.data).through_index)
        if events.INDEX_KEY not in event.metadata:
            continue
        item_json = _body(event).get("extensions", {}).get("openai", {}).get("item_json")
        if not isinstance(item_json, str):
            problems.append(f"{event.type} {event.stream}@{event.revision}: indexed, no item")
            continue
        items[(event.stream, event.revision)] = (int(event.metadata[events.INDEX_KEY]), item_json)
    indices = sorted(index for index, _ in items.values())
    duplicates = sorted(i for i, n in Counter(indices).items() if n > 1)
    if duplicates:
        problems.append(f"aj.index used more than once: {duplicates}")
    if sorted(set(indices)) != list(range(len(set(indices)))):
        problems.append(f"aj.index is not gapless from 0: {_ranges(sorted(set(indices)))}")
    if next_indices and max(next_indices) != len(indices):
        problems.append(f"largest aj.next_index is {max(next_indices)}, {len(indices)} items")
    for key, n in Counter(popped).items():
        if key not in items:
            problems.append(f"ItemPopped names {key[0]}@{key[1]}, which holds no item")
        elif n > 1:
            problems.append(f"{key[0]}@{key[1]} popped {n} times")
    hidden = set(popped)
    visible = sorted(
        (index, text) for key, (index, text) in items.items() if key not in hidden and index > floor
    )
    return [text for _, text in visible], problems


async def _check_replay(store: EventStore, session_id: str, expected: list[str]) -> list[str]:
    """A cold session replays the folded history, whole and in windows, without error."""
    try:
        return await _compare_replay(store, session_id, [json.loads(t) for t in expected])
    except Exception as error:
        return [f"replay raised {type(error).__name__}: {error}"]


async def _compare_replay(store: EventStore, session_id: str, want: list[Any]) -> list[str]:
    problems: list[str] = []
    got: list[Any] = await JournalSession(store, session_id).get_items()
    if len(got) != len(want):
        problems.append(f"get_items gave {len(got)} items, the events hold {len(want)} visible")
    elif _texts(got) != _texts(want):
        pairs = zip(_texts(got), _texts(want), strict=True)
        first = next(i for i, (a, b) in enumerate(pairs) if a != b)
        problems.append(f"get_items differs from the events at item {first}")
    for limit in (1, 2, 5, 17):
        window: list[Any] = await JournalSession(store, session_id).get_items(limit=limit)
        if _texts(window) != _texts(want[-limit:]):
            problems.append(f"get_items(limit={limit}) is not the newest {limit} items")
    calls: set[str] = set()
    for position, item in enumerate(got):
        call_id = item.get("call_id")
        kind = str(item.get("type", "message"))
        if kind.endswith("_output") and call_id not in calls:
            problems.append(f"item {position}: {kind} of call {call_id} before any call")
        elif call_id is not None:
            calls.add(call_id)
    return problems


def _texts(items: list[Any]) -> list[str]:
    return [json.dumps(item) for item in items]  # exact: key order counts


def _body(event: RecordedEvent) -> dict[str, Any]:
    try:
        body = json.loads(event.data)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _subsession_of(event: RecordedEvent) -> str | None:
    body = _body(event)
    if event.type != events.SUBAGENT_STARTED:
        body = body.get("extensions", {}).get("openai", {})
    name = body.get("subsession_stream")
    return name if isinstance(name, str) else None


def _child_copy(event: RecordedEvent) -> bool:
    return _subsession_of(event) == event.stream


def _uuid(text: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(text)
    except ValueError:
        return None


def _ranges(numbers: list[int]) -> str:
    """``0-4, 6, 8-9``: a short picture of a sequence with holes."""
    if not numbers:
        return "none"
    parts: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(parts)
