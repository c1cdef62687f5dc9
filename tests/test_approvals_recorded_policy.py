"""An answer counts under every policy the session recorded, not only the one a caller
opened the session with; and a question whose subagent has ended waits no more, for every
reader (the session, the catalog, the viewer's page, the commands).

Runs pause and resume with the SDK's real ``Runner`` and ``ScriptedModel``.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.run_state import RunState
from agents.testing import ScriptedModel, assistant_message, function_call

import test_approval_policy as tap
from agentjournal import ApproverNotAllowed, InvalidInput, Journal
from agentjournal import events as ev
from agentjournal.authority import Policy
from agentjournal.engine import approvals as engine_approvals
from agentjournal.read.catalog import refresh
from agentjournal.ui.app import decide_approval
from agentjournal.ui.page import pending_approvals as page_pending
from approval_sessions import ANN, approved_policy, approver
from cli_run import run as cli_run
from drive import drive
from test_approvals import ASK, graph

CONFIG = RunConfig(tracing_disabled=True)


async def unchecked_answer(journal: Journal, session_id: str) -> None:
    """An unsigned answer as a version that checked no recorded policy wrote it (through a
    session opened without the policy): it lands on the record, though it does not count."""

    async def none(*_: Any) -> tuple[Policy, ...]:
        return ()

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine_approvals, "policies_in_force", none, raising=False)
        await journal.session(session_id).approve("r1", by="mallory")


async def decisions(journal: Journal) -> list[Any]:
    return [e for e in await journal.store.read_all() if e.type == ev.INTERRUPT_RESOLVED]


async def test_a_session_opened_without_the_policy_cannot_answer_unsigned(journal: Journal) -> None:
    sid = "p-answer"
    owner = journal.session(sid, policy=approved_policy())
    ran: list[str] = []
    await owner.hold(await drive(graph(ran), ASK, session=owner, hooks=owner))
    outsider = journal.session(sid)  # no policy given: the recorded one still names ann
    with pytest.raises(ApproverNotAllowed, match="signed by ann"):
        await outsider.approve("r1", by="mallory")
    assert await decisions(journal) == []
    decided = await outsider.approve("r1", by="ann", key=ANN)
    assert decided.signed
    await outsider.resume(graph(ran, answer="Done."))
    assert ran == ["42:1250"]


async def test_a_resume_without_the_policy_refuses_an_answer_the_recorded_policy_rejects(
    journal: Journal,
) -> None:
    sid = "p-resume"
    owner = journal.session(sid, policy=approved_policy())
    ran: list[str] = []
    await owner.hold(await drive(graph(ran), ASK, session=owner, hooks=owner))
    await unchecked_answer(journal, sid)
    for session in (journal.session(sid), journal.session(sid, policy=approved_policy())):
        with pytest.raises(ApproverNotAllowed, match="not signed"):
            await session.resume(graph(ran, answer="Done."))
    assert ran == []


async def test_an_unreadable_recorded_policy_refuses_answers_and_resumes(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = "p-unreadable"
    owner = journal.session(sid, policy=approved_policy())
    ran: list[str] = []
    await owner.hold(await drive(graph(ran), ASK, session=owner, hooks=owner))

    def unreadable(_: Any) -> Policy:
        raise ValueError("not a policy")

    monkeypatch.setattr(Policy, "from_json", staticmethod(unreadable))
    with pytest.raises(InvalidInput, match=r"recorded policy .* does not read"):
        await journal.session(sid).approve("r1", by="ann", key=ANN)
    assert await decisions(journal) == []
    with pytest.raises(InvalidInput, match="does not read"):
        await engine_approvals.recorded_policies(journal.store, sid)


async def test_the_invocation_gate_refuses_a_call_approved_by_an_answer_that_does_not_count(
    journal: Journal,
) -> None:
    policy = dataclasses.replace(tap.policy(), approvers={"ann": approver()})
    session = journal.session(tap.SID, policy=policy)
    ran: list[int] = []
    paused = await tap.run(session, tap.refunder(ran, 9000))
    await session.hold(paused)
    await unchecked_answer(journal, tap.SID)  # unsigned: does not count
    agent = session.guard(tap.refunder(ran, None))
    state = await RunState.from_string(agent, paused.to_state().to_string())
    (item,) = state.get_interruptions()
    state.approve(item)  # the SDK's way: the run state says yes
    result = await drive(agent, state, session=session, hooks=session)
    assert ran == []
    assert "may not call issue_refund" in " ".join(tap.outputs(result))


def team(ran: list[str], triage: list[Any], billing: list[Any]) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        """Refund part of an order."""
        ran.append(order_id)
        return "refunded"

    biller = Agent(name="billing", model=ScriptedModel(billing), tools=[issue_refund])
    return Agent(name="triage", model=ScriptedModel(triage), handoffs=[biller])


async def ended(uri: str, sid: str = "c1") -> None:
    """A run that stops on a question inside billing, abandoned; a new run on the session
    ends billing's subagent."""
    ran: list[str] = []
    refund = function_call("issue_refund", {"order_id": "42", "amount_cents": 1250}, call_id="r1")
    async with Journal.open(uri) as journal:
        session = journal.session(sid)
        handoff = [[function_call("transfer_to_billing", {}, call_id="h1")]]
        first = await Runner.run(
            team(ran, handoff, [[refund]]),
            "refund",
            session=session,
            hooks=session,
            run_config=CONFIG,
        )
        assert len(first.interruptions) == 1
        again = team(ran, [[assistant_message("hello again")]], [])
        await Runner.run(again, "new question", session=session, hooks=session, run_config=CONFIG)
        assert await session.pending_approvals() == []
    assert ran == []


async def test_a_question_of_a_subagent_that_has_ended_waits_for_no_reader(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'j.db'}"
    await ended(uri)
    async with Journal.open(uri) as journal:
        assert await journal.pending_approvals() == []
        (row,) = [r for r in (await refresh(journal.store)).rows if r.session_id == "c1"]
        assert row.pending_approvals == 0
        assert await page_pending(journal.store, "c1") == []
        with pytest.raises(InvalidInput, match="asked by a subagent that has ended"):
            await decide_approval(
                journal.store, "c1", None, "r1", approve=True, by="dana", reason=""
            )
    said = await asyncio.to_thread(cli_run, "approve", "c1", "r1", "--as", "dana", "--uri", uri)
    assert said.returncode == 1
    assert said.stderr.strip().splitlines() == [
        "agentjournal: approval request 'r1' was asked by a subagent that has ended: "
        "it no longer waits"
    ]
    async with Journal.open(uri) as journal:
        assert await decisions(journal) == []
