"""A redacted bundle holds no conversation anywhere, and still verifies completely.

One session written by the SDK's real Runner plants a unique marker in every
kind of payload: the user's message, reasoning, tool arguments (one of them
PII that the guardrail redacts with a MODIFY), a refused argument, tool and
custom-tool outputs, a custom tool's input, the handoff's arguments, the final
answer. The redacted bundle file is searched for each marker, and verified:
chains, views against their commitments, checkpoints, delegation, and
containment by digest (ceilings included).
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from agents import Agent, CustomTool, function_tool, handoff
from agents.testing import ScriptedModel, assistant_message, function_call
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseCustomToolCall, ResponseReasoningItem
from openai.types.responses.response_reasoning_item import Summary
from pydantic import BaseModel

from agentjournal import Journal
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle
from agentjournal.authority import (
    AllowList,
    Authority,
    Cap,
    Policy,
    Ranked,
    ToolRule,
    ceiling_inputs,
    input_permits,
)
from agentjournal.ledger.redaction import view, view_digest
from guardrail_scenarios import run
from http_stub import Reply
from ledger_sessions import KEY, TRUSTED, rechain, relink, resign
from scripted_guardrail import Replier, ScriptedGuardrail

MARKERS = {
    "user": "MARKUSER7c1",
    "reasoning": "MARKREASON2b9",
    "argument": "MARKARG5d3",
    "pii": "markpii9e4@example.com",
    "refused": "MARKREFUSED1a8",
    "tool output": "MARKOUT3f6",
    "custom input": "MARKCUSTOM8d2",
    "custom output": "MARKCUSTOMOUT4c7",
    "handoff": "MARKHANDOFF6e5",
    "final": "MARKFINAL0a3",
}

POLICY = Policy(
    agents={
        "triage": Authority.of(
            "orders.*", region=AllowList(frozenset({"eu", "us"})), spend=Cap(5_000)
        ),
        "billing": Authority.of("orders.read"),
    },
    tools={
        "lookup_order": ToolRule("orders.read"),
        "issue_refund": ToolRule("orders.refund", {"region": "region", "spend": "amount_cents"}),
        "wipe": ToolRule("orders.write"),
    },
)


class Escalation(BaseModel):
    reason: str


def _agents() -> Agent[Any]:
    @function_tool
    def lookup_order(order_id: str, contact: str) -> str:
        """Look up an order."""
        return f"{MARKERS['tool output']} for {order_id}"

    @function_tool
    def issue_refund(order_id: str, amount_cents: int, region: str) -> str:
        """Refund an order."""
        return f"refunded {amount_cents}"

    def wipe(ctx: Any, text: str) -> str:
        return MARKERS["custom output"]

    async def on_handoff(ctx: Any, escalation: Escalation) -> None:
        return None

    billing: Agent[Any] = Agent(
        name="billing", model=ScriptedModel([[assistant_message(MARKERS["final"])]])
    )
    thinking = ResponseReasoningItem(
        id="r1", type="reasoning", summary=[Summary(text=MARKERS["reasoning"], type="summary_text")]
    )
    refund = {"order_id": "o1", "amount_cents": 250}
    return Agent(
        name="triage",
        model=ScriptedModel(
            [
                [
                    thinking,
                    function_call(
                        "lookup_order",
                        {"order_id": MARKERS["argument"], "contact": MARKERS["pii"]},
                        call_id="t1",
                    ),
                ],
                [
                    function_call(
                        "issue_refund", {**refund, "region": MARKERS["refused"]}, call_id="t2"
                    )
                ],
                [function_call("issue_refund", {**refund, "region": "eu"}, call_id="t3")],
                [
                    ResponseCustomToolCall(
                        type="custom_tool_call",
                        call_id="c1",
                        name="wipe",
                        input=MARKERS["custom input"],
                    )
                ],
                [
                    function_call(
                        "transfer_to_billing", {"reason": MARKERS["handoff"]}, call_id="h1"
                    )
                ],
            ]
        ),
        tools=[
            lookup_order,
            issue_refund,
            CustomTool(name="wipe", description="Wipe.", on_invoke_tool=wipe),
        ],
        handoffs=[handoff(billing, input_type=Escalation, on_handoff=on_handoff)],
    )


def _redact_pii(body: dict[str, Any]) -> Reply:
    """ALLOW, but a tool call that carries an e-mail address is MODIFIED without it."""
    payload = body["payload"]
    answer: dict[str, Any] = {"action_id": body["action_id"], "decision": "ALLOW"}
    text = json.dumps(payload)
    if body["action_type"] == "TOOL_CALL" and "@" in text:
        function = payload["function"]
        redacted = re.sub(r"[\w.]+@[\w.]+", "[EMAIL]", function["arguments"])
        answer.update(
            decision="MODIFY",
            reason_code="PII",
            reason_message=f"redacted {MARKERS['pii']}",
            modified_payload={**payload, "function": {**function, "arguments": redacted}},
        )
    return Reply(body=json.dumps(answer).encode())


async def _record(*, record_payloads: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        replies: dict[str, Replier] = dict.fromkeys(
            ("AGENT_INPUT", "TOOL_CALL", "AGENT_RESPONSE"), _redact_pii
        )
        async with ScriptedGuardrail(replies=replies) as guardrail:
            session = journal.session(
                "marked",
                guardrails=guardrail.url,
                policy=POLICY,
                record_payloads=record_payloads,
            )
            await run(session.guard(_agents()), session, text=MARKERS["user"])
        full = await export_bundle(journal.store, "marked")
        redacted = await export_bundle(journal.store, "marked", redact=True)
    return full, redacted


FULL, REDACTED = asyncio.run(_record())


def test_the_full_bundle_holds_every_marker() -> None:
    """The markers are really there to be found (else the next test proves nothing)."""
    text = json.dumps(FULL, ensure_ascii=False)
    assert [name for name, marker in MARKERS.items() if marker not in text] == []


def test_a_redacted_bundle_holds_no_conversation() -> None:
    text = json.dumps(REDACTED, ensure_ascii=False)
    leaked = {name: marker for name, marker in MARKERS.items() if marker in text}
    assert leaked == {}


def test_a_redacted_bundle_verifies_as_completely_as_the_full_one() -> None:
    full, redacted = verify_bundle(FULL, TRUSTED), verify_bundle(REDACTED, TRUSTED)
    assert full.ok, full.text()
    assert redacted.ok, redacted.text()
    # The same checks ran with the same counts; only the withheld count differs.
    assert full.lines[1:] == redacted.lines[1:]
    containment = next(line for line in redacted.lines if line.startswith("containment:"))
    assert containment == (
        "containment: 3 executed tool calls; each had an ALLOW or MODIFY decision; "
        "each within its agent's authority"
    )


def _events(bundle: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [e for s in bundle["streams"] for e in s["events"] if e["type"] == type_]


def test_what_a_redacted_bundle_keeps() -> None:
    """Withheld data, committed views for what a verifier needs, the rest whole."""
    kept = {
        "SessionStarted",
        "agentjournal.Checkpoint",
        "agentjournal.AuthorityGranted",
        "agentjournal.AuthorityHeld",
        "agentjournal.PolicyRecorded",
        "agentjournal.ModelResponded",  # usage, model, times: no conversation
    }
    seen = set()
    for stream in REDACTED["streams"]:
        for event in stream["events"]:
            seen.add(event["type"])
            assert (event["data"] is not None) is (event["type"] in kept), event["type"]
    assert kept <= seen
    (refund,) = [
        e["view"]
        for e in _events(REDACTED, "AssistantToolCallsGenerated")
        if e["metadata"].get("aj.call_id") == "t3"
    ]
    marker = refund["extensions"]["openai"]["item_json"]
    assert marker["name"] == "issue_refund"
    # A cap reads the integer itself; a string is only its digest.
    assert marker["ceilings"]["amount_cents"] == {"int": 250}
    assert set(marker["ceilings"]["region"]) == {"sha256"}
    (started,) = [e for e in _events(REDACTED, "SubagentStarted") if "aj.index" in e["metadata"]]
    assert started["view"]["agent_type"] == "billing"
    assert "withheld" in started["view"]["prompt"]


def _resigned(bundle: dict[str, Any]) -> dict[str, Any]:
    """Rechain everything, relink the parents and re-sign with the trusted key itself."""
    for stream in bundle["streams"]:
        rechain(bundle, stream["name"])
    relink(bundle)
    resign(bundle, KEY)
    return bundle


def test_an_edited_view_fails_integrity() -> None:
    bundle = copy.deepcopy(REDACTED)
    (decision,) = [
        e
        for e in _events(bundle, "agentjournal.GuardrailDecided")
        if e["view"]["decision"] == "MODIFY"
    ]
    decision["view"]["decision"] = "ALLOW"
    report = verify_bundle(bundle, TRUSTED)
    assert not report.ok
    assert report.problems[0].check == "integrity"
    assert "commitment" in report.problems[0].message


def test_a_view_withheld_as_well_fails() -> None:
    bundle = copy.deepcopy(REDACTED)
    _events(bundle, "SubagentStarted")[0]["view"] = None
    report = verify_bundle(bundle, TRUSTED)
    assert not report.ok
    assert "without its committed view" in report.problems[0].message


def test_a_ceiling_breach_forged_into_a_redacted_view_is_caught_by_digest() -> None:
    """Even re-signed with the trusted key: the region is not an allowed one's digest."""
    bundle = copy.deepcopy(REDACTED)
    for event in _events(bundle, "AssistantToolCallsGenerated"):
        if event["metadata"].get("aj.call_id") == "t3":
            event["view"]["extensions"]["openai"]["item_json"]["ceilings"]["region"] = {
                "sha256": "sha256:" + "0" * 64
            }
    report = verify_bundle(_resigned(bundle), TRUSTED)
    assert not report.ok
    assert report.problems[0].check == "containment", report.text()
    assert "beyond authority" in report.problems[0].message


