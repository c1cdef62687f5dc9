"""``SQLiteEventStore.heads_now`` answers from heads it knows while the file's WAL index
header is the one they were known at: its own last answer, or its thread's own commit.

Any commit of another connection or process changes that header, so the probe reads
again; a header read torn, uninitialised or absent is no answer either. The heads
answered are always those a fresh read of the file gives.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import struct
import sys
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal.store.contract import NewEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.store.sqlite._wal_index import KnownHeads, WalIndex, commits, open_wal_index

STREAMS = ["s-0", "s-1", "s-2"]


def _event() -> NewEvent:
    return NewEvent(type="Noted", data=b"{}", metadata={}, id=uuid.uuid4())


def _truth(path: Path, streams: list[str]) -> dict[str, int]:
    db = sqlite3.connect(path)
    try:
        marks = ",".join("?" * len(streams))
        rows = db.execute(f"SELECT name, head FROM streams WHERE name IN ({marks})", streams)
        return dict(rows.fetchall())
    finally:
        db.close()


class _Spy:
    """A probe connection that counts the statements it runs."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.statements = 0

    def execute(self, *args: Any) -> Any:
        self.statements += 1
        return self.db.execute(*args)

    def close(self) -> None:
        self.db.close()


async def test_after_its_own_commit_the_probe_runs_no_statement(tmp_path: Path) -> None:
    path = tmp_path / "own.db"
    store = await SQLiteEventStore.open(path)
    try:
        await store.append("s-0", [_event()], expected=StreamState.NO_STREAM)
        assert store.heads_now(["s-0"]) == {"s-0": 0}  # opens the probe
        spy = _Spy(store._probe)  # type: ignore[arg-type]
        store._probe = spy  # type: ignore[assignment]
        for head in range(1, 4):
            await store.append("s-0", [_event()], expected=head - 1)
            assert store.heads_now(["s-0"]) == {"s-0": head}
        assert spy.statements == 0
        assert store.heads_now(["s-0", "s-9"]) == {"s-0": 3}  # s-9 not known: read
        assert spy.statements == 1
        assert store.heads_now(["s-9", "s-0"]) == {"s-0": 3}  # now known absent
        assert spy.statements == 1
    finally:
        await store.close()


async def test_a_commit_of_another_connection_after_its_own_shows_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "other.db"
    store = await SQLiteEventStore.open(path)
    other = await SQLiteEventStore.open(path)
    try:
        await store.append("s-0", [_event()], expected=StreamState.NO_STREAM)
        assert store.heads_now(["s-0"]) == {"s-0": 0}
        await store.append("s-0", [_event()], expected=0)
        await other.append("s-0", [_event()], expected=1)  # right after our commit
        assert store.heads_now(["s-0"]) == {"s-0": 2}
        writer = sqlite3.connect(path, isolation_level=None)
        try:
            writer.execute("UPDATE streams SET head = 9 WHERE name = 's-0'")
        finally:
            writer.close()
        assert store.heads_now(["s-0"]) == {"s-0": 9}
    finally:
        await other.close()
        await store.close()


async def test_a_commit_of_another_connection_right_after_its_own_is_not_taken_for_it(
    tmp_path: Path,
) -> None:
    """Another writer commits between the store thread's COMMIT and its look at the
    header: the header is two commits on, so nothing is learnt from it."""
    path = tmp_path / "between.db"
    store = await SQLiteEventStore.open(path)
    try:
        await store.append("s-0", [_event()], expected=StreamState.NO_STREAM)
        await store.append("s-1", [_event()], expected=StreamState.NO_STREAM)
        assert store.heads_now(["s-0", "s-1"]) == {"s-0": 0, "s-1": 0}
        committed = store._writes._committed

        def foreign_first(before: bytes | None, moved: dict[str, int]) -> None:
            writer = sqlite3.connect(path, isolation_level=None)
            try:
                writer.execute("UPDATE streams SET head = head + 50")
            finally:
                writer.close()
            committed(before, moved)

        store._writes._committed = foreign_first  # type: ignore[method-assign]
        await store.append("s-0", [_event()], expected=0)
        assert store.heads_now(["s-0", "s-1"]) == {"s-0": 51, "s-1": 50}
    finally:
        await store.close()


