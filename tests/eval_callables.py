"""Scoring functions a scorers file names (``callable: eval_callables:NAME``)."""

from __future__ import annotations

from agentjournal.evals.scorers.base import Score
from agentjournal.read.evals.turns import ScoredSession, ScoredTurn


def mentions_order(turn: ScoredTurn) -> tuple[float, str, str]:
    """1.0 when the answer names order 42 (sync, a tuple)."""
    if "42" in turn.output:
        return 1.0, "pass", "names order 42"
    return 0.0, "fail", "does not name the order"


async def short_answer(turn: ScoredTurn) -> Score | None:
    """Partial credit for short answers (async, a Score); None for a turn without one."""
    if not turn.output:
        return None
    return Score(min(1.0, 40 / max(len(turn.output), 1)), "short", f"{len(turn.output)} chars")


def turns_over_three(session: ScoredSession) -> float:
    """The share of three turns the line has (a number)."""
    return min(1.0, len(session.turns) / 3)


def out_of_range(turn: ScoredTurn) -> float:
    """A broken scorer: 1.5 is no score."""
    return 1.5


def wrong_type(turn: ScoredTurn) -> str:
    """A broken scorer: text is no score."""
    return "good"
