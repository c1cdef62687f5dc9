"""Review of issue 18's third round (r18): reproductions of what broke, on real files.

Each test failed on the merge under review (f168600) and passes with the fix beside it.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentjournal import JournalSession
from agentjournal.store import sqlite as sqlite_store
from agentjournal.store.contract import AppendRequest, NewEvent, RecordedEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore


def _item(text: str) -> Any:
    return {"role": "user", "content": text}


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
        await JournalSession(decoy, "s").add_items([_item("elsewhere")])
    monkeypatch.chdir(here)
    async with await SQLiteEventStore.open("j.db") as store:
        reader = JournalSession(store, "s")
        await reader.add_items([_item("one")])  # head 1, as the decoy's; no probe yet
        monkeypatch.chdir(there)
        await JournalSession(store, "s").add_items([_item("two")])  # another session object
        assert store.heads_now(["AgentSession-s"]) in ({"AgentSession-s": 2}, None)
        held: list[Any] = await reader.get_items()
        assert [m["content"] for m in held] == ["one", "two"]


async def test_the_stream_id_cache_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compare-and-set's stream ids are a cache on a long-lived store: one entry per
    stream ever written (a server with millions of sessions) must not grow without end."""
    monkeypatch.setattr(sqlite_store, "_STREAM_IDS_KEPT", 8, raising=False)
    async with await SQLiteEventStore.open(tmp_path / "ids.db") as store:
        for n in range(40):
            stream = f"s-{n}"
            for revision in range(3):
                event = NewEvent(type="Noted", data=b"{}", metadata={}, id=uuid.uuid4())
                expected = StreamState.NO_STREAM if revision == 0 else revision - 1
                await store.append(stream, [event], expected=expected)
            assert await store.head(stream) == 2
        assert len(store._stream_ids) <= 8


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
    """DESIGN §7: a store without ``heads_now`` of its own (KurrentDB, wrappers) takes the
    ordinary reads. A wrapper that forwards other attributes (``__getattr__``) must not
    have the probe answer for the store inside it: here the probe reads another tenant's
    stream of the same name, at the same head, and the warm read misses a write."""
    async with await SQLiteEventStore.open(tmp_path / "tenants.db") as store:
        await JournalSession(store, "s").add_items([_item("someone else's")])
        tenant = _Tenant(store, "t1.")
        reader = JournalSession(tenant, "s")
        await reader.add_items([_item("one")])
        assert await reader.get_items() == [_item("one")]
        await JournalSession(tenant, "s").add_items([_item("two")])
        assert await reader.get_items() == [_item("one"), _item("two")]
