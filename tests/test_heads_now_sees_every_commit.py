"""``SQLiteEventStore.heads_now`` sees every commit that finished before the call even when
the store is opened through a symlink: SQLite follows the link and keeps its WAL index
beside the file it names, not beside the link, so a ``-shm`` file beside the link (one left
by a database once there) is not the header that every commit moves."""

from __future__ import annotations

import shutil
import sqlite3
import uuid
from pathlib import Path

from agentjournal.store.contract import NewEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore


def _event() -> NewEvent:
    return NewEvent(type="Noted", data=b"{}", metadata={}, id=uuid.uuid4())


async def test_a_store_opened_through_a_symlink_sees_other_commits(tmp_path: Path) -> None:
    real, link = tmp_path / "real.db", tmp_path / "link.db"
    link.symlink_to(real)
    # A WAL index beside the link's name, as left by a database once there (SQLite, which
    # follows the link, uses real.db-shm).
    stale = tmp_path / "stale.db"
    left = sqlite3.connect(stale, isolation_level=None)
    left.execute("PRAGMA journal_mode = WAL")
    left.execute("CREATE TABLE t(x)")
    shutil.copyfile(f"{stale}-shm", f"{link}-shm")
    left.close()

    store = await SQLiteEventStore.open(link)
    other = sqlite3.connect(real, isolation_level=None)
    try:
        await store.append("s-0", [_event()], expected=StreamState.NO_STREAM)
        assert store.heads_now(["s-0"]) == {"s-0": 0}
        other.execute("UPDATE streams SET head = head + 1 WHERE name = 's-0'")
        assert store.heads_now(["s-0"]) == {"s-0": 1}
    finally:
        other.close()
        await store.close()


async def test_a_store_opened_through_a_symlink_and_dotdot_probes_the_file_it_writes(
    tmp_path: Path,
) -> None:
    # SQLite follows the link before it takes the ``..``; os.path.abspath takes it first,
    # and names another file: one that holds another store here.
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "a" / "b")
    decoy = await SQLiteEventStore.open(tmp_path / "x.db")
    try:
        await decoy.append("s-0", [_event(), _event(), _event()], expected=StreamState.NO_STREAM)
    finally:
        await decoy.close()

    store = await SQLiteEventStore.open(f"{tmp_path}/link/../x.db")
    try:
        await store.append("s-0", [_event()], expected=StreamState.NO_STREAM)
        assert (tmp_path / "a" / "x.db").is_file()
        assert store.heads_now(["s-0"]) == {"s-0": 0}
    finally:
        await store.close()
