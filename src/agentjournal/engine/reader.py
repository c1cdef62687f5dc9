"""The read path of a session: bringing its :class:`~agentjournal.engine.tree.SessionTree`
up to the store, and reading the flat history back (no Agents SDK).

The first load follows ``aj.open`` from the session stream's last event down to
the open subagents; a catch-up reads what other writers appended to the followed
streams (skipped when a store that can answer on the caller's thread says that
none moved: SQLite's ``heads_now``); a windowed read merges the streams
backwards only as far as ``limit`` needs; a read of everything walks the whole tree
(:func:`~agentjournal.walk.walk_tree`) and sorts the items by index. What
each read finds, the tree takes on through its own methods.
"""

from __future__ import annotations

import heapq
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from agentjournal import events
from agentjournal._gc import no_collection
from agentjournal.engine.fork import continues, subagent_opened
from agentjournal.engine.timeline import (
    Entry,
    Picker,
    Timeline,
    TimelineEvent,
    fold,
)
from agentjournal.engine.tree import AuthorityLog, SessionTree, next_index_after
from agentjournal.errors import CodecError, InvalidInput, StreamNotFound
from agentjournal.ledger.chain import GENESIS, HASH_KEY
from agentjournal.records import opened_stream
from agentjournal.store.abilities import abilities_of
from agentjournal.store.contract import EventStore, ModelSnapshot, RecordedEvent
from agentjournal.streams import (
    MAIN_BRANCH,
    authority_stream,
    branch_authority_stream,
    branch_stream,
    ledger_stream,
)
from agentjournal.walk import walk_tree

logger = logging.getLogger("agentjournal.engine")

_PAGE: Final = 64
_FULL_PAGE: Final = 1000


