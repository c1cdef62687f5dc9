"""``agentjournal demo``: a scripted support conversation, offline, on the embedded store.

Triage hands off to billing, billing looks the order up, notes the dispute
and hands off to refunds, refunds issues the refund; then the customer says
thanks and triage answers. The models are the SDK's ``ScriptedModel``: no
network, no API key.

The reference guardrail service runs on loopback and checks every action
through the session's hooks and ``session.guard(agent)``: it redacts the
customer's e-mail address from billing's note (MODIFY: the tool runs with the
redacted arguments) and refuses a refund above its ceiling (BLOCK: the tool
never runs, refunds sees an error and retries within policy). The refund within the
ceiling waits for a person: the run stops, is held (``session.hold``), approved by
``demo-operator`` (``session.approve``) and resumed from the record
(``session.resume``), all on the record. The demo prints
every stream of the session tree, decisions included (the view `agentjournal show`
prints), and the flat history the
SDK gets back; then it exports the session tree and verifies it offline (hash
chains, signed checkpoints, twins, containment) and prints the command that
verifies it again from the store.

It writes to the store every command uses (``--uri``, else ``$AGENTJOURNAL_URI``,
else ``./agentjournal.db``) and signs with the configured key, else with
``./agentjournal-demo.pem`` (made when missing), so ``agentjournal verify`` works
on its session as printed. ``--rules`` and ``--policy`` take the files in
``samples/``.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from typing import Any

from agents import Agent, RunConfig, RunContextWrapper, Runner, function_tool
from agents.result import RunResult
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage

from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle
from agentjournal.cli.demo import DemoSetup
from agentjournal.errors import InvalidInput
from agentjournal.guardrails.service import running
from agentjournal.journal import Journal
from agentjournal.read.views import describe_item, print_tree
from agentjournal.sdk.session import JournalSession
from agentjournal.store import store_uri
from agentjournal.streams import session_stream
from agentjournal.walk import read_tree

Print = Callable[[str], None]


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order's charges."""
    return f"order {order_id}: charged twice on 2026-11-02, 12.50 EUR each"


@function_tool
def add_note(order_id: str, note: str) -> str:
    """Add a note to an order."""
    return f"noted on order {order_id}: {note}"


APPROVAL_FROM_CENTS = 1000
"""A refund from this amount up waits for a person's approval (above the guardrail's
ceiling it is blocked anyway: no one is asked)."""
CEILING_CENTS = 2000
"""The default rules' refund ceiling (:data:`agentjournal.cli.demo.RULES`)."""
OPERATOR = "demo-operator"
"""Who approves the demo's refund (recorded on its ``InterruptResolved``)."""


async def _refund_needs_approval(
    context: RunContextWrapper[Any], arguments: dict[str, Any], call_id: str
) -> bool:
    """Refunds of 10.00 EUR up to the ceiling wait for an operator."""
    amount = arguments.get("amount_cents")
    return isinstance(amount, int) and APPROVAL_FROM_CENTS <= amount <= CEILING_CENTS


@function_tool(needs_approval=_refund_needs_approval)
def issue_refund(order_id: str, amount_cents: int) -> str:
    """Refund part of an order (from 10.00 EUR, an operator approves it first)."""
    return f"refund of {amount_cents} cents on order {order_id} accepted"


def _usage(tokens_in: int, tokens_out: int) -> Usage:
    return Usage(
        requests=1,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        total_tokens=tokens_in + tokens_out,
    )


def _step(*output: Any, tokens: int = 120) -> ModelStep:
    return ModelStep(output=list(output), usage=_usage(tokens, 30))


DEMO_MODEL = "scripted-demo"
"""The name the demo's scripted models go by (what ``agentjournal usage`` shows for them)."""


def _scripted(steps: list[ModelStep]) -> ScriptedModel:
    """A scripted model with a name, as a real one has: usage and traces show it."""
    model = ScriptedModel(steps)
    model.model = DEMO_MODEL  # type: ignore[attr-defined]
    return model


def support_agents() -> Agent[Any]:
    """Triage, billing and refunds, scripted for the first turn of the demo."""
    refunds = Agent[Any](
        name="refunds",
        instructions="Issue refunds within policy.",
        model=_scripted(
            [
                _step(
                    function_call(
                        "issue_refund",
                        {"order_id": "42", "amount_cents": 2500},
                        call_id="call_refund_both",
                    )
                ),
                _step(
                    function_call(
                        "issue_refund",
                        {"order_id": "42", "amount_cents": 1250},
                        call_id="call_refund",
                    )
                ),
                _step(
                    assistant_message(
                        "I refunded the duplicate charge of 12.50 EUR.", item_id="msg_refunds"
                    )
                ),
            ]
        ),
        tools=[issue_refund],
    )
    billing = Agent[Any](
        name="billing",
        instructions="Explain charges; hand refunds to the refunds agent.",
        model=_scripted(
            [
                _step(function_call("lookup_order", {"order_id": "42"}, call_id="call_lookup")),
                _step(
                    function_call(
                        "add_note",
                        {"order_id": "42", "note": "ann@example.com disputes a double charge"},
                        call_id="call_note",
                    )
                ),
                _step(function_call("transfer_to_refunds", {}, call_id="call_to_refunds")),
            ]
        ),
        tools=[lookup_order, add_note],
        handoffs=[refunds],
    )
    return Agent[Any](
        name="triage",
        instructions="Route the customer to the right specialist.",
        model=_scripted(
            [_step(function_call("transfer_to_billing", {}, call_id="call_to_billing"))]
        ),
        handoffs=[billing],
    )


