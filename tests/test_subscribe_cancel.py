"""A cancelled SQLite subscription stops, whatever step of its wait the cancel meets.

Python 3.11's ``asyncio.wait_for`` returns the inner result when the inner wait finished
in the same loop step as the cancel, swallowing the cancel: a subscription that waited
for a wake-up with it read on after a cancel that met a wake-up (a follower's own write
wakes its subscription), and ``tail``/``trace export --follow`` hung on SIGTERM. Each case
here wakes the waiting subscription and cancels it ``steps`` loop passes later.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from agentjournal.store.contract import NewEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore


@pytest.mark.parametrize("steps", range(6))
async def test_a_cancel_that_meets_a_wake_up_stops_the_subscription(
    tmp_path: Path, steps: int
) -> None:
    store = await SQLiteEventStore.open(str(tmp_path / "s.db"), create=True)
    try:
        await store.append("s-1", [NewEvent("T", b"{}")], expected=StreamState.NO_STREAM)
        seen: list[int] = []
        ready = asyncio.Event()

        async def follow() -> None:
            async for event in store.subscribe():
                seen.append(event.position)
                ready.set()

        task = asyncio.create_task(follow())
        await asyncio.wait_for(ready.wait(), 5)
        for _ in range(3):  # into its wait for the next wake-up
            await asyncio.sleep(0)
        for loop, woken in list(store._listeners._waiting):  # the wake-up an append sends
            assert loop is asyncio.get_running_loop()
            woken.set()
        for _ in range(steps):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=3)
        assert done, f"the subscription went on after a cancel {steps} steps after a wake-up"
        assert task.cancelled()
    finally:
        with contextlib.suppress(Exception):
            await store.close()
