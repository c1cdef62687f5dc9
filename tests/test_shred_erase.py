"""Erasing a data subject: its content is gone from every byte the store keeps, reads show
``[erased]``, other subjects stay readable, the SDK runs on, and a retry finishes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from agents import Agent
from agents.testing import ScriptedModel, assistant_message
from kurrentdbclient import AsyncKurrentDBClient

from agentjournal import Journal
from agentjournal.audit.verify import verify_records
from agentjournal.errors import InvalidInput, StoreUnavailable
from agentjournal.ledger import SigningKey
from agentjournal.ledger.checkpoints import CHECKPOINT
from agentjournal.shred import MemoryKeyStore
from agentjournal.shred.fields import ERASED
from agentjournal.shred.sealing import open_event
from agentjournal.store.contract import RecordedEvent
from agentjournal.store.sqlite._stored import ITEM_TEXT
from agentjournal.walk import read_tree
from drive import drive
from shred_scenarios import PLANTED, plant
from stored_form import written_values

BOB = ["KEEP-bob-message-91d3", "KEEP-bob-answer-0a4f"]


def _files(folder: Path) -> bytes:
    """Every file's bytes, and each SQLite file's values as written (stored compressed)."""
    paths = sorted(p for p in folder.iterdir() if p.is_file())
    raw = b"".join(p.read_bytes() for p in paths)
    return raw + b"".join(written_values(p) for p in paths if p.suffix == ".db")


def _found(raw: bytes, texts: list[str]) -> list[str]:
    return [text for text in texts if text.encode() in raw]


async def _bob(journal: Journal) -> Any:
    session = journal.session("bob-1", user_id="bob")
    agent = Agent(name="helper", model=ScriptedModel([[assistant_message(BOB[1])]]))
    await drive(agent, BOB[0], session=session, hooks=session)
    return session


async def _new_turn(journal: Journal) -> list[Any]:
    session = journal.session("plant-1", user_id="alice")
    agent = Agent(name="helper", model=ScriptedModel([[assistant_message("after erasure")]]))
    result = await drive(agent, "a new turn", session=session, hooks=session)
    assert result.final_output == "after erasure"
    return await session.get_items()


def _shown(items: list[Any]) -> str:
    return json.dumps(items)


@pytest.mark.slow
async def test_erasing_a_subject_leaves_none_of_its_content_in_any_file_of_the_store(
    tmp_path: Path,
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    async with Journal.open(f"sqlite:///{plain / 'journal.db'}") as journal:
        await plant(journal, "alice")
    assert _found(_files(plain), PLANTED) == PLANTED  # the scan finds what a plain store keeps

    folder = tmp_path / "sealed"
    folder.mkdir()
    uri = f"sqlite:///{folder / 'journal.db'}"
    async with Journal.open(uri, keys=folder / "keys.db") as journal:
        await plant(journal, "alice")
        await _bob(journal)
        before = _shown(await journal.session("plant-1", user_id="alice").get_items())
        assert _found(before.encode(), PLANTED[:5]) == PLANTED[:5]

        erasure = await journal.erase(subject="alice", reason="GDPR art. 17 #88", by="dpo")
        assert erasure.sessions == ("plant-1", "plant-2")

        for session_id, branch in (("plant-1", None), ("plant-1", "b1"), ("plant-2", None)):
            items = await journal.session(session_id, user_id="alice", branch=branch).get_items()
            assert _found(_shown(items).encode(), PLANTED) == []
            assert ERASED in _shown(items)
        bob = await journal.session("bob-1", user_id="bob").get_items()
        assert _found(_shown(bob).encode(), BOB) == BOB
        after = await _new_turn(journal)
        assert "after erasure" in _shown(after)
        assert "a new turn" in _shown(after)

    raw = _files(folder)
    assert b"plant-1" in raw  # the scan reads the files (stream names are in the clear)
    assert {p.name for p in folder.iterdir()} >= {"journal.db", "keys.db"}
    assert _found(raw, PLANTED) == []

    async with Journal.open(uri, keys=folder / "keys.db") as journal:  # a new process
        items = await journal.session("plant-1", user_id="alice").get_items()
        assert _found(_shown(items).encode(), PLANTED) == []
        assert "after erasure" in _shown(items)
        bob = await journal.session("bob-1", user_id="bob").get_items()
        assert _found(_shown(bob).encode(), BOB) == BOB


@pytest.mark.parametrize("where", ["memory", "file"])
async def test_erasing_on_sqlite_leaves_nothing_readable_through_the_store(
    where: str, tmp_path: Path
) -> None:
    journal_uri = "sqlite://:memory:" if where == "memory" else f"sqlite:///{tmp_path / 'j.db'}"
    keys = MemoryKeyStore()
    async with Journal.open(journal_uri, keys=keys) as journal:
        await plant(journal, "alice")
        await journal.erase(subject="alice", reason="request 12", by="dpo")
        everything = await journal.store.read_all()
        raw = b"".join(e.data + json.dumps(dict(e.metadata)).encode() for e in everything)
        assert _found(raw, PLANTED) == []
        erased = [e for e in everything if e.type == "agentjournal.SubjectErased"]
        assert sorted(e.stream for e in erased) == ["AgentSession-plant-1", "AgentSession-plant-2"]
        body = json.loads(erased[0].data)
        assert (body["subject"], body["reason"], body["by"]) == ("alice", "request 12", "dpo")
        assert body["sessions"] == ["plant-1", "plant-2"]
        assert any(s.startswith("AgentSubsession-") for s in body["streams"])


async def test_erasing_on_the_kurrentdb_double_leaves_nothing_readable(
    kurrentdb_double: Any,
) -> None:
    keys = MemoryKeyStore()
    async with Journal.open(kurrentdb_double.uri, keys=keys) as journal:
        await plant(journal, "alice", "kdb-")
        await journal.erase(subject="alice", reason="request 13", by="dpo")
        everything = await journal.store.read_all()
        raw = b"".join(e.data for e in everything)
        assert _found(raw, PLANTED) == []
        items = await journal.session("kdb-plant-2", user_id="alice").get_items()
        assert ERASED in _shown(items)


async def _raw_through_the_client(uri: str) -> tuple[list[RecordedEvent], bytes]:
    """Every event of the KurrentDB at ``uri`` as kurrentdbclient reads it (in ``$all``
    and stream by stream), not through agentjournal, and every stream's metadata."""
    client = AsyncKurrentDBClient(uri)
    await client.connect()
    stream_metadata = b""
    try:
        everything = [e async for e in await client.read_all()]
        for name in sorted({e.stream_name for e in everything}):
            everything += await client.get_stream(name)
            metadata, _ = await client.get_stream_metadata(name)
            stream_metadata += json.dumps(metadata).encode()
    finally:
        await client.close()
    return [
        RecordedEvent(
            id=e.id,
            type=e.type,
            data=e.data,
            metadata=json.loads(e.metadata) if e.metadata else {},
            stream=e.stream_name,
            revision=e.stream_position,
            position=e.commit_position or 0,
            recorded_at=e.recorded_at or datetime.now(UTC),
        )
        for e in everything
    ], stream_metadata


