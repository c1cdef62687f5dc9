"""Fail closed inside a run: every guardrail fault blocks the action, is recorded, and the tool
body never runs; a decision that cannot be recorded is not acted on."""

from __future__ import annotations

import json
import logging
import socket
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from agents import RunConfig, Runner

from agentjournal import Journal
from agentjournal.errors import GuardrailBlocked
from agentjournal.events import GUARDRAIL_DECIDED, GuardrailDecided
from agentjournal.guardrails import GuardrailClient
from agentjournal.store.sqlite import SQLiteEventStore
from drive import METHODS, Method
from guardrail_scenarios import FINAL, graph, run
from http_stub import Reply
from scripted_guardrail import ScriptedGuardrail


def _json(body: dict[str, Any], **answer: Any) -> Reply:
    return Reply(body=json.dumps({"action_id": body["action_id"], **answer}).encode())


def _modify(function: dict[str, Any]) -> Callable[[dict[str, Any]], Reply]:
    def reply(body: dict[str, Any]) -> Reply:
        payload = {**body["payload"], "function": {**body["payload"]["function"], **function}}
        return _json(body, decision="MODIFY", modified_payload=payload)

    return reply


CONFIG = RunConfig(tracing_disabled=True)

FAULTS: dict[str, tuple[Callable[[dict[str, Any]], Reply], str]] = {
    "http-500": (lambda body: Reply(status=500), "GUARDRAIL_UNAVAILABLE"),
    "http-503": (lambda body: Reply(status=503), "GUARDRAIL_UNAVAILABLE"),
    "http-429": (lambda body: Reply(status=429), "GUARDRAIL_UNAVAILABLE"),
    "timeout": (lambda body: Reply(delay=1.0, body=b"{}"), "GUARDRAIL_UNAVAILABLE"),
    "http-404": (lambda body: Reply(status=404), "GUARDRAIL_PROTOCOL_ERROR"),
    "html": (
        lambda body: Reply(content_type="text/html", body=b"<h1>ALLOW</h1>"),
        "GUARDRAIL_PROTOCOL_ERROR",
    ),
    "malformed": (lambda body: Reply(body=b'{"decision": "ALL'), "GUARDRAIL_PROTOCOL_ERROR"),
    "oversized": (
        lambda body: _json(body, decision="ALLOW", reason_message="x" * 4096),
        "GUARDRAIL_PROTOCOL_ERROR",
    ),
    "other-action": (
        lambda body: _json({"action_id": "not-" + body["action_id"]}, decision="ALLOW"),
        "GUARDRAIL_PROTOCOL_ERROR",
    ),
    "unknown-decision": (lambda body: _json(body, decision="MAYBE"), "GUARDRAIL_PROTOCOL_ERROR"),
    "unknown-field": (
        lambda body: _json(body, decision="ALLOW", allow_everything=True),
        "GUARDRAIL_PROTOCOL_ERROR",
    ),
    "modify-without-payload": (
        lambda body: _json(body, decision="MODIFY"),
        "GUARDRAIL_INVALID_MODIFICATION",
    ),
    "modify-off-schema": (
        _modify({"arguments": json.dumps({"order_id": 42})}),
        "GUARDRAIL_INVALID_MODIFICATION",
    ),
    "modify-other-tool": (_modify({"name": "delete_account"}), "GUARDRAIL_INVALID_MODIFICATION"),
}


@pytest.fixture
async def memory_journal() -> AsyncIterator[Journal]:
    """An open journal on the in-memory SQLite store (one backend is enough here)."""
    async with Journal.open("sqlite://:memory:") as journal:
        yield journal


async def tool_decisions(journal: Journal) -> list[GuardrailDecided]:
    return [
        GuardrailDecided.decode(event.data)
        for event in await journal.store.read_all()
        if event.type == GUARDRAIL_DECIDED and b'"TOOL_CALL"' in event.data
    ]


