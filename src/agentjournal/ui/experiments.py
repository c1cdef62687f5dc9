"""An experiment in the viewer: its sessions with both lines' scores, and the scores the
Compare tab shows beside two lines.

An experiment is an eval run of kind ``experiment`` (``agentjournal experiment``): its id
is its branches' name, and its stream holds the scores of each session's main line and
branch. Read through :mod:`agentjournal.read.evals` only; nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentjournal.errors import InvalidInput
from agentjournal.streams import MAIN_BRANCH

if TYPE_CHECKING:
    from agentjournal.read.evals.runs import EvalRunResult
    from agentjournal.store.contract import EventStore


async def line_scores(store: EventStore, session_id: str, a: str, b: str) -> dict[str, Any] | None:
    """The scores of lines ``a`` and ``b`` of a session in the experiment one of them is the
    branch of (its eval run's id is the branch's name), or None when neither is:
    ``{"run_id", "candidate", "at_turn", "lines": {line: {"score", "label", "by_scorer",
    "turns": {turn: {scorer: score}}}}, "changed_turns": [turn, ...]}``."""
    for name in (b, a):
        if name == MAIN_BRANCH:
            continue
        run = await _experiment(store, name)
        if run is None or not any(s == session_id for s, _ in run.sessions):
            continue
        lines = {line: _line(run, session_id, line) for line in (a, b)}
        turns = sorted(set(lines[a]["turns"]) | set(lines[b]["turns"]))
        changed = [t for t in turns if lines[a]["turns"].get(t) != lines[b]["turns"].get(t)]
        return {
            "run_id": run.run_id,
            "candidate": str((run.experiment or {}).get("candidate", "")),
            "at_turn": (run.experiment or {}).get("at_turn"),
            "lines": lines,
            "changed_turns": changed,
        }
    return None


async def experiment_page(store: EventStore, run_id: str) -> dict[str, Any]:
    """The experiment page's data (``kind`` ``experiment``): each session with its main
    line's and branch's scores, the difference, the turns whose scores differ, and a link
    to the session's Compare tab; the totals by line and by scorer.

    Raises:
        InvalidInput: No such run, or it is not an experiment.
        StoreError: The store could not be read.
    """
    run = await _experiment(store, run_id)
    if run is None:
        raise InvalidInput(f"no experiment {run_id!r} in this store")
    facts: Mapping[str, Any] = run.experiment or {}
    branch = str(facts.get("branch") or run.run_id)
    rows = []
    for session in dict.fromkeys(s for s, _ in run.sessions):
        main, tried = _line(run, session, MAIN_BRANCH), _line(run, session, branch)
        turns = sorted(set(main["turns"]) | set(tried["turns"]))
        delta = (
            tried["score"] - main["score"]
            if tried["score"] is not None and main["score"] is not None
            else None
        )
        rows.append(
            {
                "session": session,
                "main": main,
                "candidate": tried,
                "delta": delta,
                "changed_turns": [
                    t for t in turns if main["turns"].get(t) != tried["turns"].get(t)
                ],
                "compare": f"/sessions/{session}?branch={branch}&tab=compare",
            }
        )
    completion = run.completion
    return {
        "kind": "experiment",
        "run_id": run.run_id,
        "candidate": str(facts.get("candidate", "")),
        "at_turn": facts.get("at_turn"),
        "branch": branch,
        "scorers": [dict(s) for s in run.scorers],
        "complete": completion is not None,
        "by_line": dict(completion.by_line) if completion is not None else {},
        "by_scorer": dict(completion.by_scorer) if completion is not None else {},
        "sessions": rows,
    }


async def _experiment(store: EventStore, run_id: str) -> EvalRunResult | None:
    """The experiment run ``run_id``, or None (no such run, not an experiment, or a name
    that is no run id)."""
    from agentjournal.read.evals.runs import read_run

    try:
        run = await read_run(store, run_id)
    except InvalidInput:
        return None
    return run if run.kind == "experiment" else None


def _line(run: EvalRunResult, session: str, line: str) -> dict[str, Any]:
    """One line's scores in ``run``: its session score and label, by scorer, by turn."""
    turns: dict[int, dict[str, float]] = {}
    for row in run.turns:
        if row.session == session and row.line == line:
            turns.setdefault(row.turn, {})[row.scorer] = row.score
    whole = next((s for s in run.session_scores if s.session == session and s.line == line), None)
    return {
        "line": line,
        "score": whole.score if whole is not None else None,
        "label": whole.label if whole is not None else None,
        "by_scorer": dict(whole.by_scorer) if whole is not None else {},
        "turns": {t: dict(sorted(s.items())) for t, s in sorted(turns.items())},
    }
