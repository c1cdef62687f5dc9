"""An eval run over a session sealed under a subject key it cannot open is refused before
anything is written: its scorers would judge ``[sealed]`` and record those verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.errors import InvalidInput, StreamNotFound
from agentjournal.evals.run import run_eval
from agentjournal.shred import MemoryKeyStore
from eval_sessions import AnswerScorer, record_support


async def test_a_sealed_session_without_its_keys_is_refused_with_nothing_written(
    tmp_path: Path,
) -> None:
    keys = MemoryKeyStore()
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", keys=keys) as journal:
        await record_support(journal, "s1", user_id="alice")
        with pytest.raises(InvalidInput, match="s1 is sealed under a subject key"):
            await run_eval(journal.store, [AnswerScorer()], [("s1", "main")], run_id="r")
        with pytest.raises(StreamNotFound):
            await journal.store.read("EvalRun-r")
        with pytest.raises(InvalidInput, match="the keys given do not hold"):
            await run_eval(
                journal.store, [AnswerScorer()], [("s1", "main")], run_id="r", keys=MemoryKeyStore()
            )
        opened = await run_eval(
            journal.store, [AnswerScorer("has", "12.50")], [("s1", "main")], run_id="r", keys=keys
        )
    assert [t.score for t in opened.turns] == [1.0, 1.0, 0.0]  # opened: the answers judged
