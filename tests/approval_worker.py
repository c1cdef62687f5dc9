"""One step of an approval in a process of its own: ``python tests/approval_worker.py URI
SESSION_ID RAN_FILE STEP [NAME]``.

Steps: ``pause`` (run until the refund waits for approval, hold it, exit), ``approve``
(answer the pending request as NAME), ``approve-and-die`` (answer it, then SIGKILL this
process before anything else), ``resume`` (take the paused run up and run it to its end),
``resume-and-die-in-tool`` (take it up; the tool's body SIGKILLs the process),
``retake`` (take up a run whose taker died). With ``APPROVAL_WORKER_GATE`` set it waits,
imported, for a line on stdin before the step. Each tool body run appends a line to
RAN_FILE, so the parent counts the runs across processes. The step's outcome is one
JSON line on stdout; an unexpected exception ends the process with a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import AlreadyResolved, AlreadyResumed, Journal
from drive import CONFIG, drive

GATE = "APPROVAL_WORKER_GATE"
"""With it set, the worker prints ``ready`` once imported and waits for a line on stdin,
so a parent can start two steps at the same moment (the SDK takes seconds to import)."""
ASK = "Refund order 42"
ANSWER = "Refunded."


def graph(ran_file: Path, *, resumed: bool, die: bool = False) -> Agent[Any]:
    """triage -> billing, whose ``issue_refund`` waits for approval; ``resumed``: the graph
    that resumes it (billing then answers). Each run of the tool's body is a line in
    ``ran_file``; with ``die`` the body SIGKILLs the process right after noting it."""

    @function_tool(needs_approval=True)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        """Refund part of an order (a person approves it first)."""
        with ran_file.open("a") as noted:
            noted.write(f"{os.getpid()} {order_id}:{amount_cents}\n")
        if die:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"refunded {amount_cents} cents on {order_id}"

    if resumed:
        billing_steps: list[Any] = [[assistant_message(ANSWER, item_id="m1")]]
        triage_steps: list[Any] = []
    else:
        refund = {"order_id": "42", "amount_cents": 1250}
        billing_steps = [[function_call("issue_refund", refund, call_id="r1")]]
        triage_steps = [[function_call("transfer_to_billing", {}, call_id="h1")]]
    billing = Agent(name="billing", model=ScriptedModel(billing_steps), tools=[issue_refund])
    return Agent(name="triage", model=ScriptedModel(triage_steps), handoffs=[billing])


async def step(uri: str, session_id: str, ran_file: Path, name: str, by: str) -> dict[str, Any]:
    async with Journal.open(uri) as journal:
        session = journal.session(session_id)
        if name == "pause":
            result: Any = await drive(
                graph(ran_file, resumed=False), ASK, session=session, hooks=session
            )
            held = await session.hold(result)
            return {"held": [a.request_id for a in held]}
        if name in ("approve", "approve-and-die"):
            try:
                decided = await session.approve("r1", by=by)
            except AlreadyResolved as refused:
                outcome: dict[str, Any] = {"refused": refused.by}
            else:
                outcome = {"landed": decided.by}
            if name == "approve-and-die":
                print(json.dumps(outcome), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return outcome
        die = name == "resume-and-die-in-tool"
        agent = graph(ran_file, resumed=True, die=die)
        try:
            finished = await session.resume(agent, retake=name == "retake", run_config=CONFIG)
        except AlreadyResumed as refused:
            return {"refused": str(refused), "ran": refused.ran}
        return {"final": finished.final_output}


def main() -> None:
    uri, session_id, ran_file, name = sys.argv[1:5]
    by = sys.argv[5] if len(sys.argv) > 5 else "ann"
    if os.environ.get(GATE):
        print("ready", flush=True)
        sys.stdin.readline()
    outcome = asyncio.run(step(uri, session_id, Path(ran_file), name, by))
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
