"""Ledger benchmark: verification throughput beside raw hashlib.sha256 over the same bytes.

Run: ``python bench/ledger.py`` (``--quick`` for a smoke run). A session of
support turns (a user message, a tool call, its result and an answer per
turn, realistic sizes) is written through ``JournalSession`` with a signing
key, exported as a bundle and read back from the bytes ``bundle export`` writes by
``parse_bundle``, as ``agentjournal verify`` reads a bundle file, and then, round by round:

- **raw**: ``hashlib.sha256`` of every event's data and of its chain record
  (``ledger.chain.record_bytes``: the exact bytes the verifier hashes, format 2
  for events written now; precomputed, so only hashing is timed);
- **chain**: the verifier's reading of the bundle into records (their forms checked)
  and its integrity check (places, digests, chain records, chain links, view
  commitments);
- **verify**: the whole offline verification (structure, integrity,
  checkpoints, twins, delegation, containment), of the parsed bundle, in this
  process only (``workers=1``);
- **verify, of the exporter's objects**: the same, of the bundle as the exporter built
  it, not parsed from its file: its text is not vouched for as exactly ``str`` (what
  ``parse_bundle`` gives), so every metadata key and value is looked at for a subclass;
- **verify, 2 workers**: the same with ``workers=2``: a forked child checks the views
  and runs the checks after integrity but the checkpoints' on the second core while this
  process checks the rest of the chains and runs the checkpoints' check (by default
  the verifier forks so only when a core is free);
- **seal**: the write side, ``engine.sealing.seal_event`` (view commitment and
  chain keys) of every event again, from its metadata without the chain keys;
- **floor: least chain**: the least any Python verifier of these events does per
  event whatever else it checks: check its place (revision and ``aj.seq``), build the
  event's chain record from its fields (one ``orjson`` call for format 2), hash it and
  the data (their bytes ready, as for raw), compare both digests and the link to the
  previous hash (the genesis hash first); nothing else;
- **floor: + signatures**: that, plus checking the Ed25519 signature of every
  checkpoint in the bundle (their signed bytes ready) — the least a verifier that
  checks the ledger's signatures pays, one after the other on one thread;
- **floor: least verifier**: that, from the parsed bundle: every event's fields read, none
  missing or unknown, each exactly of its type, its metadata text (found by joining it, which
  fails on anything else: a parsed bundle holds no subclass of ``str``) and all of its text
  Unicode (``least_read``, the data encoded for hashing), and every tool call's view
  recomputed from its data and compared with its commitment (``least_view``: the shape the
  Agents SDK writes, with the checks that make orjson's digests the exact ones). The least
  views are checked equal to the verifier's own (untimed). The signatures are checked over
  their signed bytes, decoded beforehand; the checks after integrity (containment, the tree's
  twins, approvals, the checkpoints' decoding and coverage) are not in it: it is the least of
  what verify does;
- **floor: least integrity + our checks after it**: the least verifier's reading, chains and
  views, then the verifier's own checks after integrity as they are (the checkpoints'
  signatures among them; their report checked to be the verifier's), given the records they
  read and the call markers the verifier's views made (both beforehand, untimed): a lower
  bound of any verifier that keeps those checks as they are, which would also have to build
  the records;
- **floor: least verifier + least checks after it**: the least verifier, its checkpoints
  decoded from their data rather than given, then the least the checks after integrity do
  on this tree (``least_after``): one look at every event (a type and metadata none of those
  checks needs more of), each tool call's ids its item's, each checkpoint's place, fields,
  signature and heads, and the last one covering every event. It is checked to fail where it
  should (untimed). A lower bound of any verifier that keeps every check.

Then a second table: one process's verify in its parts, each timed alone
(``parts_table``: reading, chains, views, the checks after integrity and the whole, ours
beside the least's), and beside the reading, the closest design's in Python
(``closest_read``: a record only for the events the checks after integrity read): where
ours spends more than the least, and what the closest design would take back.

Throughput is events per second; the ratio is ours / raw (higher is better). The CPU
ratio counts the CPU of every process a case ran, the forked child's included (so on two
cores the 2-worker case's wall clock ratio can beat its CPU ratio). Rounds alternate
between the cases, but the 2-worker case's come last: a fork leaves this process a page
fault to take at its first write to each page it shared, which would slow the others.
Goal: verify >= 25% of raw; the floor rows say how much of that any Python verifier
has left for the checks beyond them, and the last, where a Python verifier that keeps every
check could meet it (bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from _common import run_publishing, table
from _least_verify import (
    check_closest_read,
    check_least_after,
    closest_read,
    least_after,
    least_chain,
    least_read,
    least_verify,
    least_view,
    least_views,
)
from agentjournal import Journal, _forked
from agentjournal._forked import forking_safe
from agentjournal._gc import no_collection
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Report, _after_integrity, verify_bundle
from agentjournal.audit.verify._integrity import (
    Markers,
    check_chain,
    first_problem,
    first_view_problem,
)
from agentjournal.audit.verify._parallel import check_integrity
from agentjournal.audit.verify._parse import (
    Parsed,
    bundle_records,
    parse_bundle,
    read_bundle,
)
from agentjournal.engine.sealing import seal_event
from agentjournal.events import (
    REDACTED_KEY,
)
from agentjournal.ledger import SigningKey
from agentjournal.ledger.chain import (
    CHAIN_KEYS,
    HASH_KEY,
    PREV_KEY,
    record_bytes,
)
from agentjournal.ledger.checkpoints import Checkpoint
from agentjournal.ledger.redaction import view_commitment

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
            record = record_bytes(
                stream["name"],
                event["revision"],
                event["id"],
                event["type"],
                event["data_sha256"],
                event["metadata"],
            )
            pairs.append((event["data"].encode(), record))
    return pairs


def signature_inputs(bundle: dict[str, Any], key: SigningKey) -> list[tuple[bytes, bytes]]:
    """Every checkpoint's signature and the bytes it covers, decoded beforehand."""
    found = []
    for stream in bundle["streams"]:
        for event in stream["events"]:
            if event["type"] == "agentjournal.Checkpoint":
                checkpoint = Checkpoint.decode(json.loads(event["data"]))
                found.append((base64.b64decode(checkpoint.signature), checkpoint.signed_bytes()))
    assert found, "no checkpoint in the bundle"
    for signature, signed in found:
        key.public_key.verify(signature, signed)  # raises InvalidSignature if wrong
    return found