def _bytes_of(raw: list[RecordedEvent]) -> bytes:
    return b"".join(e.data + json.dumps(dict(e.metadata)).encode() for e in raw)


async def test_after_an_erasure_no_planted_string_is_readable_through_the_kurrentdb_client(
    kurrentdb_double: Any,
) -> None:
    """Every raw event kurrentdbclient reads, data and metadata, holds none of the subject's
    content, and none opens with the key store any more (before the erasure all do)."""
    keys = MemoryKeyStore()
    async with Journal.open(kurrentdb_double.uri, keys=keys) as journal:
        await plant(journal, "alice")
        await _bob(journal)
        raw, stream_metadata = await _raw_through_the_client(kurrentdb_double.uri)
        assert _found(_bytes_of(raw) + stream_metadata, PLANTED) == []  # never in the clear
        opened = _bytes_of([open_event(e, keys) for e in raw])
        assert _found(opened, PLANTED + BOB) == PLANTED + BOB  # the scan can find them

        await journal.erase(subject="alice", reason="request 18", by="dpo")
        raw, stream_metadata = await _raw_through_the_client(kurrentdb_double.uri)
        assert any(e.type == "agentjournal.SubjectErased" for e in raw)
        assert any(e.stream.startswith("AgentSubsession-plant-1") for e in raw)
        assert _found(_bytes_of(raw) + stream_metadata, PLANTED) == []
        opened = _bytes_of([open_event(e, keys) for e in raw])
        assert _found(opened, PLANTED) == []
        assert _found(opened, BOB) == BOB


