"""Experiments: a candidate on a branch of each recorded session, both lines scored and compared.

Five sessions recorded with the real Runner (scripted models); the candidate
(``experiment_sessions:candidate``) is scripted to fix the one known bad answer
(``exp-returns``) and break another (``exp-cancel``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agentjournal import Journal
from agentjournal.audit.verify import verify_records
from agentjournal.errors import InvalidInput
from agentjournal.evals.experiment import run_experiment
from agentjournal.evals.report import render_text
from agentjournal.evals.scorers import load_scorers
from agentjournal.evals.turn_takes import EXPERIMENT_TURN
from agentjournal.ledger.keys import SigningKey
from agentjournal.read.evals.runs import read_run
from agentjournal.store.contract import EventStore
from agentjournal.streams import branch_stream
from agentjournal.walk import read_tree
from experiment_sessions import SESSIONS, candidate_script, record, scorers_document

CANDIDATE = "experiment_sessions:candidate"


def write(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


async def last_position(store: EventStore) -> int:
    last = -1
    while True:
        page = await store.read_all(from_position=last + 1, limit=1000)
        if not page:
            return last
        last = page[-1].position


@pytest.fixture
async def journal(tmp_path: Path) -> Any:
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}") as opened:
        await record(opened)
        yield opened


async def test_the_report_shows_exactly_the_fixed_and_the_broken_answer(
    journal: Journal, tmp_path: Path
) -> None:
    script = write(tmp_path / "script.yml", candidate_script())
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))

    report = await run_experiment(
        journal, SESSIONS, CANDIDATE, scorers=scorers, model_script=script
    )

    assert [s.session for s in report.changed] == ["exp-returns", "exp-cancel"]
    by_session = {s.session: s for s in report.sessions}
    fixed, broken = by_session["exp-returns"], by_session["exp-cancel"]
    assert [(c.turn, c.main, c.candidate) for c in fixed.changed_turns] == [(1, 0.0, 1.0)]
    assert fixed.candidate.final == "You have 30 days to return an item."
    assert fixed.main.final == "You have 7 days."
    assert [(c.turn, c.main, c.candidate) for c in broken.changed_turns] == [(1, 1.0, 0.0)]
    assert broken.tool_calls_only_main == ('cancel_order {"order_id": "44"}',)
    assert broken.tool_calls_only_candidate == ()
    for same in ("exp-where", "exp-hours", "exp-status"):
        assert not by_session[same].differs, same
        assert by_session[same].main.tool_calls == by_session[same].candidate.tool_calls
    assert report.totals["main"]["score"] == report.totals["candidate"]["score"] == 5 / 6
    text = render_text(report)
    assert "exp-returns" in text
    assert "0.00   1.00  +1.00" in text
    assert "tool calls only in main: cancel_order" in text
    # One eval run, of kind experiment, holds both lines of every session.
    run = await read_run(journal.store, report.experiment)
    assert run.kind == "experiment"
    assert run.experiment is not None
    assert run.experiment["candidate"] == CANDIDATE
    assert {line for _, line in run.sessions} == {"main", report.experiment}
    assert len(run.turns) == 2 * 6
    assert run.completion is not None


async def test_running_it_again_writes_nothing(journal: Journal, tmp_path: Path) -> None:
    script = write(tmp_path / "script.yml", candidate_script())
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))
    first = await run_experiment(journal, SESSIONS, CANDIDATE, scorers=scorers, model_script=script)
    before = await last_position(journal.store)

    again = await run_experiment(journal, SESSIONS, CANDIDATE, scorers=scorers, model_script=script)

    assert await last_position(journal.store) == before
    assert again.to_json() == first.to_json()
    for session in SESSIONS:
        branches = await journal.session(session).branches()
        assert [b.name for b in branches] == [first.experiment]


async def test_a_turn_cut_short_is_popped_and_run_again(journal: Journal, tmp_path: Path) -> None:
    script = write(tmp_path / "script.yml", candidate_script())
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))
    # What a process killed mid-turn leaves: the branch, and the turn's user message alone.
    main = journal.session("exp-cancel")
    await main.fork(turn=1, name="exp-cut")
    branch = journal.session("exp-cancel", branch="exp-cut")
    await branch.add_items([{"role": "user", "content": "Please cancel order 44."}])

    report = await run_experiment(
        journal,
        ["exp-cancel"],
        CANDIDATE,
        scorers=scorers,
        model_script=script,
        experiment_id="exp-cut",
    )

    items = await journal.session("exp-cancel", branch="exp-cut").get_items()
    assert [i.get("role") for i in items] == ["user", "assistant"]
    assert report.sessions[0].candidate.final == "Sorry, I cannot cancel orders."
    stream = await journal.store.read(branch_stream("exp-cancel", "exp-cut"))
    assert [e.type for e in stream].count(EXPERIMENT_TURN) == 1
    assert "agentjournal.ItemPopped" in [e.type for e in stream]


async def test_a_later_turn_forks_there_and_keeps_the_turns_before(
    journal: Journal, tmp_path: Path
) -> None:
    script = write(
        tmp_path / "script.yml",
        {"exp-status": {2: [{"text": "Order 45 is lost, sorry."}]}},
    )
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))

    report = await run_experiment(
        journal, ["exp-status"], CANDIDATE, scorers=scorers, model_script=script, at_turn=2
    )

    (compared,) = report.sessions
    assert list(compared.main.answers) == list(compared.candidate.answers) == [2]
    assert [(c.turn, c.main, c.candidate) for c in compared.changed_turns] == [(2, 1.0, 0.0)]
    items = await journal.session("exp-status", branch=report.experiment).get_items()
    assert [i.get("content") for i in items if i.get("role") == "user"] == [
        "Hi!",
        "What is the status of order 45?",
    ]


@pytest.mark.parametrize(
    ("sessions", "candidate", "at_turn", "problem"),
    [
        (["exp-nope"], CANDIDATE, 1, "exp-nope has no user message"),
        (["exp-where", "exp-where"], CANDIDATE, 1, "named twice"),
        (["exp-where"], CANDIDATE, 2, "has no turn 2"),
        (["exp-where"], "experiment_sessions:nothing", 1, "has no nothing"),
        (["exp-where"], "experiment_sessions:EXPECTED", 1, "not an agents.Agent"),
        (["exp-where"], "no_such_module_here:agent", 1, "importing no_such_module_here"),
    ],
)
async def test_bad_input_is_refused_before_anything_is_written(
    journal: Journal,
    tmp_path: Path,
    sessions: list[str],
    candidate: str,
    at_turn: int,
    problem: str,
) -> None:
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))
    before = await last_position(journal.store)

    with pytest.raises(InvalidInput, match=problem):
        await run_experiment(journal, sessions, candidate, scorers=scorers, at_turn=at_turn)

    assert await last_position(journal.store) == before


async def test_a_model_script_naming_another_agent_or_no_turn_is_refused(
    journal: Journal, tmp_path: Path
) -> None:
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))
    before = await last_position(journal.store)
    agent = write(tmp_path / "agent.yml", {"exp-where": {1: {"nobody": ["hi"]}}})
    turn = write(tmp_path / "turn.yml", {"exp-where": {"first": ["hi"]}})

    with pytest.raises(InvalidInput, match="'nobody' has no manifest"):
        await run_experiment(journal, ["exp-where"], CANDIDATE, scorers=scorers, model_script=agent)
    with pytest.raises(InvalidInput, match="turn 'first' is not a turn number"):
        await run_experiment(journal, ["exp-where"], CANDIDATE, scorers=scorers, model_script=turn)

    assert await last_position(journal.store) == before


async def test_a_signed_journal_still_verifies_every_session_after_an_experiment(
    tmp_path: Path,
) -> None:
    key = SigningKey.generate()
    script = write(tmp_path / "script.yml", candidate_script())
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", signing_key=key) as journal:
        await record(journal, ["exp-cancel", "exp-status"])
        await run_experiment(
            journal, ["exp-cancel", "exp-status"], CANDIDATE, scorers=scorers, model_script=script
        )
        for session in ("exp-cancel", "exp-status"):
            report = verify_records(
                await read_tree(journal.store, session), {key.key_id: key.public_key}
            )
            assert report.ok, report.text()


async def test_an_id_started_as_another_experiment_is_refused_before_any_write(
    journal: Journal, tmp_path: Path
) -> None:
    script = write(tmp_path / "script.yml", candidate_script())
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))
    await run_experiment(
        journal,
        ["exp-where"],
        CANDIDATE,
        scorers=scorers,
        model_script=script,
        experiment_id="exp-same",
    )
    before = await last_position(journal.store)

    with pytest.raises(InvalidInput, match="exp-same was started as another run"):
        await run_experiment(
            journal,
            ["exp-where", "exp-hours"],
            CANDIDATE,
            scorers=scorers,
            model_script=script,
            experiment_id="exp-same",
        )

    assert await last_position(journal.store) == before


async def test_a_branch_of_that_name_made_otherwise_is_refused_before_any_write(
    journal: Journal, tmp_path: Path
) -> None:
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))
    await journal.session("exp-status").fork(turn=2, name="exp-taken")
    before = await last_position(journal.store)

    with pytest.raises(InvalidInput, match="has a branch 'exp-taken' that is not this"):
        await run_experiment(
            journal,
            ["exp-where", "exp-status"],
            CANDIDATE,
            scorers=scorers,
            experiment_id="exp-taken",
        )

    assert await last_position(journal.store) == before
