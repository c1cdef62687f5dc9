"""Token usage on a line: booking a run's usage on the current turn, and reading what
each turn has booked.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from agentjournal import events
from agentjournal.engine import stamps, turns
from agentjournal.engine.line import Line
from agentjournal.engine.plan import WritePlan
from agentjournal.engine.plan_control import plan_control
from agentjournal.errors import CodecError
from agentjournal.store.contract import event_id
from agentjournal.streams import MAIN_BRANCH

logger = logging.getLogger("agentjournal.engine")


async def book_usage(
    line: Line, counts: Mapping[str, Any], trace: Mapping[str, str]
) -> events.TurnUsage | None:
    """Book a run's usage on the line's current turn (``agentjournal.TurnUsage`` on the
    top stream) with the turn's first item as its anchor; None (nothing written) when
    the line has no visible item or has ended.

    ``counts``: ``requests``, ``input_tokens``, ``output_tokens``, ``total_tokens``,
    ``input_tokens_details``, ``output_tokens_details`` (the SDK's JSON text or None).
    The id derives from a nonce of this call: a retry after an unknown outcome is
    recognised, not booked twice.
    """
    tree = line.tree
    nonce = stamps.next_nonce()
    booked: list[events.TurnUsage] = []

    async def build() -> WritePlan | None:
        await line.reader.refresh(0)
        if tree.deleted is not None:
            return None
        visible = await line.reader.visible()
        joined = turns.joined(visible, await line.reader.line_events())
        numbered = turns.number(turned for _, turned in joined)
        if not numbered:
            return None  # no item, no turn (the SDK skips it too)
        # The newest item's turn; 0 when no user message is visible yet (booked on
        # turn 0 like the SDK, whose rows before the first user message are turn 0).
        current = numbered[-1][0]
        first = next(
            entry for (entry, _), (turn, _) in zip(joined, numbered, strict=True) if turn == current
        )
        usage = events.TurnUsage(
            branch=line.facts.branch or MAIN_BRANCH,
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
            line.facts,
            tree.stream,
            events.TURN_USAGE,
            usage.encode(),
            next_index=await line.reader.next_index(),
            metadata={
                k: v for k, v in trace.items() if k in (events.TRACE_ID_KEY, events.SPAN_ID_KEY)
            },
            id_=event_id(tree.stream, nonce, "usage", 0),
        )

    async with tree.lock:
        landed = await line.writer.write(build)
    return booked[0] if landed is not None and booked else None


async def turn_usage(line: Line) -> dict[int, events.TurnUsage]:
    """The usage booked on each turn of this line: its own ``TurnUsage`` events (not its
    prefix's: a branch starts with none), the newest per turn, each counted only while
    its anchor is still visible (a pop of the turn, a clear or a delete un-books it)."""
    async with line.tree.lock:
        await line.reader.refresh(0)
        line.check_live()
        visible = {entry.key for entry in await line.reader.visible()}
        read = await line.reader.line_events()
    booked: dict[int, events.TurnUsage] = {}
    for stream, recorded in read:
        if stream != line.tree.stream:
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
