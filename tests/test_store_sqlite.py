"""The embedded SQLite store: the conformance suite on a file and in memory, plus its own rules."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, UndecodableEvent, UnreadableMetadata, read_tree
from agentjournal.errors import ConcurrencyError, InvalidInput, StoreUnavailable
from agentjournal.records import DamagedEvent
from agentjournal.store import (
    AppendRequest,
    AppendResult,
    EventStore,
    NewEvent,
    StreamState,
    open_store,
)
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


# -- group commit -------------------------------------------------------------------


class _Held:
    """The store's thread held busy, so that writes queue up behind it; counts COMMITs."""

    def __init__(self, store: SQLiteEventStore) -> None:
        self.statements: list[str] = []
        self._gate = threading.Event()
        # White-box on purpose: only the store's own thread and connection can show
        # that queued writes share one transaction.
        store._db.set_trace_callback(self.statements.append)
        store._executor.submit(self._gate.wait, 10)

    def release(self) -> None:
        self._gate.set()

    @property
    def commits(self) -> int:
        return sum(1 for statement in self.statements if statement.strip().upper() == "COMMIT")


async def test_writes_that_wait_together_share_one_commit(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "group.db") as store:
        held = _Held(store)
        tasks = [
            asyncio.create_task(
                store.append(
                    f"S-{n}", make_events(2, prefix=f"p{n}"), expected=StreamState.NO_STREAM
                )
            )
            for n in range(10)
        ]
        await asyncio.sleep(0.05)  # every write is queued behind the held thread
        held.release()
        results = await asyncio.gather(*tasks)
        assert [result.revision for result in results] == [1] * 10
        assert held.commits == 1  # ten writes, one transaction: one fsync
        positions = sorted(result.position for result in results)
        assert len(set(positions)) == 10  # each reports where its own last event went
        for n, result in enumerate(results):
            events = await store.read(f"S-{n}")
            assert [event.id for event in events] == [e.id for e in make_events(2, prefix=f"p{n}")]
            assert events[-1].position == result.position


async def test_a_group_in_which_every_write_lands_takes_no_savepoint(tmp_path: Path) -> None:
    """Savepoints are for a group in which a write fails (then the group is written again,
    each write in its own): one in which all land is written once, without them."""
    async with await SQLiteEventStore.open(tmp_path / "group.db") as store:
        for n in range(3):
            await store.append(
                f"S-{n}", make_events(1, prefix=f"a{n}"), expected=StreamState.NO_STREAM
            )
        held = _Held(store)
        tasks = [
            asyncio.create_task(store.append(f"S-{n}", make_events(2, prefix=f"b{n}"), expected=0))
            for n in range(3)
        ]
        await asyncio.sleep(0.05)
        held.release()
        results = await asyncio.gather(*tasks)
        assert [result.revision for result in results] == [2, 2, 2]
        assert held.commits == 1
        assert not [s for s in held.statements if "SAVEPOINT" in s.upper()]
        assert not [s for s in held.statements if "ROLLBACK" in s.upper()]


