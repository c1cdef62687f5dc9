"""A journal session line without the Agents SDK: :class:`SessionCore`, the façade over one
line's reads and writes, and :func:`open_line`, the one place a line is assembled.

:class:`SessionCore` is what :class:`~agentjournal.sdk.session.JournalSession`
delegates to. Items are plain dicts; what only a run knows (who speaks, which
call is a handoff, what a handoff granted) arrives as a
:class:`~agentjournal.engine.plan.RunView`, and trace ids as metadata. Every
operation takes the tree's lock, reads through its
:class:`~agentjournal.engine.reader.Reader` and writes through its
:class:`~agentjournal.engine.writer.Writer`. The reads are here; each kind of write
lives in a module of its own (:mod:`~agentjournal.engine.items`,
:mod:`~agentjournal.engine.lines`, :mod:`~agentjournal.engine.usage`,
:mod:`~agentjournal.engine.grants`, :mod:`~agentjournal.engine.checkpoints`,
:mod:`~agentjournal.engine.compaction`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from agentjournal import events
from agentjournal._gc import no_collection
from agentjournal.authority import Authority, Policy
from agentjournal.engine import approvals as approving
from agentjournal.engine import compaction, grants, items, lines, turns, usage
from agentjournal.engine.checkpoints import DEFAULT_CHECKPOINT_EVERY, Checkpoints
from agentjournal.engine.compaction import Snapshot
from agentjournal.engine.fork import Branch, read_branches, read_types
from agentjournal.engine.items import ItemWrites
from agentjournal.engine.line import Line
from agentjournal.engine.plan import ItemsPlan, RunView, SessionFacts
from agentjournal.engine.timeline import Clear, Entry, Key
from agentjournal.engine.tree import SessionTree
from agentjournal.engine.turns import Turned, is_user
from agentjournal.errors import InvalidInput, StreamNotFound
from agentjournal.ledger.checkpoints import Checkpoint
from agentjournal.ledger.keys import SigningKey
from agentjournal.shred.sealing import SubjectSealer
from agentjournal.streams import branch_stream, session_stream

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

logger = logging.getLogger("agentjournal.engine")

_SMALL_ANSWER: Final = 256  # items a read hands out with the collector as it is


def open_line(
    store: Any,
    session_id: str,
    *,
    branch: str | None = None,
    stream: str | None = None,
    tree: SessionTree | None = None,
    signing_key: SigningKey | None = None,
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    use_model: bool = True,
    app_name: str | None = None,
    user_id: str | None = None,
    agent_name: str | None = None,
    policy: Policy | None = None,
    guarded: bool = False,
    record_payloads: bool = True,
    sealer: SubjectSealer | None = None,
) -> SessionCore:
    """The reads and writes of one line of a session: main (``branch`` None) or a branch.

    Args:
        store: The event store.
        session_id: The session.
        branch: The branch (None: the main line).
        stream: The line's top stream as recorded (a branch's registry entry); default
            the session's stream, or the branch's by its name.
        tree: What is known of the line's streams, when shared with other objects on the
            line; default a fresh one.
        signing_key: Signs checkpoints; without one none are written.
        checkpoint_every: Events written between two checkpoints (at least 1).
        use_model: Whether a cold read may answer from the store's read model (False:
            from the events, as a tool that shows the record reads).
        app_name: Recorded on ``SessionStarted``.
        user_id: Recorded on ``SessionStarted``.
        agent_name: Recorded on ``SessionStarted``.
        policy: The authority policy, if any.
        guarded: Whether a guardrail checks the session's calls.
        record_payloads: Whether decisions and refusals keep what they judged.
        sealer: Seals the line's content under its subject's key (``store`` must then
            open what it reads: :meth:`~agentjournal.shred.sealing.SubjectSealer.opening`).

    Raises:
        InvalidInput: ``checkpoint_every`` is below 1.
    """
    if stream is None:
        stream = session_stream(session_id) if branch is None else branch_stream(session_id, branch)
    facts = SessionFacts(
        session_id,
        stream,
        app_name=app_name,
        user_id=user_id,
        agent_name=agent_name,
        policy=policy,
        guarded=guarded,
        record_payloads=record_payloads,
        branch=branch,
        sealer=sealer,
    )
    return SessionCore(
        store,
        facts,
        SessionTree(stream) if tree is None else tree,
        signing_key=signing_key,
        checkpoint_every=checkpoint_every,
        use_model=use_model,
    )


class SessionCore:
    """One session line's reads and writes (see the module docs); :func:`open_line` makes one.

    Args:
        store: The event store.
        facts: What the session adds to every write.
        tree: What is known of the session's streams (shared per session id).
        signing_key: Signs checkpoints; without one none are written.
        checkpoint_every: Events written between two checkpoints (at least 1).
        use_model: Whether a cold read may answer from the store's read model.
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
        line = Line.of(store, facts, tree, use_model=use_model)
        self._checkpoints = Checkpoints(line, signing_key, checkpoint_every)
        self._line = line
        self._writes = ItemWrites(line, self._checkpoints)
        self.facts = facts
        self.tree = tree
        self.reader = line.reader
        self.writer = line.writer
        # What :meth:`cleared_since_end` learned: the end's global position, the
        # session stream's clears read so far, and whether one came after the end.
        self._end_position: int | None = None
        self._clears_read = -1
        self._cleared_since_end = False

    @property
    def signing_key(self) -> SigningKey | None:
        """The key that signs this line's checkpoints (None: none are written)."""
        return self._checkpoints.key

    # -- reads ------------------------------------------------------------------------

    async def items(self, limit: int | None) -> list[dict[str, Any]]:
        """The newest ``limit`` visible items (every one for None), oldest first, fresh."""
        async with self.tree.lock:
            await self.reader.refresh(limit)
            self._line.check_live()
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

    async def ended(self) -> str | None:
        """Catch the line up; ``"deleted"`` or ``"cleared"`` once it ended, else None.

        Raises:
            InvalidInput: The branch was never forked.
        """
        async with self.tree.lock:
            await self.reader.refresh(0)
            return self.tree.deleted

    async def cleared_since_end(self) -> bool:
        """Whether the session's stream holds a clear after this branch line's end.

        An object left on a deleted branch moves to main at a later clear, as the SDK's
        does (its clear starts a new generation of every object's pointer). That clear
        does not end the line again, so it is looked for on the session's stream, by
        global position after the line's ``BranchDeleted``; what was read of that stream
        is not read again. A line that has not ended answers False.
        """
        if self._end_position is None:
            try:
                last = await self._line.store.read(self.facts.stream, backwards=True, limit=1)
            except StreamNotFound:
                return False
            if not last or last[0].type != events.BRANCH_DELETED:
                return False
            self._end_position = last[0].position
        if self._cleared_since_end:
            return True
        store, main = self._line.store, session_stream(self.facts.session_id)
        head = await store.head(main)  # before the read: every clear up to it is in the read
        found = await read_types(
            store, main, self._clears_read, frozenset({events.SESSION_CLEARED})
        )
        end = self._end_position
        self._cleared_since_end = any(clear.position > end for clear in found)
        read = [self._clears_read, *(clear.revision for clear in found)]
        self._clears_read = max(read if head is None else [*read, head])
        return self._cleared_since_end

    async def branches(self) -> list[Branch]:
        """Every branch of the session, in the order they were forked (deleted ones too)."""
        return await read_branches(self._line.store, self.facts.session_id)

    async def started_at(self) -> datetime | None:
        """When the line's top stream was first written (None: not yet)."""
        try:
            first = await self._line.store.read(self.facts.stream, limit=1)
        except StreamNotFound:
            return None
        return first[0].recorded_at if first else None

    async def items_count(self) -> tuple[int, int]:
        """How many items are visible on the line, and how many of them are user messages."""
        async with self.tree.lock:
            await self.reader.refresh(0)
            self._line.check_live()
            visible = await self.reader.visible()
        return len(visible), sum(1 for entry in visible if is_user(entry.item()))

    async def turned(self) -> list[Turned]:
        """Every visible item of the line, oldest first, with its event's ``aj.turn`` and
        time (what :mod:`agentjournal.engine.turns` numbers and reports).

        O(the line's history): the visible items, then the line's events for their
        metadata. The SDK's turn reads scan their rows too.
        """
        async with self.tree.lock:
            await self.reader.refresh(0)
            self._line.check_live()
            visible = await self.reader.visible()
            read = await self.reader.line_events()
        return [turned for _, turned in turns.joined(visible, read)]

    # -- writes: items (:mod:`agentjournal.engine.items`) -------------------------------

    def add(
        self,
        items: list[Any],
        run: RunView,
        *,
        trace: Mapping[str, str],
        closing: tuple[str, str] | None = None,
        hiding: Callable[[], Awaitable[Sequence[Entry | Clear]]] | None = None,
        landed: Callable[[ItemsPlan], None] | None = None,
        checkpoint_trace: Mapping[str, str] | None = None,
    ) -> Awaitable[ItemsPlan | None]:
        """Write ``items`` as one atomic write: :meth:`ItemWrites.add
        <agentjournal.engine.items.ItemWrites.add>` itself (awaited by the caller: no
        coroutine of its own around it, on every write)."""
        return self._writes.add(
            items,
            run,
            trace=trace,
            closing=closing,
            hiding=hiding,
            landed=landed,
            checkpoint_trace=checkpoint_trace,
        )

    async def pop(self, trace: Mapping[str, str]) -> dict[str, Any] | None:
        """Hide the latest item and return it (``agentjournal.ItemPopped``); None if none."""
        return await items.pop(self._line, trace)

    async def clear(self, trace: Mapping[str, str]) -> None:
        """Hide every item (``agentjournal.SessionCleared``); nothing for no session yet."""
        await items.clear(self._line, trace)

    # -- writes: lines (:mod:`agentjournal.engine.lines`) -------------------------------

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
        """Fork this line into a new branch: :func:`~agentjournal.engine.lines.fork`."""
        return await lines.fork(
            self._line,
            self._checkpoints,
            at=at,
            turn=turn,
            revision=revision,
            name=name,
            trace=trace,
            generated=generated,
            used=used,
        )

    async def delete_line(self, parent: str, trace: Mapping[str, str]) -> None:
        """End this branch line: :func:`~agentjournal.engine.lines.delete_line`."""
        await lines.delete_line(self._line, self._checkpoints, parent, trace)

    async def clear_lines(self, trace: Mapping[str, str]) -> None:
        """Clear the session on every line: :func:`~agentjournal.engine.lines.clear_lines`."""
        await lines.clear_lines(self._line, self._checkpoints, trace)

    # -- usage (:mod:`agentjournal.engine.usage`) ---------------------------------------

    async def book_usage(
        self, counts: Mapping[str, Any], trace: Mapping[str, str]
    ) -> events.TurnUsage | None:
        """Book a run's usage on the current turn: :func:`~agentjournal.engine.usage.book_usage`."""
        return await usage.book_usage(self._line, counts, trace)

    async def turn_usage(self) -> dict[int, events.TurnUsage]:
        """The usage booked on each turn: :func:`~agentjournal.engine.usage.turn_usage`."""
        return await usage.turn_usage(self._line)

    # -- decisions, refusals, grants (:mod:`agentjournal.engine.grants`) ----------------

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
        """Append a decision, refusal or grant: :func:`~agentjournal.engine.grants.record`."""
        await grants.record(
            self._line, type_, data, agent=agent, run=run, metadata=metadata, held=held
        )

    async def record_at_head(
        self, type_: str, checked: Callable[[], Awaitable[bytes]], trace: Mapping[str, str]
    ) -> None:
        """Append an event at the exact head of the line's top stream, its data given by
        ``checked`` in every plan: :meth:`~agentjournal.engine.line.Line.write_on_top`."""
        await self._line.write_on_top(type_, checked, trace)

    async def record_grant(
        self, agent: str, authority: Authority, run: RunView, trace: Mapping[str, str]
    ) -> None:
        """A run's grant and its log entry: :func:`~agentjournal.engine.grants.record_grant`."""
        await grants.record_grant(self._line, agent, authority, run, trace)

    async def reset_authority(self, agent: str, reason: str, trace: Mapping[str, str]) -> None:
        """Record ``agentjournal.AuthorityReset``:
        :func:`~agentjournal.engine.grants.reset_authority`."""
        await grants.reset_authority(self._line, agent, reason, trace)

    # -- approvals (:mod:`agentjournal.engine.approvals`) -------------------------------

    async def approvals(self, streams: Sequence[str] | None = None) -> list[approving.Approval]:
        """Every approval asked on ``streams`` (default: the line's followed streams):
        :func:`~agentjournal.engine.approvals.approvals`."""
        return await approving.approvals(self._line, streams)

    async def policies(self) -> tuple[Policy, ...]:
        """The policies an answer on this line must satisfy (this line's and every one the
        session recorded): :func:`~agentjournal.engine.approvals.policies_in_force`."""
        return await approving.policies_in_force(
            self._line.store, self.facts.session_id, self.facts.policy
        )

    async def paused(self) -> approving.Held | None:
        """The line's newest paused run: :func:`~agentjournal.engine.approvals.paused`."""
        return await approving.paused(self._line)

    async def take(
        self,
        held: approving.Held,
        *,
        retake: bool,
        holder: str,
        trace: Mapping[str, str],
    ) -> None:
        """Take a paused run up to resume it: :func:`~agentjournal.engine.approvals.take`."""
        await approving.take(self._line, held, retake=retake, holder=holder, trace=trace)

    async def hold(
        self, state: str, requests: Sequence[str], trace: Mapping[str, str]
    ) -> list[approving.Approval]:
        """Record a paused run: :func:`~agentjournal.engine.approvals.hold`."""
        return await approving.hold(self._line, state, requests, trace)

    async def resolve(
        self,
        request_id: str,
        *,
        approve: bool,
        by: str,
        reason: str,
        trace: Mapping[str, str],
        key: Ed25519PrivateKey | SigningKey | None = None,
    ) -> events.ApprovalDecided:
        """Answer a pending approval: :func:`~agentjournal.engine.approvals.resolve`."""
        return await approving.resolve(
            self._line, request_id, approve=approve, by=by, reason=reason, trace=trace, key=key
        )

    # -- checkpoints (:mod:`agentjournal.engine.checkpoints`) ---------------------------

    async def checkpoint(
        self, trace: Mapping[str, str], *, extra: Mapping[str, tuple[int, str]] | None = None
    ) -> Checkpoint | None:
        """Sign the heads now: :meth:`Checkpoints.checkpoint
        <agentjournal.engine.checkpoints.Checkpoints.checkpoint>`."""
        return await self._checkpoints.checkpoint(trace, extra=extra)

    # -- compaction (:mod:`agentjournal.engine.compaction`) -----------------------------

    async def snapshot(self, limit: int) -> Snapshot:
        """The newest ``limit`` visible items, as a compaction reads them."""
        return await compaction.snapshot(self._line, limit)

    async def replace_suffix(
        self,
        expected: list[tuple[Key, str]],
        output: list[Any],
        prune_prefix: Callable[[Any], bool] | None,
        *,
        trace: Mapping[str, str],
        speaker: str | None = None,
    ) -> bool:
        """Replace a snapshot's items if still the newest:
        :func:`~agentjournal.engine.compaction.replace_suffix`."""
        return await compaction.replace_suffix(
            self._line,
            self._writes,
            expected,
            output,
            prune_prefix,
            trace=trace,
            speaker=speaker,
        )

    async def replace_all(
        self, items: list[Any], *, trace: Mapping[str, str], speaker: str | None = None
    ) -> None:
        """Replace the whole visible history with ``items`` in one atomic write (``speaker``
        authors its assistant items)."""
        await compaction.replace_all(self._line, self._writes, items, trace=trace, speaker=speaker)
