"""Every score of an eval run belongs to it: a line and a scorer its ``EvalRunStarted``
names, and a person's rating only on a feedback run (and only a person's there); a run
that holds anything else fails verification, signed or not."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.audit.export import eval_run_records
from agentjournal.audit.verify import verify_eval_records
from agentjournal.engine.eval_events import RunStart, SessionScore, TurnScore
from agentjournal.engine.evals import EvalWriter
from agentjournal.ledger import SigningKey

KEY = SigningKey.generate()


async def verified(tmp_path: Path, kind: str, scores: list[TurnScore | SessionScore]) -> str:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        writer = await EvalWriter.open(journal.store, "r")
        scorers = ({"name": "a", "version": "1"},)
        await writer.start(RunStart("r", kind, (("s", "main"),), scorers))
        await writer.add(scores)
        await writer.checkpoint(KEY)
        records = await eval_run_records(journal.store, "r")
    report = verify_eval_records("r", records, {KEY.key_id: KEY.public_key})
    return report.text() if report.ok else "FAILED " + report.text()


@pytest.mark.parametrize(
    ("kind", "score", "problem"),
    [
        ("eval", TurnScore("other", "main", 1, "a", "1", 1.0), "other@main is not a line"),
        ("eval", TurnScore("s", "branch", 1, "a", "1", 1.0), "s@branch is not a line"),
        ("eval", SessionScore("other", "main", 1.0, "pass"), "other@main is not a line"),
        ("eval", TurnScore("s", "main", 1, "b", "1", 1.0), "scorer b is not one the run"),
        (
            "eval",
            TurnScore("s", "main", 1, "a", "1", 1.0, human=True, by="ana"),
            "a person's rating on a run that is not a feedback run",
        ),
        (
            "feedback",
            TurnScore("s", "main", 1, "a", "1", 1.0),
            "not a person's rating",
        ),
        (
            "feedback",
            TurnScore("t", "main", 1, "human", "1", 1.0, human=True, by="ana", rating="x"),
            "a rating of session t, not the run's",
        ),
    ],
)
async def test_a_score_the_run_does_not_name_fails_verification(
    tmp_path: Path, kind: str, score: TurnScore | SessionScore, problem: str
) -> None:
    text = await verified(tmp_path, kind, [score])
    assert text.startswith("FAILED"), text
    assert problem in text


async def test_the_runs_own_scores_and_ratings_verify(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "f").mkdir()
    scores: list[TurnScore | SessionScore] = [
        TurnScore("s", "main", 1, "a", "1", 1.0),
        SessionScore("s", "main", 1.0, "pass"),
    ]
    assert not (await verified(tmp_path / "e", "eval", scores)).startswith("FAILED")
    rating = TurnScore("s", "fix", 2, "human", "1", 0.5, human=True, by="ana", rating="x")
    assert not (await verified(tmp_path / "f", "feedback", [rating])).startswith("FAILED")
