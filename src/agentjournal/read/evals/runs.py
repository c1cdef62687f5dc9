"""Eval runs read back: one ``EvalRun-{run_id}`` stream folded into an
:class:`EvalRunResult` (:func:`fold_run`, pure; :func:`read_run` reads it), every run of a
store (:func:`list_runs`), and the newest score of each session (:func:`latest_scores`).

Sealed content (a sealed session's scores' input, output and reason) is shown as the read
tools show it: opened under the key store given, ``[erased]`` after an erasure,
``[sealed]`` without the key; the scores are never sealed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Final

from agentjournal import events
from agentjournal.errors import InvalidInput, StreamNotFound
from agentjournal.ledger.chain import HASH_KEY
from agentjournal.read.catalog.scores import replaces_score
from agentjournal.shred.keys import MemoryKeyStore, SubjectKeyStore
from agentjournal.shred.sealing import OpeningStore, open_event
from agentjournal.store.contract import EventStore, RecordedEvent
from agentjournal.streams import EVAL_RUN_PREFIX, MAIN_BRANCH, eval_run_stream, validate_id

EXTENSION: Final = "agentjournal"
"""The key of agentjournal's facts in an eval event's ``extensions``."""


FEEDBACK_PREFIX: Final = "feedback-"
"""The run id prefix of a session's ratings by people (``EvalRun-feedback-{session}``)."""

_PAGE: Final = 2000


@dataclass(frozen=True, slots=True)
class TurnScoreRow:
    """One ``TurnScored``.

    Attributes:
        session: The session.
        line: ``main`` or the branch's name.
        turn: The turn's number.
        scorer: The scorer's name (``human`` for a person's rating).
        version: The scorer's version.
        score: In [0, 1].
        label: Its label.
        reason: Why (as shown: opened, ``[erased]`` or ``[sealed]``).
        input: The turn's user message (as shown).
        output: The turn's final answer (as shown).
        head: The ``aj.hash`` of the line's last event of the turn when it was scored.
        human: A person's rating.
        by: Who rated it (a person's rating).
        judge: What judging it cost (an LLM judge): model, requests, tokens, cost.
        revision: Its revision on the run's stream.
        recorded_at: When the store recorded it.
    """

    session: str
    line: str
    turn: int
    scorer: str
    version: str
    score: float
    label: str
    reason: str
    input: str
    output: str
    head: str
    human: bool
    by: str | None
    judge: Mapping[str, Any] | None
    revision: int
    recorded_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """The score as JSON-ready data."""
        return {
            "session": self.session,
            "line": self.line,
            "turn": self.turn,
            "scorer": self.scorer,
            "version": self.version,
            "score": self.score,
            "label": self.label,
            "reason": self.reason,
            "input": self.input,
            "output": self.output,
            "head": self.head,
            "human": self.human,
            "by": self.by,
            "judge": dict(self.judge) if self.judge is not None else None,
            "revision": self.revision,
            "recorded_at": self.recorded_at.isoformat() if self.recorded_at else None,
        }


