"""A store call that fails, parks or loses a race at one exact moment: reads and writes end
cleanly, and what is written is written once.

A store wrapper stands in for another process or a failing store at that moment (a read
that fails while its siblings read on, a read that parks until cancelled, a write
cancelled while its checkpoint is in flight, a race lost on the authority log); everything
beneath it is a real SQLite file, and runs are the SDK's real ``Runner`` on scripted models.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, function_tool, handoff
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import (
    Journal,
    JournalSession,
    Policy,
    SigningKey,
    StoreUnavailable,
)
from agentjournal.store import (
    AppendRequest,
    AppendResult,
    EventStore,
    Expected,
    NewEvent,
    RecordedEvent,
)
from drive import drive
from handoff_scenarios import support_team

POLICY = Path(__file__).resolve().parents[1] / "samples" / "policy.yml"
SID = "s1"


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def body(event: RecordedEvent) -> Any:
    return json.loads(event.data)


class Wrapped:
    """A real store, passed through (subclasses intercept one call at one moment)."""

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- reads -----------------------------------------------------------------------------------------


class FailingSiblings(Wrapped):
    """Reads of the subsession ending ``-h-a`` fail once ``-h-b``'s read is under way,
    which parks until released."""

    def __init__(self, inner: EventStore) -> None:
        super().__init__(inner)
        self.running = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def read(self, stream: str, **kwargs: Any) -> list[RecordedEvent]:
        if stream.endswith("-h-a"):
            await self.started.wait()
            raise StoreUnavailable("the store went away")
        if stream.endswith("-h-b"):
            self.running += 1
            self.started.set()
            try:
                await self.release.wait()
            finally:
                self.running -= 1
        return await self.inner.read(stream, **kwargs)


async def test_a_failed_tree_read_cancels_its_siblings(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}") as journal:
        session = journal.session(SID)
        for tag in ("a", "b"):
            team = support_team(call_ids=(f"t-{tag}", f"h-{tag}"))
            await drive(team, f"run {tag}", session=session, hooks=session)
        failing = FailingSiblings(journal.store)
        try:
            with pytest.raises(StoreUnavailable, match="went away"):
                await JournalSession(failing, SID).get_items()
            await asyncio.sleep(0)
            assert failing.running == 0  # nobody reads on for a caller that has left
        finally:
            failing.release.set()


class ParkingReads(Wrapped):
    """Once armed, the next forward read of a subsession parks (until cancelled)."""

    def __init__(self, inner: EventStore) -> None:
        super().__init__(inner)
        self.armed = False
        self.parked = asyncio.Event()

    async def read(self, stream: str, **kwargs: Any) -> list[RecordedEvent]:
        if self.armed and stream.startswith("AgentSubsession") and not kwargs.get("backwards"):
            self.armed = False
            self.parked.set()
            await asyncio.Event().wait()
        return await self.inner.read(stream, **kwargs)


async def test_a_catch_up_cut_short_keeps_following_the_subsession(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    async with Journal.open(uri) as a, Journal.open(uri) as b:
        parking = ParkingReads(b.store)
        reader = JournalSession(parking, SID)

        @function_tool
        async def lookup_order(order_id: str) -> str:
            """Look up an order."""
            await reader.get_items()  # the reader loads the tree while billing is open
            return "charged twice"

        billing = Agent(
            name="billing",
            model=ScriptedModel(
                [
                    [function_call("lookup_order", {"order_id": "42"}, call_id="t1")],
                    [assistant_message("refunded", item_id="m1")],
                ]
            ),
            tools=[lookup_order],
        )
        triage = Agent(
            name="triage",
            model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]]),
            handoffs=[handoff(billing)],
        )
        writer = a.session(SID)
        await drive(triage, "hi", session=writer, hooks=writer)
        expected = await writer.get_items()

        # The reader's catch-up has read the parent's close of billing; it is cancelled
        # while reading the rest of billing's subsession.
        parking.armed = True
        catching_up = asyncio.ensure_future(reader.get_items())
        await parking.parked.wait()
        catching_up.cancel()
        with pytest.raises(asyncio.CancelledError):
            await catching_up
        assert await reader.get_items() == expected


# -- writes ----------------------------------------------------------------------------------------


class ParkAfterHandoffCheckpoint(Wrapped):
    """After a write that opens a subagent, the next ledger append lands, then parks."""

    def __init__(self, inner: EventStore) -> None:
        super().__init__(inner)
        self.armed = False
        self.parked = asyncio.Event()

    async def _after(self, requests: Sequence[AppendRequest]) -> None:
        if any(e.type == "SubagentStarted" for r in requests for e in r.events):
            self.armed = True
        elif self.armed and any(r.stream.startswith("AgentLedger") for r in requests):
            self.armed = False
            self.parked.set()
            await asyncio.Event().wait()

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        result = await self.inner.append(stream, events, expected=expected)
        await self._after([AppendRequest(stream, list(events), expected)])
        return result

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        results = await self.inner.append_many(requests)
        await self._after(requests)
        return results


async def test_a_write_cancelled_during_its_checkpoint_records_its_grant_once(
    tmp_path: Path,
) -> None:
    key = SigningKey.generate()
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}", signing_key=key) as journal:
        gate = ParkAfterHandoffCheckpoint(journal.store)
        session = JournalSession(
            gate,
            "c1",
            signing_key=key,
            checkpoint_every=1,
            policy=Policy.load(POLICY),
        )

        async def run() -> None:
            async with session.run_scope():
                await drive(session.guard(support_team()), "hi", session=session, hooks=session)

        running = asyncio.ensure_future(run())
        await gate.parked.wait()  # the handoff write landed; its checkpoint is in flight
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        recorded = await journal.store.read_all()
    held = [body(e)["agent"] for e in recorded if e.type == "agentjournal.AuthorityHeld"]
    granted = [body(e)["agent"] for e in recorded if e.type == "agentjournal.AuthorityGranted"]
    assert held == ["triage", "billing"]  # billing's grant once: with its SubagentStarted
    assert granted == ["triage"]


class LosingRace(Wrapped):
    """Counts the session-stream events read; before the first append to the authority
    log, ``other`` (another process) resets the authority first."""

    def __init__(self, inner: EventStore, other: Callable[[], Awaitable[None]]) -> None:
        super().__init__(inner)
        self.other: Callable[[], Awaitable[None]] | None = other
        self.history_read = 0

    async def read(self, stream: str, **kwargs: Any) -> list[RecordedEvent]:
        found = await self.inner.read(stream, **kwargs)
        if stream.startswith("AgentSession-"):
            self.history_read += len(found)
        return found

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        if self.other is not None and stream.startswith("AgentAuthority-"):
            other, self.other = self.other, None
            await other()
        return await self.inner.append(stream, events, expected=expected)


async def test_a_lost_race_on_the_authority_log_reads_no_history(tmp_path: Path) -> None:
    policy = Policy.load(POLICY)
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}") as journal:
        await journal.session(SID, policy=policy).add_items([user(f"m{n}") for n in range(200)])
        other = JournalSession(journal.store, SID, policy=policy)
        racing = LosingRace(
            journal.store, lambda: other.reset_authority("billing", reason="another process")
        )
        fresh = JournalSession(racing, SID, policy=policy)
        await fresh.reset_authority("triage", reason="operator")
        assert racing.other is None  # the race was run, and lost
        assert racing.history_read == 0
        log = await journal.store.read(f"AgentAuthority-{SID}")
    resets = [body(e)["agent"] for e in log if e.type == "agentjournal.AuthorityReset"]
    assert resets == ["billing", "triage"]  # the retry landed after the other's reset
