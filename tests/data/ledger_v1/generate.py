"""Write the format 1 fixture: bundles of a session recorded by agentjournal before chain
format 2 (commit fb8a450), for ``tests/test_ledger_format.py``.

Run from a checkout of that commit (its ``src`` and ``tests`` on the path), e.g.::

    git archive fb8a450 | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base/src:/tmp/base/tests python tests/data/ledger_v1/generate.py

It writes ``nested.json`` and ``nested-redacted.json`` (the Runner-driven session with a
policy and two nested handoffs of ``handoff_scenarios.nested``, a checkpoint at the end) and
``public-key.txt``, the public key that signed their checkpoints (PEM text, not named
``*.pem``: .gitignore keeps those out of the repository).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import handoff_scenarios
from agentjournal import Journal
from agentjournal.audit.export import export_bundle
from agentjournal.authority import Authority, Policy, ToolRule
from agentjournal.ledger import SigningKey
from guardrail_scenarios import run

HERE = Path(__file__).parent
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


async def main() -> None:
    key = SigningKey.generate()
    async with Journal.open("sqlite://:memory:", signing_key=key) as journal:
        session = journal.session("nested", policy=POLICY)
        await run(handoff_scenarios.nested(), session, text="refund please")
        await session.checkpoint()
        for name, redact in (("nested.json", False), ("nested-redacted.json", True)):
            bundle = await export_bundle(journal.store, "nested", redact=redact)
            (HERE / name).write_text(json.dumps(bundle, indent=1, ensure_ascii=False) + "\n")
    (HERE / "public-key.txt").write_text(key.public_pem())


if __name__ == "__main__":
    asyncio.run(main())
