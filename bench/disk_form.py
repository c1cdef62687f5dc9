"""Disk form benchmark: where the bytes of a stored item go, beside the SDK's ``SQLiteSession``.

Run: ``python bench/disk_form.py`` (``--quick`` for a smoke run: 20 sessions).

Sessions of support turns (a user message, a tool call, its output and an answer per turn,
realistic sizes: ``bench/ledger.py``'s turns), 100 items each, written one turn per
``add_items`` through ``JournalSession`` on a SQLite file and through the SDK's
``SQLiteSession`` on another. Bytes are each database file and its WAL after ``PRAGMA
wal_checkpoint(TRUNCATE)`` (``page_count * page_size``), over the items stored: ours as the
store writes by default (every value as given) and opened with ``?compress=zstd``. Then where
the compressed file's bytes go: each table and index (SQLite's ``dbstat``: pages, payload), and
the columns that hold text, as stored (zstd with a dictionary: the store's stored form) and as
written: the events' data and metadata, and inside the data the SDK's raw item kept for exact
replay (``extensions.openai.item_json``); the read model's item rows. Beside the default
form, its floors: the file's bytes after each change its stored form could make, measured on a
copy (``bench/_disk_floors.py``).

Target: at most 2x the SDK's bytes per item.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents import SQLiteSession

from _common import run_publishing, table
from _disk_floors import floors
from agentjournal import Journal
from agentjournal.store.sqlite._stored import Unpacker
from ledger import turn

ITEMS_PER_SESSION = 100
TARGET = 2.0


def file_bytes(path: Path) -> int:
    """The database's bytes after a checkpoint that empties its WAL."""
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()
    wal = Path(f"{path}-wal")
    return int(pages * size + (wal.stat().st_size if wal.exists() else 0))


def items_of(session: int) -> list[list[Any]]:
    """A session's items, turn by turn."""
    turns = ITEMS_PER_SESSION // 4
    return [turn(session * turns + n) for n in range(turns)]


async def write_ours(path: Path, sessions: int, compress: bool) -> None:
    async with Journal.open(
        f"sqlite:///{path}" + ("?compress=zstd" if compress else "")
    ) as journal:
        for s in range(sessions):
            session = journal.session(f"s{s}")
            for items in items_of(s):
                await session.add_items(items)


async def write_sdk(path: Path, sessions: int) -> None:
    for s in range(sessions):
        session = SQLiteSession(f"s{s}", str(path))
        for items in items_of(s):
            await session.add_items(items)
        session.close()


def breakdown(path: Path, items: int) -> list[list[str]]:
    """Bytes per item of each table and index, and of the columns that hold text."""
    db = sqlite3.connect(path)
    rows: list[list[str]] = []
    try:
        try:
            parts = db.execute(
                "SELECT name, sum(pgsize), sum(payload) FROM dbstat GROUP BY name ORDER BY 2 DESC"
            ).fetchall()
        except sqlite3.OperationalError:  # a SQLite built without dbstat
            parts = []
        for name, pages, payload in parts:
            rows.append(
                [f"  table/index {name}", f"{pages / items:,.0f}", f"{payload / items:,.0f}"]
            )
        columns = {
            "events.data (stored)": "SELECT sum(length(data)) FROM events",
            "events.metadata (stored)": "SELECT sum(length(metadata)) FROM events",
            "events.id, type, others": ("SELECT sum(length(id) + length(type) + 24) FROM events"),
            "items.item (read model, stored)": "SELECT sum(length(item)) FROM items",
            "dictionaries": "SELECT sum(length(content)) FROM dictionaries",
        }
        for name, query in columns.items():
            total = db.execute(query).fetchone()[0] or 0
            rows.append([f"  column {name}", "", f"{total / items:,.0f}"])
        rows.extend(_as_written(db, items))
        keys = db.execute("SELECT count(*), sum(length(metadata)) FROM events").fetchone()
        rows.append(
            [
                "  events per item; metadata per event (stored)",
                f"{keys[0] / items:.2f}",
                f"{keys[1] / keys[0]:,.0f}",
            ]
        )
    finally:
        db.close()
    return rows


def _as_written(db: sqlite3.Connection, items: int) -> list[list[str]]:
    """Bytes per item of the text columns as written (decompressed from the stored form),
    and inside the data the raw item kept for exact replay."""
    unpack = Unpacker(db).unpack
    data = metadata = raw = 0
    for stored_data, stored_metadata, dictionary in db.execute(
        "SELECT data, metadata, dictionary FROM events"
    ):
        written = unpack(bytes(stored_data), dictionary)
        data += len(written)
        metadata += len(unpack(bytes(stored_metadata), dictionary))
        try:
            body = json.loads(written)
        except ValueError:
            continue
        kept = body.get("extensions", {}).get("openai", {}).get("item_json")
        if isinstance(kept, str):
            raw += len(json.dumps(kept)) - 2  # as the data holds it, escaped
    texts = sum(
        len(unpack(item, dictionary) if isinstance(item, bytes) else item.encode())
        for item, dictionary in db.execute("SELECT item, dictionary FROM items")
    )
    return [
        ["  column events.data as written", "", f"{data / items:,.0f}"],
        ["  of events.data: the raw item (item_json)", "", f"{raw / items:,.0f}"],
        ["  column events.metadata as written", "", f"{metadata / items:,.0f}"],
        ["  column items.item as written", "", f"{texts / items:,.0f}"],
    ]


async def run(sessions: int) -> list[list[str]]:
    directory = Path(tempfile.mkdtemp(prefix="agentjournal-disk-form-"))
    plain, ours, sdk = directory / "plain.db", directory / "ours.db", directory / "sdk.db"
    await write_ours(plain, sessions, compress=False)
    await write_ours(ours, sessions, compress=True)
    await write_sdk(sdk, sessions)
    items = sessions * ITEMS_PER_SESSION
    sdk_bytes = file_bytes(sdk)
    rows = [
        [
            f"{items:,} items in {sessions:,} sessions: SQLiteSession",
            f"{sdk_bytes / items:,.0f}",
            "",
        ]
    ]
    for path, form in ((plain, "stored as given (default)"), (ours, "?compress=zstd")):
        ratio = file_bytes(path) / sdk_bytes
        rows.append(
            [
                f"agentjournal, {form} (ratio {ratio:.2f}, "
                f"{'ok' if ratio <= TARGET else 'MISSED'} <= {TARGET:.0f}x)",
                f"{file_bytes(path) / items:,.0f}",
                "",
            ]
        )
    for name, size in floors(plain):
        ratio = size / sdk_bytes
        rows.append(
            [f"  floor, stored as given: {name} (ratio {ratio:.2f})", f"{size / items:,.0f}", ""]
        )
    rows.extend(breakdown(ours, items))
    shutil.rmtree(directory)
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 sessions, for a smoke run")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions (default: 1,000)")
    args = parser.parse_args(argv)
    rows = asyncio.run(run(20 if args.quick else args.sessions))
    print(table(["bytes per item", "pages", "payload"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("disk_form", main, sys.argv[1:]))
