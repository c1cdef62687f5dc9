"""Every model response is recorded once: one ``agentjournal.ModelResponded`` per response.

Real ``Runner`` runs (``run`` and ``run_streamed``) with scripted models whose every
response has its own usage and response id, on SQLite and the KurrentDB double: whatever
a response produced (a handoff only, tool calls, a refused call, a blocked answer), its
usage is on the store exactly once, on the stream of the agent that called the model,
before the items it produced; the totals are the scripted ones and the SDK's own
``context_wrapper.usage``. Writes that are retried (an answer lost after the write landed,
a conflict with another writer) do not write a response twice.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    Model,
    ModelProvider,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    OutputGuardrailTripwireTriggered,
    RunConfig,
)
from agents import output_guardrail as sdk_output_guardrail
from agents.testing import ScriptedModel, assistant_message
from agents.usage import Usage as SdkUsage
from openai import AsyncOpenAI

from agentjournal import Journal
from agentjournal.audit.bundle import bundle_of
from agentjournal.audit.verify import verify_bundle
from agentjournal.authority import Policy
from agentjournal.errors import AuthorityDenied, GuardrailBlocked, StoreUnavailable
from agentjournal.events import MODEL_RESPONDED, RESPONSE_ID_KEY, SPAN_ID_KEY, TRACE_ID_KEY
from agentjournal.ledger import redaction
from agentjournal.records import Record, TreeRecords
from agentjournal.sdk.hooks import _model_of
from agentjournal.store import AppendRequest, AppendResult, NewEvent, StreamState
from agentjournal.store.contract import Expected
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from agentjournal.tokens import ModelResponse, Usage
from agentjournal.walk import read_tree
from drive import METHODS, Method, drive
from ledger_sessions import KEY, TRUSTED, rechain, stream_of
from scripted_guardrail import ScriptedGuardrail
from usage_scenarios import POLICY, SINK, Script, credit, model, nested, parallel


@pytest.fixture
async def memory_journal() -> AsyncIterator[Journal]:
    """An open journal on the in-memory SQLite store (one backend is enough here)."""
    async with Journal.open("sqlite://:memory:") as journal:
        yield journal


def responses(tree: TreeRecords) -> list[Record]:
    return [r for r in tree.records() if r.type == MODEL_RESPONDED]


def agents_of(tree: TreeRecords) -> dict[str, str]:
    """Stream -> the agent speaking there (the session stream's is triage)."""
    speaking = {tree.session_stream: "triage"}
    for record in tree.records():
        if record.opens is not None:
            speaking[record.opens] = (record.body or {})["agent_type"]
    return speaking


async def check_once(journal: Journal, session_id: str, script: Script, count: int) -> Usage:
    """The first ``count`` scripted responses, each recorded once, where it belongs; the total."""
    tree = await read_tree(journal.store, session_id)
    found = responses(tree)
    decoded = [ModelResponse.decode(r.data.encode()) for r in found if r.data is not None]
    assert sorted((d.response_id or "", d.agent, d.usage) for d in decoded) == sorted(
        script.scripted[:count]
    )
    assert len({r.id for r in found}) == len(found)
    speaking = agents_of(tree)
    for record, response in zip(found, decoded, strict=True):
        assert speaking[record.stream] == response.agent  # on its agent's stream
        assert record.metadata[RESPONSE_ID_KEY] == response.response_id
        assert response.session_id == session_id
        assert response.ended_at.endswith("Z")
        assert response.started_at is not None
        assert response.started_at <= response.ended_at
        # Before the items it produced, on that stream.
        stream = tree.streams[record.stream]
        produced = [
            e.revision
            for e in stream
            if e.type.startswith("Assistant")
            and e.metadata.get(RESPONSE_ID_KEY) == response.response_id
        ]
        assert all(revision > record.revision for revision in produced)
    total = sum((d.usage for d in decoded), Usage())
    assert total == script.total(count)
    return total


def sdk_total(usage: SdkUsage) -> Usage:
    return Usage(
        usage.requests,
        usage.input_tokens,
        usage.input_tokens_details.cached_tokens,
        usage.output_tokens,
        usage.output_tokens_details.reasoning_tokens,
        usage.total_tokens,
    )


# -- every response once, whatever it produced -------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_nested_handoffs_record_every_response_once(journal: Journal, method: Method) -> None:
    script = Script()
    session = journal.session("u-nested")
    result = await drive(nested(script), "refund", method=method, session=session, hooks=session)
    total = await check_once(journal, "u-nested", script, 5)
    assert total == sdk_total(result.context_wrapper.usage)
    tree = await read_tree(journal.store, "u-nested")
    decoded = [ModelResponse.decode(r.data.encode()) for r in responses(tree) if r.data]
    by_agent = {d.agent: d for d in decoded}
    # The handoff-only response of triage: stored nowhere else before this event existed.
    assert by_agent["triage"].outputs == {"function_call": 1}
    assert by_agent["triage"].model is None  # a ScriptedModel names no model
    assert by_agent["billing"].model == "scripted-mini"  # a model object's ``model``
    assert by_agent["refunds"].outputs == {"message": 1}
    assert {d.system for d in decoded} == {None}
    # Replay is untouched: the items the SDK wrote, no response among them.
    items = await session.get_items()
    kinds = [str(i.get("type", "message")) for i in items]
    assert kinds == ["message", *["function_call", "function_call_output"] * 4, "message"]


@pytest.mark.parametrize("method", METHODS)
async def test_a_tool_call_beside_a_handoff_is_one_response(
    memory_journal: Journal, method: Method
) -> None:
    script = Script()
    session = memory_journal.session("u-parallel")
    result = await drive(parallel(script), "hi", method=method, session=session, hooks=session)
    total = await check_once(memory_journal, "u-parallel", script, 2)
    assert total == sdk_total(result.context_wrapper.usage)


@pytest.mark.parametrize("method", METHODS)
async def test_a_guardrail_blocked_final_answer_is_counted(
    memory_journal: Journal, method: Method
) -> None:
    script = Script()
    async with ScriptedGuardrail({"AGENT_RESPONSE": "BLOCK"}) as guardrail:
        session = memory_journal.session("u-blocked", guardrails=guardrail.url)
        with pytest.raises(GuardrailBlocked):
            await drive(nested(script), "refund", method=method, session=session, hooks=session)
    # The blocked answer's response went with its decision, before the run stopped.
    await check_once(memory_journal, "u-blocked", script, 5)
    tree = await read_tree(memory_journal.store, "u-blocked")
    assert not any(r.type == "AssistantTextGenerated" for r in tree.records())


@pytest.mark.parametrize("wiring", ["guard", "hooks"])
async def test_a_refused_tool_call_is_counted(memory_journal: Journal, wiring: str) -> None:
    script = Script()
    session = memory_journal.session("u-refused", policy=Policy.from_json(POLICY))
    agent = credit(script)
    SINK.clear()
    if wiring == "guard":  # the refusal is the call's output; billing answers
        await drive(session.guard(agent), "credit me", session=session, hooks=session)
        await check_once(memory_journal, "u-refused", script, 3)
    else:  # the hooks alone stop the run at the refused call
        with pytest.raises(AuthorityDenied):
            await drive(agent, "credit me", session=session, hooks=session)
        await check_once(memory_journal, "u-refused", script, 2)
    assert SINK == []
    tree = await read_tree(memory_journal.store, "u-refused")
    assert any(r.type == "agentjournal.AuthorityRefused" for r in tree.records())


@sdk_output_guardrail
async def _no_refunds(ctx: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered="Refunded" in str(output))


@pytest.mark.parametrize("scoped", [True, False], ids=["run_scope", "next-run"])
async def test_a_response_the_run_never_wrote_goes_with_the_runs_end(
    memory_journal: Journal, scoped: bool
) -> None:
    """The SDK's own output guardrail trips after the last response: no item is written.

    In ``run_scope`` the failure's close writes the response; without it, the next run's
    first write does. Either way once.
    """
    script = Script()
    agent = nested(script, checks=[_no_refunds])
    session = memory_journal.session("u-tripped")

    async def run() -> None:
        if scoped:
            async with session.run_scope():
                await drive(agent, "refund", session=session, hooks=session)
        else:
            await drive(agent, "refund", session=session, hooks=session)

    with pytest.raises(OutputGuardrailTripwireTriggered):
        await run()
    if scoped:
        await check_once(memory_journal, "u-tripped", script, 5)
    else:
        await check_once(memory_journal, "u-tripped", script, 4)  # the fifth is still due
        follow_up = Agent(
            name="triage",
            model=model(script.steps("triage", [[assistant_message("Sorry.", item_id="m9")]])),
        )
        await drive(follow_up, "again?", session=session, hooks=session)
        await check_once(memory_journal, "u-tripped", script, 6)


async def test_decisions_written_side_by_side_carry_a_response_once(
    memory_journal: Journal,
) -> None:
    """A tool call and a handoff in one response are decided concurrently: two writes race
    for the one pending response, and only the first carries it."""
    script = Script()
    async with ScriptedGuardrail() as guardrail:
        session = memory_journal.session("u-decided", guardrails=guardrail.url)
        await drive(parallel(script), "hi", session=session, hooks=session)
        assert {b["action_type"] for b in guardrail.asked()} >= {"TOOL_CALL", "AGENT_HANDOFF"}
    await check_once(memory_journal, "u-decided", script, 2)


# -- retried writes -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["timeout_after_commit", "stall_after_commit"])
async def test_unknown_outcomes_on_kurrentdb_write_each_response_once(fault: str) -> None:
    with KurrentDBDouble.in_thread() as double:
        async with Journal.open(double.uri, deadline=0.4) as journal:
            script = Script()
            session = journal.session("u-faults")
            getattr(double.faults, fault)("AppendSession", times=3)
            getattr(double.faults, fault)("BatchAppend", times=3)
            await drive(nested(script), "refund", session=session, hooks=session)
            assert double.faults.used
            await check_once(journal, "u-faults", script, 5)


class _AnswerLost(SQLiteEventStore):
    """A real store that lands every write carrying a model response, then fails to answer
    (once each): the writer sends the same events again and must find them in place."""

    lost = 0

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        result = await super().append(stream, events, expected=expected)
        self._lose(events)
        return result

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        results = await super().append_many(requests)
        self._lose([e for request in requests for e in request.events])
        return results

    def _lose(self, events: Sequence[NewEvent]) -> None:
        if any(e.type == MODEL_RESPONDED for e in events) and self.lost < 3:
            self.lost += 1
            raise StoreUnavailable("the answer was lost after the commit")


class _Rival(SQLiteEventStore):
    """A real store where another writer appends to the session stream just before the
    first write carrying a model response: that write conflicts and is planned again."""

    session_stream = "AgentSession-u-rival"
    beaten = 0

    async def _maybe_rival(self, streams: list[str], events: Sequence[NewEvent]) -> None:
        carries = any(e.type == MODEL_RESPONDED for e in events)
        if self.beaten == 0 and carries and self.session_stream in streams:
            self.beaten += 1
            rival = NewEvent(type="OtherWriterNote", data=b"{}")
            await super().append(self.session_stream, [rival], expected=StreamState.ANY)

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        await self._maybe_rival([stream], events)
        return await super().append(stream, events, expected=expected)

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        every = [e for request in requests for e in request.events]
        await self._maybe_rival([r.stream for r in requests], every)
        return await super().append_many(requests)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [_AnswerLost, _Rival], ids=["answer-lost", "conflict"])
