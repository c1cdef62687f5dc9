"""Trace export benchmark: ``agentjournal trace export --all`` throughput.

Run: ``python bench/traces.py`` (``--quick`` for a smoke run: 20 sessions).

The store is ``bench/_stores.py``'s item store: 1,000 sessions of 100 items (171,000
events), copies of one session the SDK's ``Runner`` wrote (five runs, each a handoff
and eight tool calls). Cases:

  export --all, JSON Lines   ``agentjournal trace export --all --jsonl FILE`` as a
                             fresh process: read the global order, project every
                             tree, write every span (median of 3)
  floor: raw read            one read of the same events' columns in position order
                             with ``sqlite3`` (no projection): the least any export pays

Items per second (the store's items over the wall seconds; *per cpu s*: over the CPU
seconds of the process and the child it forks for the second half of the trees, steadier
on a shared machine), events per second beside. Target: at least 20,000 items per second.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import run_publishing, table
from _stores import child_cpu, item_store
from catalog import _raw_read

ROUNDS = 3
TARGET = 20_000


def _export(path: Path, out: Path) -> tuple[float, float, int]:
    """Seconds of one ``trace export --all --jsonl``, wall and CPU, and the spans it wrote."""
    command = [sys.executable, "-m", "agentjournal.cli", "trace", "export", "--all"]
    command += ["--jsonl", str(out), "--uri", f"sqlite:///{path}"]
    started, cpu = time.perf_counter(), child_cpu()
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1800)
    took, cpu = time.perf_counter() - started, child_cpu() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"trace export: {done.returncode} {done.stderr.strip()}")
    with open(out, "rb") as spans:
        return took, cpu, sum(1 for _ in spans)


async def run(sessions: int, rebuild: bool) -> list[list[str]]:
    store = await item_store(sessions, rebuild)
    out = store.ours.with_name("spans.jsonl")
    times, cpus = [], []
    spans = 0
    for _ in range(ROUNDS):
        took, cpu, spans = await asyncio.to_thread(_export, store.ours, out)
        times.append(took)
        cpus.append(cpu)
    out.unlink(missing_ok=True)
    raw, counted = await asyncio.to_thread(_raw_read, store.ours)
    assert counted == store.events
    took, cpu = statistics.median(times), statistics.median(cpus)
    rate = store.items / took
    print(f"{store.events:,} events, {store.items:,} items, {spans:,} spans exported")
    return [
        [
            "export --all, JSON Lines",
            f"{took:.2f}",
            f"{cpu:.2f}",
            f"{rate:,.0f}",
            f"{store.items / cpu:,.0f}",
            f"{store.events / took:,.0f}",
            "ok" if rate >= TARGET else "MISSED",
        ],
        ["floor: raw read", f"{raw:.2f}", "", f"{store.items / raw:,.0f}", "", "", ""],
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 sessions, for a smoke run")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions (default: 1,000)")
    parser.add_argument("--rebuild", action="store_true", help="write the cached store again")
    args = parser.parse_args(argv)
    rows = asyncio.run(run(20 if args.quick else args.sessions, args.rebuild))
    headers = ["case", "wall s", "cpu s", "items/s", "per cpu s", "events/s"]
    headers.append(f">= {TARGET:,} items/s")
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("traces", main, sys.argv[1:]))