@pytest.mark.slow
@pytest.mark.parametrize("wiring", ["hooks", "guard"])
@pytest.mark.parametrize("fault", FAULTS)
async def test_a_fault_blocks_the_tool_call(
    memory_journal: Journal, fault: str, wiring: str
) -> None:
    reply, code = FAULTS[fault]
    g = graph()
    async with ScriptedGuardrail(replies={"TOOL_CALL": reply}) as guardrail:
        client = GuardrailClient(guardrail.url, timeout=0.3, max_body_bytes=1024)
        session = memory_journal.session("s1", guardrails=client)
        agent = session.guard(g.triage) if wiring == "guard" else g.triage
        if wiring == "guard":
            # The wrapper refuses the call; the model sees an error output and goes on.
            assert await run(agent, session) == FINAL
        else:
            with pytest.raises(GuardrailBlocked) as raised:
                await run(agent, session)
            assert raised.value.reason_code == code
        await client.aclose()
    assert g.tool_ran == []  # the body never ran
    (decided,) = await tool_decisions(memory_journal)
    assert (decided.decision, decided.reason_code, decided.guardrail_decision) == (
        "BLOCK",
        code,
        None,
    )
    assert decided.enforcement == ("tool_refused" if wiring == "guard" else "run_stopped")


@pytest.mark.parametrize("method", METHODS)
async def test_an_unreachable_guardrail_stops_the_run_before_the_model(
    memory_journal: Journal, method: Method
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    g = graph()
    session = memory_journal.session("s1", guardrails=url)
    with pytest.raises(GuardrailBlocked) as raised:
        await run(session.guard(g.triage), session, method=method)
    assert (raised.value.action_type, raised.value.reason_code) == (
        "AGENT_INPUT",
        "GUARDRAIL_UNAVAILABLE",
    )
    assert g.triage.model.calls == ()  # type: ignore[union-attr]
    assert g.tool_ran == []


async def test_failing_open_must_be_asked_for_and_is_loud(
    memory_journal: Journal, caplog: pytest.LogCaptureFixture
) -> None:
    g = graph()
    async with ScriptedGuardrail(replies={"TOOL_CALL": lambda body: Reply(status=503)}) as stub:
        with caplog.at_level(logging.WARNING, logger="agentjournal.guardrails"):
            client = GuardrailClient(stub.url, fail_open=True)
            session = memory_journal.session("s1", guardrails=client)
            assert await run(g.triage, session) == FINAL
            await client.aclose()
    assert g.tool_ran == ["42"]
    (decided,) = await tool_decisions(memory_journal)
    assert (decided.decision, decided.reason_code) == ("ALLOW", "GUARDRAIL_FAILED_OPEN")
    assert "FAILS OPEN" in caplog.text
    assert "FAILING OPEN" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("wiring", ["hooks", "guard", "guard-only"])
async def test_a_decision_that_cannot_be_recorded_is_not_acted_on(
    tmp_path: Path, wiring: str
) -> None:
    """The store refuses the TOOL_CALL decision (another process holds the write lock)."""
    path = tmp_path / "journal.db"
    store = await SQLiteEventStore.open(path, busy_timeout=0.05)
    blocker = sqlite3.connect(path, isolation_level=None)

    def lock_the_store(body: dict[str, Any]) -> None:
        if body["action_type"] == "TOOL_CALL":
            blocker.execute("BEGIN EXCLUSIVE")

    g = graph()
    try:
        async with ScriptedGuardrail(before=lock_the_store) as guardrail:
            journal = Journal(store, f"sqlite:///{path}")
            session = journal.session("s1", guardrails=guardrail.url)
            agent = session.guard(g.triage) if wiring != "hooks" else g.triage
            # Guard only: the tool wrapper decides, inside the SDK's own tool call.
            attempt = (
                Runner.run(agent, "hi", session=session, run_config=CONFIG)
                if wiring == "guard-only"
                else run(agent, session)
            )
            with pytest.raises(GuardrailBlocked) as raised:
                await attempt
    finally:
        blocker.close()  # rolls the lock back
    assert raised.value.reason_code == "DECISION_NOT_RECORDED"
    assert g.tool_ran == []
    assert await tool_decisions(journal) == []
    await journal.close()
