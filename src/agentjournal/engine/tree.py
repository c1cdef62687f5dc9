"""What a session knows of its streams: the one object that changes it (no I/O).

A :class:`SessionTree` is shared by the session objects of one id (the journal
keeps one per id): the heads and chain hashes of the streams it follows (the
session's and those of its open subagents), the chain of open subagents, the
newest visible items (:class:`~agentjournal.engine.timeline.Timeline`), the
next free message index, where pending calls' outputs go, and the heads of the
authority log and the checkpoint stream.

Only its own methods change it: :meth:`apply` takes a :class:`Commit` (what a
write that landed did), :meth:`apply_recorded` an event read from a followed
stream, and the reader's results arrive through :meth:`loaded_with`,
:meth:`caught_up`, :meth:`take_window` and :meth:`replace_timeline`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agentjournal import events
from agentjournal._locks import CrossLoopLock
from agentjournal.engine import codec
from agentjournal.engine.timeline import (
    Clear,
    Entry,
    Picker,
    Pop,
    Timeline,
    TimelineEvent,
    fold,
)
from agentjournal.errors import CodecError
from agentjournal.ledger.chain import GENESIS
from agentjournal.records import opened_stream
from agentjournal.store.contract import RecordedEvent

logger = logging.getLogger("agentjournal.engine")

_RESPONDED: Final = 1024  # response ids remembered: far more than a run ever has pending


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
    hash: str = GENESIS
    policy: str | None = None
    held: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Commit:
    """What a write that landed changed: everything :meth:`SessionTree.apply` takes.

    Attributes:
        heads: Stream -> its last revision after the write (every stream written).
        hashes: Stream -> the chain hash of that event.
        entries: What the write changes in the visible history, in write order.
        written: How many events it wrote (for the checkpoint cadence).
        chain: The open subagents after it (None: unchanged).
        next_index: The next free message index after it (None: unchanged).
        call_owner: Where pending calls' outputs go after it (None: unchanged).
        run: The run that wrote inside the chain (kept when the chain stays open).
        grants: Subsession -> the authority granted to the subagent it opened.
        authority: The authority log after it (None: unchanged).
        ledger: The checkpoint stream's head after it (None: unchanged).
        signed: Whether it was a checkpoint (nothing is unsigned after it).
        responded: The ids of the ``ModelResponded`` events it wrote.
    """

    heads: Mapping[str, int]
    hashes: Mapping[str, str]
    entries: Sequence[TimelineEvent] = ()
    written: int = 0
    chain: list[events.Subagent] | None = None
    next_index: int | None = None
    call_owner: OrderedDict[str, str] | None = None
    run: Any = None
    grants: Mapping[str, Any] = field(default_factory=dict)
    authority: AuthorityLog | None = None
    ledger: tuple[int, str] | None = None
    signed: bool = False
    responded: Sequence[uuid.UUID] = ()


def items_commit(
    heads: Mapping[str, int],
    hashes: Mapping[str, str],
    entries: Sequence[TimelineEvent],
    written: int,
    chain: list[events.Subagent] | None,
    next_index: int | None,
    call_owner: OrderedDict[str, str] | None,
    run: Any,
    grants: Mapping[str, Any],
    authority: AuthorityLog | None,
    responded: Sequence[uuid.UUID],
) -> Commit:
    """``Commit(...)`` of these fields (an ``add_items`` write's: no checkpoint), built
    without the frozen dataclass's ``__init__``, whose thirteen ``object.__setattr__``
    calls were most of its cost: the same fields at once, on every write
    (``tests/test_write_path.py`` compares the two)."""
    commit: Commit = _new(Commit)
    vars(commit).update(
        heads=heads,
        hashes=hashes,
        entries=entries,
        written=written,
        chain=chain,
        next_index=next_index,
        call_owner=call_owner,
        run=run,
        grants=grants,
        authority=authority,
        ledger=None,
        signed=False,
        responded=responded,
    )
    return commit


_new: Final = object.__new__


@dataclass
class SessionTree:
    """What is known of one session's streams; shared by its session objects.

    Read its fields freely; change them only through its methods.

    Attributes:
        stream: The session's stream, ``AgentSession-{id}``.
        cache_bytes: What its timeline may hold between calls (see
            :meth:`~agentjournal.engine.timeline.Timeline.bound`); None: no bound.
    """

    stream: str
    cache_bytes: int | None = None  # the timeline's budget (None: unbounded)
    lock: CrossLoopLock = field(default_factory=CrossLoopLock)
    loaded: bool = False
    heads: dict[str, int] = field(default_factory=dict)  # last revision seen, per followed stream
    hashes: dict[str, str] = field(default_factory=dict)  # chain hash at that revision
    chain: list[events.Subagent] = field(default_factory=list)  # open subagents, outermost first
    timeline: Timeline = field(default_factory=Timeline)
    next_index: int | None = None
    call_owner: OrderedDict[str, str] = field(default_factory=OrderedDict)
    chain_run: Any = None  # the run that last wrote inside the chain (a weak reference)
    unsigned: int = 0  # events written since the last checkpoint (by this process)
    ledger_head: tuple[int, str] | None = None  # the checkpoint stream's head, once known
    grants: dict[str, Any] = field(default_factory=dict)  # open subsession -> granted authority
    authority: AuthorityLog | None = None  # the authority log's head, once read
    # Ids of ModelResponded events known to be on the store (written, or read back after a
    # write whose answer was lost): a pending response among them is never written again.
    responded: OrderedDict[uuid.UUID, None] = field(default_factory=OrderedDict)
    # A branch line ended by ``agentjournal.BranchDeleted`` on its top stream: its reason
    # (``deleted`` or ``cleared``). Nothing may be written to the line after it.
    deleted: str | None = None

    def __post_init__(self) -> None:
        self.timeline.budget = self.cache_bytes

    @property
    def followed(self) -> list[str]:
        """The streams a catch-up reads: the session's and its open subagents'."""
        return [self.stream, *(subagent.stream for subagent in self.chain)]

    # -- reads ----------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything read so far (before reading the tree again)."""
        self.loaded = False
        self.heads, self.hashes, self.chain, self.next_index = {}, {}, [], None
        self.deleted = None
        self.timeline.reset()

    def loaded_with(self, heads: Mapping[str, int], hashes: Mapping[str, str]) -> None:
        """The first read is done: the followed streams' heads and hashes."""
        self.heads, self.hashes = dict(heads), dict(hashes)
        self.loaded = True

    def found_next_index(self, index: int) -> None:
        """A read found where message indices continue."""
        self.next_index = max(self.next_index or 0, index)

    def opened(self, subagent: events.Subagent, grant: Any) -> None:
        """A read found an open subagent (the chain grows inward)."""
        if all(open_.stream != subagent.stream for open_ in self.chain):
            self.chain.append(subagent)
        self.grants[subagent.stream] = grant

    @contextlib.contextmanager
    def tentatively(self) -> Iterator[None]:
        """The chain as it is now comes back if the block raises or is cancelled: a
        catch-up cut short between a subagent's close and the rest of its stream must
        not stop following that stream (the next catch-up reads it all again)."""
        chain, grants = list(self.chain), dict(self.grants)
        try:
            yield
        except BaseException:
            self.chain[:] = chain
            self.grants = grants
            raise

    def apply_recorded(
        self, event: RecordedEvent, follow: list[str] | None = None
    ) -> list[TimelineEvent]:
        """An event read from a followed stream: what it adds to the history.

        With ``follow`` (reading forward), a subagent it opens joins the chain (and
        its stream is appended to ``follow``), one it closes leaves it. An unreadable
        event is skipped with a warning naming its stream and revision.
        """
        try:
            if event.type == events.MODEL_RESPONDED:
                self._responded([event.id])
                return []
            if event.type == events.SUBAGENT_STARTED:
                if events.INDEX_KEY not in event.metadata and opened_stream(event) is None:
                    return []  # the twin that opens a subsession stream (names itself)
                subagent, item_json = events.decode_subagent_started(event.data)
                if follow is not None and all(s.stream != subagent.stream for s in self.chain):
                    self.opened(subagent, events.granted_authority(json.loads(event.data)))
                    follow.append(subagent.stream)
                if item_json is None:
                    return []
                return [Entry(event.stream, event.revision, 0, index_of(event), item_json)]
            if event.type == events.SUBAGENT_COMPLETED:
                _, stream, _ = events.decode_subagent_completed(event.data)
                if follow is not None:
                    self._forget_from(stream)
                return []
            if event.type == events.ITEM_POPPED:
                popped = events.ItemPopped.decode(event.data)
                return [Pop((popped.stream, popped.revision, popped.part), popped.message_index)]
            if event.type == events.SESSION_CLEARED:
                return [Clear(events.SessionCleared.decode(event.data).through_index)]
            if event.type == events.BRANCH_DELETED:
                if event.stream != self.stream:
                    return []  # only a line's own top stream can end it
                ended = events.BranchDeleted.decode(event.data)
                self.ended(ended.reason)
                return [Clear(ended.through_index)]
            if not events.holds_item(event.type, event.metadata):
                return []  # no item (an approval's interrupt is written beside the items)
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
        index = index_of(event)
        return [
            Entry(event.stream, event.revision, part, index, text, fresh)
            for part, (text, fresh) in enumerate(pairs)
        ]

    def ended(self, reason: str) -> None:
        """The line was deleted or cleared (``agentjournal.BranchDeleted`` read or written)."""
        self.deleted = reason

    def caught_up(
        self, heads: Mapping[str, int], hashes: Mapping[str, str], new: list[TimelineEvent]
    ) -> None:
        """A catch-up read ``new`` from the followed streams up to ``heads``."""
        followed = self.followed
        self.heads = {stream: heads.get(stream, -1) for stream in followed}
        self.hashes = {stream: hashes[stream] for stream in followed if stream in hashes}
        fold(self.timeline, new)

    def take_window(self, picker: Picker) -> None:
        """A windowed read chose the newest items."""
        self.timeline.take(picker)

    def replace_timeline(self, timeline: Timeline) -> None:
        """A full read folded every item of the tree."""
        timeline.budget = self.cache_bytes
        self.timeline = timeline

    def bound(self) -> None:
        """Keep the timeline within its budget (after a read was answered, or a write)."""
        self.timeline.bound()

    def read_log(self, log: AuthorityLog | None) -> None:
        """The authority log's head as read (None: read it again before the next use)."""
        self.authority = log

    def read_ledger(self, head: tuple[int, str] | None) -> None:
        """The checkpoint stream's head as read (None: read it again before the next use)."""
        self.ledger_head = head

    # -- writes ---------------------------------------------------------------------------

    def apply(self, commit: Commit) -> None:
        """A write landed: take on everything it changed."""
        self.heads.update(commit.heads)
        self.hashes.update(commit.hashes)
        for entry in commit.entries:
            self.timeline.apply(entry)
        self.timeline.bound()
        if commit.chain is not None:
            self.chain = list(commit.chain)
        if commit.call_owner is not None:
            self.call_owner = commit.call_owner
        if commit.run is not None and self.chain:
            self.chain_run = commit.run
        if commit.next_index is not None:
            self.next_index = commit.next_index
        self.grants.update(commit.grants)
        if commit.authority is not None:
            self.authority = commit.authority
        if commit.ledger is not None:
            self.ledger_head = commit.ledger
        self._responded(commit.responded)
        self.unsigned = 0 if commit.signed else self.unsigned + commit.written
        # Only the session's stream and the open subagents' are followed (a turn's write
        # touches none other: then nothing to drop, and no new dicts).
        followed = set(self.followed)
        if not followed.issuperset(self.heads) or not followed.issuperset(self.hashes):
            self.heads = {k: v for k, v in self.heads.items() if k in followed}
            self.hashes = {k: v for k, v in self.hashes.items() if k in followed}

    def _responded(self, ids: Sequence[uuid.UUID]) -> None:
        for id_ in ids:
            self.responded[id_] = None
        while len(self.responded) > _RESPONDED:
            self.responded.popitem(last=False)

    def _forget_from(self, stream: str) -> None:
        """A subagent closed: drop it (and anything it opened) from the chain."""
        for position, subagent in enumerate(self.chain):
            if subagent.stream == stream:
                del self.chain[position:]
                return


def _number(raw: str | None) -> int | None:
    """A metadata value as a non-negative int (ASCII digits only), else None."""
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() else None


def index_of(event: RecordedEvent) -> int:
    """An item event's message index: ``aj.index``, else (a foreign writer) the canonical
    event's own ``message_index``, else -1."""
    index = _number(event.metadata.get(events.INDEX_KEY))
    if index is not None:
        return index
    try:
        body = json.loads(event.data)
    except (ValueError, RecursionError):
        return -1
    found = body.get("message_index") if isinstance(body, dict) else None
    if isinstance(found, str):
        found = _number(found)
    return found if isinstance(found, int) and not isinstance(found, bool) and found >= 0 else -1


def next_index_after(event: RecordedEvent) -> int | None:
    """The next free message index after ``event``; None if it does not say."""
    found = _number(event.metadata.get(events.NEXT_INDEX_KEY))
    if found is not None:
        return found
    index = _number(event.metadata.get(events.INDEX_KEY))
    return None if index is None else index + 1
