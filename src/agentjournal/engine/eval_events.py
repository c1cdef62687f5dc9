"""Eval run events as records and their data (pure): what ``EvalRunStarted``,
``TurnScored``, ``SessionScored`` and ``EvalRunCompleted`` say, encoded as the schema
package's ``to_json`` prints them, our own facts in ``extensions.agentjournal`` (SCHEMA.md,
"Eval runs"); their deterministic ids; the rules a score and a label keep.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import kurrent_agent_schema as schema
from google.protobuf.message import Message

from agentjournal.errors import InvalidInput

EXTENSION: Final = "agentjournal"
"""The key of our own facts in each eval event's ``extensions`` map."""

KINDS: Final = ("eval", "experiment", "feedback")
"""What an eval run is: scorers over recorded sessions, an experiment on forks, or the
ratings people gave a session."""

PASS_THRESHOLD: Final = 0.5
"""A session line's label is ``pass`` at or above this mean score, else ``fail``."""

BATCH: Final = 500
"""Events per append at most (a session's scores land together below this)."""

_IDS: Final = uuid.UUID("0b7c61f2-4d1e-5a8e-9c3b-6f2e1d4a7c90")


def event_id(run_id: str, *about: str | int) -> uuid.UUID:
    """The id of the eval run's event about ``about`` (``"started"``, ``"turn"`` with the
    session, line, turn and scorer, ...): the same for every attempt at the same event."""
    return uuid.uuid5(_IDS, _compact([run_id, *about]))


_compact: Final = json.JSONEncoder(separators=(",", ":")).encode


