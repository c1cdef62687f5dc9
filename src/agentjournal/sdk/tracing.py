"""W3C trace context and OpenTelemetry spans for runs, agents, tool calls and guardrail calls.

Spans are made with the OpenTelemetry API (tracer ``agentjournal``). With an
SDK ``TracerProvider`` configured they are recorded and exported like any
other span; without one they still get valid W3C ids (the SDK trace's id when
an Agents SDK trace is current, random span ids), so guardrail requests,
event metadata and logs always carry a usable ``trace_id``/``span_id``.

A run joins the trace that is current when it starts (OpenTelemetry context).
To continue a trace that arrived in HTTP headers::

    with continue_trace(request.headers.get("traceparent"), request.headers.get("tracestate")):
        await Runner.run(agent, text, session=session, hooks=session)

Logs: :class:`TraceLogFilter` gives every record ``trace_id`` and ``span_id``
attributes (from the record's ``extra`` when agentjournal logs with them, else
from the current span), for structured formatters.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from agents.tracing import get_current_trace
from opentelemetry import trace
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from agentjournal import events

TRACER_NAME: Final = "agentjournal"


@dataclass(frozen=True, slots=True)
class TraceIds:
    """The W3C ids of one span: 32 and 16 lowercase hex digits, and its ``tracestate``."""

    trace_id: str
    span_id: str
    tracestate: str | None = None

    def log_extra(self) -> dict[str, str]:
        """The ``extra`` mapping for a log call."""
        return {"trace_id": self.trace_id, "span_id": self.span_id}


def start_span(
    name: str,
    *,
    parent: Span | None = None,
    attributes: Mapping[str, str | int | float | bool] | None = None,
    kind: SpanKind = SpanKind.INTERNAL,
) -> Span:
    """Start a span under ``parent`` (else the current context); its ids are always valid."""
    parent_context = trace.set_span_in_context(parent) if parent is not None else None
    span = trace.get_tracer(TRACER_NAME).start_span(
        name, context=parent_context, kind=kind, attributes=dict(attributes or {})
    )
    if span.is_recording():
        return span
    # No tracer provider (or not sampled): the span records nothing, and the no-op
    # tracer even reuses its parent's ids. Give it ids of its own anyway, so
    # everything downstream can correlate.
    above = span.get_span_context()
    if not above.is_valid:
        above = (parent or trace.get_current_span()).get_span_context()
    if above.is_valid:
        trace_id, state, flags = above.trace_id, above.trace_state, above.trace_flags
    else:
        trace_id = _sdk_trace_id() or random.getrandbits(128) or 1
        state, flags = TraceState(), TraceFlags(TraceFlags.SAMPLED)
    return NonRecordingSpan(
        SpanContext(
            trace_id=trace_id,
            span_id=random.getrandbits(64) or 1,
            is_remote=False,
            trace_flags=flags,
            trace_state=state,
        )
    )


def end_span(span: Span, error: BaseException | str | None = None) -> None:
    """End ``span``, with status ERROR when ``error`` is given."""
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, str(error)))
        if isinstance(error, BaseException):
            span.record_exception(error)
    span.end()


def ids_of(span: Span) -> TraceIds:
    """The W3C ids of ``span``."""
    context = span.get_span_context()
    state = context.trace_state.to_header() if context.trace_state else ""
    return TraceIds(
        trace_id=f"{context.trace_id:032x}",
        span_id=f"{context.span_id:016x}",
        tracestate=state or None,
    )


class RunTrace:
    """The spans of one run: the run, each agent activation, each tool call.

    ``agentjournal.run`` is a child of the context current when the run's
    first hook fires; ``agentjournal.agent`` spans nest like the subagents
    (a receiver's span is a child of its sender's) and stay open until the
    run ends; ``agentjournal.tool`` spans cover one tool call each.
    """

    def __init__(self, session_id: str) -> None:
        self.run = start_span(
            "agentjournal.run", attributes={"agentjournal.session_id": session_id}
        )
        self.current: Span = self.run
        self._agents: list[Span] = []
        self._tools: dict[str, Span] = {}
        self.ended = False

    def agent_started(self, name: str) -> None:
        """An agent starts (the first, or a handoff's receiver under the agent before it)."""
        self.current = start_span(
            f"agentjournal.agent {name}",
            parent=self.current,
            attributes={"agentjournal.agent": name},
        )
        self._agents.append(self.current)

    def tool_started(self, key: str, name: str) -> None:
        """A tool call starts under the current agent."""
        self._tools[key] = start_span(
            f"agentjournal.tool {name}", parent=self.current, attributes={"agentjournal.tool": name}
        )

    def tool_ended(self, key: str) -> None:
        """A tool call ended."""
        span = self._tools.pop(key, None)
        if span is not None:
            span.end()

    def end(self, error: BaseException | str | None = None) -> None:
        """End every open span, innermost first; with ``error`` they end with status ERROR."""
        if self.ended:
            return
        self.ended = True
        for span in self._tools.values():
            end_span(span, error)
        self._tools.clear()
        for span in reversed(self._agents):
            end_span(span, error)
        end_span(self.run, error)


def current_ids() -> TraceIds | None:
    """The ids of the current OpenTelemetry span, else of the current Agents SDK trace."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        return TraceIds(f"{context.trace_id:032x}", f"{context.span_id:016x}")
    sdk = _sdk_trace_id()
    return TraceIds(f"{sdk:032x}", "") if sdk else None


def _sdk_trace_id() -> int | None:
    """The current Agents SDK trace's id as a W3C trace id, if there is one."""
    current: Any = get_current_trace()
    raw = getattr(current, "trace_id", None) if current is not None else None
    if isinstance(raw, str) and raw.startswith("trace_") and len(raw) == 38:
        try:
            return int(raw[6:], 16) or None
        except ValueError:
            return None
    return None


def trace_metadata(ids: TraceIds | None) -> dict[str, str]:
    """``trace_id`` and ``span_id`` metadata for ``ids`` (nothing when there are none)."""
    if ids is None:
        return {}
    found = {events.TRACE_ID_KEY: ids.trace_id}
    if ids.span_id:
        found[events.SPAN_ID_KEY] = ids.span_id
    return found
