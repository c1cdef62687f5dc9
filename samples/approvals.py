"""A refund that waits for a person, offline: the run pauses in one process, a person answers
from the command line, and another process resumes it.

Run ``python samples/approvals.py`` to start the run: billing's ``issue_refund`` needs approval
(``needs_approval=True``), so the run stops, and ``session.hold(result)`` stores the paused run
beside the question. Answer with ``agentjournal approve support-4800 r1 --as NAME`` (or
``reject``), then ``python samples/approvals.py --resume`` takes the paused run up and runs it
with the recorded answer: the refund runs once if approved, never if rejected. The models are
the SDK's ``ScriptedModel``; the store is ``$AGENTJOURNAL_URI``, else ``./agentjournal.db``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import InvalidInput, Journal

SESSION = "support-4800"
CONFIG = RunConfig(tracing_disabled=True)


def support_team(*, resumed: bool) -> Agent[Any]:
    """triage hands off to billing, whose refund waits for a person; ``resumed``: the same
    team as it goes on after the answer (billing then tells the customer)."""

    @function_tool(needs_approval=True)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        """Refund part of an order (a person approves it first)."""
        print(f"  the tool runs: refund of {amount_cents} cents on order {order_id}")
        return f"refunded {amount_cents} cents on {order_id}"

    if resumed:
        billing_steps: list[Any] = [[assistant_message("Your refund is on its way.")]]
        triage_steps: list[Any] = []
    else:
        refund = {"order_id": "42", "amount_cents": 1250}
        billing_steps = [[function_call("issue_refund", refund, call_id="r1")]]
        triage_steps = [[function_call("transfer_to_billing", {}, call_id="h1")]]
    billing = Agent(name="billing", model=ScriptedModel(billing_steps), tools=[issue_refund])
    return Agent(name="triage", model=ScriptedModel(triage_steps), handoffs=[billing])


async def start(session_id: str) -> None:
    async with Journal.open() as journal:
        session = journal.session(session_id)
        team = support_team(resumed=False)
        result = await Runner.run(
            team, "Refund order 42, please", session=session, hooks=session, run_config=CONFIG
        )
        for waiting in await session.hold(result):
            print(
                f"{waiting.agent} waits for approval of {waiting.tool_name}({waiting.arguments}) "
                f"[request {waiting.request_id}]"
            )
        print(f"answer: agentjournal approve {session_id} r1 --as YOUR_NAME --reason '...'")


async def resume(session_id: str) -> None:
    async with Journal.open() as journal:
        session = journal.session(session_id)
        try:
            result = await session.resume(support_team(resumed=True), run_config=CONFIG)
        except InvalidInput as refused:  # no answer yet, or resumed already (AlreadyResumed)
            raise SystemExit(f"approvals.py: {refused}") from None
        print(f"billing: {result.final_output}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--resume", action="store_true", help="resume the paused run with its recorded answer"
    )
    parser.add_argument("--session", default=SESSION, help=f"the session id (default: {SESSION})")
    args = parser.parse_args()
    asyncio.run(resume(args.session) if args.resume else start(args.session))


if __name__ == "__main__":
    main()
