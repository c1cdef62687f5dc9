"""What a tool body may use: the invocation's config (read-only) and instrumented HTTP clients.

Light on purpose: a tools module imports it (``from agentjournal.runner import
http_client``) without loading the Agents SDK.

:func:`http_client` and :func:`async_http_client` give an ``httpx`` client
instrumented with the official OpenTelemetry instrumentation, so every request
carries ``traceparent`` and ``tracestate`` of the current span — during a tool
body, the tool call's span, whose trace is the invocation's.
"""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import httpx

from agentjournal.runner.scrub import Scrubber

_CONFIG: contextvars.ContextVar[tuple[Mapping[str, Any], Scrubber]] = contextvars.ContextVar(
    "agentjournal_runner_config", default=(MappingProxyType({}), Scrubber({}))
)


def invocation_config() -> Mapping[str, Any]:
    """The invocation's ``config`` (read-only). Never put its values in a tool's output."""
    return _CONFIG.get()[0]


def scrub(text: str) -> str:
    """``text`` with every string value of the invocation's config replaced (see
    :mod:`agentjournal.runner.scrub`); the runner applies it to tool outputs and errors."""
    return _CONFIG.get()[1].scrub(text)


def scrubber() -> Scrubber:
    """The scrubber of the invocation's config."""
    return _CONFIG.get()[1]


def set_config(
    config: Mapping[str, Any],
) -> contextvars.Token[tuple[Mapping[str, Any], Scrubber]]:
    """Make ``config`` what :func:`invocation_config` returns (the runner calls it)."""
    return _CONFIG.set((MappingProxyType(dict(config)), Scrubber(config)))


def reset_config(token: contextvars.Token[tuple[Mapping[str, Any], Scrubber]]) -> None:
    """Undo :func:`set_config`."""
    _CONFIG.reset(token)


def _instrumented(client: httpx.Client | httpx.AsyncClient) -> None:
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    HTTPXClientInstrumentor.instrument_client(client)


def http_client(**options: Any) -> httpx.Client:
    """An ``httpx.Client`` whose requests carry ``traceparent``/``tracestate`` of the current span.

    Use it (in a ``with`` block) for every outbound HTTP call of a tool body.
    """
    client = httpx.Client(**options)
    _instrumented(client)
    return client


def async_http_client(**options: Any) -> httpx.AsyncClient:
    """The async twin of :func:`http_client`."""
    client = httpx.AsyncClient(**options)
    _instrumented(client)
    return client
