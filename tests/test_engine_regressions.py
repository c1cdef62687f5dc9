"""Regressions the review of issue 14 found in the restructured engine, one test each.

Each test is a reviewer's reproduction made deterministic: real SQLite files, the
KurrentDB double over real gRPC, the SDK's real ``Runner`` on scripted models. Store
wrappers stand in for another process or a failing store at one exact moment (a race
lost on the authority log, a read that parks, a read that fails); everything beneath
them is the real store.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    OutputGuardrailTripwireTriggered,
    RunContextWrapper,
    function_tool,
    handoff,
    output_guardrail,
)
from agents.memory import OpenAIResponsesCompactionSession
from agents.testing import ScriptedModel, assistant_message, function_call
from openai import AsyncOpenAI

from agentjournal import (
    CodecError,
    Journal,
    JournalSession,
    Policy,
    SigningKey,
    StoreUnavailable,
    export_bundle,
    read_tree,
)
from agentjournal.records import DamagedEvent
from agentjournal.store import (
    AppendRequest,
    AppendResult,
    EventStore,
    Expected,
    NewEvent,
    RecordedEvent,
    StreamState,
)
from agentjournal.testing.kurrentdb_double import ThreadedKurrentDBDouble
from drive import drive
from http_stub import HttpStub, Received, Reply

POLICY = Path(__file__).resolve().parents[1] / "samples" / "policy.yml"
SID = "s1"


# -- helpers ------------------------------------------------------------------------


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def support_team(
    *, call_ids: tuple[str, str] = ("t1", "h1"), billing_steps: list[Any] | None = None
) -> Agent[Any]:
    """triage looks an order up, then hands off to billing, which replies (or fails)."""

    @function_tool
    def lookup_order(order_id: str) -> str:
        """Look up an order."""
        return f"order {order_id}: charged twice"

    billing = Agent(
        name="billing",
        model=ScriptedModel(billing_steps or [[assistant_message("refunded", item_id="m1")]]),
    )
    return Agent(
        name="triage",
        model=ScriptedModel(
            [
                [function_call("lookup_order", {"order_id": "42"}, call_id=call_ids[0])],
                [function_call("transfer_to_billing", {}, call_id=call_ids[1])],
            ]
        ),
        tools=[lookup_order],
        handoffs=[handoff(billing)],
    )


def body(event: RecordedEvent) -> Any:
    return json.loads(event.data)


class Wrapped:
    """A real store, passed through (subclasses intercept one call at one moment)."""

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# -- reads ------------------------------------------------------------------------------


async def test_export_during_an_outage_is_store_unavailable(
    kurrentdb_double: ThreadedKurrentDBDouble,
) -> None:
    # An outage is the documented StoreUnavailable (retry later), not a damaged event.
    async with Journal.open(kurrentdb_double.uri) as journal:
        await journal.session(SID).add_items([user("hi")])
        kurrentdb_double.faults.not_ready("Read", times=1000)
        try:
            with pytest.raises(StoreUnavailable):
                await export_bundle(journal.store, SID)
            with pytest.raises(StoreUnavailable):
                await read_tree(journal.store, SID)
        finally:
            kurrentdb_double.faults.clear()


async def test_an_undecodable_sqlite_row_is_damage_not_an_outage(tmp_path: Path) -> None:
    # Imported here so that the other tests of this file run on code without it.
    from agentjournal import UndecodableEvent

    path = tmp_path / "journal.db"
    async with Journal.open(f"sqlite:///{path}") as journal:
        await journal.session(SID).add_items([user("hi"), user("there")])
    # Something other than agentjournal writes a type that is not UTF-8.
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "UPDATE events SET type = CAST(? AS TEXT) WHERE position = "
            "(SELECT max(position) FROM events)",
            (b"\xff\xfeUserMessageReceived",),
        )
    async with Journal.open(f"sqlite:///{path}") as journal:
        with pytest.raises(UndecodableEvent) as undecodable:
            await journal.store.read(f"AgentSession-{SID}")
        assert not isinstance(undecodable.value, StoreUnavailable)  # no retry cures it
        with pytest.raises(DamagedEvent, match="cannot be read"):
            await read_tree(journal.store, SID)


async def foreign_copy(tmp_path: Path) -> tuple[list[Any], str]:
    """A handoff run's items, and the URI of a copy of its tree as another
    kurrent-agent-schema writer would write it: the same events, no ``aj.*`` metadata."""
    ours, theirs = (f"sqlite:///{tmp_path / name}" for name in ("ours.db", "theirs.db"))
    async with Journal.open(ours) as a, Journal.open(theirs) as b:
        session = a.session(SID)
        await drive(support_team(), "hi", session=session, hooks=session)
        for event in await a.store.read_all():
            metadata = {k: v for k, v in event.metadata.items() if not k.startswith("aj.")}
            await b.store.append(
                event.stream,
                [NewEvent(type=event.type, data=event.data, metadata=metadata, id=event.id)],
                expected=StreamState.NO_STREAM if event.revision == 0 else event.revision - 1,
            )
        return await session.get_items(), theirs


async def test_a_tree_written_without_aj_metadata_replays_its_subsessions(
    tmp_path: Path,
) -> None:
    expected, theirs = await foreign_copy(tmp_path)
    assert len(expected) == 6  # the handoff's items and billing's reply included
    async with Journal.open(theirs) as journal:
        assert await journal.session(SID).get_items() == expected
    async with Journal.open(theirs) as journal:  # cold, windowed: walks the subsession too
        windowed = await journal.session(SID).get_items(limit=100)
    assert sorted(map(json.dumps, windowed)) == sorted(map(json.dumps, expected))


async def test_a_windowed_read_of_a_tree_without_aj_metadata_keeps_its_order(
    tmp_path: Path,
) -> None:
    expected, theirs = await foreign_copy(tmp_path)
    async with Journal.open(theirs) as journal:
        assert await journal.session(SID).get_items(limit=100) == expected


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


# -- writes -----------------------------------------------------------------------------


async def test_a_new_run_keeps_what_the_last_left_unwritten(tmp_path: Path) -> None:
    @output_guardrail
    async def trip(
        context: RunContextWrapper[Any], agent: Agent[Any], output: Any
    ) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)

    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}") as journal:
        session = journal.session(SID)
        billing = Agent(
            name="billing",
            model=ScriptedModel([[assistant_message("refunded", item_id="m1")]]),
            output_guardrails=[trip],
        )
        triage = Agent(
            name="triage",
            model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]]),
            handoffs=[handoff(billing)],
        )
        # billing finishes, but its reply is refused: the run ends without writing it.
        with pytest.raises(OutputGuardrailTripwireTriggered):
            await drive(triage, "hi", session=session, hooks=session)
        solo = Agent(name="solo", model=ScriptedModel([[assistant_message("ok", item_id="m2")]]))
        await drive(solo, "again", session=session, hooks=session)
        closes = [
            body(e)
            for e in await journal.store.read(session.stream)
            if e.type == "SubagentCompleted"
        ]
    # The next run's first write closes billing with what the last run knew.
    assert [c["outcome"] for c in closes] == ["error"]
    assert closes[0]["extensions"]["openai"]["reason"] == (
        "the run ended after billing finished without recording its reply"
    )


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


async def test_checkpoints_after_closing_writes_carry_trace_ids(tmp_path: Path) -> None:
    key = SigningKey.generate()
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}", signing_key=key) as journal:
        session = journal.session(SID)
        failing = support_team(billing_steps=[RuntimeError("boom")])
        with pytest.raises(RuntimeError, match="boom"):
            async with session.run_scope():
                await drive(failing, "hi", session=session, hooks=session)
        recorded = await journal.store.read_all()
    # run_scope's closing write (billing closed as failed) forces a checkpoint.
    closed = [i for i, e in enumerate(recorded) if e.type == "SubagentCompleted"]
    checkpoints = [e for e in recorded[closed[-1] :] if e.type == "agentjournal.Checkpoint"]
    assert checkpoints
    for checkpoint in checkpoints:
        assert {"trace_id", "span_id"} <= checkpoint.metadata.keys()
        signed = body(checkpoint)["metadata"]
        assert signed["trace_id"] == checkpoint.metadata["trace_id"]
        assert signed["span_id"] == checkpoint.metadata["span_id"]


def compaction_reply(request: Received) -> Reply:
    """``POST /v1/responses/compact`` answered as the Responses API does: the request's
    user messages, then one ``compaction`` item."""
    assert request.path == "/v1/responses/compact"
    users = [i for i in request.json().get("input", []) if i.get("role") == "user"]
    reply = {
        "id": "resp_cmp_1",
        "object": "response.compaction",
        "created_at": 1_700_000_000,
        "output": [*users, {"type": "compaction", "id": "cmp_1", "encrypted_content": "s"}],
        "usage": {
            "input_tokens": 40,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 8,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 48,
        },
    }
    return Reply(body=json.dumps(reply).encode())


async def test_compaction_keeps_the_speaker_as_author(tmp_path: Path) -> None:
    async with (
        HttpStub(compaction_reply) as stub,
        Journal.open(f"sqlite:///{tmp_path / 'journal.db'}") as journal,
    ):
        client = AsyncOpenAI(api_key="sk-offline-test", base_url=f"{stub.url}/v1", max_retries=0)
        try:
            session = journal.session(SID)
            compacting = OpenAIResponsesCompactionSession(
                SID,
                session,
                client=client,
                compaction_mode="input",
                should_trigger_compaction=lambda _: True,
            )
            solo = Agent(
                name="solo", model=ScriptedModel([[assistant_message("ok", item_id="m1")]])
            )
            # The SDK compacts at the end of the run: the whole history is replaced.
            await drive(solo, "hi", session=compacting, hooks=session)
        finally:
            await client.close()
        # A compaction that replaces only the suffix it read.
        snapshot = await session._get_compaction_snapshot(1)
        assert snapshot is not None
        summary: Any = {"type": "compaction", "id": "cmp_2", "encrypted_content": "t"}
        assert await snapshot.replace_suffix(0, [summary])
        recorded = await journal.store.read(session.stream)
    compactions = [body(e) for e in recorded if e.type == "OpenAIItemRecorded"]
    assert [(c["message_id"], c.get("author_name")) for c in compactions] == [
        ("cmp_1", "solo"),
        ("cmp_2", "solo"),
    ]


async def test_an_authority_only_session_checkpoints(tmp_path: Path) -> None:
    key = SigningKey.generate()
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}", signing_key=key) as journal:
        session = journal.session(SID, policy=Policy.load(POLICY))
        await session.reset_authority("triage", reason="operator reset")  # nothing else yet
        checkpoint = await session.checkpoint()
    assert checkpoint is not None
    assert sorted(checkpoint.heads) == [f"AgentAuthority-{SID}"]


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


async def test_an_item_whose_metadata_fields_are_not_unicode_writes_nothing(tmp_path: Path) -> None:
    # Found by hypothesis (test_session_properties): a lone surrogate is kept by JSON data,
    # but a field the write copies into metadata (aj.call_id, a tool rule) cannot be chained.
    item: dict[str, Any] = {
        "type": "function_call",
        "call_id": "c1",
        "name": "f",
        "arguments": "{}",
    }
    item["call_id"] = "\ud800"
    async with Journal.open(f"sqlite:///{tmp_path / 's.db'}") as journal:
        session = journal.session("s")
        await session.add_items([{"role": "user", "content": "hi"}])
        with pytest.raises(CodecError, match="lone surrogate"):
            await session.add_items([{"role": "user", "content": "more"}, item])  # type: ignore[list-item]
        assert await session.get_items() == [{"role": "user", "content": "hi"}]
