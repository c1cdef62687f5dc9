"""A quick end-to-end check of an event store: ``agentjournal selfcheck``.

It writes a handful of events to fresh ``SelfCheck-<uuid>`` streams and checks
the rules every backend must keep, printing one line per check. It is the
short proof that a store (a SQLite file or a KurrentDB server) behaves; the
full proof is the conformance suite.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable

from agentjournal.errors import ConcurrencyError
from agentjournal.store import AppendRequest, EventStore, NewEvent, StreamState, event_id

Report = Callable[[str], None]


class CheckFailed(Exception):
    """Raised by a self-check that found the store misbehaving."""


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def _event(stream: str, n: int) -> NewEvent:
    return NewEvent(
        type="SelfChecked",
        data=json.dumps({"n": n}).encode(),
        metadata={"$schema_version": "2"},
        id=event_id("selfcheck", stream, n),
    )


async def run_selfcheck(store: EventStore, report: Report) -> bool:
    """Run every check against ``store``; return True when all pass."""
    base = f"SelfCheck-{uuid.uuid4().hex}"
    parent, child = base, f"{base}-child"

    async def append_and_read() -> None:
        await store.append(
            parent, [_event(parent, 0), _event(parent, 1)], expected=StreamState.NO_STREAM
        )
        got = await store.read(parent)
        _expect([e.revision for e in got] == [0, 1], f"read back {got}")

    async def conflict() -> None:
        try:
            await store.append(parent, [_event(parent, 9)], expected=0)
        except ConcurrencyError as error:
            _expect(error.actual == 1, f"conflict reports revision {error.actual}, not 1")
        else:
            raise CheckFailed("a stale expected revision was accepted")

    async def idempotent_retry() -> None:
        again = await store.append(
            parent, [_event(parent, 0), _event(parent, 1)], expected=StreamState.NO_STREAM
        )
        _expect(again.revision == 1, f"retry reported revision {again.revision}")
        _expect(await store.head(parent) == 1, "the retry wrote the events twice")

    async def atomic_many() -> None:
        try:
            await store.append_many(
                [
                    AppendRequest(child, [_event(child, 0)], StreamState.NO_STREAM),
                    AppendRequest(parent, [_event(parent, 2)], 0),
                ]
            )
        except ConcurrencyError:
            pass
        else:
            raise CheckFailed("append_many accepted a stale revision")
        _expect(await store.head(child) is None, "half of a failed append_many was written")
        results = await store.append_many(
            [
                AppendRequest(child, [_event(child, 0)], StreamState.NO_STREAM),
                AppendRequest(parent, [_event(parent, 2)], 1),
            ]
        )
        _expect([r.revision for r in results] == [0, 2], f"append_many returned {results}")

    async def tail_read() -> None:
        got = await store.read(parent, backwards=True, limit=2)
        _expect([e.revision for e in got] == [2, 1], f"tail read returned {got}")

    async def live_subscription() -> None:
        head = (await store.read(parent, backwards=True, limit=1))[0]
        started = time.monotonic()

        async def first_new() -> None:
            async for event in store.subscribe(after_position=head.position):
                if event.stream == parent:
                    return

        waiter = asyncio.create_task(first_new())
        await asyncio.sleep(0.01)
        await store.append(parent, [_event(parent, 3)], expected=2)
        await asyncio.wait_for(waiter, 5.0)
        report(f"    live event delivered after {1000 * (time.monotonic() - started) - 10:.1f} ms")

    checks: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("append and read back", append_and_read),
        ("stale revision is a conflict", conflict),
        ("retry with the same ids is idempotent", idempotent_retry),
        ("append_many is all or nothing", atomic_many),
        ("tail read", tail_read),
        ("subscription follows live appends", live_subscription),
    ]
    ok = True
    for name, check in checks:
        try:
            await check()
        except Exception as error:  # report every failure, keep going
            ok = False
            report(f"  FAIL {name}: {error!r}")
        else:
            report(f"  ok   {name}")
    return ok