async def test_a_retried_erasure_finishes_an_interrupted_one_and_then_writes_nothing() -> None:
    keys = MemoryKeyStore()
    async with Journal.open("sqlite://:memory:", keys=keys) as journal:
        await plant(journal, "alice")
        keys.destroy("alice")  # the first run stopped after destroying the keys
        erasure = await journal.erase(subject="alice", reason="request 14", by="dpo")
        assert erasure.sessions == ("plant-1", "plant-2")
        count = len(await journal.store.read_all())
        again = await journal.erase(subject="alice", reason="request 14", by="dpo")
        assert again.sessions == ("plant-1", "plant-2")
        assert len(await journal.store.read_all()) == count


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"subject": " ", "reason": "r", "by": "b"}, "subject"),
        ({"subject": "alice", "reason": "", "by": "b"}, "reason"),
        ({"subject": "alice", "reason": "r", "by": "\t"}, "by"),
    ],
)
async def test_an_erasure_with_blank_input_destroys_and_writes_nothing(
    arguments: dict[str, str], message: str
) -> None:
    keys = MemoryKeyStore()
    async with Journal.open("sqlite://:memory:", keys=keys) as journal:
        session = journal.session("s1", user_id="alice")
        await session.add_items([{"role": "user", "content": "hello"}])
        count = len(await journal.store.read_all())
        with pytest.raises(InvalidInput, match=message):
            await journal.erase(**arguments)
        assert len(await journal.store.read_all()) == count
        assert await session.get_items() == [{"role": "user", "content": "hello"}]


async def test_a_journal_without_keys_cannot_erase() -> None:
    async with Journal.open("sqlite://:memory:") as journal:
        with pytest.raises(InvalidInput, match="keys="):
            await journal.erase(subject="alice", reason="r", by="b")


