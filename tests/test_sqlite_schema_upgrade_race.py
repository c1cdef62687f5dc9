"""Opening a store of an earlier schema version while another process upgrades it: the
version and the tables a check compares must be read from one state of the file. Read in two
statements, a commit between them (the other process's upgrade) shows a version-2 number with
version-3 tables, and the file is refused as "a SQLite database of something else"."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentjournal.store.sqlite import SQLiteEventStore, _schema
from sqlite_v2 import V2_SCHEMA


async def test_a_file_another_process_upgrades_while_it_is_checked_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "v2.db"
    made = sqlite3.connect(path, isolation_level=None)
    made.executescript("PRAGMA journal_mode = WAL;" + V2_SCHEMA)  # as every store is
    made.close()

    connect = sqlite3.connect
    upgraded: list[bool] = []

    def upgrade_first(sql: str) -> None:
        """Just before the first look at the file's tables, another connection (as another
        process would) upgrades the file to the current version and commits."""
        if upgraded or "sqlite_master" not in sql:
            return
        upgraded.append(True)
        other = connect(path, isolation_level=None, timeout=1)
        try:
            _schema._upgrade_schema(other, str(path), 2)
        finally:
            other.close()

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db: sqlite3.Connection = connect(*args, **kwargs)
        db.set_trace_callback(upgrade_first)
        return db

    monkeypatch.setattr(sqlite3, "connect", traced)
    store = await SQLiteEventStore.open(path)
    await store.close()
    assert upgraded
    check = connect(path)
    try:
        assert check.execute("PRAGMA user_version").fetchone()[0] == _schema.SCHEMA_VERSION
    finally:
        check.close()