async def test_another_process_s_commit_shows_at_once(tmp_path: Path) -> None:
    path = tmp_path / "process.db"
    store = await SQLiteEventStore.open(path)
    try:
        await store.append("s-0", [_event()], expected=StreamState.NO_STREAM)
        await store.append("s-0", [_event()], expected=0)
        assert store.heads_now(["s-0"]) == {"s-0": 1}
        script = (
            "import sqlite3, sys\n"
            "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "db.execute(\"UPDATE streams SET head = 41 WHERE name = 's-0'\")\n"
            "db.close()\n"
        )
        other = await asyncio.create_subprocess_exec(sys.executable, "-c", script, str(path))
        assert await other.wait() == 0
        assert store.heads_now(["s-0"]) == {"s-0": 41}
    finally:
        await store.close()


async def test_a_recognised_retry_teaches_no_head(tmp_path: Path) -> None:
    path = tmp_path / "retry.db"
    store = await SQLiteEventStore.open(path)
    try:
        first = _event()
        await store.append("s-0", [first], expected=StreamState.NO_STREAM)
        await store.append("s-0", [_event()], expected=0)
        assert store.heads_now(["s-0"]) == {"s-0": 1}
        result = await store.append("s-0", [first], expected=StreamState.NO_STREAM)
        assert result.revision == 0  # the retry, recognised
        assert store.heads_now(["s-0"]) == {"s-0": 1}
    finally:
        await store.close()


def test_a_torn_uninitialised_or_missing_wal_index_header_is_no_answer(tmp_path: Path) -> None:
    assert open_wal_index(str(tmp_path / "none.db")) is None
    header = struct.pack("=IIIBBHII", 3007000, 0, 5, 1, 0, 4096, 7, 2) + bytes(24)
    cases = {
        "whole": (header + header, header),
        "torn": (header + header[:8] + b"\x06" + header[9:], None),
        "uninitialised": ((header[:12] + b"\x00" + header[13:]) * 2, None),
        "another version": ((struct.pack("=I", 3007001) + header[4:]) * 2, None),
        "short": (header, None),
        "an empty WAL": ((header[:16] + struct.pack("=I", 0) + header[20:]) * 2, None),
    }
    for name, (content, expected) in cases.items():
        shm = tmp_path / f"{name}.db-shm"
        shm.write_bytes(content)
        # No connection of SQLite's holds it open: nothing to read it through.
        assert open_wal_index(str(tmp_path / f"{name}.db")) is None
        fd = os.open(shm, os.O_RDONLY)
        try:
            status = os.fstat(fd)
            wal = WalIndex(fd, (status.st_dev, status.st_ino))
            assert wal.header() == expected, name
            wal.close()
            assert wal.header() is None  # closed
        finally:
            os.close(fd)
    assert commits(header) == 5


def test_a_descriptor_that_names_another_file_now_is_no_answer(tmp_path: Path) -> None:
    header = struct.pack("=IIIBBHII", 3007000, 0, 5, 1, 0, 4096, 7, 2) + bytes(24)
    first, second = tmp_path / "a.db-shm", tmp_path / "b.db-shm"
    first.write_bytes(header * 2)
    second.write_bytes(header * 2)
    status = os.stat(first)
    fd = os.open(second, os.O_RDONLY)  # the number now holds another file
    try:
        assert WalIndex(fd, (status.st_dev, status.st_ino)).header() is None
    finally:
        os.close(fd)


def test_an_emptied_wal_s_header_is_no_answer_until_the_next_commit(tmp_path: Path) -> None:
    # A header SQLite rebuilds over an empty WAL is the same bytes after each commit
    # emptied by a checkpoint: equal bytes there would not mean no commit between.
    database = str(tmp_path / "x.db")
    db = sqlite3.connect(database, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (x)")
        wal = open_wal_index(database)
        assert wal is not None
        assert wal.header() is not None
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        assert wal.header() is None
        db.execute("INSERT INTO t VALUES (1)")
        assert wal.header() is not None
        wal.close()
    finally:
        db.close()


def _header(changes: int) -> bytes:
    return struct.pack("=IIIBBHII", 3007000, 0, changes, 1, 0, 4096, 7, 2) + bytes(24)


def test_known_heads_answer_only_at_their_header_and_learn_only_the_next_commit() -> None:
    known = KnownHeads()
    first, second, third = _header(5), _header(6), _header(8)
    assert known.answer(first, ["a"]) is None  # nothing known
    known.learn(first, {"a": 3, "b": -1}, since=first)
    assert known.answer(first, ["a", "b"]) == {"a": 3}  # b: known absent
    assert known.answer(first, ["a", "c"]) is None  # c not known
    assert known.answer(second, ["a"]) is None  # another header
    assert known.answer(None, ["a"]) is None
    known.committed(first, second, {"b": 0})  # the very next commit: b moved, a as known
    assert known.answer(second, ["a", "b"]) == {"a": 3, "b": 0}
    known.committed(second, third, {"a": 4})  # two commits on: another's between
    assert known.answer(third, ["a"]) is None
    known.committed(second, None, {"a": 4})  # no header after: nothing learnt
    known.committed(None, third, {"a": 4})
    assert known.answer(second, ["a", "b"]) == {"a": 3, "b": 0}
    known.learn(third, {"c": 1}, since=first)  # since is not what is known: only c
    assert known.answer(third, ["c"]) == {"c": 1}
    assert known.answer(third, ["a"]) is None


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["ours", "theirs", "foreign", "checkpoint", "probe"]),
        st.sampled_from(STREAMS),
        st.lists(st.sampled_from(STREAMS), min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_heads_now_equals_a_fresh_read_whoever_commits(tmp_path: Path, ops: list[Any]) -> None:
    path = tmp_path / f"{uuid.uuid4().hex}.db"

    async def run() -> None:
        store = await SQLiteEventStore.open(path)
        theirs = await SQLiteEventStore.open(path)
        raw = sqlite3.connect(path, isolation_level=None)
        try:
            for kind, stream, asked in ops:
                if kind in ("ours", "theirs"):
                    writer = store if kind == "ours" else theirs
                    head = await writer.head(stream)
                    expected = StreamState.NO_STREAM if head is None else head
                    await writer.append(stream, [_event(), _event()], expected=expected)
                elif kind == "foreign":
                    raw.execute("UPDATE streams SET head = head + 5 WHERE name = ?", (stream,))
                elif kind == "checkpoint":
                    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                answer = store.heads_now(asked)
                assert answer == _truth(path, asked), (kind, stream, asked)
        finally:
            raw.close()
            await theirs.close()
            await store.close()

    asyncio.run(run())
