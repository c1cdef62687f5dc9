"""Each tool call's start and end, recorded on the event of its output (``aj.started_at``,
``aj.ended_at``), from the SDK's ``on_tool_start``/``on_tool_end``.

Real ``Runner`` runs (``Runner.run`` and ``Runner.run_streamed``) with the SDK's
``ScriptedModel`` on every backend: a tool that takes 50 ms shows at least that; a tool
that raises still has an end; two calls of one response each keep their own times; the
history the SDK gets back is the one its own ``SQLiteSession`` holds, and the session
verifies. The viewer's waterfall draws each call from these times.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal
from agentjournal.audit.verify import verify_records
from agentjournal.store.contract import RecordedEvent
from agentjournal.ui.console import waterfall
from agentjournal.walk import read_tree
from drive import METHODS, Method, drive, sdk_reference
from paused_graph import approval_graph, resumed

SID = "timed-1"


def _agent() -> Agent[Any]:
    @function_tool
    async def slow_lookup(order_id: str) -> str:
        """Look an order up (takes 50 ms)."""
        await asyncio.sleep(0.05)
        return f"order {order_id}: shipped"

    @function_tool
    async def quick_note(text: str) -> str:
        """Note something (at once)."""
        return "noted"

    @function_tool
    def broken(order_id: str) -> str:
        """Always fails."""
        raise RuntimeError("the order system is down")

    calls = [
        function_call("slow_lookup", {"order_id": "42"}, call_id="c-slow"),
        function_call("quick_note", {"text": "asked about 42"}, call_id="c-quick"),
    ]
    steps: list[Any] = [
        calls,
        [function_call("broken", {"order_id": "42"}, call_id="c-broken")],
        [assistant_message("Order 42 shipped.")],
    ]
    return Agent(name="clerk", model=ScriptedModel(steps), tools=[slow_lookup, quick_note, broken])


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def _outputs(journal: Journal) -> dict[str, RecordedEvent]:
    return {
        event.metadata["aj.call_id"]: event
        for event in await journal.store.read(f"AgentSession-{SID}")
        if event.type == "ToolResultReceived"
    }


@pytest.mark.parametrize("method", METHODS)
async def test_each_tool_call_s_output_carries_when_the_tool_started_and_ended(
    journal: Journal, method: Method
) -> None:
    session = journal.session(SID)
    await drive(_agent(), "Where is order 42?", method=method, session=session, hooks=session)
    outputs = await _outputs(journal)
    assert set(outputs) == {"c-slow", "c-quick", "c-broken"}
    spans = {}
    for call, event in outputs.items():
        started, ended = (
            _when(event.metadata["aj.started_at"]),
            _when(event.metadata["aj.ended_at"]),
        )
        assert event.metadata["aj.started_at"].endswith("Z")
        assert started <= ended
        spans[call] = (started, ended)
    assert (spans["c-slow"][1] - spans["c-slow"][0]).total_seconds() >= 0.05
    assert (spans["c-quick"][1] - spans["c-quick"][0]).total_seconds() < 0.05
    assert "An error occurred" in outputs["c-broken"].data.decode()  # it raised: it ended
    # Nothing else carries tool times: the call items, the user's message, the answer.
    timed = [
        e for e in await journal.store.read(f"AgentSession-{SID}") if "aj.started_at" in e.metadata
    ]
    assert {e.metadata["aj.call_id"] for e in timed} == set(outputs)
    # The SDK gets back exactly what its own session holds; the times are sealed and verify.
    assert await session.get_items() == await sdk_reference(
        method, [(_agent, "Where is order 42?")]
    )
    tree = await read_tree(journal.store, SID)
    assert verify_records(tree, {}, allow_uncovered=True).ok


async def test_the_waterfall_draws_each_tool_call_from_its_recorded_times(
    journal: Journal,
) -> None:
    session = journal.session(SID)
    await drive(_agent(), "Where is order 42?", session=session, hooks=session)
    tree = await read_tree(journal.store, SID)
    records = sorted(tree.records(), key=lambda r: r.position or 0)
    bars = [b for b in waterfall(records, {})["bars"] if b["kind"] == "tool"]
    assert sorted(b["label"] for b in bars) == ["broken", "quick_note", "slow_lookup"]
    slow = next(b for b in bars if b["label"] == "slow_lookup")
    assert slow["to"] - slow["from"] >= 50


def test_a_tool_call_id_seen_twice_gets_no_times() -> None:
    """Two starts under one call id (calls the context could not tell apart): no guess."""
    from agentjournal.sdk.run import RunState

    run = RunState()
    run.tool_started("c-1", "2026-01-01T00:00:00Z")
    run.tool_started("c-1", "2026-01-01T00:00:01Z")
    run.tool_ended("c-1", "2026-01-01T00:00:02Z")
    assert run.tool_call_times("c-1") is None
    run.tool_started("c-2", "2026-01-01T00:00:00Z")
    assert run.tool_call_times("c-2") is None  # not ended yet
    run.tool_ended("c-2", "2026-01-01T00:00:03Z")
    run.tool_ended("c-2", "2026-01-01T00:00:09Z")  # a second end changes nothing
    assert run.tool_call_times("c-2") == ("2026-01-01T00:00:00Z", "2026-01-01T00:00:03Z")


async def test_a_redacted_bundle_keeps_the_times_and_withholds_the_output(
    journal: Journal,
) -> None:
    from agentjournal.audit.bundle import bundle_of

    session = journal.session(SID)
    await drive(_agent(), "Where is order 42?", session=session, hooks=session)
    bundle = bundle_of(await read_tree(journal.store, SID), redact=True)
    outputs = [
        event
        for stream in bundle["streams"]
        for event in stream["events"]
        if event["type"] == "ToolResultReceived"
    ]
    assert len(outputs) == 3
    for event in outputs:
        assert event["metadata"]["aj.started_at"] < event["metadata"]["aj.ended_at"]
        assert event["data"] is None  # what the tool returned is withheld


# -- calls a resumed run makes ------------------------------------------------------------------


async def _resumed_output(
    journal: Journal, method: Method, *, how: str, approve: bool
) -> RecordedEvent:
    """Pause on billing's ``issue_refund`` (call r1), answer it and run the paused run on,
    by ``session.resume`` (``how="resume"``: the recorded answer; ``resumable`` for
    ``run_streamed``) or by the SDK's own way (``how="run_state"``: ``state.approve`` or
    ``state.reject``, then the runner with ``hooks=session``); the output of r1."""
    session = journal.session(SID)
    paused: Any = await drive(
        approval_graph(), "Refund order 42", method=method, session=session, hooks=session
    )
    agent = approval_graph("Done.")
    if how == "resume":
        await session.hold(paused)
        if approve:
            await session.approve("r1", by="ann")
        else:
            await session.reject("r1", by="ann")
        if method == "run":
            await session.resume(agent)
        else:
            state = await session.resumable(agent)
            await drive(agent, state, method=method, session=session, hooks=session)
    else:
        saved = paused.to_state().to_string()
        await resumed(agent, saved, approve=approve, session=session, hooks=session, method=method)
    (output,) = [
        event
        for event in await journal.store.read_all()
        if event.type == "ToolResultReceived" and event.metadata.get("aj.call_id") == "r1"
    ]
    return output


@pytest.mark.parametrize("how", ["resume", "run_state"])
@pytest.mark.parametrize("method", METHODS)
async def test_a_call_a_resumed_run_makes_carries_when_its_tool_started_and_ended(
    journal: Journal, method: Method, how: str
) -> None:
    """The SDK runs an approved call before any other hook of the resumed run fires: its
    times are the resumed run's, not lost with the paused one's."""
    before = datetime.now(UTC)
    output = await _resumed_output(journal, method, how=how, approve=True)
    started, ended = _when(output.metadata["aj.started_at"]), _when(output.metadata["aj.ended_at"])
    assert before <= started <= ended
    assert "refunded 1250 cents on 42" in output.data.decode()


@pytest.mark.parametrize("how", ["resume", "run_state"])
@pytest.mark.parametrize("method", METHODS)
async def test_a_rejected_call_s_output_carries_no_tool_times(
    journal: Journal, method: Method, how: str
) -> None:
    """A rejected call's tool never starts: its output (the SDK's rejection) has no times."""
    output = await _resumed_output(journal, method, how=how, approve=False)
    assert "aj.started_at" not in output.metadata
    assert "aj.ended_at" not in output.metadata
    assert "not approved" in output.data.decode()
