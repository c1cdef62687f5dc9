"""The write path keeps every chain valid: concurrent writers, pops and clears, checkpoints."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle
from agentjournal.authority import Policy
from agentjournal.ledger import CHECKPOINT, SigningKey
from agentjournal.sdk.session import JournalSession
from agentjournal.streams import ledger_stream
from agentjournal.testing.kurrentdb_double import ThreadedKurrentDBDouble


async def writes(session: JournalSession, who: str, count: int) -> None:
    for n in range(count):
        await session.add_items([{"role": "user", "content": f"{who} {n}"}])


@pytest.fixture(params=["sqlite-file", "kurrentdb"])
def shared_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    double: ThreadedKurrentDBDouble = request.getfixturevalue("kurrentdb_double")
    return double.uri


async def test_concurrent_writers_keep_the_chain_linear(shared_uri: str) -> None:
    key = SigningKey.generate()
    async with (
        Journal.open(shared_uri, signing_key=key) as first,
        Journal.open(shared_uri, signing_key=key) as second,
    ):
        a, b = first.session("shared"), second.session("shared")
        await asyncio.gather(writes(a, "a", 25), writes(b, "b", 25))
        assert await a.pop_item() is not None
        await b.clear_session()
        await a.add_items([{"role": "user", "content": "after the clear"}])
        await b.checkpoint()
        bundle = await export_bundle(first.store, "shared")
    report = verify_bundle(bundle, {key.key_id: key.public_key})
    assert report.ok, report.text()
    assert (
        len(bundle["streams"][0]["events"]) == 1 + 50 + 1 + 1 + 1
    )  # started, items, pop, clear, item


async def test_checkpoints_every_n_events_and_at_run_end(tmp_path: Path) -> None:
    key = SigningKey.generate()
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", signing_key=key) as journal:
        session = JournalSession(journal.store, "often", signing_key=key, checkpoint_every=5)
        await writes(session, "x", 12)
        checkpoints = [
            e for e in await journal.store.read(ledger_stream("often")) if e.type == CHECKPOINT
        ]
        assert len(checkpoints) == 2  # after 5 and after 10 events (SessionStarted counts)
        bundle = await export_bundle(journal.store, "often")
    trusted = {key.key_id: key.public_key}
    assert not verify_bundle(bundle, trusted).ok  # the last two items are not covered yet
    assert verify_bundle(bundle, trusted, allow_uncovered=True).ok


def test_checkpoint_every_must_be_positive() -> None:
    from agentjournal.store.sqlite import SQLiteEventStore

    store = SQLiteEventStore.connect(":memory:")
    with pytest.raises(ValueError, match="checkpoint_every"):
        JournalSession(store, "s", checkpoint_every=0)
    store.close_sync()


POLICY = Path(__file__).resolve().parents[1] / "samples" / "policy.yml"
SID = "s1"


async def test_an_authority_only_session_checkpoints(tmp_path: Path) -> None:
    key = SigningKey.generate()
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}", signing_key=key) as journal:
        session = journal.session(SID, policy=Policy.load(POLICY))
        await session.reset_authority("triage", reason="operator reset")  # nothing else yet
        checkpoint = await session.checkpoint()
    assert checkpoint is not None
    assert sorted(checkpoint.heads) == [f"AgentAuthority-{SID}"]
