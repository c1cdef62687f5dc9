"""The four gates in real runs: the seed scenario, with and without visibility, hooks alone,
streamed, MCP over stdio, a widening guardrail MODIFY, granted authority on SubagentStarted."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from agents import Agent, RunConfig, Runner, function_tool
from agents.mcp import MCPServerStdio
from agents.run_state import RunState
from agents.testing import ScriptedModel, assistant_message, function_call

import authority_seed as seed
from agentjournal import AuthorityDenied, Journal
from agentjournal.authority import Authority, Cap, Policy, ToolRule, meet
from agentjournal.errors import InvalidInput
from agentjournal.events import AUTHORITY_REFUSED, GUARDRAIL_DECIDED, AuthorityRefused
from drive import METHODS, Method, drive
from guardrail_scenarios import custom_tool_agent
from http_stub import Reply
from scripted_guardrail import ScriptedGuardrail

CONFIG = RunConfig(tracing_disabled=True)


def policy(*, visibility: bool = True) -> Policy:
    body = yaml.safe_load(seed.POLICY)
    body["visibility"] = visibility
    return Policy.from_json(body)


@pytest.fixture
async def memory_journal() -> AsyncIterator[Journal]:
    """An open journal on the in-memory SQLite store (one backend is enough here)."""
    async with Journal.open("sqlite://:memory:") as journal:
        yield journal


async def refusals(journal: Journal) -> list[tuple[str, AuthorityRefused]]:
    return [
        (event.stream, AuthorityRefused.decode(event.data))
        for event in await journal.store.read_all()
        if event.type == AUTHORITY_REFUSED
    ]


def invocations(outcome: seed.Outcome) -> list[tuple[str, str, str | None, Any]]:
    return [
        (r.agent, r.subject, r.ceiling, r.value) for r in outcome.refusals if r.gate == "invocation"
    ]


@pytest.mark.parametrize("visibility", [True, False], ids=["gates-on", "gates-off"])
async def test_the_seed_scenario(memory_journal: Journal, visibility: bool) -> None:
    rules = policy(visibility=visibility)
    outcomes = {
        name: await seed.run_scenario(
            memory_journal, memory_journal.session(f"seed-{name}", policy=rules), name
        )
        for name in ("escalate", "credit", "export")
    }
    escalate, credit, export = outcomes["escalate"], outcomes["credit"], outcomes["export"]
    # sre: never offered with the gates on; refused when called with them off. Never deployed.
    assert escalate.did == []
    if visibility:
        assert "transfer_to_sre" not in escalate.offered_to_triage
        assert escalate.final.startswith("I cannot deploy")
        (hidden,) = [r for r in escalate.refusals if r.subject == "sre"]
        assert (hidden.gate, hidden.enforcement, hidden.scope) == (
            "handoff_visibility",
            "hidden",
            "infra.deploy",
        )
    else:
        assert "transfer_to_sre" in escalate.offered_to_triage
        assert escalate.final.startswith("stopped:")
        assert invocations(escalate) == [("triage", "sre", None, None)]
    # The USD 250 credit: refused on the ceiling before the body runs, gates on or off.
    assert credit.did == []
    assert invocations(credit) == [("billing", "issue_credit", "spend", 25000)]
    (refused,) = [r for r in credit.refusals if r.gate == "invocation"]
    assert refused.limit == {"kind": "cap", "limit": 5000}
    assert refused.enforcement == "tool_refused"
    assert refused.authority["ceilings"]["spend"] == {"kind": "cap", "limit": 5000}
    assert ("kb_export" in credit.offered_to_billing) is not visibility  # gate 1 hides it
    # kb_export is visible to triage and still refused, on an argument.
    assert "kb_export" in export.offered_to_triage
    assert export.did == []
    assert invocations(export) == [("triage", "kb_export", "egress", "any")]


async def test_without_the_policy_the_same_scripts_execute(memory_journal: Journal) -> None:
    done = {
        name: await seed.run_scenario(memory_journal, memory_journal.session(f"open-{name}"), name)
        for name in ("escalate", "credit", "export")
    }
    assert done["escalate"].did == ["deploy billing-api"]
    assert done["credit"].did == ["credit c-7 25000"]
    assert done["export"].did == ["export 'refunds' to any"]
    assert await refusals(memory_journal) == []


def test_a_direct_python_call_is_not_mediated() -> None:
    """The boundary, honestly: the policy mediates what runs through the SDK, nothing else."""
    seed.SINK.clear()
    seed.credit_account("c-7", 25000)
    assert seed.SINK == ["credit c-7 25000"]


async def test_the_granted_authority_is_on_both_copies_of_subagent_started(
    memory_journal: Journal,
) -> None:
    rules = policy()
    await seed.run_scenario(
        memory_journal, memory_journal.session("seed-credit", policy=rules), "credit"
    )
    granted = meet(rules.authority_of("triage"), rules.authority_of("billing")).to_json()
    started = [e for e in await memory_journal.store.read_all() if e.type == "SubagentStarted"]
    assert len(started) == 2  # the parent's copy and the twin
    for event in started:
        text = json.loads(event.data)["extensions"]["agentjournal"]["granted_authority"]
        assert json.loads(text) == granted
    # The refusal of billing's credit sits on billing's own stream.
    streams = {s for s, r in await refusals(memory_journal) if r.agent == "billing"}
    assert streams == {"AgentSubsession-seed-credit-sub-billing-h_billing"}


@pytest.mark.parametrize("method", METHODS)
async def test_hooks_alone_stop_the_run_on_a_refused_call(
    memory_journal: Journal, method: Method
) -> None:
    seed.SINK.clear()
    session = memory_journal.session("hooks-only", policy=policy())
    triage = seed.graph("credit")  # not guarded: the invocation gate is the hooks' on_llm_end
    with pytest.raises(AuthorityDenied) as raised:
        await drive(triage, "credit", method=method, session=session, hooks=session)
    assert (raised.value.gate, raised.value.subject, raised.value.ceiling) == (
        "invocation",
        "issue_credit",
        "spend",
    )
    assert seed.SINK == []
    assert await session.open_subagents() == []  # closed with outcome error
    ((_, refused),) = await refusals(memory_journal)
    assert refused.enforcement == "run_stopped"


async def test_a_guardrail_modify_that_widens_authority_is_blocked(memory_journal: Journal) -> None:
    def raise_the_amount(body: dict[str, Any]) -> Reply:
        payload = body["payload"]
        arguments = json.loads(payload["function"]["arguments"])
        arguments["amount_cents"] = 9000  # beyond billing's 5000
        modified = {
            **payload,
            "function": {**payload["function"], "arguments": json.dumps(arguments)},
        }
        answer = {
            "action_id": body["action_id"],
            "decision": "MODIFY",
            "modified_payload": modified,
        }
        return Reply(body=json.dumps(answer).encode())

    seed.SINK.clear()
    triage = seed.graph("credit")
    billing = next(h for h in triage.handoffs if getattr(h, "name", "") == "billing")
    assert isinstance(billing, Agent)
    billing.model = ScriptedModel(
        [
            [
                function_call(
                    "issue_credit", {"customer_id": "c-7", "amount_cents": 1000}, call_id="c1"
                )
            ],
            [assistant_message("done")],
        ]
    )
    async with ScriptedGuardrail(replies={"TOOL_CALL": raise_the_amount}) as guardrail:
        session = memory_journal.session("widen", policy=policy(), guardrails=guardrail.url)
        await Runner.run(
            session.guard(triage), "credit", session=session, hooks=session, run_config=CONFIG
        )
    assert seed.SINK == []  # neither the original nor the widened credit ran
    decided = [
        json.loads(e.data)
        for e in await memory_journal.store.read_all()
        if e.type == GUARDRAIL_DECIDED
    ]
    (tool,) = [d for d in decided if d["action_type"] == "TOOL_CALL"]
    assert (tool["decision"], tool["guardrail_decision"], tool["reason_code"]) == (
        "BLOCK",
        "MODIFY",
        "GUARDRAIL_WIDENS_AUTHORITY",
    )
    assert tool["enforcement"] == "tool_refused"


MCP_POLICY = """
agents:
  triage: {scopes: [kb.*]}
  billing: {scopes: [kb.search]}
