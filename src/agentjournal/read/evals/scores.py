"""One session's scores from every eval run that scored it (what ``show``, the viewer and
``trace export`` put beside the session).

The runs that scored a session are the catalog's (:mod:`agentjournal.read.catalog`: it
folds every run's scores onto the session it names, so no run is read to find them);
each is then read whole (:func:`~agentjournal.read.evals.runs.read_run`) and kept to the
session's scores. Sealed content (a reason, a turn's input and output) is opened under
the key store given, ``[erased]`` after an erasure, ``[sealed]`` without the key.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from agentjournal._text import cut, printable
from agentjournal.errors import InvalidInput
from agentjournal.read.evals.runs import EvalRunResult, read_run

if TYPE_CHECKING:
    from agentjournal.read.evals.runs import SessionScoreRow, TurnScoreRow
    from agentjournal.shred.keys import SubjectKeyStore
    from agentjournal.store.contract import EventStore


@dataclass(frozen=True, slots=True)
class SessionScores:
    """A session's scores: each eval run that scored it (oldest first), holding only the
    session's own turn and session scores.

    Attributes:
        session: The session.
        runs: The runs, each :class:`~agentjournal.read.evals.runs.EvalRunResult` kept
            to this session's scores (its started facts and completion as they are).
    """

    session: str
    runs: tuple[EvalRunResult, ...] = ()

    def turns(self, line: str = "main") -> dict[int, list[tuple[str, TurnScoreRow]]]:
        """Turn number -> (run id, score) of ``line``, in run order then stream order."""
        out: dict[int, list[tuple[str, TurnScoreRow]]] = {}
        for run in self.runs:
            for turn in run.turns:
                if turn.line == line:
                    out.setdefault(turn.turn, []).append((run.run_id, turn))
        return out

    def sessions(self, line: str = "main") -> list[tuple[str, SessionScoreRow]]:
        """(run id, score) of each ``SessionScored`` of ``line``, in run order."""
        return [
            (run.run_id, scored)
            for run in self.runs
            for scored in run.session_scores
            if scored.line == line
        ]

    def as_dict(self) -> list[dict[str, Any]]:
        """The runs as JSON-ready data (``show --json``'s ``scores``)."""
        return [
            {
                "run_id": run.run_id,
                "kind": run.kind,
                "status": run.status,
                "human": run.human,
                "scorer": run.scorer,
                "started_at": run.started_at.isoformat() if run.started_at else None,
                "turns": [t.as_dict() for t in run.turns],
                "session_scores": [s.as_dict() for s in run.session_scores],
            }
            for run in self.runs
        ]


SCORES_HEADER = "eval scores"
"""The heading ``show`` prints the scores under."""

_REASON = 80


def score_lines(scores: SessionScores) -> list[str]:
    """The scores as ``show`` prints them (pure): a line per run (its id, kind, status,
    scorers), under it a line per score: the line, the turn (or ``session``), the scorer,
    the score, its label and its reason (cut); a person's rating names who gave it. Stored
    text is escaped (:func:`~agentjournal._text.printable`)."""
    out: list[str] = []
    for run in scores.runs:
        kind = run.kind or "eval"
        status = "ratings by people" if kind == "feedback" else run.status
        scorers = f", scorers {run.scorer}" if run.scorer and kind != "feedback" else ""
        out.append(printable(f"run {run.run_id} ({kind}, {status}{scorers})"))
        for turn in run.turns:
            who = f"rated by {turn.by or 'a person'}" if turn.human else turn.scorer
            out.append(
                printable(
                    f"  {turn.line} turn {turn.turn} · {who} {turn.score:.2f}"
                    + (f" {turn.label}" if turn.label else "")
                    + (f": {cut(turn.reason, _REASON)}" if turn.reason else "")
                )
            )
        for scored in run.session_scores:
            out.append(
                printable(
                    f"  {scored.line} session · {scored.score:.2f} {scored.label}"
                    + (f": {cut(scored.reason, _REASON)}" if scored.reason else "")
                )
            )
    return out


def kept_to(
    run: EvalRunResult, session_id: str, lines: Iterable[str] | None = None
) -> EvalRunResult:
    """``run`` with only the scores of ``session_id`` (of ``lines``, when given; pure)."""
    wanted = None if lines is None else set(lines)

    def ours(session: str, line: str) -> bool:
        return session == session_id and (wanted is None or line in wanted)

    return replace(
        run,
        turns=tuple(t for t in run.turns if ours(t.session, t.line)),
        session_scores=tuple(s for s in run.session_scores if ours(s.session, s.line)),
    )


async def scored_runs(store: EventStore, session_id: str) -> tuple[str, ...]:
    """The ids of the eval runs that scored ``session_id``, oldest first, from the
    catalog (brought up to date and saved as ``sessions`` does).

    Raises:
        StoreUnavailable: The store could not be read.
    """
    from agentjournal.read.catalog.listing import refresh

    listing = await refresh(store)
    row = next((r for r in listing.rows if r.session_id == session_id), None)
    return row.eval_runs if row is not None else ()


async def session_scores(
    store: EventStore,
    session_id: str,
    *,
    runs: Sequence[str] | None = None,
    keys: SubjectKeyStore | None = None,
    lines: Iterable[str] | None = None,
) -> SessionScores:
    """``session_id``'s scores from each run of ``runs`` (default: every run that scored
    it, :func:`scored_runs`), kept to ``lines`` when given.

    Raises:
        StoreUnavailable: The store could not be read.
    """
    if runs is None:
        runs = await scored_runs(store, session_id)
    found = []
    for run_id in runs:
        try:
            run = await read_run(store, run_id, keys=keys)
        except InvalidInput:
            continue  # named by a score, not readable now: nothing to show of it
        kept = kept_to(run, session_id, lines)
        if kept.turns or kept.session_scores:
            found.append(kept)
    return SessionScores(session_id, tuple(found))
