"""The seed scenario of "Two agents in the Agents SDK": one policy, four gates, offline.

triage holds {billing.*, kb.*} with a USD 500 spend cap and internal egress;
billing requests {billing.read, billing.refund} with a USD 50 cap and is
granted the meet; sre requests infra.deploy, which triage does not hold.
Three runs, each with the SDK's ``ScriptedModel`` (its responder acts on what
the model is offered, like a real model would):

- escalate: triage hands off to sre if it is offered;
- credit:   triage hands off to billing, billing credits USD 250;
- export:   triage exports the knowledge base to destination "any".

Run: ``python samples/authority_seed.py [--no-visibility] [--no-policy]``.
Under the policy the sre handoff never reaches the model (or, with the
visibility gates off, is refused when called), the credit is refused on the
ceiling before the tool body runs, and the export is refused on its egress
argument; every refusal is an ``agentjournal.AuthorityRefused`` event. With
``--no-policy`` the same scripts deploy, credit and export.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

from agentjournal import AuthorityDenied, Journal, JournalSession
from agentjournal.authority import Policy
from agentjournal.events import AUTHORITY_REFUSED, AuthorityRefused

POLICY = """
agents:
  triage:
    scopes: [billing.*, kb.*]
    ceilings:
      spend: {kind: cap, limit: 50000}            # minor units: USD 500
      egress: {kind: ranked, order: [none, internal, any], level: internal}
  billing:
    scopes: [billing.read, billing.refund]
    ceilings:
      spend: {kind: cap, limit: 5000}             # USD 50
  sre:
    scopes: [infra.deploy]
tools:
  lookup_invoice: {scope: billing.read}
  issue_credit: {scope: billing.refund, ceilings: {spend: amount_cents}}
  kb_export: {scope: kb.export, ceilings: {egress: destination}}
  deploy: {scope: infra.deploy}
"""

SINK: list[str] = []  # what the tool bodies did


def credit_account(customer_id: str, amount_cents: int) -> str:
    """The body of ``issue_credit``: plain Python the policy cannot see when called directly."""
    SINK.append(f"credit {customer_id} {amount_cents}")
    return f"credited {amount_cents} cents to {customer_id}"


@function_tool
def issue_credit(customer_id: str, amount_cents: int) -> str:
    """Credit a customer's account."""
    return credit_account(customer_id, amount_cents)


@function_tool
def lookup_invoice(customer_id: str) -> str:
    """Look up a customer's latest invoice."""
    return f"invoice of {customer_id}: 250.00 USD, disputed"


@function_tool
def kb_export(query: str, destination: str) -> str:
    """Export knowledge-base articles to a destination (none, internal or any)."""
    SINK.append(f"export {query!r} to {destination}")
    return f"exported {query!r} to {destination}"


@function_tool
def deploy(service: str) -> str:
    """Deploy a service."""
    SINK.append(f"deploy {service}")
    return f"deployed {service}"


def _offered(call: ModelCall, name: str) -> bool:
    return any(h.tool_name == name for h in call.handoffs) or any(
        getattr(t, "name", None) == name for t in call.tools
    )


