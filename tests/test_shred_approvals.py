"""Signed approvals in sealed sessions: the question and the answer name the arguments and
the reason by keyed digests under the subject's key (in the clear), the approver signs those
(``agentjournal-approval-keyed/1``), and the offline verifier, which holds no subject key,
checks the signature and the answer against its question, before and after the subject is
erased. A tampered sealed answer fails; the keyed digests confirm no guess once the key is
gone.

Runs use the SDK's real ``Runner`` (tests/approval_sessions.py); tampering reseals as the
checkpoint key's holder could (tests/test_approvals_verify.py), so only the approvals stage
can catch it.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal import events as ev
from agentjournal._digests import value_digest
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle, verify_records
from agentjournal.errors import InvalidInput
from agentjournal.ledger.keys import verified
from agentjournal.shred import MemoryKeyStore
from agentjournal.shred._cipher import keyed_digest
from agentjournal.walk import read_tree
from approval_sessions import ANN, answered, approved_policy
from drive import drive
from test_approvals import ARGUMENTS, ASK, SID, graph
from test_approvals_verify import (
    KEY,
    TRUSTED,
    at,
    billing,
    billing_name,
    edit_data,
    only_approvals_catch,
    reseal,
    where,
)

REASON = "checked the order"  # what approval_sessions.answered gives
STATES = ("before", "after")  # the subject's erasure


async def _record() -> dict[str, Any]:
    """A sealed session under a policy naming ann, paused on the refund, answered and signed
    by ann, resumed, checkpointed; its bundles (whole and redacted) and verify_records'
    reports before and after alice is erased, and alice's key as it was."""
    keys = MemoryKeyStore()
    found: dict[str, Any] = {}
    async with Journal.open("sqlite://:memory:", keys=keys, signing_key=KEY) as journal:
        session = journal.session(SID, user_id="alice", policy=approved_policy())
        ran: list[str] = []
        await answered(session, approve=True, ran=ran)
        assert ran == ["42:1250"]
        await session.checkpoint()
        found["secret"] = keys.current("alice").secret
        for state in STATES:
            if state == "after":
                await journal.erase(subject="alice", reason="art. 17", by="dpo@example.com")
            report = verify_records(await read_tree(journal.store, SID), TRUSTED)
            found[f"records-{state}"] = (report.ok, report.text())
            for redact in (False, True):
                bundle = await export_bundle(journal.store, SID, redact=redact)
                found[state + ("-redacted" if redact else "")] = json.loads(json.dumps(bundle))
    return found


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return asyncio.run(_record())


def _answer(bundle: dict[str, Any]) -> tuple[ev.ApprovalDecided, dict[str, Any]]:
    events = billing(bundle)
    data = events[at(events, ev.INTERRUPT_RESOLVED)]["data"]
    body: dict[str, Any] = json.loads(data)["extensions"]["agentjournal"]
    return ev.ApprovalDecided.decode(data.encode()), body


def test_a_sealed_signed_answer_verifies_offline_before_and_after_erasure(
    recorded: dict[str, Any],
) -> None:
    for state in STATES:
        ok, text = recorded[f"records-{state}"]
        reports = [("records", ok, text)]
        for name in (state, f"{state}-redacted"):
            report = verify_bundle(copy.deepcopy(recorded[name]), TRUSTED)
            reports.append((name, report.ok, report.text()))
        for name, ok, text in reports:
            assert ok, (state, name, text)
            assert "approvals: 1 asked, 1 approved, 0 rejected, 1 signed" in text, (name, text)
            assert "2 sealed approval events" in text, (name, text)
            assert "answers checked by their keyed digests and signatures" in text, text
            assert "questions' arguments not checked against their calls" in text, text
            assert ("content of subject alice erased at" in text) == (state == "after"), text


