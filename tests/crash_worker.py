"""A handoff-heavy writer to kill: ``python tests/crash_worker.py URI SESSION_ID SEED``.

Runs scripted handoff conversations on one session of a journal, forever, until it is
killed (``tests/test_crash_consistency.py`` sends SIGKILL at random moments). It prints
``open`` once the journal is open, then one line per finished step, flushed, so the
parent knows how far it got. With ``CRASH_WORKER_GATE=1`` in the environment it prints
``ready`` once imported and waits for a line on stdin before it opens the journal: the
parent starts the next worker (the SDK takes 2-3 s to import) while it checks the
last one's wreckage. Any exception other than a scripted model failure ends the
process with a traceback on stderr: the parent treats that as a failure of its own.

Every run has its own call ids (``SEED`` and a counter), as a real model's would be: the
receiver's stream name derives from the handoff's call id.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import Callable
from typing import Any

from agents import Agent
from agents.testing import ModelStep, assistant_message, function_call

from agentjournal import Journal, JournalSession
from drive import Method, drive
from handoff_scenarios import SINK, agents

FAILURE = "scripted model failure"
GATE = "CRASH_WORKER_GATE"


def _fail() -> ModelStep:
    return ModelStep(error=RuntimeError(FAILURE))


def nested(tag: str) -> Agent[Any]:
    """triage -> billing -> refunds, with a tool call at each level below triage."""
    return agents(
        [[function_call("transfer_to_billing", {}, call_id=f"h1-{tag}")]],
        [
            [function_call("lookup_order", {"order_id": "42"}, call_id=f"t1-{tag}")],
            [function_call("transfer_to_refunds", {}, call_id=f"h2-{tag}")],
        ],
        [
            [
                function_call(
                    "issue_refund", {"order_id": "42", "amount_cents": 1250}, call_id=f"t2-{tag}"
                )
            ],
            [assistant_message("Refunded 12.50 EUR.", item_id=f"m2-{tag}")],
        ],
    )


def single(tag: str) -> Agent[Any]:
    """triage -> billing; billing looks the order up and answers."""
    return agents(
        [[function_call("transfer_to_billing", {}, call_id=f"h1-{tag}")]],
        [
            [function_call("lookup_order", {"order_id": "42"}, call_id=f"t1-{tag}")],
            [assistant_message("Charged twice; I can refund one.", item_id=f"m1-{tag}")],
        ],
    )


def parallel(tag: str) -> Agent[Any]:
    """triage calls a tool and hands off in the same response."""
    return agents(
        [
            [
                function_call("lookup_order", {"order_id": "7"}, call_id=f"t0-{tag}"),
                function_call("transfer_to_billing", {}, call_id=f"h1-{tag}"),
            ]
        ],
        [[assistant_message("Billing here: order 7 is fine.", item_id=f"m1-{tag}")]],
    )


def two_handoffs(tag: str) -> Agent[Any]:
    """Two handoffs in one response: the SDK honours the first."""
    return agents(
        [
            [
                function_call("transfer_to_billing", {}, call_id=f"h1-{tag}"),
                function_call("transfer_to_sre", {}, call_id=f"h2-{tag}"),
            ]
        ],
        [[assistant_message("Billing took it.", item_id=f"m1-{tag}")]],
    )


def plain(tag: str) -> Agent[Any]:
    """triage answers by itself."""
    return agents([[assistant_message("Anything else?", item_id=f"m9-{tag}")]])


def plain_tool(tag: str) -> Agent[Any]:
    """triage calls a tool, then answers by itself."""
    return agents(
        [
            [function_call("lookup_order", {"order_id": "9"}, call_id=f"t9-{tag}")],
            [assistant_message("Order 9 is fine.", item_id=f"m9-{tag}")],
        ]
    )


def failing(tag: str) -> Agent[Any]:
    """triage -> billing, whose model fails after a tool call: billing stays open."""
    return agents(
        [[function_call("transfer_to_billing", {}, call_id=f"h1-{tag}")]],
        [[function_call("lookup_order", {"order_id": "42"}, call_id=f"t1-{tag}")], _fail()],
    )


def failing_nested(tag: str) -> Agent[Any]:
    """triage -> billing -> refunds, whose model fails: two subagents stay open."""
    return agents(
        [[function_call("transfer_to_billing", {}, call_id=f"h1-{tag}")]],
        [[function_call("transfer_to_refunds", {}, call_id=f"h2-{tag}")]],
        [
            [
                function_call(
                    "issue_refund", {"order_id": "42", "amount_cents": 1}, call_id=f"t2-{tag}"
                )
            ],
            _fail(),
        ],
    )


SCENARIOS: dict[str, Callable[[str], Agent[Any]]] = {
    "nested": nested,
    "single": single,
    "parallel": parallel,
    "two_handoffs": two_handoffs,
    "plain": plain,
    "plain_tool": plain_tool,
    "failing": failing,
    "failing_nested": failing_nested,
}
WEIGHTS = {
    "nested": 6,
    "single": 3,
    "parallel": 3,
    "two_handoffs": 3,
    "plain": 2,
    "plain_tool": 2,
    "failing": 2,
    "failing_nested": 2,
}


async def step(session: JournalSession, rng: random.Random, tag: str) -> str:
    """Do one random thing to the session; return what it was."""
    roll = rng.random()
    if roll < 0.05:
        popped = await session.pop_item()
        return f"pop {'item' if popped is not None else 'nothing'}"
    if roll < 0.06:
        await session.clear_session()
        return "clear"
    name = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
    streamed = rng.random() < 0.3
    try:
        method: Method = "run_streamed" if streamed else "run"
        await drive(
            SCENARIOS[name](tag), f"help with {tag}", method=method, session=session, hooks=session
        )
    except RuntimeError as error:
        if str(error) != FAILURE:
            raise
        return f"{name} failed as scripted"
    return f"{name}{' streamed' if streamed else ''} ok"


async def main(uri: str, session_id: str, seed: int) -> None:
    rng = random.Random(seed)
    async with Journal.open(uri) as journal:
        session = journal.session(session_id, agent_name="triage")
        print("open", flush=True)
        n = 0
        while True:
            done = await step(session, rng, f"{seed}x{n}")
            SINK.clear()
            print(n, done, flush=True)
            n += 1


if __name__ == "__main__":
    if os.environ.get(GATE) == "1":
        print("ready", flush=True)
        sys.stdin.readline()
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