@dataclass(frozen=True, slots=True)
class SessionScoreRow:
    """One ``SessionScored``: a session line's score in the run.

    Attributes:
        session: The session.
        line: ``main`` or the branch's name.
        score: The mean of its scores.
        label: ``pass`` or ``fail``.
        reason: A short summary (as shown).
        by_scorer: Each scorer's mean over the line.
        turns: How many turns were scored.
        revision: Its revision on the run's stream.
        recorded_at: When the store recorded it.
        judge: What its session-level judging cost, if a judge scored the whole line.
    """

    session: str
    line: str
    score: float
    label: str
    reason: str
    by_scorer: Mapping[str, float]
    turns: int
    revision: int
    recorded_at: datetime | None = None
    judge: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The score as JSON-ready data."""
        return {
            "session": self.session,
            "line": self.line,
            "score": self.score,
            "label": self.label,
            "reason": self.reason,
            "by_scorer": dict(self.by_scorer),
            "turns": self.turns,
            "revision": self.revision,
            "recorded_at": self.recorded_at.isoformat() if self.recorded_at else None,
            "judge": dict(self.judge) if self.judge is not None else None,
        }


@dataclass(frozen=True, slots=True)
class RunCompletion:
    """What ``EvalRunCompleted`` recorded.

    Attributes:
        turns_scored: ``TurnScored`` events of the run.
        average: Their mean score.
        total_cost: What the judge cost, US dollars.
        by_scorer: Each scorer's mean.
        by_line: Each line's mean.
        judge: The judge's requests and tokens.
        sessions: Session lines scored.
        revision: Its revision.
        recorded_at: When the store recorded it.
    """

    turns_scored: int
    average: float
    total_cost: float
    by_scorer: Mapping[str, float]
    by_line: Mapping[str, float]
    judge: Mapping[str, int]
    sessions: int
    revision: int
    recorded_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """The completion as JSON-ready data."""
        return {
            "turns_scored": self.turns_scored,
            "average": self.average,
            "total_cost": self.total_cost,
            "by_scorer": dict(self.by_scorer),
            "by_line": dict(self.by_line),
            "judge": dict(self.judge),
            "sessions": self.sessions,
            "revision": self.revision,
            "recorded_at": self.recorded_at.isoformat() if self.recorded_at else None,
        }


@dataclass(frozen=True, slots=True)
class EvalRunResult:
    """One eval run as its stream holds it.

    Attributes:
        run_id: The run.
        stream: ``EvalRun-{run_id}``.
        kind: ``eval``, ``experiment`` or ``feedback`` (empty: no ``EvalRunStarted``).
        session_id: The one session the run covers, else ``""``.
        scorer: The scorers' names, comma-separated (``EvalRunStarted.scorer``).
        criteria: The scorers file's digest (``sha256:<hex>``).
        sessions: The (session, line) pairs the run scores.
        scorers: Each scorer as the run recorded it (name, version, kind, ...).
        experiment: An experiment's facts (candidate, at_turn, branch).
        started_at: When ``EvalRunStarted`` was recorded.
        turns: Every ``TurnScored``, in stream order.
        session_scores: Every ``SessionScored``, in stream order.
        completion: ``EvalRunCompleted``'s facts (None: the run is open).
        head: The revision and ``aj.hash`` of the stream's last event.
    """

    run_id: str
    stream: str
    kind: str = ""
    session_id: str = ""
    scorer: str = ""
    criteria: str = ""
    sessions: tuple[tuple[str, str], ...] = ()
    scorers: tuple[Mapping[str, Any], ...] = ()
    experiment: Mapping[str, Any] | None = None
    started_at: datetime | None = None
    turns: tuple[TurnScoreRow, ...] = ()
    session_scores: tuple[SessionScoreRow, ...] = ()
    completion: RunCompletion | None = None
    head: tuple[int, str] = (-1, "")

    @property
    def completed(self) -> bool:
        """Whether the run wrote its ``EvalRunCompleted``."""
        return self.completion is not None

    @property
    def status(self) -> str:
        """``completed`` or ``open``."""
        return "completed" if self.completed else "open"

    @property
    def human(self) -> bool:
        """Whether the run holds people's ratings (a feedback run)."""
        return self.kind == "feedback" or any(t.human for t in self.turns)

    @property
    def average(self) -> float | None:
        """The mean of the run's turn scores (None: none)."""
        if not self.turns:
            return None
        return sum(t.score for t in self.turns) / len(self.turns)

    def as_dict(self) -> dict[str, Any]:
        """The run as JSON-ready data (what ``eval show --json`` prints)."""
        return {
            "run_id": self.run_id,
            "stream": self.stream,
            "kind": self.kind,
            "status": self.status,
            "human": self.human,
            "session_id": self.session_id,
            "scorer": self.scorer,
            "criteria": self.criteria,
            "sessions": [{"session": s, "line": line} for s, line in self.sessions],
            "scorers": [dict(s) for s in self.scorers],
            "experiment": dict(self.experiment) if self.experiment is not None else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "turns": [t.as_dict() for t in self.turns],
            "session_scores": [s.as_dict() for s in self.session_scores],
            "completion": self.completion.as_dict() if self.completion else None,
            "head": {"revision": self.head[0], "hash": self.head[1]},
        }

    def summary(self) -> dict[str, Any]:
        """The run in one row (what ``eval list --json`` prints)."""
        completion = self.completion
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "status": self.status,
            "human": self.human,
            "scorer": self.scorer,
            "sessions": len(self.sessions),
            "turns_scored": len(self.turns),
            "average": completion.average if completion is not None else self.average,
            "total_cost": completion.total_cost if completion is not None else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
        }


