"""A paused run answered the SDK's own way: ``state = result.to_state()``,
``state.approve(item)`` or ``state.reject(item)``, then the runner with the session as
session and hooks. No person answered through the journal, so the write of the call's
output records, right before it and in the same atomic write, an ``InterruptResolved``
with the run's own decision (``by`` ``RunState``, ``source`` ``run_state``): the session
verifies, and says truthfully who decided. An answer already on the record is never given
twice, and a write that belongs to no run answers nothing.

Real ``Runner`` runs (``Runner.run`` and ``Runner.run_streamed``) with the SDK's
``ScriptedModel``, on every backend, beside the SDK's own ``SQLiteSession``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from typing import Any

import pytest
from agents import Agent, SQLiteSession, function_tool
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal, JournalSession
from agentjournal import events as ev
from agentjournal.audit.verify import verify_records
from agentjournal.authority import Policy
from agentjournal.cli import main as cli
from agentjournal.store.contract import RecordedEvent
from agentjournal.walk import read_tree
from drive import METHODS, Method, drive

SID = "approved-in-state"
ASK = "Refund order 42"
DONE = "Refund handled."


def graph(ran: list[str]) -> Agent[Any]:
    """triage -> billing, whose ``issue_refund`` (call r1) waits for approval; billing then
    says :data:`DONE`. Each run of the tool's body is noted in ``ran``."""

    @function_tool(needs_approval=True)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        """Refund part of an order (a person approves it first)."""
        ran.append(order_id)
        return f"refunded {amount_cents} cents on {order_id}"

    refund = [function_call("issue_refund", {"order_id": "42", "amount_cents": 1250}, call_id="r1")]
    billing = Agent(
        name="billing",
        model=ScriptedModel([refund, [assistant_message(DONE, item_id="m1")]]),
        tools=[issue_refund],
    )
    to_billing = [function_call("transfer_to_billing", {}, call_id="h1")]
    return Agent(name="triage", model=ScriptedModel([to_billing]), handoffs=[billing])


async def answered_in_state(
    method: Method, session: Session, hooks: Any, *, approve: bool, ran: list[str]
) -> None:
    """Pause, decide in the run's own state, and run it on (the SDK's way, one process)."""
    agent = graph(ran)
    paused: Any = await drive(agent, ASK, method=method, session=session, hooks=hooks)
    state = paused.to_state()
    (item,) = state.get_interruptions()
    state.approve(item) if approve else state.reject(item)
    result = await drive(agent, state, method=method, session=session, hooks=hooks)
    assert result.final_output == DONE


async def reference(method: Method, *, approve: bool) -> list[Any]:
    """What the SDK's own ``SQLiteSession`` holds after the same steps."""
    sdk = SQLiteSession("reference")
    try:
        await answered_in_state(method, sdk, None, approve=approve, ran=[])
        return await sdk.get_items()
    finally:
        sdk.close()


async def verify_problems(journal: Journal) -> list[str]:
    report = verify_records(await read_tree(journal.store, SID), {}, allow_uncovered=True)
    return [] if report.ok else report.text().splitlines()


async def typed(journal: Journal, type_: str) -> list[RecordedEvent]:
    return [e for e in await journal.store.read_all() if e.type == type_]


async def the_output(journal: Journal) -> RecordedEvent:
    (output,) = [
        e
        for e in await typed(journal, "ToolResultReceived")
        if e.metadata.get(ev.CALL_ID_KEY) == "r1"
    ]
    return output


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
@pytest.mark.parametrize("method", METHODS)
async def test_a_decision_made_in_the_run_state_is_recorded_before_the_output_and_verifies(
    journal: Journal, journal_uri: str, method: Method, approve: bool
) -> None:
    session = journal.session(SID)
    ran: list[str] = []
    await answered_in_state(method, session, session, approve=approve, ran=ran)
    assert ran == (["42"] if approve else [])

    (question,) = await typed(journal, ev.INTERRUPT_ISSUED)
    (recorded,) = await typed(journal, ev.INTERRUPT_RESOLVED)
    output = await the_output(journal)
    answer = ev.ApprovalDecided.decode(recorded.data)
    assert answer.outcome == ("approved" if approve else "rejected")
    assert (answer.by, answer.source, answer.reason) == (ev.RUN_STATE_BY, ev.RUN_STATE, "")
    assert answer.issued == str(question.id)
    assert recorded.metadata[ev.INTERRUPT_KEY] == ev.TOOL_APPROVAL
    assert recorded.metadata[ev.CALL_ID_KEY] == "r1"
    # On the question's stream, right before the output (one append: tests/test_plan.py).
    assert recorded.stream == question.stream == output.stream
    assert recorded.revision == output.revision - 1

    assert await session.pending_approvals() == []
    assert await session.get_items() == await reference(method, approve=approve)
    assert await JournalSession(journal.store, SID).get_items() == await session.get_items()
    assert await verify_problems(journal) == []
    if journal_uri.startswith("sqlite:///"):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            argv = ["verify", SID, "--uri", journal_uri, "--allow-uncovered"]
            code = await asyncio.to_thread(cli, argv)
        assert code == 0, out.getvalue()
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            await asyncio.to_thread(cli, ["show", SID, "--uri", journal_uri])
        outcome = "approved" if approve else "rejected"
        assert f"{outcome} by RunState [request r1]" in shown.getvalue()


