"""Sessions of one data subject that put a unique string in every content-bearing field.

:func:`plant` runs, on one journal, with a guardrail that MODIFYs every action:
- ``plant-1``: a user message, a tool call's arguments and output, a handoff's input, the
  receiver's final answer (so the subagent's summary), every guardrail payload and MODIFY
  payload; then items added directly: reasoning, a system message, a hosted tool call;
  then a branch forked from it with an item of its own;
- ``plant-2``: a run paused on an approval (the call's arguments, the paused run's state),
  answered with a reason, resumed to an answer.

Each planted string starts with ``PLANT-`` and is unique to its field.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, function_tool, handoff
from agents.run_context import RunContextWrapper
from agents.testing import ScriptedModel, assistant_message, function_call
from pydantic import BaseModel

from agentjournal import Journal
from drive import drive
from scripted_guardrail import ScriptedGuardrail

PLANTED = [
    "PLANT-input-7f3a",
    "PLANT-arg-91c2",
    "PLANT-output-4be8",
    "PLANT-handoff-d10e",
    "PLANT-final-62aa",
    "PLANT-reasoning-0c77",
    "PLANT-system-5d19",
    "PLANT-hosted-a8f4",
    "PLANT-branch-3e6b",
    "PLANT-approval-arg-b2c0",
    "PLANT-approval-reason-e915",
    "PLANT-resumed-17d4",
    "PLANT-developer-3c51",
    "PLANT-name-8d02",
    "PLANT-mcp-ask-61fe",
    "PLANT-mcp-answer-0b93",
    "PLANT-mcp-call-c4a7",
    "PLANT-mcp-output-5e28",
]

ALL_MODIFY = {
    "AGENT_INPUT": "MODIFY",
    "TOOL_CALL": "MODIFY",
    "AGENT_HANDOFF": "MODIFY",
    "AGENT_RESPONSE": "MODIFY",
}


class Escalation(BaseModel):
    reason: str


def guarded_graph() -> Agent[Any]:
    """triage calls ``lookup_order``, hands off to billing with an ``Escalation``; billing
    answers."""

    @function_tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return "PLANT-output-4be8 secret"

    async def on_handoff(ctx: RunContextWrapper[Any], escalation: Escalation) -> None:
        pass

    billing: Agent[Any] = Agent(
        name="billing",
        model=ScriptedModel([[assistant_message("PLANT-final-62aa secret", item_id="m1")]]),
    )
    return Agent(
        name="triage",
        model=ScriptedModel(
            [
                [function_call("lookup_order", {"order_id": "PLANT-arg-91c2"}, call_id="t1")],
                [
                    function_call(
                        "transfer_to_billing", {"reason": "PLANT-handoff-d10e secret"}, call_id="h1"
                    )
                ],
            ]
        ),
        tools=[lookup_order],
        handoffs=[handoff(billing, input_type=Escalation, on_handoff=on_handoff)],
    )


def approval_graph(answer: str | None = None) -> Agent[Any]:
    """billing's ``issue_refund`` waits for approval; with ``answer``, the graph that
    resumes it and says ``answer``."""

    @function_tool(needs_approval=True)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        """Refund part of an order."""
        return "refunded"

    steps: list[Any] = (
        [[assistant_message(answer, item_id="m2")]]
        if answer is not None
        else [
            [
                function_call(
                    "issue_refund",
                    {"order_id": "PLANT-approval-arg-b2c0", "amount_cents": 1250},
                    call_id="r1",
                )
            ]
        ]
    )
    return Agent(name="billing", model=ScriptedModel(steps), tools=[issue_refund])


async def plant(journal: Journal, subject: str, prefix: str = "") -> None:
    """Write both sessions of ``subject`` (see the module docs), their ids after ``prefix``."""
    async with ScriptedGuardrail(ALL_MODIFY) as guardrail:
        session = journal.session(f"{prefix}plant-1", user_id=subject, guardrails=guardrail.url)
        graph = session.guard(guarded_graph())
        await drive(graph, "PLANT-input-7f3a secret", session=session, hooks=session)
    await session.add_items(
        [
            {
                "id": "rs_9",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "PLANT-reasoning-0c77"}],
            },
            {"role": "system", "content": "PLANT-system-5d19"},
            {"role": "developer", "content": "PLANT-developer-3c51"},
            {"role": "user", "content": "hello", "name": "PLANT-name-8d02"},  # type: ignore[list-item]
            {
                "type": "mcp_approval_request",
                "id": "mcpr_9",
                "server_label": "crm",
                "name": "delete_contact",
                "arguments": '{"who": "PLANT-mcp-ask-61fe"}',
            },
            {
                "type": "mcp_approval_response",
                "approval_request_id": "mcpr_9",
                "approve": False,
                "reason": "PLANT-mcp-answer-0b93",
            },
            {
                "type": "mcp_call",
                "id": "mcp_9",
                "server_label": "crm",
                "name": "find_contact",
                "arguments": '{"who": "PLANT-mcp-call-c4a7"}',
                "output": "PLANT-mcp-output-5e28",
            },
            {
                "type": "web_search_call",
                "id": "ws_9",
                "status": "completed",
                "action": {"type": "search", "query": "PLANT-hosted-a8f4"},
            },
        ]
    )
    branch = await session.fork(name="b1")
    on_branch = journal.session(f"{prefix}plant-1", user_id=subject, branch=branch.name)
    await on_branch.add_items([{"role": "user", "content": "PLANT-branch-3e6b"}])

    paused_session = journal.session(f"{prefix}plant-2", user_id=subject)
    paused = await drive(
        approval_graph(), "refund me", session=paused_session, hooks=paused_session
    )
    await paused_session.hold(paused)
    await paused_session.approve("r1", by="ann", reason="PLANT-approval-reason-e915")
    await paused_session.resume(approval_graph("PLANT-resumed-17d4"))
