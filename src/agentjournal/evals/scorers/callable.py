"""A scorer that is any importable function (``callable: package.module:function``).

The function takes a :class:`~agentjournal.read.evals.turns.ScoredTurn` (``scope: turn``)
or a :class:`~agentjournal.read.evals.turns.ScoredSession` (``scope: session``), sync or
async, and returns a :class:`~agentjournal.evals.scorers.base.Score`, a number in [0, 1],
a ``(number, label, reason)`` tuple, or None (nothing to score there). It is imported
when the scorers file is loaded, so a missing module is a one-line error up front; what
it returns is checked at each call, and anything else is an
:class:`~agentjournal.errors.InvalidInput` naming the scorer (a bug in the function,
not a judgement).
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agentjournal.errors import InvalidInput
from agentjournal.evals.scorers.base import Score
from agentjournal.evals.scorers.entry import Common, Scope, TurnFilter, check_keys, text
from agentjournal.read.evals.turns import ScoredSession, ScoredTurn


@dataclass(slots=True)
class CallableScorer:
    """An importable function as a scorer (see the module docs).

    Attributes:
        target: ``package.module:function``, as the file names it.
        function: The function.
    """

    name: str
    version: str
    scope: Scope
    filter: TurnFilter
    target: str
    function: Callable[[Any], Any] = field(repr=False)
    kind: str = "callable"

    def describe(self) -> dict[str, Any]:
        """Its record in ``EvalRunStarted``."""
        return {
            "name": self.name,
            "version": self.version,
            "kind": self.kind,
            "callable": self.target,
            "scope": self.scope,
        }

    async def score_turn(self, turn: ScoredTurn) -> Score | None:
        """The function on one turn (None: a session scorer, a skipped turn, or its None)."""
        if self.scope != "turn" or not self.filter.applies(turn):
            return None
        return await self._call(turn)

    async def score_session(self, session: ScoredSession) -> Score | None:
        """The function on the line's turns its filter keeps (None: a turn scorer)."""
        if self.scope != "session":
            return None
        kept = self.filter.select(session)
        if len(kept) != len(session.turns):
            session = replace(session, turns=tuple(kept))
        return await self._call(session)

    async def _call(self, argument: ScoredTurn | ScoredSession) -> Score | None:
        result = self.function(argument)
        if inspect.isawaitable(result):
            result = await result
        return as_score(result, self.name)


def as_scorer(
    function: Callable[[Any], Any],
    *,
    name: str | None = None,
    version: str = "1",
    scope: Scope = "turn",
) -> CallableScorer:
    """A Python function as a scorer, without a scorers file (what a ``callable:`` entry
    makes): named ``name`` (default the function's name), judging each turn or, with
    ``scope="session"``, each session line.

    Raises:
        InvalidInput: ``function`` is not callable, the name is blank, or the scope is
            neither turn nor session.
    """
    if not callable(function):
        raise InvalidInput(f"a scorer is a function, not {type(function).__name__}")
    chosen = name if name is not None else getattr(function, "__name__", "")
    if not isinstance(chosen, str) or not chosen.strip() or "," in chosen:
        raise InvalidInput(f"scorer name {chosen!r}: give a non-blank name without commas")
    if scope not in ("turn", "session"):
        raise InvalidInput(f"scope must be turn or session, not {scope!r}")
    target = f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', chosen)}"
    return CallableScorer(chosen, str(version), scope, TurnFilter(), target, function)


def as_score(result: Any, name: str) -> Score | None:
    """What a scoring function returned, as a :class:`Score` (see the module docs).

    Raises:
        InvalidInput: It is none of the accepted forms, or its value is outside [0, 1].
    """
    if result is None:
        return None
    if isinstance(result, Score):
        score = result
    elif isinstance(result, int | float) and not isinstance(result, bool):
        score = Score(float(result), "pass" if result >= 0.5 else "fail", "")
    elif (
        isinstance(result, tuple)
        and len(result) == 3
        and isinstance(result[0], int | float)
        and not isinstance(result[0], bool)
        and isinstance(result[1], str)
        and isinstance(result[2], str)
    ):
        score = Score(float(result[0]), result[1], result[2])
    else:
        raise InvalidInput(
            f"scorer {name}: returned {type(result).__name__}; a scorer returns a Score, a "
            "number in [0, 1], (number, label, reason) or None"
        )
    if not (math.isfinite(score.value) and 0 <= score.value <= 1):
        raise InvalidInput(f"scorer {name}: returned the score {score.value}, outside [0, 1]")
    return score


def callable_scorer(common: Common, entry: Mapping[str, Any]) -> CallableScorer:
    """The scorer of an entry naming a function (``callable: package.module:function``).

    Raises:
        InvalidInput: The target is malformed, cannot be imported, or is not callable.
    """
    check_keys(entry, ("callable",), "callable")
    target = text(entry, "callable")
    module_name, colon, attribute = target.partition(":")
    if not colon or not module_name or not attribute:
        raise InvalidInput(f"callable {target!r} must be package.module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # whatever its import raises: one line, up front
        raise InvalidInput(f"callable {target!r}: cannot import {module_name}: {error}") from None
    function: Any = module
    for part in attribute.split("."):
        function = getattr(function, part, None)
    if not callable(function):
        raise InvalidInput(f"callable {target!r}: {module_name} has no function {attribute}")
    return CallableScorer(
        common.name, common.version, common.scope, common.filter, target, function
    )
