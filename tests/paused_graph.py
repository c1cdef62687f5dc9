"""An agent graph whose run pauses inside a subagent: a refund that needs a person's approval.

triage hands off to billing (and billing to refunds when ``depth`` is 2), whose
``issue_refund`` call waits for approval, so the run stops with every subagent on the way
open. Shared by the branch tests that end, fork or race a line with a subagent open.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, function_tool
from agents.testing import ScriptedModel, function_call


def paused_graph(depth: int = 1) -> Agent[Any]:
    """triage -> billing (-> refunds when ``depth`` is 2), whose refund needs approval."""

    @function_tool(needs_approval=True)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        """Refund part of an order (a person approves it first)."""
        return f"refunded {amount_cents} cents on {order_id}"

    refund = [function_call("issue_refund", {"order_id": "42", "amount_cents": 1250}, call_id="r1")]
    if depth == 1:
        billing = Agent(name="billing", model=ScriptedModel([refund]), tools=[issue_refund])
    else:
        refunds = Agent(name="refunds", model=ScriptedModel([refund]), tools=[issue_refund])
        to_refunds = [function_call("transfer_to_refunds", {}, call_id="h2")]
        billing = Agent(name="billing", model=ScriptedModel([to_refunds]), handoffs=[refunds])
    to_billing = [function_call("transfer_to_billing", {}, call_id="h1")]
    return Agent(name="triage", model=ScriptedModel([to_billing]), handoffs=[billing])


def approval_graph(answer: str | None = None) -> Agent[Any]:
    """triage -> billing, whose ``issue_refund`` waits for approval; with ``answer``, the
    graph that resumes the paused run: billing answers ``answer`` once the call is decided."""
    from agents.testing import assistant_message

    @function_tool(needs_approval=True)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        """Refund part of an order (a person approves it first)."""
        return f"refunded {amount_cents} cents on {order_id}"

    if answer is None:
        billing_steps: list[Any] = [
            [function_call("issue_refund", {"order_id": "42", "amount_cents": 1250}, call_id="r1")]
        ]
        triage_steps: list[Any] = [[function_call("transfer_to_billing", {}, call_id="h1")]]
    else:
        billing_steps, triage_steps = [[assistant_message(answer, item_id="m1")]], []
    billing = Agent(name="billing", model=ScriptedModel(billing_steps), tools=[issue_refund])
    return Agent(name="triage", model=ScriptedModel(triage_steps), handoffs=[billing])


async def resumed(
    graph: Agent[Any],
    saved: str,
    *,
    approve: bool,
    session: Any,
    hooks: Any,
    method: Any = "run",
) -> None:
    """Load the paused run ``saved`` into ``graph``, approve or reject its one pending
    call, and run it on to its end on ``session``."""
    from agents import RunState

    from drive import drive

    state = await RunState.from_string(graph, saved)
    (interruption,) = state.get_interruptions()
    if approve:
        state.approve(interruption)
    else:
        state.reject(interruption)
    await drive(graph, state, method=method, session=session, hooks=hooks)
