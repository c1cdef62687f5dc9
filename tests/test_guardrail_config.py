"""Configuring guardrails: per session, from the environment, or not at all (said once)."""

from __future__ import annotations

import logging

import pytest

from agentjournal import GuardrailClient, InvalidInput, Journal
from agentjournal.journal import GUARDRAIL_URL_ENV
from guardrail_scenarios import FINAL, graph, run
from scripted_guardrail import ScriptedGuardrail


async def test_a_url_from_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    async with ScriptedGuardrail() as guardrail, Journal.open("sqlite://:memory:") as journal:
        monkeypatch.setenv(GUARDRAIL_URL_ENV, guardrail.url)
        session = journal.session("s1")
        assert session.guardrails is not None
        assert session.guardrails.base_url == guardrail.url
        assert journal.session("s2").guardrails is session.guardrails  # one client per URL
        g = graph()
        assert await run(g.triage, session) == FINAL
        assert len(guardrail.asked()) == 5  # 2 inputs, a tool call, a handoff, a response


async def test_an_explicit_client_wins_over_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(GUARDRAIL_URL_ENV, "http://127.0.0.1:9")
    async with Journal.open("sqlite://:memory:") as journal:
        client = GuardrailClient("http://127.0.0.1:8787", timeout=0.5)
        assert journal.session("s1", guardrails=client).guardrails is client
        await client.aclose()


async def test_no_guardrail_means_no_checks_and_says_so_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(GUARDRAIL_URL_ENV, raising=False)
    async with Journal.open("sqlite://:memory:") as journal:
        with caplog.at_level(logging.INFO, logger="agentjournal"):
            first = journal.session("s1")
            journal.session("s2")
        assert first.guardrails is None
        assert caplog.text.count("no guardrail service configured") == 1
        g = graph()
        assert await run(g.triage, first) == FINAL
        assert g.tool_ran == ["42"]


async def test_a_bad_url_is_refused() -> None:
    async with Journal.open("sqlite://:memory:") as journal:
        with pytest.raises(InvalidInput, match="http"):
            journal.session("s1", guardrails="ftp://guardrail")
