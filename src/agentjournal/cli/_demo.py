"""``agentjournal demo``: a scripted support conversation, offline, on the embedded store.

Triage hands off to billing, billing looks the order up, notes the dispute
and hands off to refunds, refunds issues the refund; then the customer says
thanks and triage answers. The models are the SDK's ``ScriptedModel``: no
network, no API key.

The reference guardrail service runs on loopback and checks every action
through the session's hooks and ``session.guard(agent)``: it redacts the
customer's e-mail address from billing's note (MODIFY: the tool runs with the
redacted arguments) and refuses a refund above its ceiling (BLOCK: the tool
never runs, refunds sees an error and retries within policy). The demo prints
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

import os
import shlex
import time
import uuid
from collections.abc import Callable
from typing import Any, Final

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from agents.usage import Usage

from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle
from agentjournal.authority import Policy
from agentjournal.errors import InvalidInput
from agentjournal.guardrails.rules import RuleSet, load_rules
from agentjournal.guardrails.service import running
from agentjournal.journal import Journal
from agentjournal.ledger import SIGNING_KEY_FILE_ENV, SigningKey
from agentjournal.read.views import describe_item, print_tree
from agentjournal.store import store_uri
from agentjournal.streams import session_stream, validate_id
from agentjournal.walk import read_tree

Print = Callable[[str], None]

DEMO_KEY: Final = "agentjournal-demo.pem"
"""The key the demo signs with when none is configured (in the working directory)."""

RULES = """
rules:
  - kind: ceiling        # refunds above 20.00 EUR need a human
    tool: issue_refund
    argument: amount_cents
    max: 2000
  - kind: redact_pii     # no customer e-mail address, SSN or card number reaches a tool
"""


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order's charges."""
    return f"order {order_id}: charged twice on 2026-11-02, 12.50 EUR each"


@function_tool
def add_note(order_id: str, note: str) -> str:
    """Add a note to an order."""
    return f"noted on order {order_id}: {note}"


@function_tool
def issue_refund(order_id: str, amount_cents: int) -> str:
    """Refund part of an order."""
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


async def run_demo(
    uri: str,
    out: Print = print,
    *,
    session_id: str | None = None,
    key_file: str | None = None,
    rules_file: str | None = None,
    policy_file: str | None = None,
) -> int:
    """Run the demo against the store at ``uri``; returns the exit code.

    Args:
        uri: The store to write (created when missing).
        out: Where each line of output goes.
        session_id: The new session's id (default: ``support-`` and 8 random hex digits).
        key_file: The signing key file, made (mode 600, with ``.pub``) when missing.
            Default: the configured key, else :data:`DEMO_KEY`.
        rules_file: The guardrail's rules (YAML; default :data:`RULES`).
        policy_file: The authority policy (YAML; default: none).

    Raises:
        InvalidInput: The session exists already; a file cannot be read or is malformed.
        StoreUnavailable: The store cannot be opened.
    """
    started = time.monotonic()
    session_id = validate_id(session_id or f"support-{uuid.uuid4().hex[:8]}", "session id")
    rules = load_rules(RULES) if rules_file is None else _rules(rules_file)
    policy = None if policy_file is None else Policy.load(policy_file)
    key, public = _demo_key(key_file)
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
        out(f"session {session_id}, guardrail service {guardrail}")
        for agent, text in (
            (support_agents(), "Why was I charged twice for order 42?"),
            (thanks_agent(), "Thanks!"),
        ):
            async with session.run_scope():
                result = await Runner.run(
                    session.guard(agent), text, session=session, hooks=session, run_config=config
                )
            out(f"  user: {text}")
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
        f"show {session_id}{where}",
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


def _rules(path: str) -> RuleSet:
    """The guardrail rules in the YAML file ``path``.

    Raises:
        InvalidInput: The file cannot be read or holds no valid rules.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            return load_rules(handle.read())
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInput(f"cannot read rules {path}: {error}") from None
    except ValueError as error:
        raise InvalidInput(f"invalid rules in {path}: {error}") from None


def _demo_key(key_file: str | None) -> tuple[SigningKey, str]:
    """The signing key and how to name its public key on the command line.

    ``key_file`` when given (made when missing), else the configured key, else
    :data:`DEMO_KEY` (made when missing). A key file's public key is the file
    beside it (``.pub``); a key from the environment is named by its hex.
    """
    if key_file is None:
        configured = SigningKey.from_environment()
        if configured is not None:
            return configured, _public_ref(configured, os.environ.get(SIGNING_KEY_FILE_ENV))
        key_file = DEMO_KEY
    if os.path.exists(key_file):
        key = SigningKey.from_file(key_file)
        return key, _public_ref(key, key_file)
    folder = os.path.dirname(os.path.abspath(key_file))
    if not os.path.isdir(folder):
        raise InvalidInput(f"cannot write {key_file}: folder {folder} does not exist")
    key = SigningKey.generate()
    descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(key.private_pem())
    with open(f"{key_file}.pub", "w", encoding="utf-8") as handle:
        handle.write(key.public_pem())
    return key, shlex.quote(f"{key_file}.pub")


def _public_ref(key: SigningKey, key_file: str | None) -> str:
    """``KEY.pub`` when that file holds this key's public key, else the key in hex."""
    if key_file:
        try:
            with open(f"{key_file}.pub", encoding="utf-8") as handle:
                if handle.read(64 * 1024) == key.public_pem():
                    return shlex.quote(f"{key_file}.pub")
        except (OSError, UnicodeDecodeError):
            pass
    return key.public_key.public_bytes_raw().hex()
