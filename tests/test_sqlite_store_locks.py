"""The SQLite store and the file locks of SQLite under it: the store never drops a lock
SQLite holds (closing any descriptor of a file drops every POSIX lock the process holds on
that file), and processes opening one new store together all get it (SQLite takes the lock
that makes a new file WAL without waiting)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agentjournal.store.contract import NewEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.store.sqlite._wal_index import open_wal_index

# The byte of the -shm file every connection holds a shared lock on for as long as it is
# open ("DMS": os_unix.c, UNIX_SHM_BASE + SQLITE_SHM_NLOCK): a process that can take it
# exclusively believes nobody else uses the WAL index, and rebuilds it.
_DMS = 128

_TRY_EXCLUSIVE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, int(sys.argv[2]))
except OSError:
    print("held")
else:
    print("free")
"""


def _lock_of_dms(database: Path) -> str:
    """ "held" when some other process holds the DMS lock of ``database``'s WAL index."""
    probe = [sys.executable, "-c", _TRY_EXCLUSIVE, f"{database}-shm", str(_DMS)]
    return subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()


def _event() -> NewEvent:
    return NewEvent(type="Noted", data=b"{}", metadata={}, id=uuid.uuid4())


async def _used(store: SQLiteEventStore, stream: str) -> None:
    """A write (the store thread reads the WAL index) and two probes (so does the probe)."""
    await store.append(stream, [_event()], expected=StreamState.ANY)
    store.heads_now([stream])
    store.heads_now([stream])


async def test_closing_one_store_keeps_the_locks_of_another_on_the_same_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "one.db"
    first = await SQLiteEventStore.open(path)
    try:
        await _used(first, "s-1")
        second = await SQLiteEventStore.open(path)
        await _used(second, "s-2")
        assert _lock_of_dms(path) == "held"
        await second.close()
        # The first store's connections are open: their locks must still be there.
        assert _lock_of_dms(path) == "held"
        await _used(first, "s-1")
        assert _lock_of_dms(path) == "held"
    finally:
        await first.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists descriptors in /proc")
async def test_the_wal_index_is_read_through_sqlite_s_own_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "one.db"
    store = await SQLiteEventStore.open(path)
    try:
        await _used(store, "s-1")
        shm = os.stat(f"{path}-shm")
        on_shm = []
        for name in os.listdir("/proc/self/fd"):
            try:
                status = os.stat(f"/proc/self/fd/{name}")
            except OSError:
                continue
            if (status.st_dev, status.st_ino) == (shm.st_dev, shm.st_ino):
                on_shm.append(name)
        assert len(on_shm) == 1, on_shm
        index = open_wal_index(str(path))
        assert index is not None
        assert index.header() is not None
        assert store.heads_now(["s-1"]) == {"s-1": 0}
    finally:
        await store.close()


_OPEN_ROUNDS = """
import asyncio, sys, time
from agentjournal.store.sqlite import SQLiteEventStore

async def main(directory, start, rounds):
    for round in range(rounds):
        while time.time() < start + 0.15 * round:
            pass
        store = await SQLiteEventStore.open(f"{directory}/r{round}.db", busy_timeout=5)
        await store.close()

asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3])))
"""


@pytest.mark.slow
def test_processes_creating_one_store_together_all_open_it(tmp_path: Path) -> None:
    rounds = 12
    start = time.time() + 3.0  # after every process has imported the store
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_ROUNDS, str(tmp_path), str(start), str(rounds)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    failures = [
        error for process in processes if (error := process.communicate(timeout=120)[1]) != ""
    ]
    assert [process.returncode for process in processes] == [0, 0, 0], failures[0][-400:]