async def test_retried_writes_on_sqlite_write_each_response_once(
    tmp_path: Path, kind: type[SQLiteEventStore]
) -> None:
    store = await kind.open(tmp_path / "u.db")
    journal = Journal(store, "sqlite:///u.db")
    try:
        script = Script()
        session = journal.session("u-rival")
        await drive(nested(script), "refund", session=session, hooks=session)
        assert getattr(store, "lost", 0) == 3 or getattr(store, "beaten", 0) == 1
        await check_once(journal, "u-rival", script, 5)
    finally:
        await journal.close()


class _Unsettled(SQLiteEventStore):
    """A real store that lands the first write carrying a model response, then is down for
    every retry: the write's outcome is unknown to the session, which raises."""

    down = 0

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        if self.down:
            self.down -= 1
            raise StoreUnavailable("down")
        results = await super().append_many(requests)
        if self.down == 0 and any(
            e.type == MODEL_RESPONDED and b'"billing"' in e.data
            for request in requests
            for e in request.events
        ):
            self.down = 4  # this answer and the writer's three retries
            raise StoreUnavailable("the answer was lost after the commit")
        return results


@pytest.mark.slow
async def test_a_write_whose_outcome_stayed_unknown_is_found_not_repeated(
    tmp_path: Path,
) -> None:
    store = await _Unsettled.open(tmp_path / "u.db")
    journal = Journal(store, "sqlite:///u.db")
    try:
        script = Script()
        session = journal.session("u-unsettled")
        with pytest.raises(StoreUnavailable):
            await drive(nested(script), "refund", session=session, hooks=session)
        # The response landed with its items; the session could not know. Its next write
        # meets the store as it is and does not write the response again.
        follow_up = Agent(
            name="triage",
            model=model(script.steps("triage", [[assistant_message("Hello.", item_id="m9")]])),
        )
        await drive(follow_up, "still there?", session=session, hooks=session)
        tree = await read_tree(journal.store, "u-unsettled")
        found = [ModelResponse.decode(r.data.encode()) for r in responses(tree) if r.data]
        assert sorted(d.response_id or "" for d in found) == [
            "resp-1",
            "resp-2",
            "resp-3",
            "resp-6",
        ]
    finally:
        await journal.close()