def seal_inputs(bundle: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What ``seal_event`` is given for each event: its place, id, type, data, its metadata
    without the chain keys (copied again per round: sealing adds them) and the previous hash."""
    found = []
    for stream in bundle["streams"]:
        for event in stream["events"]:
            metadata = {k: v for k, v in event["metadata"].items() if k not in CHAIN_KEYS}
            found.append(
                (
                    stream["name"],
                    event["revision"],
                    uuid.UUID(event["id"]),
                    event["type"],
                    event["data"].encode(),
                    metadata,
                    event["metadata"][PREV_KEY],
                    event["metadata"][HASH_KEY],
                )
            )
    return found


def parts_table(
    bundle: Parsed, trusted: dict[str, Any], options: dict[str, Any], rounds: int
) -> str:
    """One process's verify in its parts, each timed alone (the collector off, as verify
    runs it), ours beside the least's, in alternating rounds: reading the bundle's events
    (ours into records, the least's into tuples, each event's data encoded for hashing there,
    which ours does in the chains; built and freed), the chains (every check
    of the integrity stage but the views), the views (ours with each event's data hashed
    again, as the one-process path does not), the checks after integrity (ours given the
    call markers our views made; the least's given the call ids its views found), and the
    whole of each; and beside the reading, the closest design's (:func:`closest_read`)."""
    session_id = bundle["session_id"]
    tree, unformed = read_bundle(bundle)
    assert not unformed, unformed
    streams = {name: list(events) for name, events in tree.streams.items()}
    markers: Markers = {}
    for stream in streams.values():
        assert first_view_problem(stream, 0, len(stream), markers) is None
    least = least_read(bundle)
    calls: dict[int, str] = {}
    least_views(least, calls)
    check_closest_read(bundle, streams)
    built = sum(row[7] is not None for row in closest_read(bundle, session_id))

    def our_chains() -> None:
        for name, stream in streams.items():
            assert first_problem(name, stream, 0, len(stream), views=False) is None

    def our_views() -> None:
        made: Markers = {}
        for stream in streams.values():
            assert first_view_problem(stream, 0, len(stream), made) is None

    def our_after() -> None:
        reports: dict[str, Report | None] = {}
        _after_integrity(
            Report(), session_id, streams, markers, trusted, **options, reports=reports
        )
        assert all(made is not None and made.ok for made in reports.values()), reports

    def our_whole() -> None:
        assert verify_bundle(bundle, trusted, workers=1).ok

    def closest() -> None:
        closest_read(bundle, session_id)

    sides: dict[str, Callable[[], object]] = {
        "reading, ours": lambda: read_bundle(bundle),
        "reading, least": lambda: least_read(bundle),
        "reading, closest": closest,
        "chains, ours": our_chains,
        "chains, least": lambda: least_chain(least),
        "views, ours": our_views,
        "views, least": lambda: least_views(least),
        "after integrity, ours": our_after,
        "after integrity, least": lambda: least_after(least, calls, session_id, trusted),
        "whole, ours": our_whole,
        "whole, least": lambda: least_verify(bundle, trusted),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    with no_collection():
        for _ in range(rounds):
            for name, side in sides.items():
                started = time.perf_counter()
                side()  # what it returns is freed before the clock is read
                times[name].append(time.perf_counter() - started)
    ms = {name: statistics.median(values) * 1000 for name, values in times.items()}
    rows = []
    for part in ("reading", "chains", "views", "after integrity", "whole"):
        ours, floor = ms[f"{part}, ours"], ms[f"{part}, least"]
        closest_ms = f"{ms['reading, closest']:.1f}" if part == "reading" else ""
        rows.append([part, f"{ours:.1f}", f"{floor:.1f}", f"{floor / ours:.2f}", closest_ms])
    events = sum(len(stream) for stream in streams.values())
    return (
        f"one process's verify in parts, each timed alone, ms (medians of {rounds}); the "
        f"closest design's reading builds records for {built:,} of {events:,} events\n"
        + table(["part", "ours", "least", "least / ours", "closest design"], rows)
    )


def _reaped() -> None:
    """Wait (untimed) until every child a verification forked has ended and been reaped."""
    while _forked._ended:
        time.sleep(0.001)
        _forked.reap()


def _cpu() -> float:
    """CPU seconds of this process and of its children it waited for (a forked verifier)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    turns, rounds = (50, 3) if args.quick else (2000, 9)
    key = SigningKey.generate()
    exported = asyncio.run(recorded(turns, key))
    # As `agentjournal verify` reads the file `bundle export` writes.
    bundle = parse_bundle(json.dumps(exported, ensure_ascii=False).encode())
    trusted = {key.key_id: key.public_key}
    pairs = raw_inputs(bundle)
    sealing = seal_inputs(bundle)
    least = least_read(bundle)  # for the least chain's rows: its fields ready, as for raw
    signatures = signature_inputs(bundle, key)
    count = len(pairs)
    size = sum(len(d) + len(r) for d, r in pairs) / count

    def raw() -> None:
        for data, record in pairs:
            hashlib.sha256(data).hexdigest()
            hashlib.sha256(record).hexdigest()

    def chain() -> None:
        tree = bundle_records(bundle)
        report = Report()
        for name, events in tree.streams.items():
            check_chain(report, name, events)
        assert report.ok

    def verify() -> None:
        report = verify_bundle(bundle, trusted, workers=1)
        assert report.ok, report.text()

    def verify_exported() -> None:
        report = verify_bundle(exported, trusted, workers=1)
        assert report.ok, report.text()

    forked = []

    def verify_two() -> None:
        forked.append(forking_safe())
        report = verify_bundle(bundle, trusted, workers=2)
        assert report.ok, report.text()

    def seal() -> None:
        for stream, revision, id_, type_, data, metadata, prev, _ in sealing:
            seal_event(stream, revision, id_, type_, data, dict(metadata), prev)

    def check_signatures() -> None:
        public = key.public_key
        for signature, signed in signatures:
            public.verify(signature, signed)

    def least_and_signatures() -> None:
        least_chain(least)
        check_signatures()

    views = least_views(least)
    for stream in bundle["streams"]:  # the least views are the verifier's own (untimed)
        for event in stream["events"]:
            if REDACTED_KEY in event["metadata"]:
                data = event["data"].encode()
                made = view_commitment(event["type"], data, event["metadata"])
                if made is None or least_view(data)[0] != made[0]:
                    raise AssertionError(f"{stream['name']}@{event['revision']}: least view")
    assert views, "no view in the bundle"

    def least_verifier() -> None:
        read = least_read(bundle)
        least_chain(read)
        least_views(read)
        check_signatures()

    check_least_after(least, bundle["session_id"], key)

    def least_whole() -> None:
        with no_collection():  # as verify runs
            least_verify(bundle, trusted)

    # Our checks after integrity as they are (the checkpoints' signatures among them), after
    # the least's integrity stage, given the records they read and the call markers our views
    # made (both made here, untimed): a lower bound of any verifier that keeps those checks.
    tree = bundle_records(bundle)
    streams = {name: list(events) for name, events in tree.streams.items()}
    options: dict[str, Any] = {"allow_uncovered": False, "not_before": None, "policy": None}
    markers: Markers = {}
    checked = Report()
    check_integrity(checked, streams, markers, workers=1)
    assert not checked.problems, checked.text()
    assert markers, "no tool call's marker"
    whole = verify_bundle(bundle, trusted, workers=1).lines  # what the round's checks must say
    expected = whole[next(i for i, line in enumerate(whole) if line.startswith("integrity:")) + 1 :]
    assert expected, "no check after integrity reported"

    def least_then_ours() -> None:
        with no_collection():  # as verify runs, the least's part too: the lower the bound
            read = least_read(bundle)
            least_chain(read)
            least_views(read)
            reports: dict[str, Report | None] = {}
            _after_integrity(
                Report(), tree.session_id, streams, markers, trusted, **options, reports=reports
            )
        # every check ran, passed, and said what the verifier says, each in its place
        assert all(made is not None and made.ok for made in reports.values()), reports
        lines = [line for made in reports.values() if made is not None for line in made.lines]
        assert lines == expected, lines

    stream, revision, id_, type_, data, metadata, prev, stored = sealing[-1]
    assert seal_event(stream, revision, id_, type_, data, dict(metadata), prev) == stored
    sides = {
        "raw sha256": raw,
        "chain check": chain,
        "full verify": verify,
        "full verify, of the exporter's objects": verify_exported,
        "full verify, 2 workers": verify_two,
        "seal": seal,
        "floor: least chain": lambda: least_chain(least),
        f"floor: + {len(signatures)} signatures": least_and_signatures,
        f"floor: least verifier, + read, + {views} views": least_verifier,
        "floor: least integrity + our checks after it": least_then_ours,
        "floor: least verifier + least checks after it": least_whole,
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    # The forking case's rounds come after all the others: after a fork, this process takes
    # a page fault at its first write to each page it shared with the child, even once the
    # child has ended, which would slow whatever ran next (raw hashing by a third).
    forking = {"full verify, 2 workers"}
    for cases in ([n for n in sides if n not in forking], [n for n in sides if n in forking]):
        for _ in range(rounds):
            for name in cases:
                started, cpu_started = time.perf_counter(), _cpu()
                sides[name]()
                times[name].append(time.perf_counter() - started)
                _reaped()  # the child's CPU counts once it is reaped: in its own round
                cpu[name].append(_cpu() - cpu_started)
    base = count / statistics.median(times["raw sha256"])
    base_cpu = count / statistics.median(cpu["raw sha256"])
    rows = []
    for name, values in times.items():
        rate = count / statistics.median(values)
        rate_cpu = count / statistics.median(cpu[name])
        rows.append([name, f"{rate:,.0f}", f"{rate / base:.3f}", f"{rate_cpu / base_cpu:.3f}"])
    print(f"{count} events ({size:.0f} bytes hashed per event on average), {rounds} rounds")
    if not all(forked):
        print(
            f"(2 workers: {sum(forked)} of {len(forked)} rounds forked; the others ran in one "
            "process: a thread was running, or this is not Linux)"
        )
    print(table(["case", "events/s", "ratio to raw", "cpu ratio"], rows))
    print()
    print(parts_table(bundle, trusted, options, 3 if args.quick else 21))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("ledger", main, sys.argv[1:]))
