"""Writing items on a line: adding them (with their subagents' opens and closes), popping
the latest, clearing them all.

:class:`ItemWrites` owns what a line's item writes remember between writes (the
subsession streams found taken, the newest user message written and its turn);
:func:`pop`, :func:`clear` and :func:`plan_innermost_control` need nothing remembered.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from agentjournal import events
from agentjournal.engine import stamps, turns
from agentjournal.engine.approvals import unanswered
from agentjournal.engine.checkpoints import Checkpoints
from agentjournal.engine.line import Line
from agentjournal.engine.plan import ItemsPlan, RunView, WritePlan
from agentjournal.engine.plan_control import plan_control
from agentjournal.engine.plan_items import plan_items
from agentjournal.engine.timeline import Clear, Entry, Key, Pop
from agentjournal.engine.turns import is_user
from agentjournal.errors import ConcurrencyError

logger = logging.getLogger("agentjournal.engine")


class NoRun:
    """What a write that belongs to no run's turn knows of the run (``close_subagents``, a
    compaction, which the SDK makes inside a run): at most who is speaking."""

    identity: Any = None
    speaker: str | None = None
    handoffs: Mapping[str, tuple[str, str]] = {}
    grants: Sequence[Any] = ()
    finished: str | None = None
    responses: Sequence[Any] = ()  # a compaction carries no model response
    asks: Mapping[str, Any] = {}

    def __init__(self, speaker: str | None = None) -> None:
        self.speaker = speaker

    def produced_by(self, item: Mapping[str, Any]) -> None:
        return None

    def tool_call_times(self, call_id: str) -> None:
        return None

    def decided(self, call_id: str, tool: str) -> None:
        return None

    def same_run(self, run: Any) -> bool:
        return False


def earlier_calls(items: Sequence[Any], call_owner: Mapping[str, str]) -> dict[str, str]:
    """The function calls whose outputs ``items`` carry and whose call items an earlier
    write recorded (call id -> the stream its call is on): only such a call can have a
    question waiting (pure). A call the same items make again is theirs, not the earlier."""
    if not call_owner:
        return {}  # no earlier call pending (a turn whose outputs answer its own calls)
    made = {
        call_id
        for item in items
        if isinstance(item, Mapping)
        and item.get("type") == "function_call"
        and isinstance(call_id := item.get("call_id"), str)
    }
    return {
        call_id: call_owner[call_id]
        for item in items
        if isinstance(item, Mapping)
        and item.get("type") == "function_call_output"
        and isinstance(call_id := item.get("call_id"), str)
        and call_id in call_owner
        and call_id not in made
    }


class ItemWrites:
    """The item writes of one line.

    Args:
        line: The line written.
        checkpoints: Signs the line after a write that ends a run, or after enough events.
    """

    def __init__(self, line: Line, checkpoints: Checkpoints) -> None:
        self._line = line
        self._checkpoints = checkpoints
        self._taken: set[str] = set()  # subsession streams found to exist already
        # The newest user message this object wrote and its turn: the next write's
        # ``aj.turn`` needs no read when it is still the newest visible one.
        self._last_user: tuple[Key, int] | None = None
        self._warned_unwired = False

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
        line = self._line
        tree = line.tree
        nonce = stamps.next_nonce()

        async def build() -> ItemsPlan | None:
            line.check_live()
            hides = await hiding() if hiding is not None else ()
            first = await line.reader.next_index()
            log = await line.reader.authority_log() if run.grants else None
            users = any(is_user(item) for item in items)
            last_turn = await self._last_turn(hides) if users else None
            waiting = earlier_calls(items, tree.call_owner)
            asked = await unanswered(line, waiting) if waiting else None
            plan = plan_items(
                tree,
                line.facts,
                run,
                items,
                first_index=first,
                nonce=nonce,
                now=stamps.now(),
                trace=trace,
                closing=closing,
                hides=hides,
                taken=self._taken,
                log=log,
                last_turn=last_turn,
                unanswered=asked,
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
                await line.reader.load(0)
            plan = await line.writer.write(build, retry_now=retry_now)
            if plan is not None:
                if plan.turns:
                    self._last_user = plan.turns[-1]
                ended = bool(
                    plan.closed or closing is not None or (items and run.finished is not None)
                )
                if landed is not None:
                    landed(plan)
                await self._checkpoints.maybe(
                    force=ended, trace=trace if checkpoint_trace is None else checkpoint_trace
                )
            return plan

    async def _last_turn(self, hides: Sequence[Entry | Clear]) -> int:
        """The turn of the newest user message visible once ``hides`` are hidden (0: none).

        Read backwards in growing windows to that message; its event's ``aj.turn`` is the
        answer (no read when this object wrote it). A message written before ``aj.turn``
        existed is numbered as :func:`~agentjournal.engine.turns.number` numbers it, from
        the line's events: once, since the write that follows records the number.
        """
        line = self._line
        hidden = {hide.key for hide in hides if isinstance(hide, Entry)}
        floor = max((hide.through_index for hide in hides if isinstance(hide, Clear)), default=-1)
        size = 16
        while True:
            # As of the heads the plan is built on: a catch-up here would move the tree
            # past the next index already taken (two processes then share an index).
            await line.reader.cover(size)
            timeline = line.tree.timeline
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
        line = self._line
        if self._last_user is not None and self._last_user[0] == entry.key:
            return self._last_user[1]
        recorded = await line.store.read(entry.stream, from_revision=entry.revision, limit=1)
        if recorded and recorded[0].revision == entry.revision:
            turn = events.turn_of(recorded[0].metadata)
            if turn is not None:
                return turn
        # Written before aj.turn: count as the reads do, over what stays visible.
        size = 16
        while not line.tree.timeline.complete:  # every visible item, as of the same heads
            size = max(size * 4, len(line.tree.timeline) + 1)
            await line.reader.cover(size)
        kept = [
            turned
            for shown, turned in turns.joined(
                line.tree.timeline.latest(None), await line.reader.line_events()
            )
            if shown.key not in hidden and not 0 <= shown.index <= floor
        ]
        numbered = turns.number(kept)
        return numbered[-1][0] if numbered else 0

    def _warn_if_unwired(self, item: Mapping[str, Any]) -> None:
        """Warn once when a handoff's output arrives without the hooks having seen it."""
        line = self._line
        if self._warned_unwired:
            return
        self._warned_unwired = True
        logger.warning(
            "a handoff (%s) reached %s without the hooks: pass the session as hooks= too "
            "(Runner.run(..., session=s, hooks=s)) to record it as a subagent; it is stored "
            "as an ordinary tool call",
            item.get("output"),
            line.tree.stream,
        )


