"""A journal session without the Agents SDK: its reads and writes on one session tree.

:class:`SessionCore` is what :class:`~agentjournal.sdk.session.JournalSession`
delegates to. Items are plain dicts; what only a run knows (who speaks, which
call is a handoff, what a handoff granted) arrives as a
:class:`~agentjournal.engine.plan.RunView`, and trace ids as metadata. Every
operation takes the tree's lock, reads through its
:class:`~agentjournal.engine.reader.Reader` and writes through its
:class:`~agentjournal.engine.writer.Writer`.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import operator
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, TypeAlias

from agentjournal import events
from agentjournal._gc import no_collection
from agentjournal.authority import Authority
from agentjournal.engine import turns
from agentjournal.engine.fork import (
    HIDING,
    Branch,
    ForkPoint,
    LineHead,
    cut_position,
    decode_line,
    fork_point,
    line_end_id,
    line_end_reason,
    next_index_of_rows,
    plan_fork,
    plan_line_ends,
    read_branches,
    read_types,
    revision_at,
    subagent_opened,
    turn_position,
)
from agentjournal.engine.plan import (
    ItemsPlan,
    RunView,
    SessionFacts,
    WritePlan,
    plan_checkpoint,
    plan_control,
    plan_items,
    plan_log,
    run_grant,
)
from agentjournal.engine.reader import Reader, continued_from
from agentjournal.engine.timeline import Clear, Entry, Key, Pop, model_items
from agentjournal.engine.tree import Commit, SessionTree, next_index_after
from agentjournal.engine.turns import Turned, is_user
from agentjournal.engine.writer import Writer
from agentjournal.errors import (
    BranchDeleted,
    CodecError,
    ConcurrencyError,
    InvalidInput,
    StreamNotFound,
)
from agentjournal.ledger import redaction
from agentjournal.ledger.chain import HASH_KEY
from agentjournal.ledger.checkpoints import Checkpoint
from agentjournal.ledger.keys import SigningKey
from agentjournal.store.contract import ModelCopy, RecordedEvent, event_id, model_place
from agentjournal.streams import (
    MAIN_BRANCH,
    authority_stream,
    branch_authority_stream,
    branch_stream,
    branches_stream,
    continuation_id,
    subsession_stream,
)

__all__ = ["DEFAULT_CHECKPOINT_EVERY", "HistoryChanged", "SessionCore", "Snapshot"]

logger = logging.getLogger("agentjournal.engine")

DEFAULT_CHECKPOINT_EVERY: Final = 100


class _Nonces:
    """The nonce of each write's event ids: unique to this process and this write.

    96 random bits drawn once per process (again in a forked child) and a counter.
    Not ``uuid4()`` per write: that reads ``os.urandom``, a system call that gives up
    the GIL, and with many sessions writing at once getting it back cost more than
    planning the write. Not the ``random`` module: a program that seeds it would
    repeat nonces, and two writers with the same ids at one revision would take each
    other's write for their own retry.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new prefix (a forked child must not share its parent's)."""
        self._prefix = os.urandom(12).hex()
        self._count = itertools.count()

    def next(self) -> str:
        """A nonce no other write of any process uses (a counter step is atomic)."""
        return f"{self._prefix}{next(self._count):08x}"


_NONCES: Final = _Nonces()
_SMALL_ANSWER: Final = 256  # items a read hands out with the collector as it is
os.register_at_fork(after_in_child=_NONCES.reset)


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


def _place(event: RecordedEvent) -> events.StreamPlace:
    """The stream place of an event (what a fork binds to)."""
    return events.StreamPlace(event.stream, event.revision, event.metadata.get(HASH_KEY, ""))


def _continuations(
    session_id: str,
    branch: str,
    chain: Sequence[RecordedEvent],
    originals: Sequence[tuple[events.Subagent, Any]],
) -> list[events.SubagentContinued]:
    """The continuation of each subagent open at a cut, outermost first (pure): a stream of
    its own on the branch (:func:`~agentjournal.streams.continuation_id`), whose parent is
    the branch's top stream or the continuation outside it, carrying the original's
    identity and grant and its last event before the cut."""
    continued: list[events.SubagentContinued] = []
    parent = branch
    for event, (subagent, grant) in zip(chain, originals, strict=True):
        agent_id = continuation_id(subagent.agent_name, branch, event.stream)
        stream = subsession_stream(session_id, agent_id)
        continued.append(
            events.SubagentContinued(
                agent_id=agent_id,
                agent_type=subagent.agent_name,
                source_agent=subagent.source_agent,
                call_id=subagent.call_id,
                subsession_stream=stream,
                parent_stream=parent,
                continues=_place(event),
                granted_authority=grant,
            )
        )
        parent = stream
    return continued


async def _line_head(store: Any, line: Branch) -> LineHead | None:
    """A live branch line's head as a clear must name it (None: it has ended already)."""
    try:
        tail = await store.read(line.stream, backwards=True, limit=1)
    except StreamNotFound:
        return None
    if not tail or tail[0].type == events.BRANCH_DELETED:
        return None
    last = tail[0]
    found = next_index_after(last)
    revision = last.revision
    while found is None and revision > 0:  # a foreign event on top: scan back for one
        page = await store.read(line.stream, from_revision=revision - 1, backwards=True, limit=64)
        found = next((n for n in map(next_index_after, page) if n is not None), None)
        revision = page[-1].revision if page else 0
    return LineHead(
        line.name,
        line.stream,
        line.parent,
        last.revision,
        last.metadata.get(HASH_KEY, ""),
        found if found is not None else line.next_index,
        last.metadata.get(events.OPEN_KEY) or None,
    )


def _plan_closes(
    tree: SessionTree,
    facts: SessionFacts,
    *,
    next_index: int,
    nonce: str,
    end: Any,
    reason: str,
    trace: Mapping[str, str],
) -> ItemsPlan | None:
    """The closes of every subagent open on a branch line that ends (None: none is open).

    Planned exactly as :meth:`~agentjournal.sdk.session.JournalSession.close_subagents`
    plans a run's (``plan_items`` with ``closing``): ``SubagentCompleted`` (``cancelled``)
    on the subsession and its parent stream, innermost first, each at its exact revision;
    every copy also carries ``aj.line_end`` = ``end``, the id of the ``BranchDeleted`` that
    follows on the line's top stream in the same write (DESIGN §17.3, "The end of a line").
    """
    if not tree.chain:
        return None
    return plan_items(
        tree,
        facts,
        _NoRun(),
        [],
        first_index=next_index,
        nonce=nonce,
        now=datetime.now(UTC),
        trace={**trace, events.LINE_END_KEY: str(end)},
        closing=("cancelled", line_end_reason(facts.branch or MAIN_BRANCH, reason)),
    )


def _unix_seconds() -> int:
    """Now, in whole seconds since the epoch (a generated branch name's stamp)."""
    return int(time.time())


