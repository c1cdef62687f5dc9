"""A SQLite store of schema version 2 as agentjournal wrote it before the stored form: every
value as given (for the tests of opening and upgrading such a file)."""

from __future__ import annotations

from typing import Final

V2_SCHEMA: Final = """
CREATE TABLE streams (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, head INTEGER NOT NULL,
    tree TEXT NULL, modelled INTEGER NULL
);
CREATE TABLE events (
    position INTEGER PRIMARY KEY, stream_id INTEGER NOT NULL REFERENCES streams(id),
    revision INTEGER NOT NULL, id BLOB NOT NULL, type TEXT NOT NULL, data BLOB NOT NULL,
    metadata BLOB NOT NULL, recorded_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX events_by_stream ON events(stream_id, revision);
CREATE INDEX streams_by_tree ON streams(tree);
CREATE TABLE items (
    tree INTEGER NOT NULL, idx INTEGER NOT NULL, stream_id INTEGER NOT NULL,
    revision INTEGER NOT NULL, part INTEGER NOT NULL, item TEXT NOT NULL,
    PRIMARY KEY (tree, idx)
) WITHOUT ROWID;
CREATE TABLE trees (tree INTEGER PRIMARY KEY, floor INTEGER NOT NULL, mixed INTEGER NOT NULL);
PRAGMA user_version = 2;
"""
