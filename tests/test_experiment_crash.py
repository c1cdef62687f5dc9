"""kill -9 in the middle of ``agentjournal experiment``: the same command again finishes it,
with one branch per session, each turn run to its end once, and one score per (session,
line, turn, scorer)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

from agentjournal import Journal
from agentjournal.engine.turns import is_user
from agentjournal.evals.turn_takes import EXPERIMENT_TURN
from agentjournal.read.evals.runs import read_run
from agentjournal.streams import branch_stream, eval_run_stream
from experiment_sessions import (
    DELAY,
    RECORDED,
    SESSIONS,
    candidate_script,
    record,
    scorers_document,
)

ROOT = Path(__file__).resolve().parent.parent


def command(uri: str, script: Path, scorers: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentjournal.cli",
        "experiment",
        "--uri",
        uri,
        "--sessions",
        ",".join(SESSIONS),
        "--candidate",
        "experiment_sessions:candidate",
        "--model-script",
        str(script),
        "--scorers",
        str(scorers),
    ]


def environment() -> dict[str, str]:
    paths = [str(ROOT / "src"), str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), DELAY: "0.15"}


def kill_after(argv: list[str], lines: int, rng: random.Random) -> list[str]:
    """Run ``argv``; SIGKILL it once it printed ``lines`` progress lines and a random
    moment more (or let it end); what it printed."""
    process = subprocess.Popen(
        argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=environment(), text=True
    )
    assert process.stderr is not None
    seen: list[str] = []
    for line in process.stderr:
        seen.append(line.rstrip())
        if len(seen) >= lines:
            asyncio.run(asyncio.sleep(rng.uniform(0, 0.3)))
            process.send_signal(signal.SIGKILL)
            break
    process.wait(timeout=60)
    return seen


@pytest.mark.slow
def test_a_killed_experiment_finishes_when_run_again_and_nothing_is_duplicated(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'journal.db'}"

    async def setup() -> None:
        async with Journal.open(uri) as journal:
            await record(journal)

    asyncio.run(setup())
    script = tmp_path / "script.yml"
    script.write_text(yaml.safe_dump(candidate_script()), encoding="utf-8")
    scorers = tmp_path / "scorers.yml"
    scorers.write_text(yaml.safe_dump(scorers_document()), encoding="utf-8")
    argv = command(uri, script, scorers)
    rng = random.Random(7)
    # Killed after 1, 3 and 5 turns had started, and once while scoring.
    for lines in (1, 3, 5, 8):
        kill_after(argv, lines, rng)
    finished = subprocess.run(
        [*argv, "--json"], capture_output=True, text=True, env=environment(), timeout=120
    )
    assert finished.returncode == 0, finished.stderr
    report = json.loads(finished.stdout)
    assert report["changed"] == ["exp-returns", "exp-cancel"]
    experiment = report["experiment"]

    async def check() -> None:
        async with Journal.open(uri) as journal:
            store = journal.store
            for session in SESSIONS:
                branches = await journal.session(session).branches()
                assert [b.name for b in branches] == [experiment], session
                items = await journal.session(session, branch=experiment).get_items()
                users = [dict(i)["content"] for i in items if is_user(i)]
                assert users == [text for text, _ in RECORDED[session]], session
                marks = [
                    json.loads(e.data)["turn"]
                    for e in await store.read(branch_stream(session, experiment))
                    if e.type == EXPERIMENT_TURN
                ]
                assert marks == list(range(1, len(RECORDED[session]) + 1)), session
            run = await read_run(store, experiment)
            keys = Counter((r.session, r.line, r.turn, r.scorer) for r in run.turns)
            assert set(keys.values()) == {1}
            assert len(keys) == 2 * sum(len(turns) for turns in RECORDED.values())
            lines = Counter((s.session, s.line) for s in run.session_scores)
            assert set(lines.values()) == {1}
            assert len(lines) == 2 * len(SESSIONS)
            stream = await store.read(eval_run_stream(experiment))
            assert len({e.id for e in stream}) == len(stream)
            assert [e.type for e in stream].count("EvalRunCompleted") == 1

    asyncio.run(check())
