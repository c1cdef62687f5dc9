"""A writer that learns, on a conflict, that another writer completed the run appends no
score after its ``EvalRunCompleted``: the run stays one that verifies."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.engine.eval_events import RunStart, RunTotals, TurnScore
from agentjournal.engine.evals import EvalWriter
from agentjournal.errors import InvalidInput


async def test_no_score_lands_after_another_writer_completed_the_run(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        first = await EvalWriter.open(journal.store, "r")
        await first.start(RunStart("r", "eval", (("s", "main"),), ({"name": "a"},)))
        second = await EvalWriter.open(journal.store, "r")  # knows the run as started
        await first.add([TurnScore("s", "main", 1, "a", "1", 1.0)])
        await first.complete(RunTotals("s", 1, 1.0, 0.0, {}, {}, {}, 1))
        with pytest.raises(InvalidInput, match="eval run r is completed"):
            await second.add([TurnScore("s", "main", 2, "a", "1", 0.0)])
        stored = await journal.store.read("EvalRun-r")
    assert [e.type for e in stored][-1] == "EvalRunCompleted"
