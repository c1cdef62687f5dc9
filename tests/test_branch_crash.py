"""Crash consistency of forks: a forking writer SIGKILLed at random moments leaves either
no branch or a whole one.

A worker process (``tests/branch_crash_worker.py``) forks random lines of one session
(main or any branch, before a random item or at the head) and writes on both sides of
each fork. The test kills it with SIGKILL after 0-4 printed lines and 0-100 ms more,
then checks the file from a fresh journal: every fork is whole on all three streams it
touches (``BranchForked`` on the parent line, ``BranchStarted`` at revision 0 of the
branch stream, ``BranchAdded`` in the registry, each naming the others) and nothing of a
half fork is anywhere; each stream's revisions are gapless; each branch reads as its
parent's first ``prefix_items`` items, then its own. The next worker then forks on in
the same file, so a killed fork never blocks the ones after it.

``AGENTJOURNAL_BRANCH_CRASH_KILLS`` (default 4) sets the kills;
``AGENTJOURNAL_CRASH_SEED`` fixes the random choices.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from agentjournal import Journal, events
from agentjournal.errors import StreamNotFound
from agentjournal.store import EventStore, NewEvent, RecordedEvent, StreamState
from agentjournal.streams import branch_stream, branches_stream, session_stream

pytestmark = pytest.mark.slow  # a crash loop: a forking process SIGKILLed again and again


KILLS = int(os.environ.get("AGENTJOURNAL_BRANCH_CRASH_KILLS", "4"))
SEED = int(os.environ.get("AGENTJOURNAL_CRASH_SEED", str(random.randrange(10**6))))
WORKER = Path(__file__).with_name("branch_crash_worker.py")
SESSION = "forks"


async def test_sigkilled_fork_leaves_no_branch_or_a_whole_one(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    path = tmp_path / "forks.db"
    uri = f"sqlite:///{path}"
    forked = 0
    for kill in range(KILLS):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            uri,
            SESSION,
            str(1000 * kill + rng.randrange(1000)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        printed: list[str] = []
        for _ in range(rng.randint(1, 5)):
            line = await asyncio.wait_for(process.stdout.readline(), 60)
            if not line:
                break
            printed.append(line.decode().strip())
        await asyncio.sleep(rng.uniform(0, 0.1))
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL)
        code = await process.wait()
        assert process.stderr is not None
        assert code == -signal.SIGKILL, (
            f"worker ended by itself ({code}) after {printed}: "
            f"{(await process.stderr.read()).decode()}"
        )
        async with Journal.open(uri) as journal:
            problems, whole = await check_forks(journal.store, path)
            assert not problems, f"seed {SEED}, kill {kill}, file {path}:\n" + "\n".join(problems)
            problems = await check_branch_items(journal, whole)
            assert not problems, f"seed {SEED}, kill {kill}, file {path}:\n" + "\n".join(problems)
            forked = len(whole)
    assert forked > 0, "no fork was ever made: the kills came too early to test anything"
    print(f"{KILLS} kills, {forked} whole forks (seed {SEED})")


async def check_forks(
    store: EventStore, path: Path
) -> tuple[list[str], dict[str, dict[str, object]]]:
    """Every fork whole on its three streams, nothing half; returns the branches by name
    with their ``BranchStarted`` data."""
    problems: list[str] = []
    registry = await _read(store, branches_stream(SESSION))
    added = {json.loads(e.data)["branch"]: json.loads(e.data) for e in registry}
    if len(added) != len(registry):
        problems.append("a branch is in the registry twice")
    with sqlite3.connect(path) as db:
        branch_streams = {
            name
            for (name,) in db.execute("SELECT name FROM streams WHERE name LIKE 'AgentBranch-%'")
        }
    expected = {branch_stream(SESSION, name) for name in added}
    if branch_streams != expected:
        problems.append(
            f"branch streams {sorted(branch_streams - expected)} not in the registry, "
            f"{sorted(expected - branch_streams)} in it without a stream"
        )
    tops = [session_stream(SESSION), *sorted(expected & branch_streams)]
    forks: dict[str, int] = {}
    for top in tops:
        stream = await _read(store, top)
        if [e.revision for e in stream] != list(range(len(stream))):
            problems.append(f"{top}: revisions not gapless")
        for event in stream:
            if event.type == events.BRANCH_FORKED:
                name = json.loads(event.data)["branch"]
                forks[name] = forks.get(name, 0) + 1
    if set(forks) != set(added) or any(n != 1 for n in forks.values()):
        problems.append(f"BranchForked {forks} against the registry {sorted(added)}")
    started: dict[str, dict[str, object]] = {}
    for name, entry in added.items():
        first = (await _read(store, branch_stream(SESSION, name)))[:1]
        if not first or first[0].type != events.BRANCH_STARTED:
            problems.append(f"{name}: its stream does not open with BranchStarted")
            continue
        data = json.loads(first[0].data)
        if data["branch"] != name or data["parent"] != entry["parent"]:
            problems.append(f"{name}: BranchStarted names {data['branch']} of {data['parent']}")
        started[name] = data
    return problems, started


async def _read(store: EventStore, stream: str) -> list[RecordedEvent]:
    """The stream's events; none if the worker was killed before it wrote the first."""
    try:
        return await store.read(stream)
    except StreamNotFound:
        return []


async def check_branch_items(journal: Journal, started: dict[str, dict[str, object]]) -> list[str]:
    """Each branch reads as its parent's first ``prefix_items`` items, then its own."""
    problems: list[str] = []
    for name, data in started.items():
        parent = str(data["parent"])
        prefix = int(str(data["prefix_items"]))
        mine = await journal.session(SESSION, branch=name).get_items()
        theirs = await journal.session(SESSION, branch=parent).get_items()
        if mine[:prefix] != theirs[:prefix]:
            problems.append(f"{name}: its first {prefix} items are not {parent}'s")
        strangers = [
            item for item in mine[prefix:] if not str(item.get("content")).startswith(f"{name} ")
        ]
        if strangers:
            problems.append(f"{name}: items of another line after its prefix: {strangers}")
    return problems


# -- the checker finds what it is meant to find ----------------------------------------


async def test_checker_reports_each_half_of_a_fork(tmp_path: Path) -> None:
    path = tmp_path / "half.db"
    async with Journal.open(f"sqlite:///{path}") as journal:
        root = journal.session(SESSION)
        await root.add_items([{"role": "user", "content": "hello"}])
        await root.fork(name="whole")
        problems, started = await check_forks(journal.store, path)
        assert problems == []
        assert set(started) == {"whole"}
        # A registry entry with no fork behind it: the half a non-atomic fork could leave.
        entry = {"branch": "ghost", "stream": branch_stream(SESSION, "ghost"), "parent": "main"}
        await journal.store.append(
            branches_stream(SESSION),
            [NewEvent(events.BRANCH_ADDED, json.dumps({**entry, "event": "x"}).encode())],
            expected=StreamState.ANY,
        )
        problems, _ = await check_forks(journal.store, path)
        assert any("in it without a stream" in p for p in problems), problems
        assert any("BranchForked" in p for p in problems), problems