def thanks_agent() -> Agent[Any]:
    """Triage, scripted for the second turn."""
    return Agent[Any](
        name="triage",
        model=_scripted([_step(assistant_message("Glad I could help!", item_id="msg_triage"))]),
    )


async def _approve_and_resume(
    session: JournalSession,
    agent: Agent[Any],
    paused: RunResult,
    config: RunConfig,
    out: Print,
) -> RunResult:
    """The run stopped for approval: hold it, approve as :data:`OPERATOR`, resume it."""
    (waiting,) = await session.hold(paused)
    out(
        f"  {waiting.agent} asks to run {waiting.tool_name}({waiting.arguments}): "
        "the run waits for approval, held on the record"
    )
    await session.approve(waiting.request_id, by=OPERATOR, reason="the duplicate charge only")
    out(f"  {OPERATOR} approved {waiting.request_id}; the run resumes from the record")
    async with session.run_scope():
        return await session.resume(agent, run_config=config)


async def run_demo(uri: str, setup: DemoSetup, out: Print = print) -> int:
    """Run the demo against the store at ``uri``; returns the exit code.

    Args:
        uri: The store to write (created when missing).
        setup: The session id, key, rules and policy, read and checked before the
            Agents SDK was loaded (:func:`agentjournal.cli.demo.prepare`).
        out: Where each line of output goes.

    Raises:
        InvalidInput: The session exists already.
        StoreUnavailable: The store cannot be opened.
    """
    session_id, key, public = setup.session_id, setup.key, setup.public
    rules, policy, started = setup.rules, setup.policy, setup.started
    config = RunConfig(tracing_disabled=True)
    async with (
        running(rules) as guardrail,
        Journal.open(uri, signing_key=key) as journal,
    ):
        if await journal.store.head(session_stream(session_id)) is not None:
            raise InvalidInput(
                f"session {session_id} exists already: choose another --session, or leave it "
                "out for a new one"
            )
        session = journal.session(
            session_id,
            app_name="agentjournal-demo",
            user_id="customer-7",
            agent_name="triage",
            guardrails=guardrail,
            policy=policy,
        )
        out(f"guardrail service {guardrail}")
        for agent, text in (
            (support_agents(), "Why was I charged twice for order 42?"),
            (thanks_agent(), "Thanks!"),
        ):
            guarded = session.guard(agent)
            out(f"  user: {text}")
            async with session.run_scope():
                result = await Runner.run(
                    guarded, text, session=session, hooks=session, run_config=config
                )
            if result.interruptions:
                result = await _approve_and_resume(session, guarded, result, config, out)
            out(f"  {result.last_agent.name}: {result.final_output}")
        out("")
        print_tree(await read_tree(journal.store, session_id), out)
        out("")
        items = await session.get_items()
        out(f"replayed flat history ({len(items)} items, as the SDK gets it back):")
        for number, item in enumerate(items):
            out(f"  {number:>2}  {describe_item(item)}")
        out("")
        out("offline verification of the exported bundle (chains, signatures, twins, containment):")
        bundle = await export_bundle(journal.store, session_id)
    report = verify_bundle(bundle, {key.key_id: key.public_key})
    for line in report.text().splitlines():
        out(f"  {line}")
    out("")
    out(f"store: {uri}")
    # Name the store only when `verify` would not find it by itself.
    where = "" if uri == store_uri() else f" --uri {shlex.quote(uri)}"
    out("look at it:")
    for command in (
        f"sessions{where} --pubkey {public}",
        f"show {session_id}{where} --pubkey {public}",
        f"replay {session_id}{where}",
        f"usage {session_id}{where}",
        f"tail {session_id}{where}",
        f"trace export {session_id}{where} --console",
    ):
        out(f"  agentjournal {command}")
    out(f"verify it yourself: agentjournal verify {session_id}{where} --pubkey {public}")
    out(
        f"see it in the browser: agentjournal ui{where} --pubkey {public}, then open "
        f"/sessions/{session_id} at the address it prints"
    )
    out(f"done in {time.monotonic() - started:.1f} s")
    return 0 if report.ok else 2