def test_a_decision_about_another_call_is_caught_by_digest() -> None:
    bundle = copy.deepcopy(REDACTED)
    for event in _events(bundle, "agentjournal.GuardrailDecided"):
        if event["view"].get("call_id") == "t3":
            event["view"]["payload_digest"] = "sha256:" + "1" * 64
    report = verify_bundle(_resigned(bundle), TRUSTED)
    assert not report.ok
    assert "about another call" in report.problems[0].message, report.text()


@pytest.mark.parametrize(
    ("ceiling", "value", "allowed"),
    [
        (Cap(100), 100, True),
        (Cap(100), 101, False),
        (Cap(100), -(10**30), True),  # as Cap.permits: any integer up to the limit
        (Cap(100), "100", False),
        (Cap(100), True, False),
        (AllowList(frozenset({"eu"})), "eu", True),
        (AllowList(frozenset({"eu"})), "us", False),
        (AllowList(frozenset({"eu"})), 1, False),
        (Ranked(("none", "internal", "any"), "internal"), "none", True),
        (Ranked(("none", "internal", "any"), "internal"), "any", False),
        (Ranked(("none", "internal", "any"), "internal"), "public", False),
    ],
)
def test_ceilings_by_digest_decide_as_on_the_value(ceiling: Any, value: Any, allowed: bool) -> None:
    arguments = json.dumps({"x": value})
    (found,) = ceiling_inputs(arguments, ["x"]).values()
    assert input_permits(ceiling, found) is ceiling.permits(value) is allowed
    if isinstance(value, str) and value.isalpha():
        assert value not in json.dumps(found)  # a string is only its digest