class Reader:
    """Reads one session tree from a store into its :class:`SessionTree`.

    Call its methods under the tree's lock.

    Args:
        store: The event store.
        tree: What is known of the session's streams (changed only by its methods).
        session_id: The session.
        use_model: Answer a read of everything from the store's read model when it has a
            current one (False: always from the events, as the audit tools read).
    """

    def __init__(
        self,
        store: EventStore,
        tree: SessionTree,
        session_id: str,
        *,
        use_model: bool = True,
        branch: str | None = None,
        authority: str | None = None,
    ) -> None:
        self._store = store
        self._tree = tree
        self._session_id = session_id
        self._branch = branch
        self._line_checked = branch is None  # a branch's stream must start with its fork
        self._authority = authority or authority_stream(session_id)
        self._forks: list[events.BranchStarted] | None = None  # this line's, once read
        self.stream = tree.stream
        found = abilities_of(store)
        self.models = found.read_model is not None
        self._heads_now: Callable[[list[str]], dict[str, int] | None] | None = (
            found.heads.heads_now if found.heads is not None else None
        )
        self._read_model: Callable[[str], Awaitable[ModelSnapshot | None]] | None = (
            found.read_model.read_model if found.read_model is not None and use_model else None
        )

    @property
    def line_checked(self) -> bool:
        """Whether the line is known to exist (main, or a branch whose fork was read)."""
        return self._line_checked

    async def refresh(self, limit: int | None) -> None:
        """Bring the tree up to the streams' heads and make it cover ``limit`` items."""
        tree = self._tree
        if not tree.loaded:
            await self.load(limit)
        elif not self._unmoved():
            await self.catch_up()
        if not tree.timeline.covers(limit):
            await self._window(limit, {})

    async def cover(self, limit: int) -> None:
        """Make the timeline cover ``limit`` items as of the heads the tree has seen.

        Unlike :meth:`refresh` nothing newer is read (no catch-up): a write being planned
        on the tree (its next index, its expected revisions) stays consistent with it.
        """
        tree = self._tree
        if not tree.loaded:
            await self.load(limit)
        elif not tree.timeline.covers(limit):
            await self._window(limit, {})

    async def visible(self) -> list[Entry]:
        """Every visible item, oldest first, read backwards in growing windows.

        Unlike a read of everything, the windows stop at the newest clear: a
        session compacted (or cleared) before costs what is visible since.
        """
        tree = self._tree
        size = _PAGE
        await self.refresh(size)
        while not tree.timeline.complete:  # (a reread may replace the timeline object)
            size = max(size * 2, len(tree.timeline) + 1)
            await self.refresh(size)
        return tree.timeline.latest(None)

    async def load(self, limit: int | None) -> None:
        """First use: find the open subagents and the newest events of each stream.

        A read of everything is answered from the store's read model when it has
        a current one (:meth:`_from_model`), else from the events.
        """
        tree = self._tree
        if not self._line_checked:
            await self._check_line()
        if limit is None and await self._from_model(loading=True):
            return
        size = _FULL_PAGE if limit is None else limit + 8
        tree.reset()
        pages: dict[str, list[RecordedEvent]] = {}
        heads: dict[str, int] = {}
        hashes: dict[str, str] = {}
        stream: str | None = self.stream
        while stream is not None:
            page = await self._tail(stream, size)
            pages[stream] = page
            if stream == self.stream and page and page[0].type == events.BRANCH_DELETED:
                tree.apply_recorded(page[0])  # the line has ended (the window may not reach it)
            heads[stream] = page[0].revision if page else -1
            if page:
                hashes[stream] = page[0].metadata.get(HASH_KEY, "")
                # The newest event that says: another writer's event on top may not.
                found = next((n for n in map(next_index_after, page) if n is not None), None)
                if found is not None:
                    tree.found_next_index(found)
            child = page[0].metadata.get(events.OPEN_KEY) if page else None
            stream = None
            if child and child not in heads:
                opened = await self._read_start(child)
                if opened is not None:
                    tree.opened(*opened)
                    stream = child
        tree.loaded_with(heads, hashes)
        await self._window(limit, pages)

    async def _check_line(self) -> None:
        """Refuse a branch that was never forked: its stream must begin with the
        ``BranchStarted`` of this session and name (else a write would create it).

        Raises:
            InvalidInput: It does not.
        """
        try:
            first = await self._store.read(self.stream, from_revision=0, limit=1)
        except StreamNotFound:
            first = []
        started: events.BranchStarted | None = None
        if first and first[0].type == events.BRANCH_STARTED:
            try:
                started = events.BranchStarted.decode(first[0].data)
            except CodecError as error:
                logger.warning("the fork of %s is unreadable: %s", self.stream, error)
        if started is None or (started.session_id, started.branch, started.branch_stream) != (
            self._session_id,
            self._branch,
            self.stream,
        ):
            raise InvalidInput(f"session {self._session_id} has no branch {self._branch!r}")
        self._line_checked = True

    async def _read_start(self, stream: str) -> tuple[events.Subagent, Any] | None:
        """An open subsession's subagent and its grant, from its first event."""
        try:
            first = await self._store.read(stream, from_revision=0, limit=1)
            # A SubagentStarted twin, or on a branch the continuation of a subagent that
            # was open at the fork (DESIGN, "Branches").
            return subagent_opened(first[0])
        except (StreamNotFound, IndexError, CodecError) as error:
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

        for stream in tree.followed:
            await open_cursor(stream)
        while heap:
            _, _, cursor = heapq.heappop(heap)
            assert cursor.head is not None
            if not picker.feed(cursor.head):
                break
            await cursor.advance(picker, open_cursor)
            push(cursor)
        tree.take_window(picker)
        await self.next_index()

    async def _from_model(self, *, loading: bool) -> bool:
        """Take the tree and every visible item from the store's read model, in one read
        (``read_model``); False (nothing changed) if the store has none, or not a
        current one, or it does not match what the tree already knows.

        ``loading``: the tree is read from scratch: its open subagents are found from the
        model's last event of each stream exactly as :meth:`load` finds them from the
        tails (``aj.open``, then the subsession's first event), and their heads are the
        model's. Otherwise the tree is loaded and the model is used only if it is at
        the heads the tree has seen (a read of everything reads nothing past them).
        """
        if self._read_model is None:
            return False
        snapshot = await self._read_model(self.stream)
        if snapshot is None:
            return False
        tree = self._tree
        modelled = snapshot.heads
        if loading:
            tree.reset()
            heads: dict[str, int] = {}
            hashes: dict[str, str] = {}
            stream: str | None = self.stream
            event: RecordedEvent | None = snapshot.last
            while stream is not None:
                if event is None or event.revision != modelled.get(stream):
                    # An open subsession the model does not know, or one that moved on
                    # since the model's read (its last event is read apart): the events.
                    tree.reset()
                    return False
                if stream == self.stream and event.type == events.BRANCH_DELETED:
                    tree.apply_recorded(event)  # the line has ended, as load() notes it
                heads[stream] = event.revision
                hashes[stream] = event.metadata.get(HASH_KEY, "")
                found = next_index_after(event)
                if found is not None:
                    tree.found_next_index(found)
                child = event.metadata.get(events.OPEN_KEY)
                stream = None
                if child and child not in heads:
                    opened = await self._read_start(child)
                    if opened is not None:
                        tree.opened(*opened)
                        stream = child
                        tail = await self._tail(child, 1)
                        event = tail[0] if tail else None
            tree.loaded_with(heads, hashes)
        elif any(
            modelled.get(stream, -1) != tree.heads.get(stream, -1) for stream in tree.followed
        ):
            return False  # another writer moved on: the events up to the heads seen
        # The rows become entries only if something other than a full read needs them.
        tree.replace_timeline(
            Timeline.modelled(snapshot.items, snapshot.names, snapshot.floor, snapshot.plain)
        )
        await self.next_index()
        return True

    async def model_at_heads(self) -> ModelSnapshot | None:
        """The store's read model of the tree, if it has a current one at exactly the heads
        the tree has seen (every followed stream) that names every item's stream; else None
        (then only the events say what is visible). The tree is not changed.

        A fork reads its cut from it (DESIGN, "Branches").
        """
        if self._read_model is None or not self._tree.loaded:
            return None
        snapshot = await self._read_model(self.stream)
        if snapshot is None:
            return None
        heads = self._tree.heads
        if any(snapshot.heads.get(stream, -1) != heads.get(stream, -1) for stream in heads):
            return None
        if not snapshot.names.keys() >= {key >> 40 for _, key, _ in snapshot.items}:
            return None
        return snapshot

    async def _everything(self, pages: dict[str, list[RecordedEvent]]) -> None:
        """Read the whole tree (:func:`walk_tree`, nothing past the heads already seen) and
        fold every item by index. A tail already read back to revision 0 is not read again.

        A loaded tree is answered from the store's read model when it is current at
        the heads the tree has seen (:meth:`_from_model`)."""
        tree = self._tree
        if not pages and await self._from_model(loading=False):
            return
        whole = {
            stream: page[::-1] for stream, page in pages.items() if page and page[-1].revision == 0
        }
        read = [recorded for _, recorded in await self.line_events(whole)]
        new: list[TimelineEvent] = []
        timeline = Timeline()
        # Decoded in one go, without the collector: every item decoded here stays in the
        # timeline, and rescanning them as they pile up was half of a cold read's time.
        with no_collection():
            for recorded in read:
                for event in recorded:
                    if event.type != events.SUBAGENT_COMPLETED:
                        new.extend(tree.apply_recorded(event))
            fold(timeline, new)
        timeline.complete = True
        tree.replace_timeline(timeline)
        await self.next_index()

    async def line_events(
        self, whole: Mapping[str, list[RecordedEvent]] | None = None
    ) -> list[tuple[str, list[RecordedEvent]]]:
        """Every event of the line up to the heads the tree has seen, stream by stream: the
        line's own tree, then each line below it as of where the line above leaves it.

        A line's prefix is its parent line's tree as of the fork: each *segment* is a walk
        (:func:`walk_tree`) of a line's top stream up to the base revision its child line
        names, and of each subsession open at the fork up to its base revision too, so
        nothing the parent wrote after the fork is read. A line's continuations (the
        subagents open at its fork, DESIGN, "Branches") are walked with its top stream: no
        ``SubagentStarted`` of the line opens them. The segments' top streams come first
        in each segment's share. ``whole``: streams already read.
        """
        read: list[tuple[str, list[RecordedEvent]]] = []
        segment: tuple[str, Mapping[str, int]] | None = (self.stream, self._tree.heads)
        seen: set[str] = set()
        while segment is not None and segment[0] not in seen:
            root, limits = segment
            seen.add(root)
            known = whole if root == self.stream else None
            first: RecordedEvent | None = None
            try:
                async for stream, recorded in walk_tree(
                    self._store, root, limits=limits, read=known
                ):
                    read.append((stream, recorded))
                    if stream == root and recorded:
                        first = recorded[0]
            except StreamNotFound:
                pass  # no session yet
            started = _fork_of(first) if first is not None else None
            if started is None:
                break
            for original in started.base[1:]:
                continuation = started.continuations.get(original.stream)
                if continuation is None or continuation in seen:
                    continue
                seen.add(continuation)
                try:
                    async for stream, recorded in walk_tree(
                        self._store, continuation, limits=limits, read=known
                    ):
                        read.append((stream, recorded))
                except StreamNotFound:
                    logger.warning(
                        "continuation stream %s is missing; it is left out", continuation
                    )
            segment = (started.base[0].stream, {p.stream: p.revision for p in started.base})
        return read

    @property
    def side_streams(self) -> frozenset[str]:
        """The tree's streams a catch-up does not read: its authority log and ledger."""
        return frozenset((self._authority, ledger_stream(self._session_id)))

    def _unmoved(self) -> bool:
        """Whether no followed stream moved past the tree's heads, answered on this thread
        by a store that can (SQLite's :meth:`heads_now`); False: read to find out.

        A warm ``get_items`` then costs no trip to the store's thread. The store's
        answer covers every commit that finished before the call, in any process,
        so nothing a catch-up would have read is missed.
        """
        probe = self._heads_now
        if probe is None:
            return False
        tree = self._tree
        followed = tree.followed
        heads = probe(followed)
        if heads is None:
            return False
        known = tree.heads
        return all(heads.get(stream, -1) == known.get(stream, -1) for stream in followed)

    async def catch_up(self) -> None:
        """Apply what other writers appended to the followed streams.

        When nothing changed this is one empty read per followed stream (the
        session's stream and those of its open subagents).
        """
        tree = self._tree
        new: list[TimelineEvent] = []
        positions = dict(tree.heads)
        hashes = dict(tree.hashes)
        pending = tree.followed
        with tree.tentatively():  # cut short, nothing read so far counts
            while pending:
                stream = pending.pop(0)
                while True:
                    head = positions.get(stream, -1)
                    try:
                        page = await self._store.read(stream, from_revision=head + 1, limit=_PAGE)
                    except StreamNotFound:
                        if head >= 0:
                            logger.warning("stream %s disappeared; rereading the session", stream)
                            await self.load(None)
                            return
                        break
                    for event in page:
                        new.extend(tree.apply_recorded(event, pending))
                        positions[stream] = event.revision
                        hashes[stream] = event.metadata.get(HASH_KEY, "")
                        found = next_index_after(event)
                        if found is not None:
                            tree.found_next_index(found)
                    if len(page) < _PAGE:
                        break
        tree.caught_up(positions, hashes, new)

    async def next_index(self) -> int:
        """The next free message index (scanned back when the newest events do not say)."""
        tree = self._tree
        if tree.next_index is None:
            tree.found_next_index(await self._scan_next_index())
        assert tree.next_index is not None
        return tree.next_index

    async def _scan_next_index(self) -> int:
        """Find the next free index when the newest events do not say (foreign writers)."""
        revision = self._tree.heads.get(self.stream, -1)
        while revision >= 0:
            page = await self._tail(self.stream, _PAGE, revision)
            for event in page:
                found = next_index_after(event)
                if found is not None:
                    return found
            revision = page[-1].revision - 1 if page else -1
        return 0

    async def authority_log(self, *, fresh: bool = False) -> AuthorityLog:
        """The authority log's head and state (read from its tail when not known or ``fresh``).

        The newest entry names the policy in force, and the newest entry with a
        ``held`` map says what every agent last held: usually the last event.

        On a branch the log is the line's own (its head is what the next entry follows),
        but until it says what every agent holds, the policy and ``held`` are inherited:
        the log in force at the fork (``BranchStarted.authority``), read backwards from
        that revision, and so on down the lines (DESIGN, "Branches"). A grant written on the
        parent line after the fork is never seen on the branch: authority never widens
        across a fork, and a narrowing after it is the parent's own.
        """
        tree = self._tree
        if tree.authority is not None and not fresh:
            return tree.authority
        head, policy, held = await self._log_tail(self._authority, None)
        if held is None and self._branch is not None:
            inherited_policy, held = await self._inherited_log()
            policy = policy or inherited_policy
        log = AuthorityLog(
            head.revision if head is not None else -1,
            head.metadata.get(HASH_KEY, "") if head is not None else GENESIS,
            policy,
            held or {},
        )
        tree.read_log(log)
        return log

    async def _inherited_log(self) -> tuple[str | None, Mapping[str, Any] | None]:
        """The policy and ``held`` map a branch inherits (see :meth:`authority_log`)."""
        forks = await self._line_forks()
        place = forks[0].authority if forks else None
        policy: str | None = None
        seen: set[str] = set()
        while place is not None and place.stream not in seen:
            seen.add(place.stream)
            _, found, held = await self._log_tail(place.stream, place.revision)
            policy = policy or found
            if held is not None:
                return policy, held
            # Nothing up to there says what is held: what that log's own line inherited.
            place = next(
                (
                    fork.authority
                    for fork in forks
                    if branch_authority_stream(self._session_id, fork.branch) == place.stream
                ),
                None,
            )
        return policy, None

    async def _line_forks(self) -> list[events.BranchStarted]:
        """The forks of this line and of every line above main it descends from, nearest
        first, by their parents' names (read once: a fork never changes)."""
        if self._forks is not None:
            return self._forks
        forks: list[events.BranchStarted] = []
        stream: str | None = self.stream
        while stream is not None and all(fork.branch_stream != stream for fork in forks):
            try:
                first = await self._store.read(stream, from_revision=0, limit=1)
            except StreamNotFound:
                first = []
            started = _fork_of(first[0]) if first else None
            if started is None or (started.session_id, started.branch_stream) != (
                self._session_id,
                stream,
            ):
                break  # main, or not this session's fork (the verifier reports it)
            forks.append(started)
            parent = started.parent
            stream = None if parent == MAIN_BRANCH else branch_stream(self._session_id, parent)
        self._forks = forks
        return forks

    async def _log_tail(
        self, stream: str, before: int | None
    ) -> tuple[RecordedEvent | None, str | None, Mapping[str, Any] | None]:
        """An authority log read backwards from revision ``before`` (None: its head) to its
        newest entry with a ``held`` map: the first event read, the newest policy named,
        and that map (None: no entry has one)."""
        head: RecordedEvent | None = None
        policy: str | None = None
        held: Mapping[str, Any] | None = None
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
        return head, policy, held

    async def ledger_head(self) -> tuple[int, str]:
        """The checkpoint stream's head (revision and hash; -1 and the genesis hash if none)."""
        tree = self._tree
        if tree.ledger_head is None:
            try:
                tail = await self._store.read(
                    ledger_stream(self._session_id), backwards=True, limit=1
                )
            except StreamNotFound:
                tail = []
            tree.read_ledger(
                (tail[0].revision, tail[0].metadata.get(HASH_KEY, "")) if tail else (-1, GENESIS)
            )
        assert tree.ledger_head is not None
        return tree.ledger_head