async def test_a_purge_drops_the_read_model_rows_of_the_streams_and_their_bytes(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    async with Journal.open(uri) as journal:
        for session_id in ("gone", "kept"):
            await journal.session(session_id).add_items(
                [{"role": "user", "content": f"PURGE-{session_id}-5e1c"}]
            )
        store: Any = journal.store
        assert await store.read_model("AgentSession-gone") is not None
        await store.purge(["AgentSession-gone"])
        assert await store.read_model("AgentSession-gone") is None
        assert await store.read_model("AgentSession-kept") is not None
        assert await journal.session("gone").get_items() == [
            {"role": "user", "content": "PURGE-gone-5e1c"}
        ]
        rows = store._db.execute(f"SELECT {ITEM_TEXT} FROM items").fetchall()
        assert [r[0] for r in rows] == ['{"role":"user","content":"PURGE-kept-5e1c"}']


class _FailingErasures:
    """A store whose appends of ``SubjectErased`` fail as an outage would (a process dying
    there): every other call passes on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def append_many(self, requests: Any) -> Any:
        if any(e.type == "agentjournal.SubjectErased" for r in requests for e in r.events):
            raise StoreUnavailable("the process died here")
        return await self.inner.append_many(requests)

    async def append(self, stream: str, events: Any, *, expected: Any) -> Any:
        if any(e.type == "agentjournal.SubjectErased" for e in events):
            raise StoreUnavailable("the process died here")
        return await self.inner.append(stream, events, expected=expected)


@pytest.mark.slow
async def test_an_erasure_cut_short_leaves_the_content_unreadable_and_a_retry_finishes_it() -> None:
    keys = MemoryKeyStore()
    async with Journal.open("sqlite://:memory:", keys=keys) as journal:
        await plant(journal, "alice")
        cut = Journal(_FailingErasures(journal.store), journal.uri, keys=keys)
        with pytest.raises(StoreUnavailable):
            await cut.erase(subject="alice", reason="request 15", by="dpo")
        everything = await journal.store.read_all()
        assert not [e for e in everything if e.type == "agentjournal.SubjectErased"]
        fresh = Journal(journal.store, journal.uri, keys=keys)
        items = await fresh.session("plant-1", user_id="alice").get_items()
        assert _found(_shown(items).encode(), PLANTED) == []  # erased, not yet recorded

        erasure = await fresh.erase(subject="alice", reason="request 15", by="dpo")
        assert erasure.sessions == ("plant-1", "plant-2")
        erased = [
            e for e in await journal.store.read_all() if e.type == "agentjournal.SubjectErased"
        ]
        assert len(erased) == 2


async def test_the_erasure_finds_its_sessions_across_pages_of_the_global_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("agentjournal.engine.erasure._PAGE", 3)
    keys = MemoryKeyStore()
    async with Journal.open("sqlite://:memory:", keys=keys) as journal:
        await plant(journal, "alice")
        erasure = await journal.erase(subject="alice", reason="request 16", by="dpo")
        assert erasure.sessions == ("plant-1", "plant-2")
        again = await journal.erase(subject="alice", reason="request 16", by="dpo")
        assert again.sessions == ("plant-1", "plant-2")
        erased = [
            e for e in await journal.store.read_all() if e.type == "agentjournal.SubjectErased"
        ]
        assert len(erased) == 2


class _FailingCheckpoints(_FailingErasures):
    """A store whose appends of checkpoints fail (a process dying right after it recorded
    an erasure, before signing it)."""

    async def append_many(self, requests: Any) -> Any:
        if any(e.type == CHECKPOINT for r in requests for e in r.events):
            raise StoreUnavailable("the process died here")
        return await self.inner.append_many(requests)

    async def append(self, stream: str, events: Any, *, expected: Any) -> Any:
        if any(e.type == CHECKPOINT for e in events):
            raise StoreUnavailable("the process died here")
        return await self.inner.append(stream, events, expected=expected)


async def test_a_retried_erasure_signs_an_erasure_recorded_before_its_checkpoint() -> None:
    key = SigningKey.generate()
    keys = MemoryKeyStore()
    async with Journal.open("sqlite://:memory:", keys=keys, signing_key=key) as journal:
        session = journal.session("s1", user_id="alice")
        await session.add_items([{"role": "user", "content": "hello"}])
        await session.checkpoint()
        cut = Journal(_FailingCheckpoints(journal.store), journal.uri, keys=keys, signing_key=key)
        with pytest.raises(StoreUnavailable):
            await cut.erase(subject="alice", reason="request 17", by="dpo")
        trusted = {key.key_id: key.public_key}
        report = verify_records(await read_tree(journal.store, "s1"), trusted)
        assert "not covered by a signature" in report.text()

        await journal.erase(subject="alice", reason="request 17", by="dpo")
        report = verify_records(await read_tree(journal.store, "s1"), trusted)
        assert report.ok, report.text()
        count = len(await journal.store.read_all())
        await journal.erase(subject="alice", reason="request 17", by="dpo")
        assert len(await journal.store.read_all()) == count


async def test_a_writer_that_cached_the_key_seals_its_next_turn_under_a_fresh_one(
    tmp_path: Path,
) -> None:
    """Two journals on one store and one key file, as two processes: A writes (its key
    cached for a minute), B erases the subject, A writes again. A's new turn is sealed under
    a fresh key — readable, not lost — and the session still verifies."""
    uri, keys = f"sqlite:///{tmp_path / 'j.db'}", str(tmp_path / "keys.db")
    async with Journal.open(uri, keys=keys) as writer:
        session = writer.session("race-1", user_id="alice")
        await session.add_items([{"role": "user", "content": "before the erasure"}])
        async with Journal.open(uri, keys=keys) as eraser:
            await eraser.erase(subject="alice", reason="art. 17", by="dpo")
        await session.add_items([{"role": "user", "content": "ZQ after the erasure"}])
    async with Journal.open(uri, keys=keys) as reader:
        items: list[Any] = await reader.session("race-1", user_id="alice").get_items()
        assert [i["content"] for i in items] == [ERASED, "ZQ after the erasure"]
        report = verify_records(await read_tree(reader.store, "race-1"), {})
    assert [p for p in report.problems if not p.untrusted] == [], report.text()  # unsigned here
    assert "sealed under 2 subject keys (1 erased)" in report.text()