@pytest.mark.parametrize("method", METHODS)
async def test_an_answer_already_on_the_record_is_not_given_again(
    journal: Journal, method: Method
) -> None:
    """A person answered through the journal (another session object) before the run went
    on the SDK's way: that answer stands alone; the run's write adds none."""
    session = journal.session(SID)
    ran: list[str] = []
    agent = graph(ran)
    paused: Any = await drive(agent, ASK, method=method, session=session, hooks=session)
    await JournalSession(journal.store, SID).approve("r1", by="ann", reason="checked")
    state = paused.to_state()
    (item,) = state.get_interruptions()
    state.approve(item)
    await drive(agent, state, method=method, session=session, hooks=session)
    assert ran == ["42"]
    (recorded,) = await typed(journal, ev.INTERRUPT_RESOLVED)
    answer = ev.ApprovalDecided.decode(recorded.data)
    assert (answer.by, answer.source, answer.reason) == ("ann", None, "checked")
    assert await verify_problems(journal) == []


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "rejected"])
async def test_without_the_hooks_the_run_s_context_still_tells_the_decision(
    journal: Journal, approve: bool
) -> None:
    """A run resumed with ``session=`` but no ``hooks=``: no hook saw the tool start, and
    the run's context holds the SDK's decision, which is recorded."""
    session = journal.session(SID)
    ran: list[str] = []
    agent = graph(ran)
    paused: Any = await drive(agent, ASK, session=session, hooks=session)
    state = paused.to_state()
    (item,) = state.get_interruptions()
    state.approve(item) if approve else state.reject(item)
    await drive(agent, state, session=session)
    (recorded,) = await typed(journal, ev.INTERRUPT_RESOLVED)
    answer = ev.ApprovalDecided.decode(recorded.data)
    assert (answer.outcome, answer.by) == (
        "approved" if approve else "rejected",
        ev.RUN_STATE_BY,
    )
    assert await verify_problems(journal) == []


async def test_an_output_written_outside_a_run_answers_nothing(journal: Journal) -> None:
    """An output ``add_items`` writes with no run behind it says nothing of a decision: no
    answer is made up, and the verifier says the call ran without one."""
    session = journal.session(SID)
    await drive(graph([]), ASK, session=session, hooks=session)
    output = {"type": "function_call_output", "call_id": "r1", "output": "refunded by hand"}
    await session.add_items([output])  # type: ignore[list-item]
    assert await typed(journal, ev.INTERRUPT_RESOLVED) == []
    assert any(
        "call r1 has an output, but its question has no answer before it" in p
        for p in await verify_problems(journal)
    )


async def test_under_a_policy_the_run_state_s_approval_lets_no_call_run(journal: Journal) -> None:
    """A call the policy asks a person about runs only after a person's approval on the
    record, checked before it runs; the run's own answer lands with the output, after that
    check, so ``state.approve`` alone gets the gate's refusal, recorded as what the SDK
    decided, and the session verifies."""
    policy = Policy.from_json(
        {
            "agents": {
                "billing": {
                    "scopes": ["orders.refund"],
                    "ceilings": {"refund": {"kind": "cap", "limit": 5000}},
                }
            },
            "tools": {
                "issue_refund": {
                    "scope": "orders.refund",
                    "ceilings": {"refund": "amount_cents"},
                    "approval": {"above": ["refund"]},
                }
            },
        }
    )
    ran: list[int] = []

    @function_tool
    def issue_refund(amount_cents: int) -> str:
        """Refund an order."""
        ran.append(amount_cents)
        return f"refunded {amount_cents}"

    steps = [
        [function_call("issue_refund", {"amount_cents": 9000}, call_id="r1")],
        [assistant_message("done", item_id="m1")],
    ]
    session = journal.session(SID, policy=policy)
    agent = session.guard(Agent(name="billing", model=ScriptedModel(steps), tools=[issue_refund]))
    paused: Any = await drive(agent, "refund", session=session, hooks=session)
    state = paused.to_state()
    (item,) = state.get_interruptions()
    state.approve(item)
    await drive(agent, state, session=session, hooks=session)
    assert ran == []
    (refused,) = await typed(journal, ev.AUTHORITY_REFUSED)
    (recorded,) = await typed(journal, ev.INTERRUPT_RESOLVED)
    output = await the_output(journal)
    assert refused.revision < recorded.revision == output.revision - 1
    assert ev.ApprovalDecided.decode(recorded.data).by == ev.RUN_STATE_BY
    assert "none on the record approves these arguments" in output.data.decode()
    assert await verify_problems(journal) == []
