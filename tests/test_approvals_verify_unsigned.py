"""The verifier's approvals stage on unsigned answers, offline: a question is about exactly
the call before it, an answer answers one question asked before it, a call that waited ran
only after its answer, a rejected call's output is the SDK's rejection, and a call id a
later run asks again is a question of its own.

Each tamper edits an exported bundle of a real run and re-chains it (so the chain holds
and only the approvals stage can see it), except the plain byte edit, which the chain
catches with its stream and revision.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal import events as ev
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Report, verify_bundle
from approval_worker import ASK, graph
from drive import drive
from ledger_sessions import relink

SID = "approvals-verify"
Bundle = dict[str, Any]


async def answered_bundle(tmp_path: Path, *, approve: bool, redact: bool = False) -> Bundle:
    """A session whose refund waited, was approved (or rejected) and resumed."""
    ran = tmp_path / "ran"
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session(SID)
        result: Any = await drive(graph(ran, resumed=False), ASK, session=session, hooks=session)
        await session.hold(result)
        await (session.approve if approve else session.reject)("r1", by="ann", reason="seen")
        await session.resume(graph(ran, resumed=True))
        return await export_bundle(journal.store, SID, redact=redact)


def verified(bundle: Bundle) -> Report:
    return verify_bundle(bundle, {}, allow_uncovered=True)


def stream_of(bundle: Bundle, type_: str) -> list[dict[str, Any]]:
    found: list[list[dict[str, Any]]] = [
        s["events"] for s in bundle["streams"] if any(e["type"] == type_ for e in s["events"])
    ]
    (events,) = found
    return events


def one(bundle: Bundle, type_: str) -> dict[str, Any]:
    (found,) = [e for e in stream_of(bundle, type_) if e["type"] == type_]
    return found


def output_of_r1(events: list[dict[str, Any]]) -> dict[str, Any]:
    (found,) = [
        e
        for e in events
        if e["metadata"].get("aj.item_type") == "function_call_output"
        and e["metadata"].get("aj.call_id") == "r1"
    ]
    return found


def edit(event: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> None:
    body = json.loads(event["data"])
    change(body)
    event["data"] = json.dumps(body)


def other_arguments(bundle: Bundle) -> None:
    """The person was asked about 125 cents; the call asked for 1250."""
    edit(
        one(bundle, ev.INTERRUPT_ISSUED),
        lambda b: b.update(prompt=b["prompt"].replace("1250", "125")),
    )


def answer_dropped(bundle: Bundle) -> None:
    events = stream_of(bundle, ev.INTERRUPT_RESOLVED)
    events[:] = [e for e in events if e["type"] != ev.INTERRUPT_RESOLVED]


def answer_after_the_output(bundle: Bundle) -> None:
    events = stream_of(bundle, ev.INTERRUPT_RESOLVED)
    answer = one(bundle, ev.INTERRUPT_RESOLVED)
    output = output_of_r1(events)
    events.remove(answer)
    events.insert(events.index(output) + 1, answer)


def answer_of_no_question(bundle: Bundle) -> None:
    edit(
        one(bundle, ev.INTERRUPT_RESOLVED),
        lambda b: b["extensions"]["agentjournal"].update(
            issued="00000000-0000-0000-0000-000000000000"
        ),
    )


def approval_turned_rejection(bundle: Bundle) -> None:
    """The tool ran on an approval the record now says was a rejection."""
    edit(one(bundle, ev.INTERRUPT_RESOLVED), lambda b: b.update(outcome="rejected"))


def hostile_answer(bundle: Bundle) -> None:
    one(bundle, ev.INTERRUPT_RESOLVED)["data"] = json.dumps({"outcome": ["x"] * 5, "extensions": 7})


@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        (other_arguments, "shows other arguments than the call"),
        (answer_dropped, "call r1 has an output, but its question has no answer before it"),
        (answer_after_the_output, "an answer to r1 after its call ran"),
        (answer_of_no_question, "an answer to a question that does not exist"),
        (approval_turned_rejection, "call r1 was rejected, yet its tool started"),
        (hostile_answer, "an answer (InterruptResolved) that does not read as one"),
    ],
)
async def test_each_approval_tamper_fails_the_approvals_stage(
    tmp_path: Path, tamper: Callable[[Bundle], None], said: str
) -> None:
    bundle = await answered_bundle(tmp_path, approve=True)
    report = verified(bundle)
    assert report.ok, report.text()
    assert "approvals: 1 asked, 1 approved, 0 rejected" in report.text()
    tamper(bundle)
    relink(bundle)
    report = verified(bundle)
    assert {p.check for p in report.problems} == {"approvals"}, report.text()
    (failure,) = [p for p in report.problems if said in p.message]
    assert failure.stream.startswith("AgentSubsession-")
    assert failure.revision is not None


async def test_a_rejected_call_verifies_and_its_output_edited_to_the_tool_s_fails(
    tmp_path: Path,
) -> None:
    bundle = await answered_bundle(tmp_path, approve=False)
    report = verified(bundle)
    assert report.ok, report.text()
    assert "0 approved, 1 rejected" in report.text()
    events = stream_of(bundle, ev.INTERRUPT_RESOLVED)
    output = output_of_r1(events)
    edit(output, lambda b: b.update(result="refunded 1250 cents on 42"))
    relink(bundle)
    failures = [p for p in verified(bundle).problems if p.check == "approvals"]
    assert ["the tool ran" in p.message for p in failures] == [True]


async def test_an_approval_edited_without_re_chaining_fails_the_chain_at_its_place(
    tmp_path: Path,
) -> None:
    bundle = await answered_bundle(tmp_path, approve=True)
    answer = one(bundle, ev.INTERRUPT_RESOLVED)
    edited = copy.deepcopy(bundle)
    edit(
        one(edited, ev.INTERRUPT_RESOLVED),
        lambda b: b["extensions"]["agentjournal"].update(by="mallory"),
    )
    report = verified(edited)
    assert not report.ok
    assert any(
        p.revision == answer["revision"] and p.stream.startswith("AgentSubsession-")
        for p in report.problems
    ), report.text()


async def test_a_call_id_asked_again_by_a_new_run_is_a_question_of_its_own(tmp_path: Path) -> None:
    """A run stops on r1 and is never resumed; the next run's model reuses the call id and
    asks again on the same stream; that question is approved and its call runs: the first
    question still waits, and the session verifies."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    def agent(steps: list[Any]) -> Agent[Any]:
        @function_tool(needs_approval=True)
        def issue_refund(order_id: str) -> str:
            """Refund an order (a person approves it first)."""
            return f"refunded {order_id}"

        return Agent(name="billing", model=ScriptedModel(steps), tools=[issue_refund])

    ask = [[function_call("issue_refund", {"order_id": "42"}, call_id="r1")]]
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session(SID)
        await drive(agent(ask), "refund 42", session=session, hooks=session)
        result: Any = await drive(agent(ask), "refund 42 again", session=session, hooks=session)
        await session.hold(result)
        await session.approve("r1", by="ann")
        await session.resume(agent([[assistant_message("done")]]))
        bundle = await export_bundle(journal.store, SID)
    report = verified(bundle)
    assert report.ok, report.text()
    assert "approvals: 2 asked, 1 approved, 0 rejected" in report.text()


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
async def test_a_redacted_bundle_keeps_the_decision_withholds_the_arguments_and_verifies(
    tmp_path: Path, approve: bool
) -> None:
    """The question's view keeps the request, tool and agent and withholds the arguments
    (keeping the digest of the call's payload); the answer's keeps outcome and who, and
    withholds the reason; the approvals stage checks them as on the whole record."""
    bundle = await answered_bundle(tmp_path, approve=approve)
    redacted = await answered_bundle(tmp_path, approve=approve, redact=True)
    report = verified(redacted)
    assert report.ok, report.text()
    outcome = "1 approved, 0 rejected" if approve else "0 approved, 1 rejected"
    assert f"approvals: 1 asked, {outcome}" in report.text()
    assert "not checked" not in report.text()
    question, answer = one(redacted, ev.INTERRUPT_ISSUED), one(redacted, ev.INTERRUPT_RESOLVED)
    assert question["data"] is None
    assert answer["data"] is None
    assert question["view"]["tool_name"] == "issue_refund"
    assert set(question["view"]["prompt"]) == {"withheld", "arguments_sha256", "payload_digest"}
    assert answer["view"]["outcome"] == ("approved" if approve else "rejected")
    assert answer["view"]["extensions"]["agentjournal"]["by"] == "ann"
    assert set(answer["view"]["response"]) == {"withheld"}
    assert "order_id" not in json.dumps(redacted)
    assert "order_id" in json.dumps(bundle)


async def test_a_redacted_question_pointed_at_other_arguments_fails_its_commitment(
    tmp_path: Path,
) -> None:
    redacted = await answered_bundle(tmp_path, approve=True, redact=True)
    question = one(redacted, ev.INTERRUPT_ISSUED)
    question["view"]["prompt"]["payload_digest"] = "0" * 64
    report = verified(redacted)
    assert not report.ok
    assert any(
        p.revision == question["revision"] and "commitment" in p.message for p in report.problems
    ), report.text()
