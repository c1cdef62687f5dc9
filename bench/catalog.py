"""Catalog benchmark: ``agentjournal sessions`` cold and warm at 100,000 items and 1,000,000 events.

Run: ``python bench/catalog.py`` (``--quick`` for a smoke run: 20 sessions of 100 items,
300 of the list benchmark's).

Two generated stores (``bench/_stores.py``, cached in the temporary folder): 1,000
sessions of 100 items (copies of one session the SDK's ``Runner`` wrote through a
signing journal: handoffs, tool calls, signed checkpoints, 171 events each), and
``bench/list.py``'s 10,000 sessions of about 1,000,000 events. Each copy is re-chained
and re-signed (:func:`copy_of`), so the catalog folds and checks it as a real one.

Cases, each ``agentjournal sessions`` as a fresh process (``python -m agentjournal.cli``,
stdout a pipe), the signing key trusted with ``--pubkey`` so every checkpoint's signature
is checked once:

  cold       the store never catalogued (a fresh copy of the cached file): read the
             global order, fold, check, save, print (in two processes when a core is
             free: ``read/catalog/parts.py``; the cpu column counts both)
  warm       the next call: load the saved catalog, find nothing new, print

Beside them, the floors, in this process:

  floor: raw read       one read of every event's columns in position order with
                        ``sqlite3`` (no fold): the least any fold of the store pays
  floor: fold only      the catalog's fold of the same events already read (the fold's
                        Python without I/O; no signature checks)

Targets: cold <= 2 s and warm <= 0.5 s at 100,000 items; cold <= 15 s at 1,000,000 events.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import orjson

from _common import run_publishing, table
from agentjournal._digests import data_digest
from agentjournal.ledger import SigningKey
from agentjournal.ledger.chain import GENESIS, HASH_KEY, PREV_KEY, SEQ_KEY, chain_hash
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import signed_event_id
from agentjournal.read import catalog
from agentjournal.store import open_store
from agentjournal.store.contract import (
    AppendRequest,
    NewEvent,
    RecordedEvent,
    StreamState,
)
from agentjournal.store.contract import event_id as derived_id
from agentjournal.store.sqlite._stored import Unpacker

TEMPLATE = "tmpl-00000000"


def copy_of(
    events: Sequence[RecordedEvent],
    session_id: str,
    key: SigningKey,
    *,
    template: str = TEMPLATE,
    words: Mapping[str, str] | None = None,
) -> list[AppendRequest]:
    """The template's events for ``session_id``: one request per stream, re-chained, the
    checkpoint re-signed over the copy's heads; each of ``words`` replaced by its value
    in every event's data and metadata (placeholders the template was written with)."""
    streams: dict[str, list[NewEvent]] = {}
    hashes: dict[str, list[str]] = {}
    swaps = [(template, session_id), *(words or {}).items()]
    byte_swaps = [(old.encode(), new.encode()) for old, new in swaps]
    for event in events:
        stream = event.stream.replace(template, session_id)
        data = event.data
        for old_bytes, new_bytes in byte_swaps:
            data = data.replace(old_bytes, new_bytes)
        metadata = {}
        for k, v in event.metadata.items():
            if k not in (SEQ_KEY, PREV_KEY, HASH_KEY):
                for old, new in swaps:
                    v = v.replace(old, new)
                metadata[k] = v
        revision = len(streams.setdefault(stream, []))
        chain = hashes.setdefault(stream, [])
        prev = chain[-1] if chain else GENESIS
        new_id = derived_id("bench", session_id, stream, revision)
        if event.type == CHECKPOINT:
            signed = Checkpoint.decode(json.loads(event.data))
            heads = {
                name.replace(template, session_id): (
                    rev,
                    hashes[name.replace(template, session_id)][rev],
                )
                for name, (rev, _) in signed.heads.items()
            }
            checkpoint = Checkpoint.sign(
                key,
                session_id,
                heads,
                datetime.now(UTC),
                sequence=revision,
                previous=prev,
                metadata=metadata,
            )
            data = checkpoint.encode()
            new_id = signed_event_id(stream, checkpoint.signature)
        metadata[SEQ_KEY] = str(revision)
        metadata[PREV_KEY] = prev
        metadata[HASH_KEY] = chain_hash(
            stream, revision, str(new_id), event.type, data_digest(data), metadata
        )
        chain.append(metadata[HASH_KEY])
        streams[stream].append(NewEvent(event.type, data, metadata, new_id))
    return [
        AppendRequest(stream, batch, StreamState.NO_STREAM) for stream, batch in streams.items()
    ]


ROUNDS = 3  # of each CLI case (cold at 1,000,000 events: one)


def _cli(path: Path, pubkey: Path) -> tuple[float, float]:
    """Seconds of one ``agentjournal sessions`` on ``path``, as a fresh process: wall, CPU."""
    from _stores import child_cpu

    command = [sys.executable, "-m", "agentjournal.cli", "sessions"]
    command += ["--uri", f"sqlite:///{path}", "--pubkey", str(pubkey)]
    started, cpu = time.perf_counter(), child_cpu()
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=1200)
    took, cpu = time.perf_counter() - started, child_cpu() - cpu
    if done.returncode != 0 or "integrity" not in done.stdout:
        raise RuntimeError(f"agentjournal sessions: {done.returncode} {done.stderr.strip()}")
    return took, cpu


