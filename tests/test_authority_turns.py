"""Authority never widens across the turns of one conversation, and a verifier recomputes it.

The SDK's usual next turn is ``Runner.run(result.last_agent, ...)``. A deployer
reached through triage holds ``env: staging`` only (triage's ceiling, inherited
through the meet); on its own it may deploy anywhere. The next turn starts at
the deployer: it must still hold at most what it last held — in the same
process and in a new one — until the application resets it, on the record.
The verifier replays the authority log and recomputes every grant from the
recorded policy, so a rewritten grant fails even where it stays narrower than
its sender's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, cast

import pytest
from agents import Agent, Handoff, RunConfig, Runner, function_tool
from agents.extensions.memory.encrypt_session import EncryptedSession
from agents.memory.session import SessionABC
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import AuthorityDenied, Journal, JournalSession
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Report, verify_bundle
from agentjournal.authority import AllowList, Authority, Policy, ToolRule
from agentjournal.errors import InvalidInput
from drive import METHODS, Method
from guardrail_scenarios import run
from ledger_sessions import KEY, TRUSTED, rechain, relink, resign

POLICY = Policy(
    agents={
        "triage": Authority.of("deploy.run", "kb.read", env=AllowList(frozenset({"staging"}))),
        "deployer": Authority.of("deploy.run"),  # no env ceiling of its own: any environment
    },
    tools={"deploy": ToolRule("deploy.run", {"env": "env"})},
)


def _deployer(deployed: list[str], script: list[Any]) -> Agent[Any]:
    @function_tool
    def deploy(env: str) -> str:
        """Deploy to an environment."""
        deployed.append(env)
        return f"deployed to {env}"

    return Agent(name="deployer", model=ScriptedModel(script), tools=[deploy])


def _first_turn(deployed: list[str]) -> Agent[Any]:
    """triage hands off to the deployer, which deploys to staging and answers."""
    deployer = _deployer(
        deployed,
        [
            [function_call("deploy", {"env": "staging"}, call_id="d1")],
            [assistant_message("staging is live")],
        ],
    )
    return Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_deployer", {}, call_id="h1")]]),
        handoffs=[deployer],
    )


def _prod_turn(deployed: list[str]) -> Agent[Any]:
    """The deployer alone, asked for prod: it calls deploy(prod), then answers."""
    return _deployer(
        deployed,
        [[function_call("deploy", {"env": "prod"}, call_id="d2")], [assistant_message("done")]],
    )


async def _start(session: JournalSession, deployed: list[str]) -> Agent[Any]:
    """Turn one; returns ``result.last_agent`` as the SDK gives it."""
    result = await Runner.run(
        session.guard(_first_turn(deployed)),
        "ship it to staging",
        session=session,
        hooks=session,
        run_config=RunConfig(tracing_disabled=True),
    )
    assert deployed == ["staging"]
    return result.last_agent


async def test_the_next_turn_at_the_last_agent_keeps_the_narrowed_authority() -> None:
    deployed: list[str] = []
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session("turns", policy=POLICY)
        last = await _start(session, deployed)
        assert last.name == "deployer"
        # The SDK's usual next turn: the last agent again (here with a script for prod).
        last.model = ScriptedModel(
            [[function_call("deploy", {"env": "prod"}, call_id="d2")], [assistant_message("no")]]
        )
        await run(last, session, text="now prod")
        assert deployed == ["staging"]  # prod was refused; the model got an error output
        refused = await _refusals(journal, "turns")
        assert [(r["subject"], r["enforcement"]) for r in refused] == [("deploy", "tool_refused")]


@pytest.mark.parametrize("method", METHODS)
async def test_a_new_process_keeps_it_too(tmp_path: Path, method: Method) -> None:
    db = f"sqlite:///{tmp_path / 'turns.db'}"
    deployed: list[str] = []
    async with Journal.open(db) as journal:
        await _start(journal.session("turns", policy=POLICY), deployed)
    async with Journal.open(db) as journal:  # a fresh journal: nothing cached
        session = journal.session("turns", policy=POLICY)
        await run(session.guard(_prod_turn(deployed)), session, method=method, text="prod")
    assert deployed == ["staging"]


async def test_hooks_alone_stop_the_run(tmp_path: Path) -> None:
    deployed: list[str] = []
    async with Journal.open(f"sqlite:///{tmp_path / 'turns.db'}") as journal:
        session = journal.session("turns", policy=POLICY)
        await _start(session, deployed)
        with pytest.raises(AuthorityDenied) as denied:
            await run(_prod_turn(deployed), session, text="prod")
        assert denied.value.ceiling == "env"
    assert deployed == ["staging"]


async def test_an_explicit_reset_widens_it_on_the_record() -> None:
    deployed: list[str] = []
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        session = journal.session("turns", policy=POLICY)
        await _start(session, deployed)
        await session.reset_authority("deployer", reason="change CHG-77 approved by on-call")
        await run(session.guard(_prod_turn(deployed)), session, text="prod")
        assert deployed == ["staging", "prod"]
        bundle = await export_bundle(journal.store, "turns")
    resets = [e for e in _events(bundle) if e["type"] == "agentjournal.AuthorityReset"]
    assert [json.loads(e["data"])["reason"] for e in resets] == [
        "change CHG-77 approved by on-call"
    ]
    report = verify_bundle(bundle, TRUSTED, policy=POLICY)
    assert report.ok, report.text()


async def test_reset_needs_a_policy_and_a_reason() -> None:
    async with Journal.open("sqlite://:memory:") as journal:
        with pytest.raises(InvalidInput, match="no policy"):
            await journal.session("plain").reset_authority("deployer", reason="why not")
        with pytest.raises(InvalidInput, match="reason"):
            await journal.session("p", policy=POLICY).reset_authority("deployer", reason=" ")


# -- the verifier ------------------------------------------------------------------------


async def _refusals(journal: Journal, session_id: str) -> list[dict[str, Any]]:
    bundle = await export_bundle(journal.store, session_id)
    return [
        json.loads(e["data"])
        for e in _events(bundle)
        if e["type"] == "agentjournal.AuthorityRefused"
    ]


def _events(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for s in bundle["streams"] for e in s["events"]]


async def _two_turns() -> dict[str, Any]:
    deployed: list[str] = []
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        session = journal.session("turns", policy=POLICY)
        await _start(session, deployed)
        await run(session.guard(_prod_turn(deployed)), session, text="prod")
        return await export_bundle(journal.store, "turns")


@pytest.fixture
async def bundle() -> dict[str, Any]:
    recorded = await _two_turns()
    assert verify_bundle(recorded, TRUSTED, policy=POLICY).ok
    return copy.deepcopy(recorded)


def _resigned(bundle: dict[str, Any]) -> dict[str, Any]:
    for stream in bundle["streams"]:
        rechain(bundle, stream["name"])
    relink(bundle)
    resign(bundle, KEY)
    return bundle


def _failure(report: Report) -> str:
    assert not report.ok, report.text()
    return str(report.problems[0])


def _set_grant(event: dict[str, Any], authority: dict[str, Any]) -> None:
    body = json.loads(event["data"])
    body["extensions"]["agentjournal"]["granted_authority"] = json.dumps(
        authority, sort_keys=True, separators=(",", ":")
    )
    event["data"] = json.dumps(body)


def test_a_grant_rewritten_to_the_senders_entry_fails_even_unsigned(
    bundle: dict[str, Any],
) -> None:
    """The issue's case: narrower than the sender, chains recomputed, no checkpoint at all."""
    triage = POLICY.authority_of("triage").to_json()
    for event in _events(bundle):
        if event["type"] == "SubagentStarted":
            _set_grant(event, triage)
    bundle["streams"] = [s for s in bundle["streams"] if not s["name"].startswith("AgentLedger")]
    for stream in bundle["streams"]:
        rechain(bundle, stream["name"])
    relink(bundle)
    found = _failure(verify_bundle(bundle, {}, allow_uncovered=True))
    assert "(delegation)" in found
    assert "the policy gives" in found