def graph(scenario: str) -> Agent[Any]:
    """Fresh agents scripted for one scenario (scripted models are consumed as they run)."""

    def escalate(call: ModelCall) -> Any:
        if _offered(call, "transfer_to_sre"):
            return [function_call("transfer_to_sre", {}, call_id="h_sre")]
        return [assistant_message("I cannot deploy; please ask the SRE on-call.")]

    triage_steps: dict[str, list[Any]] = {
        "escalate": [ModelStep(responder=escalate)],
        "credit": [[function_call("transfer_to_billing", {}, call_id="h_billing")]],
        "export": [
            [
                function_call(
                    "kb_export", {"query": "refunds", "destination": "any"}, call_id="c_export"
                )
            ],
            [assistant_message("The export did not go through.")],
        ],
    }
    sre: Agent[Any] = Agent(
        name="sre",
        model=ScriptedModel(
            [
                [function_call("deploy", {"service": "billing-api"}, call_id="c_deploy")],
                [assistant_message("Deployed.")],
            ]
        ),
        tools=[deploy],
    )
    billing: Agent[Any] = Agent(
        name="billing",
        model=ScriptedModel(
            [
                [
                    function_call(
                        "issue_credit",
                        {"customer_id": "c-7", "amount_cents": 25000},
                        call_id="c_credit",
                    )
                ],
                [assistant_message("I have looked at the credit.")],
            ]
        ),
        tools=[lookup_invoice, issue_credit, kb_export],
    )
    return Agent(
        name="triage",
        model=ScriptedModel(triage_steps[scenario]),
        tools=[kb_export],
        handoffs=[billing, sre],
    )


@dataclass
class Outcome:
    """What one run did."""

    scenario: str
    final: str
    did: list[str]
    refusals: list[AuthorityRefused] = field(default_factory=list)
    offered_to_triage: list[str] = field(default_factory=list)
    offered_to_billing: list[str] = field(default_factory=list)


async def run_scenario(journal: Journal, session: JournalSession, scenario: str) -> Outcome:
    """Run one scenario on a fresh session; report what happened."""
    SINK.clear()
    triage = graph(scenario)
    billing = next(h for h in triage.handoffs if getattr(h, "name", "") == "billing")
    config = RunConfig(tracing_disabled=True)
    try:
        result = await Runner.run(
            session.guard(triage), scenario, session=session, hooks=session, run_config=config
        )
        final = str(result.final_output)
    except AuthorityDenied as denied:
        final = f"stopped: {denied}"
    refusals = [
        AuthorityRefused.decode(event.data)
        for event in await journal.store.read_all()
        if event.type == AUTHORITY_REFUSED and session.session_id in event.stream
    ]
    return Outcome(
        scenario,
        final,
        list(SINK),
        refusals,
        _names(triage.model),
        _names(billing.model),  # type: ignore[union-attr]
    )


def _names(model: Any) -> list[str]:
    calls = model.calls
    if not calls:
        return []
    first = calls[0]
    return sorted([t.name for t in first.tools] + [h.tool_name for h in first.handoffs])


async def main_async(policy: Policy | None, path: Path) -> list[Outcome]:
    outcomes = []
    async with Journal.open(f"sqlite:///{path}") as journal:
        for scenario in ("escalate", "credit", "export"):
            session = journal.session(f"seed-{scenario}", policy=policy)
            outcomes.append(await run_scenario(journal, session, scenario))
    return outcomes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-visibility", action="store_true", help="switch the three visibility gates off"
    )
    parser.add_argument("--no-policy", action="store_true", help="run the same scripts unguarded")
    args = parser.parse_args(argv)
    policy = None
    if not args.no_policy:
        body = yaml.safe_load(POLICY)
        body["visibility"] = not args.no_visibility
        policy = Policy.from_json(body)
    with tempfile.TemporaryDirectory() as directory:
        outcomes = asyncio.run(main_async(policy, Path(directory) / "seed.db"))
    for outcome in outcomes:
        print(f"== {outcome.scenario}: {outcome.final}")
        print(f"   offered to triage: {', '.join(outcome.offered_to_triage)}")
        if outcome.offered_to_billing:
            print(f"   offered to billing: {', '.join(outcome.offered_to_billing)}")
        print(f"   tool bodies ran: {outcome.did or 'none'}")
        for refused in outcome.refusals:
            print(
                f"   refused at {refused.gate}: {refused.agent} -> {refused.subject} "
                f"({refused.reason}; {refused.enforcement})"
            )
    print("== a direct Python call around the SDK is not mediated:")
    SINK.clear()
    credit_account("c-7", 25000)
    print(f"   tool bodies ran: {SINK}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