def _raw_read(path: Path) -> tuple[float, int]:
    """Seconds of one read of every event's columns in position order (sqlite3, pages),
    their values as written (decompressed from the stored form, as any reader pays)."""
    db = sqlite3.connect(path)
    try:
        unpack = Unpacker(db).unpack
        started, count, after = time.perf_counter(), 0, 0
        sql = (
            "SELECT s.name, e.position, e.revision, e.id, e.type, e.data, e.metadata, "
            "e.recorded_at, e.dictionary FROM events e JOIN streams s ON s.id = e.stream_id "
            "WHERE e.position > ? ORDER BY e.position LIMIT 20000"
        )
        while True:
            rows = db.execute(sql, (after,)).fetchall()
            for row in rows:
                unpack(row[5], row[8])
                unpack(row[6], row[8])
            count += len(rows)
            if len(rows) < 20000:
                return time.perf_counter() - started, count
            after = rows[-1][1]
    finally:
        db.close()


async def _read_sample(path: Path, limit: int) -> list[list[RecordedEvent]]:
    """The first ``limit`` events as the catalog reads them (its pages)."""
    store = await open_store(f"sqlite:///{path}", create=False)
    try:
        return await catalog.listing.read_pages(store, None, limit)
    finally:
        await store.close()


def _fold_only(pages: list[list[RecordedEvent]]) -> tuple[float, float, int]:
    """Seconds (wall, CPU) of the catalog's fold of ``pages``, already read."""
    fold = catalog.Catalog()
    started, cpu = time.perf_counter(), time.process_time()
    count = catalog.listing.fold_pages(fold, pages)
    return time.perf_counter() - started, time.process_time() - cpu, count


def _least_chain(pages: list[list[RecordedEvent]]) -> tuple[float, float, int]:
    """Seconds (wall, CPU) of the least chain check of ``pages`` in Python: per event, the
    SHA-256 of its data and of its chain record (``[2, stream, revision, id, type,
    data_sha256, metadata]``, sorted compact JSON), metadata and ids decoded beforehand."""
    ready = []
    for page in pages:
        for event in page:
            covered = dict(event.metadata)
            covered.pop(HASH_KEY, None)
            ready.append(
                (event.stream, event.revision, str(event.id), event.type, event.data, covered)
            )
    sha256, dumps, option = hashlib.sha256, orjson.dumps, orjson.OPT_SORT_KEYS
    started, cpu = time.perf_counter(), time.process_time()
    for stream, revision, event_id, kind, data, covered in ready:
        digest = sha256(data).hexdigest()
        sha256(
            dumps([2, stream, revision, event_id, kind, digest, covered], option=option)
        ).hexdigest()
    return time.perf_counter() - started, time.process_time() - cpu, len(ready)


FOLD_SAMPLE = 250_000  # events the in-process floors fold (scaled to the whole store)


async def cases(
    name: str, kept: Path, key: SigningKey, cold_rounds: int, target: str
) -> list[list[str]]:
    from _stores import event_count, working_copy

    pubkey = kept.with_name("key.pub")
    pubkey.write_text(key.public_pem())
    events = event_count(kept)
    colds: list[tuple[float, float]] = []
    warms: list[tuple[float, float]] = []
    for _ in range(cold_rounds):
        path = working_copy(kept, "catalog-run.db")
        colds.append(await asyncio.to_thread(_cli, path, pubkey))
        for _ in range(ROUNDS):
            warms.append(await asyncio.to_thread(_cli, path, pubkey))
    raw, counted = await asyncio.to_thread(_raw_read, kept)
    assert counted == events
    pages = await _read_sample(kept, FOLD_SAMPLE)
    sample = sum(len(page) for page in pages)
    scale = events / sample
    fold = _fold_only(pages)  # first: the least chain decodes every event's metadata and id
    chain = _least_chain(pages)
    cold_target, warm_target = target.split("/")
    sampled = "" if sample == events else f", {sample:,} folded"
    return [
        [f"{name}: cold", *_median(colds), cold_target, _met(colds, cold_target)],
        [f"{name}: warm", *_median(warms), warm_target, _met(warms, warm_target)],
        [f"{name}: floor: raw read", f"{raw:.2f}", "", "", f"{events / raw:,.0f} events/s"],
        [
            f"{name}: floor: least chain",
            f"{chain[0] * scale:.2f}",
            f"{chain[1] * scale:.2f}",
            "",
            f"{sample / chain[1]:,.0f} events/cpu s{sampled}",
        ],
        [
            f"{name}: floor: fold only",
            f"{fold[0] * scale:.2f}",
            f"{fold[1] * scale:.2f}",
            "",
            f"{sample / fold[1]:,.0f} events/cpu s{sampled}",
        ],
    ]


def _median(times: list[tuple[float, float]]) -> list[str]:
    return [
        f"{statistics.median(w for w, _ in times):.2f}",
        f"{statistics.median(c for _, c in times):.2f}",
    ]


def _met(times: list[tuple[float, float]], target: str) -> str:
    if not target:
        return ""
    wall = statistics.median(w for w, _ in times)
    return "ok" if wall <= float(target.removeprefix("<= ")) else "MISSED"


async def run(quick: bool, rebuild: bool) -> list[list[str]]:
    from _stores import event_count, event_store, item_store  # they copy with copy_of

    items = await item_store(20 if quick else 1000, rebuild)
    rows = await cases(f"{items.items:,} items", items.ours, items.key, ROUNDS, "<= 2/<= 0.5")
    path, key = await event_store(300 if quick else 10_000, rebuild)
    events = event_count(path)
    rows += await cases(f"{events:,} events", path, key, 1, "<= 15/")
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small stores, for a smoke run")
    parser.add_argument("--rebuild", action="store_true", help="write the cached stores again")
    args = parser.parse_args(argv)
    rows = asyncio.run(run(args.quick, args.rebuild))
    print(table(["case", "wall s", "cpu s", "target", "note"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("catalog", main, sys.argv[1:]))