def test_the_question_and_answer_name_keyed_digests_the_approver_signed(
    recorded: dict[str, Any],
) -> None:
    """Under alice's key, the question's and the answer's arguments digest are the keyed
    digest of the arguments, the answer's reason digest that of the reason; no plain
    digest is written; ann's signature is over the keyed form."""
    secret = recorded["secret"]
    bundle = recorded["before"]
    events = billing(bundle)
    asked = ev.ApprovalAsked.decode(events[at(events, ev.INTERRUPT_ISSUED)]["data"].encode())
    decided, extension = _answer(bundle)
    assert asked.arguments_hmac == keyed_digest(secret, ARGUMENTS)
    assert decided.keyed
    assert decided.arguments_digest == asked.arguments_hmac
    assert decided.reason_hmac == keyed_digest(secret, REASON)
    assert "arguments_sha256" not in extension
    signed = ev.approval_signed_bytes(SID, billing_name(bundle), decided)
    assert json.loads(signed)["format"] == ev.SIGNED_KEYED_APPROVAL
    assert verified(ANN.public_key(), decided.signature, signed)


def test_no_plain_digest_of_the_arguments_or_the_reason_survives_erasure(
    recorded: dict[str, Any],
) -> None:
    """What a guess could be checked against: the plain SHA-256 of the arguments (what a
    plain session's answer names) and of the reason (what a plain signature covers)."""
    guesses = [
        ARGUMENTS,
        REASON,
        ev.arguments_digest(ARGUMENTS).removeprefix("sha256:"),
        value_digest(ARGUMENTS).removeprefix("sha256:"),
        value_digest(REASON).removeprefix("sha256:"),
    ]
    for name in ("after", "after-redacted"):
        text = json.dumps(recorded[name])
        assert not [g for g in guesses if g in text], name


def _flip(body: dict[str, Any]) -> None:
    body["outcome"] = "rejected"


def _swap_digests(body: dict[str, Any]) -> None:
    extension = body["extensions"]["agentjournal"]
    extension["arguments_hmac"], extension["reason_hmac"] = (
        extension["reason_hmac"],
        extension["arguments_hmac"],
    )


def _other_reason(body: dict[str, Any]) -> None:
    body["extensions"]["agentjournal"]["reason_hmac"] = "hmac-sha256:" + "0" * 64


def _in_the_clear(body: dict[str, Any]) -> None:
    extension = body["extensions"]["agentjournal"]
    del extension["arguments_hmac"], extension["reason_hmac"]
    extension["arguments_sha256"] = ev.arguments_digest(ARGUMENTS)


EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "outcome-flipped": (_flip, "does not verify"),
    "arguments-digest-swapped": (_swap_digests, "for other arguments than the question's"),
    "reason-digest-changed": (_other_reason, "does not verify"),
    "digest-in-the-clear": (_in_the_clear, "names no keyed digest of its sealed question"),
}


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("edit", list(EDITS))
def test_a_tampered_sealed_answer_fails(
    recorded: dict[str, Any], monkeypatch: pytest.MonkeyPatch, state: str, edit: str
) -> None:
    change, problem = EDITS[edit]
    bundle = copy.deepcopy(recorded[state])
    events = billing(bundle)
    answer = at(events, ev.INTERRUPT_RESOLVED)
    edit_data(events[answer], change)
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert problems[0].startswith(where(bundle, answer)), problems
    assert problem in problems[0], problems


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("same_arguments", [True, False], ids=["same-arguments", "other"])
def test_a_sealed_answer_moved_to_another_question_fails(
    recorded: dict[str, Any], monkeypatch: pytest.MonkeyPatch, state: str, same_arguments: bool
) -> None:
    """The call is asked again (a second question right after the first); the answer is
    pointed at it. With the same keyed digest the signature (it covers the question's id)
    fails; with another, the digests differ."""
    bundle = copy.deepcopy(recorded[state])
    events = billing(bundle)
    first = at(events, ev.INTERRUPT_ISSUED)
    again = copy.deepcopy(events[first])
    again["id"] = str(uuid.uuid4())
    if not same_arguments:

        def other(body: dict[str, Any]) -> None:
            body["extensions"]["agentjournal"]["arguments_hmac"] = "hmac-sha256:" + "1" * 64

        edit_data(again, other)
    events.insert(first + 1, again)
    answer = at(events, ev.INTERRUPT_RESOLVED)

    def moved(body: dict[str, Any]) -> None:
        body["extensions"]["agentjournal"]["issued"] = again["id"]

    edit_data(events[answer], moved)
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert problems[0].startswith(where(bundle, answer)), problems
    expected = "does not verify" if same_arguments else "for other arguments than the question's"
    assert expected in problems[0], problems


