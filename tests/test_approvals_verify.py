"""The verifier's approval checks, bitten by tampering with real recorded sessions.

Each session is paused on a refund, answered and resumed by the SDK's real ``Runner``
(tests/approval_sessions.py), in a journal that signs checkpoints. Each tamper edits the
bundle the way an insider holding the checkpoint key could: the edited streams are
rechained and their heads signed again (tests/ledger_sessions.py), so integrity, twins,
checkpoints, delegation and containment all pass and only the approvals stage can catch
it; each test also shows that the bundle verifies with that stage switched off. Plain
byte edits, drops and moves (not rechained) fail integrity, naming stream and revision.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from agentjournal import Journal, _forked
from agentjournal import events as ev
from agentjournal.audit import verify as verifier
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Problem, verify_bundle
from agentjournal.ledger.keys import SigningKey, key_id
from approval_sessions import ANN, MALLORY, answered, approved_policy
from ledger_sessions import relink, sign_heads
from test_approvals import SID

KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}


async def _record(*, approve: bool, signed: bool, redact: bool = False) -> dict[str, Any]:
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        session = journal.session(SID, policy=approved_policy() if signed else None)
        await answered(session, approve=approve, key=ANN if signed else None, guarded=signed)
        await session.checkpoint()
        return await export_bundle(journal.store, SID, redact=redact)


@pytest.fixture(scope="module")
def recorded() -> dict[str, dict[str, Any]]:
    """approved (no policy, unsigned), rejected (no policy, unsigned), signed (ann, under a
    policy naming her), and the signed one redacted."""

    async def all_four() -> dict[str, dict[str, Any]]:
        return {
            "approved": await _record(approve=True, signed=False),
            "rejected": await _record(approve=False, signed=False),
            "signed": await _record(approve=True, signed=True),
            "redacted": await _record(approve=True, signed=True, redact=True),
        }

    return asyncio.run(all_four())


def bundle_of(recorded: dict[str, dict[str, Any]], name: str) -> dict[str, Any]:
    return copy.deepcopy(recorded[name])


def billing(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    """The events of the stream the question is on (billing's subsession)."""
    return next(
        s["events"]
        for s in bundle["streams"]
        if any(e["type"] == ev.INTERRUPT_ISSUED for e in s["events"])
    )


def billing_name(bundle: dict[str, Any]) -> str:
    name: str = next(
        s["name"]
        for s in bundle["streams"]
        if any(e["type"] == ev.INTERRUPT_ISSUED for e in s["events"])
    )
    return name


def at(events: list[dict[str, Any]], type_: str) -> int:
    return next(i for i, e in enumerate(events) if e["type"] == type_)


def output_at(events: list[dict[str, Any]]) -> int:
    """Where the refund's output (call ``r1``) is."""
    return next(
        i
        for i, e in enumerate(events)
        if e["metadata"].get(ev.ITEM_TYPE_KEY) == "function_call_output"
        and e["metadata"].get(ev.CALL_ID_KEY) == "r1"
    )


def edit_data(event: dict[str, Any], change: Any) -> None:
    body = json.loads(event["data"])
    change(body)
    event["data"] = json.dumps(body)


def reseal(bundle: dict[str, Any]) -> None:
    """What a key holder does after an edit: rechain every stream, relink closes, and sign
    the new heads."""
    relink(bundle)
    sign_heads(bundle, KEY)


def only_approvals_catch(bundle: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The edited bundle fails the approvals stage and nothing else; without that stage it
    verifies. The failures as text (stream@revision: message)."""
    report = verify_bundle(bundle, TRUSTED)
    assert not report.ok
    assert {p.check for p in report.problems} == {"approvals"}, report.text()
    assert_alike_on_two_processes(bundle)
    with monkeypatch.context() as patched:
        patched.setattr(verifier, "check_approvals", lambda report, tree: None)
        unchecked = verify_bundle(bundle, TRUSTED)
        assert unchecked.ok, unchecked.text()
    return [str(p) for p in report.problems]


def where(bundle: dict[str, Any], index: int) -> str:
    return f"{billing_name(bundle)}@{index}"


def test_every_recorded_session_verifies_and_sums_up_its_approvals(
    recorded: dict[str, dict[str, Any]],
) -> None:
    lines = {
        "approved": "approvals: 1 asked, 1 approved, 0 rejected, 0 signed",
        "rejected": "approvals: 1 asked, 0 approved, 1 rejected, 0 signed",
        "signed": "approvals: 1 asked, 1 approved, 0 rejected, 1 signed",
        "redacted": "approvals: 1 asked, 1 approved, 0 rejected, 1 signed",
    }
    for name, line in lines.items():
        report = verify_bundle(recorded[name], TRUSTED)
        assert report.ok, (name, report.text())
        assert line in report.text(), name
        assert_alike_on_two_processes(recorded[name])


def assert_alike_on_two_processes(bundle: dict[str, Any]) -> None:
    """On two processes (the child runs the approvals stage) the report is one process's."""
    one = verify_bundle(bundle, TRUSTED, workers=1)
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(_forked, "forking_safe", lambda: True)  # whatever thread is idle
        forks: list[int] = []
        real = _forked.forked

        def counted(work: Callable[[], Any]) -> Any:
            forks.append(1)
            return real(work)

        patched.setattr(_forked, "forked", counted)
        two = verify_bundle(bundle, TRUSTED, workers=2)
    assert forks == [1]  # the child did run
    assert (one.lines, one.problems) == (two.lines, two.problems)
    assert (one.signers, one.foreign) == (two.signers, two.foreign)


# -- the order of question, answer and output ----------------------------------------------


def test_a_call_whose_answer_was_dropped_fails_at_its_output(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundle_of(recorded, "approved")
    events = billing(bundle)
    del events[at(events, ev.INTERRUPT_RESOLVED)]
    reseal(bundle)
    (problem,) = only_approvals_catch(bundle, monkeypatch)
    assert problem.startswith(where(bundle, output_at(events)))
    assert "its question has no answer before it" in problem


def test_an_answer_moved_after_the_call_ran_fails(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundle_of(recorded, "approved")
    events = billing(bundle)
    answer = events.pop(at(events, ev.INTERRUPT_RESOLVED))
    events.insert(output_at(events) + 1, answer)
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert problems[0].startswith(where(bundle, output_at(events)))
    assert "no answer before it" in problems[0]
    assert "after its call ran" in problems[1]


def test_an_answer_before_its_question_fails(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundle_of(recorded, "approved")
    events = billing(bundle)
    answer = events.pop(at(events, ev.INTERRUPT_RESOLVED))
    question = at(events, ev.INTERRUPT_ISSUED)
    events.insert(question, answer)
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    (early,) = [p for p in problems if "before its question" in p]
    assert early.startswith(where(bundle, question))


def test_two_answers_to_one_question_fail(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundle_of(recorded, "approved")
    events = billing(bundle)
    first = at(events, ev.INTERRUPT_RESOLVED)
    second = copy.deepcopy(events[first])
    second["id"] = str(uuid.uuid4())
    events.insert(first + 1, second)
    reseal(bundle)
    (problem,) = only_approvals_catch(bundle, monkeypatch)
    assert problem.startswith(where(bundle, first + 1))
    assert "a second answer" in problem


def test_an_answer_to_a_question_that_does_not_exist_fails(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundle_of(recorded, "approved")
    events = billing(bundle)
    answer = at(events, ev.INTERRUPT_RESOLVED)

    def elsewhere(body: dict[str, Any]) -> None:
        body["extensions"]["agentjournal"]["issued"] = str(uuid.uuid4())

    edit_data(events[answer], elsewhere)
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert problems[0].startswith(where(bundle, answer))
    assert "a question that does not exist" in problems[0]


# -- what an answer covers -------------------------------------------------------------------


def test_an_answer_for_other_arguments_does_not_cover_the_call(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundle_of(recorded, "approved")
    events = billing(bundle)
    answer = at(events, ev.INTERRUPT_RESOLVED)

    def other(body: dict[str, Any]) -> None:
        body["extensions"]["agentjournal"]["arguments_sha256"] = ev.arguments_digest(
            '{"order_id":"42","amount_cents":999999}'
        )

    edit_data(events[answer], other)
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert problems[0].startswith(where(bundle, answer))
    assert "for other arguments than the question's" in problems[0]
    assert "ran on an answer that does not count" in problems[1]


def test_a_question_showing_other_arguments_than_its_call_fails(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The person was shown a small refund; the call refunds more."""
    bundle = bundle_of(recorded, "approved")
    events = billing(bundle)
    question = at(events, ev.INTERRUPT_ISSUED)
    small = '{"order_id":"42","amount_cents":5}'
    edit_data(events[question], lambda body: body.update(prompt=small))
    answer = at(events, ev.INTERRUPT_RESOLVED)

    def answers_small(body: dict[str, Any]) -> None:
        body["extensions"]["agentjournal"]["arguments_sha256"] = ev.arguments_digest(small)

    edit_data(events[answer], answers_small)
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert problems[0].startswith(where(bundle, question))
    assert "shows other arguments than the call" in problems[0]


def test_a_rejected_call_whose_tool_started_fails(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK answers a rejected call with its rejection message and never starts the
    tool, so the output records no start (``aj.started_at``); one that does fails."""
    bundle = bundle_of(recorded, "rejected")
    events = billing(bundle)
    output = output_at(events)
    assert ev.STARTED_AT_KEY not in events[output]["metadata"]
    events[output]["metadata"][ev.STARTED_AT_KEY] = "2026-01-01T00:00:00+00:00"
    reseal(bundle)
    (problem,) = only_approvals_catch(bundle, monkeypatch)
    assert problem.startswith(where(bundle, output))
    assert "was rejected, yet its tool started" in problem


# -- signatures -----------------------------------------------------------------------------


def test_a_flipped_outcome_breaks_the_approver_s_signature(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundle_of(recorded, "signed")
    events = billing(bundle)
    answer = at(events, ev.INTERRUPT_RESOLVED)
    edit_data(events[answer], lambda body: body.update(response="approved by the CFO"))
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert problems[0].startswith(where(bundle, answer))
    assert "does not verify" in problems[0]


def test_a_stripped_signature_on_a_tool_with_approvers_fails(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundle_of(recorded, "signed")
    events = billing(bundle)
    answer = at(events, ev.INTERRUPT_RESOLVED)

    def unsigned(body: dict[str, Any]) -> None:
        del body["extensions"]["agentjournal"]["signature"]
        del body["extensions"]["agentjournal"]["key_id"]

    edit_data(events[answer], unsigned)
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert problems[0].startswith(where(bundle, answer))
    assert "not signed; issue_refund needs one signed by ann" in problems[0]
    assert "ran on an answer that does not count" in problems[1]


def test_an_answer_re_signed_by_a_key_the_policy_does_not_name_fails(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = bundle_of(recorded, "signed")
    events = billing(bundle)
    answer = at(events, ev.INTERRUPT_RESOLVED)
    decided = ev.ApprovalDecided.decode(events[answer]["data"].encode())
    forged = ev.approval_signed_bytes(SID, billing_name(bundle), decided)

    def by_mallory(body: dict[str, Any]) -> None:
        extension = body["extensions"]["agentjournal"]
        extension["key_id"] = key_id(MALLORY.public_key())
        extension["signature"] = base64.b64encode(MALLORY.sign(forged)).decode()

    edit_data(events[answer], by_mallory)
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert "which is no approver of issue_refund" in problems[0]


def test_a_redacted_answer_edited_in_its_view_breaks_the_signature(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a redacted bundle the signature is checked on the view (it covers the digests,
    not the text): a view whose outcome or reason digest was changed fails."""
    bundle = bundle_of(recorded, "redacted")
    events = billing(bundle)
    answer = at(events, ev.INTERRUPT_RESOLVED)
    events[answer]["view"]["response"] = {"withheld": "sha256:" + "0" * 64}
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert problems[0].startswith(where(bundle, answer))
    assert "does not verify" in problems[0]


# -- plain tampering ------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["edited", "dropped", "moved"])
def test_an_answer_edited_dropped_or_moved_without_resealing_fails_integrity(
    recorded: dict[str, dict[str, Any]], how: str
) -> None:
    bundle = bundle_of(recorded, "signed")
    events = billing(bundle)
    answer = at(events, ev.INTERRUPT_RESOLVED)
    if how == "edited":
        events[answer]["data"] = events[answer]["data"].replace("approved", "rejected")
    elif how == "dropped":
        del events[answer]
    else:
        events.insert(answer + 1, events.pop(answer))
    report = verify_bundle(bundle, TRUSTED)
    assert not report.ok
    first: Problem = report.problems[0]
    assert (first.check, first.stream) == ("integrity", billing_name(bundle))
    # The answer's revision, or (dropped, moved) the one now in its place.
    assert first.revision in (answer, answer + 1)


def _forged_block(template: dict[str, Any], payload: Any) -> dict[str, Any]:
    """A self-consistent guardrail BLOCK of call ``r1`` judging ``payload``."""
    from agentjournal._digests import value_digest

    body = {
        "action_id": str(uuid.uuid4()),
        "action_type": "TOOL_CALL",
        "decision": "BLOCK",
        "guardrail_decision": "BLOCK",
        "reason_code": "X",
        "reason_message": "x",
        "enforcement": "tool_refused",
        "agent": "billing",
        "subject": "issue_refund",
        "call_id": "r1",
        "payload": payload,
        "modified_payload": None,
        "payload_digest": value_digest(payload),
        "modified_payload_digest": None,
        "latency_ms": 1.0,
        "trace_id": "0" * 32,
        "span_id": "0" * 16,
    }
    forged = copy.deepcopy(template)
    forged["id"] = str(uuid.uuid4())
    forged["type"] = ev.GUARDRAIL_DECIDED
    forged["data"] = json.dumps(body)
    keep = ("aj.chain", "$schema_version", "trace_id", "span_id")
    forged["metadata"] = {k: v for k, v in template["metadata"].items() if k in keep}
    return forged


@pytest.mark.parametrize("stripped", [False, True], ids=["tool-start-kept", "tool-start-dropped"])
def test_a_forged_refusal_does_not_stand_in_for_a_dropped_answer(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch, stripped: bool
) -> None:
    """The answer dropped and a guardrail BLOCK of ``r1`` put before the tool's own output:
    a refusal excuses an output only when the tool did not start and it judged this very
    call."""
    bundle = bundle_of(recorded, "signed")
    events = billing(bundle)
    del events[at(events, ev.INTERRUPT_RESOLVED)]
    output = output_at(events)
    events.insert(output, _forged_block(events[output], {"x": 1}))
    if stripped:
        events[output_at(events)]["metadata"].pop(ev.STARTED_AT_KEY)
    reseal(bundle)
    report = verify_bundle(bundle, TRUSTED)
    assert not report.ok
    assert any(
        "call r1 has an output, but its question has no answer before it" in p.message
        for p in report.problems
    ), report.text()


def test_a_question_dropped_with_its_answer_fails_at_the_paused_run(
    recorded: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Question and answer removed together, the chain resealed: the paused run still names
    where its question was."""
    bundle = bundle_of(recorded, "approved")
    events = billing(bundle)
    del events[at(events, ev.INTERRUPT_RESOLVED)]
    del events[at(events, ev.INTERRUPT_ISSUED)]
    reseal(bundle)
    problems = only_approvals_catch(bundle, monkeypatch)
    assert any(
        "the paused run waits for request r1, whose question is not at" in p for p in problems
    )


def test_a_made_up_signature_is_not_counted_as_signed(
    recorded: dict[str, dict[str, Any]],
) -> None:
    """An unsigned answer given a key id and 64 random bytes: with no policy naming that
    key the answer still counts (any answer does), but its signature is said to be
    unchecked, never counted as signed."""
    import base64
    import os

    bundle = bundle_of(recorded, "approved")
    events = billing(bundle)
    edit_data(
        events[at(events, ev.INTERRUPT_RESOLVED)],
        lambda b: b["extensions"]["agentjournal"].update(
            key_id="ed25519:0123456789abcdef",
            signature=base64.b64encode(os.urandom(64)).decode(),
        ),
    )
    reseal(bundle)
    report = verify_bundle(bundle, TRUSTED)
    assert report.ok, report.text()
    assert "approvals: 1 asked, 1 approved, 0 rejected, 0 signed" in report.text()
    assert "1 answer signed by a key no policy names: the signature not checked" in report.text()
