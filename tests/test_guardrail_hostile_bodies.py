"""The reference guardrail service against hostile bodies: valid JSON well under the size limit
that nests past the depth limit, holds lone surrogates, or is a tool call it cannot read.

Each is a JSON 4xx with one log line (never a 500 and a traceback), a function call whose
arguments no rule can read is BLOCKed (never ALLOWed), and a rules file the service would
misread is refused when it loads. Real HTTP on loopback.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import jsonschema
import pytest

from agentjournal.errors import InvalidInput
from agentjournal.guardrails.rules import SCHEMA_FILE, load_rules
from agentjournal.guardrails.service import MAX_DEPTH, running

RULES = load_rules(
    """
rules:
  - kind: ceiling
    tool: issue_refund
    argument: amount_cents
    max: 5000
  - kind: redact_pii
"""
)
TRACE = {"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}


def _body(action_type: str, payload: Any, action_id: str = "a-1") -> dict[str, Any]:
    return {
        "action_id": action_id,
        "action_type": action_type,
        "source_agent_id": "billing",
        "thread_id": "t-1",
        "trace": TRACE,
        "payload": payload,
    }


def _nested(levels: int, inner: Any) -> Any:
    value = inner
    for _ in range(levels):
        value = {"x": value}
    return value


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": "call_1", "type": "function", "function": {"name": name, "arguments": arguments}}


def _deep_arguments(levels: int) -> str:
    return "[" * levels + "1" + "]" * levels


CASES: list[tuple[str, bytes, str]] = [
    (
        "a payload nested 300 levels around an e-mail address",
        json.dumps(_body("AGENT_INPUT", _nested(300, "mail me: a@example.com"))).encode(),
        "the body: nested deeper than",
    ),
    (
        "a payload nested 600 levels",
        json.dumps(_body("AGENT_INPUT", _nested(600, "x"))).encode(),
        "the body: nested deeper than",
    ),
    (
        "tool call arguments nested 600 levels",
        json.dumps(_body("TOOL_CALL", _call("issue_refund", _deep_arguments(600)))).encode(),
        "the tool call's arguments: nested deeper than",
    ),
    (
        "a lone surrogate in action_id",
        json.dumps(_body("AGENT_INPUT", "hi", action_id="\ud800")).encode(),
        "lone surrogate",
    ),
    (
        "a lone surrogate in a payload the rules would modify",
        json.dumps(_body("AGENT_INPUT", "a@example.com \ud800")).encode(),
        "lone surrogate",
    ),
    (
        "a lone surrogate inside a tool call's arguments",
        json.dumps(_body("TOOL_CALL", _call("note", json.dumps({"t": "\ud800"})))).encode(),
        "lone surrogate",
    ),
    (
        "a tool call of an unknown shape",
        json.dumps(
            _body("TOOL_CALL", {"tool_name": "issue_refund", "arguments": {"a": 1}})
        ).encode(),
        "does not follow the contract",
    ),
    (
        "a tool call without a function name",
        json.dumps(_body("TOOL_CALL", _call("", "{}"))).encode(),
        "does not follow the contract",
    ),
]


@pytest.mark.parametrize(("case", "raw", "message"), CASES, ids=[c[0] for c in CASES])
async def test_a_hostile_body_is_a_json_4xx_with_one_log_line(
    caplog: pytest.LogCaptureFixture, case: str, raw: bytes, message: str
) -> None:
    caplog.set_level(logging.INFO, logger="agentjournal.guardrails.service")
    async with running(RULES) as url, httpx.AsyncClient() as http:
        answer = await http.post(
            f"{url}/v1/validate", content=raw, headers={"content-type": "application/json"}
        )
    assert answer.status_code == 422, answer.text
    assert message in answer.json()["error"]
    lines = [r for r in caplog.records if r.name == "agentjournal.guardrails.service"]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].exc_info is None
    assert len(lines[0].getMessage()) < 500


async def test_the_limit_itself_is_answered(caplog: pytest.LogCaptureFixture) -> None:
    within = _body("AGENT_INPUT", _nested(MAX_DEPTH - 1, "mail me: a@example.com"))
    async with running(RULES) as url, httpx.AsyncClient() as http:
        answer = await http.post(f"{url}/v1/validate", json=within)
    assert answer.status_code == 200, answer.text
    assert answer.json()["decision"] == "MODIFY"


async def test_a_custom_tool_s_raw_input_is_still_judged() -> None:
    custom = {
        "id": "call_2",
        "type": "custom_tool_call",
        "function": {"name": "shell", "arguments": "echo a@example.com"},
    }
    async with running(RULES) as url, httpx.AsyncClient() as http:
        answer = await http.post(f"{url}/v1/validate", json=_body("TOOL_CALL", custom))
    assert answer.status_code == 200, answer.text
    assert answer.json()["decision"] == "MODIFY"


def _schema_accepts(data: Any) -> bool:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    ("text", "data"),
    [
        (
            "rules: [{kind: ceiling, tool: t, argument: a, max: .nan}]",
            None,  # YAML's NaN has no JSON form: the schema cannot be asked
        ),
        (
            'rules: [{kind: ceiling, tool: t, argument: a, max: "5000"}]',
            {"rules": [{"kind": "ceiling", "tool": "t", "argument": "a", "max": "5000"}]},
        ),
        (
            "rules: [{kind: deny_tools, tools: [3]}]",
            {"rules": [{"kind": "deny_tools", "tools": [3]}]},
        ),
        (
            "rules: [{kind: ceiling, tool: t, argument: a, max: .inf}]",
            None,
        ),
    ],
)
def test_a_rules_file_the_schema_refuses_is_refused_at_load(
    text: str, data: dict[str, Any] | None
) -> None:
    with pytest.raises(InvalidInput, match=r"line 1: rules\.0\.(max|tools\.0): "):
        load_rules(text)
    if data is not None:
        assert not _schema_accepts(data)


def test_the_schema_and_the_loader_accept_the_same_good_file() -> None:
    data = {"rules": [{"kind": "ceiling", "tool": "t", "argument": "a", "max": 5000}]}
    assert _schema_accepts(data)
    assert load_rules(json.dumps(data)).rules[0].max == 5000  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("arguments", "reason"),
    [
        ('{"order_id": "42", "amount_cents": "9000"}', "CEILING_EXCEEDED"),  # a numeric string
        ('{"order_id": "42", "amount_cents": "lots"}', "CEILING_UNREADABLE"),
        ('{"order_id": "42", "amount_cents": NaN}', "TOOL_CALL_UNREADABLE"),
        ('{"order_id": "42", "amount_cents": 1e999}', "CEILING_UNREADABLE"),
        ('{"order_id": "42", "amount_cents": ' + "9" * 400 + "}", "CEILING_UNREADABLE"),
        ("not json at all", "TOOL_CALL_UNREADABLE"),
        ("[9000]", "TOOL_CALL_UNREADABLE"),
    ],
)
async def test_a_function_call_the_rules_cannot_read_is_blocked_not_allowed(
    arguments: str, reason: str
) -> None:
    async with running(RULES) as url, httpx.AsyncClient() as http:
        answer = await http.post(
            f"{url}/v1/validate", json=_body("TOOL_CALL", _call("issue_refund", arguments))
        )
    assert answer.status_code == 200, answer.text
    assert (answer.json()["decision"], answer.json()["reason_code"]) == ("BLOCK", reason)


async def test_a_call_within_the_ceiling_is_still_allowed() -> None:
    within = _call("issue_refund", '{"order_id": "42", "amount_cents": "1200"}')
    async with running(RULES) as url, httpx.AsyncClient() as http:
        answer = await http.post(f"{url}/v1/validate", json=_body("TOOL_CALL", within))
    assert answer.json()["decision"] == "ALLOW"
