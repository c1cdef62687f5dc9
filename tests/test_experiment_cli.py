"""``agentjournal experiment``: the report as a table or JSON; bad input is one line, exit 1,
nothing written."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from agentjournal import Journal
from agentjournal.cli.experiment import session_list
from agentjournal.store import open_store
from cli_run import run
from experiment_sessions import SESSIONS, candidate_script, record, scorers_document


@pytest.fixture
def recorded(tmp_path: Path) -> dict[str, str]:
    uri = f"sqlite:///{tmp_path / 'journal.db'}"

    async def setup() -> None:
        async with Journal.open(uri) as journal:
            await record(journal)

    asyncio.run(setup())
    script = tmp_path / "script.yml"
    script.write_text(yaml.safe_dump(candidate_script()), encoding="utf-8")
    scorers = tmp_path / "scorers.yml"
    scorers.write_text(yaml.safe_dump(scorers_document()), encoding="utf-8")
    return {"uri": uri, "script": str(script), "scorers": str(scorers), "dir": str(tmp_path)}


def events_in(uri: str) -> int:
    async def count() -> int:
        store = await open_store(uri, create=False)
        try:
            return len(await store.read_all(limit=100_000))
        finally:
            await store.close()

    return asyncio.run(count())


def test_sessions_are_split_by_commas_and_spaces() -> None:
    assert session_list(["a,b", "c", "d,,e"]) == ["a", "b", "c", "d", "e"]


def test_the_table_names_each_session_and_what_differs(recorded: dict[str, str]) -> None:
    ran = run(
        "experiment",
        "--uri",
        recorded["uri"],
        "--sessions",
        *SESSIONS,
        "--candidate",
        "experiment_sessions:candidate",
        "--model-script",
        recorded["script"],
        "--scorers",
        recorded["scorers"],
        "--id",
        "exp-table",
    )

    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[0] == (
        "experiment exp-table: candidate experiment_sessions:candidate, from turn 1, "
        "5 sessions, 2 changed"
    )
    row = next(line for line in lines if line.startswith("exp-cancel "))
    assert "1.00   0.00  -1.00" in row
    assert "turn 1; 1 tool call" in row
    assert '  tool calls only in main: cancel_order {"order_id": "44"}' in lines
    assert "  candidate: You have 30 days to return an item." in lines
    assert "exp-where: turn 1" in ran.stderr  # progress


def test_json_is_the_report(recorded: dict[str, str]) -> None:
    ran = run(
        "experiment",
        "--uri",
        recorded["uri"],
        "--sessions",
        ",".join(SESSIONS),
        "--candidate",
        "experiment_sessions:candidate",
        "--model-script",
        recorded["script"],
        "--scorers",
        recorded["scorers"],
        "--json",
    )

    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert report["changed"] == ["exp-returns", "exp-cancel"]
    assert report["experiment"].startswith("exp-")
    assert [s["session"] for s in report["sessions"]] == SESSIONS


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--sessions": "exp-where,exp-nope"}, "session exp-nope has no user message"),
        ({"--candidate": "experiment_sessions:nope"}, "experiment_sessions has no nope"),
        ({"--model-script": "missing.yml"}, "--model-script missing.yml: cannot be read"),
        ({"--scorers": "missing.yml"}, "cannot read scorers missing.yml"),
        ({"--at-turn": "3"}, "exp-where has 1 turn: it has no turn 3"),
        ({"--id": "bad id"}, "experiment id"),
        ({"--id": ""}, "experiment id"),
        ({"--guardrails": "notaurl"}, "--guardrails: guardrail base URL must be http(s)"),
    ],
)
def test_bad_input_is_one_line_exit_1_and_nothing_written(
    recorded: dict[str, str], change: dict[str, str], message: str
) -> None:
    options = {
        "--uri": recorded["uri"],
        "--sessions": "exp-where,exp-hours",
        "--candidate": "experiment_sessions:candidate",
        "--model-script": recorded["script"],
        "--scorers": recorded["scorers"],
        **change,
    }
    before = events_in(recorded["uri"])

    ran = run("experiment", *(part for pair in options.items() for part in pair))

    assert ran.returncode == 1
    assert message in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1
    assert events_in(recorded["uri"]) == before
