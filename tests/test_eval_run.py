"""An eval run over recorded support conversations (the SDK's real Runner, scripted
models): every turn scored by every scorer, each line's score, the totals; run again with
the same id it scores only what is missing; bad input writes nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.errors import InvalidInput
from agentjournal.evals.run import LineDone, run_eval, select_sessions
from agentjournal.evals.scorers.base import Score
from agentjournal.read.evals.runs import latest_scores, list_runs, read_run
from agentjournal.read.evals.turns import ScoredTurn
from eval_sessions import AnswerScorer, assert_schema_events, record_support


class Failing(AnswerScorer):
    """Fails (raises) at its ``fail_at``-th turn: a run that dies part-way."""

    def __init__(self, fail_at: int) -> None:
        super().__init__("answered")
        self.fail_at = fail_at

    async def score_turn(self, turn: ScoredTurn) -> Score | None:
        if self.turns_scored + 1 == self.fail_at:
            raise RuntimeError("the scorer died")
        return await super().score_turn(turn)


async def test_an_eval_run_scores_a_recorded_support_conversation(journal: Journal) -> None:
    await record_support(journal, "support-1")
    await record_support(journal, "support-2", turns=2)
    refund = AnswerScorer("refund", "12.50", whole=True)
    done: list[LineDone] = []
    result = await run_eval(
        journal.store,
        [AnswerScorer(), refund],
        [("support-1", "main"), ("support-2", "main")],
        run_id="nightly-1",
        criteria="sha256:" + "a" * 64,
        progress=done.append,
    )
    assert result.completed
    assert result.kind == "eval"
    assert result.scorer == "answered,refund"
    assert result.session_id == ""  # two sessions
    assert [(t.session, t.turn, t.scorer, t.score) for t in result.turns] == [
        ("support-1", 1, "answered", 1.0),
        ("support-1", 1, "refund", 1.0),
        ("support-1", 2, "answered", 1.0),
        ("support-1", 2, "refund", 1.0),
        ("support-1", 3, "answered", 1.0),
        ("support-1", 3, "refund", 0.0),
        ("support-2", 1, "answered", 1.0),
        ("support-2", 1, "refund", 1.0),
        ("support-2", 2, "answered", 1.0),
        ("support-2", 2, "refund", 1.0),
    ]
    first = result.turns[0]
    assert first.input == "Why was I charged twice for order 42?"
    assert first.output == "Order 42 was charged twice: 2 x 12.50 EUR."
    assert len(first.head) == 64
    assert not first.human
    one, two = result.session_scores
    # support-1: six turn scores (five 1s) and refund's whole-line score 3/3.
    assert one.score == pytest.approx(6 / 7)
    assert one.label == "pass"
    assert one.by_scorer == {"answered": 1.0, "refund": pytest.approx(3 / 4)}
    assert one.turns == 3
    assert two.score == 1.0
    completion = result.completion
    assert completion is not None
    assert completion.turns_scored == 10
    assert completion.average == pytest.approx(9 / 10)
    assert completion.sessions == 2
    assert completion.by_line == {"main": pytest.approx(9 / 10)}
    assert completion.total_cost == 0.0
    assert [d.text() for d in done] == [
        "[1/2] support-1: 3 turns scored, 0.86 pass",
        "[2/2] support-2: 2 turns scored, 1.00 pass",
    ]
    assert (await read_run(journal.store, "nightly-1")) == result
    assert_schema_events(await journal.store.read("EvalRun-nightly-1"))
    assert [r.run_id for r in await list_runs(journal.store)] == ["nightly-1"]
    latest = await latest_scores(journal.store)
    assert latest["support-1"].score == pytest.approx(6 / 7)
    assert latest["support-1"].run_id == "nightly-1"
    assert latest["support-1"].human is None


async def test_a_rerun_with_the_same_id_scores_only_what_is_missing(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        for n in range(3):
            await record_support(journal, f"support-{n}")
        targets = [(f"support-{n}", "main") for n in range(3)]
        with pytest.raises(RuntimeError, match="died"):
            await run_eval(journal.store, [Failing(fail_at=5)], targets, run_id="r")
        partial = await read_run(journal.store, "r")
        assert not partial.completed
        assert [(t.session, t.turn) for t in partial.turns] == [
            ("support-0", 1),
            ("support-0", 2),
            ("support-0", 3),
        ]
        again = AnswerScorer()
        finished = await run_eval(journal.store, [again], targets, run_id="r")
        assert again.turns_scored == 6  # support-0 was scored already
        assert finished.completed
        assert len(finished.turns) == 9
        assert len({(t.session, t.turn, t.scorer) for t in finished.turns}) == 9
        assert len(finished.session_scores) == 3
        once_more = AnswerScorer()
        assert await run_eval(journal.store, [once_more], targets, run_id="r") == finished
        assert once_more.turns_scored == 0
        stream = await journal.store.read("EvalRun-r")
        assert [e.type for e in stream].count("EvalRunCompleted") == 1
        assert len(stream) == 1 + 9 + 3 + 1


async def test_a_rerun_with_other_scorers_or_sessions_is_refused(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1", turns=1)
        await record_support(journal, "support-2", turns=1)
        await run_eval(
            journal.store,
            [AnswerScorer()],
            [("support-1", "main")],
            run_id="r",
            criteria="sha256:" + "a" * 64,
        )
        head = await journal.store.head("EvalRun-r")
        for scorers, targets in [
            ([AnswerScorer("other")], [("support-1", "main")]),
            ([AnswerScorer()], [("support-2", "main")]),
        ]:
            with pytest.raises(InvalidInput, match="started with other scorers or sessions"):
                await run_eval(journal.store, scorers, targets, run_id="r")
        with pytest.raises(InvalidInput, match="another scorers file"):
            await run_eval(
                journal.store,
                [AnswerScorer()],
                [("support-1", "main")],
                run_id="r",
                criteria="sha256:" + "b" * 64,
            )
        assert await journal.store.head("EvalRun-r") == head


@pytest.mark.parametrize(
    ("scorers", "targets", "message"),
    [
        ([AnswerScorer()], [("nobody", "main")], "no session 'nobody'"),
        ([AnswerScorer()], [("support-1", "no-such-branch")], "no branch"),
        ([AnswerScorer()], [], "nothing to score"),
        ([], [("support-1", "main")], "names no scorer"),
        ([AnswerScorer(), AnswerScorer()], [("support-1", "main")], "two scorers"),
        ([AnswerScorer()], [("bad id!", "main")], "contains"),
    ],
)
async def test_bad_input_writes_nothing(
    tmp_path: Path, scorers: list[Any], targets: list[tuple[str, str]], message: str
) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1", turns=1)
        with pytest.raises(InvalidInput, match=message):
            await run_eval(journal.store, scorers, targets, run_id="r")
        assert await journal.store.head("EvalRun-r") is None


async def test_a_score_outside_zero_to_one_fails_the_run_before_it_is_written(
    tmp_path: Path,
) -> None:
    class TooHigh(AnswerScorer):
        async def score_turn(self, turn: ScoredTurn) -> Score | None:
            return Score(2.0, "pass", "")

    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1", turns=1)
        with pytest.raises(InvalidInput, match=r"scorer 'answered'.*\[0, 1\]"):
            await run_eval(journal.store, [TooHigh()], [("support-1", "main")], run_id="r")
        assert [e.type for e in await journal.store.read("EvalRun-r")] == ["EvalRunStarted"]


async def test_a_branch_line_is_scored_from_its_own_turns(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1")
        main = journal.session("support-1")
        await main.fork(turn=3, name="short")
        result = await run_eval(
            journal.store,
            [AnswerScorer()],
            [("support-1", "main"), ("support-1", "short")],
            run_id="r",
        )
    assert [(t.line, t.turn) for t in result.turns] == [
        ("main", 1),
        ("main", 2),
        ("main", 3),
        ("short", 1),
        ("short", 2),
    ]
    assert result.session_id == "support-1"
    assert result.completion is not None
    assert set(result.completion.by_line) == {"main", "short"}


async def test_sessions_are_chosen_by_app_and_activity(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1", turns=1)
        await record_support(journal, "sales-1", app="sales", turns=1)
        await record_support(journal, "support-2", turns=1)
        assert await select_sessions(journal.store, app="support") == ["support-1", "support-2"]
        assert await select_sessions(journal.store) == ["support-1", "sales-1", "support-2"]
        later = datetime.now(UTC) + timedelta(hours=1)
        assert await select_sessions(journal.store, since=later) == []