# -- the ledger ----------------------------------------------------------------------------


async def test_responses_carry_the_agents_trace_and_are_kept_by_redaction(
    memory_journal: Journal,
) -> None:
    script = Script()
    session = memory_journal.session("u-trace")
    await drive(nested(script), "refund", session=session, hooks=session)
    tree = await read_tree(memory_journal.store, "u-trace")
    assert len(responses(tree)) == 5
    for record in responses(tree):
        # The agent's span from the session's own tracing (every event of it has ids).
        assert len(record.metadata[TRACE_ID_KEY]) == 32
        assert len(record.metadata[SPAN_ID_KEY]) == 16
        assert not redaction.withholds(record.type, record.metadata)  # no conversation in it
        assert redaction.view(record.type, (record.data or "").encode(), record.metadata) is None
        assert json.loads(record.data or "")["usage"]["input_tokens"].isdigit()


@pytest.mark.parametrize("redact", [False, True], ids=["whole", "redacted"])
async def test_bundles_with_responses_verify_and_a_forged_response_fails(redact: bool) -> None:
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        script = Script()
        session = journal.session("u-bundle")
        await drive(nested(script), "refund", session=session, hooks=session)
        bundle = bundle_of(await read_tree(journal.store, "u-bundle"), redact=redact)
    report = verify_bundle(copy.deepcopy(bundle), TRUSTED)
    assert report.ok, report.text()
    assert "usage: 5 model responses; 1500 input (150 cached), 105 output (15 reasoning)" in (
        report.text()
    )
    # Another session's response, re-chained (the checkpoint alone notices that edit).
    stream = stream_of(bundle, "AgentSession-")
    (event,) = [e for e in stream["events"] if e["type"] == MODEL_RESPONDED]
    event["data"] = event["data"].replace('"session_id":"u-bundle"', '"session_id":"other"')
    rechain(bundle, stream["name"])
    forged = verify_bundle(bundle, TRUSTED, allow_uncovered=True)
    assert [(p.check, p.message) for p in forged.problems if p.check != "checkpoints"] == [
        ("usage", "a model response of another session")
    ]


