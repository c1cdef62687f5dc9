"""What a session knows of its streams, and the read path over them.

:class:`SessionTree` is shared by the session objects of one id (the journal
keeps one per id). :class:`TreeReader` holds the reads of
:class:`~agentjournal.sdk.session.JournalSession`: the first load (following
``aj.open`` to the open subagents), catching up with other writers, and the
windowed and full merges of the tree's streams into the flat history.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import uuid
import weakref
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agentjournal import events
from agentjournal._locks import CrossLoopLock
from agentjournal.engine import codec
from agentjournal.engine.timeline import Clear, Entry, Picker, Pop, Timeline, TimelineEvent
from agentjournal.errors import CodecError, StreamNotFound
from agentjournal.ledger import chain as ledger
from agentjournal.store.base import EventStore, RecordedEvent
from agentjournal.streams import authority_stream

__all__ = ["AuthorityLog", "SessionTree", "TreeReader"]

logger = logging.getLogger("agentjournal.sdk.session")

_PAGE: Final = 64
_FULL_PAGE: Final = 1000


@dataclass(frozen=True, slots=True)
class AuthorityLog:
    """What is known of a session's authority log, ``AgentAuthority-{id}``.

    Attributes:
        revision: Its last revision (-1: no log yet).
        hash: The chain hash of that event (the genesis hash when there is none).
        policy: The digest of the policy in force (the newest entry's), if any.
        held: What each agent last held in this session (agent -> authority JSON).
    """

    revision: int = -1
    hash: str = ledger.GENESIS
    policy: str | None = None
    held: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class SessionTree:
    """What is known of one session's streams; shared by its session objects.

    A :class:`~agentjournal.Journal` keeps one per session id, so every
    ``journal.session(id)`` object reads through the same cache.
    """

    lock: CrossLoopLock = field(default_factory=CrossLoopLock)
    loaded: bool = False
    heads: dict[str, int] = field(default_factory=dict)  # last revision seen, per followed stream
    hashes: dict[str, str] = field(default_factory=dict)  # chain hash at that revision
    chain: list[events.Subagent] = field(default_factory=list)  # open subagents, outermost first
    timeline: Timeline = field(default_factory=Timeline)
    next_index: int | None = None
    call_owner: OrderedDict[str, str] = field(default_factory=OrderedDict)
    chain_run: weakref.ref[Any] | None = None  # the run that last wrote inside the chain
    unsigned: int = 0  # events written since the last checkpoint (by this process)
    ledger_head: tuple[int, str] | None = None  # the checkpoint stream's head, once known
    grants: dict[str, Any] = field(default_factory=dict)  # open subsession -> granted authority
    authority: AuthorityLog | None = None  # the authority log's head, once read


class TreeReader:
    """The read path of a session (a base of :class:`~agentjournal.sdk.session.JournalSession`)."""

    session_id: str
    stream: str
    _tree: SessionTree
    _store: EventStore

    async def _authority_log(self, *, fresh: bool = False) -> AuthorityLog:
        """The authority log's head and state (read from its tail when not known or ``fresh``).

        The newest entry names the policy in force, and the newest entry with a
        ``held`` map says what every agent last held: usually the last event.
        """
        tree = self._tree
        if tree.authority is not None and not fresh:
            return tree.authority
        stream = authority_stream(self.session_id)
        head: RecordedEvent | None = None
        policy: str | None = None
        held: Mapping[str, Any] | None = None
        before: int | None = None
        while held is None and (before is None or before >= 0):
            try:
                page = await self._store.read(stream, from_revision=before, backwards=True, limit=8)
            except StreamNotFound:
                page = []
            if not page:
                break
            head = head or page[0]
            for event in page:
                try:
                    body = json.loads(event.data)
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    logger.warning(
                        "skipping unreadable %s at %s@%d", event.type, stream, event.revision
                    )
                    continue
                if policy is None:
                    key = "digest" if event.type == events.POLICY_RECORDED else "policy"
                    policy = body.get(key) if isinstance(body.get(key), str) else None
                if isinstance(body.get("held"), dict):
                    held = body["held"]
                    break
            before = page[-1].revision - 1
        tree.authority = AuthorityLog(
            head.revision if head is not None else -1,
            head.metadata.get(ledger.HASH_KEY, "") if head is not None else ledger.GENESIS,
            policy,
            held or {},
        )
        return tree.authority

    async def _refresh(self, limit: int | None) -> None:
        """Bring the cache up to the streams' heads and make it cover ``limit`` items."""
        tree = self._tree
        if not tree.loaded:
            await self._load(limit)
        else:
            await self._catch_up()
        if not tree.timeline.covers(limit):
            await self._window(limit, {})

    async def _visible(self) -> list[Entry]:
        """Every visible item, oldest first, read backwards in growing windows.

        Unlike a read of everything, the windows stop at the newest clear: a
        session compacted (or cleared) before costs what is visible since.
        """
        tree = self._tree
        size = _PAGE
        await self._refresh(size)
        while not tree.timeline.complete:  # (a reread may replace the timeline object)
            size = max(size * 2, len(tree.timeline.entries) + 1)
            await self._refresh(size)
        return tree.timeline.latest(None)

    async def _load(self, limit: int | None) -> None:
        """First use: find the open subagents and the newest events of each stream."""
        tree = self._tree
        size = _FULL_PAGE if limit is None else limit + 8
        tree.heads, tree.hashes, tree.chain, tree.next_index = {}, {}, [], None
        tree.timeline.reset()
        pages: dict[str, list[RecordedEvent]] = {}
        stream: str | None = self.stream
        while stream is not None:
            page = await self._tail(stream, size)
            pages[stream] = page
            tree.heads[stream] = page[0].revision if page else -1
            if page:
                tree.hashes[stream] = page[0].metadata.get(ledger.HASH_KEY, "")
            found = _next_index_after(page[0]) if page else None
            if found is not None:
                tree.next_index = max(tree.next_index or 0, found)
            child = page[0].metadata.get(events.OPEN_KEY) if page else None
            stream = None
            if child and child not in tree.heads:
                subagent = await self._read_start(child)
                if subagent is not None:
                    tree.chain.append(subagent)
                    stream = child
        tree.loaded = True
        await self._window(limit, pages)

    async def _read_start(self, stream: str) -> events.Subagent | None:
        try:
            first = await self._store.read(stream, from_revision=0, limit=1)
            subagent = events.decode_subagent_started(first[0].data)[0]
            self._tree.grants[stream] = events.granted_authority(json.loads(first[0].data))
            return subagent
        except (StreamNotFound, IndexError, CodecError, ValueError) as error:
            logger.warning(
                "open subagent stream %s cannot be read (%s); ignoring it", stream, error
            )
            return None

    async def _tail(self, stream: str, size: int, before: int | None = None) -> list[RecordedEvent]:
        try:
            return await self._store.read(stream, from_revision=before, backwards=True, limit=size)
        except StreamNotFound:
            if stream != self.stream:
                logger.warning("subsession stream %s is missing; its items are left out", stream)
            return []

    async def _window(self, limit: int | None, pages: dict[str, list[RecordedEvent]]) -> None:
        """Rebuild the timeline with the newest ``limit`` items, merging streams backwards.

        One cursor per stream, in a heap keyed by its next item's index; the
        newest item overall is always on top. Everything (``limit`` None) is
        read stream by stream instead, all subsessions at once, and sorted.
        """
        if limit is None:
            await self._everything(pages)
            return
        tree = self._tree
        size = limit + 8
        picker = Picker(limit)
        heap: list[tuple[int, int, _Cursor]] = []
        opened = 0

        def push(cursor: _Cursor) -> None:
            if cursor.head is not None:
                heapq.heappush(heap, (-cursor.head.index, cursor.order, cursor))

        async def open_cursor(stream: str) -> None:
            nonlocal opened
            opened += 1
            cursor = _Cursor(self, stream, pages.get(stream), tree.heads.get(stream), size, opened)
            await cursor.advance(picker, open_cursor)
            push(cursor)

        for stream in [self.stream, *(s.stream for s in tree.chain)]:
            await open_cursor(stream)
        while heap:
            _, _, cursor = heapq.heappop(heap)
            assert cursor.head is not None
            if not picker.feed(cursor.head):
                break
            await cursor.advance(picker, open_cursor)
            push(cursor)
        tree.timeline.take(picker)
        if tree.next_index is None:
            tree.next_index = await self._scan_next_index()

    async def _everything(self, pages: dict[str, list[RecordedEvent]]) -> None:
        """Read the whole tree: each stream in full, subsessions concurrently, then fold.

        ``pages`` are tails already read backwards; one that reaches revision 0
        is the whole stream and is not read again.
        """
        tree = self._tree
        tasks: dict[str, asyncio.Future[list[RecordedEvent]]] = {}

        def fetch(stream: str) -> None:
            if stream in tasks:
                return
            page = pages.get(stream)
            if page and page[-1].revision == 0:
                tasks[stream] = asyncio.get_running_loop().create_future()
                tasks[stream].set_result(page[::-1])
            else:
                tasks[stream] = asyncio.ensure_future(self._whole(stream))

        for stream in [self.stream, *(s.stream for s in tree.chain)]:
            fetch(stream)
        new: list[TimelineEvent] = []
        done: set[str] = set()
        try:
            while len(done) < len(tasks):
                stream = next(name for name in tasks if name not in done)
                done.add(stream)
                for event in await tasks[stream]:
                    if event.type == events.SUBAGENT_COMPLETED:
                        child = _closed_child(event)
                        if child:
                            fetch(child)
                        continue
                    new.extend(self._interpret(event))
        finally:
            for task in tasks.values():
                task.cancel()
        timeline = Timeline()
        _fold(timeline, new)
        timeline.complete = True
        tree.timeline = timeline
        if tree.next_index is None:
            tree.next_index = await self._scan_next_index()

    async def _whole(self, stream: str) -> list[RecordedEvent]:
        head = self._tree.heads.get(stream)
        try:
            if head is None:
                return await self._store.read(stream)
            return await self._store.read(stream, limit=head + 1)  # nothing past our view
        except StreamNotFound:
            if stream != self.stream:
                logger.warning("subsession stream %s is missing; its items are left out", stream)
            return []

    async def _catch_up(self, *, until: uuid.UUID | None = None) -> bool:
        """Apply what other writers appended to the followed streams.

        Returns True if the event ``until`` was among them. When nothing
        changed this is one empty read per followed stream (the session's
        stream and those of its open subagents).
        """
        tree = self._tree
        found = False
        new: list[TimelineEvent] = []
        positions = dict(tree.heads)
        hashes = dict(tree.hashes)
        pending = [self.stream, *(s.stream for s in tree.chain)]
        while pending:
            stream = pending.pop(0)
            while True:
                head = positions.get(stream, -1)
                try:
                    page = await self._store.read(stream, from_revision=head + 1, limit=_PAGE)
                except StreamNotFound:
                    if head >= 0:
                        logger.warning("stream %s disappeared; rereading the session", stream)
                        await self._load(None)
                        return False
                    break
                for event in page:
                    found = found or event.id == until
                    new.extend(self._interpret(event, pending))
                    positions[stream] = event.revision
                    hashes[stream] = event.metadata.get(ledger.HASH_KEY, "")
                    nxt = _next_index_after(event)
                    if nxt is not None:
                        tree.next_index = max(tree.next_index or 0, nxt)
                if len(page) < _PAGE:
                    break
        followed = {self.stream, *(s.stream for s in tree.chain)}
        tree.heads = {stream: positions.get(stream, -1) for stream in followed}
        tree.hashes = {stream: hashes[stream] for stream in followed if stream in hashes}
        _fold(tree.timeline, new)
        return found

    def _interpret(
        self, event: RecordedEvent, follow: list[str] | None = None
    ) -> list[TimelineEvent]:
        """Turn one stored event into timeline events; track subagents opening and closing.

        ``follow`` collects newly opened subsession streams (forward reads);
        unreadable events are skipped with a warning naming stream and revision.
        """
        tree = self._tree
        try:
            if event.type == events.SUBAGENT_STARTED:
                if events.INDEX_KEY not in event.metadata:
                    return []  # the twin that opens a subsession stream
                subagent, item_json = events.decode_subagent_started(event.data)
                if follow is not None and all(s.stream != subagent.stream for s in tree.chain):
                    tree.chain.append(subagent)
                    follow.append(subagent.stream)
                    tree.grants[subagent.stream] = events.granted_authority(json.loads(event.data))
                if item_json is None:
                    return []
                return [Entry(event.stream, event.revision, 0, _index_of(event), item_json)]
            if event.type == events.SUBAGENT_COMPLETED:
                _, stream, _ = events.decode_subagent_completed(event.data)
                if follow is not None:
                    self._forget_from(stream)
                return []
            if event.type == events.ITEM_POPPED:
                popped = events.ItemPopped.decode(event.data)
                return [Pop((popped.stream, popped.revision, popped.part))]
            if event.type == events.SESSION_CLEARED:
                return [Clear(events.SessionCleared.decode(event.data).through_index)]
            if event.type not in codec.ITEM_EVENT_TYPES:
                return []
            pairs = codec.decode_item_pairs(event.type, event.data)
        except CodecError as error:
            logger.warning(
                "skipping unreadable event %s at %s@%d: %s",
                event.type,
                event.stream,
                event.revision,
                error,
            )
            return []
        index = _index_of(event)
        return [
            Entry(event.stream, event.revision, part, index, text, fresh)
            for part, (text, fresh) in enumerate(pairs)
        ]

    def _forget_from(self, stream: str) -> None:
        """A subagent closed: drop it (and anything it opened) from the chain."""
        chain = self._tree.chain
        for position, subagent in enumerate(chain):
            if subagent.stream == stream:
                del chain[position:]
                return

    async def _next_index(self) -> int:
        tree = self._tree
        if tree.next_index is None:
            tree.next_index = await self._scan_next_index()
        return tree.next_index

    async def _scan_next_index(self) -> int:
        """Find the next free index when the newest events do not say (foreign writers)."""
        revision = self._tree.heads.get(self.stream, -1)
        while revision >= 0:
            page = await self._tail(self.stream, _PAGE, revision)
            for event in page:
                found = _next_index_after(event)
                if found is not None:
                    return found
            revision = page[-1].revision - 1 if page else -1
        return 0


class _Cursor:
    """Reads one stream backwards for the merge, one item at a time."""

    def __init__(
        self,
        session: TreeReader,
        stream: str,
        page: list[RecordedEvent] | None,
        head: int | None,
        size: int,
        order: int,
    ) -> None:
        self.session = session
        self.stream = stream
        self.order = order  # ties (foreign items without an index) go to the earlier cursor
        self.buffer: deque[TimelineEvent] = deque()
        self.head: Entry | None = None
        self._page = page
        self._next = head  # revision to read from next, going down; None: the end
        self._size = size
        self._done = False

    async def advance(self, picker: Picker, open_cursor: Any) -> None:
        """Move to the next (older) item, feeding pops and clears on the way to ``picker``."""
        self.head = None
        while True:
            while self.buffer:
                buffered = self.buffer.popleft()
                if isinstance(buffered, Entry):
                    self.head = buffered
                    return
                picker.feed(buffered)
            if self._done:
                return
            page = self._page if self._page is not None else await self._read()
            self._page = None
            if not page:
                self._done = True
                return
            self._size = min(self._size * 2, _FULL_PAGE)
            self._next = page[-1].revision - 1
            if self._next < 0:
                self._done = True
            for event in page:
                if event.type == events.SUBAGENT_STARTED and events.INDEX_KEY not in event.metadata:
                    self._done = True  # this subsession's first event: nothing older here
                    break
                if event.type == events.SUBAGENT_COMPLETED:
                    child = _closed_child(event)
                    if child:
                        # The close is newer than all of that subsession: merge it in from here.
                        await open_cursor(child)
                    continue
                self.buffer.extend(reversed(self.session._interpret(event)))

    async def _read(self) -> list[RecordedEvent]:
        if self._next is not None and self._next < 0:
            return []
        return await self.session._tail(self.stream, self._size, self._next)


def _closed_child(event: RecordedEvent) -> str | None:
    """The subsession a parent's copy of ``SubagentCompleted`` closes (None for the twin).

    Read from ``aj.closes``; events written without it (other writers) are parsed.
    """
    child = event.metadata.get(events.CLOSES_KEY)
    if child is not None:
        return child
    try:
        _, stream, _ = events.decode_subagent_completed(event.data)
    except CodecError as error:
        logger.warning(
            "skipping unreadable %s at %s@%d: %s", event.type, event.stream, event.revision, error
        )
        return None
    return None if stream == event.stream else stream


def _fold(timeline: Timeline, new: list[TimelineEvent]) -> None:
    """Apply events read from several streams: items by index, then what hides them.

    Pops hide by key and clears by index, so this order gives the same result
    as applying everything in the order it was written.
    """
    # ``new`` holds each stream's events in stream order; an item another writer
    # left without an index sorts right after the indexed item before it.
    last: dict[str, int] = {}
    keyed: list[tuple[int, int, int, Entry]] = []
    for order, entry in enumerate(e for e in new if isinstance(e, Entry)):
        if entry.index >= 0:
            last[entry.stream] = entry.index
            keyed.append((entry.index, 0, order, entry))
        else:
            keyed.append((last.get(entry.stream, -1), 1, order, entry))
    for *_, entry in sorted(keyed, key=lambda k: k[:3]):
        timeline.apply(entry)
    for hiding in new:
        if not isinstance(hiding, Entry):
            timeline.apply(hiding)


def _number(raw: str | None) -> int | None:
    """A metadata value as a non-negative int (ASCII digits only), else None."""
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() else None


def _index_of(event: RecordedEvent) -> int:
    index = _number(event.metadata.get(events.INDEX_KEY))
    return -1 if index is None else index


def _next_index_after(event: RecordedEvent) -> int | None:
    """The next free message index after ``event``; None if it does not say."""
    found = _number(event.metadata.get(events.NEXT_INDEX_KEY))
    if found is not None:
        return found
    index = _number(event.metadata.get(events.INDEX_KEY))
    return None if index is None else index + 1
