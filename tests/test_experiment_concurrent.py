"""Two runs of one experiment at once (a retried CI job while the first still runs) run each
turn once: a run takes a turn up (``agentjournal.ExperimentTurnTaken``, at the exact head of
the branch) before it runs it, and a run that finds the next turn taken by a process that
still runs stops, with nothing written. A turn taken by a process that has ended is taken
again; one taken on another host, which this host cannot ask, only with ``retake``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from agentjournal import Journal
from agentjournal.errors import ExperimentTurnTaken
from agentjournal.evals import turn_takes
from agentjournal.evals.experiment import run_experiment
from agentjournal.evals.scorers import load_scorers
from agentjournal.evals.turn_takes import EXPERIMENT_TURN, EXPERIMENT_TURN_TAKEN
from agentjournal.store.contract import EventStore
from agentjournal.streams import branch_stream
from experiment_sessions import DELAY, SESSIONS, candidate_script, record, scorers_document
from test_experiment_crash import command, environment

NAME = "exp-taken"
SESSION = "exp-cancel"


async def _recorded(uri: str) -> None:
    async with Journal.open(uri) as journal:
        await record(journal, SESSIONS)


async def _turns_marked(uri: str) -> Counter[tuple[str, int]]:
    """How many ``ExperimentTurn`` marks each (branch stream, turn) holds."""
    async with Journal.open(uri) as journal:
        found = await journal.store.read_all()
    return Counter(
        (event.stream, json.loads(event.data)["turn"])
        for event in found
        if event.type == EXPERIMENT_TURN
    )


@pytest.mark.slow
def test_two_concurrent_runs_of_one_experiment_run_each_turn_once(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'j.db'}"
    asyncio.run(_recorded(uri))
    script, scorers = tmp_path / "script.yml", tmp_path / "scorers.yml"
    script.write_text(yaml.safe_dump(candidate_script()), encoding="utf-8")
    scorers.write_text(yaml.safe_dump(scorers_document()), encoding="utf-8")
    env = {**environment(), DELAY: "1"}
    first = subprocess.Popen(
        command(uri, script, scorers),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stderr is not None
    for line in first.stderr:  # until its first turn has begun (taken, then announced)
        if ": turn " in line:
            break
    second = subprocess.run(
        command(uri, script, scorers), env=env, capture_output=True, text=True, check=False
    )
    _, rest = first.communicate(timeout=120)
    assert first.returncode == 0, rest
    # The second found a turn the first held (the usual case) and stopped; or, on a slow
    # machine, came after the first had finished every turn and ran none.
    if second.returncode != 0:
        refusal = second.stderr.strip().splitlines()[-1]
        assert second.returncode == 1, second.stderr
        assert f"was taken by {socket.gethostname()}:{first.pid}, whose process still runs" in (
            refusal
        )
    marked = asyncio.run(_turns_marked(uri))
    assert marked
    assert max(marked.values()) == 1, marked


@pytest.fixture
async def journal(tmp_path: Path) -> AsyncIterator[Journal]:
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}") as opened:
        await record(opened, [SESSION])
        yield opened


@contextlib.asynccontextmanager
async def _a_running_process() -> AsyncIterator[int]:
    """The id of a process of this host that runs until the block ends."""
    alive = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)"
    )
    try:
        yield alive.pid
    finally:
        alive.kill()
        await alive.wait()


async def _taken_by(journal: Journal, holder: str, *, cut: bool, **more: str) -> None:
    """The experiment's branch with turn 1 taken by ``holder`` and not finished (and,
    with ``cut``, that turn's user message written, as a run killed mid-turn leaves it);
    ``more``: the take's ``machine`` and ``started``."""
    await journal.session(SESSION).fork(turn=1, name=NAME)
    branch = journal.session(SESSION, branch=NAME)
    body = {"experiment": NAME, "turn": 1, "holder": holder, "run": "0" * 32, "retake": False}
    body.update(more)
    await branch.append_event(EXPERIMENT_TURN_TAKEN, json.dumps(body).encode())
    if cut:
        await branch.add_items([{"role": "user", "content": "Please cancel order 44."}])


async def _run(journal: Journal, tmp_path: Path, *, retake: bool = False) -> None:
    script = tmp_path / "script.yml"
    script.write_text(yaml.safe_dump(candidate_script()), encoding="utf-8")
    scorers = tmp_path / "scorers.yml"
    scorers.write_text(yaml.safe_dump(scorers_document()), encoding="utf-8")
    await run_experiment(
        journal,
        [SESSION],
        "experiment_sessions:candidate",
        scorers=load_scorers(scorers),
        model_script=script,
        experiment_id=NAME,
        retake=retake,
    )


async def _last_position(store: EventStore) -> int:
    tail = await store.read_all(from_position=0)
    return tail[-1].position


async def _takes(journal: Journal) -> list[dict[str, object]]:
    stream = await journal.store.read(branch_stream(SESSION, NAME))
    return [json.loads(e.data) for e in stream if e.type == EXPERIMENT_TURN_TAKEN]