def test_missing_and_unparseable_arguments() -> None:
    assert ceiling_inputs('{"a": {}}', ["a.b"]) == {"a.b": {"absent": True}}
    assert ceiling_inputs("not json", ["a.b"]) == {"a.b": {"type": "invalid"}}
    assert ceiling_inputs("[1]", ["a.b"]) == {"a.b": {"absent": True}}
    assert ceiling_inputs("{}", []) == {}


def test_views_of_huge_numbers_and_surrogates_still_commit() -> None:
    data = json.dumps({"reason": "x", "value": 10**40, "gate": "\ud800"}).encode()
    shown = view("agentjournal.AuthorityRefused", data, {})
    assert shown is not None
    assert len(view_digest(shown)) == 64
    assert view("UserMessageReceived", b"{}", {}) is None


def test_the_gate_and_the_verifier_decide_alike_on_unparseable_arguments() -> None:
    """A model may emit arguments that are not JSON: refused by both, whatever is held."""
    policy = Policy(tools={"t": ToolRule("s.x", {"spend": "amount"})})
    holder = Authority.of("s.x")  # holds no spend ceiling at all
    refused = policy.check_call(holder, "t", "{bad json")
    assert refused is not None
    assert refused.reason == "the arguments are not JSON"
    found = policy.check_inputs(holder, "t", ceiling_inputs("{bad json", ["amount"]))
    assert found == refused


