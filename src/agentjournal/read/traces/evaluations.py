"""Eval scores as evaluation events on the spans they judge (pure, no I/O).

Each ``TurnScored`` becomes a ``gen_ai.evaluation.result`` span event (the OpenTelemetry
GenAI semantic conventions) on the run span of the turn it scores: the run of the turn's
line whose time holds the turn's user message (the item event carrying ``aj.turn``). A
session has no span of its own, so each ``SessionScored`` goes on its line's first run
span, the root of the line's first trace. The event says:

- ``gen_ai.evaluation.name``: the scorer (``session`` for a session's score);
- ``gen_ai.evaluation.score.value`` and ``gen_ai.evaluation.score.label``;
- ``gen_ai.evaluation.explanation``: the reason, only when it is stored in the clear: a
  sealed reason is content, and a trace carries none (it reads ``[sealed]`` here, as it
  does without the subject's key, and is withheld);
- ``agentjournal.eval_run``, ``agentjournal.turn``, ``agentjournal.line`` and, for a
  person's rating, ``agentjournal.human`` and ``agentjournal.rated_by``.

Its time is when the store recorded the score, so exporting the same events twice gives
the same spans. A score whose span is not exported (another line, a run not projected)
is left out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Final, Protocol

from agentjournal import events
from agentjournal.errors import InvalidInput
from agentjournal.read.traces.ids import ns
from agentjournal.read.traces.spans import Attribute, ProjectedSpan, SpanEvent
from agentjournal.read.traces.state import BRANCH_PREFIX, SESSION_PREFIX
from agentjournal.shred.fields import ERASED, SEALED, UNOPENABLE
from agentjournal.shred.keys import MemoryKeyStore
from agentjournal.shred.sealing import open_event
from agentjournal.streams import EVAL_RUN_PREFIX, MAIN_BRANCH, session_stream

if TYPE_CHECKING:
    from agentjournal.read.evals.runs import EvalRunResult
    from agentjournal.store.contract import RecordedEvent

EVALUATION_EVENT: Final = "gen_ai.evaluation.result"
"""The semantic conventions' name of an evaluation's span event."""
EVALUATION_NAME: Final = "gen_ai.evaluation.name"
SCORE_VALUE: Final = "gen_ai.evaluation.score.value"
SCORE_LABEL: Final = "gen_ai.evaluation.score.label"
EXPLANATION: Final = "gen_ai.evaluation.explanation"
SESSION_EVALUATION: Final = "session"
"""The evaluation name of a session line's score (the mean of its scores)."""

_WITHHELD: Final = frozenset({SEALED, ERASED, UNOPENABLE})
_TOP_PREFIXES: Final = (SESSION_PREFIX, BRANCH_PREFIX)
"""How a line's top stream is named (:func:`_top`): a session's, or a branch's."""

TurnMarks = dict[str, list[tuple[int, int]]]
"""A line's top stream -> (turn, ns) of each user message that opened a turn on it."""


class Placed(Protocol):
    """What :func:`turn_marks` reads of an event: a stored event or a record."""

    @property
    def stream(self) -> str: ...
    @property
    def metadata(self) -> Mapping[str, str]: ...
    @property
    def recorded_at(self) -> datetime | None: ...


def turn_marks(found: Iterable[Placed], marks: TurnMarks | None = None) -> TurnMarks:
    """Add each turn-opening item of ``found`` to ``marks`` (a new map when None): its
    stream, its ``aj.turn`` and when it was recorded."""
    out: TurnMarks = {} if marks is None else marks
    for event in found:
        turn = events.turn_of(event.metadata)
        if turn is not None and event.recorded_at is not None:
            out.setdefault(event.stream, []).append((turn, ns(event.recorded_at)))
    return out


class Evaluations:
    """What :func:`with_evaluations` needs, collected from a pass over the global order
    (``trace export --all``): hand it every event (:meth:`see`), then the spans
    (:meth:`on`). A run's sealed reason reads ``[sealed]`` (no keys: a trace carries no
    content)."""

    def __init__(self) -> None:
        self.marks: TurnMarks = {}
        self._runs: dict[str, list[RecordedEvent]] = {}
        self._unkeyed = MemoryKeyStore()

    def see(self, event: RecordedEvent) -> None:
        """Note ``event``: a turn's opening on a line's top stream, or an eval run's event.
        (A turn is found by its line's top stream, the stream of a run span's line: a mark
        on another stream places nothing, and its event's metadata need not be read.)"""
        stream = event.stream
        if stream.startswith(EVAL_RUN_PREFIX):
            opened = open_event(event, self._unkeyed, shown=True)
            self._runs.setdefault(stream[len(EVAL_RUN_PREFIX) :], []).append(opened)
        elif stream.startswith(_TOP_PREFIXES):
            try:
                marked = events.TURN_KEY in event.metadata
            except (TypeError, ValueError):  # damaged: reported where it is projected
                return
            if marked:
                turn_marks((event,), self.marks)

    def on(self, spans: Sequence[ProjectedSpan]) -> list[ProjectedSpan]:
        """``spans`` with the evaluation events of every run seen (see
        :func:`with_evaluations`)."""
        runs = []
        if self._runs:  # imported only where there are eval runs (with the catalog)
            from agentjournal.read.evals.runs import fold_run

            for run_id, found in self._runs.items():
                with contextlib.suppress(InvalidInput):  # not an eval run agentjournal wrote
                    runs.append(fold_run(run_id, found))
        return with_evaluations(spans, self.marks, scores_of(runs))


