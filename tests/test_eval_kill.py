"""kill -9 in the middle of an eval run: run again with the same id, it finishes, and the
run's stream holds exactly one score per (session, line, turn, scorer), one score per line
and one ``EvalRunCompleted``, and verifies.

A worker process (``tests/eval_worker.py``) scores eight recorded support conversations
(the SDK's Runner, scripted models); it is killed right before and right after its K-th
append to the run's stream (it kills itself there: deterministic), and from outside after
delays spread over a run's length; then it runs again to its end. On SQLite each kill
starts from a copy of one prepared store; on the KurrentDB double from a fresh double.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import sys
from collections import Counter
from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.audit.export import eval_run_records
from agentjournal.audit.verify import verify_eval_records
from agentjournal.ledger import SigningKey
from agentjournal.read.evals.runs import fold_run
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from eval_sessions import assert_schema_events, record_support
from eval_worker import PAUSE, SIGNING_KEY

pytestmark = pytest.mark.slow  # worker processes, killed

WORKER = Path(__file__).with_name("eval_worker.py")
KEY = SigningKey.generate()
SESSIONS = 8
TURNS = SESSIONS * 3 * 2  # three turns each, two scorers
POINTS = ["before-append:1", "after-append:1", "before-append:4", "after-append:5"]


async def populate(uri: str) -> None:
    async with Journal.open(uri) as journal:
        for n in range(SESSIONS):
            await record_support(journal, f"support-{n}")


async def work(
    uri: str, folder: Path, *, die_at: str = "", delay: float | None = None, pause: float = 0.001
) -> int:
    """Run the worker's eval run on ``uri``: killed at ``die_at`` (by itself) or after
    ``delay`` seconds (from here), or let finish, each turn's scoring taking ``pause``
    seconds; its exit code."""
    key_file = folder / "signing.pem"
    if not key_file.exists():
        key_file.write_text(KEY.private_pem())
    env = {
        **os.environ,
        SIGNING_KEY: str(key_file),
        PAUSE: str(pause),
        "PYTHONPATH": os.pathsep.join([str(WORKER.parent), *sys.path]),
    }
    stderr = folder / "worker.err"
    with stderr.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            uri,
            "nightly",
            str(SESSIONS),
            die_at,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=sink,
            env=env,
        )
    assert process.stdout is not None
    assert process.stdin is not None
    ready = await asyncio.wait_for(process.stdout.readline(), 120)
    assert ready == b"ready\n", (ready, stderr.read_text())
    process.stdin.write(b"go\n")
    await process.stdin.drain()
    if delay is not None:
        await asyncio.sleep(delay)
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
    await asyncio.wait_for(process.stdout.read(), 120)
    code = await asyncio.wait_for(process.wait(), 120)
    assert code in (0, -signal.SIGKILL), stderr.read_text()
    return code


async def left_open(uri: str) -> bool:
    """Whether the killed run left its stream without ``EvalRunCompleted``."""
    async with Journal.open(uri) as journal:
        head = await journal.store.head("EvalRun-nightly")
        left = [] if head is None else await journal.store.read("EvalRun-nightly")
    return "EvalRunCompleted" not in [e.type for e in left]


async def check_finished(uri: str) -> None:
    """The run is complete, each event once, and it verifies."""
    async with Journal.open(uri) as journal:
        stream = await journal.store.read("EvalRun-nightly")
        records = await eval_run_records(journal.store, "nightly")
    run = fold_run("nightly", stream)
    assert_schema_events(stream)
    kinds = Counter(e.type for e in stream)
    assert kinds == {
        "EvalRunStarted": 1,
        "TurnScored": TURNS,
        "SessionScored": SESSIONS,
        "EvalRunCompleted": 1,
    }
    assert stream[-1].type == "EvalRunCompleted"
    keys = Counter((t.session, t.line, t.turn, t.scorer) for t in run.turns)
    assert len(keys) == TURNS
    assert set(keys.values()) == {1}
    assert run.completion is not None
    assert run.completion.turns_scored == TURNS
    report = verify_eval_records("nightly", records, {KEY.key_id: KEY.public_key})
    assert report.ok, report.text()


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store of eight recorded conversations, copied for each kill."""
    path = tmp_path_factory.mktemp("prepared") / "journal.db"
    asyncio.run(populate(f"sqlite:///{path}"))
    return path


@pytest.mark.parametrize("die_at", POINTS)
async def test_an_eval_run_killed_at_an_append_finishes_when_run_again(
    prepared: Path, tmp_path: Path, die_at: str
) -> None:
    path = tmp_path / "journal.db"
    shutil.copy(prepared, path)
    uri = f"sqlite:///{path}"
    assert await work(uri, tmp_path, die_at=die_at) == -signal.SIGKILL
    assert await left_open(uri)
    assert await work(uri, tmp_path) == 0
    await check_finished(uri)


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.6, 0.9])
async def test_an_eval_run_killed_from_outside_finishes_when_run_again(
    prepared: Path, tmp_path: Path, delay: float
) -> None:
    path = tmp_path / "journal.db"
    shutil.copy(prepared, path)
    uri = f"sqlite:///{path}"
    # Each turn's scoring takes 25 ms: a run takes over a second, killed part-way.
    assert await work(uri, tmp_path, delay=delay, pause=0.025) == -signal.SIGKILL
    assert await left_open(uri)
    assert await work(uri, tmp_path) == 0
    await check_finished(uri)


@pytest.mark.parametrize("die_at", ["after-append:3", "before-append:3"])
async def test_an_eval_run_on_kurrentdb_killed_finishes_when_run_again(
    tmp_path: Path, die_at: str
) -> None:
    with KurrentDBDouble.in_thread() as double:
        await populate(double.uri)
        assert await work(double.uri, tmp_path, die_at=die_at) == -signal.SIGKILL
        assert await left_open(double.uri)
        assert await work(double.uri, tmp_path) == 0
        await check_finished(double.uri)