async def pop(line: Line, trace: Mapping[str, str]) -> dict[str, Any] | None:
    """Hide the latest item and return it (``agentjournal.ItemPopped``); None if none."""
    tree = line.tree
    popped: list[Entry] = []

    async def build() -> WritePlan | None:
        await line.reader.refresh(1)
        line.check_live()
        latest = tree.timeline.latest(1)
        if not latest:
            return None
        entry = latest[0]
        popped[:] = [entry]
        data = events.ItemPopped(entry.stream, entry.revision, entry.part, entry.index)
        return await plan_innermost_control(
            line, events.ITEM_POPPED, data.encode(), trace, [Pop(entry.key, entry.index)]
        )

    async with tree.lock:
        landed = await line.writer.write(build)
    return popped[0].item() if landed is not None else None


async def clear(line: Line, trace: Mapping[str, str]) -> None:
    """Hide every item (``agentjournal.SessionCleared``); nothing for no session yet."""
    tree = line.tree

    async def build() -> WritePlan | None:
        await line.reader.refresh(0)
        line.check_live()
        if tree.heads.get(tree.stream, -1) < 0:
            return None
        through = await line.reader.next_index() - 1
        data = events.SessionCleared(through).encode()
        return await plan_innermost_control(
            line, events.SESSION_CLEARED, data, trace, [Clear(through)]
        )

    async with tree.lock:
        await line.writer.write(build)


async def plan_innermost_control(
    line: Line,
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
    write then expects it: see :func:`~agentjournal.engine.lines.clear_lines`)."""
    tree = line.tree
    stream = tree.chain[-1].stream if tree.chain else tree.stream
    return plan_control(
        tree,
        line.facts,
        stream,
        type_,
        data,
        next_index=await line.reader.next_index(),
        metadata=trace,
        entries=entries,
        id_=id_,
        guard=stamps.random_id() if guarded and stream != tree.stream else None,
    )
