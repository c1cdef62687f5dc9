"""Branch benchmark: forking and replaying a branch of a long session, beside the SDK's
``AdvancedSQLiteSession`` and beside our own main line, in one run.

Run: ``python bench/branches.py`` (``--quick`` for a smoke run). Ratios are ours / the
SDK's in time (lower is better); rounds alternate and report medians (``_common``).

Both sides hold the same session of ``ITEMS`` items written as turns of four (a user
message, a function call, its output, an answer), on files.

Cases:
  (g) fork at the middle turn: the SDK's ``create_branch_from_turn`` (it copies the
      prefix's rows and structure) against our ``fork(turn=)`` (one atomic write of
      three events; it reads the line's events up to the cut), each from a fresh session
      object, a new branch per round;
  (g) a cold full ``get_items`` of such a branch (half the session, then its own
      turn), from a fresh session object: the SDK's ``get_items(branch_id=)``, ours a
      ``JournalSession(branch=)``;
  (g) a cold ``get_items(20)`` of the branch (O(limit) on both lines);
  and, to compare with what the same costs on the main line, the cold full
  ``get_items`` of the main line on both sides.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import sys
import tempfile
from typing import Any

from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession

from _common import Timing, measure_cpu, run_publishing, table
from agentjournal import Journal, JournalSession

FULL_ITEMS = 10_000
QUICK_ITEMS = 400
SESSION = "long"


def turn(n: int) -> list[Any]:
    """One turn of four items: the user asks, a tool is called, it answers, the agent replies."""
    call_id = f"call_{n:06d}"
    return [
        {"role": "user", "content": f"question {n}: where is order {n}?"},
        {
            "arguments": f'{{"order_id":"{n}"}}',
            "call_id": call_id,
            "name": "lookup_order",
            "type": "function_call",
            "id": f"fc_{n:06d}",
        },
        {"call_id": call_id, "output": f"order {n}: shipped", "type": "function_call_output"},
        {"role": "assistant", "content": f"Order {n} has shipped."},
    ]


class DurableAdvanced(AdvancedSQLiteSession):
    """The SDK's class with ``synchronous=FULL`` on its connections, as our store commits."""

    @staticmethod
    def _configure_connection(conn: Any) -> None:
        AdvancedSQLiteSession._configure_connection(conn)
        conn.execute("PRAGMA synchronous = FULL")


def row(case: str, timing: Timing, unit: str) -> list[str]:
    """A table row: ms per call each side, ratio of wall time and of CPU time."""
    return [
        case,
        f"{1000 * timing.baseline:.3f}",
        f"{1000 * timing.ours:.3f}",
        f"{timing.ours / timing.baseline:.2f}",
        f"{timing.ours_cpu / timing.baseline_cpu:.2f}" if timing.baseline_cpu else "-",
        unit,
    ]


async def run(items: int) -> list[list[str]]:
    """Fill both sides, then time each case."""
    turns = items // 4
    middle = turns // 2
    with tempfile.TemporaryDirectory() as directory:
        sdk_path = os.path.join(directory, "sdk.db")
        filler = DurableAdvanced(session_id=SESSION, db_path=sdk_path, create_tables=True)
        async with Journal.open(f"sqlite:///{os.path.join(directory, 'aj.db')}") as journal:
            ours = journal.session(SESSION)
            for start in range(0, turns, 100):
                batch = [i for n in range(start, min(start + 100, turns)) for i in turn(n)]
                await filler.add_items(batch)
                await ours.add_items(batch)
            print(f"filled: {items:,} items in {turns:,} turns on each side", file=sys.stderr)
            names = itertools.count()
            sdk_branches: list[str] = []
            our_branches: list[str] = []

            async def sdk_fork() -> None:
                session = DurableAdvanced(session_id=SESSION, db_path=sdk_path)
                sdk_branches.append(
                    await session.create_branch_from_turn(middle, f"b{next(names)}")
                )
                session.close()

            async def our_fork() -> None:
                branch = await JournalSession(journal.store, SESSION).fork(
                    turn=middle, name=f"b{next(names)}"
                )
                our_branches.append(branch.name)

            rows = [
                row(
                    f"(g) fork at turn {middle:,} of {turns:,}",
                    await measure_cpu(sdk_fork, our_fork),
                    "ms/fork",
                )
            ]
            # Each branch gets a turn of its own, as a real branch would.
            sdk_tail = DurableAdvanced(session_id=SESSION, db_path=sdk_path)
            await sdk_tail.switch_to_branch(sdk_branches[-1])
            await sdk_tail.add_items(turn(turns))
            sdk_tail.close()
            await journal.session(SESSION, branch=our_branches[-1]).add_items(turn(turns))
            sdk_branch, our_branch = sdk_branches[-1], our_branches[-1]
            gc.collect()

            for limit, label in ((None, "full get_items"), (20, "get_items(20)")):

                async def sdk_read(limit: int | None = limit) -> None:
                    session = DurableAdvanced(session_id=SESSION, db_path=sdk_path)
                    await session.get_items(limit, branch_id=sdk_branch)
                    session.close()

                async def our_read(limit: int | None = limit) -> None:
                    await JournalSession(journal.store, SESSION, branch=our_branch).get_items(limit)

                rows.append(
                    row(
                        f"(g) {label} of the branch, cold",
                        await measure_cpu(sdk_read, our_read),
                        "ms/call",
                    )
                )

            async def sdk_main() -> None:
                session = DurableAdvanced(session_id=SESSION, db_path=sdk_path)
                await session.get_items(branch_id="main")
                session.close()

            async def our_main() -> None:
                await JournalSession(journal.store, SESSION).get_items()

            rows.append(
                row(
                    "(g) full get_items of main, cold",
                    await measure_cpu(sdk_main, our_main),
                    "ms/call",
                )
            )
        filler.close()
    return rows


def main(argv: list[str]) -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    rows = asyncio.run(run(QUICK_ITEMS if args.quick else FULL_ITEMS))
    headers = ["case", "AdvancedSQLiteSession", "agentjournal", "ratio", "cpu ratio", "unit"]
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("branches", main, sys.argv[1:]))
