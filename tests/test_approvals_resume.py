"""Resuming a paused run exactly once: the claim (``agentjournal.RunResumed``), processes
that race or die, and lines that answer the same request differently.

A resume takes the paused run up first, at the top stream's exact head, so of two
resumes (session objects or processes) one runs the tools and the other is refused with
:class:`~agentjournal.AlreadyResumed`. A process killed between the answer and the
resume leaves the answer on the record and the call not run; the next resume runs it
once. A process killed inside the tool leaves the run taken: nothing resumes it again
until a person retakes it, and the retake is on the record.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, SQLiteSession
from agents.run_state import RunState

from agentjournal import AlreadyResumed, InvalidInput, Journal, JournalSession
from agentjournal import events as ev
from agentjournal.audit.verify import verify_records
from agentjournal.store.contract import EventStore
from agentjournal.walk import read_tree
from approval_worker import ANSWER, ASK, GATE, graph
from drive import METHODS, Method, drive

SID = "approvals-resume"
WORKER = Path(__file__).with_name("approval_worker.py")


def ran_lines(ran_file: Path) -> list[str]:
    return ran_file.read_text().splitlines() if ran_file.exists() else []


async def verifies(store: EventStore, session_id: str = SID) -> None:
    report = verify_records(await read_tree(store, session_id), {}, allow_uncovered=True)
    assert report.ok, report.text()


async def resumes(method: Method, session: JournalSession, agent: Agent[Any]) -> Any:
    if method == "run":
        return await session.resume(agent)
    state = await session.resumable(agent)
    return await drive(agent, state, method=method, session=session, hooks=session)


async def taken(store: EventStore) -> list[ev.RunResumed]:
    return [
        ev.RunResumed.decode(e.data) for e in await store.read_all() if e.type == ev.RUN_RESUMED
    ]


@pytest.mark.parametrize("method", METHODS)
async def test_two_racing_resumes_run_the_tool_once(
    journal: Journal, method: Method, tmp_path: Path
) -> None:
    """Two session objects (each its own view of the streams) resume one paused run at
    once: one takes it up and runs the tool, the other is refused naming the taker."""
    ran = tmp_path / "ran"
    session = journal.session(SID)
    paused: Any = await drive(graph(ran, resumed=False), ASK, session=session, hooks=session)
    await session.hold(paused)
    await session.approve("r1", by="ann")
    first, second = JournalSession(journal.store, SID), JournalSession(journal.store, SID)
    await asyncio.gather(first.pending_approvals(), second.pending_approvals())  # both warm
    outcomes = await asyncio.gather(
        resumes(method, first, graph(ran, resumed=True)),
        resumes(method, second, graph(ran, resumed=True)),
        return_exceptions=True,
    )
    refused = [o for o in outcomes if isinstance(o, AlreadyResumed)]
    finished = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(refused) == 1, outcomes
    assert len(finished) == 1, outcomes
    assert finished[0].final_output == ANSWER
    assert refused[0].holder == f"{os.uname().nodename}:{os.getpid()}"
    assert len(ran_lines(ran)) == 1
    (claim,) = await taken(journal.store)
    assert claim.retake is False
    with pytest.raises(AlreadyResumed, match="its calls have run") as again:
        await session.resume(graph(ran, resumed=True), retake=True)
    assert again.value.ran
    assert len(ran_lines(ran)) == 1
    await verifies(journal.store)


async def test_a_resume_refused_writes_nothing_and_a_bad_graph_takes_nothing(
    journal: Journal, tmp_path: Path
) -> None:
    """A resume before every answer, or with a graph the stored run cannot be loaded into,
    takes nothing up: the next resume with the right graph runs the tool."""
    ran = tmp_path / "ran"
    session = journal.session(SID)
    paused: Any = await drive(graph(ran, resumed=False), ASK, session=session, hooks=session)
    await session.hold(paused)
    before = len(await journal.store.read_all())
    with pytest.raises(InvalidInput, match="'r1' have no answer yet"):
        await session.resume(graph(ran, resumed=True))
    await session.approve("r1", by="ann")
    with pytest.raises(InvalidInput, match=r"cannot be loaded into agent .triage."):
        await session.resume(Agent(name="triage"))  # the stored run's agents are not there
    assert len(await journal.store.read_all()) == before + 1  # the answer only
    assert (await session.resume(graph(ran, resumed=True))).final_output == ANSWER
    assert len(ran_lines(ran)) == 1


async def test_answers_on_a_branch_and_on_main_are_each_their_own(
    journal: Journal, tmp_path: Path
) -> None:
    """The same request id asked on main and, after a fork before the ask, on a branch:
    each line sees its own question; approved on the branch and rejected on main, the
    tool runs once (on the branch), each line's history is the SDK's, and it verifies."""
    ran = tmp_path / "ran"
    main = journal.session(SID)
    await main.add_items([{"role": "user", "content": "hello"}])
    await main.add_items([{"role": "assistant", "content": "hi", "type": "message"}])
    paused: Any = await drive(graph(ran, resumed=False), ASK, session=main, hooks=main)
    await main.hold(paused)
    branch_id = await main.create_branch_from_turn(2, "retry")
    assert main.branch == branch_id
    branch = journal.session(SID, branch=branch_id)
    assert await branch.pending_approvals() == []
    paused = await drive(graph(ran, resumed=False), ASK, session=branch, hooks=branch)
    await branch.hold(paused)
    (on_branch,) = await branch.pending_approvals()
    main = journal.session(SID)
    (on_main,) = await main.pending_approvals()
    assert on_branch.request_id == on_main.request_id == "r1"
    assert on_branch.stream != on_main.stream
    await branch.approve("r1", by="ann", reason="fine on the branch")
    await main.reject("r1", by="bob", reason="not on main")
    assert (await branch.resume(graph(ran, resumed=True))).final_output == ANSWER
    assert (await main.resume(graph(ran, resumed=True))).final_output == ANSWER
    assert len(ran_lines(ran)) == 1

    sdk_main, sdk_branch = SQLiteSession("main"), SQLiteSession("branch")
    try:
        for sdk, approve in ((sdk_main, False), (sdk_branch, True)):
            await sdk.add_items([{"role": "user", "content": "hello"}])
            await sdk.add_items([{"role": "assistant", "content": "hi", "type": "message"}])
            stopped: Any = await drive(graph(tmp_path / "x", resumed=False), ASK, session=sdk)
            agent = graph(tmp_path / "x", resumed=True)
            state = await RunState.from_string(agent, stopped.to_state().to_string())
            (item,) = state.get_interruptions()
            state.approve(item) if approve else state.reject(item)
            await drive(agent, state, session=sdk)
        expect_main, expect_branch = await sdk_main.get_items(), await sdk_branch.get_items()
    finally:
        sdk_main.close()
        sdk_branch.close()
    assert await main.get_items() == expect_main
    assert await branch.get_items() == expect_branch
    await verifies(journal.store)


# -- processes -------------------------------------------------------------------------------


async def start_step(
    uri: str, ran: Path, step: str, name: str = "ann"
) -> asyncio.subprocess.Process:
    """Start one worker step in a process of its own, imported and waiting at its gate."""
    env = {
        **os.environ,
        GATE: "1",
        "PYTHONPATH": os.pathsep.join([str(WORKER.parent), *sys.path]),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(WORKER),
        uri,
        SID,
        str(ran),
        step,
        name,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None
    ready = await asyncio.wait_for(process.stdout.readline(), 120)
    assert ready == b"ready\n", ready
    return process


async def finish_step(process: asyncio.subprocess.Process) -> tuple[int, dict[str, Any]]:
    """Open a started step's gate and wait for it: its exit code and JSON outcome."""
    out, err = await asyncio.wait_for(process.communicate(b"go\n"), 120)
    code = process.returncode
    assert code is not None
    assert code in (0, -signal.SIGKILL), err.decode()
    lines = out.decode().splitlines()
    return code, json.loads(lines[-1]) if lines else {}


