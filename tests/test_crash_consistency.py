"""Crash consistency: a handoff-heavy writer SIGKILLed at random moments leaves a whole journal.

A worker process (``tests/crash_worker.py``) runs scripted handoff conversations on one
session of a SQLite file: nested handoffs with tool calls, a tool call beside a
handoff, two handoffs in one response, plain turns, runs that fail inside a subagent,
pops and clears. The test waits until it has done some work (0 to 4 finished steps,
or not even an open journal, then 0-300 ms more) and kills it with SIGKILL. Then,
from a fresh journal, every stream of the session tree must be whole
(:func:`tree_check.check_session_tree`: twins, gapless revisions and indices, exact
replay), and a new run on the session must succeed, close what the killed run left
open with outcome ``error``, and leave nothing open. Kills accumulate on one growing
session, and a new session starts now and then, all in one file.

The default run does ``AGENTJOURNAL_CRASH_KILLS`` (8) kills. The full run::

    AGENTJOURNAL_CRASH_KILLS=120 pytest tests/test_crash_consistency.py -q

``AGENTJOURNAL_CRASH_SEED`` fixes the random choices (timing still varies); a failure
names the seed, the kill, the session and the file to inspect.
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
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agentjournal import Journal, events
from agentjournal.store import NewEvent, StreamState
from crash_worker import GATE, failing, nested
from drive import drive
from tree_check import check_session_tree

pytestmark = pytest.mark.slow  # a crash loop: a writer process SIGKILLed again and again


KILLS = int(os.environ.get("AGENTJOURNAL_CRASH_KILLS", "8"))
SEED = int(os.environ.get("AGENTJOURNAL_CRASH_SEED", str(random.randrange(10**6))))
WORKER = Path(__file__).with_name("crash_worker.py")
LINE_TIMEOUT = 60.0


@dataclass
class Worker:
    """A worker process, imported and waiting at its gate."""

    process: asyncio.subprocess.Process
    session_id: str
    seed: int
    stderr: Path
    lines: list[str]

    @classmethod
    async def start(cls, uri: str, session_id: str, seed: int, directory: Path) -> Worker:
        stderr = directory / f"worker-{seed}.err"
        with stderr.open("wb") as sink:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(WORKER),
                uri,
                session_id,
                str(seed),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=sink,
                env={**os.environ, GATE: "1"},
            )
        return cls(process, session_id, seed, stderr, [])

    async def line(self) -> str:
        """The next line the worker prints; fails if it ended on its own."""
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), LINE_TIMEOUT)
        if not raw:
            await self.process.wait()
            raise AssertionError(
                f"worker {self.seed} ended by itself (exit {self.process.returncode}) after "
                f"{self.lines}:\n{self.stderr.read_text()}"
            )
        text = raw.decode().strip()
        self.lines.append(text)
        return text

    async def go(self) -> None:
        assert await self.line() == "ready"
        assert self.process.stdin is not None
        self.process.stdin.write(b"go\n")
        await self.process.stdin.drain()

    async def kill(self) -> None:
        """SIGKILL it; fails if it had already ended by itself."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)
        if await self.process.wait() != -signal.SIGKILL:
            while True:
                await self.line()  # raises at the end of its output, showing its stderr

    async def discard(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)
        await self.process.wait()


