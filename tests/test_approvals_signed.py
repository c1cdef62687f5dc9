"""Approvals that cannot be forged: every answer names the digest of the arguments it
answers; an approver's answer carries their key id and an Ed25519 signature over what it
says; a tool the policy names approvers for is answered, and resumed, only on an answer one
of them signed. Redacted bundles keep the decision and its signature, not the arguments.

Runs use the SDK's real ``Runner`` with ``ScriptedModel`` (tests/approval_sessions.py).
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentjournal import ApproverNotAllowed, Journal
from agentjournal import events as ev
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle, verify_records
from agentjournal.authority import Policy
from agentjournal.errors import CodecError, InvalidInput
from agentjournal.ledger.keys import SigningKey, key_id, verified
from agentjournal.walk import read_tree
from approval_sessions import ANN, MALLORY, answered, approved_policy, approver, public_text
from test_approvals import ARGUMENTS, SID, graph, typed

NOW = datetime.now(UTC)
SAMPLES = Path(__file__).resolve().parents[1] / "samples"


async def verify_text(journal: Journal) -> str:
    report = verify_records(await read_tree(journal.store, SID), {}, allow_uncovered=True)
    assert report.ok, report.text()
    return report.text()


# -- signing and recording -----------------------------------------------------------------


@pytest.mark.parametrize("approve", [True, False], ids=["approve", "reject"])
async def test_an_approver_s_answer_carries_the_digest_key_and_a_signature_over_what_it_says(
    journal: Journal, approve: bool
) -> None:
    """The stored answer names the arguments' digest, ann's key id and a signature that
    verifies over the session, stream, request, question, digest, outcome, reason, who and
    when; the run resumes (the tool runs only when approved) and the verifier counts it."""
    ran: list[str] = []
    session = journal.session(SID, policy=approved_policy())
    await answered(session, approve=approve, ran=ran)
    assert ran == (["42:1250"] if approve else [])
    (stored,) = await typed(journal.store, ev.INTERRUPT_RESOLVED)
    decided = ev.ApprovalDecided.decode(stored.data)
    assert decided.arguments_digest == ev.arguments_digest(ARGUMENTS)
    assert decided.key_id == key_id(ANN.public_key()) == approver().key_id
    signed = ev.approval_signed_bytes(SID, stored.stream, decided)
    assert verified(ANN.public_key(), decided.signature, signed)
    body = json.loads(signed)
    assert body["stream"] == stored.stream
    assert body["outcome"] == ("approved" if approve else "rejected")
    assert stored.metadata[ev.POLICY_KEY] == approved_policy().digest
    outcome = "1 approved, 0 rejected" if approve else "0 approved, 1 rejected"
    assert f"approvals: 1 asked, {outcome}, 1 signed" in await verify_text(journal)


async def test_an_answer_without_a_named_approver_s_key_is_refused_and_writes_nothing(
    journal: Journal,
) -> None:
    """No key, or a key the policy does not name: a one-line ApproverNotAllowed and no
    event; ann's key then answers. A ledger SigningKey signs as well as a raw key."""
    session = journal.session(SID, policy=approved_policy())
    ran: list[str] = []
    paused: Any = await _pause(session, ran)
    await session.hold(paused)
    before = len(await journal.store.read_all())
    with pytest.raises(ApproverNotAllowed, match="not signed; issue_refund needs one") as no_key:
        await session.approve("r1", by="ann")
    assert "\n" not in str(no_key.value)
    assert (no_key.value.request_id, no_key.value.tool_name) == ("r1", "issue_refund")
    with pytest.raises(ApproverNotAllowed, match="no approver of issue_refund"):
        await session.reject("r1", by="mallory", key=MALLORY)
    with pytest.raises(InvalidInput, match="Ed25519 private key"):
        await session.approve("r1", by="ann", key="not a key")  # type: ignore[arg-type]
    assert len(await journal.store.read_all()) == before
    await session.approve("r1", by="ann", key=SigningKey(ANN))
    await session.resume(session.guard(graph(ran, answer="Done.")))
    assert ran == ["42:1250"]


async def _pause(session: Any, ran: list[str]) -> Any:
    from drive import drive
    from test_approvals import ASK

    return await drive(session.guard(graph(ran)), ASK, session=session, hooks=session)


async def test_without_named_approvers_any_answer_counts_and_names_the_arguments() -> None:
    """No policy: an unsigned answer names the arguments' digest; a signed one by any key
    is recorded and verifies (the verifier says its signature, by a key no policy names,
    could not be checked: it is not counted as a verified signature)."""
    for key in (None, MALLORY):
        async with Journal.open("sqlite://:memory:") as journal:
            session = journal.session(SID)
            await answered(session, key=key, guarded=False)
            (stored,) = await typed(journal.store, ev.INTERRUPT_RESOLVED)
            decided = ev.ApprovalDecided.decode(stored.data)
            assert decided.arguments_digest == ev.arguments_digest(ARGUMENTS)
            assert decided.signed == (key is not None)
            text = await verify_text(journal)
            assert "0 signed" in text
            unchecked = "1 answer signed by a key no policy names: the signature not checked"
            assert (unchecked in text) == (key is not None)


