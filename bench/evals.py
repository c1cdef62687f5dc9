"""Evals benchmark: scoring recorded turns with rule scorers, beside reading those turns.

Run: ``python bench/evals.py`` (``--quick`` for a smoke run). One durable SQLite store (WAL,
``synchronous=FULL``) holds 100 sessions of 10 turns each (1,000 turns), each turn a user
message, a tool call, its output and an answer, written through a journal session. Rounds
alternate over three sides (``bench/_common.py``); medians:

- *read events*: every session's stream read from the store (``store.read``): the raw
  cost of getting the events;
- *read turns*: every session line read as scorers see it (``session_turns``: the events
  folded into turns, tool calls, guardrail decisions, usage, head hash);
- *eval run*: ``run_eval`` with four rule scorers from a scorers file (``load_scorers``)
  over every session: reading, scoring, and writing each session's ``TurnScored`` and
  ``SessionScored`` events chained in one append, then ``EvalRunCompleted`` (a new run id
  each round).

Per turn, in milliseconds (and the eval run per score written: a turn gets one per scorer);
the last columns are the eval run over reading the turns (what scoring and writing add) and
its CPU ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import measure_each, run_publishing, table
from agentjournal import Journal
from agentjournal.evals.run import run_eval
from agentjournal.evals.scorers.file import load_scorers
from agentjournal.read.evals.turns import session_turns
from agentjournal.store import EventStore
from agentjournal.streams import session_stream

SCORERS = """\
scorers:
  - name: lookup-called
    rule: tool_called
    tool: lookup_order
  - name: answers
    rule: answer_matches
    pattern: "(?i)order \\\\d+"
  - name: no-block
    rule: no_guardrail_block
  - name: refund-never
    rule: tool_not_called
    tool: refund
"""


@dataclass(frozen=True)
class Sizes:
    sessions: int
    turns: int


FULL = Sizes(sessions=100, turns=10)
QUICK = Sizes(sessions=5, turns=4)
ROUNDS = 5
QUICK_ROUNDS = 2


def turn_items(session: int, turn: int) -> list[dict[str, Any]]:
    """One recorded turn: the question, a lookup, its output, the answer."""
    call = f"call-{session}-{turn}"
    order = 1000 + session * 100 + turn
    return [
        {"role": "user", "content": f"Where is order {order}?"},
        {
            "type": "function_call",
            "call_id": call,
            "name": "lookup_order",
            "arguments": f'{{"order_id": "{order}"}}',
            "id": f"fc-{session}-{turn}",
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": call, "output": f"order {order}: shipped"},
        {
            "id": f"msg-{session}-{turn}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [
                {"type": "output_text", "text": f"Order {order} has shipped.", "annotations": []}
            ],
        },
    ]


async def record(journal: Journal, sizes: Sizes) -> list[str]:
    names = [f"bench-{n}" for n in range(sizes.sessions)]
    for n, name in enumerate(names):
        session = journal.session(name, app_name="bench")
        for turn in range(sizes.turns):
            await session.add_items(turn_items(n, turn))  # type: ignore[arg-type]
    return names


async def run(sizes: Sizes, rounds: int) -> list[list[str]]:
    with tempfile.TemporaryDirectory() as directory:
        scorers_file = Path(directory) / "scorers.yaml"
        scorers_file.write_text(SCORERS, encoding="utf-8")
        scorers = load_scorers(scorers_file)
        async with Journal.open(f"sqlite:///{os.path.join(directory, 'bench.db')}") as journal:
            names = await record(journal, sizes)
            store: EventStore = journal.store
            targets = [(name, "main") for name in names]
            numbers = itertools.count()
            turns = sizes.sessions * sizes.turns

            async def read_events() -> None:
                for name in names:
                    await store.read(session_stream(name))

            async def read_turns() -> None:
                for name in names:
                    found = await session_turns(store, name)
                    assert len(found.turns) == sizes.turns

            async def evaluate() -> None:
                result = await run_eval(store, scorers, targets, run_id=f"bench-{next(numbers)}")
                assert result.completion is not None
                assert result.completion.turns_scored == turns * len(scorers)

            times = await measure_each([read_events, read_turns, evaluate], rounds=rounds)
    (events, _), (read, read_cpu), (scored, scored_cpu) = times
    label = f"{sizes.sessions} sessions x {sizes.turns} turns, {len(scorers)} rule scorers"
    return [
        [
            label,
            f"{1000 * events / turns:.3f}",
            f"{1000 * read / turns:.3f}",
            f"{1000 * scored / turns:.3f}",
            f"{1000 * scored / (turns * len(scorers)):.3f}",
            f"{scored / read:.2f}",
            f"{scored_cpu / read_cpu:.2f}" if read_cpu else "-",
        ]
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    sizes, rounds = (QUICK, QUICK_ROUNDS) if args.quick else (FULL, ROUNDS)
    rows = asyncio.run(run(sizes, rounds))
    headers = [
        "case (ms per turn)",
        "read events",
        "read turns",
        "eval run",
        "per score",
        "eval/read turns",
        "cpu eval/read turns",
    ]
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("evals", main, sys.argv[1:]))