@dataclass(frozen=True, slots=True)
class LatestScore:
    """A session's newest scores across eval runs.

    Attributes:
        session: The session.
        score: The newest ``SessionScored`` score of its main line or any line (None: no
            eval run scored it).
        label: That score's label.
        run_id: The run that scored it.
        line: The line scored.
        human: The newest person's rating of any of its turns (None: none).
        human_label: That rating's label.
        human_by: Who gave it.
    """

    session: str
    score: float | None = None
    label: str | None = None
    run_id: str | None = None
    line: str | None = None
    human: float | None = None
    human_label: str | None = None
    human_by: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The scores as JSON-ready data."""
        return {
            "session": self.session,
            "score": self.score,
            "label": self.label,
            "run_id": self.run_id,
            "line": self.line,
            "human": self.human,
            "human_label": self.human_label,
            "human_by": self.human_by,
        }


# -- the fold (pure) ------------------------------------------------------------------


def _facts(body: Mapping[str, Any]) -> dict[str, Any]:
    extensions = body.get("extensions")
    found = extensions.get(EXTENSION) if isinstance(extensions, Mapping) else None
    return dict(found) if isinstance(found, Mapping) else {}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def _means(value: Any) -> dict[str, float]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): _number(v) for k, v in value.items()}


def _body(event: RecordedEvent) -> dict[str, Any]:
    try:
        body = json.loads(event.data)
    except ValueError:
        raise InvalidInput(
            f"{event.stream}@{event.revision}: {event.type} data is not JSON"
        ) from None
    if not isinstance(body, dict):
        raise InvalidInput(f"{event.stream}@{event.revision}: {event.type} data is not an object")
    return body


def turn_row(event: RecordedEvent) -> TurnScoreRow:
    """A ``TurnScored`` event as a row.

    Raises:
        InvalidInput: Its data is not a JSON object.
    """
    body = _body(event)
    facts = _facts(body)
    judge = facts.get("judge")
    by = facts.get("by")
    return TurnScoreRow(
        session=_text(body.get("session_id")),
        line=_text(facts.get("line")) or "main",
        turn=_count(body.get("turn_index")),
        scorer=_text(facts.get("scorer")),
        version=_text(facts.get("version")),
        score=_number(body.get("score")),
        label=_text(body.get("score_label")),
        reason=_text(body.get("reason")),
        input=_text(body.get("input")),
        output=_text(body.get("output")),
        head=_text(facts.get("head")),
        human=facts.get("human") is True,
        by=by if isinstance(by, str) else None,
        judge=dict(judge) if isinstance(judge, Mapping) else None,
        revision=event.revision,
        recorded_at=event.recorded_at,
    )


def session_row(event: RecordedEvent) -> SessionScoreRow:
    """A ``SessionScored`` event as a row.

    Raises:
        InvalidInput: Its data is not a JSON object.
    """
    body = _body(event)
    facts = _facts(body)
    judge = facts.get("judge")
    return SessionScoreRow(
        session=_text(body.get("session_id")),
        line=_text(facts.get("line")) or "main",
        score=_number(body.get("score")),
        label=_text(body.get("score_label")),
        reason=_text(body.get("reason")),
        by_scorer=_means(facts.get("by_scorer")),
        turns=_count(facts.get("turns")),
        revision=event.revision,
        recorded_at=event.recorded_at,
        judge=dict(judge) if isinstance(judge, Mapping) else None,
    )


def completion_row(event: RecordedEvent) -> RunCompletion:
    """An ``EvalRunCompleted`` event as its facts.

    Raises:
        InvalidInput: Its data is not a JSON object.
    """
    body = _body(event)
    facts = _facts(body)
    judge = facts.get("judge")
    return RunCompletion(
        turns_scored=_count(body.get("turns_scored")),
        average=_number(body.get("average_score")),
        total_cost=_number(body.get("total_cost")),
        by_scorer=_means(facts.get("by_scorer")),
        by_line=_means(facts.get("by_line")),
        judge={str(k): _count(v) for k, v in judge.items()} if isinstance(judge, Mapping) else {},
        sessions=_count(facts.get("sessions")),
        revision=event.revision,
        recorded_at=event.recorded_at,
    )


def completed_with(run: EvalRunResult, event: RecordedEvent) -> EvalRunResult:
    """``run`` with its ``EvalRunCompleted`` ``event`` folded in (the stream's next event)."""
    return replace(
        run,
        completion=completion_row(event),
        head=(event.revision, event.metadata.get(HASH_KEY, "")),
    )


def fold_run(run_id: str, stream: Sequence[RecordedEvent]) -> EvalRunResult:
    """The run ``run_id`` from its stream's events, oldest first (their sealed content
    already opened or marked as it is to be shown).

    Raises:
        InvalidInput: An eval event's data is not a JSON object.
    """
    started: dict[str, Any] = {}
    turns: list[TurnScoreRow] = []
    sessions: list[SessionScoreRow] = []
    completion: RunCompletion | None = None
    head = (-1, "")
    for event in stream:
        head = (event.revision, event.metadata.get(HASH_KEY, ""))
        if event.type == events.EVAL_RUN_STARTED and not started:
            body = _body(event)
            started = {"body": body, "facts": _facts(body), "at": event.recorded_at}
        elif event.type == events.TURN_SCORED:
            turns.append(turn_row(event))
        elif event.type == events.SESSION_SCORED:
            sessions.append(session_row(event))
        elif event.type == events.EVAL_RUN_COMPLETED and completion is None:
            completion = completion_row(event)
    base = EvalRunResult(
        run_id,
        eval_run_stream(run_id),
        turns=tuple(turns),
        session_scores=tuple(sessions),
        completion=completion,
        head=head,
    )
    if not started:
        return base
    body, facts = started["body"], started["facts"]
    targets = facts.get("sessions")
    scorers = facts.get("scorers")
    experiment = facts.get("experiment")
    return EvalRunResult(
        run_id,
        base.stream,
        kind=_text(facts.get("kind")),
        session_id=_text(body.get("session_id")),
        scorer=_text(body.get("scorer")),
        criteria=_text(body.get("criteria")),
        sessions=tuple(
            (_text(t.get("session")), _text(t.get("line")) or "main")
            for t in (targets if isinstance(targets, list) else [])
            if isinstance(t, Mapping)
        ),
        scorers=tuple(
            dict(s)
            for s in (scorers if isinstance(scorers, list) else [])
            if isinstance(s, Mapping)
        ),
        experiment=dict(experiment) if isinstance(experiment, Mapping) else None,
        started_at=started["at"],
        turns=base.turns,
        session_scores=base.session_scores,
        completion=completion,
        head=head,
    )


# -- reading --------------------------------------------------------------------------


def _shown(store: EventStore, keys: SubjectKeyStore | None) -> EventStore:
    """``store`` with sealed content opened under ``keys`` (or marked ``[sealed]``)."""
    return OpeningStore(store, keys if keys is not None else MemoryKeyStore(), shown=True)


async def run_events(
    store: EventStore,
    run_id: str,
    *,
    keys: SubjectKeyStore | None = None,
    after: int = 0,
) -> list[RecordedEvent]:
    """The events of the eval run ``run_id`` from revision ``after`` on, their sealed
    content shown (see the module docs); none when the run has no stream.

    Raises:
        InvalidInput: ``run_id`` is malformed.
        StoreError: The store could not be read.
    """
    stream = eval_run_stream(validate_id(run_id, "eval run id"))
    shown = _shown(store, keys)
    found: list[RecordedEvent] = []
    while True:
        try:
            page = await shown.read(stream, from_revision=after + len(found), limit=_PAGE)
        except StreamNotFound:
            return found
        found.extend(page)
        if len(page) < _PAGE:
            return found


async def read_run(
    store: EventStore, run_id: str, *, keys: SubjectKeyStore | None = None
) -> EvalRunResult:
    """The eval run ``run_id`` as its stream holds it.

    Raises:
        InvalidInput: ``run_id`` is malformed, or the store holds no such run.
        StoreError: The store could not be read.
    """
    run_id = validate_id(run_id, "eval run id")
    found = await run_events(store, run_id, keys=keys)
    if not found:
        raise InvalidInput(f"no eval run {run_id!r} in the store: check the id")
    return fold_run(run_id, found)


async def _run_events(
    store: EventStore, keys: SubjectKeyStore | None
) -> dict[str, list[RecordedEvent]]:
    """Every eval run's events by run id, in the store's global order (one pass over it)."""
    opening = keys if keys is not None else MemoryKeyStore()
    runs: dict[str, list[RecordedEvent]] = {}
    last: int | None = None
    while True:
        page = await store.read_all(from_position=last or 0, limit=_PAGE)
        fresh = [e for e in page if last is None or e.position > last]
        for event in fresh:
            if event.stream.startswith(EVAL_RUN_PREFIX) and event.type in events.EVAL_EVENTS:
                opened = open_event(event, opening, shown=True)
                runs.setdefault(event.stream[len(EVAL_RUN_PREFIX) :], []).append(opened)
        if len(page) < _PAGE or not fresh:
            return runs
        last = fresh[-1].position


async def list_runs(
    store: EventStore, *, keys: SubjectKeyStore | None = None
) -> list[EvalRunResult]:
    """Every eval run of ``store``, newest started first (one pass over the global order).

    Raises:
        StoreError: The store could not be read.
    """
    runs = [fold_run(run_id, found) for run_id, found in (await _run_events(store, keys)).items()]
    return sorted(runs, key=lambda r: r.started_at.timestamp() if r.started_at else 0, reverse=True)


def latest_of(runs: Mapping[str, Sequence[RecordedEvent]]) -> dict[str, LatestScore]:
    """Per session, its newest scores among ``runs``' events (see :func:`latest_scores`;
    pure). Events in the store's global order per run; the newest by position wins, a
    main-line score over any branch's (:func:`~agentjournal.read.catalog.scores.replaces_score`)."""
    best: dict[str, tuple[int, SessionScoreRow, str]] = {}
    rated: dict[str, tuple[int, TurnScoreRow]] = {}
    for run_id, found in runs.items():
        for event in found:
            order = event.position if event.position is not None else event.revision
            if event.type == events.SESSION_SCORED:
                row = session_row(event)
                held = best.get(row.session)
                if row.session and (
                    held is None
                    or (held[0] < order and replaces_score(row.line, held[1].line))
                    or (row.line == MAIN_BRANCH and held[1].line != MAIN_BRANCH)
                ):
                    best[row.session] = (order, row, run_id)
            elif event.type == events.TURN_SCORED:
                body = _body(event)
                if _facts(body).get("human") is True:
                    turn = turn_row(event)
                    if turn.session and (
                        turn.session not in rated or rated[turn.session][0] < order
                    ):
                        rated[turn.session] = (order, turn)
    latest: dict[str, LatestScore] = {}
    for session in sorted(set(best) | set(rated)):
        scored = best.get(session)
        person = rated.get(session)
        latest[session] = LatestScore(
            session,
            score=scored[1].score if scored else None,
            label=scored[1].label if scored else None,
            run_id=scored[2] if scored else None,
            line=scored[1].line if scored else None,
            human=person[1].score if person else None,
            human_label=person[1].label if person else None,
            human_by=person[1].by if person else None,
        )
    return latest


async def latest_scores(
    store: EventStore, *, keys: SubjectKeyStore | None = None
) -> dict[str, LatestScore]:
    """Per session, the newest ``SessionScored`` of its main line in any eval run (of a
    branch while the main line has none) and the newest person's rating of any of its turns
    (one pass over the global order).

    Raises:
        StoreError: The store could not be read.
    """
    return latest_of(await _run_events(store, keys))