async def test_resume_refuses_an_answer_the_policy_s_approvers_did_not_sign(
    journal: Journal,
) -> None:
    """An answer recorded under a policy without approvers (signed by mallory), resumed by
    a session whose policy names ann: the resume refuses it and the tool never runs."""
    ran: list[str] = []
    first = journal.session(SID, policy=approved_policy(approver(tools=("lookup_order",))))
    await answered(first, key=MALLORY, ran=ran, resume=False)
    second = journal.session(SID, policy=approved_policy())
    with pytest.raises(ApproverNotAllowed, match="no approver of issue_refund"):
        await second.resume(second.guard(graph(ran, answer="Done.")))
    assert ran == []


# -- the codec ------------------------------------------------------------------------------


def _decided(**extension: Any) -> bytes:
    body = json.loads(ev.ApprovalDecided("r1", "approved", "ok", "ann", "q1", NOW).encode())
    body["extensions"]["agentjournal"].update(extension)
    return json.dumps(body).encode()


def test_an_answer_recorded_before_signatures_still_decodes() -> None:
    decided = ev.ApprovalDecided.decode(_decided())
    assert (decided.arguments_digest, decided.key_id, decided.signature) == ("", "", "")
    assert not decided.signed


@pytest.mark.parametrize(
    "extension",
    [
        {"signature": "!!!not base64!!!", "key_id": "ed25519:" + "0" * 16},
        {"signature": base64.b64encode(b"x" * 63).decode(), "key_id": "ed25519:" + "0" * 16},
        {"signature": base64.b64encode(b"x" * 64).decode()},
        {"key_id": "ed25519:" + "0" * 16},
        {"key_id": 7, "signature": base64.b64encode(b"x" * 64).decode()},
        {"arguments_sha256": ["sha256:" + "0" * 64]},
        {"arguments_sha256": "sha256:" + "0" * 10_000_000},
        {"signature": "A" * 10_000_000, "key_id": "ed25519:" + "0" * 16},
        {"arguments_sha256": "md5:abc"},
        {"arguments_hmac": "hmac-sha256:" + "0" * 64},
        {"reason_hmac": "hmac-sha256:" + "0" * 64},
        {
            "arguments_sha256": "sha256:" + "0" * 64,
            "arguments_hmac": "hmac-sha256:" + "0" * 64,
            "reason_hmac": "hmac-sha256:" + "0" * 64,
        },
        {"arguments_hmac": "sha256:" + "0" * 64, "reason_hmac": "hmac-sha256:" + "0" * 64},
    ],
    ids=[
        "bad-base64",
        "short-signature",
        "signature-without-key",
        "key-without-signature",
        "key-id-not-text",
        "digest-not-text",
        "huge-digest",
        "huge-signature",
        "other-digest",
        "keyed-without-reason",
        "reason-without-keyed",
        "plain-and-keyed",
        "keyed-not-hmac",
    ],
)
def test_a_hostile_answer_decodes_to_a_one_line_codec_error(extension: dict[str, Any]) -> None:
    with pytest.raises(CodecError) as raised:
        ev.ApprovalDecided.decode(_decided(**extension))
    assert "\n" not in str(raised.value)
    assert len(str(raised.value)) < 300


WHEN = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def test_a_plain_answer_s_signed_bytes_are_format_1_as_they_always_were() -> None:
    """Answers signed before sealed sessions existed verify byte for byte."""
    decided = ev.ApprovalDecided(
        "r1", "approved", "ok", "ann", "q1", WHEN, arguments_digest=ev.arguments_digest("{}")
    )
    assert ev.approval_signed_bytes("s1", "AgentSession-s1", decided) == (
        b'{"arguments_sha256":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61'
        b'caaff8a","by":"ann","format":"agentjournal-approval/1","issued":"q1","outcome":"approv'
        b'ed","reason_sha256":"sha256:c48b5b1a9776c84602de2306d7903a7241158a5077e7a8519af75c334'
        b'41b8334","request_id":"r1","session_id":"s1","stream":"AgentSession-s1","time":"2026-0'
        b'1-02T03:04:05.678901Z"}'
    )


def test_a_keyed_answer_s_signed_bytes_hold_its_keyed_digests_and_say_so() -> None:
    keyed, reason = "hmac-sha256:" + "a" * 64, "hmac-sha256:" + "b" * 64
    decided = ev.ApprovalDecided(
        "r1", "approved", "ok", "ann", "q1", WHEN, arguments_digest=keyed, reason_hmac=reason
    )
    signed = json.loads(ev.approval_signed_bytes("s1", "AgentSession-s1", decided))
    assert signed["format"] == ev.SIGNED_KEYED_APPROVAL
    assert (signed["arguments_hmac"], signed["reason_hmac"]) == (keyed, reason)
    assert "arguments_sha256" not in signed
    assert "reason_sha256" not in signed
    assert ev.ApprovalDecided.decode(decided.encode()) == decided


