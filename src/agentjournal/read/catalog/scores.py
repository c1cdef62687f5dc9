"""The catalog's eval columns: each session's latest score and newest human rating (pure).

An eval run's stream (``EvalRun-{run_id}``) belongs to no session tree, and may score
several sessions; each of its ``SessionScored`` and ``TurnScored`` names the session it
scores (``session_id``). The catalog folds those two types only, in the global order, onto
the scored session's row: the newest ``SessionScored`` is the session's latest score,
the newest ``TurnScored`` a person gave (``extensions.agentjournal.human``) its newest
rating, and every run that scored it is remembered (oldest first), so a reader finds a
session's runs without reading every run. Only the cleartext fields are read (session,
turn, score, label, line, scorer, who): a sealed reason stays sealed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from agentjournal import events
from agentjournal._fastjson import loads_bytes
from agentjournal.read.catalog.rows import ScoreMark
from agentjournal.streams import EVAL_RUN_PREFIX, MAIN_BRANCH

if TYPE_CHECKING:
    from agentjournal.store.contract import RecordedEvent

"""What every eval run's stream name begins with (``EvalRun-``)."""

SCORE_TYPES: Final = frozenset({events.TURN_SCORED, events.SESSION_SCORED})
"""The event types the catalog folds from eval runs."""


def run_of(stream: str) -> str | None:
    """The run id of an eval run's stream name (None: not one)."""
    return stream[len(EVAL_RUN_PREFIX) :] if stream.startswith(EVAL_RUN_PREFIX) else None


def _body(event: RecordedEvent) -> dict[str, Any] | None:
    if event.type not in SCORE_TYPES or not event.stream.startswith(EVAL_RUN_PREFIX):
        return None
    try:
        body = loads_bytes(event.data)  # json.loads's value, through orjson where the same
    except ValueError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("session_id"), str):
        return None
    return body if body["session_id"] else None


def scored_session(event: RecordedEvent) -> str | None:
    """The session a score event (``TurnScored``, ``SessionScored`` on an eval run's
    stream) scores; None for any other event."""
    body = _body(event)
    return None if body is None else str(body["session_id"])


def replaces_score(line: str, held: str | None) -> bool:
    """Whether a newer session score of ``line`` replaces the one of line ``held`` (None:
    none held) as a session's latest: the main line's score stands for the session, so a
    branch's (an experiment's candidate) replaces only another branch's."""
    return held is None or line == MAIN_BRANCH or held != MAIN_BRANCH


def fold_score(
    sessions: dict[str, dict[str, Any]],
    event: RecordedEvent,
    new_row: Callable[[], dict[str, Any]],
) -> bool:
    """Fold one event onto the row of the session it scores (made with ``new_row`` when
    there is none yet); whether it was a score event."""
    body = _body(event)
    if body is None:
        return False
    row = sessions.get(body["session_id"])
    if row is None:
        row = sessions[body["session_id"]] = new_row()
    run = str(run_of(event.stream))
    ours = body.get("extensions", {}).get("agentjournal", {})
    ours = ours if isinstance(ours, dict) else {}
    mark = [
        run,
        float(body.get("score", 0.0)),
        str(body.get("score_label", "")),
        str(ours.get("line") or "main"),
        int(event.recorded_at.timestamp() * 1_000_000),
    ]
    runs = row.setdefault("evals", [])
    if run not in runs:
        runs.append(run)
    if event.type == events.SESSION_SCORED:
        held = row.get("score")
        if replaces_score(str(mark[3]), None if held is None else str(held[3])):
            row["score"] = mark
    elif ours.get("human") is True:
        by = ours.get("by")
        row["rated"] = [
            *mark,
            int(body.get("turn_index", 0)),
            str(ours.get("scorer") or "human"),
            by if isinstance(by, str) else None,
        ]
    return True


def score_marks(row: Mapping[str, Any]) -> tuple[ScoreMark | None, ScoreMark | None]:
    """A folded row's latest score and newest human rating (None where there is none)."""
    return _mark(row.get("score")), _mark(row.get("rated"))


def _mark(saved: Any) -> ScoreMark | None:
    if not saved:
        return None
    run, score, label, line, micros, *rated = saved
    at = datetime.fromtimestamp(micros / 1_000_000, UTC)
    if not rated:
        return ScoreMark(run=run, score=score, label=label, line=line, at=at)
    turn, scorer, by = rated
    return ScoreMark(
        run=run, score=score, label=label, line=line, at=at, turn=turn, scorer=scorer, by=by
    )
