"""A session line's turns as a scorer sees them (the records; reading them is below).

A turn is the SDK's: it opens at a user message (turn 1, 2, ...; see
:mod:`agentjournal.engine.turns`) and holds every item after it up to the next one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of a turn: its name, its arguments (parsed JSON where they are JSON),
    its call id and its output (None: no output recorded)."""

    name: str
    arguments: Any
    call_id: str
    output: Any = None


@dataclass(frozen=True, slots=True)
class GuardrailCheck:
    """One guardrail decision recorded in a turn: ``ALLOW``, ``BLOCK`` or ``MODIFY``, what
    it judged (``input``, ``output``, ``tool_call`` ...), the tool when it judged a call, and
    its reason."""

    action: str
    kind: str
    tool: str | None = None
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TurnUsage:
    """What a turn's (or a session line's) model calls cost: requests, tokens, and the cost
    in US dollars where the model's price is known."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost: float | None = None


@dataclass(frozen=True, slots=True)
class ScoredTurn:
    """One turn of one session line, as scorers see it.

    Attributes:
        session: The session id.
        line: ``"main"`` or the branch name.
        index: The turn's number (the SDK's: 1 for the first user message).
        input: The user message's text.
        output: The turn's final answer (its last assistant message's text; ``""``: none).
        items: The turn's SDK items, oldest first (the user message first).
        tool_calls: Its tool calls, in order.
        guardrails: The guardrail decisions recorded in it, in order.
        agents: The agents that spoke in it, in order of first word (handoffs included).
        usage: What its model calls cost.
        head: The ``aj.hash`` of the line's last event of this turn: binds a score to the
            exact record it judged.
    """

    session: str
    line: str
    index: int
    input: str
    output: str
    items: tuple[Any, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()
    guardrails: tuple[GuardrailCheck, ...] = ()
    agents: tuple[str, ...] = ()
    usage: TurnUsage = TurnUsage()
    head: str = ""


@dataclass(frozen=True, slots=True)
class ScoredSession:
    """A session line's turns (from its first scored turn on), as scorers see them."""

    session: str
    line: str
    turns: tuple[ScoredTurn, ...]
    usage: TurnUsage = TurnUsage()
    head: str = ""
