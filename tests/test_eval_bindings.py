"""``verify --eval`` in the store reads each score's turn back: a score binds to the exact
record it judged (the ``aj.hash`` of its turn's last event), so the same run beside another
recording of the session under the same id says which scores judged a turn the store now
holds otherwise, though the run's own record verifies."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentjournal import Journal
from agentjournal.evals.run import run_eval
from agentjournal.store.contract import NewEvent, StreamState
from cli_run import run
from eval_sessions import AnswerScorer, record_support


async def recorded_twice(first: str, second: str) -> None:
    """Score ``support-1`` in ``first``; copy the run beside another recording of it."""
    async with Journal.open(first) as journal:
        await record_support(journal, "support-1")
        await run_eval(journal.store, [AnswerScorer()], [("support-1", "main")], run_id="r")
        stored = await journal.store.read("EvalRun-r")
    async with Journal.open(second) as journal:  # another recording under the same id
        await record_support(journal, "support-1")
        copied = [NewEvent(e.type, e.data, dict(e.metadata), e.id) for e in stored]
        await journal.store.append("EvalRun-r", copied, expected=StreamState.NO_STREAM)


def test_scores_of_a_session_recorded_again_are_named_as_changed_bindings(
    tmp_path: Path,
) -> None:
    first, second = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    asyncio.run(recorded_twice(first, second))

    bound = run("verify", "--eval", "r", "--allow-uncovered", "--uri", first)
    assert bound.returncode == 0, bound.stdout + bound.stderr
    assert "bindings: 3 scores bound to the turns as the store holds them" in bound.stdout

    moved = run("verify", "--eval", "r", "--allow-uncovered", "--uri", second)
    assert moved.returncode == 0, moved.stdout + moved.stderr  # the run's record is intact
    assert (
        "bindings: 3 of 3 scores judged a turn the store now holds otherwise (re-recorded, "
        "written to since, or moved): support-1@main turn 1 (answered), support-1@main turn 2 "
        "(answered), support-1@main turn 3 (answered)"
    ) in moved.stdout
