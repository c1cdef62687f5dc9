"""Planning benchmark: ``plan_items`` of the runner's tool turn beside the least Python that
plans the same two events.

Run: ``python bench/planning.py`` (``--quick`` for a smoke run). The turn is
``bench/session.py``'s (a): a function call and its output, added to a session of 100 items
on a SQLite file. Its write is stopped once planned, so the session's tree stays as it was
and every call below plans the very same write:

- **plan_items**: ``engine.plan_items.plan_items`` of that write, with the arguments the
  session gave it (routing, the canonical events, their views and chain keys, the read
  model's entries, the tree's commit, the requests);
- **floor: least Python**: the least Python planning we could write for this turn
  (``bench/_least_plan.py``), straight-line code for exactly this shape and nothing else:
  parse the call's arguments, print both events' data and raw items (with the codec's own
  encoders and template), digest the call's withheld values, its view and both events' data
  and chain records, and draw both event ids (the store's id series) — no check, no other
  event, no read model's entry, no commit for the tree, no event objects. Its events are
  checked identical to ``plan_items``'s (ids, types, data bytes, metadata in order) before
  anything is timed. It is not a proven lower bound: it is what is left once everything a
  real planner adds to the bytes themselves is taken away.

Both run hot: the same call again and again, alternated in rounds, the cyclic collector off.
Microseconds a turn; the last column is the share of ``plan_items``. (a) and (f) in
``bench/session.py`` say how small a share planning must take to meet their targets
(bench/RESULTS.md, "How cheap the planning must be").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import sys
import tempfile
from typing import Any

from _common import measure_each, run_publishing, table
from _least_plan import least_of, same_events
from agentjournal import Journal
from agentjournal.engine.plan_items import plan_items
from session import call_pair, planning, turns  # bench/session.py's turn


class _Planned(Exception):
    """Stops a write once planned: the tree stays as it was."""


async def planned_turn(size: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``plan_items``'s arguments for a turn on a session of ``size`` items (its write
    stopped once planned)."""
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def stop(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        raise _Planned

    with tempfile.TemporaryDirectory() as directory:
        async with await Journal.open(f"sqlite:///{os.path.join(directory, 'p.db')}") as journal:
            session = journal.session("turns")
            await turns(session, size // 2, 0)
            with planning(stop), contextlib.suppress(_Planned):
                await session.add_items(call_pair(size // 2))
    ((args, kwargs),) = calls
    return args, kwargs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    quick = parser.parse_args(argv).quick
    per_round, rounds = (200, 3) if quick else (20_000, 9)
    args, kwargs = asyncio.run(planned_turn(100))
    tree, facts, _, items = args
    stream = facts.stream
    plan = plan_items(*args, **kwargs)
    assert plan is not None
    assert len(plan.requests) == 1
    made = plan.requests[0].events
    inputs = (kwargs["first_index"], kwargs["nonce"], kwargs["now"], kwargs["trace"])
    assert same_events(made, least_of(tree, stream, items, *inputs)), "the least planning differs"

    def ours() -> None:
        for _ in range(per_round):
            plan_items(*args, **kwargs)

    def floor() -> None:
        for _ in range(per_round):
            least_of(tree, stream, items, *inputs)

    gc.disable()
    try:
        (ours_wall, _), (floor_wall, _) = asyncio.run(measure_each([ours, floor], rounds=rounds))
    finally:
        gc.enable()
    rows = [
        ["plan_items", f"{1e6 * ours_wall / per_round:.1f}", "1.00"],
        [
            "floor: least Python",
            f"{1e6 * floor_wall / per_round:.1f}",
            f"{floor_wall / ours_wall:.2f}",
        ],
    ]
    print(
        f"the (a) turn's two items on a session of 100 items, hot, {rounds} rounds of {per_round:,}"
    )
    print(table(["case", "µs/turn", "of plan_items"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("planning", main, sys.argv[1:]))
