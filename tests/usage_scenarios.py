"""Scripted runs whose every model response has its own usage and response id (offline).

For the usage tests: the k-th response a :class:`Script` scripts is ``resp-k`` with
usage ``(100k input, 10k cached, 7k output, k reasoning, 107k total)``, so a test can
tell each response from the others and knows the exact totals.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents import Agent, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage as SdkUsage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from agentjournal.tokens import Usage

SINK: list[str] = []


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    SINK.append(f"lookup {order_id}")
    return f"order {order_id}: charged twice"


@function_tool
def issue_credit(customer_id: str, amount_cents: int) -> str:
    """Credit a customer."""
    SINK.append(f"credit {customer_id} {amount_cents}")
    return f"credited {amount_cents}"


class Script:
    """Scripted responses, each with usage and a response id of its own (k = 1, 2, ...)."""

    def __init__(self) -> None:
        self.scripted: list[tuple[str, str, Usage]] = []  # (response id, agent, usage)

    def steps(self, agent: str, outputs: Sequence[list[Any]]) -> list[ModelStep]:
        steps = []
        for output in outputs:
            k = len(self.scripted) + 1
            usage = Usage(1, 100 * k, 10 * k, 7 * k, k, 107 * k)
            self.scripted.append((f"resp-{k}", agent, usage))
            steps.append(ModelStep(output=output, usage=sdk_usage(usage), response_id=f"resp-{k}"))
        return steps

    def total(self, count: int | None = None) -> Usage:
        return sum((usage for _, _, usage in self.scripted[:count]), Usage())


def sdk_usage(usage: Usage) -> SdkUsage:
    return SdkUsage(
        requests=1,
        input_tokens=usage.input_tokens,
        input_tokens_details=InputTokensDetails(
            cached_tokens=usage.cached_input_tokens, cache_write_tokens=0
        ),
        output_tokens=usage.output_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=usage.reasoning_tokens),
        total_tokens=usage.total_tokens,
    )


def model(steps: list[ModelStep], name: str | None = None) -> ScriptedModel:
    scripted = ScriptedModel(steps)
    if name is not None:
        scripted.model = name  # type: ignore[attr-defined]  # a model object naming its model
    return scripted


def nested(
    script: Script,
    *,
    checks: Sequence[Any] = (),
    models: tuple[str | None, str | None] = (None, "scripted-mini"),
) -> Agent[Any]:
    """triage -> billing -> refunds: two handoff-only responses, tool calls, a message.

    ``models``: the model names triage and refunds, then billing, name (None: none).
    """
    # Scripted in the order the run calls the models: the k-th response is resp-k.
    triage = script.steps("triage", [[function_call("transfer_to_billing", {}, call_id="h1")]])
    billing = script.steps(
        "billing",
        [
            [function_call("lookup_order", {"order_id": "42"}, call_id="t1")],
            [function_call("transfer_to_refunds", {}, call_id="h2")],
        ],
    )
    refunds = script.steps(
        "refunds",
        [
            [function_call("lookup_order", {"order_id": "42"}, call_id="t2")],
            [assistant_message("Refunded 12.50 EUR.", item_id="m2")],
        ],
    )
    refunds_agent: Agent[Any] = Agent(
        name="refunds",
        model=model(refunds, models[0]),
        tools=[lookup_order],
        output_guardrails=[*checks],
    )
    billing_agent: Agent[Any] = Agent(
        name="billing",
        model=model(billing, models[1]),
        tools=[lookup_order],
        handoffs=[refunds_agent],
    )
    return Agent(name="triage", model=model(triage, models[0]), handoffs=[billing_agent])


def parallel(script: Script) -> Agent[Any]:
    """triage calls a tool and hands off in one response; billing answers."""
    triage = script.steps(
        "triage",
        [
            [
                function_call("lookup_order", {"order_id": "7"}, call_id="t0"),
                function_call("transfer_to_billing", {}, call_id="h1"),
            ]
        ],
    )
    billing = script.steps("billing", [[assistant_message("Billing here.", item_id="m1")]])
    billing_agent: Agent[Any] = Agent(name="billing", model=model(billing))
    return Agent(name="triage", model=model(triage), tools=[lookup_order], handoffs=[billing_agent])


POLICY = {
    "agents": {
        "triage": {"scopes": ["billing.*"]},
        "billing": {
            "scopes": ["billing.read", "billing.refund"],
            "ceilings": {"spend": {"kind": "cap", "limit": 5000}},
        },
    },
    "tools": {
        "lookup_order": {"scope": "billing.read"},
        "issue_credit": {"scope": "billing.refund", "ceilings": {"spend": "amount_cents"}},
    },
}


def credit(script: Script) -> Agent[Any]:
    """triage -> billing, which tries a credit beyond its cap, then answers."""
    triage = script.steps("triage", [[function_call("transfer_to_billing", {}, call_id="h1")]])
    billing = script.steps(
        "billing",
        [
            [
                function_call(
                    "issue_credit", {"customer_id": "c-7", "amount_cents": 25000}, call_id="c1"
                )
            ],
            [assistant_message("I cannot credit that much.", item_id="m1")],
        ],
    )
    billing_agent: Agent[Any] = Agent(name="billing", model=model(billing), tools=[issue_credit])
    return Agent(name="triage", model=model(triage), handoffs=[billing_agent])
