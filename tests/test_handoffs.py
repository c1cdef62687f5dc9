"""Handoffs as subagents: twin lifecycle events, subsession transcripts, exact flat replay."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    OutputGuardrailTripwireTriggered,
    RunContextWrapper,
    handoff,
    output_guardrail,
)
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from kurrent_agent_schema import EVENT_TYPE_BY_NAME, from_json, to_json

from agentjournal import Journal, JournalSession
from agentjournal.events import MODEL_RESPONDED
from agentjournal.store import EventStore, NewEvent, RecordedEvent, StreamState
from drive import METHODS, Method, drive, sdk_reference
from handoff_scenarios import SCENARIOS, failing, nested, single, support_team, top_level
from stored_form import store_as_written


def dumps(items: list[Any]) -> list[str]:
    return [json.dumps(item) for item in items]


async def stream_of(store: EventStore, name: str) -> list[RecordedEvent]:
    return await store.read(name)


def types(events: list[RecordedEvent]) -> list[str]:
    """The types of a stream's events but its model responses (tests/test_usage.py's)."""
    return [e.type for e in events if e.type != MODEL_RESPONDED]


def subsession(events: list[RecordedEvent], agent: str) -> str:
    for event in events:
        if event.type == "SubagentStarted":
            body = json.loads(event.data)
            if body["agent_type"] == agent:
                return str(body["subsession_stream"])
    raise AssertionError(f"no SubagentStarted for {agent}")


def assert_twins(parent: list[RecordedEvent], child: list[RecordedEvent], kind: str) -> None:
    """Each lifecycle event on one stream names its twin on the other, and they agree."""
    ours = [e for e in parent if e.type == kind]
    theirs = {e.id: e for e in child if e.type == kind}
    assert ours
    for event in ours:
        twin = theirs.get(_uuid(event.metadata["aj.twin"]))
        if twin is None:
            continue
        assert twin.metadata["aj.twin"] == str(event.id)
        mine, other = json.loads(event.data), json.loads(twin.data)
        assert mine["agent_id"] == other["agent_id"]
        return
    raise AssertionError(f"no {kind} twin between the streams")


def _uuid(text: str) -> Any:
    import uuid

    return uuid.UUID(text)


def assert_schema_valid(events: list[RecordedEvent]) -> None:
    for event in events:
        if event.type in EVENT_TYPE_BY_NAME:
            message = from_json(EVENT_TYPE_BY_NAME[event.type], event.data.decode())
            assert json.loads(to_json(message)) == json.loads(event.data)


# -- lifecycle and routing ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_single_handoff(journal: Journal, method: Method) -> None:
    session = journal.session("h-single", agent_name="triage")
    await drive(single(), "Why was I charged twice?", method=method, session=session, hooks=session)
    store = journal.store
    parent = await stream_of(store, session.stream)
    assert types(parent) == [
        "SessionStarted",
        "UserMessageReceived",
        "SubagentStarted",
        "SubagentCompleted",
    ]
    child_name = subsession(parent, "billing")
    assert child_name == "AgentSubsession-h-single-sub-billing-h1"
    child = await stream_of(store, child_name)
    assert types(child) == [
        "SubagentStarted",
        "ToolResultReceived",  # the handoff acknowledgement
        "AssistantToolCallsGenerated",
        "ToolResultReceived",
        "AssistantTextGenerated",
        "SubagentCompleted",
    ]
    assert_twins(parent, child, "SubagentStarted")
    assert_twins(parent, child, "SubagentCompleted")
    completed = json.loads(parent[-1].data)
    assert completed["outcome"] == "success"
    assert completed["summary"] == "You were charged twice; I can refund one."
    assert_schema_valid(parent + child)
    expected = await sdk_reference(method, [(single, "Why was I charged twice?")])
    assert dumps(await session.get_items()) == dumps(expected)
    cold = JournalSession(store, "h-single")
    assert dumps(await cold.get_items()) == dumps(expected)
    indices = [int(e.metadata["aj.index"]) for e in parent + child if "aj.index" in e.metadata]
    assert sorted(indices) == list(range(len(expected)))


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_nested_chain_of_three(journal: Journal, method: Method) -> None:
    session = journal.session("h-nested")
    await drive(nested(), "Refund my double charge", method=method, session=session, hooks=session)
    store = journal.store
    parent = await stream_of(store, session.stream)
    billing = await stream_of(store, subsession(parent, "billing"))
    refunds = await stream_of(store, subsession(billing, "refunds"))
    assert types(parent) == [
        "SessionStarted",
        "UserMessageReceived",
        "SubagentStarted",
        "SubagentCompleted",
    ]
    assert types(billing) == [
        "SubagentStarted",
        "ToolResultReceived",
        "AssistantToolCallsGenerated",
        "ToolResultReceived",
        "SubagentStarted",  # refunds opens, twinned on its own stream
        "SubagentCompleted",  # refunds closes (inner first) ...
        "SubagentCompleted",  # ... then billing itself
    ]
    assert types(refunds) == [
        "SubagentStarted",
        "ToolResultReceived",
        "AssistantToolCallsGenerated",
        "ToolResultReceived",
        "AssistantTextGenerated",
        "SubagentCompleted",
    ]
    assert_twins(billing, refunds, "SubagentStarted")
    assert_twins(billing, refunds, "SubagentCompleted")
    assert_twins(parent, billing, "SubagentCompleted")
    # The cascade is one transaction, inner close first in the global order.
    inner_close = refunds[-1].position
    outer_close = parent[-1].position
    assert inner_close < outer_close
    expected = await sdk_reference(method, [(nested, "Refund my double charge")])
    assert dumps(await session.get_items()) == dumps(expected)
    cold = JournalSession(store, "h-nested")
    for limit in range(1, len(expected) + 1):  # windows that start inside subsessions
        assert dumps(await JournalSession(store, "h-nested").get_items(limit=limit)) == dumps(
            expected[-limit:]
        ), limit
    assert dumps(await cold.get_items()) == dumps(expected)
    assert_schema_valid(parent + billing + refunds)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["parallel", "two_handoffs"])
@pytest.mark.parametrize("method", METHODS)
async def test_calls_beside_a_handoff_stay_with_the_sender(
    journal: Journal, method: Method, name: str
) -> None:
    build = SCENARIOS[name]
    session = journal.session(f"h-{name.replace('_', '-')}")
    await drive(build(), "hi", method=method, session=session, hooks=session)
    parent = await stream_of(journal.store, session.stream)
    started = [e for e in parent if e.type == "SubagentStarted"]
    assert len(started) == 1
    assert json.loads(started[0].data)["agent_type"] == "billing"
    # The sender's other call and its output are ordinary events on its own stream.
    other_calls = [e for e in parent if e.type == "AssistantToolCallsGenerated"]
    assert len(other_calls) == 1
    assert any(e.type == "ToolResultReceived" for e in parent)
    child = await stream_of(journal.store, subsession(parent, "billing"))
    assert types(child)[:2] == ["SubagentStarted", "ToolResultReceived"]
    expected = await sdk_reference(method, [(build, "hi")])
    assert dumps(await session.get_items()) == dumps(expected)
    assert dumps(await JournalSession(journal.store, session.session_id).get_items()) == dumps(
        expected
    )


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_next_turn_returns_to_the_top_level(journal: Journal, method: Method) -> None:
    session = journal.session("h-turns")
    await drive(single(), "first", method=method, session=session, hooks=session)
    await drive(top_level(), "second", method=method, session=session, hooks=session)
    parent = await stream_of(journal.store, session.stream)
    assert types(parent)[-3:] == [
        "SubagentCompleted",
        "UserMessageReceived",
        "AssistantTextGenerated",
    ]
    assert await session.open_subagents() == []
    expected = await sdk_reference(method, [(single, "first"), (top_level, "second")])
    assert dumps(await session.get_items()) == dumps(expected)


# -- failures, restarts, degradation ---------------------------------------------------


async def test_failed_run_is_closed_at_the_next_run(journal: Journal) -> None:
    session = journal.session("h-fail")
    with pytest.raises(RuntimeError, match="model backend down"):
        await drive(failing(), "help", session=session, hooks=session)
    (open_,) = await session.open_subagents()
    assert open_.agent_name == "billing"
    await drive(top_level(), "are you there?", session=session, hooks=session)
    assert await session.open_subagents() == []
    parent = await stream_of(journal.store, session.stream)
    completed = [json.loads(e.data) for e in parent if e.type == "SubagentCompleted"]
    assert completed[0]["outcome"] == "error"
    assert "before this subagent completed" in completed[0]["extensions"]["openai"]["reason"]
    # The close and the new user message are one write, in that order.
    assert types(parent)[-3:] == [
        "SubagentCompleted",
        "UserMessageReceived",
        "AssistantTextGenerated",
    ]


@pytest.mark.parametrize("error", [RuntimeError, "cancel"])
async def test_run_scope_closes_with_the_exact_outcome(journal: Journal, error: object) -> None:
    session = journal.session("h-scope")
    raised: type[BaseException] = RuntimeError
    if error == "cancel":
        import asyncio

        raised = asyncio.CancelledError
        agent = failing()
        billing = agent.handoffs[0]
        assert isinstance(billing, Agent)
        billing.model = ScriptedModel([ModelStep.respond(_cancelled)])
    else:
        agent = failing()
    with pytest.raises(raised):
        async with session.run_scope():
            await drive(agent, "help", session=session, hooks=session)
    assert await session.open_subagents() == []
    parent = await stream_of(journal.store, session.stream)
    completed = json.loads(parent[-1].data)
    assert parent[-1].type == "SubagentCompleted"
    assert completed["outcome"] == ("cancelled" if error == "cancel" else "error")
    reason = completed["extensions"]["openai"]["reason"]
    assert reason.startswith("CancelledError" if error == "cancel" else "RuntimeError: model")


def _cancelled(call: Any) -> Any:
    import asyncio

    raise asyncio.CancelledError  # as when the caller's task is cancelled mid-run


async def test_restart_mid_subagent_continues_from_the_streams(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'restart.db'}"
    async with Journal.open(uri) as first:
        session = first.session("h-restart")
        with pytest.raises(RuntimeError):
            await drive(failing(), "help", session=session, hooks=session)
    async with Journal.open(uri) as second:  # a new process, as far as the session knows
        session = second.session("h-restart")
        (open_,) = await session.open_subagents()
        assert open_.agent_name == "billing"
        assert open_.stream == "AgentSubsession-h-restart-sub-billing-h1"
        # Continuing the run (resumed items, not new user input) stays in the subsession.
        await session.add_items(
            [{"type": "function_call_output", "call_id": "late", "output": "x"}]
        )
        child = await stream_of(second.store, open_.stream)
        assert child[-1].type == "ToolResultReceived"
        # A new run closes the abandoned subagent and starts at the top level.
        await drive(top_level(), "hello again", session=session, hooks=session)
        parent = await stream_of(second.store, session.stream)
        assert [json.loads(e.data)["outcome"] for e in parent if e.type == "SubagentCompleted"] == [
            "error"
        ]
        items = await session.get_items()
        assert items[-2] == {"content": "hello again", "role": "user"}


async def test_hooks_not_wired_store_an_ordinary_tool_call(
    journal: Journal, caplog: pytest.LogCaptureFixture
) -> None:
    session = journal.session("h-unwired")
    with caplog.at_level(logging.WARNING, logger="agentjournal.sdk.session"):
        await drive(single(), "hi", session=session)
    parent = await stream_of(journal.store, session.stream)
    assert "SubagentStarted" not in types(parent)
    assert types(parent)[2:4] == ["AssistantToolCallsGenerated", "ToolResultReceived"]
    assert caplog.text.count("without the hooks") == 1
    expected = await sdk_reference("run", [(single, "hi")])
    assert dumps(await session.get_items()) == dumps(expected)


async def test_missing_subsession_degrades_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = tmp_path / "missing.db"
    async with Journal.open(f"sqlite:///{db}") as journal:
        session = journal.session("h-missing")
        await drive(single(), "hi", session=session, hooks=session)
    raw = sqlite3.connect(db)
    (stream_id,) = raw.execute(
        "SELECT id FROM streams WHERE name LIKE 'AgentSubsession-h-missing-%'"
    ).fetchone()
    raw.execute("DELETE FROM events WHERE stream_id = ?", (stream_id,))
    raw.execute("DELETE FROM streams WHERE id = ?", (stream_id,))
    raw.commit()
    raw.close()
    async with Journal.open(f"sqlite:///{db}") as journal:
        with caplog.at_level(logging.WARNING, logger="agentjournal.sdk.session"):
            items = await journal.session("h-missing").get_items()
    assert "AgentSubsession-h-missing-sub-billing-h1 is missing" in caplog.text
    assert [i.get("type", "message") for i in items] == ["message", "function_call"]


async def test_a_reused_handoff_call_id_gets_its_own_subsession(journal: Journal) -> None:
    session = journal.session("h-reuse")
    await drive(single(), "first", session=session, hooks=session)
    await drive(single(), "second", session=session, hooks=session)  # the same call id h1 again
    parent = await stream_of(journal.store, session.stream)
    streams = [
        json.loads(e.data)["subsession_stream"] for e in parent if e.type == "SubagentStarted"
    ]
    assert streams[0] == "AgentSubsession-h-reuse-sub-billing-h1"
    assert len(set(streams)) == 2
    assert streams[1].startswith("AgentSubsession-h-reuse-sub-billing-h1.")
    expected = await sdk_reference("run", [(single, "first"), (single, "second")])
    assert dumps(await JournalSession(journal.store, "h-reuse").get_items()) == dumps(expected)


async def test_closes_written_without_the_closes_key_are_read(tmp_path: Path) -> None:
    db = tmp_path / "other-writer.db"
    async with Journal.open(f"sqlite:///{db}") as journal:
        session = journal.session("h-plain")
        await drive(nested(), "refund", session=session, hooks=session)
        expected = await journal.session("h-plain").get_items()
    store_as_written(db)  # the edit below is of the metadata as written
    raw = sqlite3.connect(db)
    rows = raw.execute("SELECT position, metadata FROM events WHERE type = 'SubagentCompleted'")
    stripped = 0
    for position, metadata in rows.fetchall():
        body = json.loads(metadata)
        if body.pop("aj.closes", None) is not None:
            stripped += 1
            raw.execute(
                "UPDATE events SET metadata = ? WHERE position = ?",
                (json.dumps(body).encode(), position),
            )
    raw.commit()
    raw.close()
    assert stripped == 2
    async with Journal.open(f"sqlite:///{db}") as journal:
        for limit in (None, 3, 7):
            cold = JournalSession(journal.store, "h-plain")
            got = await cold.get_items(limit=limit)
            assert dumps(got) == dumps(expected if limit is None else expected[-limit:])


@pytest.mark.parametrize("method", METHODS)
async def test_a_subagent_ending_on_a_tool_result_closes_with_it(
    journal: Journal, method: Method
) -> None:
    def build() -> Agent[Any]:
        agent = single()
        billing = agent.handoffs[0]
        assert isinstance(billing, Agent)
        billing.tool_use_behavior = "stop_on_first_tool"  # the tool's result is the final output
        return agent

    session = journal.session("h-stop-on-tool")
    await drive(build(), "hi", method=method, session=session, hooks=session)
    parent = await stream_of(journal.store, session.stream)
    child = await stream_of(journal.store, subsession(parent, "billing"))
    assert types(child)[-3:] == [
        "AssistantToolCallsGenerated",
        "ToolResultReceived",
        "SubagentCompleted",
    ]
    completed = json.loads(parent[-1].data)
    assert (completed["outcome"], completed["summary"]) == (
        "success",
        "order 42: charged twice, 12.50 EUR each",
    )
    assert await session.open_subagents() == []
    assert dumps(await session.get_items()) == dumps(await sdk_reference(method, [(build, "hi")]))


async def test_reused_call_id_without_a_read_between_runs(journal: Journal) -> None:
    """Direct writes (no get_items between them) reusing a handoff call id stay separate."""
    from agents.items import ModelResponse
    from agents.testing import function_call
    from agents.usage import Usage

    session = journal.session("h-reuse-direct")
    billing: Agent[Any] = Agent(name="billing")
    triage: Agent[Any] = Agent(name="triage", handoffs=[billing])
    call = function_call("transfer_to_billing", {}, call_id="call_0")
    items: list[Any] = []
    for turn in range(2):
        question = {"role": "user", "content": f"q{turn}"}
        answer = {"role": "assistant", "content": f"a{turn}"}
        handoff: list[Any] = [call.model_dump(exclude_none=True), output_of("call_0", "billing")]
        response = ModelResponse(output=[call], usage=Usage(), response_id=None)
        await session.add_items([question])  # type: ignore[list-item]
        await session.on_llm_end(None, triage, response)  # type: ignore[arg-type]
        await session.on_handoff(None, triage, billing)  # type: ignore[arg-type]
        await session.add_items(handoff)
        await session.on_agent_end(None, billing, f"a{turn}")  # type: ignore[arg-type]
        await session.add_items([answer])  # type: ignore[list-item]
        items += [question, *handoff, answer]
    parent = await stream_of(journal.store, session.stream)
    streams = [
        json.loads(e.data)["subsession_stream"] for e in parent if e.type == "SubagentStarted"
    ]
    assert len(set(streams)) == 2
    for stream in streams:
        assert types(await stream_of(journal.store, stream))[-1] == "SubagentCompleted"
    for limit in (None, 2, 4, 8):
        got = await JournalSession(journal.store, "h-reuse-direct").get_items(limit=limit)
        assert dumps(got) == dumps(items if limit is None else items[-limit:])


def output_of(call_id: str, agent: str) -> dict[str, Any]:
    return {
        "call_id": call_id,
        "output": json.dumps({"assistant": agent}),
        "type": "function_call_output",
    }


# -- a tree another writer wrote, a run that left a reply unwritten --------------------------------


SID = "s1"


def body(event: RecordedEvent) -> Any:
    return json.loads(event.data)


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
