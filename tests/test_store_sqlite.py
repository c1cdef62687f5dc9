"""The embedded SQLite store: the conformance suite on a file and in memory, plus its own rules."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentjournal.errors import InvalidInput, StoreUnavailable
from agentjournal.store import EventStore, NewEvent, StreamState, open_store
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.testing.store_conformance import EventStoreConformance, make_events


class TestSQLiteFileStore(EventStoreConformance):
    @pytest.fixture
    def store_uri(self, tmp_path: Path) -> str | None:
        return f"sqlite:///{tmp_path / 'events.db'}"

    @pytest.fixture
    async def store(self, store_uri: str) -> AsyncIterator[EventStore]:
        store = await open_store(store_uri)
        yield store
        await store.close()


class TestSQLiteMemoryStore(EventStoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[EventStore]:
        store = await open_store("sqlite://:memory:")
        yield store
        await store.close()


async def test_events_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "durable.db"
    async with await SQLiteEventStore.open(path) as store:
        await store.append("S-1", make_events(3), expected=StreamState.NO_STREAM)
    async with await SQLiteEventStore.open(path) as store:
        assert [e.revision for e in await store.read("S-1")] == [0, 1, 2]
        assert (await store.append("S-1", make_events(1, start=3), expected=2)).revision == 3


async def test_two_store_objects_on_one_file_see_each_other(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with await SQLiteEventStore.open(path) as one, await SQLiteEventStore.open(path) as two:
        received: list[int] = []

        async def follow() -> None:
            async for event in two.subscribe():
                received.append(event.revision)
                if len(received) == 2:
                    return

        task = asyncio.create_task(follow())
        await one.append("S-1", make_events(2), expected=StreamState.NO_STREAM)
        await asyncio.wait_for(task, 2.0)
        assert received == [0, 1]


async def test_tail_read_uses_the_stream_index(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "plan.db"):
        pass
    db = sqlite3.connect(tmp_path / "plan.db")
    plan = " ".join(
        str(row[-1])
        for row in db.execute(
            "EXPLAIN QUERY PLAN SELECT position FROM events "
            "WHERE stream_id = 1 AND revision <= 5 ORDER BY revision DESC LIMIT 20"
        )
    )
    db.close()
    assert "events_by_stream" in plan
    assert "TEMP B-TREE" not in plan


async def test_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE customers (id INTEGER)")
    db.commit()
    db.close()
    with pytest.raises(StoreUnavailable, match="something else"):
        await SQLiteEventStore.open(path)


async def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="does not exist"):
        await SQLiteEventStore.open(tmp_path / "no" / "such" / "dir.db")


async def test_closed_store_refuses_work(tmp_path: Path) -> None:
    store = await SQLiteEventStore.open(tmp_path / "closed.db")
    await store.close()
    with pytest.raises(StoreUnavailable, match="closed"):
        await store.head("S-1")


async def test_cancelled_writer_does_not_abandon_its_commit(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "cancel.db") as store:
        big = [NewEvent(type="Big", data=b"x" * 100_000) for _ in range(200)]
        task = asyncio.create_task(store.append("S-1", big, expected=StreamState.NO_STREAM))
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        head = await store.head("S-1")
        assert head in (None, 199)  # all or nothing, never half


@pytest.mark.parametrize("uri", ["sqlite://", "sqlite:/x.db", "postgres://x", "sqlite:///"])
async def test_bad_uris_are_refused(uri: str) -> None:
    with pytest.raises(InvalidInput):
        await open_store(uri)


async def test_refused_files_are_left_untouched(tmp_path: Path) -> None:
    for name, setup in (
        ("other.db", "CREATE TABLE users (id INTEGER)"),
        ("newer.db", "PRAGMA user_version = 2"),
        ("impostor.db", "CREATE TABLE users (id INTEGER); PRAGMA user_version = 1"),
    ):
        path = tmp_path / name
        db = sqlite3.connect(path)
        db.executescript(setup)
        db.commit()
        db.close()
        with pytest.raises(StoreUnavailable):
            await SQLiteEventStore.open(path)
        db = sqlite3.connect(path)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        db.close()