tools:
  kb_search: {scope: kb.search}
  kb_delete: {scope: kb.admin}
"""


@pytest.mark.slow
@pytest.mark.parametrize("visibility", [True, False], ids=["gates-on", "gates-off"])
async def test_the_mcp_gate_over_a_real_stdio_server(
    memory_journal: Journal, visibility: bool
) -> None:
    body = yaml.safe_load(MCP_POLICY)
    body["visibility"] = visibility
    session = memory_journal.session("mcp", policy=Policy.from_json(body))
    script = str(Path(__file__).with_name("mcp_kb_server.py"))
    async with MCPServerStdio(
        params={"command": sys.executable, "args": [script]},
        tool_filter=session.mcp_tool_filter,
        name="kb",
    ) as server:
        model = ScriptedModel(
            [
                [function_call("kb_delete", {"article_id": "a1"}, call_id="d1")]
                if not visibility
                else [assistant_message("I can only search.")]
            ]
        )
        billing = Agent(name="billing", model=model, mcp_servers=[server])
        if visibility:
            await Runner.run(billing, "clean up", session=session, hooks=session, run_config=CONFIG)
            offered = [tool.name for tool in model.calls[0].tools]
            assert offered == ["kb_search"]
            ((_, hidden),) = await refusals(memory_journal)
            assert (hidden.gate, hidden.subject, hidden.scope) == (
                "mcp_visibility",
                "kb_delete",
                "kb.admin",
            )
        else:
            with pytest.raises(AuthorityDenied, match=r"kb\.admin"):
                await Runner.run(
                    billing, "clean up", session=session, hooks=session, run_config=CONFIG
                )
            ((_, refused),) = await refusals(memory_journal)
            assert (refused.gate, refused.subject) == ("invocation", "kb_delete")


def test_policy_files_are_checked(tmp_path: Path) -> None:
    good = tmp_path / "policy.yml"
    good.write_text(seed.POLICY)
    assert Policy.load(good).authority_of("billing").holds("billing.refund")
    assert Policy.load(good).authority_of("nobody").scopes == frozenset()
    bad = {
        "unknown field": "agents: {}\nroles: {}",
        "bad scope": "agents: {a: {scopes: [Billing]}}",
        "wildcard tool scope": "tools: {t: {scope: billing.*}}",
        "tool without scope": "tools: {t: {ceilings: {spend: amount}}}",
        "visibility not bool": "visibility: maybe",
        "unknown ceiling kind": "agents: {a: {ceilings: {spend: {kind: budget}}}}",
        "not a mapping": "- a\n- b",
    }
    for name, text in bad.items():
        path = tmp_path / f"{name.replace(' ', '-')}.yml"
        path.write_text(text)
        with pytest.raises(InvalidInput):
            Policy.load(path)
    with pytest.raises(InvalidInput, match="cannot read policy"):
        Policy.load(tmp_path / "missing.yml")


async def test_a_session_takes_a_policy_file(memory_journal: Journal, tmp_path: Path) -> None:
    path = tmp_path / "policy.yml"
    path.write_text(seed.POLICY)
    session = memory_journal.session("from-file", policy=path)
    assert session.policy is not None
    assert session.policy.tools["issue_credit"].scope == "billing.refund"


async def test_a_custom_tool_without_a_rule_is_refused(memory_journal: Journal) -> None:
    ran: list[str] = []
    rules = Policy(agents={"janitor": Authority.of("kb.*")})
    session = memory_journal.session("custom", policy=rules)
    with pytest.raises(AuthorityDenied, match="no rule"):
        await Runner.run(
            session.guard(custom_tool_agent(ran)),
            "clean",
            session=session,
            hooks=session,
            run_config=CONFIG,
        )
    assert ran == []


async def test_a_resumed_run_keeps_the_narrowed_grant(tmp_path: Path) -> None:
    """Resuming after an approval, in a fresh journal, never widens what the agent was granted."""
    ran: list[int] = []

    @function_tool(needs_approval=True)
    def issue_refund(amount_cents: int) -> str:
        """Refund."""
        ran.append(amount_cents)
        return "refunded"

    rules = Policy(
        agents={
            "triage": Authority.of("billing.*", spend=Cap(5000)),
            "billing": Authority.of("billing.refund"),  # its own entry has no cap
        },
        tools={"issue_refund": ToolRule("billing.refund", {"spend": "amount_cents"})},
    )

    def build(billing_steps: list[Any], triage_steps: list[Any]) -> Agent[Any]:
        billing = Agent(name="billing", model=ScriptedModel(billing_steps), tools=[issue_refund])
        return Agent(name="triage", model=ScriptedModel(triage_steps), handoffs=[billing])

    uri = f"sqlite:///{tmp_path / 'resume.db'}"
    async with Journal.open(uri) as first:
        session = first.session("resume", policy=rules)
        paused = await Runner.run(
            session.guard(
                build(
                    [[function_call("issue_refund", {"amount_cents": 900000}, call_id="r1")]],
                    [[function_call("transfer_to_billing", {}, call_id="h1")]],
                )
            ),
            "refund",
            session=session,
            hooks=session,
            run_config=CONFIG,
        )
        assert paused.interruptions  # waiting for approval
        saved = paused.to_state().to_string()
    async with Journal.open(uri) as second:  # another process picks the run up
        session = second.session("resume", policy=rules)
        graph = session.guard(build([[assistant_message("done")]], []))
        state = await RunState.from_string(graph, saved)
        state.approve(state.get_interruptions()[0])
        await Runner.run(graph, state, session=session, hooks=session, run_config=CONFIG)
        refused = [r for s, r in await refusals(second) if s.startswith("AgentSubsession-")]
    assert ran == []
    assert [r.ceiling for r in refused] == ["spend", "spend"]  # in the first run and on resume
