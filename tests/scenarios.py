"""Scripted conversations for runner-level tests (offline, ScriptedModel).

Also runnable: ``python tests/scenarios.py URI SESSION TURN [METHOD]`` runs one
turn of :data:`TURNS` in a fresh process (the resume tests use it).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from agents import Agent, Session, function_tool
from agents.items import TResponseOutputItem
from agents.result import RunResultBase
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_reasoning_item import Summary

from drive import Method, drive


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: two charges of 12.50 EUR on 2026-11-02"


@function_tool
def refund(order_id: str, amount_cents: int) -> str:
    """Refund part of an order."""
    return f"refunded {amount_cents} cents on order {order_id}"


def thinking(text: str, item_id: str) -> TResponseOutputItem:
    return ResponseReasoningItem(
        id=item_id, type="reasoning", summary=[Summary(text=text, type="summary_text")]
    )


def usage(tokens_in: int, tokens_out: int) -> Usage:
    return Usage(
        requests=1,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        total_tokens=tokens_in + tokens_out,
    )


# Each turn: the user's input and the model's responses, one per model call.
TURNS: list[tuple[str, list[list[TResponseOutputItem]]]] = [
    (
        "Why was I charged twice for order 42?",
        [
            [
                thinking("Look the order up first.", "rs_1"),
                function_call("lookup_order", {"order_id": "42"}, call_id="call_1"),
            ],
            [assistant_message("Order 42 was charged twice: 2 x 12.50 EUR.", item_id="msg_1")],
        ],
    ),
    (
        "Please refund the duplicate.",
        [
            [
                function_call("lookup_order", {"order_id": "42"}, call_id="call_2"),
                function_call("refund", {"order_id": "42", "amount_cents": 1250}, call_id="call_3"),
            ],
            [assistant_message("Done: 12.50 EUR is on its way back. ✓", item_id="msg_2")],
        ],
    ),
    (
        "Thanks!",
        [[assistant_message("You're welcome — anything else?", item_id="msg_3")]],
    ),
]


def agent_for(turn: int) -> Agent[Any]:
    """The triage agent scripted for ``turn``."""
    steps = [
        ModelStep(output=response, usage=usage(100 + 10 * n, 20))
        for n, response in enumerate(TURNS[turn][1])
    ]
    return Agent(
        name="triage",
        instructions="Help with billing questions.",
        model=ScriptedModel(steps),
        tools=[lookup_order, refund],
    )


def first_turns(count: int) -> list[tuple[Callable[[], Agent[Any]], str]]:
    """The first ``count`` turns of :data:`TURNS` as runs for :func:`drive.sdk_reference`."""
    return [(partial(agent_for, turn), TURNS[turn][0]) for turn in range(count)]


async def run_turn(
    method: Method, turn: int, session: Session, *, hooks: bool = True
) -> RunResultBase:
    """Run one turn of :data:`TURNS` with ``session`` (and as hooks, if it is ours)."""
    run_hooks: Any = session if hooks else None
    return await drive(
        agent_for(turn), TURNS[turn][0], method=method, session=session, hooks=run_hooks
    )


async def _main(uri: str, session_id: str, turn: int, method: Method) -> None:
    from agentjournal import Journal

    async with Journal.open(uri) as journal:
        session = journal.session(session_id, app_name="scenarios")
        await run_turn(method, turn, session)


if __name__ == "__main__":
    chosen: Method = "run_streamed" if sys.argv[4:] == ["run_streamed"] else "run"
    asyncio.run(_main(sys.argv[1], sys.argv[2], int(sys.argv[3]), chosen))
