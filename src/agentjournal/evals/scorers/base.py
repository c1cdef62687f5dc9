"""The scorer protocol and what a scorer returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentjournal.read.evals.turns import ScoredSession, ScoredTurn, TurnUsage


@dataclass(frozen=True, slots=True)
class Score:
    """One judgement.

    Attributes:
        value: In [0, 1].
        label: A short word (``pass``, ``fail``, ``good`` ...).
        reason: Why, in a sentence.
        usage: What judging cost, when a model judged (an LLM judge).
        model: The judge's model, when a model judged.
    """

    value: float
    label: str = ""
    reason: str = ""
    usage: TurnUsage | None = None
    model: str | None = None


@runtime_checkable
class Scorer(Protocol):
    """What scores turns or whole session lines.

    ``name`` and ``version`` are recorded with every score; ``describe()`` goes into the
    run's ``EvalRunStarted`` (kind, rubric digest, model ...). Either method may return
    None: the scorer does not apply there (no score is written).
    """

    name: str
    version: str
    kind: str

    def describe(self) -> dict[str, Any]: ...

    async def score_turn(self, turn: ScoredTurn) -> Score | None: ...

    async def score_session(self, session: ScoredSession) -> Score | None: ...
