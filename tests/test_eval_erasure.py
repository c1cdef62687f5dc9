"""A sealed session's scores are sealed too: what was judged (the turn's input and answer)
and the reasons are stored under the session's subject key, so ``journal.erase`` erases
them with the session; the scores stay, and every chain still verifies."""

from __future__ import annotations

from pathlib import Path

from agentjournal import Journal
from agentjournal.audit.export import eval_run_records
from agentjournal.audit.verify import verify_eval_records
from agentjournal.evals.run import run_eval
from agentjournal.ledger import SigningKey
from agentjournal.read.evals.runs import read_run
from agentjournal.shred import MemoryKeyStore
from agentjournal.shred.fields import ERASED, SEALED
from eval_sessions import AnswerScorer, record_support

KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}
SAID = ("charged twice", "12.50", "Thanks")


async def test_erasing_the_subject_erases_its_sessions_scored_content(tmp_path: Path) -> None:
    keys = MemoryKeyStore()
    async with Journal.open(
        f"sqlite:///{tmp_path / 'j.db'}", keys=keys, signing_key=KEY
    ) as journal:
        await record_support(journal, "support-1", user_id="alice")
        await record_support(journal, "support-2", user_id="bob", turns=1)
        targets = [("support-1", "main"), ("support-2", "main")]
        await run_eval(
            journal.store, [AnswerScorer()], targets, run_id="r", keys=keys, signing_key=KEY
        )
        await journal.session("support-1", user_id="alice").score(1, 0.5, reason="ok", by="ana")
        stored = await journal.store.read("EvalRun-r")
        scores = [e for e in stored if e.type in ("TurnScored", "SessionScored")]
        assert all(e.metadata.get("aj.enc") for e in scores)
        assert not any(said.encode() in e.data for e in stored for said in SAID)

        opened = await read_run(journal.store, "r", keys=keys)
        assert opened.turns[0].input == "Why was I charged twice for order 42?"
        unopened = await read_run(journal.store, "r")
        assert {t.input for t in unopened.turns} == {SEALED}

        await journal.erase(subject="alice", reason="request 9", by="dpo")
        erased = await read_run(journal.store, "r", keys=keys)
        feedback = await read_run(journal.store, "feedback-support-1", keys=keys)
        records = await eval_run_records(journal.store, "r")

    alice = [t for t in erased.turns if t.session == "support-1"]
    bob = [t for t in erased.turns if t.session == "support-2"]
    assert {(t.input, t.output, t.reason) for t in alice} == {(ERASED, ERASED, ERASED)}
    assert [t.score for t in alice] == [1.0, 1.0, 1.0]  # the scores stay
    assert bob[0].input == "Why was I charged twice for order 42?"  # another subject's
    line = next(s for s in erased.session_scores if s.session == "support-1")
    assert line.reason == ERASED
    assert line.score == 1.0
    assert (feedback.turns[0].input, feedback.turns[0].score) == (ERASED, 0.5)
    report = verify_eval_records("r", records, TRUSTED)
    assert report.ok, report.text()
