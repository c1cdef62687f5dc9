"""The verifier on sealed and erased sessions: the chains over ciphertext verify, each erased
stream is named, the checks that need plaintext say so, and a forged or dropped erasure fails."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle, verify_records
from agentjournal.engine.erasure import _record
from agentjournal.ledger import SigningKey
from agentjournal.records import TreeRecords
from agentjournal.shred import MemoryKeyStore
from agentjournal.shred.sealing import OpeningStore
from agentjournal.walk import read_tree
from shred_scenarios import plant

KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}


@pytest.fixture
async def erased() -> AsyncIterator[tuple[Journal, dict[str, Any]]]:
    """plant-1 and plant-2 of alice, bundles exported before the erasure, then erased."""
    async with Journal.open("sqlite://:memory:", keys=MemoryKeyStore(), signing_key=KEY) as journal:
        await plant(journal, "alice")
        for session_id, branch in (("plant-1", None), ("plant-1", "b1"), ("plant-2", None)):
            await journal.session(session_id, user_id="alice", branch=branch).checkpoint()
        before = {sid: await export_bundle(journal.store, sid) for sid in ("plant-1", "plant-2")}
        await journal.erase(subject="alice", reason="GDPR art. 17, ticket 88", by="dpo@example.com")
        yield journal, before


async def test_an_erased_session_verifies_and_names_each_erased_stream(
    erased: tuple[Journal, dict[str, Any]],
) -> None:
    journal, _ = erased
    report = verify_records(await read_tree(journal.store, "plant-1"), TRUSTED)
    text = report.text()
    assert report.ok, text
    assert report.integrity.state == "verified"
    for stream in (
        "AgentSession-plant-1",
        "AgentBranch-plant-1@b1",
        "AgentSubsession-plant-1-sub-billing-h1",
    ):
        assert f"erasure: {stream}: content of subject alice erased at " in text, text
    assert "by dpo@example.com (GDPR art. 17, ticket 88)" in text
    assert "not checked: 1 tool call and 5 guardrail decisions sealed" in text
    paused = verify_records(await read_tree(journal.store, "plant-2"), TRUSTED)
    assert paused.ok, paused.text()
    assert "2 sealed approval events (a subject's content, or erased)" in paused.text()


async def test_bundles_exported_before_and_after_the_erasure_verify(
    erased: tuple[Journal, dict[str, Any]],
) -> None:
    journal, before = erased
    for session_id, bundle in before.items():
        old = verify_bundle(json.loads(json.dumps(bundle)), TRUSTED)
        assert old.ok, old.text()
        assert "erasure:" not in old.text()
        for redact in (False, True):
            after = await export_bundle(journal.store, session_id, redact=redact)
            report = verify_bundle(json.loads(json.dumps(after)), TRUSTED)
            assert report.ok, (redact, report.text())
            assert "content of subject alice erased at" in report.text()


def _without(records: TreeRecords, type_: str) -> TreeRecords:
    streams = {
        name: [r for r in stream if r.type != type_] for name, stream in records.streams.items()
    }
    return TreeRecords(records.session_id, streams)


async def test_a_dropped_erasure_fails(erased: tuple[Journal, dict[str, Any]]) -> None:
    journal, _ = erased
    records = await read_tree(journal.store, "plant-2")
    report = verify_records(_without(records, "agentjournal.SubjectErased"), TRUSTED)
    assert not report.ok


async def test_an_altered_erasure_fails(erased: tuple[Journal, dict[str, Any]]) -> None:
    journal, _ = erased
    bundle = await export_bundle(journal.store, "plant-2")
    (stream,) = [s for s in bundle["streams"] if s["name"] == "AgentSession-plant-2"]
    (event,) = [e for e in stream["events"] if e["type"] == "agentjournal.SubjectErased"]
    event["data"] = event["data"].replace("dpo@example.com", "someone@else")
    report = verify_bundle(bundle, TRUSTED)
    assert not report.ok


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"key_ids": ["0" * 32]}, "names keys no content here is sealed under"),
        ({"streams": ["AgentSession-plant-2", "AgentSession-other"]}, "names streams"),
        ({"sessions": ["other"]}, "does not name this session"),
    ],
)
async def test_a_forged_erasure_with_a_valid_chain_fails(
    change: dict[str, Any], problem: str
) -> None:
    keys = MemoryKeyStore()
    async with Journal.open("sqlite://:memory:", keys=keys) as journal:
        await plant(journal, "alice")
        key_id = keys.current("alice").key_id
        body = {
            "subject": "alice",
            "key_ids": [key_id],
            "streams": ["AgentSession-plant-2"],
            "sessions": ["plant-2"],
            "reason": "forged",
            "by": "mallory",
            "erased_at": "2026-01-01T00:00:00Z",
            **change,
        }
        data = json.dumps(body).encode()
        await _record(OpeningStore(journal.store, keys), "plant-2", data, uuid.uuid4(), None)
        report = verify_records(await read_tree(journal.store, "plant-2"), {}, allow_uncovered=True)
        assert not report.ok
        assert problem in report.text(), report.text()
