"""Scripted handoff conversations (offline, ScriptedModel) for the handoff tests and the demo.

Each scenario builds fresh agents for one run: a scripted model is consumed as it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import Agent, function_tool, handoff
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

SINK: list[str] = []  # what the tools did, in order


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    SINK.append(f"lookup {order_id}")
    return f"order {order_id}: charged twice, 12.50 EUR each"


@function_tool
def issue_refund(order_id: str, amount_cents: int) -> str:
    """Refund part of an order."""
    SINK.append(f"refund {order_id} {amount_cents}")
    return f"refunded {amount_cents} cents on {order_id}"


def agents(
    triage: list[Any], billing: list[Any] | None = None, refunds: list[Any] | None = None
) -> Agent[Any]:
    """triage (hands off to billing or sre) -> billing (hands off to refunds) -> refunds."""
    refunds_agent: Agent[Any] = Agent(
        name="refunds", model=ScriptedModel(refunds or []), tools=[issue_refund]
    )
    billing_agent: Agent[Any] = Agent(
        name="billing",
        model=ScriptedModel(billing or []),
        tools=[lookup_order],
        handoffs=[refunds_agent],
    )
    sre: Agent[Any] = Agent(name="sre", model=ScriptedModel([[assistant_message("sre here")]]))
    return Agent(
        name="triage",
        model=ScriptedModel(triage),
        tools=[lookup_order],
        handoffs=[billing_agent, sre],
    )


def single() -> Agent[Any]:
    """triage -> billing; billing looks the order up and answers."""
    return agents(
        [[function_call("transfer_to_billing", {}, call_id="h1")]],
        [
            [function_call("lookup_order", {"order_id": "42"}, call_id="t1")],
            [assistant_message("You were charged twice; I can refund one.", item_id="m1")],
        ],
    )


def nested() -> Agent[Any]:
    """triage -> billing -> refunds, with tool calls at each level."""
    return agents(
        [[function_call("transfer_to_billing", {}, call_id="h1")]],
        [
            [function_call("lookup_order", {"order_id": "42"}, call_id="t1")],
            [function_call("transfer_to_refunds", {}, call_id="h2")],
        ],
        [
            [function_call("issue_refund", {"order_id": "42", "amount_cents": 1250}, call_id="t2")],
            [assistant_message("Refunded 12.50 EUR.", item_id="m2")],
        ],
    )


def parallel() -> Agent[Any]:
    """triage calls a tool and hands off in the same response."""
    return agents(
        [
            [
                function_call("lookup_order", {"order_id": "7"}, call_id="t0"),
                function_call("transfer_to_billing", {}, call_id="h1"),
            ]
        ],
        [[assistant_message("Billing here: order 7 is fine.", item_id="m1")]],
    )


def two_handoffs() -> Agent[Any]:
    """Two handoffs in one response: the SDK honours the first."""
    return agents(
        [
            [
                function_call("transfer_to_billing", {}, call_id="h1"),
                function_call("transfer_to_sre", {}, call_id="h2"),
            ]
        ],
        [[assistant_message("Billing took it.", item_id="m1")]],
    )


def top_level() -> Agent[Any]:
    """triage answers by itself (a later turn after a handoff run)."""
    return agents([[assistant_message("Anything else?", item_id="m9")]])


def failing() -> Agent[Any]:
    """triage -> billing, whose model fails on its second call."""
    return agents(
        [[function_call("transfer_to_billing", {}, call_id="h1")]],
        [
            [function_call("lookup_order", {"order_id": "42"}, call_id="t1")],
            ModelStep(error=RuntimeError("model backend down")),
        ],
    )


SCENARIOS: dict[str, Callable[[], Agent[Any]]] = {
    "single": single,
    "nested": nested,
    "parallel": parallel,
    "two_handoffs": two_handoffs,
}


def support_team(
    *, call_ids: tuple[str, str] = ("t1", "h1"), billing_steps: list[Any] | None = None
) -> Agent[Any]:
    """triage looks an order up, then hands off to billing, which replies (or fails)."""

    @function_tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return f"order {order_id}: charged twice"

    billing = Agent(
        name="billing",
        model=ScriptedModel(billing_steps or [[assistant_message("refunded", item_id="m1")]]),
    )
    return Agent(
        name="triage",
        model=ScriptedModel(
            [
                [function_call("lookup_order", {"order_id": "42"}, call_id=call_ids[0])],
                [function_call("transfer_to_billing", {}, call_id=call_ids[1])],
            ]
        ),
        tools=[lookup_order],
        handoffs=[handoff(billing)],
    )