def test_the_two_copies_of_a_grant_must_agree(bundle: dict[str, Any]) -> None:
    twin = next(
        e
        for e in _events(bundle)
        if e["type"] == "SubagentStarted" and "aj.index" not in e["metadata"]
    )
    _set_grant(twin, POLICY.authority_of("triage").to_json())
    found = _failure(verify_bundle(_resigned(bundle), TRUSTED))
    assert "grant different authorities" in found


def test_a_widened_root_of_the_next_turn_fails(bundle: dict[str, Any]) -> None:
    """Run two's deployer recorded as holding its whole entry, log and all, re-signed."""
    whole = POLICY.authority_of("deployer").to_json()
    for event in _events(bundle):
        body = json.loads(event["data"]) if event["data"] else {}
        if event["type"] == "agentjournal.AuthorityGranted" and body["agent"] == "deployer":
            event["data"] = json.dumps({**body, "authority": whole}, sort_keys=True)
        run_entry = event["type"] == "agentjournal.AuthorityHeld" and body["cause"] == "run"
        if run_entry and body["agent"] == "deployer":
            body["authority"] = whole
            body["held"]["deployer"] = whole
            event["data"] = json.dumps(body)
    found = _failure(verify_bundle(_resigned(bundle), TRUSTED))
    assert "(delegation)" in found
    assert "deployer was granted" in found


