"""A warm ``get_items`` on SQLite asks the store's heads on the loop thread.

``SQLiteEventStore.heads_now`` reads the followed streams' heads on a read-only
connection of the caller's thread; when none moved past the session's cache,
nothing is read and no trip to the store's thread is made. Everything committed
before the call — by this store object, another object on the same file, or
another process — must show, and anything the probe cannot answer at once
falls back to the ordinary read: a store opened by a relative path keeps probing its own
file after a ``chdir``, and a pass-through wrapper is never probed around its reads.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import textwrap
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, JournalSession
from agentjournal.store.contract import AppendRequest, NewEvent, RecordedEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore


def item(text: str) -> Any:
    return {"role": "user", "content": text}


async def contents(session: JournalSession) -> list[str]:
    held: list[Any] = await session.get_items(limit=20)
    return [m["content"] for m in held]


class _CountingStore(SQLiteEventStore):
    """Counts the reads that go to the store's thread."""

    reads = 0

    async def read(self, stream: str, **options: Any) -> Any:
        self.reads += 1
        return await super().read(stream, **options)


async def _counting(path: Path) -> _CountingStore:
    plain = await SQLiteEventStore.open(path)
    await plain.close()
    store = _CountingStore.connect(path)
    assert isinstance(store, _CountingStore)
    return store


def _event() -> NewEvent:
    return NewEvent(type="Noted", data=b"{}", metadata={}, id=uuid.uuid4())


async def test_a_warm_get_items_reads_nothing_from_the_store_thread(tmp_path: Path) -> None:
    store = await _counting(tmp_path / "warm.db")
    try:
        session = JournalSession(store, "w-1")
        await session.add_items([item("one"), item("two")])
        assert await contents(session) == ["one", "two"]
        before = store.reads
        for _ in range(5):
            assert len(await session.get_items(limit=20)) == 2
        assert store.reads == before  # answered from the cache after one probe each
    finally:
        store.close_sync()


async def test_a_write_by_another_session_object_shows_in_a_warm_read(tmp_path: Path) -> None:
    async with await Journal.open(f"sqlite:///{tmp_path / 'objects.db'}") as journal:
        reader = journal.session("w-2")
        await reader.add_items([item("mine")])
        assert len(await reader.get_items(limit=20)) == 1  # warm now
        other = JournalSession(journal.store, "w-2")  # its own cache
        await other.add_items([item("theirs")])
        assert await contents(reader) == ["mine", "theirs"]


async def test_a_write_by_another_store_object_on_the_file_shows(tmp_path: Path) -> None:
    path = tmp_path / "stores.db"
    first = await SQLiteEventStore.open(path)
    second = await SQLiteEventStore.open(path)
    try:
        reader = JournalSession(first, "w-3")
        await reader.add_items([item("a")])
        assert len(await reader.get_items(limit=20)) == 1
        await JournalSession(second, "w-3").add_items([item("b")])
        assert await contents(reader) == ["a", "b"]
    finally:
        await first.close()
        await second.close()


_OTHER_PROCESS = textwrap.dedent(
    """
    import asyncio, json, sys, uuid
    from agentjournal.store.contract import AppendRequest, NewEvent, RecordedEvent, StreamState
    from agentjournal.store.sqlite import SQLiteEventStore

    async def main():
        store = await SQLiteEventStore.open(sys.argv[1])
        try:
            for n in range(int(sys.argv[2])):  # canonical events, as another integration writes
                data = {"content": f"from another process {n}", "timestamp": "2026-12-01T00:00:00Z"}
                event = NewEvent(
                    type="UserMessageReceived", data=json.dumps(data).encode(), id=uuid.uuid4()
                )
                await store.append("AgentSession-w-4", [event], expected=StreamState.ANY)
                print(n, flush=True)
                sys.stdin.readline()  # the parent read it: go on
        finally:
            await store.close()

    asyncio.run(main())
    """
)


async def test_a_commit_by_another_process_shows_in_the_next_warm_read(tmp_path: Path) -> None:
    path = tmp_path / "processes.db"
    store = await SQLiteEventStore.open(path)
    rounds = 3
    try:
        reader = JournalSession(store, "w-4")
        await reader.add_items([item("here")])
        assert len(await reader.get_items(limit=20)) == 1
        other = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _OTHER_PROCESS,
            str(path),
            str(rounds),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert other.stdin is not None
        assert other.stdout is not None
        for round_ in range(rounds):
            await other.stdout.readline()  # its commit finished before this read begins
            held: list[Any] = await reader.get_items(limit=20)
            assert len(held) == 2 + round_, held
            assert held[-1]["content"] == f"from another process {round_}"
            other.stdin.write(b"\n")
            await other.stdin.drain()
        assert await other.wait() == 0
    finally:
        await store.close()


