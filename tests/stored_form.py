"""The SQLite file's rows as written, for tests that read or edit the file underneath the store.

The store keeps an event's data and metadata, and a read model item's text, compressed
(``agentjournal.store.sqlite._stored``). A test that scans a file for content reads the
values as written too; a test that edits a value with SQL first stores the rows as given
(a form every version reads: ``dictionary`` NULL), so its edit changes the text it means.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from agentjournal.store.sqlite._stored import Unpacker


def written_values(path: Path) -> bytes:
    """Every event's data and metadata and every read model item's text in ``path``, as
    written (decompressed), one after the other."""
    db = sqlite3.connect(path)
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        if not {"events", "items", "dictionaries"} <= tables:
            return b""  # not a store of this version
        unpack = Unpacker(db).unpack
        parts = [
            unpack(bytes(value), dictionary)
            for data, metadata, dictionary in db.execute(
                "SELECT data, metadata, dictionary FROM events"
            )
            for value in (data, metadata)
        ]
        parts += [
            unpack(item, dictionary) if isinstance(item, bytes) else item.encode()
            for item, dictionary in db.execute("SELECT item, dictionary FROM items")
        ]
    finally:
        db.close()
    return b"\n".join(parts)


def store_as_written(path: Path) -> None:
    """Rewrite every compressed row of ``path`` as given (``dictionary`` NULL)."""
    db = sqlite3.connect(path)
    try:
        unpack = Unpacker(db).unpack
        events = [
            (unpack(data, dictionary), unpack(metadata, dictionary), position)
            for position, data, metadata, dictionary in db.execute(
                "SELECT position, data, metadata, dictionary FROM events "
                "WHERE dictionary IS NOT NULL"
            )
        ]
        items = [
            (unpack(item, dictionary).decode("utf-8"), tree, idx)
            for tree, idx, item, dictionary in db.execute(
                "SELECT tree, idx, item, dictionary FROM items WHERE dictionary IS NOT NULL"
            )
        ]
        with db:
            db.executemany(
                "UPDATE events SET data = ?, metadata = ?, dictionary = NULL WHERE position = ?",
                events,
            )
            db.executemany(
                "UPDATE items SET item = ?, dictionary = NULL WHERE tree = ? AND idx = ?", items
            )
    finally:
        db.close()
