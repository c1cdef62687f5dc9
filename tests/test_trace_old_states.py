"""A ``trace export --follow`` whose saved state predates lines (DESIGN §14.1, "Lines").

Such a state never saw the ``BranchForked`` of a branch forked before it was saved. Resumed,
the follower learns the branch on its first event: the command reads the branch's
``BranchStarted`` (the fork's twin) from the store, so the branch's runs carry its real name
and fork; the pure projector, without a store, names it by its stream's key.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from agents import Agent
from agents.testing import ScriptedModel, assistant_message

from agentjournal import Journal
from agentjournal.read import projections
from agentjournal.read.traces import Projector
from agentjournal.records import Record
from agentjournal.store import open_store
from agentjournal.streams import branch_key, branch_stream
from agentjournal.walk import read_tree
from drive import drive
from pre_lines import pre_lines_state

TESTS = Path(__file__).resolve().parent
SID = "old1"
NAME = "B one"  # a name that needs hashing: its stream's key is not the name


def _hello() -> Agent[Any]:
    return Agent(name="triage", model=ScriptedModel([[assistant_message("hi")]]))


def _pre_lines(records: list[Record]) -> tuple[bytes, int]:
    """What a follower from before lines saved just after the fork, and the position it
    saved at."""
    state, read = pre_lines_state(SID, records, branch_stream(SID, NAME))
    position = records[read - 1].position
    assert position is not None
    return state, position


def _write(uri: str) -> list[Record]:
    async def go() -> list[Record]:
        async with Journal.open(uri) as journal:
            main = journal.session(SID)
            await drive(_hello(), "hello", session=main, hooks=main)
            await main.fork(name=NAME)
            b = journal.session(SID, branch=NAME)
            await drive(_hello(), "on b", session=b, hooks=b)
            tree = await read_tree(journal.store, SID)
        return sorted(
            (r for r in tree.records() if r.position is not None), key=lambda r: r.position or 0
        )

    return asyncio.run(go())


def _branch_runs(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        s
        for s in spans
        if s["name"] == "agentjournal.run" and "agentjournal.branch" in s["attributes"]
    ]


def test_the_pure_projector_names_a_branch_it_never_saw_fork_by_its_key(tmp_path: Path) -> None:
    records = _write(f"sqlite:///{tmp_path / 'j.db'}")
    state, position = _pre_lines(records)
    resumed = Projector.load(state)
    sent = [s for r in records if (r.position or 0) > position for s in resumed.feed(r)]
    sent += resumed.finish()
    (run,) = _branch_runs([s.as_json() for s in sent])
    assert run["attributes"]["agentjournal.branch"] == branch_key(NAME) != NAME
    assert "agentjournal.fork_event_id" not in run["attributes"]  # not known: not said
    assert not run["links"]
    # The learning survives a save: a branch may first speak long after the resume.
    assert json.loads(resumed.dump())["learn_branches"] is True
    assert Projector.load(resumed.dump()).learns(branch_stream(SID, "another"))


def test_a_follower_resumed_from_a_pre_lines_state_exports_a_branch_with_its_fork(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'j.db'}"
    records = _write(uri)
    state, position = _pre_lines(records)

    async def save() -> None:
        store = await open_store(uri)
        try:
            await projections.save(store, "old", position=position, state=state, after=None)
        finally:
            await store.close()

    asyncio.run(save())
    forked = next(r for r in records if r.type == "agentjournal.BranchForked")
    out = tmp_path / "followed.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
    follower = subprocess.Popen(
        [sys.executable, "-m", "agentjournal.cli", "trace", "export", SID, "--follow",
         "--name", "old", "--jsonl", str(out), "--idle", "0.3", "--uri", uri],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=TESTS,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        runs: list[dict[str, Any]] = []
        while not runs:
            assert follower.poll() is None, follower.stderr.read() if follower.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
            if out.exists():
                text = out.read_text()
                lines = [line for line in text.splitlines(keepends=True) if line[-1:] == "\n"]
                runs = _branch_runs([json.loads(line) for line in lines])
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(20) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    (run,) = runs
    attributes = run["attributes"]
    assert attributes["agentjournal.branch"] == NAME
    assert attributes["agentjournal.parent_branch"] == "main"
    assert attributes["agentjournal.fork_event_id"] == forked.id
    assert attributes["agentjournal.fork_cut_position"] == forked.position
