"""The reference guardrail service over real HTTP on loopback, asked by the real client."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentjournal.guardrails import ActionType, Decision, GuardrailClient, TraceRef
from agentjournal.guardrails.protocol import traceparent
from agentjournal.guardrails.rules import load_rules
from agentjournal.guardrails.service import running

TRACE = TraceRef(trace_id="4bf92f3577b34da6a3ce929d0e0e4736", span_id="00f067aa0ba902b7")
RULES = load_rules(
    """
rules:
  - kind: deny_tools
    tools: [delete_account]
  - kind: ceiling
    tool: issue_refund
    argument: amount_cents
    max: 5000
  - kind: deny_phrases
    phrases: ["drop table"]
  - kind: redact_pii
"""
)


def tool_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


async def ask(url: str, action: ActionType, payload: Any) -> Any:
    async with GuardrailClient(url) as client:
        return await client.validate(
            action, payload, source_agent_id="billing", thread_id="t-1", trace=TRACE
        )


@pytest.mark.slow
async def test_decisions_over_http(caplog: pytest.LogCaptureFixture) -> None:
    async with running(RULES) as url:
        allowed = await ask(
            url, ActionType.TOOL_CALL, tool_call("lookup_order", {"order_id": "42"})
        )
        denied = await ask(url, ActionType.TOOL_CALL, tool_call("delete_account", {}))
        capped = await ask(
            url,
            ActionType.TOOL_CALL,
            tool_call("issue_refund", {"order_id": "42", "amount_cents": 25000}),
        )
        under = await ask(
            url,
            ActionType.TOOL_CALL,
            tool_call("issue_refund", {"order_id": "42", "amount_cents": 1250}),
        )
        with caplog.at_level(logging.INFO, logger="agentjournal.guardrails.service"):
            redacted = await ask(
                url,
                ActionType.TOOL_CALL,
                tool_call("send_email", {"to": "ann@example.com", "body": "SSN 123-45-6789"}),
            )
        response = await ask(url, ActionType.AGENT_RESPONSE, "Sure, DROP TABLE users")
    assert allowed.decision is Decision.ALLOW
    assert (denied.decision, denied.reason_code) == (Decision.BLOCK, "TOOL_DENIED")
    assert (capped.decision, capped.reason_code) == (Decision.BLOCK, "CEILING_EXCEEDED")
    assert under.decision is Decision.ALLOW
    assert redacted.decision is Decision.MODIFY
    arguments = json.loads(redacted.effective_payload["function"]["arguments"])
    assert arguments == {"to": "[REDACTED]", "body": "SSN [REDACTED]"}
    assert (
        redacted.payload["function"]["arguments"]
        != redacted.effective_payload["function"]["arguments"]
    )
    assert (response.decision, response.reason_code) == (Decision.BLOCK, "PHRASE_DENIED")
    record = next(r for r in caplog.records if "MODIFY" in r.getMessage())
    assert record.trace_id == TRACE.trace_id  # type: ignore[attr-defined]
    assert record.span_id == TRACE.span_id  # type: ignore[attr-defined]


async def test_contract_violations_are_refused_and_openapi_is_served() -> None:
    async with running(RULES) as url, httpx.AsyncClient() as http:
        bad = await http.post(f"{url}/v1/validate", json={"action_type": "NOPE"})
        document = (await http.get(f"{url}/openapi.json")).json()
        health = await http.get(f"{url}/health", headers={"traceparent": traceparent(TRACE)})
    assert bad.status_code == 422
    assert "/v1/validate" in document["paths"]
    assert document["paths"]["/v1/validate"]["post"]["requestBody"]["required"] is True
    assert health.json() == {"status": "ok"}


@pytest.mark.slow
def test_bad_rules_file_is_a_clear_error(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text("rules: [{kind: ceiling, tool: x}]")
    result = subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", "guardrail", "serve", "--rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "invalid rules" in result.stderr
