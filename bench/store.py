"""Event store benchmark: our stores side by side with raw sqlite3 in one run.

Run: ``python bench/store.py`` (``--quick`` for a smoke run). Every case does the
same work with the same bytes on raw ``sqlite3`` (one table, same pragmas: WAL,
``synchronous=FULL``, one transaction per append) and on each store, and prints
throughput with the ratio store/raw. Machines here are noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from _common import measure, run_publishing, table
from agentjournal.store import AppendRequest, EventStore, NewEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.testing.kurrentdb_double import bench_store

StoreFactory = Callable[[str], contextlib.AbstractAsyncContextManager[EventStore]]


@dataclass(frozen=True)
class Sizes:
    """How much work each case does."""

    single: int
    batches: int
    many: int
    long_stream: int
    tail_reads: int
    full_read: int


FULL = Sizes(
    single=500, batches=100, many=300, long_stream=100_000, tail_reads=2000, full_read=10_000
)
QUICK = Sizes(single=10, batches=2, many=10, long_stream=2_000, tail_reads=20, full_read=500)


def payload(n: int) -> NewEvent:
    """A realistic session event: ~400 bytes of JSON data and string metadata."""
    data = json.dumps(
        {
            "content": f"Message number {n}: " + "lorem ipsum dolor sit amet " * 10,
            "message_index": n,
            "extensions": {"openai": {"item_json": '{"role":"user"}'}},
        }
    ).encode()
    return NewEvent(
        type="UserMessageReceived",
        data=data,
        metadata={"$schema_version": "2", "trace_id": "0af7651916cd43dd8448eb211c80319c"},
        id=uuid.uuid4(),
    )


# -- raw sqlite3: the baseline ------------------------------------------------


class RawSQLite:
    """The same inserts and selects on bare sqlite3, no checks, no threads."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")
        self.db.execute(
            "CREATE TABLE events (position INTEGER PRIMARY KEY, stream TEXT, revision INTEGER,"
            " id BLOB, type TEXT, data BLOB, metadata BLOB)"
        )
        self.db.execute("CREATE UNIQUE INDEX by_stream ON events(stream, revision)")
        self.heads: dict[str, int] = {}

    def append(self, stream: str, events: list[NewEvent]) -> None:
        self.append_many([(stream, events)])

    def append_many(self, parts: list[tuple[str, list[NewEvent]]]) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        for stream, events in parts:
            head = self.heads.get(stream, -1)
            db.executemany(
                "INSERT INTO events(stream, revision, id, type, data, metadata)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (stream, head + i, e.id.bytes, e.type, e.data, json.dumps(dict(e.metadata)))
                    for i, e in enumerate(events, start=1)
                ],
            )
            self.heads[stream] = head + len(events)
        db.execute("COMMIT")

    def tail(self, stream: str, n: int) -> list[tuple[object, ...]]:
        return self.db.execute(
            "SELECT position, revision, id, type, data, metadata FROM events"
            " WHERE stream = ? ORDER BY revision DESC LIMIT ?",
            (stream, n),
        ).fetchall()

    def read(self, stream: str) -> list[tuple[object, ...]]:
        return self.db.execute(
            "SELECT position, revision, id, type, data, metadata FROM events"
            " WHERE stream = ? ORDER BY revision",
            (stream,),
        ).fetchall()


# -- cases ----------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of the table: median rates over interleaved rounds."""

    case: str
    store: str
    unit: str
    raw: float
    ours: float

    @property
    def ratio(self) -> float:
        return self.ours / self.raw if self.raw else float("nan")


async def compare(
    case: str,
    store_name: str,
    unit: str,
    count: int,
    raw_round: Callable[[], object],
    our_round: Callable[[], Awaitable[object]],
) -> Row:
    """Run raw and ours in alternating rounds; report each side's median rate."""
    raw_seconds, our_seconds = await measure(raw_round, our_round)
    return Row(case, store_name, unit, count / raw_seconds, count / our_seconds)


async def fill(store: EventStore, raw: RawSQLite, stream: str, count: int) -> None:
    """Write ``count`` events to ``stream`` in both, in chunks, untimed."""
    head: int | StreamState = StreamState.NO_STREAM
    for start in range(0, count, 1000):
        chunk = [payload(n) for n in range(start, min(start + 1000, count))]
        head = (await store.append(stream, chunk, expected=head)).revision
        raw.append(stream, chunk)


