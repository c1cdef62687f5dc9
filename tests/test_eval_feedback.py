"""People's ratings on the record: ``session.score`` writes a human ``TurnScored`` to the
session's feedback run, signed with the session's key, once per rating id; bad input is
refused with nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.audit.export import eval_run_records
from agentjournal.audit.verify import verify_eval_records
from agentjournal.errors import InvalidInput
from agentjournal.ledger import SigningKey
from agentjournal.read.evals.runs import latest_scores, read_run
from eval_sessions import assert_schema_events, record_support

KEY = SigningKey.generate()


async def test_a_persons_rating_is_a_human_turn_score_on_the_feedback_run(
    tmp_path: Path,
) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", signing_key=KEY) as journal:
        await record_support(journal, "support-1")
        session = journal.session("support-1")
        assert await session.score(2, 0.9, reason="quick refund", by="ana@example.com")
        assert await session.score(3, 0.2, label="curt", by="ben@example.com")
        run = await read_run(journal.store, "feedback-support-1")
        records = await eval_run_records(journal.store, "feedback-support-1")
        latest = await latest_scores(journal.store)
        assert_schema_events(await journal.store.read("EvalRun-feedback-support-1"))
    assert run.kind == "feedback"
    assert run.human
    assert run.status == "open"  # a feedback run is never completed
    assert run.scorer == "human"
    first, second = run.turns
    assert (first.turn, first.score, first.label, first.by) == (2, 0.9, "pass", "ana@example.com")
    assert first.human
    assert first.reason == "quick refund"
    assert first.input == "Please refund the duplicate."
    assert first.output.startswith("Done: 12.50 EUR")
    assert (second.turn, second.label, second.by) == (3, "curt", "ben@example.com")
    report = verify_eval_records("feedback-support-1", records, {KEY.key_id: KEY.public_key})
    assert report.ok, report.text()
    assert latest["support-1"].human == 0.2
    assert latest["support-1"].human_by == "ben@example.com"
    assert latest["support-1"].score is None  # no eval run scored it


async def test_a_rating_given_again_with_its_id_is_recorded_once(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1", turns=1)
        session = journal.session("support-1")
        assert await session.score(1, 1.0, by="ana", id="ticket-7")
        assert not await session.score(1, 1.0, by="ana", id="ticket-7")
        assert await session.score(1, 0.0, by="ana")  # no id: a rating of its own
        run = await read_run(journal.store, "feedback-support-1")
    assert [t.score for t in run.turns] == [1.0, 0.0]


@pytest.mark.parametrize(
    ("turn", "score", "options", "message"),
    [
        (4, 0.5, {"by": "ana"}, "has no turn 4 on line main"),
        (0, 0.5, {"by": "ana"}, "turn number"),
        (1, 1.5, {"by": "ana"}, r"\[0, 1\]"),
        (1, float("nan"), {"by": "ana"}, r"\[0, 1\]"),
        (1, True, {"by": "ana"}, r"\[0, 1\]"),
        (1, 0.5, {"by": "  "}, "by must be non-blank"),
        (1, 0.5, {"by": "ana", "reason": "x" * 1001}, "at most 1,000"),
    ],
)
async def test_a_bad_rating_is_refused_with_nothing_written(
    tmp_path: Path, turn: int, score: float, options: dict[str, Any], message: str
) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1")
        with pytest.raises(InvalidInput, match=message):
            await journal.session("support-1").score(turn, score, **options)
        assert await journal.store.head("EvalRun-feedback-support-1") is None
