"""The guardrail client against a real HTTP server on loopback: decisions and every fault."""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import pytest

from agentjournal.guardrails import (
    ActionType,
    Decision,
    GuardrailClient,
    ReasonCode,
    TraceRef,
)
from agentjournal.guardrails.protocol import parse_traceparent, traceparent
from http_stub import HttpStub, Received, Reply

TRACE = TraceRef(trace_id="0af7651916cd43dd8448eb211c80319c", span_id="b7ad6b7169203331")
TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "send_email", "arguments": '{"body": "SSN 123-45-6789"}'},
}


def answer(request: Received, **fields: Any) -> Reply:
    body = {"action_id": request.json()["action_id"], **fields}
    return Reply(body=json.dumps(body).encode())


async def ask(url: str, *, fits: Any = None, **options: Any) -> Any:
    async with GuardrailClient(url, **options) as client:
        return await client.validate(
            ActionType.TOOL_CALL,
            TOOL_CALL,
            source_agent_id="billing",
            thread_id="support-4711",
            trace=TRACE,
            tracestate="vendor=1",
            fits=fits,
        )


async def test_allow_sends_the_contract_and_trace_headers() -> None:
    async with HttpStub(lambda r: answer(r, decision="ALLOW")) as stub:
        verdict = await ask(stub.url)
    assert verdict.decision is Decision.ALLOW
    assert verdict.allowed
    assert not verdict.fault
    assert verdict.effective_payload == TOOL_CALL
    (request,) = stub.received
    assert request.path == "/v1/validate"
    assert request.headers["traceparent"] == traceparent(TRACE)
    assert request.headers["tracestate"] == "vendor=1"
    body = request.json()
    assert body["action_type"] == "TOOL_CALL"
    assert body["source_agent_id"] == "billing"
    assert body["thread_id"] == "support-4711"
    assert body["trace"] == {"trace_id": TRACE.trace_id, "span_id": TRACE.span_id}
    assert body["payload"] == TOOL_CALL
    assert verdict.action_id == body["action_id"]


async def test_modify_replaces_the_payload_and_keeps_the_original() -> None:
    redacted = {
        **TOOL_CALL,
        "function": {"name": "send_email", "arguments": '{"body": "SSN [REDACTED]"}'},
    }

    def modify(request: Received) -> Reply:
        return answer(
            request,
            decision="MODIFY",
            reason_code="PII_REDACTED",
            reason_message="redacted",
            modified_payload=redacted,
        )

    async with HttpStub(modify) as stub:
        verdict = await ask(stub.url)
    assert verdict.decision is Decision.MODIFY
    assert verdict.effective_payload == redacted
    assert verdict.payload == TOOL_CALL
    assert verdict.reason_code == "PII_REDACTED"


async def test_block_is_a_block() -> None:
    async with HttpStub(lambda r: answer(r, decision="BLOCK", reason_code="DENY")) as stub:
        verdict = await ask(stub.url)
    assert (verdict.decision, verdict.reason_code, verdict.fault) == (Decision.BLOCK, "DENY", False)
    assert not verdict.allowed


