"""One agent graph that performs each guardrailed action once, for the guardrail tests.

triage gets the user's input, calls ``lookup_order``, then hands off to
billing with an ``Escalation`` input; billing gives the final answer. Sinks
record what really ran: the tool body, the handoff's input, and each model
call's input (a scripted model records its calls).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents import Agent, CustomTool, function_tool, handoff
from agents.run_context import RunContextWrapper
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool import FunctionTool
from openai.types.responses import ResponseCustomToolCall
from pydantic import BaseModel

from agentjournal import JournalSession
from agentjournal.guardrails.actions import message_text
from drive import Method, drive

USER_INPUT = "my secret order"
FINAL = "your secret is safe"


class Escalation(BaseModel):
    reason: str


@dataclass
class Graph:
    """The agents of one run and what their bodies did."""

    triage: Agent[Any]
    billing: Agent[Any]
    tool_ran: list[str] = field(default_factory=list)
    handed_off: list[str] = field(default_factory=list)

    def model_inputs(self, agent: Agent[Any]) -> list[str]:
        """The latest user message text of each model call the agent made."""
        assert isinstance(agent.model, ScriptedModel)
        texts = []
        for call in agent.model.calls:
            users = [i for i in call.input if isinstance(i, dict) and i.get("role") == "user"]
            texts.append(message_text(users[-1]["content"]) if users else "")
        return texts


def graph() -> Graph:
    """A fresh graph (scripted models are consumed as they run)."""
    tool_ran: list[str] = []
    handed_off: list[str] = []

    @function_tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        tool_ran.append(order_id)
        return f"order {order_id}: charged twice"

    async def on_handoff(ctx: RunContextWrapper[Any], escalation: Escalation) -> None:
        handed_off.append(escalation.reason)

    billing: Agent[Any] = Agent(
        name="billing", model=ScriptedModel([[assistant_message(FINAL, item_id="m1")]])
    )
    triage: Agent[Any] = Agent(
        name="triage",
        model=ScriptedModel(
            [
                [function_call("lookup_order", {"order_id": "42"}, call_id="t1")],
                [function_call("transfer_to_billing", {"reason": "secret refund"}, call_id="h1")],
            ]
        ),
        tools=[lookup_order],
        handoffs=[handoff(billing, input_type=Escalation, on_handoff=on_handoff)],
    )
    assert isinstance(triage.tools[0], FunctionTool)
    return Graph(triage, billing, tool_ran, handed_off)


async def run(
    agent: Agent[Any], session: JournalSession, *, method: Method = "run", text: str = USER_INPUT
) -> Any:
    """Drive ``agent`` with the session as session and hooks; the final output."""
    result = await drive(agent, text, method=method, session=session, hooks=session)
    return result.final_output


def custom_tool_agent(ran: list[str]) -> Agent[Any]:
    """An agent whose model calls a custom (free-form input) tool, then answers."""

    def wipe(ctx: Any, text: str) -> str:
        ran.append(text)
        return "wiped"

    call = ResponseCustomToolCall(type="custom_tool_call", call_id="w1", name="wipe", input="all")
    return Agent(
        name="janitor",
        model=ScriptedModel([[call], [assistant_message("done")]]),
        tools=[CustomTool(name="wipe", description="Wipe things.", on_invoke_tool=wipe)],
    )