@pytest.mark.parametrize("proc", [True, False], ids=["with-proc", "without-proc"])
async def test_a_turn_taken_by_a_process_that_still_runs_is_refused_with_nothing_written(
    journal: Journal, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proc: bool
) -> None:
    if not proc:
        # macOS, the BSDs: no /proc, so opening /proc/PID/stat fails as it does for an ended
        # process (FileNotFoundError); the process must be asked (signal 0), not read as ended.
        real_open = open

        def no_proc(path: object, *args: object, **kwargs: object) -> object:
            if str(path).startswith("/proc/"):
                raise FileNotFoundError(2, "No such file or directory", str(path))
            return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(turn_takes, "open", no_proc, raising=False)
    async with _a_running_process() as pid:
        await _taken_by(journal, f"{socket.gethostname()}:{pid}", cut=False)
        before = await _last_position(journal.store)
        with pytest.raises(ExperimentTurnTaken) as refused:
            await _run(journal, tmp_path)
    assert refused.value.running is True
    assert refused.value.turn == 1
    assert "whose process still runs: wait for it to finish" in str(refused.value)
    assert await _last_position(journal.store) == before


async def test_a_turn_taken_by_a_process_that_has_ended_is_taken_again(
    journal: Journal, tmp_path: Path
) -> None:
    ended = await asyncio.create_subprocess_exec(sys.executable, "-c", "pass")
    await ended.wait()
    await _taken_by(journal, f"{socket.gethostname()}:{ended.pid}", cut=True)

    await _run(journal, tmp_path)

    takes = await _takes(journal)
    assert [(t["turn"], t["retake"]) for t in takes] == [(1, False), (1, True)]
    assert takes[1]["holder"] == f"{socket.gethostname()}:{os.getpid()}"
    items = await journal.session(SESSION, branch=NAME).get_items()
    assert [i.get("role") for i in items] == ["user", "assistant"]  # the cut turn popped
    assert (await _turns_marked_in(journal))[1] == 1


async def test_a_turn_taken_on_another_host_is_taken_again_only_with_retake(
    journal: Journal, tmp_path: Path
) -> None:
    await _taken_by(journal, "elsewhere.invalid:4242", cut=False)
    with pytest.raises(ExperimentTurnTaken) as refused:
        await _run(journal, tmp_path)
    assert refused.value.running is None
    assert "--retake" in str(refused.value)

    await _run(journal, tmp_path, retake=True)

    assert [(t["turn"], t["retake"]) for t in await _takes(journal)] == [(1, False), (1, True)]
    assert (await _turns_marked_in(journal))[1] == 1


async def test_a_run_that_failed_in_this_process_is_taken_up_by_the_next_run_here(
    journal: Journal, tmp_path: Path
) -> None:
    # A run of this very process that stopped (its turn taken, not finished) is not running:
    # the next run of the experiment in the same process takes the turn again.
    await _taken_by(journal, f"{socket.gethostname()}:{os.getpid()}", cut=True)
    await _run(journal, tmp_path)
    assert [t["retake"] for t in await _takes(journal)] == [False, True]


async def _turns_marked_in(journal: Journal) -> Counter[int]:
    stream = await journal.store.read(branch_stream(SESSION, NAME))
    return Counter(json.loads(e.data)["turn"] for e in stream if e.type == EXPERIMENT_TURN)


async def test_a_reused_process_id_does_not_hold_the_turn(journal: Journal, tmp_path: Path) -> None:
    # The id names a running process, but one that started at another time than the taker.
    async with _a_running_process() as pid:
        await _taken_by(journal, f"{socket.gethostname()}:{pid}", cut=True, started="1", machine="")
        await _run(journal, tmp_path)
    assert [t["retake"] for t in await _takes(journal)] == [False, True]


async def test_a_take_in_another_boot_or_pid_namespace_is_another_host_s(
    journal: Journal, tmp_path: Path
) -> None:
    # Same host name, same (running) process id, but another process namespace: this host
    # cannot tell whether that process runs.
    await _taken_by(journal, f"{socket.gethostname()}:{os.getpid()}", cut=False, machine="x/1")
    with pytest.raises(ExperimentTurnTaken) as refused:
        await _run(journal, tmp_path)
    assert refused.value.running is None
    assert "another host or process namespace" in str(refused.value)


async def test_retake_takes_a_turn_even_from_a_process_that_still_runs(
    journal: Journal, tmp_path: Path
) -> None:
    # A long-lived process whose run raised: it runs, its run does not; a person says so.
    async with _a_running_process() as pid:
        await _taken_by(journal, f"{socket.gethostname()}:{pid}", cut=False)
        await _run(journal, tmp_path, retake=True)
    assert [t["retake"] for t in await _takes(journal)] == [False, True]
    assert (await _turns_marked_in(journal))[1] == 1


async def test_a_turn_taken_again_while_it_ran_is_not_marked_by_the_run_it_was_taken_from(
    journal: Journal,
) -> None:
    first, second = turn_takes.Taker.now(), turn_takes.Taker.now()
    await journal.session(SESSION).fork(turn=1, name=NAME)
    branch = journal.session(SESSION, branch=NAME)
    for taker in (first, second):  # the second took it again, judging the first stopped
        body = {"experiment": NAME, "turn": 1, "holder": taker.holder, "run": taker.run}
        await branch.append_event(EXPERIMENT_TURN_TAKEN, json.dumps(body).encode())
    stream = branch_stream(SESSION, NAME)
    mark = json.dumps({"experiment": NAME, "turn": 1, "status": "answered"}).encode()
    with pytest.raises(ExperimentTurnTaken) as refused:
        await turn_takes.mark_turn(journal.store, branch, stream, 1, mark, first)
    assert refused.value.running is False
    assert "while this run ran it" in str(refused.value)
    assert (await _turns_marked_in(journal))[1] == 0
    await turn_takes.mark_turn(journal.store, branch, stream, 1, mark, second)
    assert (await _turns_marked_in(journal))[1] == 1
