"""Sessions for the read-side tests (tail, trace export), written by real ``Runner`` runs.

:func:`write_support` runs the demo's support team with its guardrail service and the
sample policy: triage -> billing -> refunds (nested two deep), tool calls at each level,
a guardrail MODIFY (billing's note), a guardrail BLOCK (a refund above 20.00 EUR), an
authority refusal (a refund above refunds' ceiling of 30.00 EUR), then a second run in
which triage answers. Run as a script it writes sessions from another process::

    python tests/trace_scenarios.py URI SESSION [SESSION ...]
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal
from agentjournal.authority import Policy
from agentjournal.cli._demo import _step, add_note, issue_refund, lookup_order, thanks_agent
from agentjournal.cli.demo import RULES
from agentjournal.guardrails.rules import load_rules
from agentjournal.guardrails.service import running
from agentjournal.ledger import SigningKey

POLICY = Path(__file__).resolve().parents[1] / "samples" / "policy.yml"
CONFIG = RunConfig(tracing_disabled=True)

EXPECTED_CALLS = ("call_lookup", "call_note", "call_refund_big", "call_refund_over", "call_refund")
"""The tool calls of the first run, in order (the handoffs are subagents, not tool calls)."""


WITHOUT_APPROVAL = dataclasses.replace(issue_refund, needs_approval=False)
"""The demo's refund tool without its approval: these traces are of runs no person paused
(tests/test_trace_approvals.py has the wait for a person)."""


def support_team() -> Agent[Any]:
    """triage -> billing -> refunds; refunds tries 25.00 EUR (guardrail BLOCK), 40.00 EUR
    (refused: over its 30.00 EUR ceiling), then 12.50 EUR."""
    refunds = Agent[Any](
        name="refunds",
        model=ScriptedModel(
            [
                _step(
                    function_call(
                        "issue_refund",
                        {"order_id": "42", "amount_cents": 2500},
                        call_id="call_refund_big",
                    )
                ),
                _step(
                    function_call(
                        "issue_refund",
                        {"order_id": "42", "amount_cents": 4000},
                        call_id="call_refund_over",
                    )
                ),
                _step(
                    function_call(
                        "issue_refund",
                        {"order_id": "42", "amount_cents": 1250},
                        call_id="call_refund",
                    )
                ),
                _step(assistant_message("Refunded 12.50 EUR.", item_id="msg_refunds")),
            ]
        ),
        tools=[WITHOUT_APPROVAL],
    )
    billing = Agent[Any](
        name="billing",
        model=ScriptedModel(
            [
                _step(function_call("lookup_order", {"order_id": "42"}, call_id="call_lookup")),
                _step(
                    function_call(
                        "add_note",
                        {"order_id": "42", "note": "ann@example.com disputes a charge"},
                        call_id="call_note",
                    )
                ),
                _step(function_call("transfer_to_refunds", {}, call_id="call_to_refunds")),
            ]
        ),
        tools=[lookup_order, add_note],
        handoffs=[refunds],
    )
    return Agent[Any](
        name="triage",
        model=ScriptedModel(
            [_step(function_call("transfer_to_billing", {}, call_id="call_to_billing"))]
        ),
        handoffs=[billing],
    )


async def write_support(uri: str, session_id: str, signing_key: SigningKey | None = None) -> None:
    """Write one support session (two runs) to the store at ``uri``, its ledger signed with
    ``signing_key`` when one is given."""
    policy = Policy.load(str(POLICY))
    async with (
        running(load_rules(RULES)) as guardrail,
        Journal.open(uri, signing_key=signing_key) as journal,
    ):
        session = journal.session(
            session_id,
            app_name="trace-test",
            agent_name="triage",
            guardrails=guardrail,
            policy=policy,
        )
        for agent, text in ((support_team(), "Charged twice?"), (thanks_agent(), "Thanks!")):
            async with session.run_scope():
                await Runner.run(
                    session.guard(agent), text, session=session, hooks=session, run_config=CONFIG
                )


async def _main(uri: str, sessions: list[str]) -> None:
    for session_id in sessions:
        await write_support(uri, session_id)
        print(f"wrote {session_id}", flush=True)


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2:]))