async def test_a_question_whose_arguments_were_erased_cannot_be_answered() -> None:
    """Its keyed digest is under the destroyed key: no answer can name it, so none is
    written (the paused run's state is erased too)."""
    async with Journal.open("sqlite://:memory:", keys=MemoryKeyStore()) as journal:
        session = journal.session(SID, user_id="alice")
        paused: Any = await drive(graph([]), ASK, session=session, hooks=session)
        await session.hold(paused)
        await journal.erase(subject="alice", reason="art. 17", by="dpo@example.com")
        with pytest.raises(InvalidInput, match="its arguments were erased"):
            await session.approve("r1", by="ann@example.com", reason="ok")
        assert not [e for e in await journal.store.read_all() if e.type == ev.INTERRUPT_RESOLVED]


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
async def test_a_sealed_answer_the_run_s_state_gave_names_keyed_digests_and_verifies(
    approve: bool,
) -> None:
    """``state.approve``/``state.reject`` then the runner: the run's own answer, written
    with the output, names the question's keyed digest, and the session verifies."""
    from test_approvals_answered_in_the_run_state import SID as STATE_SID
    from test_approvals_answered_in_the_run_state import answered_in_state

    async with Journal.open("sqlite://:memory:", keys=MemoryKeyStore()) as journal:
        session = journal.session(STATE_SID, user_id="alice")
        await answered_in_state("run", session, session, approve=approve, ran=[])
        store = journal.store
        (asked,) = [e for e in await store.read_all() if e.type == ev.INTERRUPT_ISSUED]
        (answer,) = [e for e in await store.read_all() if e.type == ev.INTERRUPT_RESOLVED]
        question = ev.ApprovalAsked.decode(asked.data)
        decided = ev.ApprovalDecided.decode(answer.data)
        assert decided.source == ev.RUN_STATE
        assert decided.keyed
        assert decided.arguments_digest == question.arguments_hmac != ""
        report = verify_records(await read_tree(store, STATE_SID), {}, allow_uncovered=True)
        assert report.ok, report.text()
        assert "1 answer by the run's RunState" in report.text()


async def test_a_sealed_question_is_not_answered_from_outside_its_key_store(
    tmp_path: Path,
) -> None:
    """``agentjournal approve`` (no key store) on a sealed question: one line, nothing
    written — its reason would otherwise be stored in the clear beside sealed content."""
    from approvals_cli_support import run_approve

    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    async with Journal.open(uri, keys=MemoryKeyStore()) as journal:
        session = journal.session(SID, user_id="alice")
        paused: Any = await drive(graph([]), ASK, session=session, hooks=session)
        await session.hold(paused)
    async with Journal.open(uri) as journal:
        (listed,) = await journal.pending_approvals()
        assert listed.arguments == "[sealed]"  # never the envelope
        assert listed.as_dict()["arguments"] == "[sealed]"
    code, err = await run_approve(uri, SID, "r1", by="dana", reason="the secret reason")
    assert code == 1
    assert err.startswith("agentjournal: ")
    assert "is sealed under a data subject's key" in err
    async with Journal.open(uri) as journal:
        assert not [e for e in await journal.store.read_all() if e.type == ev.INTERRUPT_RESOLVED]
