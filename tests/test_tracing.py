"""W3C trace context end to end: OpenTelemetry spans, event metadata, guardrail headers, logs."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentjournal import Journal, SigningKey
from agentjournal.events import GUARDRAIL_DECIDED, SPAN_ID_KEY, TRACE_ID_KEY, GuardrailDecided
from agentjournal.guardrails.protocol import parse_traceparent
from agentjournal.sdk import tracing
from agentjournal.sdk.trace_context import TraceLogFilter, continue_trace
from agentjournal.store import RecordedEvent
from drive import METHODS, Method, drive
from guardrail_scenarios import graph, run
from handoff_scenarios import support_team
from scripted_guardrail import ScriptedGuardrail

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Spans recorded by an SDK tracer provider (installed once per process)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


@pytest.fixture
async def memory_journal() -> AsyncIterator[Journal]:
    """An open journal on the in-memory SQLite store (one backend is enough here)."""
    async with Journal.open("sqlite://:memory:") as journal:
        yield journal


def _hex(span: ReadableSpan) -> tuple[str, str]:
    context = span.get_span_context()
    assert context is not None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def _by_name(finished: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in finished if span.name == name]


@pytest.mark.parametrize("method", METHODS)
async def test_spans_ids_and_headers_agree(
    memory_journal: Journal,
    spans: InMemorySpanExporter,
    method: Method,
    caplog: pytest.LogCaptureFixture,
) -> None:
    g = graph()
    async with ScriptedGuardrail() as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        with caplog.at_level(logging.INFO, logger="agentjournal.guardrails"):
            await run(session.guard(g.triage), session, method=method)
        received = list(guardrail.received)
    finished = spans.get_finished_spans()
    (run_span,) = _by_name(finished, "agentjournal.run")
    (triage,) = _by_name(finished, "agentjournal.agent triage")
    (billing,) = _by_name(finished, "agentjournal.agent billing")
    (tool,) = _by_name(finished, "agentjournal.tool lookup_order")
    checks = [s for s in finished if s.name.startswith("agentjournal.guardrail ")]
    trace_id = _hex(run_span)[0]
    assert {_hex(s)[0] for s in finished} == {trace_id}  # one trace
    assert triage.parent is not None
    assert triage.parent.span_id == run_span.context.span_id
    assert billing.parent is not None
    assert billing.parent.span_id == triage.context.span_id
    assert tool.parent is not None
    assert tool.parent.span_id == triage.context.span_id
    kinds = [str((s.attributes or {})["agentjournal.action_type"]) for s in checks]
    assert sorted(kinds) == sorted(
        ["AGENT_INPUT", "AGENT_INPUT", "TOOL_CALL", "AGENT_HANDOFF", "AGENT_RESPONSE"]
    )
    # Each request's traceparent and body trace name its guardrail span.
    check_ids = {_hex(s) for s in checks}
    for request in received:
        header = parse_traceparent(request.headers["traceparent"])
        assert header is not None
        body = request.json()["trace"]
        assert (header.trace_id, header.span_id) == (body["trace_id"], body["span_id"])
        assert (header.trace_id, header.span_id) in check_ids
    # Every event written in the run carries the ids of the span that produced it.
    producers = {_hex(run_span)[1], _hex(triage)[1], _hex(billing)[1]}
    for event in await memory_journal.store.read_all():
        if event.type == "SessionStarted":
            continue
        assert event.metadata[TRACE_ID_KEY] == trace_id, event.type
        if event.type == GUARDRAIL_DECIDED:
            decided = GuardrailDecided.decode(event.data)
            assert (decided.trace_id, decided.span_id) in check_ids
            assert event.metadata[SPAN_ID_KEY] == decided.span_id
        else:
            assert event.metadata[SPAN_ID_KEY] in producers, event.type
    # Structured logs carry the guardrail span's ids.
    logged = {(r.__dict__["trace_id"], r.__dict__["span_id"]) for r in caplog.records}
    assert logged == check_ids


async def test_a_run_continues_an_incoming_trace(
    memory_journal: Journal, spans: InMemorySpanExporter
) -> None:
    incoming = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    g = graph()
    session = memory_journal.session("s1")
    with continue_trace(incoming, "vendor=abc"):
        await run(g.triage, session)
    (run_span,) = _by_name(spans.get_finished_spans(), "agentjournal.run")
    assert _hex(run_span)[0] == "0af7651916cd43dd8448eb211c80319c"
    assert run_span.parent is not None
    assert f"{run_span.parent.span_id:016x}" == "b7ad6b7169203331"
    assert run_span.context.trace_state.get("vendor") == "abc"


async def test_a_stopped_run_ends_its_spans_with_an_error(
    memory_journal: Journal, spans: InMemorySpanExporter
) -> None:
    from agentjournal.errors import GuardrailBlocked

    g = graph()
    async with ScriptedGuardrail({"AGENT_RESPONSE": "BLOCK"}) as guardrail:
        session = memory_journal.session("s1", guardrails=guardrail.url)
        with pytest.raises(GuardrailBlocked):
            await run(g.triage, session)
    finished = spans.get_finished_spans()
    (run_span,) = _by_name(finished, "agentjournal.run")
    assert run_span.status.status_code is trace.StatusCode.ERROR
    assert len(_by_name(finished, "agentjournal.agent billing")) == 1


def test_without_a_tracer_provider_ids_are_still_valid_and_distinct(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(trace, "get_tracer", trace.NoOpTracerProvider().get_tracer)
    parent = tracing.start_span("parent")
    child = tracing.start_span("child", parent=parent)
    parent_ids, child_ids = tracing.ids_of(parent), tracing.ids_of(child)
    assert parent_ids.trace_id == child_ids.trace_id != "0" * 32
    assert parent_ids.span_id != child_ids.span_id
    assert len(child_ids.span_id) == 16


def test_the_log_filter_fills_in_ids() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    assert TraceLogFilter().filter(record)
    assert getattr(record, "trace_id") == ""  # noqa: B009
    assert getattr(record, "span_id") == ""  # noqa: B009
    with continue_trace("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"):
        record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
        TraceLogFilter().filter(record)
    assert (getattr(record, "trace_id"), getattr(record, "span_id")) == (  # noqa: B009
        "0af7651916cd43dd8448eb211c80319c",
        "b7ad6b7169203331",
    )


# -- checkpoints carry the trace of the write they follow ------------------------------------------


SID = "s1"


def body(event: RecordedEvent) -> Any:
    return json.loads(event.data)


async def test_checkpoints_after_closing_writes_carry_trace_ids(tmp_path: Path) -> None:
    key = SigningKey.generate()
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}", signing_key=key) as journal:
        session = journal.session(SID)
        failing = support_team(billing_steps=[RuntimeError("boom")])
        with pytest.raises(RuntimeError, match="boom"):
            async with session.run_scope():
                await drive(failing, "hi", session=session, hooks=session)
        recorded = await journal.store.read_all()
    # run_scope's closing write (billing closed as failed) forces a checkpoint.
    closed = [i for i, e in enumerate(recorded) if e.type == "SubagentCompleted"]
    checkpoints = [e for e in recorded[closed[-1] :] if e.type == "agentjournal.Checkpoint"]
    assert checkpoints
    for checkpoint in checkpoints:
        assert {"trace_id", "span_id"} <= checkpoint.metadata.keys()
        signed = body(checkpoint)["metadata"]
        assert signed["trace_id"] == checkpoint.metadata["trace_id"]
        assert signed["span_id"] == checkpoint.metadata["span_id"]
