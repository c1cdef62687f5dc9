"""The capped refund of the branch authority tests: a policy that caps triage's spend and
leaves billing's own entry uncapped, a billing agent that refunds, and a triage that hands
off to billing (tests/test_branch_subagents.py, tests/test_branch_delegation.py)."""

from __future__ import annotations

from typing import Any

from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import JournalSession
from agentjournal.authority import Authority, Cap, Policy, ToolRule
from drive import drive


def refund_policy() -> Policy:
    return Policy(
        agents={
            "triage": Authority.of("billing.*", spend=Cap(5000)),
            "billing": Authority.of("billing.refund"),  # its own entry has no cap
        },
        tools={"issue_refund": ToolRule("billing.refund", {"spend": "amount_cents"})},
    )


def refunding(ran: list[int], amount: int) -> Agent[Any]:
    @function_tool
    def issue_refund(amount_cents: int) -> str:
        """Refund."""
        ran.append(amount_cents)
        return "refunded"

    return Agent(
        name="billing",
        model=ScriptedModel(
            [
                [function_call("issue_refund", {"amount_cents": amount}, call_id="r1")],
                [assistant_message("done", item_id="m1")],
            ]
        ),
        tools=[issue_refund],
    )


def handing_off() -> Agent[Any]:
    billing = Agent(name="billing", model=ScriptedModel([[assistant_message("billing here")]]))
    return Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]]),
        handoffs=[billing],
    )


async def refund(session: JournalSession, amount: int) -> list[int]:
    """A run that starts at billing and refunds ``amount`` (the guard turns a refused call
    into an error output); the amounts refunded."""
    ran: list[int] = []
    await drive(session.guard(refunding(ran, amount)), "refund", session=session, hooks=session)
    return ran
