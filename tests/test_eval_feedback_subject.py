"""A person's rating copies what the rated turn said; it is sealed under the key of the
session's own data subject, whatever subject the rating session handle names, so erasing
that subject erases it from the rating too."""

from __future__ import annotations

from pathlib import Path

from agentjournal import Journal
from agentjournal.read.evals.runs import read_run
from agentjournal.shred import MemoryKeyStore
from agentjournal.shred.fields import ERASED
from eval_sessions import record_support


async def test_a_rating_through_another_subjects_handle_is_erased_with_the_session(
    tmp_path: Path,
) -> None:
    keys = MemoryKeyStore()
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", keys=keys) as journal:
        await record_support(journal, "s1", user_id="alice")
        await journal.session("s1", user_id="bob").score(1, 0.5, reason="ok", by="ana")
        await journal.erase(subject="alice", reason="request 9", by="dpo")
        run = await read_run(journal.store, "feedback-s1", keys=keys)
    (rating,) = run.turns
    assert (rating.input, rating.output) == (ERASED, ERASED)
    assert rating.score == 0.5
