"""Disk benchmark: bytes on disk per stored item, beside the SDK's ``SQLiteSession``.

Run: ``python bench/disk.py`` (``--quick`` for a smoke run: 20 sessions).

The store is ``bench/_stores.py``'s item store: 1,000 sessions of 100 items (100,000
items), copies of one session the SDK's ``Runner`` wrote through a signing journal,
stored as the runner stores a session (events, read model rows); beside it the SDK's
``SQLiteSession`` file holding the same items. Bytes are the database file and its WAL
after ``PRAGMA wal_checkpoint(TRUNCATE)``, over the items stored, for the store as it
writes by default (every value as given) and opened with ``?compress=zstd`` (zstd with a
dictionary); the rows under each total say where our bytes are (SQLite's ``dbstat``: each
table and index, pages), and the text columns as stored beside them as written; under the
default form, its floors (``bench/_disk_floors.py``), each change measured on a copy.

Target: at most 2x the SDK's bytes per item.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
from pathlib import Path

from _common import run_publishing, table
from _disk_floors import floors
from _stores import disk_bytes, item_store
from agentjournal.store.sqlite._stored import Unpacker

TARGET = 2.0


def _parts(path: Path) -> list[tuple[str, int]]:
    """Bytes of each table and index of ``path`` (its pages), largest first."""
    db = sqlite3.connect(path)
    try:
        rows = db.execute(
            "SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        ).fetchall()
    except sqlite3.OperationalError:  # a SQLite built without dbstat
        return []
    finally:
        db.close()
    return [(str(name), int(size)) for name, size in rows]


def _text_columns(path: Path) -> list[tuple[str, int, int]]:
    """Bytes of the text columns in their stored form (compressed) and as written."""
    db = sqlite3.connect(path)
    try:
        unpack = Unpacker(db).unpack
        sizes = {"events data+metadata": [0, 0], "items.item": [0, 0]}
        for data, metadata, dictionary in db.execute(
            "SELECT data, metadata, dictionary FROM events"
        ):
            sizes["events data+metadata"][0] += len(data) + len(metadata)
            sizes["events data+metadata"][1] += len(unpack(data, dictionary)) + len(
                unpack(metadata, dictionary)
            )
        for item, dictionary in db.execute("SELECT item, dictionary FROM items"):
            text = unpack(item, dictionary) if isinstance(item, bytes) else item.encode()
            sizes["items.item"][0] += len(item) if isinstance(item, bytes) else len(item.encode())
            sizes["items.item"][1] += len(text)
    finally:
        db.close()
    return [(name, stored, written) for name, (stored, written) in sizes.items()]


async def run(sessions: int, rebuild: bool) -> list[list[str]]:
    rows = []
    for compress in (False, True):
        store = await item_store(sessions, rebuild, compress)
        ours, sdk = disk_bytes(store.ours), disk_bytes(store.sdk)
        per_ours, per_sdk = ours / store.items, sdk / store.items
        ratio = per_ours / per_sdk
        form = "?compress=zstd" if compress else "stored as given (default)"
        rows.append(
            [
                f"{store.items:,} items in {store.sessions:,} sessions, {form}",
                f"{per_sdk:,.0f}",
                f"{per_ours:,.0f}",
                f"{ratio:.2f}",
                "ok" if ratio <= TARGET else "MISSED",
            ]
        )
        for name, size in _parts(store.ours)[:4]:
            rows.append([f"  of which {name}", "", f"{size / store.items:,.0f}", "", ""])
        for name, stored, written in _text_columns(store.ours):
            rows.append(
                [f"  {name}: stored (as written)", "", f"{stored / store.items:,.0f}", "", ""]
            )
            rows[-1][1] = f"({written / store.items:,.0f})"
        if not compress:
            for name, size in floors(store.ours):
                per = size / store.items
                rows.append([f"  floor: {name}", "", f"{per:,.0f}", f"{per / per_sdk:.2f}", ""])
        print(
            f"{store.events:,} events, {form}: files after a checkpoint: ours "
            f"{ours / 1e6:,.1f} MB, SQLiteSession {sdk / 1e6:,.1f} MB"
        )
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 sessions, for a smoke run")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions (default: 1,000)")
    parser.add_argument("--rebuild", action="store_true", help="write the cached stores again")
    args = parser.parse_args(argv)
    rows = asyncio.run(run(20 if args.quick else args.sessions, args.rebuild))
    headers = ["bytes per item", "SQLiteSession", "agentjournal", "ratio", f"<= {TARGET:.0f}x"]
    print(table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("disk", main, sys.argv[1:]))
