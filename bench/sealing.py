"""Sealing benchmark: what encryption under a subject's key costs, beside the SDK's SQLiteSession.

Run: ``python bench/sealing.py`` (``--quick`` for a smoke run). Three sides, each on its own
file and durable (WAL, ``synchronous=FULL``): the SDK's ``SQLiteSession``, a
``JournalSession`` in the clear, and one sealed (``Journal.open(keys=...)``: the embedded
key store in a file of its own, its keys cached in memory as the journal caches them;
every content field sealed with AES-256-GCM before it is chained). Rounds alternate over
the three sides (``bench/_common.py``); medians.

Cases:
  (a) runner turns: ``get_items(limit=20)`` then ``add_items`` of a function call and its
      output (``bench/session.py``'s turn), on a growing session;
  (c) a full ``get_items`` of 10,000 items from a fresh session object (cold: nothing of
      the session cached; the sealed side's key is in the key cache, as in a process that
      served the subject within the minute). A sealed session keeps no plaintext in the
      read model (DESIGN §19.1), so it reads and opens every event.

Ratios: each side's time over the SDK's, and sealed over clear (the price of sealing alone);
the "cpu" ratio is of CPU times (all threads), steadier than the wall clock here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agents.memory import Session

from _common import measure_each, run_publishing, table
from agentjournal import Journal, JournalSession
from agentjournal.shred.sealing import SubjectSealer
from session import DurableSQLiteSession, call_pair, turns

SUBJECT = "subject-1"
SIDES = ("SQLiteSession", "agentjournal", "sealed")


@dataclass(frozen=True)
class Sizes:
    turns: int
    large: int


FULL = Sizes(turns=1000, large=10_000)
QUICK = Sizes(turns=20, large=400)
ROUNDS = 5


class Side:
    """One contestant, on its own file."""

    def __init__(self, name: str, directory: str) -> None:
        self.name = name
        self.directory = directory
        self.journal: Journal | None = None

    async def start(self) -> None:
        if self.name == "SQLiteSession":
            return
        path = os.path.join(self.directory, f"{self.name}.db")
        keys = os.path.join(self.directory, "keys.db") if self.name == "sealed" else None
        self.journal = await Journal.open(f"sqlite:///{path}", keys=keys)

    async def stop(self) -> None:
        if self.journal is not None:
            await self.journal.close()

    def session(self, session_id: str) -> Session:
        if self.journal is None:
            return DurableSQLiteSession(session_id, os.path.join(self.directory, "sdk.db"))
        return self.journal.session(session_id, user_id=SUBJECT)

    def fresh(self, session_id: str) -> Session:
        """A new session object that shares no cached items with the others."""
        if self.journal is None:
            return self.session(session_id)
        keys = self.journal.keys
        sealer = None if keys is None else SubjectSealer(SUBJECT, keys)
        return JournalSession(self.journal.store, session_id, user_id=SUBJECT, sealer=sealer)

    async def fill(self, session_id: str, items: int) -> None:
        session = self.session(session_id)
        for start in range(0, items, 500):
            await session.add_items(
                [item for n in range(start, min(start + 500, items), 2) for item in call_pair(n)]
            )


def row(case: str, times: list[tuple[float, float]], per: int, unit: str) -> list[str]:
    (sdk, _), (clear, clear_cpu), (sealed, sealed_cpu) = times
    return [
        case,
        *(f"{1000 * t / per:.3f}" for t in (sdk, clear, sealed)),
        f"{clear / sdk:.2f}",
        f"{sealed / sdk:.2f}",
        f"{sealed / clear:.2f}",
        f"{sealed_cpu / clear_cpu:.2f}" if clear_cpu else "-",
        unit,
    ]


async def run(sizes: Sizes) -> list[list[str]]:
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as directory:
        sides = [Side(name, directory) for name in SIDES]
        for side in sides:
            await side.start()
        try:
            rows.append(await turn_case(sides, sizes))
            rows.append(await cold_read_case(sides, sizes))
        finally:
            for side in sides:
                await side.stop()
    return rows


async def turn_case(sides: list[Side], sizes: Sizes) -> list[str]:
    """(a) runner turns on a growing session, ``sizes.turns`` in all per side."""
    per_round = sizes.turns // ROUNDS
    sessions = {side.name: side.session("turns") for side in sides}
    offsets = dict.fromkeys(SIDES, 0)

    def turn_round(side: Side) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            await turns(sessions[side.name], per_round, offsets[side.name])
            offsets[side.name] += per_round

        return go

    times = await measure_each([turn_round(side) for side in sides], rounds=ROUNDS)
    # Every side holds what it was given, the same items.
    held = [json.dumps(await sessions[side.name].get_items()) for side in sides]
    assert len(set(held)) == 1, "the sides hold different histories"
    label = f"(a) turn, durable: get_items(20)+add_items(2), x{sizes.turns}"
    return row(label, times, per_round, "ms/turn")


async def cold_read_case(sides: list[Side], sizes: Sizes) -> list[str]:
    """(c) A full ``get_items`` of ``sizes.large`` items from a fresh session object."""
    session_id = f"size-{sizes.large}"
    for side in sides:
        await side.fill(session_id, sizes.large)
    read = [json.dumps(await side.fresh(session_id).get_items()) for side in sides]
    assert len(set(read)) == 1, "the sides read different histories"
    assert len(json.loads(read[0])) == sizes.large

    def cold(side: Side) -> Callable[[], Awaitable[Any]]:
        return lambda: side.fresh(session_id).get_items()

    times = await measure_each([cold(side) for side in sides], rounds=ROUNDS)
    return row(f"(c) full get_items of {sizes.large:,}, cold", times, 1, "ms/call")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    rows = asyncio.run(run(QUICK if args.quick else FULL))
    headers = [
        "case",
        "SQLiteSession",
        "agentjournal",
        "sealed",
        "clear/SDK",
        "sealed/SDK",
        "sealed/clear",
        "cpu sealed/clear",
        "unit",
    ]
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("sealing", main, sys.argv[1:]))