async def run_step(uri: str, ran: Path, step: str, name: str = "ann") -> tuple[int, dict[str, Any]]:
    """Run one worker step in a process of its own: its exit code and JSON outcome."""
    return await finish_step(await start_step(uri, ran, step, name))


async def race(uri: str, ran: Path, *steps: tuple[str, str]) -> list[tuple[int, dict[str, Any]]]:
    """Start every step, then open their gates at once: their outcomes in order."""
    started = await asyncio.gather(*(start_step(uri, ran, step, name) for step, name in steps))
    return list(await asyncio.gather(*map(finish_step, started)))


@pytest.mark.slow  # seven processes, each importing the SDK
@pytest.mark.parametrize("uri_kind", ["sqlite-file", "kurrentdb"])
async def test_processes_that_race_and_die_run_the_tool_exactly_once(
    uri_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """One process pauses and exits; two answer at once and are killed right after
    (SIGKILL between the answer and the resume): one answer lands. Two resume at once:
    the tool runs exactly once. A later resume is refused, and the session verifies."""
    uri = (
        f"sqlite:///{tmp_path / 'journal.db'}"
        if uri_kind == "sqlite-file"
        else request.getfixturevalue("kurrentdb_double").uri
    )
    ran = tmp_path / "ran"
    assert await run_step(uri, ran, "pause") == (0, {"held": ["r1"]})
    answers = await race(uri, ran, ("approve-and-die", "ann"), ("approve-and-die", "bob"))
    assert [code for code, _ in answers] == [-signal.SIGKILL] * 2
    landed = [o["landed"] for _, o in answers if "landed" in o]
    assert len(landed) == 1, answers
    assert [o["refused"] for _, o in answers if "refused" in o] == landed
    assert ran_lines(ran) == []

    resumed = [o for _, o in await race(uri, ran, ("resume", "ann"), ("resume", "ann"))]
    assert sorted(map(sorted, resumed)) == [["final"], ["ran", "refused"]], resumed
    assert len(ran_lines(ran)) == 1
    _, again = await run_step(uri, ran, "retake")
    assert again["ran"] is True, again
    assert len(ran_lines(ran)) == 1
    async with Journal.open(uri) as journal:
        (answer,) = [e for e in await journal.store.read_all() if e.type == ev.INTERRUPT_RESOLVED]
        assert ev.ApprovalDecided.decode(answer.data).by == landed[0]
        await verifies(journal.store)


@pytest.mark.slow  # four processes, each importing the SDK
async def test_a_taker_killed_inside_the_tool_leaves_the_run_taken_until_a_retake(
    tmp_path: Path,
) -> None:
    """The resuming process dies inside the tool: the run stays taken (a resume is
    refused, saying its calls have not all run); a person's retake runs it to its end,
    and both takings are on the record."""
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    ran = tmp_path / "ran"
    await run_step(uri, ran, "pause")
    await run_step(uri, ran, "approve")
    code, _ = await run_step(uri, ran, "resume-and-die-in-tool")
    assert code == -signal.SIGKILL
    assert len(ran_lines(ran)) == 1
    code, refused = await run_step(uri, ran, "resume")
    assert refused["ran"] is False
    assert "retake=True" in refused["refused"]
    assert len(ran_lines(ran)) == 1
    assert await run_step(uri, ran, "retake") == (0, {"final": ANSWER})
    assert len(ran_lines(ran)) == 2
    async with Journal.open(uri) as journal:
        assert [c.retake for c in await taken(journal.store)] == [False, True]
        await verifies(journal.store)