async def test_decisions_kept_as_digests_verify_full_and_redacted() -> None:
    """record_payloads=False: decisions and refusals are their own views; a redacted export
    keeps them as they are, and the modified call's ceilings still decide."""
    full, redacted = await _record(record_payloads=False)
    for bundle in (full, redacted):
        report = verify_bundle(bundle, TRUSTED)
        assert report.ok, report.text()
    decisions = _events(full, "agentjournal.GuardrailDecided")
    assert all(e["metadata"]["aj.viewed"] == "1" for e in decisions)
    text = json.dumps(redacted, ensure_ascii=False)
    assert [marker for marker in MARKERS.values() if marker in text] == []


async def test_a_modified_call_under_ceilings_verifies_redacted_with_digests_only() -> None:
    """A guardrail MODIFY of a call that ceilings read, with
    record_payloads=False, exported redacted: the modification's ceilings are kept."""

    @function_tool
    def issue_refund(order_id: str, amount_cents: int, region: str) -> str:
        """Refund an order."""
        return "refunded"

    arguments = {"order_id": "for someone@example.com", "amount_cents": 250, "region": "eu"}
    agent: Agent[Any] = Agent(
        name="triage",
        model=ScriptedModel(
            [
                [function_call("issue_refund", arguments, call_id="r1")],
                [assistant_message("done")],
            ]
        ),
        tools=[issue_refund],
    )
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        replies: dict[str, Replier] = {"TOOL_CALL": _redact_pii}
        async with ScriptedGuardrail(replies=replies) as guardrail:
            session = journal.session(
                "modified", guardrails=guardrail.url, policy=POLICY, record_payloads=False
            )
            await run(session.guard(agent), session, text="refund")
        bundles = [await export_bundle(journal.store, "modified", redact=r) for r in (False, True)]
    decided = [json.loads(e["data"]) for e in _events(bundles[0], "agentjournal.GuardrailDecided")]
    assert [d["decision"] for d in decided if d["action_type"] == "TOOL_CALL"] == ["MODIFY"]
    for bundle in bundles:
        report = verify_bundle(bundle, TRUSTED)
        assert report.ok, report.text()
        assert "each within its agent's authority" in report.text()


# -- records the verifier can cross-check ---------------------------------------------------------


def _decision_on(bundle: dict[str, Any], call_id: str) -> dict[str, Any]:
    return next(
        e
        for e in _events(bundle, "agentjournal.GuardrailDecided")
        if json.loads(e["data"] or json.dumps(e["view"])).get("call_id") == call_id
    )


def test_a_block_that_proceeded_contradicts_itself() -> None:
    bundle = copy.deepcopy(FULL)
    event = _decision_on(bundle, "t3")
    body = json.loads(event["data"])
    body["decision"] = "BLOCK"  # the call now looks refused, and its ceilings unchecked
    event["data"] = json.dumps(body)
    found = verify_bundle(_resigned(bundle), TRUSTED)
    assert not found.ok
    assert "a BLOCK decision carried out as 'proceeded'" in found.text()


def test_a_payload_other_than_its_digest_fails() -> None:
    bundle = copy.deepcopy(FULL)
    event = _decision_on(bundle, "t3")
    body = json.loads(event["data"])
    body["payload"]["function"]["arguments"] = '{"order_id": "o1"}'  # a harmless-looking call
    event["data"] = json.dumps(body)
    found = verify_bundle(_resigned(bundle), TRUSTED)
    assert "the payload is not the one its digest names" in found.text()