def test_a_session_under_another_policy_fails_the_anchor(bundle: dict[str, Any]) -> None:
    other = Policy(agents=POLICY.agents, tools={"deploy": ToolRule("deploy.run")})
    found = _failure(verify_bundle(bundle, TRUSTED, policy=other))
    assert "not the one given" in found


def test_a_refusal_the_policy_would_not_make_fails(bundle: dict[str, Any]) -> None:
    for event in _events(bundle):
        if event["type"] == "agentjournal.AuthorityRefused":
            body = json.loads(event["data"])
            body["gate"] = "tool_visibility"  # the deployer may see deploy: never hidden
            event["data"] = json.dumps(body)
    found = _failure(verify_bundle(_resigned(bundle), TRUSTED))
    assert "the policy allows what was refused" in found


def test_a_call_recorded_under_a_looser_rule_fails(bundle: dict[str, Any]) -> None:
    for event in _events(bundle):
        if event["metadata"].get("aj.call_id") == "d1" and "aj.tool_rule" in event["metadata"]:
            event["metadata"]["aj.tool_rule"] = '{"ceilings":{},"scope":"deploy.run"}'
    found = _failure(verify_bundle(_resigned(bundle), TRUSTED))
    assert "another rule than its policy's" in found


def test_a_dropped_log_entry_fails(bundle: dict[str, Any]) -> None:
    log = next(s for s in bundle["streams"] if s["name"].startswith("AgentAuthority-"))
    log["events"] = [e for e in log["events"] if json.loads(e["data"]).get("cause") != "handoff"]
    report = verify_bundle(_resigned(bundle), TRUSTED)
    assert not report.ok
    assert any("a grant the authority log does not hold" in p.message for p in report.problems)


# -- handoffs the session cannot show as subagents --------------------------------------------


async def test_under_encryption_the_next_turn_keeps_it_too() -> None:
    """EncryptedSession hides the handoff's call from the session: the grant is recorded anyway."""
    deployed: list[str] = []
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        inner = journal.session("enc", policy=POLICY, record_payloads=False)
        outer = EncryptedSession("enc", cast(SessionABC, inner), "k" * 32)
        config = RunConfig(tracing_disabled=True)
        first = await Runner.run(
            inner.guard(_first_turn(deployed)),
            "staging",
            session=outer,
            hooks=inner,
            run_config=config,
        )
        last = first.last_agent
        last.model = ScriptedModel(
            [[function_call("deploy", {"env": "prod"}, call_id="d2")], [assistant_message("no")]]
        )
        await Runner.run(last, "now prod", session=outer, hooks=inner, run_config=config)
        assert deployed == ["staging"]
        bundle = await export_bundle(journal.store, "enc")
    report = verify_bundle(bundle, TRUSTED, policy=POLICY)
    assert report.ok, report.text()
    grants = [
        json.loads(e["data"])
        for e in _events(bundle)
        if e["type"] == "agentjournal.AuthorityGranted"
    ]
    assert [(g["agent"], g["cause"]) for g in grants] == [
        ("triage", "run"),
        ("deployer", "handoff"),
        ("deployer", "run"),
    ]