async def test_heads_now_answers_while_another_writer_holds_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "locked.db"
    store = await SQLiteEventStore.open(path)
    try:
        await store.append("s-1", [_event(), _event()], expected=StreamState.NO_STREAM)
        assert store.heads_now(["s-1", "s-2"]) == {"s-1": 1}
        writer = sqlite3.connect(path, isolation_level=None)
        try:
            writer.execute("BEGIN IMMEDIATE")  # another process's write in progress
            writer.execute("UPDATE streams SET head = 7 WHERE name = 's-1'")
            started = time.perf_counter()
            assert store.heads_now(["s-1"]) == {"s-1": 1}  # the last commit, not the pending one
            assert time.perf_counter() - started < 1.0  # a WAL reader never waits for a writer
            writer.execute("ROLLBACK")
        finally:
            writer.close()
        await store.append("s-1", [_event()], expected=1)
        assert store.heads_now(["s-1"]) == {"s-1": 2}  # its own commit, at once
    finally:
        await store.close()
    assert store.heads_now(["s-1"]) is None  # closed: the caller takes the ordinary path


async def test_heads_now_defers_when_it_cannot_answer_at_once(tmp_path: Path) -> None:
    memory = await SQLiteEventStore.open(":memory:")
    try:
        await memory.append("s-1", [_event()], expected=StreamState.NO_STREAM)
        assert memory.heads_now(["s-1"]) is None  # another connection sees another database
    finally:
        await memory.close()
    store = await _counting(tmp_path / "busy.db")
    try:
        session = JournalSession(store, "w-5")
        await session.add_items([item("x")])
        await session.get_items(limit=20)
        await JournalSession(store, "w-5").add_items([item("y")])
        with store._probe_lock:  # another thread is probing: do not wait for it
            assert store.heads_now(["AgentSession-w-5"]) is None
            before = store.reads
            held: list[Any] = await session.get_items(limit=20)
        assert [m["content"] for m in held] == ["x", "y"]
        assert store.reads > before  # read the ordinary way
    finally:
        store.close_sync()


async def test_the_heads_probe_reads_the_store_s_file_after_a_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store opened by a relative path, then the process changes directory (a server, a
    library): the probe, opened on first use, must read the store's own file, not a file of
    the same name in the new directory, or a warm read misses another writer's commit."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    monkeypatch.chdir(there)
    async with await SQLiteEventStore.open("j.db") as decoy:  # same name, same session id
        await JournalSession(decoy, "s").add_items([item("elsewhere")])
    monkeypatch.chdir(here)
    async with await SQLiteEventStore.open("j.db") as store:
        reader = JournalSession(store, "s")
        await reader.add_items([item("one")])  # head 1, as the decoy's; no probe yet
        monkeypatch.chdir(there)
        await JournalSession(store, "s").add_items([item("two")])  # another session object
        assert store.heads_now(["AgentSession-s"]) in ({"AgentSession-s": 2}, None)
        held: list[Any] = await reader.get_items()
        assert [m["content"] for m in held] == ["one", "two"]


class _Tenant:
    """A store wrapper that keeps one tenant's streams apart in a shared store (a prefix on
    every name it reads or writes) and passes everything else through, as wrappers do."""

    def __init__(self, inner: SQLiteEventStore, prefix: str) -> None:
        self._inner = inner
        self._prefix = prefix

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append(self, stream: str, events: Any, *, expected: Any) -> Any:
        result = await self._inner.append(self._prefix + stream, events, expected=expected)
        return replace(result, stream=stream)

    async def append_many(self, requests: Any) -> Any:
        results = await self._inner.append_many(
            [AppendRequest(self._prefix + r.stream, r.events, r.expected) for r in requests]
        )
        return [replace(r, stream=r.stream.removeprefix(self._prefix)) for r in results]

    async def read(self, stream: str, **options: Any) -> Any:
        found = await self._inner.read(self._prefix + stream, **options)
        return [
            RecordedEvent(
                id=e.id,
                type=e.type,
                data=e.data,
                metadata=e.metadata,
                stream=stream,
                revision=e.revision,
                position=e.position,
                recorded_at=e.recorded_at,
            )
            for e in found
        ]

    async def head(self, stream: str) -> int | None:
        return await self._inner.head(self._prefix + stream)


async def test_a_pass_through_wrapper_is_not_probed_around_its_reads(tmp_path: Path) -> None:
    """A store without ``heads_now`` of its own (KurrentDB, wrappers) takes the
    ordinary reads. A wrapper that forwards other attributes (``__getattr__``) must not
    have the probe answer for the store inside it: here the probe reads another tenant's
    stream of the same name, at the same head, and the warm read misses a write."""
    async with await SQLiteEventStore.open(tmp_path / "tenants.db") as store:
        await JournalSession(store, "s").add_items([item("someone else's")])
        tenant = _Tenant(store, "t1.")
        reader = JournalSession(tenant, "s")
        await reader.add_items([item("one")])
        assert await reader.get_items() == [item("one")]
        await JournalSession(tenant, "s").add_items([item("two")])
        assert await reader.get_items() == [item("one"), item("two")]
