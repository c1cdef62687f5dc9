"""The SQLite store and the file locks of SQLite under it: the store never drops a lock
SQLite holds (closing any descriptor of a file drops every POSIX lock the process holds on
that file), processes opening one new store together all get it (SQLite takes the lock
that makes a new file WAL without waiting), and an open given up on stops waiting for a lock
and leaves no connection open."""

from __future__ import annotations

import asyncio
import math
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from agentjournal.errors import InvalidInput
from agentjournal.store.contract import NewEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.store.sqlite import _store as store_module
from agentjournal.store.sqlite._schema import MAX_BUSY_TIMEOUT, _resolved_connect
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


# Holds an exclusive lock on a file in SQLite's rollback-journal mode (no WAL: readers wait
# too), so that opening a store there waits in SQLite's busy handler; prints once it holds.
_HOLD_EXCLUSIVE = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""

# Gives up on opening the store at argv[1] after 0.3 s of its 20 s busy timeout, then ends.
_ABANDON_OPEN = """
import asyncio, sys
from agentjournal.store.sqlite import SQLiteEventStore

async def main():
    try:
        await asyncio.wait_for(SQLiteEventStore.open(sys.argv[1], busy_timeout=20), 0.3)
    except TimeoutError:
        print("gave up")

asyncio.run(main())
"""


def test_a_process_that_gives_up_opening_a_locked_store_ends_without_waiting_out_the_timeout(
    tmp_path: Path,
) -> None:
    path = tmp_path / "locked.db"
    with subprocess.Popen(
        [sys.executable, "-c", _HOLD_EXCLUSIVE, str(path), "30"], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == "held"
            started = time.monotonic()
            opener = subprocess.run(
                [sys.executable, "-c", _ABANDON_OPEN, str(path)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            took = time.monotonic() - started
        finally:
            holder.kill()
    assert opener.returncode == 0, opener.stderr[-600:]
    assert opener.stdout.strip() == "gave up"
    # Its thread stopped at its next try, not at the end of the 20 s busy timeout (the
    # interpreter waits for the thread at exit); a second process's start is most of this.
    assert took < 10, f"the process took {took:.1f} s to end"


async def test_a_connection_an_abandoned_open_made_after_all_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[threading.Thread, sqlite3.Connection]] = []
    connected, go_on = threading.Event(), threading.Event()

    def slow_to_return(*args: Any) -> tuple[str, sqlite3.Connection]:
        file, connection = _resolved_connect(*args)
        made.append((threading.current_thread(), connection))
        connected.set()
        go_on.wait(30)  # the caller is cancelled meanwhile
        return file, connection

    monkeypatch.setattr(store_module, "_resolved_connect", slow_to_return)
    opening = asyncio.ensure_future(SQLiteEventStore.open(tmp_path / "late.db"))
    assert await asyncio.to_thread(connected.wait, 30)
    opening.cancel()
    with pytest.raises(asyncio.CancelledError):
        await opening
    go_on.set()
    # Closed on the open's thread once it returns: wait for that thread to end before
    # touching the connection (using it while another thread closes it can crash CPython).
    thread, connection = made[0]
    await asyncio.to_thread(thread.join, 30)
    assert not thread.is_alive()
    with pytest.raises(sqlite3.ProgrammingError):
        connection.execute("SELECT 1")


@pytest.mark.parametrize("busy_timeout", [-1, math.inf, math.nan, 1e7, True, "5"])
async def test_a_busy_timeout_sqlite_cannot_wait_is_refused_before_anything_opens(
    tmp_path: Path, busy_timeout: Any
) -> None:
    path = tmp_path / "never.db"
    with pytest.raises(InvalidInput, match="busy_timeout must be a number of seconds"):
        await SQLiteEventStore.open(path, busy_timeout=busy_timeout)
    with pytest.raises(InvalidInput, match="busy_timeout must be a number of seconds"):
        SQLiteEventStore.connect(path, busy_timeout=busy_timeout)
    assert not path.exists()


async def test_the_longest_busy_timeout_is_the_one_sqlite_waits(tmp_path: Path) -> None:
    store = await SQLiteEventStore.open(tmp_path / "patient.db", busy_timeout=MAX_BUSY_TIMEOUT)
    try:
        await store.append("s", [_event()], expected=StreamState.NO_STREAM)
    finally:
        await store.close()
    probe = SQLiteEventStore.connect(tmp_path / "patient.db", busy_timeout=MAX_BUSY_TIMEOUT)
    try:  # not wrapped round to 0 (a store that would not wait at all)
        assert probe._db.execute("PRAGMA busy_timeout").fetchone()[0] == 2**31 - 1
    finally:
        probe.close_sync()


class _Seconds(float):
    """A float of another type, as numpy's are."""


@pytest.mark.parametrize("busy_timeout", [0, 2, 0.5, _Seconds(2.0), Fraction(1, 2)])
async def test_any_real_number_of_seconds_in_range_is_a_busy_timeout(
    tmp_path: Path, busy_timeout: Any
) -> None:
    store = await SQLiteEventStore.open(tmp_path / "any.db", busy_timeout=busy_timeout)
    try:
        waited = store._db.execute("PRAGMA busy_timeout").fetchone()[0]
    finally:
        await store.close()
    assert waited == round(float(busy_timeout) * 1000)
