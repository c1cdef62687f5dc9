"""A score's label stays in the clear (never sealed, withheld from a redacted bundle nor
erased), so it is one short word: a scorer's longer label — a judge talked into putting what
it read there — is recorded as ``pass``/``fail``, and a person's is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.errors import InvalidInput
from agentjournal.evals.run import run_eval
from agentjournal.evals.scorers.base import Score
from agentjournal.read.evals.runs import read_run
from agentjournal.read.evals.turns import ScoredSession, ScoredTurn
from agentjournal.shred import MemoryKeyStore
from eval_sessions import record_support


class Echo:
    """A scorer whose label repeats what it judged (as a judge might be asked to)."""

    name, version, kind = "echo", "1", "callable"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "kind": self.kind}

    async def score_turn(self, turn: ScoredTurn) -> Score | None:
        return Score(1.0 if turn.index == 1 else 0.0, f"user said: {turn.input}", "ok")

    async def score_session(self, session: ScoredSession) -> Score | None:
        return None


async def test_a_label_that_is_no_short_word_is_not_kept_in_the_clear(tmp_path: Path) -> None:
    keys = MemoryKeyStore()
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", keys=keys) as journal:
        await record_support(journal, "s1", user_id="alice")
        await run_eval(journal.store, [Echo()], [("s1", "main")], run_id="r", keys=keys)
        stored = await journal.store.read("EvalRun-r")
        run = await read_run(journal.store, "r")
        session = journal.session("s1", user_id="alice")
        with pytest.raises(InvalidInput, match="label must be one short word"):
            await session.score(1, 0.2, label="she asked about order 42", by="ana")
        assert await session.score(1, 0.2, label="curt", by="ana")
    assert not any(b"charged twice" in event.data for event in stored)
    assert [t.label for t in run.turns] == ["pass", "fail", "fail"]