class Appender:
    """Appends to streams of one store at exact revisions, remembering heads."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self.heads: dict[str, int] = {}

    async def append(self, stream: str, events: list[NewEvent]) -> None:
        expected = self.heads.get(stream, StreamState.NO_STREAM)
        self.heads[stream] = (await self.store.append(stream, events, expected=expected)).revision

    async def append_many(self, parts: list[tuple[str, list[NewEvent]]]) -> None:
        results = await self.store.append_many(
            [
                AppendRequest(stream, events, self.heads.get(stream, StreamState.NO_STREAM))
                for stream, events in parts
            ]
        )
        for result in results:
            self.heads[result.stream] = result.revision


async def run_cases(name: str, store: EventStore, raw: RawSQLite, sizes: Sizes) -> list[Row]:
    ours = Appender(store)
    rows: list[Row] = []

    singles = [payload(n) for n in range(sizes.single)]

    def raw_single() -> None:
        for event in singles:
            raw.append("single", [event])

    async def our_single() -> None:
        for event in singles:
            await ours.append("single", [event])

    rows.append(
        await compare("append 1 event", name, "events/s", sizes.single, raw_single, our_single)
    )

    batches = [[payload(n) for n in range(100)] for _ in range(sizes.batches)]

    def raw_batched() -> None:
        for batch in batches:
            raw.append("batched", batch)

    async def our_batched() -> None:
        for batch in batches:
            await ours.append("batched", batch)

    rows.append(
        await compare(
            "append 100-event batch",
            name,
            "events/s",
            100 * sizes.batches,
            raw_batched,
            our_batched,
        )
    )

    pairs = [
        [("parent", [payload(2 * n)]), ("child", [payload(2 * n + 1)])] for n in range(sizes.many)
    ]

    def raw_many() -> None:
        for parts in pairs:
            raw.append_many(parts)

    async def our_many() -> None:
        for parts in pairs:
            await ours.append_many(parts)

    rows.append(
        await compare("append_many 2 streams", name, "commits/s", sizes.many, raw_many, our_many)
    )

    for length in sorted({1_000, sizes.long_stream}):
        stream = f"long-{length}"
        await fill(store, raw, stream, length)

        def raw_tail(stream: str = stream) -> None:
            for _ in range(sizes.tail_reads):
                raw.tail(stream, 20)

        async def our_tail(stream: str = stream) -> None:
            for _ in range(sizes.tail_reads):
                await store.read(stream, backwards=True, limit=20)

        rows.append(
            await compare(
                f"tail read 20 of {length:,}", name, "reads/s", sizes.tail_reads, raw_tail, our_tail
            )
        )

    await fill(store, raw, "full", sizes.full_read)

    async def our_full() -> None:
        await store.read("full")

    rows.append(
        await compare(
            f"full read of {sizes.full_read:,}",
            name,
            "events/s",
            sizes.full_read,
            lambda: raw.read("full"),
            our_full,
        )
    )
    return rows


@contextlib.asynccontextmanager
async def sqlite_store(directory: str) -> AsyncIterator[EventStore]:
    store = await SQLiteEventStore.open(os.path.join(directory, "agentjournal.db"))
    try:
        yield store
    finally:
        await store.close()


def stores() -> dict[str, StoreFactory]:
    """The stores to measure, by name."""
    return {"sqlite": sqlite_store, "kurrentdb (gRPC double)": bench_store}


def print_table(rows: list[Row]) -> None:
    print(
        table(
            ["case", "store", "raw sqlite3", "agentjournal", "ratio", "unit"],
            [
                [r.case, r.store, f"{r.raw:,.0f}", f"{r.ours:,.0f}", f"{r.ratio:.2f}", r.unit]
                for r in rows
            ],
        )
    )


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--store", action="append", help="only these stores (repeatable)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    rows: list[Row] = []
    for name, factory in stores().items():
        if args.store and name.split()[0] not in args.store:
            continue
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory() as directory:
            raw = RawSQLite(os.path.join(directory, "raw.db"))
            async with factory(directory) as store:
                rows.extend(await run_cases(name, store, raw, sizes))
            raw.db.close()
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("store", lambda argv: asyncio.run(main(argv)), sys.argv[1:]))