FAULTS = {
    "5xx": (lambda r: Reply(status=503), ReasonCode.GUARDRAIL_UNAVAILABLE),
    "429": (lambda r: Reply(status=429), ReasonCode.GUARDRAIL_UNAVAILABLE),
    "404": (lambda r: Reply(status=404), ReasonCode.GUARDRAIL_PROTOCOL_ERROR),
    "html": (
        lambda r: Reply(content_type="text/html", body=b"<html>ok</html>"),
        ReasonCode.GUARDRAIL_PROTOCOL_ERROR,
    ),
    "malformed-json": (lambda r: Reply(body=b"{not json"), ReasonCode.GUARDRAIL_PROTOCOL_ERROR),
    "oversized": (
        lambda r: Reply(body=b'{"x": "' + b"a" * 2_000_000 + b'"}'),
        ReasonCode.GUARDRAIL_PROTOCOL_ERROR,
    ),
    "other-action": (
        lambda r: Reply(body=json.dumps({"action_id": "nope", "decision": "ALLOW"}).encode()),
        ReasonCode.GUARDRAIL_PROTOCOL_ERROR,
    ),
    "unknown-decision": (
        lambda r: answer(r, decision="MAYBE"),
        ReasonCode.GUARDRAIL_PROTOCOL_ERROR,
    ),
    "unknown-field": (
        lambda r: answer(r, decision="ALLOW", confidence=0.3),
        ReasonCode.GUARDRAIL_PROTOCOL_ERROR,
    ),
    "wrong-type": (
        lambda r: answer(r, decision="ALLOW", reason_code=7),
        ReasonCode.GUARDRAIL_PROTOCOL_ERROR,
    ),
    "modify-without-payload": (
        lambda r: answer(r, decision="MODIFY"),
        ReasonCode.GUARDRAIL_INVALID_MODIFICATION,
    ),
    "slow": (lambda r: Reply(delay=5.0), ReasonCode.GUARDRAIL_UNAVAILABLE),
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_every_fault_blocks_with_a_reason(fault: str) -> None:
    handler, code = FAULTS[fault]
    async with HttpStub(handler) as stub:
        verdict = await ask(stub.url, timeout=0.5)
    assert verdict.decision is Decision.BLOCK
    assert verdict.fault
    assert verdict.reason_code == code.value
    assert verdict.reason_message
    assert verdict.effective_payload == TOOL_CALL  # nothing modified reaches the caller


async def test_connection_refused_blocks() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    verdict = await ask(f"http://127.0.0.1:{port}")
    assert (verdict.decision, verdict.reason_code) == (
        Decision.BLOCK,
        ReasonCode.GUARDRAIL_UNAVAILABLE.value,
    )


async def test_a_modification_that_does_not_fit_blocks() -> None:
    def modify(request: Received) -> Reply:
        return answer(request, decision="MODIFY", modified_payload={"unexpected": True})

    async with HttpStub(modify) as stub:
        verdict = await ask(stub.url, fits=lambda payload: "function" in payload)
    assert (verdict.decision, verdict.reason_code) == (
        Decision.BLOCK,
        ReasonCode.GUARDRAIL_INVALID_MODIFICATION.value,
    )


async def test_failing_open_is_explicit_and_loud(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="agentjournal.guardrails"):
        async with HttpStub(lambda r: Reply(status=500)) as stub:
            verdict = await ask(stub.url, fail_open=True)
    assert verdict.decision is Decision.ALLOW
    assert verdict.fault
    assert verdict.reason_code == ReasonCode.GUARDRAIL_FAILED_OPEN.value
    assert "FAILS OPEN" in caplog.text
    assert "FAILING OPEN" in caplog.text


def test_traceparent_round_trip_and_refusals() -> None:
    assert parse_traceparent(traceparent(TRACE)) == TRACE
    assert parse_traceparent("00-" + "0" * 32 + "-b7ad6b7169203331-01") is None
    assert parse_traceparent("garbage") is None


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="http"):
        GuardrailClient("ftp://x")
    with pytest.raises(ValueError, match="timeout"):
        GuardrailClient("http://x", timeout=0)


async def test_a_breaking_fits_check_blocks() -> None:
    def modify(request: Received) -> Reply:
        return answer(request, decision="MODIFY", modified_payload={"x": 1})

    def broken(payload: Any) -> bool:
        raise KeyError("function")

    async with HttpStub(modify) as stub:
        verdict = await ask(stub.url, fits=broken)
    assert (verdict.decision, verdict.reason_code) == (
        Decision.BLOCK,
        ReasonCode.GUARDRAIL_INVALID_MODIFICATION.value,
    )


async def test_a_payload_that_cannot_be_sent_blocks() -> None:
    async with HttpStub(lambda r: Reply()) as stub, GuardrailClient(stub.url) as client:
        verdict = await client.validate(
            ActionType.AGENT_RESPONSE,
            {"not json": object()},
            source_agent_id="a",
            thread_id="t",
            trace=TRACE,
        )
    assert verdict.decision is Decision.BLOCK
    assert verdict.fault
    assert stub.received == []