class _Provider(ModelProvider):
    """Routes every model name to one scripted model (what a custom provider does)."""

    def __init__(self, scripted: ScriptedModel) -> None:
        self.scripted = scripted
        self.asked: list[str | None] = []

    def get_model(self, model_name: str | None) -> Model:
        self.asked.append(model_name)
        return self.scripted


@pytest.mark.parametrize(
    ("name", "system"),
    [("gpt-4.1-mini", "openai"), ("openai/gpt-4.1", "openai"), ("litellm/claude-x", None)],
)
async def test_a_named_model_is_recorded_with_its_system(
    memory_journal: Journal, name: str, system: str | None
) -> None:
    script = Script()
    provider = _Provider(model(script.steps("triage", [[assistant_message("hi", item_id="m")]])))
    agent: Agent[Any] = Agent(name="triage", model=name)
    session = memory_journal.session("u-named")
    config = RunConfig(tracing_disabled=True, model_provider=provider)
    await drive(agent, "hello", session=session, hooks=session, config=config)
    assert provider.asked == [name]
    (record,) = responses(await read_tree(memory_journal.store, "u-named"))
    response = ModelResponse.decode((record.data or "").encode())
    assert (response.model, response.system) == (name, system)
    assert response.outputs == {"message": 1}


def test_an_sdk_openai_model_object_is_openais() -> None:
    client = AsyncOpenAI(api_key="not-used", base_url="http://127.0.0.1:9")
    for made in (
        OpenAIResponsesModel(model="gpt-4.1", openai_client=client),
        OpenAIChatCompletionsModel(model="gpt-4.1", openai_client=client),
    ):
        assert _model_of(Agent(name="a", model=made)) == ("gpt-4.1", "openai")
    assert _model_of(Agent(name="a", model=ScriptedModel([]))) == (None, None)
