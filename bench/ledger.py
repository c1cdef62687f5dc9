"""Ledger benchmark: verification throughput beside raw hashlib.sha256 over the same bytes.

Run: ``python bench/ledger.py`` (``--quick`` for a smoke run). A session of
support turns (a user message, a tool call, its result and an answer per
turn, realistic sizes) is written through ``JournalSession`` with a signing
key, exported as a bundle, and then, round by round:

- **raw**: ``hashlib.sha256`` of every event's data and of its canonical
  chain record (the bytes precomputed, so only hashing is timed);
- **chain**: the verifier's integrity check alone (digests, JCS records,
  chain links);
- **verify**: the whole offline verification (structure, integrity,
  checkpoints, twins, delegation, containment).

Throughput is events per second; the ratio is ours / raw (higher is better).
Goal: verify >= 50% of raw.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import statistics
import sys
import time
from typing import Any

from _common import table
from agentjournal import Journal
from agentjournal.ledger import HASH_KEY, SigningKey
from agentjournal.ledger.bundle import export_bundle
from agentjournal.ledger.chain import _record_bytes
from agentjournal.ledger.verify import Report, _check_chain, _parse, verify_bundle

ANSWER = "Your order shipped on Monday and should arrive by Thursday. " * 5


def turn(n: int) -> list[Any]:
    return [
        {"role": "user", "content": f"Where is order {n}? I ordered it last week and paid twice."},
        {
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "lookup_order",
            "arguments": json.dumps({"order_id": str(n), "include_history": True}),
        },
        {
            "type": "function_call_output",
            "call_id": f"call_{n}",
            "output": json.dumps({"order": n, "status": "shipped", "events": ["paid"] * 20}),
        },
        {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{n}",
            "status": "completed",
            "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
        },
    ]


async def recorded(turns: int, key: SigningKey) -> dict[str, Any]:
    async with Journal.open("sqlite://:memory:", signing_key=key) as journal:
        session = journal.session("bench")
        for n in range(turns):
            await session.add_items(turn(n))
        await session.checkpoint()
        return await export_bundle(journal.store, "bench")


def raw_inputs(bundle: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    """Each event's data bytes and its chain record's bytes, as the verifier hashes them."""
    pairs = []
    for stream in bundle["streams"]:
        for event in stream["events"]:
            covered = {k: v for k, v in event["metadata"].items() if k != HASH_KEY}
            record = {
                "stream": stream["name"],
                "revision": event["revision"],
                "id": event["id"],
                "type": event["type"],
                "data_sha256": event["data_sha256"],
                "metadata": covered,
            }
            pairs.append((event["data"].encode(), _record_bytes(record, covered)))
    return pairs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    turns, rounds = (50, 3) if args.quick else (2000, 9)
    key = SigningKey.generate()
    bundle = asyncio.run(recorded(turns, key))
    trusted = {key.key_id: key.public_key}
    pairs = raw_inputs(bundle)
    count = len(pairs)
    size = sum(len(d) + len(r) for d, r in pairs) / count

    def raw() -> None:
        for data, record in pairs:
            hashlib.sha256(data).hexdigest()
            hashlib.sha256(record).hexdigest()

    def chain() -> None:
        tree = _parse(bundle)
        report = Report()
        for name, events in tree.streams.items():
            _check_chain(report, name, events)
        assert report.ok

    def verify() -> None:
        report = verify_bundle(bundle, trusted)
        assert report.ok, report.text()

    sides = {"raw sha256": raw, "chain check": chain, "full verify": verify}
    times: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, go in sides.items():
            started, cpu_started = time.perf_counter(), time.process_time()
            go()
            times[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - cpu_started)
    base = count / statistics.median(times["raw sha256"])
    base_cpu = count / statistics.median(cpu["raw sha256"])
    rows = []
    for name, values in times.items():
        rate = count / statistics.median(values)
        rate_cpu = count / statistics.median(cpu[name])
        rows.append([name, f"{rate:,.0f}", f"{rate / base:.3f}", f"{rate_cpu / base_cpu:.3f}"])
    print(f"{count} events ({size:.0f} bytes hashed per event on average), {rounds} rounds")
    print(table(["case", "events/s", "ratio to raw", "cpu ratio"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