# -- the policy's approvers -----------------------------------------------------------------


def test_the_policy_names_approvers_by_tool_or_scope_and_round_trips() -> None:
    by_scope = approver("bob", MALLORY, scopes=("billing.*",))
    policy = approved_policy(approver(), by_scope)
    assert [a.name for a in policy.approvers_for("issue_refund")] == ["ann", "bob"]
    assert policy.approvers_for("lookup_order") == ()
    again = Policy.from_json(json.loads(json.dumps(policy.to_json())))
    assert again.digest == policy.digest
    assert again.to_json()["approvers"]["bob"] == {
        "public_key": public_text(MALLORY),
        "tools": [],
        "scopes": ["billing.*"],
    }
    without = approved_policy(approver("ann", tools=("lookup_order",)))
    assert without.digest != policy.digest
    # A policy without approvers keeps the form and digest it always had.
    plain = Policy.from_json({"tools": {"t": {"scope": "a.b"}}})
    assert "approvers" not in plain.to_json()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"public_key": "abc", "tools": ["t"]}, "base64 of a raw 32-byte"),
        ({"public_key": 5, "tools": ["t"]}, "base64 of a raw 32-byte"),
        ({"tools": ["t"]}, "base64 of a raw 32-byte"),
        ({"public_key": "K", "tools": ["t"], "role": "x"}, "nothing else"),
        ({"public_key": "K"}, "names no 'tools' and no 'scopes'"),
        ({"public_key": "K", "tools": "t"}, "must be lists"),
        ({"public_key": "K", "tools": [3]}, "list of tool names"),
        ({"public_key": "K", "scopes": ["Not A Scope"]}, "dotted lowercase"),
        ("ann", "needs 'public_key'"),
    ],
)
def test_a_bad_approver_entry_is_a_one_line_error(entry: Any, message: str) -> None:
    if isinstance(entry, dict) and entry.get("public_key") == "K":
        entry = {**entry, "public_key": public_text(ANN)}
    with pytest.raises(InvalidInput, match=message) as raised:
        Policy.from_json({"tools": {}, "approvers": {"ann": entry}})
    assert "\n" not in str(raised.value)
    with pytest.raises(InvalidInput, match="'approvers' must map"):
        Policy.from_json({"approvers": ["ann"]})


def test_the_sample_policy_documents_approvers_and_still_loads() -> None:
    """samples/policy.yml loads as it is (its approvers commented out), and its example
    loads too once uncommented: ann answers issue_refund by name, billing-leads by scope."""
    text = (SAMPLES / "policy.yml").read_text()
    assert Policy.load(SAMPLES / "policy.yml").approvers == {}
    head, example = text.split("# approvers:\n")
    block = "approvers:\n" + "\n".join(line[2:] for line in example.splitlines())
    policy = Policy.from_json(yaml.safe_load(head + block))
    assert [a.name for a in policy.approvers_for("issue_refund")] == ["ann", "billing-leads"]
    assert policy.approvers_for("lookup_order") == ()


# -- redacted bundles -----------------------------------------------------------------------


async def test_a_redacted_bundle_keeps_the_decision_and_its_signature_not_the_arguments(
    journal: Journal,
) -> None:
    """``--redact``: the question and the answer are views: the arguments and the reason
    are withheld (their digests kept); the outcome, who, when, digest and signature are
    shown, and the bundle verifies, signatures included."""
    session = journal.session(SID, policy=approved_policy())
    await answered(session)
    bundle = await export_bundle(journal.store, SID, redact=True)
    text = json.dumps(bundle)
    assert "checked the order" not in text
    assert '\\"amount_cents\\": 1250' not in text
    assert "amount_cents" not in _interrupts(bundle)  # a digest may hold any digits
    (question,) = [e for e in _events(bundle) if e["type"] == ev.INTERRUPT_ISSUED]
    (answer,) = [e for e in _events(bundle) if e["type"] == ev.INTERRUPT_RESOLVED]
    assert question["data"] is None
    assert answer["data"] is None
    assert question["view"]["prompt"]["arguments_sha256"] == ev.arguments_digest(ARGUMENTS)
    shown = answer["view"]["extensions"]["agentjournal"]
    assert shown["key_id"] == approver().key_id
    assert shown["arguments_sha256"] == ev.arguments_digest(ARGUMENTS)
    assert answer["view"]["outcome"] == "approved"
    assert set(answer["view"]["response"]) == {"withheld"}
    report = verify_bundle(bundle, {}, allow_uncovered=True)
    assert report.ok, report.text()
    assert "approvals: 1 asked, 1 approved, 0 rejected, 1 signed" in report.text()


def _events(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for s in bundle["streams"] for e in s["events"]]


def _interrupts(bundle: dict[str, Any]) -> str:
    return json.dumps(
        [e for e in _events(bundle) if e["type"] in (ev.INTERRUPT_ISSUED, ev.INTERRUPT_RESOLVED)]
    )