async def test_sigkilled_writer_leaves_a_consistent_tree(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    uri = f"sqlite:///{tmp_path / 'crash.db'}"
    sessions = 1
    mid_handoff = 0  # kills that left a subagent open
    started = time.monotonic()

    async def spawn(kill: int) -> Worker:
        nonlocal sessions
        if kill > 0 and rng.random() < 0.25:
            sessions += 1
        # Every worker's seed differs, so its call ids (and subsession streams) do too.
        seed = 1000 * rng.randrange(10**6) + kill
        return await Worker.start(uri, f"crash-{sessions}", seed, tmp_path)

    worker = await spawn(0)
    try:
        for kill in range(KILLS):
            await worker.go()
            steps = rng.randint(-1, 4)  # -1: kill while it may still be opening the journal
            if steps >= 0:
                while await worker.line() != "open":
                    pass
                for _ in range(steps):
                    await worker.line()
            await asyncio.sleep(rng.uniform(0, 0.3))
            await worker.kill()
            victim = worker
            if kill + 1 < KILLS:
                worker = await spawn(kill + 1)  # it imports the SDK while we check
            problems, left_open = await check_after_kill(uri, victim.session_id, tag=f"check{kill}")
            mid_handoff += left_open > 0
            assert not problems, (
                f"seed {SEED}, kill {kill}, session {victim.session_id}, file {tmp_path}, "
                f"worker {victim.seed} printed {victim.lines}:\n" + "\n".join(problems)
            )
    finally:
        await worker.discard()
    elapsed = time.monotonic() - started
    print(
        f"{KILLS} kills ({mid_handoff} with a subagent open) on {sessions} sessions "
        f"in {elapsed:.1f} s (seed {SEED})"
    )


async def check_after_kill(uri: str, session_id: str, *, tag: str) -> tuple[list[str], int]:
    """The tree is whole, and a new run closes what the killed run left open.

    Returns the problems and how many subagents the killed run left open.
    """
    async with Journal.open(uri) as journal:
        problems = await check_session_tree(journal.store, session_id)
        if problems:
            return problems, 0
        session = journal.session(session_id)
        left_open = await session.open_subagents()
        await drive(nested(tag), "are you still there?", session=session, hooks=session)
        still_open = await session.open_subagents()
        if still_open:
            problems.append(f"open after a new run: {still_open}")
        for subagent in left_open:
            last = (await journal.store.read(subagent.stream, backwards=True, limit=1))[0]
            outcome = json.loads(last.data).get("outcome")
            if last.type != events.SUBAGENT_COMPLETED or outcome != "error":
                problems.append(f"{subagent.stream} left open ends with {last.type} {outcome}")
        problems += await check_session_tree(journal.store, session_id, all_closed=True)
        return problems, len(left_open)


# -- the checker finds what it is meant to find ----------------------------------------


@pytest.fixture
async def file_journal(tmp_path: Path) -> AsyncIterator[Journal]:
    """A journal on a SQLite file (the gap test edits the file behind the store's back)."""
    async with Journal.open(f"sqlite:///{tmp_path / 'check.db'}") as journal:
        yield journal


async def test_checker_passes_a_whole_tree(file_journal: Journal) -> None:
    session = file_journal.session("whole")
    await drive(nested("a"), "refund", session=session, hooks=session)
    await session.pop_item()
    await drive(nested("b"), "again", method="run_streamed", session=session, hooks=session)
    assert await check_session_tree(file_journal.store, "whole", all_closed=True) == []


@pytest.mark.parametrize("side", ["parent", "child"])
async def test_checker_reports_a_lifecycle_event_without_its_twin(
    file_journal: Journal, side: str
) -> None:
    session = file_journal.session("half")
    await drive(nested("a"), "refund", session=session, hooks=session)
    assert await check_session_tree(file_journal.store, "half") == []
    child = "AgentSubsession-half-sub-billing-h9"
    subagent = events.Subagent(
        "sub-billing-h9", "billing", "triage", "h9", child, session.stream, ""
    )
    twin = uuid.uuid4()  # names an event that was never written
    data = events.encode_subagent_started(
        subagent, item_json=None, twin=twin, timestamp=datetime.now(UTC)
    )
    half = NewEvent(events.SUBAGENT_STARTED, data, {events.TWIN_KEY: str(twin)})
    if side == "parent":
        head = await file_journal.store.head(session.stream)
        assert head is not None
        await file_journal.store.append(session.stream, [half], expected=head)
    else:
        await file_journal.store.append(child, [half], expected=StreamState.NO_STREAM)
    problems = await check_session_tree(file_journal.store, "half")
    other = child if side == "parent" else session.stream
    assert any(p.startswith("SubagentStarted") and f"no twin on {other}" in p for p in problems), (
        problems
    )


async def test_checker_reports_revision_and_index_gaps(
    file_journal: Journal, tmp_path: Path
) -> None:
    session = file_journal.session("gap")
    await drive(nested("a"), "refund", session=session, hooks=session)
    await drive(nested("b"), "again", session=session, hooks=session)
    raw = sqlite3.connect(tmp_path / "check.db")  # revision 3: the first SubagentStarted
    raw.execute(
        "DELETE FROM events WHERE revision = 3 AND stream_id = "
        "(SELECT id FROM streams WHERE name = ?)",
        (session.stream,),
    )
    raw.commit()
    raw.close()
    problems = await check_session_tree(file_journal.store, "gap")
    assert any("revisions are not gapless from 0: 0-2, 4-" in p for p in problems), problems
    assert any("aj.index is not gapless" in p for p in problems), problems


async def test_checker_reports_an_open_subagent_when_all_must_be_closed(
    file_journal: Journal,
) -> None:
    session = file_journal.session("open")
    with pytest.raises(RuntimeError):
        await drive(failing("a"), "help", session=session, hooks=session)
    assert await check_session_tree(file_journal.store, "open") == []
    problems = await check_session_tree(file_journal.store, "open", all_closed=True)
    assert problems == ["AgentSubsession-open-sub-billing-h1-a: subagent never completed"]
