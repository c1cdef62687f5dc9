"""Five recorded support sessions and a candidate that answers them again, for experiment tests.

The recorded agent (``support``) answers every question right but one: in
``exp-returns`` it says the return window is 7 days (it is 30). The candidate
(:data:`candidate`, a ``module:agent`` for ``--candidate experiment_sessions:candidate``)
is scripted by :func:`candidate_script`: the same answers and tool calls everywhere, but
it fixes ``exp-returns`` and breaks ``exp-cancel`` (it refuses to cancel, with no tool
call). :class:`Expects` scores an answer by the words it must hold.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal
from agentjournal.authority import Policy
from agentjournal.evals.scorers.base import Score
from agentjournal.read.evals.turns import ScoredSession, ScoredTurn
from drive import drive

DELAY = "EXPERIMENT_TOOL_DELAY"
"""Seconds each order tool takes (default 0): the kill test widens its window with it."""


def _slow() -> None:
    time.sleep(float(os.environ.get(DELAY, "0")))


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    _slow()
    return f"order {order_id}: shipped 2026-11-02, in transit"


@function_tool
def cancel_order(order_id: str) -> str:
    """Cancel an order."""
    _slow()
    return f"order {order_id}: cancelled"


@function_tool
def delete_account(user: str) -> str:
    """Delete a customer's account."""
    return f"account {user}: deleted"


TOOLS = [lookup_order, cancel_order, delete_account]

Step = dict[str, Any]
# session -> turns, each (user message, the recorded model steps in the runner's format)
RECORDED: dict[str, list[tuple[str, list[Step]]]] = {
    "exp-where": [
        (
            "Where is order 41?",
            [
                {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "41"}}]},
                {"text": "Order 41 shipped on 2 November and is in transit."},
            ],
        )
    ],
    "exp-returns": [("How long do I have to return an item?", [{"text": "You have 7 days."}])],
    "exp-cancel": [
        (
            "Please cancel order 44.",
            [
                {"tool_calls": [{"name": "cancel_order", "arguments": {"order_id": "44"}}]},
                {"text": "Order 44 is cancelled."},
            ],
        )
    ],
    "exp-hours": [("When are you open?", [{"text": "We are open 9 to 17, Monday to Friday."}])],
    "exp-status": [
        ("Hi!", [{"text": "Hello! How can I help?"}]),
        (
            "What is the status of order 45?",
            [
                {"tool_calls": [{"name": "lookup_order", "arguments": {"order_id": "45"}}]},
                {"text": "Order 45 shipped on 2 November and is in transit."},
            ],
        ),
    ],
}
SESSIONS = list(RECORDED)

# The words a right answer holds, by user message.
EXPECTED: dict[str, str] = {
    "Where is order 41?": "in transit",
    "How long do I have to return an item?": "30 days",
    "Please cancel order 44.": "cancelled",
    "When are you open?": "9 to 17",
    "Hi!": "help",
    "What is the status of order 45?": "in transit",
}


def _items(steps: list[Step], tag: str) -> list[list[Any]]:
    out: list[list[Any]] = []
    for number, step in enumerate(steps, start=1):
        if "text" in step:
            out.append([assistant_message(step["text"], item_id=f"msg_{tag}_{number}")])
        else:
            out.append(
                [
                    function_call(c["name"], c["arguments"], call_id=f"call_{tag}_{number}_{n}")
                    for n, c in enumerate(step["tool_calls"], start=1)
                ]
            )
    return out


async def record(
    journal: Journal,
    sessions: list[str] | None = None,
    *,
    guardrails: str | None = None,
    policy: Policy | None = None,
) -> None:
    """Record the sessions with the real Runner (scripted models), as production would:
    under ``guardrails`` and ``policy`` when given (the agent guarded by its session)."""
    for session_id in sessions or SESSIONS:
        session = journal.session(
            session_id, app_name="support-desk", user_id="u1", guardrails=guardrails, policy=policy
        )
        for turn, (text, steps) in enumerate(RECORDED[session_id], start=1):
            agent: Agent[Any] = Agent(
                name="support",
                tools=list(TOOLS),
                model=ScriptedModel(_items(steps, f"{session_id}_{turn}")),
            )
            await drive(session.guard(agent), text, session=session, hooks=session)


candidate: Agent[Any] = Agent(
    name="support",
    instructions="Answer support questions; look orders up before answering.",
    tools=list(TOOLS),
    model=ScriptedModel([]),  # replaced by the experiment's model script
)
"""The candidate, as ``--candidate experiment_sessions:candidate`` names it."""


def candidate_script(
    *, fix: bool = True, breaks: bool = True, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The candidate's answers (an experiment's ``--model-script`` document): the recorded
    ones, but ``exp-returns`` fixed and ``exp-cancel`` broken."""
    script: dict[str, Any] = {
        session: {turn: list(steps) for turn, (_, steps) in enumerate(turns, start=1)}
        for session, turns in RECORDED.items()
    }
    if fix:
        script["exp-returns"][1] = [{"text": "You have 30 days to return an item."}]
    if breaks:
        script["exp-cancel"][1] = [{"text": "Sorry, I cannot cancel orders."}]
    for session, turns in (extra or {}).items():
        script[session].update(turns)
    return script


def scorers_document() -> dict[str, Any]:
    """A scorers file (``--scorers``): a reference scorer holding :data:`EXPECTED`."""
    reference: dict[str, dict[int, dict[str, str]]] = {}
    for session, turns in RECORDED.items():
        reference[session] = {
            turn: {"contains": EXPECTED[text]} for turn, (text, _) in enumerate(turns, start=1)
        }
    return {"scorers": [{"name": "answers", "reference": reference}]}


@dataclass
class Expects:
    """Scores a turn 1 when its answer holds the words :data:`EXPECTED` names, else 0."""

    name: str = "expects"
    version: str = "1"
    kind: str = "callable"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "kind": self.kind}

    async def score_turn(self, turn: ScoredTurn) -> Score | None:
        wanted = EXPECTED.get(turn.input)
        if wanted is None:
            return None
        hit = wanted.lower() in turn.output.lower()
        return Score(1.0 if hit else 0.0, "pass" if hit else "fail", f"wants {wanted!r}")

    async def score_session(self, session: ScoredSession) -> Score | None:
        return None