# -- the records a run writes ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JudgeUsage:
    """What a judge's model calls cost to score one turn or session.

    Attributes:
        model: The judge's model.
        requests: Model calls.
        input_tokens: Tokens in.
        output_tokens: Tokens out.
        total_tokens: Both.
        cost: US dollars, where the model's price is known.
    """

    model: str
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The usage as ``extensions.agentjournal.judge`` holds it."""
        found: dict[str, Any] = {
            "model": self.model,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cost is not None:
            found["cost"] = self.cost
        return found


@dataclass(frozen=True, slots=True)
class RunStart:
    """What ``EvalRunStarted`` records.

    Attributes:
        run_id: The run.
        kind: ``eval``, ``experiment`` or ``feedback``.
        sessions: The (session, line) pairs the run scores, in order.
        scorers: Each scorer's ``describe()``: ``name``, ``version``, ``kind`` and its
            other facts (``rubric_sha256``, ``model`` ...).
        criteria: The scorers file's digest, ``sha256:<hex>`` (empty: none).
        experiment: An experiment's facts (``candidate``, ``at_turn``, ``branch``).
    """

    run_id: str
    kind: str
    sessions: tuple[tuple[str, str], ...]
    scorers: tuple[Mapping[str, Any], ...]
    criteria: str = ""
    experiment: Mapping[str, Any] | None = None

    @property
    def session_id(self) -> str:
        """The one session the run covers, else ``""``."""
        found = {session for session, _ in self.sessions}
        return next(iter(found)) if len(found) == 1 else ""


@dataclass(frozen=True, slots=True)
class TurnScore:
    """What one ``TurnScored`` records: one scorer's score of one turn of a session line,
    or a person's rating (``human``).

    Attributes:
        session: The session.
        line: ``main`` or the branch's name.
        turn: The turn's number (the SDK's: 1 for the first user message).
        scorer: The scorer's name (``human`` for a person's rating).
        version: The scorer's version.
        value: The score, in [0, 1].
        label: A short word (``pass``, ``fail`` ...).
        reason: Why.
        input: The turn's user message.
        output: The turn's final answer.
        head: The ``aj.hash`` of the line's last event of the turn.
        human: A person's rating.
        by: Who rated it (a person's rating).
        judge: What judging it cost (an LLM judge).
        rating: A caller's id for a person's rating (its event id derives from it).
    """

    session: str
    line: str
    turn: int
    scorer: str
    version: str
    value: float
    label: str = ""
    reason: str = ""
    input: str = ""
    output: str = ""
    head: str = ""
    human: bool = False
    by: str | None = None
    judge: JudgeUsage | None = None
    rating: str | None = None


@dataclass(frozen=True, slots=True)
class SessionScore:
    """What one ``SessionScored`` records: a session line's score in the run.

    Attributes:
        session: The session.
        line: ``main`` or the branch's name.
        value: The mean of its turn scores and session-level scores.
        label: ``pass`` or ``fail`` (:data:`PASS_THRESHOLD`).
        reason: A short summary.
        by_scorer: Each scorer's mean over the line.
        turns: How many turns were scored.
        judge: What session-level judging cost.
    """

    session: str
    line: str
    value: float
    label: str
    reason: str = ""
    by_scorer: Mapping[str, float] = field(default_factory=dict)
    turns: int = 0
    judge: JudgeUsage | None = None


@dataclass(frozen=True, slots=True)
class RunTotals:
    """What ``EvalRunCompleted`` records.

    Attributes:
        session_id: As in ``EvalRunStarted``.
        turns_scored: ``TurnScored`` events of the run.
        average: Their mean score (0 without any).
        total_cost: What the judge cost, US dollars.
        by_scorer: Each scorer's mean.
        by_line: Each line's mean.
        judge: The judge's requests and tokens in all.
        sessions: Session lines scored.
    """

    session_id: str
    turns_scored: int
    average: float
    total_cost: float
    by_scorer: Mapping[str, float]
    by_line: Mapping[str, float]
    judge: Mapping[str, int]
    sessions: int


def checked_score(value: Any, what: str = "score") -> float:
    """``value`` as a score: a finite number in [0, 1].

    Raises:
        InvalidInput: It is not.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number in [0, 1], got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InvalidInput(f"{what} must be a number in [0, 1], got {value!r}")
    return number


def label_of(value: float) -> str:
    """``pass`` at or above :data:`PASS_THRESHOLD`, else ``fail``."""
    return "pass" if value >= PASS_THRESHOLD else "fail"


LABEL: Final = re.compile(r"[\w.:+-]{1,40}")
"""A score's label: one short word. Labels stay in the clear — never sealed, withheld from a
redacted bundle nor erased — so a label may carry no sentence of what was judged."""


def shown_label(label: str, value: float) -> str:
    """``label`` when it is one short word (:data:`LABEL`), else :func:`label_of` ``value``
    (a scorer's longer label, a judge's sentence: its reason, sealed with the session's
    content, says it)."""
    label = label.strip()
    return label if LABEL.fullmatch(label) else label_of(value)


# -- encoding (pure) ------------------------------------------------------------------


def _encoded(message: Message, facts: Mapping[str, Any]) -> bytes:
    extensions = message.extensions
    extensions[EXTENSION].update(_struct_ready(facts))
    text: str = schema.to_json(message)
    return text.encode()


def _struct_ready(value: Any) -> Any:
    """``value`` with None dropped from mappings and tuples as lists (a Struct holds JSON)."""
    if isinstance(value, Mapping):
        return {str(k): _struct_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_struct_ready(v) for v in value]
    return value


def started_data(start: RunStart, now: datetime) -> bytes:
    """``EvalRunStarted``'s data."""
    facts: dict[str, Any] = {
        "run_id": start.run_id,
        "kind": start.kind,
        "sessions": [{"session": s, "line": line} for s, line in start.sessions],
        "scorers": [dict(s) for s in start.scorers],
        "experiment": dict(start.experiment) if start.experiment is not None else None,
    }
    message = schema.EvalRunStarted(
        session_id=start.session_id,
        scorer=",".join(str(s.get("name", "")) for s in start.scorers),
        criteria=start.criteria,
        timestamp=now,
    )
    return _encoded(message, facts)


def turn_data(score: TurnScore, now: datetime) -> bytes:
    """``TurnScored``'s data."""
    facts: dict[str, Any] = {
        "scorer": score.scorer,
        "version": score.version,
        "line": score.line,
        "head": score.head,
        "human": score.human,
        "by": score.by,
        "judge": score.judge.as_dict() if score.judge is not None else None,
    }
    message = schema.TurnScored(
        session_id=score.session,
        turn_index=score.turn,
        input=score.input,
        output=score.output,
        score=score.value,
        score_label=score.label,
        reason=score.reason,
        timestamp=now,
    )
    return _encoded(message, facts)


def session_data(score: SessionScore, now: datetime) -> bytes:
    """``SessionScored``'s data."""
    facts: dict[str, Any] = {
        "line": score.line,
        "by_scorer": dict(score.by_scorer),
        "turns": score.turns,
        "judge": score.judge.as_dict() if score.judge is not None else None,
    }
    message = schema.SessionScored(
        session_id=score.session,
        score=score.value,
        score_label=score.label,
        reason=score.reason,
        timestamp=now,
    )
    return _encoded(message, facts)


def completed_data(totals: RunTotals, now: datetime) -> bytes:
    """``EvalRunCompleted``'s data."""
    facts: dict[str, Any] = {
        "by_scorer": dict(totals.by_scorer),
        "by_line": dict(totals.by_line),
        "judge": dict(totals.judge),
        "sessions": totals.sessions,
    }
    message = schema.EvalRunCompleted(
        session_id=totals.session_id,
        turns_scored=totals.turns_scored,
        average_score=totals.average,
        total_cost=totals.total_cost,
        timestamp=now,
    )
    return _encoded(message, facts)