def test_a_call_id_changed_to_look_unrun_fails() -> None:
    """Renaming a call's aj.call_id would detach it from its decision and output."""
    bundle = copy.deepcopy(REDACTED)
    for event in _events(bundle, "AssistantToolCallsGenerated"):
        if event["metadata"].get("aj.call_id") == "t3":
            event["metadata"]["aj.call_id"] = "t9"
    found = verify_bundle(_resigned(bundle), TRUSTED)
    assert "aj.call_id or aj.item_type is not the call's own" in found.text()


def test_a_reason_code_that_is_no_code_is_withheld() -> None:
    body = {"action_type": "AGENT_INPUT", "payload": "x", "modified_payload": None}
    for code, kept in (("PII_REDACTED", True), ("customer Jane Doe, card 4111", False)):
        data = json.dumps({**body, "reason_code": code, "reason_message": "m"}).encode()
        shown = view("agentjournal.GuardrailDecided", data, {})
        assert shown is not None
        assert (shown["reason_code"] == code) is kept


# -- the view digest's fast path on the write path -------------------------------

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)  # beyond RFC 8785's range too: those take rfc8785's path
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(["a\ud800", '\x1f\u2028"\\\\']),  # a lone surrogate; escapes
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(max_size=6) | st.sampled_from(["a", "é", "\U0001f600", "\ufb01"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@pytest.mark.slow
@settings(max_examples=800, deadline=None)
@given(_json_values)
def test_a_view_digest_is_the_digest_of_its_rfc8785_bytes(body: Any) -> None:
    # The digest is made through the C json encoder where that gives RFC 8785's bytes;
    # whatever the value, it is the digest of what rfc8785 prints (or of the documented
    # fallback where rfc8785 refuses the value).
    try:
        encoded = rfc8785.dumps(body)
    except (rfc8785.CanonicalizationError, UnicodeError):
        encoded = json.dumps(
            body, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode("utf-8", "surrogatepass")
    assert view_digest(body) == hashlib.sha256(encoded).hexdigest()


# A tool rule whose ceiling reads an argument: the view of a call to it reads the arguments.
_ARGUMENT_POLICY = Policy(tools={"t": ToolRule("s.x", {"spend": "amount"})})


async def _stored_and_verified(path: Path, arguments: Any) -> list[list[str]]:
    """Store one call to ``t`` with ``arguments``, read it back warm and cold; the verify
    reports of its full and its redacted bundle."""
    item: Any = {"type": "function_call", "call_id": "c1", "name": "t", "arguments": arguments}
    async with await Journal.open(f"sqlite:///{path}", signing_key=KEY) as journal:
        session = journal.session("args", policy=_ARGUMENT_POLICY)
        await session.add_items([item])
        assert await session.get_items() == [item]
        bundles = [
            await export_bundle(journal.store, "args", redact=redact) for redact in (False, True)
        ]
    async with await Journal.open(f"sqlite:///{path}") as journal:  # cold, from the file
        assert await journal.session("args", policy=_ARGUMENT_POLICY).get_items() == [item]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM events").fetchone() == (2,)
    return [verify_bundle(bundle, TRUSTED).lines for bundle in bundles]


@pytest.mark.parametrize("arguments", [5, {"amount": 1}, [1], 1.5, True])
async def test_a_function_call_whose_arguments_are_no_text_is_stored_exactly(
    tmp_path: Path, arguments: Any
) -> None:
    """The SDK's SQLiteSession keeps a ``function_call`` whose ``arguments`` is not a string;
    so does ours under a tool rule with ceilings (its view reads the arguments as they are),
    and its bundles verify as a text call's do (outside a run: no checkpoint, no authority
    log, in both)."""
    reports = await _stored_and_verified(tmp_path / "odd.db", arguments)
    assert reports == await _stored_and_verified(tmp_path / "text.db", '{"amount": 1}')
    assert "integrity: 2 events in 1 stream chain correctly" in reports[1]
