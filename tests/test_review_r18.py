"""Review of issue 18's third round (r18): reproductions of what broke, on real files.

Each test failed on the merge under review (f168600) and passes with the fix beside it.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from agentjournal import JournalSession
from agentjournal.store import sqlite as sqlite_store
from agentjournal.store.base import NewEvent, StreamState
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
        held = await reader.get_items()
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
