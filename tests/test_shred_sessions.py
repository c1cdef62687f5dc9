"""Sessions whose content is sealed under their subject's key: the SDK reads back exactly
what it wrote, on every backend, while the store holds only ciphertext."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import pytest
from agents.memory.session import Session

from agentjournal import Journal
from agentjournal.errors import InvalidInput
from agentjournal.shred import MemoryKeyStore, SubjectKeyStore
from agentjournal.shred.fields import KEY_ID_KEY
from agentjournal.testing.session_conformance import (
    OpenSession,
    Restart,
    SessionConformance,
    sdk_items,
)
from shred_scenarios import PLANTED, plant


class SealedJournals:
    """Journals on one store and one key store; ``restart`` opens a new one as a new process."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.keys: SubjectKeyStore = MemoryKeyStore()
        self.journal: Journal | None = None

    async def open(self) -> Journal:
        self.journal = await Journal.open(self.uri, keys=self.keys)
        return self.journal

    async def restart(self) -> None:
        assert self.journal is not None
        if self.uri == "sqlite://:memory:":
            self.journal = Journal(self.journal.store, self.uri, keys=self.keys)
        else:
            await self.journal.store.close()  # the key store outlives the journal here
            await self.open()


@pytest.fixture
async def sealed(journal_uri: str) -> AsyncIterator[SealedJournals]:
    journals = SealedJournals(journal_uri)
    await journals.open()
    yield journals
    assert journals.journal is not None
    await journals.journal.store.close()


class TestSealedJournalSession(SessionConformance):
    """``journal.session(id, user_id=...)`` on a journal opened with ``keys=``."""

    @pytest.fixture
    def open_session(self, sealed: SealedJournals) -> OpenSession:
        def open_session(session_id: str) -> Session:
            assert sealed.journal is not None
            return sealed.journal.session(session_id, user_id="subject-1")

        return open_session

    @pytest.fixture
    def restart(self, sealed: SealedJournals) -> Restart:
        return sealed.restart


async def test_the_store_holds_only_ciphertext_of_a_sealed_session(
    sealed: SealedJournals,
) -> None:
    assert sealed.journal is not None
    session = sealed.journal.session("sealed-1", user_id="alice")
    items = sdk_items()
    await session.add_items(items)  # type: ignore[arg-type]
    assert await session.get_items() == items

    stored = await sealed.journal.store.read("AgentSession-sealed-1")
    sealed_events = [event for event in stored if KEY_ID_KEY in event.metadata]
    assert len(sealed_events) >= len(items) - 1
    raw = b"".join(event.data for event in stored)
    assert b"alice" in raw  # the scan reads the stored bytes (SessionStarted is clear)
    assert [t for t in _CONTENT if t.encode() in raw] == []

    fresh = (
        await Journal.open(sealed.uri, keys=sealed.keys) if ":memory:" not in sealed.uri else None
    )
    if fresh is not None:
        assert await fresh.session("sealed-1", user_id="alice").get_items() == items
        await fresh.store.close()


_CONTENT = [
    "charged twice",
    "Order 42, please.",
    "Answer briefly.",
    "You are the triage agent.",
    "Hi there!",
    "Look the order up first.",
    "raw thought",
    "gAAAAB-opaque",
    "amount_cents",
    "refunded 1250 cents",
]


async def test_a_sealing_journal_needs_a_subject() -> None:
    async with Journal.open("sqlite://:memory:", keys=MemoryKeyStore()) as journal:
        with pytest.raises(InvalidInput, match="user_id= or subject="):
            journal.session("anonymous")
        assert journal.session("named", subject="bob") is not None


async def test_a_subject_needs_a_key_store() -> None:
    async with Journal.open("sqlite://:memory:") as journal:
        with pytest.raises(InvalidInput, match="keys="):
            journal.session("s", subject="bob")


def _found(raw: bytes) -> list[str]:
    return [text for text in PLANTED if text.encode() in raw]


async def test_every_content_field_is_stored_sealed_and_read_back_as_written(
    journal_uri: str,
) -> None:
    """The same runs on a plain journal and on a sealing one: the SDK reads the same
    history; the plain sessions' events hold every planted string, the sealed ones none."""
    histories = []
    prefix = uuid.uuid4().hex[:8]
    for keys in (None, MemoryKeyStore()):
        async with Journal.open(journal_uri, keys=keys) as journal:
            mine = f"{prefix}{'sealed' if keys else 'plain'}-"
            await plant(journal, "alice", mine)
            raw = b"".join(
                event.data + json.dumps(dict(event.metadata)).encode()
                for event in await journal.store.read_all()
                if mine in event.stream
            )
            assert _found(raw) == (PLANTED if keys is None else []), keys
            histories.append(
                [
                    await journal.session(f"{mine}plant-1", user_id="alice").get_items(),
                    await journal.session(
                        f"{mine}plant-1", user_id="alice", branch="b1"
                    ).get_items(),
                    await journal.session(f"{mine}plant-2", user_id="alice").get_items(),
                ]
            )
    assert histories[0] == histories[1]


async def test_a_sealed_session_refuses_application_events() -> None:
    """``append_event`` on a sealed session: refused, nothing written (the journal cannot
    tell an application's content fields, and no erasure could reach them)."""
    from agentjournal import InvalidInput, Journal
    from agentjournal.shred import MemoryKeyStore

    async with Journal.open("sqlite://:memory:", keys=MemoryKeyStore()) as journal:
        session = journal.session("app-events", user_id="alice")
        await session.add_items([{"role": "user", "content": "hi"}])
        before = len(await journal.store.read_all())
        with pytest.raises(InvalidInput, match="seals its content"):
            await session.append_event("myapp.Note", b'{"note": "ZQsecret"}')
        assert len(await journal.store.read_all()) == before
