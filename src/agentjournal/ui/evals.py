"""What the viewer shows of eval runs: a session page's scores, a run's page, the runs.

:func:`session_scores_data` is what a session page adds (``data["scores"]``): each turn's
scores of the line shown, by turn number (a badge per score on the turn's user message:
score, label, scorer; a person's rating marked), and the line's session scores, each
naming its run. :func:`run_page` is one run's page (``/evals/{run_id}``): what
``EvalRunStarted`` recorded, its scorers, each session line's score and turn scores, its
completion; :func:`runs_page` the list of runs (``/evals``). The runs that scored a
session come from the catalog (:attr:`~agentjournal.read.catalog.SessionRow.eval_runs`).
Sealed content reads as the store it is given shows it. Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from agentjournal.errors import InvalidInput
from agentjournal.read.evals.runs import read_run
from agentjournal.read.evals.scores import SessionScores, session_scores

if TYPE_CHECKING:
    from agentjournal.store.contract import EventStore


def scores_data(scores: SessionScores, line: str) -> dict[str, Any]:
    """A session page's scores of ``line`` (pure): ``{"line", "turns": {turn: [badge]},
    "sessions": [score], "runs": [run id]}``; a badge: ``run``, ``scorer``, ``score``,
    ``label``, ``reason``, ``human``, ``by``."""
    turns: dict[str, list[dict[str, Any]]] = {}
    for turn, found in sorted(scores.turns(line).items()):
        turns[str(turn)] = [
            {
                "run": run,
                "scorer": row.scorer,
                "score": row.score,
                "label": row.label,
                "reason": row.reason,
                "human": row.human,
                "by": row.by,
            }
            for run, row in found
        ]
    return {
        "line": line,
        "turns": turns,
        "sessions": [
            {"run": run, "score": row.score, "label": row.label, "reason": row.reason}
            for run, row in scores.sessions(line)
        ],
        "runs": [run.run_id for run in scores.runs],
    }


async def session_scores_data(
    store: EventStore, session_id: str, runs: Sequence[str], *, line: str = "main"
) -> dict[str, Any]:
    """The scores a session page of ``line`` shows, from ``runs`` (see :func:`scores_data`).

    Raises:
        StoreUnavailable: The store could not be read.
    """
    found = await session_scores(store, session_id, runs=runs, lines=[line])
    return scores_data(found, line)


async def run_page(store: EventStore, run_id: str) -> dict[str, Any]:
    """One eval run's page data: ``kind`` ``eval_run`` and the run
    (:meth:`~agentjournal.read.evals.runs.EvalRunResult.as_dict`), its scores grouped by
    session line (``lines``: session, line, score, label, reason, its turn scores).

    Raises:
        InvalidInput: The store holds no such run.
        StoreUnavailable: The store could not be read.
    """
    run = await read_run(store, run_id)
    lines: dict[tuple[str, str], dict[str, Any]] = {}

    def line_of(session: str, line: str) -> dict[str, Any]:
        return lines.setdefault(
            (session, line),
            {
                "session": session,
                "line": line,
                "score": None,
                "label": "",
                "reason": "",
                "turns": [],
            },
        )

    for session, line in run.sessions:
        line_of(session, line)
    for turn in run.turns:
        line_of(turn.session, turn.line)["turns"].append(turn.as_dict())
    for scored in run.session_scores:
        entry = line_of(scored.session, scored.line)
        entry.update(score=scored.score, label=scored.label, reason=scored.reason)
        entry["by_scorer"] = dict(scored.by_scorer)
    return {
        "kind": "eval_run",
        "run_id": run.run_id,
        "run": run.as_dict(),
        "summary": run.summary(),
        "lines": list(lines.values()),
    }


async def runs_page(store: EventStore, run_ids: Iterable[str]) -> dict[str, Any]:
    """The list of eval runs (``kind`` ``eval_runs``): each run of ``run_ids`` in one row
    (:meth:`~agentjournal.read.evals.runs.EvalRunResult.summary`), newest started first.

    Raises:
        StoreUnavailable: The store could not be read.
    """
    rows = []
    for run_id in dict.fromkeys(run_ids):
        try:
            rows.append((await read_run(store, run_id)).summary())
        except InvalidInput:
            continue  # named by a score but not readable as a run: nothing to list
    rows.sort(key=lambda r: (r["started_at"] or "", r["run_id"]), reverse=True)
    return {"kind": "eval_runs", "runs": rows}
