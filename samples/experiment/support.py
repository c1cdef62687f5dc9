"""A support agent's recorded sessions, and a candidate to try on them (agentjournal experiment).

``python samples/experiment/support.py`` records five support sessions offline (scripted
models, the SDK's real ``Runner``) into ``$AGENTJOURNAL_URI`` (default
``./agentjournal.db``); sessions already there are left as they are. The recorded agent gets
one answer wrong (``exp-returns``: the return window is 30 days, not 7).

``candidate`` is the agent to try (``--candidate samples/experiment/support.py:candidate``);
``script.yml`` scripts its answers per session and turn, offline: it fixes ``exp-returns``
and breaks ``exp-cancel`` (it no longer cancels). ``scorers.yml`` says what a right answer
holds.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: shipped 2026-11-02, in transit"


@function_tool
def cancel_order(order_id: str) -> str:
    """Cancel an order."""
    return f"order {order_id}: cancelled"


TOOLS = [lookup_order, cancel_order]

# Each session's turns: the user's message, then the recorded agent's model answers.
RECORDED: dict[str, list[tuple[str, list[Any]]]] = {
    "exp-where": [
        (
            "Where is order 41?",
            [
                [function_call("lookup_order", {"order_id": "41"}, call_id="w1")],
                [assistant_message("Order 41 shipped on 2 November and is in transit.")],
            ],
        )
    ],
    "exp-returns": [
        ("How long do I have to return an item?", [[assistant_message("You have 7 days.")]])
    ],
    "exp-cancel": [
        (
            "Please cancel order 44.",
            [
                [function_call("cancel_order", {"order_id": "44"}, call_id="c1")],
                [assistant_message("Order 44 is cancelled.")],
            ],
        )
    ],
    "exp-hours": [
        ("When are you open?", [[assistant_message("We are open 9 to 17, Monday to Friday.")]])
    ],
    "exp-status": [
        ("Hi!", [[assistant_message("Hello! How can I help?")]]),
        (
            "What is the status of order 45?",
            [
                [function_call("lookup_order", {"order_id": "45"}, call_id="s1")],
                [assistant_message("Order 45 shipped on 2 November and is in transit.")],
            ],
        ),
    ],
}

candidate: Agent[Any] = Agent(
    name="support",
    instructions="Answer support questions; look orders up before answering.",
    tools=list(TOOLS),
)
"""The agent an experiment tries on the recorded sessions."""


async def record() -> None:
    async with Journal.open() as journal:
        for session_id, turns in RECORDED.items():
            session = journal.session(session_id, app_name="support-desk", user_id="u1")
            if await session.get_items(limit=1):
                continue  # recorded before
            for text, answers in turns:
                agent: Agent[Any] = Agent(
                    name="support", tools=list(TOOLS), model=ScriptedModel(answers)
                )
                await Runner.run(
                    agent,
                    text,
                    session=session,
                    hooks=session,
                    run_config=RunConfig(tracing_disabled=True),
                )
            print(f"recorded {session_id}")


if __name__ == "__main__":
    asyncio.run(record())