def _generated_names(base: str) -> Iterator[str]:
    """``base``, then ``base_2``, ``base_3``... (a generated branch name that is taken)."""
    yield base
    for number in itertools.count(2):
        yield f"{base}_{number}"


_CutAt: TypeAlias = tuple[
    int,
    ForkPoint,
    list[tuple[str, RecordedEvent | None]],
    ModelCopy | None,
    Mapping[str, Sequence[RecordedEvent]],
]
"""A fork's cut: its position, the fork point, the line's top streams, the read model's
copy (None: the branch reads its events) and the line's events as read (none from the
model)."""
"""A fork's cut: its position, the line there, the line's top streams with their first
events, and the read model copy that starts the branch's model (None: none)."""


class HistoryChanged(Exception):
    """A compaction snapshot's suffix is no longer the newest history: replace nothing."""


@dataclass(frozen=True)
class Snapshot:
    """The newest visible items of a session, as a compaction read them.

    Attributes:
        items: The items, oldest first.
        complete: Whether no visible item is older than ``items``.
        seen: Each item's key and exact text (what a replacement checks is unchanged).
    """

    items: list[dict[str, Any]]
    complete: bool
    seen: list[tuple[Key, str]]


class _NoRun:
    """What a write that belongs to no run's turn knows of the run (``close_subagents``, a
    compaction, which the SDK makes inside a run): at most who is speaking."""

    identity: Any = None
    speaker: str | None = None
    handoffs: Mapping[str, tuple[str, str]] = {}
    grants: Sequence[Any] = ()
    finished: str | None = None
    responses: Sequence[Any] = ()  # a compaction carries no model response

    def __init__(self, speaker: str | None = None) -> None:
        self.speaker = speaker

    def produced_by(self, item: Mapping[str, Any]) -> None:
        return None

    def same_run(self, run: Any) -> bool:
        return False