async def test_a_failing_or_conflicting_write_in_a_group_fails_alone(tmp_path: Path) -> None:
    path = tmp_path / "group.db"
    async with await SQLiteEventStore.open(path) as store:
        # A write SQLite itself refuses half-way (after other rows of it went in).
        store._db.execute(
            "CREATE TEMP TRIGGER boom BEFORE INSERT ON events WHEN NEW.type = 'Boom' "
            "BEGIN SELECT RAISE(ABORT, 'boom'); END"
        )
        first = make_events(2, prefix="a")
        boom = [*make_events(1, prefix="c"), NewEvent(type="Boom", data=b"{}")]
        held = _Held(store)
        writes = {
            "ok": store.append("S-a", first, expected=StreamState.NO_STREAM),
            "wrong revision": store.append("S-b", make_events(1, prefix="b"), expected=5),
            "refused by SQLite": store.append("S-c", boom, expected=StreamState.NO_STREAM),
            "lost the race": store.append(
                "S-a", make_events(1, prefix="other"), expected=StreamState.NO_STREAM
            ),
            "retry of ok": store.append("S-a", first, expected=StreamState.NO_STREAM),
            "half conflicting": store.append_many(
                [
                    AppendRequest("S-d", make_events(1, prefix="d"), StreamState.NO_STREAM),
                    AppendRequest("S-a", make_events(1, prefix="late"), 0),
                ]
            ),
            "after them": store.append("S-e", make_events(3, prefix="e"), expected=StreamState.ANY),
        }
        tasks = {name: asyncio.create_task(write) for name, write in writes.items()}
        await asyncio.sleep(0.05)
        held.release()
        await asyncio.wait(tasks.values())
        outcome = {name: task.exception() or task.result() for name, task in tasks.items()}
        assert held.commits == 1
        # Tried once whole and rolled back, then written again write by write.
        upper = [statement.strip().upper() for statement in held.statements]
        assert upper.count("ROLLBACK") == 1
        assert upper.index("ROLLBACK") < upper.index("SAVEPOINT AJ_WRITE")

    ok = outcome["ok"]
    assert isinstance(ok, AppendResult)
    assert ok.revision == 1
    assert isinstance(outcome["wrong revision"], ConcurrencyError)
    assert isinstance(outcome["refused by SQLite"], StoreUnavailable)
    assert "boom" in str(outcome["refused by SQLite"])
    assert isinstance(outcome["lost the race"], ConcurrencyError)
    assert outcome["retry of ok"] == ok  # recognised inside the group: nothing written twice
    assert isinstance(outcome["half conflicting"], ConcurrencyError)
    after = outcome["after them"]
    assert isinstance(after, AppendResult)
    assert after.revision == 2

    # What the file holds after reopening: exactly the writes that were told they landed.
    async with await SQLiteEventStore.open(path) as store:
        assert [e.id for e in await store.read("S-a")] == [e.id for e in first]
        assert [e.id for e in await store.read("S-e")] == [e.id for e in make_events(3, prefix="e")]
        for absent in ("S-b", "S-c", "S-d"):
            assert await store.head(absent) is None
        everything = await store.read_all()
        assert [e.stream for e in everything] == ["S-a", "S-a", "S-e", "S-e", "S-e"]
        assert everything[1].position == ok.position
        assert everything[-1].position == after.position


# -- a row something else wrote --------------------------------------------------------------


SID = "s1"


def user(text: str) -> Any:
    return {"role": "user", "content": text}


async def test_an_undecodable_sqlite_row_is_damage_not_an_outage(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    async with Journal.open(f"sqlite:///{path}") as journal:
        await journal.session(SID).add_items([user("hi"), user("there")])
    # Something other than agentjournal writes a type that is not UTF-8.
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "UPDATE events SET type = CAST(? AS TEXT) WHERE position = "
            "(SELECT max(position) FROM events)",
            (b"\xff\xfeUserMessageReceived",),
        )
    async with Journal.open(f"sqlite:///{path}") as journal:
        with pytest.raises(UndecodableEvent) as undecodable:
            await journal.store.read(f"AgentSession-{SID}")
        assert not isinstance(undecodable.value, StoreUnavailable)  # no retry cures it
        with pytest.raises(DamagedEvent, match="cannot be read"):
            await read_tree(journal.store, SID)


async def test_an_event_whose_metadata_is_not_a_json_object_raises_saying_where(
    tmp_path: Path,
) -> None:
    """Parsed when first asked for: an ``UnreadableMetadata``, which is a store error that
    names the event and a ``ValueError``, as a parse error is."""
    path = tmp_path / "damaged.db"
    async with await SQLiteEventStore.open(path) as store:
        await store.append("S-1", make_events(2), expected=StreamState.NO_STREAM)
    for value in (b"\xff", b"{not json", b"[1]", b"[" * 100_000 + b"]" * 100_000):
        with sqlite3.connect(path) as db:
            db.execute("UPDATE events SET metadata = ? WHERE revision = 1", (value,))
        db.close()
        async with await SQLiteEventStore.open(path) as store:
            first, second = await store.read("S-1")
            assert first.metadata == make_events(1)[0].metadata
            with pytest.raises(UnreadableMetadata) as raised:
                second.metadata  # noqa: B018
        assert str(raised.value) == "S-1@1: the metadata is not a UTF-8 JSON object"
        assert (raised.value.stream, raised.value.revision) == ("S-1", 1)
        assert isinstance(raised.value, UndecodableEvent)
        assert isinstance(raised.value, ValueError)
