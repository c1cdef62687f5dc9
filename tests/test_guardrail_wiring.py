"""The guardrail wiring, the full matrix: action type x decision x wiring x (run, run_streamed).

Wirings: ``hooks`` is ``Runner.run(agent, ..., session=s, hooks=s)`` alone;
``guard`` runs ``s.guard(agent)`` the same way. The guardrail is a real HTTP
server on loopback answering what each case scripts; sinks prove what ran.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel, function_call

from agentjournal import Journal, JournalSession
from agentjournal.errors import GuardrailBlocked
from agentjournal.events import GUARDRAIL_DECIDED, GuardrailDecided
from agentjournal.guardrails.actions import digest
from agentjournal.streams import subsession_stream
from drive import METHODS, Method
from guardrail_scenarios import FINAL, USER_INPUT, Graph, custom_tool_agent, graph, run
from scripted_guardrail import ScriptedGuardrail

ACTIONS = ["AGENT_INPUT", "TOOL_CALL", "AGENT_HANDOFF", "AGENT_RESPONSE"]
DECISIONS = ["ALLOW", "BLOCK", "MODIFY"]
SESSION = "AgentSession-s1"
BILLING = subsession_stream("s1", "sub-billing-h1")


@pytest.fixture
async def memory_journal() -> AsyncIterator[Journal]:
    """An open journal on the in-memory SQLite store (one backend is enough here)."""
    async with Journal.open("sqlite://:memory:") as journal:
        yield journal


async def decisions(journal: Journal) -> list[tuple[str, GuardrailDecided]]:
    """Every decision recorded, with its stream, in write order."""
    return [
        (event.stream, GuardrailDecided.decode(event.data))
        for event in await journal.store.read_all()
        if event.type == GUARDRAIL_DECIDED
    ]


async def stream_types(journal: Journal, stream: str) -> list[str]:
    return [event.type for event in await journal.store.read_all() if event.stream == stream]


def expected_outcome(action: str, decision: str, wiring: str) -> str:
    """``done`` (the run finishes) or ``blocked`` (it ends with GuardrailBlocked)."""
    if decision == "ALLOW":
        return "done"
    if action == "TOOL_CALL" and wiring == "guard":
        return "done"  # BLOCK is an error output the model sees; MODIFY runs modified
    if decision == "MODIFY" and action in ("AGENT_INPUT", "AGENT_RESPONSE"):
        return "done"  # the hooks rewrite the model input and the final message
    if decision == "MODIFY" and wiring == "guard":
        return "done"
    return "blocked"


def expected_enforcement(action: str, decision: str, wiring: str) -> str:
    if decision == "ALLOW":
        return "proceeded"
    if decision == "BLOCK":
        return "tool_refused" if (action, wiring) == ("TOOL_CALL", "guard") else "run_stopped"
    if action in ("TOOL_CALL", "AGENT_HANDOFF") and wiring == "hooks":
        return "unenforceable"
    return "modified"


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("wiring", ["hooks", "guard"])
@pytest.mark.parametrize("decision", DECISIONS)
@pytest.mark.parametrize("action", ACTIONS)
async def test_matrix(
    memory_journal: Journal, action: str, decision: str, wiring: str, method: Method
) -> None:
    g = graph()
    async with ScriptedGuardrail({action: decision}) as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        agent = session.guard(g.triage) if wiring == "guard" else g.triage
        outcome = expected_outcome(action, decision, wiring)
        if outcome == "blocked":
            with pytest.raises(GuardrailBlocked) as raised:
                await run(agent, session, method=method)
            assert raised.value.action_type == action
            final = None
        else:
            final = await run(agent, session, method=method)
        asked = guardrail.asked(action)
    recorded = [(s, d) for s, d in await decisions(memory_journal) if d.action_type == action]
    assert recorded, f"no {action} decision recorded"
    stream, first = recorded[0]
    assert first.action_id == asked[0]["action_id"]
    assert first.guardrail_decision == decision
    assert first.enforcement == expected_enforcement(action, decision, wiring)
    assert first.payload == asked[0]["payload"]
    assert first.payload_digest == digest(first.payload)
    if decision == "MODIFY":
        assert first.modified_payload is not None
        assert first.modified_payload_digest == digest(first.modified_payload)
        assert first.decision == ("BLOCK" if outcome == "blocked" else "MODIFY")
    else:
        assert first.modified_payload is None
        assert first.modified_payload_digest is None
    # The decision sits on the stream of the agent that acts.
    acting = "billing" if action == "AGENT_RESPONSE" else "triage"
    assert stream == (BILLING if acting == "billing" else SESSION)
    assert first.agent == acting
    CHECKS[action](g, session, decision, outcome, final, recorded)
    if outcome == "blocked":
        assert raised.value.action_id == first.action_id
        await _nothing_left_open(session)
    else:
        assert len(asked) == len({d.action_id for _, d in recorded})  # one decision per ask


async def _nothing_left_open(session: JournalSession) -> None:
    """A run a guardrail stopped leaves no subagent open."""
    assert await session.open_subagents() == []


def _input(
    g: Graph, session: JournalSession, decision: str, outcome: str, final: Any, recorded: Any
) -> None:
    if decision == "BLOCK":
        assert g.triage.model.calls == ()  # type: ignore[union-attr]  # the agent never ran
        assert g.tool_ran == []
        return
    seen = g.model_inputs(g.triage) + g.model_inputs(g.billing)
    expected = USER_INPUT.replace("secret", "[REDACTED]") if decision == "MODIFY" else USER_INPUT
    assert seen == [expected] * 3
    assert final == FINAL
    assert len(recorded) == 2  # triage's input, then billing's (the handoff's receiver)
    assert recorded[1][0] == BILLING


def _tool_call(
    g: Graph, session: JournalSession, decision: str, outcome: str, final: Any, recorded: Any
) -> None:
    (_, first), *_ = recorded
    if decision == "ALLOW":
        assert g.tool_ran == ["42"]
    elif decision == "MODIFY" and outcome == "done":
        assert g.tool_ran == ["REDACTED-42"]
        assert json.loads(first.modified_payload["function"]["arguments"]) == {
            "order_id": "REDACTED-42"
        }
    else:
        assert g.tool_ran == []  # the body never ran
    if first.enforcement == "tool_refused":
        assert final == FINAL  # the run went on; the model saw an error output
        inputs = g.triage.model.calls[1].input  # type: ignore[union-attr]
        outputs = [i for i in inputs if i.get("type") == "function_call_output"]
        assert outputs[0]["output"].startswith("Error: the guardrail blocked this call")
    if first.enforcement == "unenforceable":
        assert first.reason_code == "GUARDRAIL_UNENFORCEABLE"


def _handoff(
    g: Graph, session: JournalSession, decision: str, outcome: str, final: Any, recorded: Any
) -> None:
    (_, first), *_ = recorded
    assert first.payload == {
        "target_agent_id": "billing",
        "input": json.dumps({"reason": "secret refund"}, separators=(",", ":")),
        "state": {},
    }
    assert first.call_id == "h1"
    if outcome == "blocked":
        assert g.handed_off == []
        assert g.billing.model.calls == ()  # type: ignore[union-attr]
        return
    assert g.handed_off == (["[REDACTED]"] if decision == "MODIFY" else ["secret refund"])
    assert final == FINAL


def _response(
    g: Graph, session: JournalSession, decision: str, outcome: str, final: Any, recorded: Any
) -> None:
    (_, first), *_ = recorded
    assert first.payload == FINAL  # the original stays visible to an auditor
    if decision == "BLOCK":
        return
    expected = FINAL.replace("secret", "[REDACTED]") if decision == "MODIFY" else FINAL
    assert final == expected
    assert first.modified_payload == (expected if decision == "MODIFY" else None)


CHECKS = {
    "AGENT_INPUT": _input,
    "TOOL_CALL": _tool_call,
    "AGENT_HANDOFF": _handoff,
    "AGENT_RESPONSE": _response,
}


@pytest.mark.parametrize("method", METHODS)
async def test_blocked_response_is_neither_delivered_nor_stored(
    memory_journal: Journal, method: Method
) -> None:
    g = graph()
    async with ScriptedGuardrail({"AGENT_RESPONSE": "BLOCK"}) as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        with pytest.raises(GuardrailBlocked) as raised:
            await run(g.triage, session, method=method)
    assert raised.value.reason_code == "SCRIPTED_BLOCK"
    items = await session.get_items()
    assert not [i for i in items if i.get("role") == "assistant"]
    types = await stream_types(memory_journal, BILLING)
    assert "AssistantTextGenerated" not in types
    assert types[-1] == "SubagentCompleted"  # closed with outcome error


@pytest.mark.parametrize("method", METHODS)
async def test_modified_response_is_what_is_stored(memory_journal: Journal, method: Method) -> None:
    g = graph()
    async with ScriptedGuardrail({"AGENT_RESPONSE": "MODIFY"}) as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        final = await run(g.triage, session, method=method)
    assert final == "your [REDACTED] is safe"
    items = await session.get_items()
    last: Any = items[-1]
    assert last["content"][0]["text"] == "your [REDACTED] is safe"


async def test_decisions_precede_the_actions_they_guard(memory_journal: Journal) -> None:
    g = graph()
    async with ScriptedGuardrail() as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        await run(session.guard(g.triage), session)
    types = await stream_types(memory_journal, SESSION)
    assert types.index(GUARDRAIL_DECIDED) < types.index("AssistantToolCallsGenerated")
    billing = await stream_types(memory_journal, BILLING)
    assert billing.index(GUARDRAIL_DECIDED) < billing.index("AssistantTextGenerated")
    # A tool call decided at on_llm_end is not asked again by the guard's wrapper.
    assert len(guardrail.asked("TOOL_CALL")) == 1


async def test_guard_copies_and_leaves_the_graph_alone(memory_journal: Journal) -> None:
    g = graph()
    async with ScriptedGuardrail() as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        guarded = session.guard(g.triage)
        assert guarded is not g.triage
        assert guarded.tools[0] is not g.triage.tools[0]
        assert session.guard(guarded) is guarded  # idempotent
        assert memory_journal.session("s2").guard(g.triage) is g.triage  # no guardrail: unchanged


async def test_guard_alone_still_checks_tools_and_handoffs(memory_journal: Journal) -> None:
    """Without hooks=, the wrappers ask at invocation time."""
    g = graph()
    async with ScriptedGuardrail({"TOOL_CALL": "BLOCK"}) as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        result = await Runner.run(
            session.guard(g.triage),
            USER_INPUT,
            session=session,
            run_config=RunConfig(tracing_disabled=True),
        )
    assert result.final_output == FINAL
    assert g.tool_ran == []
    kinds = [d.action_type for _, d in await decisions(memory_journal)]
    assert kinds == ["TOOL_CALL", "AGENT_HANDOFF"]


@pytest.mark.parametrize(
    ("decision", "outcome"),
    [("ALLOW", "done"), ("BLOCK", "run_stopped"), ("MODIFY", "unenforceable")],
)
async def test_a_tool_result_that_ends_the_run_is_checked_as_the_response(
    memory_journal: Journal, decision: str, outcome: str
) -> None:
    g = graph()
    agent = Agent(
        name="solo",
        model=ScriptedModel([[function_call("lookup_order", {"order_id": "7"}, call_id="t9")]]),
        tools=g.triage.tools,
        tool_use_behavior="stop_on_first_tool",
    )
    async with ScriptedGuardrail({"AGENT_RESPONSE": decision}) as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        if outcome == "done":
            assert await run(agent, session) == "order 7: charged twice"
        else:
            with pytest.raises(GuardrailBlocked):
                await run(agent, session)
    responses = [d for _, d in await decisions(memory_journal) if d.action_type == "AGENT_RESPONSE"]
    assert [(d.payload, d.enforcement) for d in responses] == [
        ("order 7: charged twice", "proceeded" if outcome == "done" else outcome)
    ]


@pytest.mark.parametrize("decision", ["BLOCK", "MODIFY"])
async def test_other_local_calls_are_checked_too(memory_journal: Journal, decision: str) -> None:
    """Custom, shell, computer and apply-patch calls have no wrapper: the hooks stop the run."""
    ran: list[str] = []
    async with ScriptedGuardrail({"TOOL_CALL": decision}) as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        with pytest.raises(GuardrailBlocked):
            await run(session.guard(custom_tool_agent(ran)), session)
        (asked,) = guardrail.asked("TOOL_CALL")
    assert ran == []
    assert asked["payload"] == {
        "id": "w1",
        "type": "custom_tool_call",
        "function": {"name": "wipe", "arguments": '{"input":"all"}'},
    }


async def test_an_allowed_custom_call_runs(memory_journal: Journal) -> None:
    ran: list[str] = []
    async with ScriptedGuardrail() as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        assert await run(custom_tool_agent(ran), session) == "done"
    assert ran == ["all"]