class SessionCore:
    """One session's reads and writes (see the module docs).

    Args:
        store: The event store.
        facts: What the session adds to every write.
        tree: What is known of the session's streams (shared per session id).
        signing_key: Signs checkpoints; without one none are written.
        checkpoint_every: Events written between two checkpoints (at least 1).
    """

    def __init__(
        self,
        store: Any,
        facts: SessionFacts,
        tree: SessionTree,
        *,
        signing_key: SigningKey | None = None,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        use_model: bool = True,
    ) -> None:
        if checkpoint_every < 1:
            raise InvalidInput(f"checkpoint_every must be at least 1, got {checkpoint_every}")
        self.facts = facts
        self.tree = tree
        self._store = store
        self.reader = Reader(
            store,
            tree,
            facts.session_id,
            use_model=use_model,
            branch=facts.branch,
            authority=facts.authority_stream,
        )
        self.writer = Writer(store, tree, self.reader)
        self.signing_key = signing_key
        self._checkpoint_every = checkpoint_every
        self._taken: set[str] = set()  # subsession streams found to exist already
        # The newest user message this object wrote and its turn: the next write's
        # ``aj.turn`` needs no read when it is still the newest visible one.
        self._last_user: tuple[Key, int] | None = None
        self._warned_unwired = False

    # -- reads ------------------------------------------------------------------------

    async def items(self, limit: int | None) -> list[dict[str, Any]]:
        """The newest ``limit`` visible items (every one for None), oldest first, fresh."""
        async with self.tree.lock:
            await self.reader.refresh(limit)
            self._check_live()
            timeline = self.tree.timeline
            if (len(timeline) if limit is None else limit) <= _SMALL_ANSWER:
                items = timeline.items(limit)
            else:
                with no_collection():  # thousands of fresh dicts, none in a cycle
                    items = timeline.items(limit)
            self.tree.bound()  # only after the answer: a full read may hold more meanwhile
            return items

    async def open_subagents(self) -> list[events.Subagent]:
        """The subagents open now, outermost first (read from the streams)."""
        async with self.tree.lock:
            await self.reader.refresh(0)
            return list(self.tree.chain)

    async def open_grant(self, agent: str) -> tuple[bool, Authority | None]:
        """Whether ``agent`` speaks inside the innermost open subagent, and what it was granted."""
        async with self.tree.lock:
            await self.reader.refresh(0)
        chain = self.tree.chain
        if not chain or chain[-1].agent_name != agent:
            return False, None
        granted = self.tree.grants.get(chain[-1].stream)
        try:
            return True, None if granted is None else Authority.from_json(granted)
        except InvalidInput as error:
            logger.warning("the grant of %s is unreadable (%s): it holds nothing", agent, error)
            return True, None

    async def held_grant(self, agent: str) -> Authority | None:
        """What ``agent`` last held in this session (the authority log, read afresh), if any.

        An unreadable entry holds nothing (fail closed).
        """
        async with self.tree.lock:
            log = await self.reader.authority_log(fresh=True)
        raw = log.held.get(agent)
        if raw is None:
            return None
        try:
            return Authority.from_json(raw)
        except InvalidInput as error:
            logger.warning("what %s last held is unreadable (%s): it holds nothing", agent, error)
            return Authority()

    # -- writing items ------------------------------------------------------------------

    async def add(
        self,
        items: list[Any],
        run: RunView,
        *,
        trace: Mapping[str, str],
        closing: tuple[str, str] | None = None,
        hiding: Callable[[], Awaitable[Sequence[Entry | Clear]]] | None = None,
        landed: Callable[[ItemsPlan], None] | None = None,
        checkpoint_trace: Mapping[str, str] | None = None,
    ) -> ItemsPlan | None:
        """Write ``items`` as one atomic write (closing subagents with ``closing``); return
        the plan that landed, None when there was nothing to write.

        ``hiding`` (a compaction's replacement) is asked before each attempt, under the
        tree's lock, which items the same write hides; it raises to give up. ``landed``
        is told the plan as soon as it has landed, before the checkpoint that may
        follow: a caller cancelled during that checkpoint still knows what was written.
        The checkpoint carries ``checkpoint_trace`` (default ``trace``).

        Raises:
            CodecError: An item cannot be stored exactly; nothing was written.
            RetriesExhausted: Other writers kept winning for every retry.
            StoreUnavailable: The store failed and the outcome could not be settled.
        """
        tree = self.tree
        nonce = _NONCES.next()

        async def build() -> ItemsPlan | None:
            self._check_live()
            hides = await hiding() if hiding is not None else ()
            first = await self.reader.next_index()
            log = await self.reader.authority_log() if run.grants else None
            users = any(is_user(item) for item in items)
            last_turn = await self._last_turn(hides) if users else None
            plan = plan_items(
                tree,
                self.facts,
                run,
                items,
                first_index=first,
                nonce=nonce,
                now=datetime.now(UTC),
                trace=trace,
                closing=closing,
                hides=hides,
                taken=self._taken,
                log=log,
                last_turn=last_turn,
            )
            if plan is not None:
                for output in plan.routed.unmatched_outputs:
                    self._warn_if_unwired(output)
            return plan

        def retry_now(plan: ItemsPlan, conflict: ConcurrencyError) -> bool:
            if conflict.stream not in plan.opened:
                return False
            # That subsession exists already: the handoff's call id was used before in
            # this session. Give the receiver a new id and plan again.
            self._taken.add(conflict.stream)
            return True

        async with tree.lock:
            if not tree.loaded:
                await self.reader.load(0)
            plan = await self.writer.write(build, retry_now=retry_now)
            if plan is not None:
                if plan.turns:
                    self._last_user = plan.turns[-1]
                ended = bool(
                    plan.closed or closing is not None or (items and run.finished is not None)
                )
                if landed is not None:
                    landed(plan)
                await self._maybe_checkpoint(
                    force=ended, trace=trace if checkpoint_trace is None else checkpoint_trace
                )
            return plan

    async def pop(self, trace: Mapping[str, str]) -> dict[str, Any] | None:
        """Hide the latest item and return it (``agentjournal.ItemPopped``); None if none."""
        tree = self.tree
        popped: list[Entry] = []

        async def build() -> WritePlan | None:
            await self.reader.refresh(1)
            self._check_live()
            latest = tree.timeline.latest(1)
            if not latest:
                return None
            entry = latest[0]
            popped[:] = [entry]
            data = events.ItemPopped(entry.stream, entry.revision, entry.part, entry.index)
            return await self._control(
                events.ITEM_POPPED, data.encode(), trace, [Pop(entry.key, entry.index)]
            )

        async with tree.lock:
            landed = await self.writer.write(build)
        return popped[0].item() if landed is not None else None

    async def clear(self, trace: Mapping[str, str]) -> None:
        """Hide every item (``agentjournal.SessionCleared``); nothing for no session yet."""
        tree = self.tree

        async def build() -> WritePlan | None:
            await self.reader.refresh(0)
            self._check_live()
            if tree.heads.get(tree.stream, -1) < 0:
                return None
            through = await self.reader.next_index() - 1
            data = events.SessionCleared(through).encode()
            return await self._control(events.SESSION_CLEARED, data, trace, [Clear(through)])

        async with tree.lock:
            await self.writer.write(build)

    async def _control(
        self,
        type_: str,
        data: bytes,
        trace: Mapping[str, str],
        entries: list[Any],
        id_: Any = None,
        *,
        guarded: bool = False,
    ) -> WritePlan:
        """A pop or a clear: one event on the innermost stream. ``guarded``: when that is a
        subagent's stream, an ``agentjournal.LineGuarded`` at the top stream's head too (the
        write then expects it: see :meth:`clear_lines`)."""
        tree = self.tree
        stream = tree.chain[-1].stream if tree.chain else tree.stream
        return plan_control(
            tree,
            self.facts,
            stream,
            type_,
            data,
            next_index=await self.reader.next_index(),
            metadata=trace,
            entries=entries,
            id_=id_,
            guard=uuid.uuid4() if guarded and stream != tree.stream else None,
        )

    # -- branches -----------------------------------------------------------------------

    async def fork(
        self,
        *,
        at: int | None = None,
        turn: int | None = None,
        revision: int | None = None,
        name: str | None = None,
        trace: Mapping[str, str],
        generated: str | None = None,
        used: Callable[[str], str] | None = None,
    ) -> Branch:
        """Fork this line: a new branch that continues it as of a cut (DESIGN §17).

        The cut is before item ``at``, before turn ``turn``'s user message (the
        ``turn``-th user message visible now), or after revision ``revision`` of the
        line's top stream; none of them: after its head. One atomic write
        (:func:`~agentjournal.engine.fork.plan_fork`); nothing is copied. A subagent
        open at the cut continues on the branch in a continuation stream of its own
        (``SubagentContinued``): the branch's runs speak, resume and close inside it
        while the parent line keeps its original.

        Args:
            at: An item's message index.
            turn: A turn number (from 1).
            revision: A revision of the line's top stream.
            name: The branch's name (any non-blank text up to 1,000 characters but
                ``"main"``); default ``fork_{value}_{unix seconds}``, then ``_2``, ``_3``...
            trace: The caller's trace ids.
            generated: The stem of a generated name instead of ``fork_{value}_{unix
                seconds}`` (``AdvancedSQLiteSession``'s ``branch_from_turn_{N}_{secs}``).
            used: The message for a name already used (default ours).

        Raises:
            InvalidInput: More than one cut; no such item, turn or revision; the session
                does not exist; a subagent open at the cut cannot be read; the name is
                refused or has been used in this session.
            StoreError: The fork did not land.
        """
        given = [
            (kind, value) for kind, value in (("index", at), ("turn", turn)) if value is not None
        ]
        if revision is not None:
            given.append(("revision", revision))
        if len(given) > 1:
            raise InvalidInput("fork at one cut: give at most one of at, turn and revision")
        for kind, value in given:
            least = 1 if kind == "turn" else 0
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise InvalidInput(f"a fork's {kind} must be an integer >= {least}, got {value!r}")
        line = self.facts.branch or MAIN_BRANCH
        explicit = branch_stream(self.facts.session_id, name) if name is not None else None
        tree = self.tree
        top = self.facts.stream
        nonce = _NONCES.next()
        async with tree.lock:
            await self.reader.refresh(0)
            self._check_live()
            if tree.heads.get(top, -1) < 0:
                if given and given[0][0] == "turn":  # the SDK's answer on an empty session
                    raise InvalidInput(
                        f"Turn {given[0][1]} does not contain a user message in branch '{line}'"
                    )
                raise InvalidInput(f"{top} does not exist: there is nothing to fork")
            kind, value = given[0] if given else ("revision", tree.heads[top])
            # From the store's read model when it can say exactly (SQLite, current, the
            # cut in the line's own part, no subagent open and no authority log entry at
            # or after it, nothing since the cut hiding an item before it): then the
            # branch's model starts as a copy of the line's. Else the line's events.
            cut_at = await self._cut_from_model(kind, value, line) or await self._cut_from_events(
                kind, value, line
            )
            position, point, lines, copy, read = cut_at
            seen = dict(tree.heads)
            # Every subagent open at the cut continues on the branch (DESIGN §17.3).
            base = tuple(_place(event) for event in (point.base, *point.chain))
            originals = [await self._opened_by(read, event.stream) for event in point.chain]
            prefix = {
                str(event.id)
                for recorded in read.values()
                for event in recorded
                if event.position < position
            }
            authority = await self._log_place(position, lines, prefix)
            cut = events.Cut(kind, value, position)
            store = self._store
            candidates = (
                iter([name])
                if name is not None
                else _generated_names(generated or f"fork_{value}_{_unix_seconds()}")
            )
            chosen: list[str] = [next(candidates)]

            async def build() -> WritePlan:
                # A delete of this line may have landed since (the writer caught up).
                self._check_live()
                while True:
                    stream = explicit or branch_stream(self.facts.session_id, chosen[0])
                    if await store.head(stream) is None:
                        break
                    if name is not None:
                        raise InvalidInput(
                            used(name)
                            if used is not None
                            else f"branch {name!r} has already been used in session "
                            f"{self.facts.session_id}: choose a new name"
                        )
                    chosen[0] = next(candidates)
                registry = await self._registry_head()
                continued = _continuations(self.facts.session_id, stream, point.chain, originals)
                started = events.BranchStarted(
                    session_id=self.facts.session_id,
                    branch=chosen[0],
                    branch_stream=stream,
                    parent=line,
                    cut=cut,
                    base=base,
                    authority=authority,
                    next_index=point.next_index,
                    prefix_items=point.prefix_items,
                    continuations={
                        event.stream: continuation.subsession_stream
                        for event, continuation in zip(point.chain, continued, strict=True)
                    },
                )
                # The copy only if the line is still where the model was read (a retry
                # after another writer moved it plans none: the branch reads its events).
                still = copy is not None and tree.heads == seen
                return plan_fork(
                    tree,
                    self.facts,
                    started,
                    next_index=await self.reader.next_index(),
                    registry=registry,
                    nonce=nonce,
                    trace=trace,
                    continued=continued,
                    copy=copy if still else None,
                )

            landed = await self.writer.write(build)
            assert landed is not None
            stream = landed.requests[1].stream
            first = await store.read(stream, limit=1)
            if self.signing_key is not None:
                # Sign the fork at once, the branch's first event and each continuation's
                # with it (requests 1 and 3...: the registry's is 2): nothing else covers
                # them until the branch is written to (DESIGN §17.3).
                await self._maybe_checkpoint(
                    force=True,
                    trace=trace,
                    extra={
                        request.stream: (0, request.events[0].metadata.get(HASH_KEY, ""))
                        for request in (landed.requests[1], *landed.requests[3:])
                    },
                )
        return Branch(
            name=chosen[0],
            stream=stream,
            parent=line,
            cut=cut,
            next_index=point.next_index,
            prefix_items=point.prefix_items,
            created=first[0].recorded_at,
        )

    async def _head_position(
        self, read: Mapping[str, Sequence[RecordedEvent]], position: int
    ) -> int:
        """Just after the line's newest event: its streams' (as read) and its own authority
        log's (at least ``position``)."""
        newest = [event.position for recorded in read.values() for event in recorded[-1:]]
        try:
            log = await self._store.read(self.facts.authority_stream, backwards=True, limit=1)
        except StreamNotFound:
            log = []
        newest.extend(event.position for event in log)
        return max([position - 1, *newest]) + 1

    async def _opened_by(
        self, read: Mapping[str, Sequence[RecordedEvent]], stream: str
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
                first = await self._store.read(stream, from_revision=0, limit=1)
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

    async def _cut_from_events(self, kind: str, value: int, line: str) -> _CutAt:
        """The cut, read from the line's events: each segment read once and decoded once
        (the turn's user message and the items visible at the cut from the same fold)."""
        top = self.facts.stream
        read = dict(await self.reader.line_events())
        lines = _line_tops(read, top)
        decoded = decode_line((e for stream in read.values() for e in stream), top)
        if kind == "turn":
            position = turn_position(read, decoded, top, value, line)
        else:
            position = cut_position(read, top, kind, value)
            if kind == "revision" and value == self.tree.heads[top]:
                # At the head: as of the line's newest event. Open subagents write after
                # the top stream's last event, and a write's authority log entries follow
                # its tree's events: all of them are the line's now.
                position = await self._head_position(read, position)
        point = fork_point(read, top, position, below=[t for t, _ in lines[1:]], decoded=decoded)
        return position, point, lines, None, read

    async def _cut_from_model(self, kind: str, value: int, line: str) -> _CutAt | None:
        """The cut, read from the store's read model of the line (None: it cannot say
        exactly, then :meth:`_cut_from_events` reads it).

        The model holds the items visible now, each at its event's place: the cut is
        that event's position (a turn's user message, an item, or a revision of the top
        stream). Its rows below the cut's next index are the items visible at the cut
        unless an event of the line at or after the cut hides one of them, so those
        events are read (types and indexes only, :func:`next_index_since`); the branch's
        model then starts as a copy of those rows (:class:`ModelCopy`, in the fork's own
        write). O(the line's events since the cut) instead of O(its history).
        """
        store = self._store
        tree = self.tree
        top = self.facts.stream
        snapshot = await self.reader.model_at_heads()
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
                        f"Turn {value} does not contain a user message in branch '{line}'"
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
        if await self._log_at_or_after(position):
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
        next_index = next_index_of_rows(rows, before, await self.reader.next_index())
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
        return position, point, await self._line_tops_read(), copy, {}

    async def _log_at_or_after(self, position: int) -> bool:
        """Whether the line's own authority log has an entry at or after ``position``."""
        try:
            last = await self._store.read(self.facts.authority_stream, backwards=True, limit=1)
        except StreamNotFound:
            return False
        return bool(last) and last[0].position >= position

    async def _line_tops_read(self) -> list[tuple[str, RecordedEvent | None]]:
        """The line's top streams and their first events (:func:`_line_tops`), read."""
        tops: list[tuple[str, RecordedEvent | None]] = []
        stream: str | None = self.facts.stream
        while stream is not None and all(stream != seen for seen, _ in tops):
            try:
                found = await self._store.read(stream, from_revision=0, limit=1)
            except StreamNotFound:
                found = []
            first = found[0] if found and found[0].revision == 0 else None
            tops.append((stream, first))
            below = continued_from(first) if first is not None else None
            stream = below.stream if below is not None else None
        return tops

    async def branches(self) -> list[Branch]:
        """Every branch of the session, in the order they were forked (deleted ones too)."""
        return await read_branches(self._store, self.facts.session_id)

    # -- branches: the end of a line, clearing every line, usage (DESIGN §17, steps 5-6) --

    def _check_live(self) -> None:
        """Refuse to act on a line that was deleted or cleared (under the tree's lock).

        Raises:
            BranchDeleted: ``agentjournal.BranchDeleted`` is on the line's top stream.
        """
        if self.tree.deleted is not None:
            raise BranchDeleted(
                self.facts.session_id, self.facts.branch or MAIN_BRANCH, self.tree.deleted
            )

    async def ended(self) -> str | None:
        """Catch the line up; ``"deleted"`` or ``"cleared"`` once it ended, else None.

        Raises:
            InvalidInput: The branch was never forked.
        """
        async with self.tree.lock:
            await self.reader.refresh(0)
            return self.tree.deleted

    async def delete_line(self, parent: str, trace: Mapping[str, str]) -> None:
        """End this branch line: ``agentjournal.BranchDeleted`` (reason ``deleted``) at its
        top stream's head and ``agentjournal.BranchRemoved`` on the registry, one atomic
        write, which first closes every subagent open on the line ``cancelled``
        (:func:`_plan_closes`). It folds as a clear of every item; nothing is written to the
        line again.

        Raises:
            BranchDeleted: It was deleted or cleared already.
            StoreError: It did not land.
        """
        facts = self.facts
        assert facts.branch is not None, "the main line is never deleted"
        tree = self.tree
        nonce = _NONCES.next()

        async def build() -> WritePlan:
            await self.reader.refresh(0)
            self._check_live()
            next_index = await self.reader.next_index()
            # The subagents open on the line close ``cancelled`` in the same write: nothing
            # reads the line again, and a subsession left open would read as a handoff
            # that never ended.
            close = _plan_closes(
                tree,
                facts,
                next_index=next_index,
                nonce=nonce,
                end=line_end_id(facts.session_id, nonce, 0),
                reason="deleted",
                trace=trace,
            )
            closed = close.commit if close is not None else Commit(heads={}, hashes={})
            head = LineHead(
                facts.branch or MAIN_BRANCH,
                tree.stream,
                parent,
                closed.heads.get(tree.stream, tree.heads[tree.stream]),
                closed.hashes.get(tree.stream, tree.hashes.get(tree.stream, "")),
                next_index,
            )
            requests, hashes = plan_line_ends(
                facts.session_id,
                [head],
                reason="deleted",
                registry=await self._registry_head(),
                nonce=nonce,
                trace=trace,
                closes=None if close is None else {tree.stream: close},
            )
            commit = Commit(
                heads={**closed.heads, tree.stream: head.revision + 1},
                hashes={**closed.hashes, tree.stream: hashes[tree.stream]},
                entries=[Clear(head.next_index - 1)],
                written=sum(len(request.events) for request in requests),
                chain=None if close is None else [],
            )
            return WritePlan(
                requests,
                commit,
                foreign=frozenset(r.stream for r in requests if r.stream != tree.stream),
            )

        async with tree.lock:
            if not tree.loaded:
                await self.reader.load(0)
            await self.writer.write(build)
            # Signed at once, the BranchDeleted and the registry's entry: no later write on
            # this line would cover them (DESIGN §17.3).
            await self._maybe_checkpoint(force=True, trace=trace)
            tree.ended("deleted")

    async def clear_lines(self, trace: Mapping[str, str]) -> None:
        """Clear the session on every line, in one atomic write: ``SessionCleared`` on this
        (the main) line as :meth:`clear` writes it, ``agentjournal.BranchDeleted`` (reason
        ``cleared``) on each live branch at its exact head, after the closes (``cancelled``)
        of the subagents open on it (:meth:`_line_closes`), and their
        ``agentjournal.BranchRemoved`` registry entries. The branches are read as each plan
        is built; a racing write on any of those streams (a fork adds to the registry)
        conflicts and the whole clear is planned again, with them. Main's own open subagent
        stays open (the line goes on: the next run closes it).
        """
        tree = self.tree
        session_id = self.facts.session_id
        nonces: list[str] = []

        async def build() -> WritePlan | None:
            await self.reader.refresh(0)
            lines = [branch for branch in await self.branches() if branch.deleted is None]
            # Drawn only when a branch ends (once: a retry keeps its ids): a session without
            # branches uses up no nonce, so its later writes' ids stay what they were before
            # branches (tests/data/write_bytes.json).
            if lines and not nonces:
                nonces.append(_NONCES.next())
            nonce = nonces[0] if nonces else ""
            heads = [
                head
                for head in [await _line_head(self._store, line) for line in lines]
                if head is not None
            ]
            # Each line with a subagent open closes it ``cancelled`` in this same write, at
            # the revisions its own tree reads (a racing write conflicts: all is planned again).
            closes: dict[str, WritePlan] = {}
            for n, head in enumerate(heads):
                if head.open is None:
                    continue
                ended_head, close = await self._line_closes(head, nonce, n, trace)
                heads[n] = ended_head
                if close is not None:
                    closes[head.stream] = close
            if tree.heads.get(tree.stream, -1) < 0:
                return None  # no session yet: no branch either
            through = await self.reader.next_index() - 1
            cleared = events.SessionCleared(through).encode()
            # The main line's clear is planned as a clear alone is (a random id, as before
            # branches: a session without branches writes the same bytes as it did). With a
            # subagent open it lands on the subagent's stream, which a fork of main does not
            # touch (its BranchForked goes on main's top stream, its entry in the registry,
            # which this write touches only when a branch ends): a guard at main's head makes
            # such a fork conflict, so the clear plans again and ends the new branch too.
            # (KurrentDB refuses a stream without events in a multi-stream append: the
            # expectation needs an event. Forks of a branch write at that branch's head,
            # which the clear ends when live; a branch that is not live cannot fork.)
            own = await self._control(
                events.SESSION_CLEARED, cleared, trace, [Clear(through)], guarded=True
            )
            ends, hashes = plan_line_ends(
                session_id,
                heads,
                reason="cleared",
                registry=await self._registry_head(),
                nonce=nonce,
                trace=trace,
                closes=closes,
            )
            ended.clear()
            ended.update({head.stream: (head.revision + 1, hashes[head.stream]) for head in heads})
            ended_names[:] = [head.name for head in heads]
            return WritePlan(
                [*own.requests, *ends],
                own.commit,
                foreign=frozenset(request.stream for request in ends),
            )

        ended: dict[str, tuple[int, str]] = {}
        ended_names: list[str] = []
        async with tree.lock:
            if await self.writer.write(build) is not None:
                # Signed at once, each ended branch's BranchDeleted with main's clear, and
                # each ended line's authority log (a reset there is unsigned till now): no
                # later write on those lines would cover them (DESIGN §17.3).
                if self.signing_key is not None:
                    ended.update(await self._log_heads(ended_names))
                await self._maybe_checkpoint(force=True, trace=trace, extra=ended)

    async def _log_heads(self, names: Sequence[str]) -> dict[str, tuple[int, str]]:
        """The heads (revision, ``aj.hash``) of the named branch lines' authority logs, for
        those that have one. Read after the lines ended: nothing writes on them again."""
        found: dict[str, tuple[int, str]] = {}
        for name in names:
            log = branch_authority_stream(self.facts.session_id, name)
            try:
                tail = await self._store.read(log, backwards=True, limit=1)
            except StreamNotFound:
                continue
            if tail:
                found[log] = (tail[0].revision, tail[0].metadata.get(HASH_KEY, ""))
        return found

    async def _line_closes(
        self, head: LineHead, nonce: str, n: int, trace: Mapping[str, str]
    ) -> tuple[LineHead, WritePlan | None]:
        """For a clear: the closes of the subagents open on another branch line (read into a
        tree of its own, as a session on that line reads it), and the line's head after
        them, where its ``BranchDeleted`` goes (the ``n``-th line this clear ends)."""
        session_id = self.facts.session_id
        facts = SessionFacts(session_id, head.stream, branch=head.name)
        tree = SessionTree(head.stream)
        reader = Reader(
            self._store,
            tree,
            session_id,
            use_model=False,
            branch=head.name,
            authority=facts.authority_stream,
        )
        await reader.load(0)
        # Everything of this line from this one read: a write that landed since the head
        # was read moves its revisions and next index together (the plan stays exact).
        next_index = await reader.next_index()
        close = _plan_closes(
            tree,
            facts,
            next_index=next_index,
            nonce=nonce,
            end=line_end_id(session_id, nonce, n),
            reason="cleared",
            trace=trace,
        )
        if close is None:
            return head, None
        after = LineHead(
            head.name,
            head.stream,
            head.parent,
            close.commit.heads[head.stream],
            close.commit.hashes[head.stream],
            next_index,
        )
        return after, close

    async def book_usage(
        self, counts: Mapping[str, Any], trace: Mapping[str, str]
    ) -> events.TurnUsage | None:
        """Book a run's usage on the line's current turn (``agentjournal.TurnUsage`` on the
        top stream) with the turn's first item as its anchor; None (nothing written) when
        the line has no visible item or has ended.

        ``counts``: ``requests``, ``input_tokens``, ``output_tokens``, ``total_tokens``,
        ``input_tokens_details``, ``output_tokens_details`` (the SDK's JSON text or None).
        The id derives from a nonce of this call: a retry after an unknown outcome is
        recognised, not booked twice.
        """
        tree = self.tree
        nonce = _NONCES.next()
        booked: list[events.TurnUsage] = []

        async def build() -> WritePlan | None:
            await self.reader.refresh(0)
            if tree.deleted is not None:
                return None
            visible = await self.reader.visible()
            joined = self._joined(visible, await self.reader.line_events())
            numbered = turns.number(turned for _, turned in joined)
            if not numbered:
                return None  # no item, no turn (the SDK skips it too)
            # The newest item's turn; 0 when no user message is visible yet (booked on
            # turn 0 like the SDK, whose rows before the first user message are turn 0).
            current = numbered[-1][0]
            first = next(
                entry
                for (entry, _), (turn, _) in zip(joined, numbered, strict=True)
                if turn == current
            )
            usage = events.TurnUsage(
                branch=self.facts.branch or MAIN_BRANCH,
                turn=current,
                anchor=events.ItemPlace(first.stream, first.revision, first.part),
                requests=int(counts["requests"]),
                input_tokens=int(counts["input_tokens"]),
                output_tokens=int(counts["output_tokens"]),
                total_tokens=int(counts["total_tokens"]),
                input_tokens_details=counts["input_tokens_details"],
                output_tokens_details=counts["output_tokens_details"],
            )
            booked[:] = [usage]
            return plan_control(
                tree,
                self.facts,
                tree.stream,
                events.TURN_USAGE,
                usage.encode(),
                next_index=await self.reader.next_index(),
                metadata={
                    k: v for k, v in trace.items() if k in (events.TRACE_ID_KEY, events.SPAN_ID_KEY)
                },
                id_=event_id(tree.stream, nonce, "usage", 0),
            )

        async with tree.lock:
            landed = await self.writer.write(build)
        return booked[0] if landed is not None and booked else None

    async def turn_usage(self) -> dict[int, events.TurnUsage]:
        """The usage booked on each turn of this line: its own ``TurnUsage`` events (not its
        prefix's: a branch starts with none), the newest per turn, each counted only while
        its anchor is still visible (a pop of the turn, a clear or a delete un-books it)."""
        async with self.tree.lock:
            await self.reader.refresh(0)
            self._check_live()
            visible = {entry.key for entry in await self.reader.visible()}
            read = await self.reader.line_events()
        booked: dict[int, events.TurnUsage] = {}
        for stream, recorded in read:
            if stream != self.tree.stream:
                continue
            for event in sorted(recorded, key=lambda event: event.revision):
                if event.type != events.TURN_USAGE:
                    continue
                try:
                    usage = events.TurnUsage.decode(event.data)
                except CodecError as error:
                    logger.warning(
                        "skipping unreadable usage at %s@%d: %s", stream, event.revision, error
                    )
                    continue
                anchor = usage.anchor
                if (anchor.stream, anchor.revision, anchor.part) in visible:
                    booked[usage.turn] = usage
        return dict(sorted(booked.items()))

    async def started_at(self) -> datetime | None:
        """When the line's top stream was first written (None: not yet)."""
        try:
            first = await self._store.read(self.facts.stream, limit=1)
        except StreamNotFound:
            return None
        return first[0].recorded_at if first else None

    async def items_count(self) -> tuple[int, int]:
        """How many items are visible on the line, and how many of them are user messages."""
        async with self.tree.lock:
            await self.reader.refresh(0)
            self._check_live()
            visible = await self.reader.visible()
        return len(visible), sum(1 for entry in visible if is_user(entry.item()))

    async def _last_turn(self, hides: Sequence[Entry | Clear]) -> int:
        """The turn of the newest user message visible once ``hides`` are hidden (0: none).

        Read backwards in growing windows to that message; its event's ``aj.turn`` is the
        answer (no read when this object wrote it). A message written before ``aj.turn``
        existed is numbered as :func:`~agentjournal.engine.turns.number` numbers it, from
        the line's events: once, since the write that follows records the number.
        """
        hidden = {hide.key for hide in hides if isinstance(hide, Entry)}
        floor = max((hide.through_index for hide in hides if isinstance(hide, Clear)), default=-1)
        size = 16
        while True:
            # As of the heads the plan is built on: a catch-up here would move the tree
            # past the next index already taken (two processes then share an index).
            await self.reader.cover(size)
            timeline = self.tree.timeline
            window = timeline.latest(size)
            for entry in reversed(window):
                if entry.key in hidden or 0 <= entry.index <= floor:
                    continue
                if is_user(entry.item()):
                    return await self._turn_of(entry, hidden, floor)
            if timeline.complete or len(window) < size:
                return 0
            size *= 4

    async def _turn_of(self, entry: Entry, hidden: set[Key], floor: int) -> int:
        if self._last_user is not None and self._last_user[0] == entry.key:
            return self._last_user[1]
        recorded = await self._store.read(entry.stream, from_revision=entry.revision, limit=1)
        if recorded and recorded[0].revision == entry.revision:
            turn = events.turn_of(recorded[0].metadata)
            if turn is not None:
                return turn
        # Written before aj.turn: count as the reads do, over what stays visible.
        size = 16
        while not self.tree.timeline.complete:  # every visible item, as of the same heads
            size = max(size * 4, len(self.tree.timeline) + 1)
            await self.reader.cover(size)
        kept = [
            turned
            for shown, turned in self._joined(
                self.tree.timeline.latest(None), await self.reader.line_events()
            )
            if shown.key not in hidden and not 0 <= shown.index <= floor
        ]
        numbered = turns.number(kept)
        return numbered[-1][0] if numbered else 0

    async def turned(self) -> list[Turned]:
        """Every visible item of the line, oldest first, with its event's ``aj.turn`` and
        time (what :mod:`agentjournal.engine.turns` numbers and reports).

        O(the line's history): the visible items, then the line's events for their
        metadata. The SDK's turn reads scan their rows too (DESIGN §17, "Left open").
        """
        async with self.tree.lock:
            await self.reader.refresh(0)
            self._check_live()
            visible = await self.reader.visible()
            read = await self.reader.line_events()
        return [turned for _, turned in self._joined(visible, read)]

    @staticmethod
    def _joined(
        visible: list[Entry], read: list[tuple[str, list[RecordedEvent]]]
    ) -> list[tuple[Entry, Turned]]:
        """Each visible item with its event's ``aj.turn`` and time."""
        found: dict[tuple[str, int], RecordedEvent] = {
            (stream, event.revision): event for stream, recorded in read for event in recorded
        }
        turned: list[tuple[Entry, Turned]] = []
        for entry in visible:
            event = found.get((entry.stream, entry.revision))
            turned.append(
                (
                    entry,
                    Turned(
                        entry.item(),
                        None if event is None else events.turn_of(event.metadata),
                        None if event is None else event.recorded_at,
                    ),
                )
            )
        return turned

    async def _log_place(
        self,
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
        store = self._store
        session_id = self.facts.session_id
        for _, first in lines:
            started = _started(first)
            if started is not None and first is not None and position <= first.position:
                continue  # the cut is in this line's prefix: the line below decides
            stream = (
                authority_stream(session_id)
                if started is None
                else branch_authority_stream(session_id, started.branch)
            )
            revision = await self._through_prefix(
                stream, await revision_at(store, stream, position), prefix
            )
            if revision >= 0:
                (event,) = await store.read(stream, from_revision=revision, limit=1)
                return events.StreamPlace(stream, revision, event.metadata.get(HASH_KEY, ""))
            return None if started is None else started.authority
        return None

    async def _through_prefix(
        self, stream: str, revision: int, prefix: set[str] | frozenset[str]
    ) -> int:
        """``revision`` of an authority log, moved on over the entries after it that record
        grants made by events in ``prefix`` (and the ``PolicyRecorded`` written with them)."""
        pending, start = revision, revision + 1
        while True:
            try:
                page = await self._store.read(stream, from_revision=start, limit=16)
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

    async def _registry_head(self) -> tuple[int, str]:
        try:
            tail = await self._store.read(
                branches_stream(self.facts.session_id), backwards=True, limit=1
            )
        except StreamNotFound:
            tail = []
        return (tail[0].revision, tail[0].metadata.get(HASH_KEY, "")) if tail else (-1, "")

    # -- decisions, refusals, grants ---------------------------------------------------

    async def record(
        self,
        type_: str,
        data: bytes,
        *,
        agent: str,
        run: RunView,
        metadata: Mapping[str, str],
        held: tuple[str, Any] | None = None,
    ) -> None:
        """Append a decision, refusal or grant to the stream of the agent acting in ``run``.

        That is the innermost open subsession when this run wrote inside it or
        ``agent`` is its agent (a resumed run), else the session stream (a new
        run's first agent speaks there). ``held`` (agent, authority JSON) adds the
        grant's entry to the authority log in the same transaction, and the run's
        model responses not yet written go first in it. With
        ``record_payloads`` off, a decision or refusal is written as its redacted
        view (``aj.viewed``).

        Raises:
            StoreError: It did not land.
        """
        tree = self.tree
        extra = dict(metadata)
        if not self.facts.record_payloads:
            shown = redaction.view(type_, data, extra)
            if shown is not None:
                data = json.dumps(shown, ensure_ascii=False, separators=(",", ":")).encode()
                extra[events.VIEWED_KEY] = "1"

        async def build() -> WritePlan:
            self._check_live()
            inner = tree.chain and (
                run.same_run(tree.chain_run) or tree.chain[-1].agent_name == agent
            )
            stream = tree.chain[-1].stream if inner else tree.stream
            log = await self.reader.authority_log() if held is not None else None
            return plan_control(
                tree,
                self.facts,
                stream,
                type_,
                data,
                next_index=await self.reader.next_index(),
                metadata=extra,
                held=held,
                log=log,
                run=run,
            )

        async with tree.lock:
            if not tree.loaded:
                await self.reader.load(0)
            await self.writer.write(build)

    async def record_grant(
        self, agent: str, authority: Authority, run: RunView, trace: Mapping[str, str]
    ) -> None:
        """Append ``agentjournal.AuthorityGranted`` (what a run's first agent holds) and its
        entry on the authority log, in one transaction."""
        await self.record(
            events.AUTHORITY_GRANTED,
            run_grant(agent, authority),
            agent=agent,
            run=run,
            metadata=trace,
            held=(agent, authority.to_json()),
        )

    async def reset_authority(self, agent: str, reason: str, trace: Mapping[str, str]) -> None:
        """Record ``agentjournal.AuthorityReset``: ``agent``'s next run starts from its policy
        entry again.

        Raises:
            InvalidInput: The session has no policy, or ``reason`` is empty.
        """
        policy = self.facts.policy
        if policy is None:
            raise InvalidInput(
                f"{self.facts.session_id!r} has no policy: there is no authority to reset"
            )
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("reset_authority needs a reason (it is recorded for auditors)")

        branch = self.facts.branch is not None

        async def build() -> WritePlan:
            guard: tuple[SessionTree, int, uuid.UUID] | None = None
            if branch:
                # A deleted branch acts no more: nothing to reset (its writes are refused
                # too). Checked in every plan, and the write expects the line's head (a
                # guard there: the log's append alone does not), so an end landing between
                # this check and the write conflicts, and the next plan refuses. Main is
                # never deleted, so its reset reads no history and needs no guard.
                await self.reader.refresh(0)
                self._check_live()
                guard = (self.tree, await self.reader.next_index(), uuid.uuid4())
            log = await self.reader.authority_log(fresh=True)
            held = {name: value for name, value in log.held.items() if name != agent}
            reset = events.AuthorityReset(agent, reason, policy.digest, held)
            return plan_log(
                self.facts,
                log,
                [(events.AUTHORITY_RESET, reset.encode())],
                held,
                trace,
                guard=guard,
            )

        async with self.tree.lock:
            await self.writer.write(build)
        logger.info("authority of %r reset in %s: %s", agent, self.facts.session_id, reason)

    # -- checkpoints --------------------------------------------------------------------

    async def checkpoint(
        self, trace: Mapping[str, str], *, extra: Mapping[str, tuple[int, str]] | None = None
    ) -> Checkpoint | None:
        """Sign the heads of the session tree now, and ``extra`` (heads of streams this
        object does not follow, e.g. every other line's as ``bundle export`` read them);
        None without a key.

        Raises:
            StoreError: The checkpoint could not be written.
        """
        if self.signing_key is None:
            return None
        async with self.tree.lock:
            await self.reader.refresh(0)
            return await self._write_checkpoint(trace, extra=extra)

    async def _maybe_checkpoint(
        self,
        *,
        force: bool,
        trace: Mapping[str, str],
        extra: Mapping[str, tuple[int, str]] | None = None,
    ) -> None:
        """Checkpoint at the end of a run or after enough events (under the tree lock)."""
        if self.signing_key is None or not (force or self.tree.unsigned >= self._checkpoint_every):
            return
        try:
            await self._write_checkpoint(trace, extra=extra)
        except Exception:  # the write it follows has landed; the next checkpoint covers it
            logger.exception("could not write a checkpoint of %s", self.tree.stream)

    async def _write_checkpoint(
        self, trace: Mapping[str, str], *, extra: Mapping[str, tuple[int, str]] | None = None
    ) -> Checkpoint | None:
        """Sign the heads this object knows: its line's followed streams, the line's
        authority log, the session's branch registry (when there is one) and ``extra``
        (a fork's new branch stream; every line's heads as ``bundle export`` read them),
        the newer head of a stream in both."""
        tree = self.tree
        key = self.signing_key
        assert key is not None
        await self.reader.catch_up()  # sign the heads as they are now, not as last seen
        signed: list[Checkpoint] = []

        async def build() -> WritePlan | None:
            heads = {
                stream: (revision, tree.hashes.get(stream, ""))
                for stream, revision in tree.heads.items()
                if revision >= 0
            }
            log = await self.reader.authority_log(fresh=True)
            if log.revision >= 0:
                heads[self.facts.authority_stream] = (log.revision, log.hash)
            registry = await self._registry_head()
            if registry[0] >= 0:
                heads[branches_stream(self.facts.session_id)] = registry
            for stream, head in (extra or {}).items():
                # An older read of a stream this object follows must not lower its head.
                if head[0] > heads.get(stream, (-1, ""))[0]:
                    heads[stream] = head
            if not heads:
                return None
            plan, checkpoint = plan_checkpoint(
                self.facts.session_id,
                key,
                heads,
                await self.reader.ledger_head(),
                now=datetime.now(UTC),
                trace={
                    k: v for k, v in trace.items() if k in (events.TRACE_ID_KEY, events.SPAN_ID_KEY)
                },
            )
            signed[:] = [checkpoint]
            return plan

        landed = await self.writer.write(build)
        return signed[0] if landed is not None else None

    # -- compaction -----------------------------------------------------------------------

    async def snapshot(self, limit: int) -> Snapshot:
        """The newest ``limit`` visible items, as a compaction reads them."""
        tree = self.tree
        async with tree.lock:
            await self.reader.refresh(max(limit, 0) + 1)
            window = tree.timeline.latest(max(limit, 0) + 1)
            complete = len(window) <= limit
            read = window[max(len(window) - limit, 0) :] if limit > 0 else []
            return Snapshot(
                [entry.item() for entry in read],
                complete,
                [(entry.key, entry.item_json) for entry in read],
            )

    async def replace_suffix(
        self,
        expected: list[tuple[Key, str]],
        output: list[Any],
        prune_prefix: Callable[[Any], bool] | None,
        *,
        trace: Mapping[str, str],
        speaker: str | None = None,
    ) -> bool:
        """Hide the items ``expected`` (and, with ``prune_prefix``, the oldest visible items
        before them it accepts) and append ``output``, in one atomic write, only if they
        are still the newest visible items; False (nothing written) otherwise."""

        async def hiding() -> list[Entry | Clear]:
            return await self._suffix_to_hide(expected, prune_prefix)

        try:
            await self.add(output, _NoRun(speaker), trace=trace, hiding=hiding)
        except HistoryChanged:
            return False
        return True

    async def replace_all(
        self, items: list[Any], *, trace: Mapping[str, str], speaker: str | None = None
    ) -> None:
        """Replace the whole visible history with ``items`` in one atomic write (``speaker``
        authors its assistant items)."""

        async def hiding() -> list[Entry | Clear]:
            await self.reader.refresh(0)
            if self.tree.heads.get(self.tree.stream, -1) < 0:
                return []  # no session yet: nothing to clear
            return [Clear(await self.reader.next_index() - 1)]

        await self.add(items, _NoRun(speaker), trace=trace, hiding=hiding)

    async def _suffix_to_hide(
        self,
        expected: list[tuple[Key, str]],
        prune_prefix: Callable[[Any], bool] | None,
    ) -> list[Entry | Clear]:
        """What a snapshot's replacement hides, read now (under the tree's lock).

        Raises:
            HistoryChanged: The newest visible items are no longer ``expected``.
        """
        tree = self.tree
        if prune_prefix is None:
            await self.reader.refresh(len(expected))
            visible = tree.timeline.latest(len(expected))
        else:
            visible = await self.reader.visible()
        if len(visible) < len(expected):
            raise HistoryChanged
        suffix = visible[len(visible) - len(expected) :]
        if [(entry.key, entry.item_json) for entry in suffix] != expected:
            raise HistoryChanged
        prefix: list[Entry] = []
        if prune_prefix is not None:
            for entry in visible[: len(visible) - len(expected)]:
                if not prune_prefix(entry.item()):
                    break
                prefix.append(entry)
        hidden: list[Entry | Clear] = [*prefix, *suffix]
        whole = tree.timeline.complete and len(hidden) == len(tree.timeline.entries)
        if whole and all(entry.index >= 0 for entry in [*prefix, *suffix]):
            # Everything goes: one clear instead of a pop per item, and later reads stop there.
            return [Clear(await self.reader.next_index() - 1)]
        return hidden

    # -- helpers ----------------------------------------------------------------------------

    def _warn_if_unwired(self, item: Mapping[str, Any]) -> None:
        """Warn once when a handoff's output arrives without the hooks having seen it."""
        if self._warned_unwired:
            return
        self._warned_unwired = True
        logger.warning(
            "a handoff (%s) reached %s without the hooks: pass the session as hooks= too "
            "(Runner.run(..., session=s, hooks=s)) to record it as a subagent; it is stored "
            "as an ordinary tool call",
            item.get("output"),
            self.tree.stream,
        )