async def test_a_router_handoff_grants_the_agent_that_really_receives_it(tmp_path: Path) -> None:
    """A handoff named for one agent that hands to another: the policy binds the real one."""
    deployed: list[str] = []
    deployer = _deployer(
        deployed,
        [
            [function_call("deploy", {"env": "staging"}, call_id="d1")],
            [assistant_message("staging is live")],
        ],
    )

    async def route(ctx: Any, arguments: str) -> Agent[Any]:
        return deployer

    router = Handoff(
        tool_name="transfer_to_ops",
        tool_description="Hand to whoever runs operations.",
        input_json_schema={"type": "object", "properties": {}},
        on_invoke_handoff=route,
        agent_name="ops",
    )
    triage = Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_ops", {}, call_id="h1")]]),
        handoffs=[router],
    )
    db = f"sqlite:///{tmp_path / 'router.db'}"
    async with Journal.open(db, signing_key=KEY) as journal:
        session = journal.session("router", policy=POLICY)
        await run(session.guard(triage), session, text="staging")
    async with Journal.open(db, signing_key=KEY) as journal:
        session = journal.session("router", policy=POLICY)
        await run(session.guard(_prod_turn(deployed)), session, text="prod")
        bundle = await export_bundle(journal.store, "router")
    assert deployed == ["staging"]
    report = verify_bundle(bundle, TRUSTED, policy=POLICY)
    assert report.ok, report.text()


async def test_guard_alone_keeps_it_across_processes(tmp_path: Path) -> None:
    """Without hooks=, the guard's handoff wrapper grants, and the grant is recorded."""
    deployed: list[str] = []
    config = RunConfig(tracing_disabled=True)
    db = f"sqlite:///{tmp_path / 'guard.db'}"
    async with Journal.open(db) as journal:
        session = journal.session("guarded", policy=POLICY)
        await Runner.run(
            session.guard(_first_turn(deployed)), "staging", session=session, run_config=config
        )
    async with Journal.open(db) as journal:
        session = journal.session("guarded", policy=POLICY)
        await Runner.run(
            session.guard(_prod_turn(deployed)), "prod", session=session, run_config=config
        )
    assert deployed == ["staging"]


async def test_the_policy_anchor_requires_every_call_to_run_under_it(tmp_path: Path) -> None:
    """A later process that forgets the policy deploys unchecked: --policy says so."""
    deployed: list[str] = []
    db = f"sqlite:///{tmp_path / 'forgot.db'}"
    async with Journal.open(db, signing_key=KEY) as journal:
        await _start(journal.session("forgot", policy=POLICY), deployed)
    async with Journal.open(db, signing_key=KEY) as journal:
        session = journal.session("forgot")  # no policy in this process
        await run(_prod_turn(deployed), session, text="prod")
        bundle = await export_bundle(journal.store, "forgot")
    assert deployed == ["staging", "prod"]
    unanchored = verify_bundle(bundle, TRUSTED)
    assert unanchored.ok  # it says how many calls ran under a policy: 1 of 2
    assert any("1 under the policy" in line for line in unanchored.lines)
    found = _failure(verify_bundle(bundle, TRUSTED, policy=POLICY))
    assert "tool call d2 ran without the policy given" in found


async def test_a_reset_hidden_by_reordering_the_log_fails() -> None:
    """An insider's attack: drop the reset, move the handoff's entry after the next turn's
    root so that the root looks unconstrained, redo what every agent holds, re-sign."""
    deployed: list[str] = []
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        session = journal.session("turns", policy=POLICY)
        await _start(session, deployed)
        await session.reset_authority("deployer", reason="approved")
        await run(session.guard(_prod_turn(deployed)), session, text="prod")
        bundle = await export_bundle(journal.store, "turns")
    assert verify_bundle(bundle, TRUSTED).ok
    log = next(s for s in bundle["streams"] if s["name"].startswith("AgentAuthority-"))
    entries = [e for e in log["events"] if e["type"] != "agentjournal.AuthorityReset"]
    handoff = next(e for e in entries if json.loads(e["data"]).get("cause") == "handoff")
    entries.remove(handoff)
    entries.append(handoff)
    held: dict[str, Any] = {}
    for event in entries:
        body = json.loads(event["data"])
        if "held" in body:
            held = {**held, body["agent"]: body["authority"]}
            body["held"] = held
            event["data"] = json.dumps(body)
    log["events"] = entries
    found = _failure(verify_bundle(_resigned(bundle), TRUSTED))
    assert "out of the order it was written" in found