class _Cursor:
    """Reads one stream backwards for the merge, one item at a time."""

    def __init__(
        self,
        reader: Reader,
        stream: str,
        page: list[RecordedEvent] | None,
        head: int | None,
        size: int,
        order: int,
    ) -> None:
        self.reader = reader
        self.stream = stream
        self.order = order  # ties (foreign items without an index) go to the earlier cursor
        self.buffer: deque[TimelineEvent] = deque()
        self.head: Entry | None = None
        self._page = page
        self._next = head  # revision to read from next, going down; None: the end
        self._size = size
        self._done = False
        self._crossed = {stream}  # the line streams read so far (a forged cycle ends here)

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
                if (
                    event.type == events.SUBAGENT_STARTED
                    and events.INDEX_KEY not in event.metadata
                    and opened_stream(event) is None
                ):
                    self._done = True  # this subsession's first event: nothing older here
                    break
                if event.type == events.SUBAGENT_CONTINUED and event.revision == 0:
                    below = continues(event)
                    if below is not None and below.stream not in self._crossed:
                        # A continuation's first event: the subagent's older part is its
                        # original stream below the fork (then that stream's own start).
                        self._crossed.add(below.stream)
                        self.stream, self._next, self._done = below.stream, below.revision, False
                    break
                if event.type == events.BRANCH_STARTED and event.revision == 0:
                    below = continued_from(event)
                    if below is not None and below.stream not in self._crossed:
                        # A line's first event: its older part is the parent line's stream
                        # below the fork, read on by this cursor as if it were this stream's.
                        self._crossed.add(below.stream)
                        self.stream, self._next, self._done = below.stream, below.revision, False
                    break
                if event.type == events.SUBAGENT_COMPLETED:
                    child = _closed_child(event)
                    if child:
                        # The close is newer than all of that subsession: merge it in from here.
                        await open_cursor(child)
                    continue
                self.buffer.extend(reversed(self.reader._tree.apply_recorded(event)))

    async def _read(self) -> list[RecordedEvent]:
        if self._next is not None and self._next < 0:
            return []
        return await self.reader._tail(self.stream, self._size, self._next)


def _fork_of(event: RecordedEvent) -> events.BranchStarted | None:
    """The fork a line's first event is (None: no ``BranchStarted`` at revision 0, or an
    unreadable one: then the line has no prefix)."""
    if event.type != events.BRANCH_STARTED or event.revision != 0:
        return None
    try:
        return events.BranchStarted.decode(event.data)
    except CodecError as error:
        logger.warning("skipping the unreadable fork of %s: %s", event.stream, error)
        return None


def continued_from(event: RecordedEvent) -> events.StreamPlace | None:
    """Where the line whose first event is ``event`` continues its parent: the parent
    line's top stream and the last revision of it before the fork (None: ``event`` is no
    ``BranchStarted`` at revision 0, or it is unreadable, then the line has no prefix)."""
    if event.type != events.BRANCH_STARTED or event.revision != 0:
        return None
    try:
        return events.BranchStarted.decode(event.data).base[0]
    except CodecError as error:
        logger.warning("skipping the unreadable fork of %s: %s", event.stream, error)
        return None


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
