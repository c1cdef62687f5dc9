"""Recorded sessions for the ledger tests, and the tools an attacker would use on a bundle.

Each session is written by the SDK's real ``Runner`` with a signing key, so
its bundle carries chains, twins, checkpoints, guardrail decisions and
authority grants. The attacker's tools rewrite digests and chains after an
edit, and re-sign checkpoints with whatever key they hold.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import handoff_scenarios
from agentjournal import Journal
from agentjournal.audit.export import export_bundle
from agentjournal.authority import Authority, Policy, ToolRule
from agentjournal.ledger import (
    CHECKPOINT,
    GENESIS,
    Checkpoint,
    SigningKey,
    chain_hash,
    signed_event_id,
)
from agentjournal.ledger.redaction import view, view_digest
from agentjournal.streams import KEYS_STREAM
from guardrail_scenarios import graph, run
from scripted_guardrail import ScriptedGuardrail

KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}
POLICY = Policy(
    agents={
        "triage": Authority.of("orders.*", "billing.*"),
        "billing": Authority.of("orders.read", "orders.refund"),
        "refunds": Authority.of("orders.refund"),
    },
    tools={
        "lookup_order": ToolRule("orders.read"),
        "issue_refund": ToolRule("orders.refund"),
    },
)


async def _record() -> dict[str, dict[str, Any]]:
    bundles: dict[str, dict[str, Any]] = {}
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        async with ScriptedGuardrail() as guardrail:
            guarded = journal.session("guarded", guardrails=guardrail.url, policy=POLICY)
            g = graph()
            await run(guarded.guard(g.triage), guarded)
            # A second run, streamed: more checkpoints.
            await run(graph().triage, guarded, method="run_streamed")
        nested = journal.session("nested", policy=POLICY)
        agent = handoff_scenarios.nested()
        await run(agent, nested, text="refund please")
        simple = journal.session("simple")
        for text in ("hello", "again"):
            await simple.add_items([{"role": "user", "content": text}])
        await simple.checkpoint()
        for name in ("guarded", "nested", "simple"):
            bundles[name] = await export_bundle(journal.store, name)
    return bundles


def record() -> dict[str, dict[str, Any]]:
    """Bundles of three recorded sessions: guarded (guardrail and policy), nested, simple."""
    return asyncio.run(_record())


def stream_of(bundle: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The first stream whose name starts with ``prefix``."""
    return next(s for s in bundle["streams"] if s["name"].startswith(prefix))


def rechain(bundle: dict[str, Any], name: str) -> None:
    """Recompute the digests, view commitments and the chain of one stream after an edit
    (no key needed)."""
    stream = next(s for s in bundle["streams"] if s["name"] == name)
    prev = GENESIS
    for revision, event in enumerate(stream["events"]):
        event["revision"] = revision
        metadata = event["metadata"]
        if event["data"] is not None:
            event["data_sha256"] = hashlib.sha256(event["data"].encode()).hexdigest()
            if "aj.redacted" in metadata:
                try:
                    shown = view(event["type"], event["data"].encode(), metadata)
                except ValueError:
                    shown = None
                if shown is not None:
                    metadata["aj.redacted"] = view_digest(shown)
        elif event.get("view") is not None:
            metadata["aj.redacted"] = view_digest(event["view"])
        metadata["aj.seq"], metadata["aj.prev"] = str(revision), prev
        metadata["aj.hash"] = chain_hash(
            name, revision, event["id"], event["type"], event["data_sha256"], metadata
        )
        prev = metadata["aj.hash"]


def resign(bundle: dict[str, Any], key: SigningKey) -> None:
    """Replace the last checkpoint by one over the bundle's current heads, signed by ``key``."""
    ledger = next(s for s in bundle["streams"] if s["name"].startswith("AgentLedger-"))
    sign_heads(bundle, key, json.loads(ledger["events"][-1]["data"])["heads"])


def sign_heads(bundle: dict[str, Any], key: SigningKey, names: Iterable[str] | None = None) -> None:
    """Replace every checkpoint by one over the current heads of the streams ``names``
    (default: every stream with events but the ledger and ``AgentKeys``), signed by ``key``:
    what only the key's holder could do. The checkpoints then vouch for an edit; only the
    structural checks can catch it."""
    ledger = next(s for s in bundle["streams"] if s["name"].startswith("AgentLedger-"))
    current = {s["name"]: s["events"] for s in bundle["streams"]}
    if names is None:
        names = [n for n, e in current.items() if e and n not in (ledger["name"], KEYS_STREAM)]
    heads = {n: (len(current[n]) - 1, current[n][-1]["metadata"]["aj.hash"]) for n in names}
    last = ledger["events"][-1]
    signed = Checkpoint.sign(
        key,
        bundle["session_id"],
        heads,
        datetime.now(UTC),
        sequence=0,
        previous=GENESIS,
        metadata=last["metadata"],
    )
    last["type"] = CHECKPOINT
    last["data"] = signed.encode().decode()
    last["id"] = str(signed_event_id(ledger["name"], signed.signature))
    ledger["events"] = [last]  # earlier checkpoints would name the old heads
    rechain(bundle, ledger["name"])


def relink(bundle: dict[str, Any]) -> None:
    """Point every parent's ``aj.closes_hash`` at its subsession's current head, rechaining."""
    streams = {s["name"]: s["events"] for s in bundle["streams"]}
    for _ in streams:  # innermost first, one level per pass
        for name, events in streams.items():
            for event in events:
                child = event["metadata"].get("aj.closes")
                if child in streams:
                    event["metadata"]["aj.closes_hash"] = streams[child][-1]["metadata"]["aj.hash"]
            rechain(bundle, name)


def edited(bundle: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(bundle)
