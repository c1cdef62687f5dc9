"""The W3C trace context of a request, and log records that carry it (no Agents SDK).

:func:`continue_trace` makes a ``traceparent``/``tracestate`` pair the current
OpenTelemetry context; :class:`TraceLogFilter` gives every log record the current
span's ids. Apart from :mod:`agentjournal.sdk.tracing`, so that the manifest runner logs
with the input's trace before it loads the Agents SDK.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR: Final = TraceContextTextMapPropagator()


@contextlib.contextmanager
def continue_trace(traceparent: str | None, tracestate: str | None = None) -> Iterator[None]:
    """Make the trace of a ``traceparent``/``tracestate`` pair current for the block.

    A missing or malformed ``traceparent`` leaves the current context as it
    is (a new trace starts), as the W3C recommendation says.
    """
    carrier = {"traceparent": traceparent or ""}
    if tracestate:
        carrier["tracestate"] = tracestate
    extracted = _PROPAGATOR.extract(carrier) if traceparent else None
    token = otel_context.attach(extracted) if extracted is not None else None
    try:
        yield
    finally:
        if token is not None:
            otel_context.detach(token)


class TraceLogFilter(logging.Filter):
    """Give every log record ``trace_id`` and ``span_id`` (empty strings when there is none)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "trace_id", None):
            context = trace.get_current_span().get_span_context()
            record.trace_id = f"{context.trace_id:032x}" if context.is_valid else ""
            record.span_id = f"{context.span_id:016x}" if context.is_valid else ""
        return True
