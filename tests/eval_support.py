"""A recorded support conversation for the eval tests: real ``Runner.run`` turns, scripted.

Three turns on one session, written by the SDK's ``Runner`` through a ``JournalSession``:

1. "Why was I charged twice for order 42?" — triage looks the order up and answers;
2. "Please refund the duplicate." — triage hands off to billing, billing calls ``refund``,
   which the guardrail BLOCKs, and billing answers that a colleague will refund it;
3. "Thanks! Anything else?" — triage answers with a JSON status.

Every model is a ``ScriptedModel`` named :data:`MODEL` (priced by :data:`PRICES`), each
step with known token usage, so a turn's usage and cost are known exactly.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage

from agentjournal import Journal, JournalSession
from agentjournal.read.usage import Prices
from drive import Method, drive
from scripted_guardrail import ScriptedGuardrail

MODEL = "scripted-support"
PRICES = Prices.from_json({"models": {MODEL: {"input": 1.0, "output": 4.0}}})
"""USD 1 per 1M input tokens, 4 per 1M output tokens."""

TRIAGE = (120, 30)  # (input, output) tokens of each triage response
BILLING = (80, 20)  # of each billing response

INPUTS = (
    "Why was I charged twice for order 42?",
    "Please refund the duplicate.",
    "Thanks! Anything else?",
)
ANSWERS = (
    "Order 42 was charged twice: 2 x 12.50 EUR.",
    "I cannot refund it myself; a colleague will refund 12.50 EUR within two days.",
    '{"status": "resolved", "order_id": "42"}',
)
BRANCH_ANSWER = "Refund sent: 12.50 EUR is on its way back."


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: two charges of 12.50 EUR"


@function_tool
def refund(order_id: str, amount_cents: int) -> str:
    """Refund part of an order."""
    return f"refunded {amount_cents} cents on order {order_id}"


def _model(steps: list[list[Any]], tokens: tuple[int, int]) -> ScriptedModel:
    usage = Usage(
        requests=1,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        total_tokens=sum(tokens),
    )
    model = ScriptedModel([ModelStep(output=step, usage=usage) for step in steps])
    model.model = MODEL  # type: ignore[attr-defined]  # a name, as a real model has
    return model


def triage(steps: list[list[Any]], billing_steps: list[list[Any]] | None = None) -> Agent[Any]:
    """Triage (with lookup_order), handing off to billing (with refund)."""
    billing: Agent[Any] = Agent(
        name="billing", model=_model(billing_steps or [], BILLING), tools=[refund]
    )
    return Agent(
        name="triage",
        model=_model(steps, TRIAGE),
        tools=[lookup_order],
        handoffs=[billing],
    )


def turn_agents(turn: int) -> Agent[Any]:
    """The agents scripted for turn ``turn`` (1-3) of the conversation."""
    if turn == 1:
        return triage(
            [
                [function_call("lookup_order", {"order_id": "42"}, call_id="call_lookup")],
                [assistant_message(ANSWERS[0], item_id="msg_1")],
            ]
        )
    if turn == 2:
        return triage(
            [[function_call("transfer_to_billing", {}, call_id="call_handoff")]],
            [
                [
                    function_call(
                        "refund", {"order_id": "42", "amount_cents": 1250}, call_id="call_refund"
                    )
                ],
                [assistant_message(ANSWERS[1], item_id="msg_2")],
            ],
        )
    return triage([[assistant_message(ANSWERS[2], item_id="msg_3")]])


async def record_support(
    journal: Journal, session_id: str, *, user_id: str | None = None, method: Method = "run"
) -> JournalSession:
    """Record the three turns on ``session_id`` (sealed under ``user_id`` when the journal
    has keys) with ``Runner.run`` or ``Runner.run_streamed``; the guardrail, on loopback,
    checks turn 2 and BLOCKs its tool call."""
    session = journal.session(session_id, user_id=user_id)
    await drive(turn_agents(1), INPUTS[0], method=method, session=session, hooks=session)
    async with ScriptedGuardrail({"TOOL_CALL": "BLOCK"}) as guardrail:
        guarded = journal.session(session_id, user_id=user_id, guardrails=guardrail.url)
        agent = guarded.guard(turn_agents(2))
        await drive(agent, INPUTS[1], method=method, session=guarded, hooks=guarded)
    await drive(turn_agents(3), INPUTS[2], method=method, session=session, hooks=session)
    return session


async def record_branch(journal: Journal, session_id: str, name: str) -> None:
    """Fork the conversation before turn 2 as ``name`` and answer turn 2 there at once."""
    session = journal.session(session_id)
    await session.fork(turn=2, name=name)
    branch = journal.session(session_id, branch=name)
    agent = triage([[assistant_message(BRANCH_ANSWER, item_id="msg_b2")]])
    await drive(agent, INPUTS[1], session=branch, hooks=branch)
