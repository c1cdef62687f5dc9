"""Purging the read model's copies of some streams' items from the file (erasure)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence


def purge_model(db: sqlite3.Connection, streams: Sequence[str]) -> None:
    """Drop every read model tree that holds an item of ``streams`` or is rooted at one
    (its reads fall back to the events, for good), then checkpoint the WAL into the file
    and truncate it. The connection has ``secure_delete`` on, so the rows' bytes are
    overwritten, not left in free pages."""
    names = list(dict.fromkeys(streams))
    if names:
        marks = ",".join("?" * len(names))
        db.execute("BEGIN IMMEDIATE")
        try:
            ids = [
                r[0] for r in db.execute(f"SELECT id FROM streams WHERE name IN ({marks})", names)
            ]
            id_marks = ",".join("?" * len(ids))
            roots = set(ids)
            if ids:
                roots |= {
                    r[0]
                    for r in db.execute(
                        f"SELECT DISTINCT tree FROM items WHERE stream_id IN ({id_marks})", ids
                    )
                }
            for root in roots:
                db.execute("DELETE FROM items WHERE tree = ?", (root,))
                db.execute("DELETE FROM trees WHERE tree = ?", (root,))
                db.execute(
                    "UPDATE streams SET modelled = NULL"
                    " WHERE tree = (SELECT name FROM streams WHERE id = ?)",
                    (root,),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
