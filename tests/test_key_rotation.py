"""Keys rotate: a verifier given the first key follows the signed chain of keys, and the
checkpoint stream's own order is signed."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle
from agentjournal.errors import InvalidInput
from agentjournal.ledger import (
    GENESIS,
    Checkpoint,
    KeyRotation,
    SigningKey,
    signed_event_id,
    trusted_closure,
)
from ledger_sessions import rechain

A, B, C = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()


def trust(*keys: SigningKey) -> dict[str, Any]:
    return {key.key_id: key.public_key for key in keys}


async def _write(db: str, key: SigningKey, text: str) -> None:
    async with Journal.open(db, signing_key=key) as journal:
        session = journal.session("rotated")
        await session.add_items([{"role": "user", "content": text}])
        await session.checkpoint()


async def _rotated(tmp_path: Path, *hops: tuple[SigningKey, SigningKey]) -> dict[str, Any]:
    """A session signed by A, then by the end of each rotation in ``hops``."""
    db = f"sqlite:///{tmp_path / 'keys.db'}"
    await _write(db, A, "signed by A")
    for old, new in hops:
        async with Journal.open(db) as journal:
            rotation = await journal.rotate_key(old, new)
            assert rotation.verify(old.public_key)
        await _write(db, new, f"signed by {new.key_id}")
    async with Journal.open(db) as journal:
        return await export_bundle(journal.store, "rotated")


async def test_a_verifier_given_the_first_key_follows_the_rotation(tmp_path: Path) -> None:
    bundle = await _rotated(tmp_path, (A, B))
    report = verify_bundle(bundle, trust(A))
    assert report.ok, report.text()
    assert any(line.startswith("keys: 1 trusted key given; 1 rotation") for line in report.lines)
    assert B.key_id in report.text()
    assert verify_bundle(bundle, trust(B, A)).ok  # several keys may be given


async def test_a_chain_of_rotations_is_followed_in_any_order(tmp_path: Path) -> None:
    bundle = await _rotated(tmp_path, (A, B), (B, C))
    assert verify_bundle(bundle, trust(A)).ok
    keys = next(s for s in bundle["streams"] if s["name"] == "AgentKeys")
    keys["events"].reverse()
    rechain(bundle, "AgentKeys")
    assert verify_bundle(bundle, trust(A)).ok, "the rotations' order does not matter"


async def test_without_the_rotation_the_new_key_is_not_trusted(tmp_path: Path) -> None:
    bundle = await _rotated(tmp_path, (A, B))
    bundle["streams"] = [s for s in bundle["streams"] if s["name"] != "AgentKeys"]
    report = verify_bundle(bundle, trust(A))
    assert not report.ok
    assert "not a trusted key nor one a trusted key rotated to" in report.text()
    assert f"{B.key_id} is not a trusted key" in str(report.problems[0])


async def test_a_rotation_signed_by_an_untrusted_key_adds_nothing(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'keys.db'}"
    await _write(db, A, "signed by A")
    async with Journal.open(db) as journal:
        await journal.rotate_key(C, B)  # C is nobody the verifier trusts
    await _write(db, B, "signed by B")
    async with Journal.open(db) as journal:
        bundle = await export_bundle(journal.store, "rotated")
    report = verify_bundle(bundle, trust(A))
    assert not report.ok
    assert B.key_id in str(report.problems[0])


def test_a_forged_rotation_is_refused_by_the_closure() -> None:
    now = datetime.now(UTC)
    honest = KeyRotation.sign(A, B.public_key, now)
    assert set(trusted_closure(trust(A), [honest])) == {A.key_id, B.key_id}
    lying = KeyRotation(
        A.key_id, C.key_id, honest.new_public_key, honest.rotated_at, honest.signature
    )
    assert set(trusted_closure(trust(A), [lying])) == {A.key_id}  # new key is not its id
    forged = KeyRotation.sign(C, B.public_key, now)
    forged = KeyRotation(
        A.key_id, forged.new_key_id, forged.new_public_key, now.isoformat(), forged.signature
    )
    assert set(trusted_closure(trust(A), [forged])) == {A.key_id}  # A never signed it
    assert KeyRotation.decode(json.loads(honest.encode())) == honest
    with pytest.raises(InvalidInput):
        KeyRotation.decode({**json.loads(honest.encode()), "extra": "x"})


async def test_rotating_to_the_same_key_is_refused() -> None:
    async with Journal.open("sqlite://:memory:") as journal:
        with pytest.raises(InvalidInput, match="the old one"):
            await journal.rotate_key(A, A)


# -- the checkpoint stream's own order -------------------------------------------------------


async def _two_checkpoints(tmp_path: Path) -> dict[str, Any]:
    db = f"sqlite:///{tmp_path / 'order.db'}"
    await _write(db, A, "one")
    await _write(db, A, "two")
    async with Journal.open(db) as journal:
        return await export_bundle(journal.store, "rotated")


async def test_swapping_two_checkpoints_is_detected_even_rechained(tmp_path: Path) -> None:
    bundle = await _two_checkpoints(tmp_path)
    assert verify_bundle(bundle, trust(A)).ok
    ledger = next(s for s in bundle["streams"] if s["name"].startswith("AgentLedger-"))
    ledger["events"].reverse()
    rechain(bundle, ledger["name"])
    report = verify_bundle(bundle, trust(A))
    assert not report.ok
    assert "reordered" in str(report.problems[0])


async def test_the_newest_checkpoint_is_the_newest_by_sequence(tmp_path: Path) -> None:
    """A later checkpoint whose clock ran behind is still the newest: its place is signed."""
    bundle = await _two_checkpoints(tmp_path)
    ledger = next(s for s in bundle["streams"] if s["name"].startswith("AgentLedger-"))
    late, early = datetime(2030, 1, 2, tzinfo=UTC), datetime(2030, 1, 1, tzinfo=UTC)
    previous = GENESIS
    for event, when in zip(ledger["events"], (late, early), strict=True):
        body = Checkpoint.decode(json.loads(event["data"]))
        signed = Checkpoint.sign(
            A,
            body.session_id,
            body.heads,
            when,
            sequence=body.sequence,
            previous=previous,
            metadata=body.metadata,
        )
        event["data"] = signed.encode().decode()
        event["id"] = str(signed_event_id(ledger["name"], signed.signature))
        rechain(bundle, ledger["name"])
        previous = event["metadata"]["aj.hash"]
    report = verify_bundle(copy.deepcopy(bundle), trust(A))
    assert report.ok, report.text()
    assert f"the newest at {ledger['name']}@1, signed {early.isoformat()}" in report.text()
    anchored = verify_bundle(bundle, trust(A), not_before=(early + timedelta(hours=1)).isoformat())
    assert not anchored.ok
    assert "cut back" in str(anchored.problems[0])


async def test_a_checkpoint_by_a_key_outside_the_chain_is_reported_not_counted(
    tmp_path: Path,
) -> None:
    """Trusting only the new key: the old key's checkpoints are reported and not counted,
    and the session verifies when the new key's checkpoint covers every event."""
    bundle = await _rotated(tmp_path, (A, B))
    report = verify_bundle(bundle, trust(B))
    assert report.ok, report.text()
    assert f"signed by {A.key_id}, which is not a trusted key" in report.text()