def _top(span: ProjectedSpan) -> str | None:
    """A run span's line: its top stream (a branch's, else the session's)."""
    branch = span.attributes.get("agentjournal.branch_stream")
    if isinstance(branch, str):
        return branch
    session = span.attributes.get("agentjournal.session_id")
    return session_stream(session) if isinstance(session, str) else None


def _line_of(span: ProjectedSpan) -> tuple[str, str] | None:
    session = span.attributes.get("agentjournal.session_id")
    if not isinstance(session, str):
        return None
    branch = span.attributes.get("agentjournal.branch")
    return session, branch if isinstance(branch, str) else MAIN_BRANCH


@dataclass(frozen=True, slots=True)
class Scored:
    """One score to put on a span (what :func:`with_evaluations` takes).

    Attributes:
        run: The eval run.
        session: The session scored.
        line: Its line (``main`` or a branch's name).
        turn: The turn scored; None: the session line's score.
        name: The scorer (``session`` for a session line's score).
        score: The score, 0 to 1.
        label: Its label (empty: none).
        reason: Its reason as read without keys (``[sealed]`` when sealed).
        at: When the store recorded it.
        revision: Its revision on the run's stream (orders scores of one moment).
        human: A person's rating.
        by: Who gave it.
    """

    run: str
    session: str
    line: str
    turn: int | None
    name: str
    score: float
    label: str
    reason: str
    at: datetime | None
    revision: int
    human: bool = False
    by: str | None = None

    def event(self) -> SpanEvent:
        """The score as a ``gen_ai.evaluation.result`` span event."""
        attributes: dict[str, Attribute] = {
            EVALUATION_NAME: self.name,
            SCORE_VALUE: float(self.score),
        }
        if self.label:
            attributes[SCORE_LABEL] = self.label
        if self.reason and self.reason not in _WITHHELD:
            attributes[EXPLANATION] = self.reason
        attributes["agentjournal.eval_run"] = self.run
        attributes["agentjournal.line"] = self.line
        if self.turn is not None:
            attributes["agentjournal.turn"] = self.turn
        if self.human:
            attributes["agentjournal.human"] = True
            if self.by:
                attributes["agentjournal.rated_by"] = self.by
        return SpanEvent(EVALUATION_EVENT, ns(self.at), attributes)


def scores_of(runs: Iterable[EvalRunResult]) -> list[Scored]:
    """Every turn and session score of ``runs``, read back
    (:func:`~agentjournal.read.evals.runs.fold_run`)."""
    out: list[Scored] = []
    for run in runs:
        for turn in run.turns:
            out.append(
                Scored(
                    run=run.run_id,
                    session=turn.session,
                    line=turn.line,
                    turn=turn.turn,
                    name=turn.scorer or ("human" if turn.human else "score"),
                    score=turn.score,
                    label=turn.label,
                    reason=turn.reason,
                    at=turn.recorded_at,
                    revision=turn.revision,
                    human=turn.human,
                    by=turn.by,
                )
            )
        for scored in run.session_scores:
            out.append(
                Scored(
                    run=run.run_id,
                    session=scored.session,
                    line=scored.line,
                    turn=None,
                    name=SESSION_EVALUATION,
                    score=scored.score,
                    label=scored.label,
                    reason=scored.reason,
                    at=scored.recorded_at,
                    revision=scored.revision,
                )
            )
    return out


def with_evaluations(
    spans: Sequence[ProjectedSpan],
    marks: Mapping[str, Sequence[tuple[int, int]]],
    scores: Iterable[Scored],
) -> list[ProjectedSpan]:
    """``spans`` (in their order), each run span with the evaluation events of the scores
    it is the span of (see the module docs) after its own events."""
    runs: dict[str, list[int]] = {}  # a line's top stream -> its run spans' indexes
    tops: dict[tuple[str, str], str] = {}  # (session, line) -> its top stream
    for index, span in enumerate(spans):
        if span.parent_id is not None:
            continue
        top, line = _top(span), _line_of(span)
        if top is None or line is None:
            continue
        runs.setdefault(top, []).append(index)
        tops.setdefault(line, top)
    for indexes in runs.values():
        indexes.sort(key=lambda i: (spans[i].start_ns, spans[i].end_ns))
    turns: dict[tuple[str, int], int] = {}  # (top stream, turn) -> its run span's index
    for top, opened in marks.items():
        for turn, moment in opened:
            held = _holding(spans, runs.get(top, ()), moment)
            if held is not None:
                turns.setdefault((top, turn), held)
    added: dict[int, list[tuple[int, str, int, SpanEvent]]] = {}
    for score in scores:
        top_of_line = tops.get((score.session, score.line))
        if top_of_line is None:
            continue
        if score.turn is None:
            target = runs[top_of_line][0] if runs.get(top_of_line) else None
        else:
            target = turns.get((top_of_line, score.turn))
        if target is not None:
            event = score.event()
            added.setdefault(target, []).append((event.time_ns, score.run, score.revision, event))
    out = list(spans)
    for index, found in added.items():
        found.sort(key=lambda f: f[:3])
        out[index] = replace(out[index], events=(*out[index].events, *(f[3] for f in found)))
    return out


def _holding(spans: Sequence[ProjectedSpan], indexes: Sequence[int], moment: int) -> int | None:
    """The run span of ``indexes`` (by start) whose time holds ``moment``; else the last
    that started before it."""
    before = None
    for index in indexes:
        span = spans[index]
        if span.start_ns <= moment <= span.end_ns:
            return index
        if span.start_ns <= moment:
            before = index
    return before
