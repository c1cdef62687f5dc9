"""Where ``trace export`` sends its spans: the checked destination options
(:func:`_destination`), the official OTLP exporters (HTTP/protobuf or gRPC), the SDK's
``ConsoleSpanExporter``, JSON Lines, and projected spans as the SDK's ``ReadableSpan``.

The OpenTelemetry packages are imported inside the code that uses them, when it runs: the
command's start-up does not pay for them.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol
from urllib.parse import urlsplit

from agentjournal._text import shown_uri
from agentjournal.cli._common import writable_output, write_atomically
from agentjournal.errors import InvalidInput, JournalError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from agentjournal.read.traces import ProjectedSpan

BATCH: Final = 512
"""Spans per export call, and events folded before a follower saves (at most)."""
_DAY: Final = 86_400.0
"""The longest ``--idle`` and ``--timeout`` (seconds): past it a timer overflows."""


class ExportFailed(JournalError):
    """Raised when the destination did not take the spans (nothing was saved after them)."""


class _Sink(Protocol):
    where: str

    def send(self, spans: Sequence[ProjectedSpan]) -> None: ...

    def close(self) -> None: ...


def _destination(args: argparse.Namespace) -> _Destination:
    """The checked options: one destination, a session or --all.

    Raises:
        InvalidInput: Options missing, contradicting, or a bad URL or number.
    """
    chosen = [
        flag
        for flag, value in (
            ("--otlp", args.otlp),
            ("--console", args.console),
            ("--jsonl", args.jsonl),
        )
        if value
    ]
    if not chosen:
        raise InvalidInput("say where the spans go: --otlp URL, --console or --jsonl FILE")
    if len(chosen) > 1:
        raise InvalidInput(f"give one destination, not {' and '.join(chosen)}")
    if args.branch is not None and args.session is None:
        raise InvalidInput("--branch needs a SESSION: a branch is a line of one session")
    if args.session is not None and args.all:
        raise InvalidInput("give a session id or --all, not both")
    if args.session is None and not args.all:
        raise InvalidInput("give a session id, or --all for every session")
    if args.protocol is not None and not args.otlp:
        raise InvalidInput("--protocol goes with --otlp")
    if not args.follow and args.name is not None:
        raise InvalidInput("--name goes with --follow")
    for option, value in (("--idle", args.idle), ("--timeout", args.timeout)):
        if not 0 < value <= _DAY:  # past a day a timer overflows (and no wait is that long)
            raise InvalidInput(
                f"{option} must be a positive number of seconds, at most a day, got {value}"
            )
    protocol = args.protocol or "http"
    if args.otlp:
        return _Destination("otlp", _endpoint(args.otlp, protocol), protocol)
    if args.jsonl:
        return _Destination("jsonl", writable_output(args.jsonl), "")
    return _Destination("console", "stdout", "")


class _Destination:
    def __init__(self, kind: str, target: str, protocol: str) -> None:
        self.kind, self.target, self.protocol = kind, target, protocol

    def key(self, session: str | None, branch: str | None = None) -> str:
        """The default projection name: the destination, the session and the line, digested
        (without a line, the name followers saved under before lines were projected)."""
        chosen: list[str | None] = [self.kind, self.protocol, self.target, session]
        if branch is not None:
            chosen.append(branch)
        text = json.dumps(chosen)
        return "trace-" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def open(self, *, follow: bool, timeout: float) -> _Sink:
        if self.kind == "otlp":
            return _Otlp(self.target, self.protocol, timeout)
        if self.kind == "jsonl":
            return _JsonLines(self.target, append=follow)
        return _Console()


def _endpoint(url: str, protocol: str) -> str:
    """The exporter's endpoint for ``--otlp URL``.

    Raises:
        InvalidInput: The URL is not ``http(s)://host[:port][/path]``.
    """
    try:
        parts = urlsplit(url)
    except ValueError as error:  # an unclosed IPv6 bracket, say
        raise InvalidInput(f"--otlp {shown_uri(url)!r} is not a URL: {error}") from None
    try:
        port = parts.port
    except ValueError:
        raise InvalidInput(f"--otlp {shown_uri(url)!r} has an invalid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(
            f"--otlp {shown_uri(url)!r} is not a collector URL: use http://HOST:PORT or https://HOST:PORT"
        )
    if parts.query or parts.fragment:
        raise InvalidInput(f"--otlp {shown_uri(url)!r}: a collector URL has no query or fragment")
    if protocol == "grpc":
        if parts.path not in ("", "/"):
            raise InvalidInput(f"--otlp {shown_uri(url)!r}: a gRPC collector URL has no path")
        return f"{parts.scheme}://{parts.hostname}:{port or 4317}"
    if parts.path in ("", "/"):
        return url.rstrip("/") + "/v1/traces"
    return url


@contextlib.contextmanager
def _exporter_log() -> Iterator[list[str]]:
    """What the OTLP exporters log while they export, kept for the one-line error instead
    of printed (they log every retry)."""
    said: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(" ".join(record.getMessage().split()))

    logger = logging.getLogger("opentelemetry.exporter.otlp")
    keep, propagate = _Keep(logging.WARNING), logger.propagate
    logger.addHandler(keep)
    logger.propagate = False
    try:
        yield said
    finally:
        logger.removeHandler(keep)
        logger.propagate = propagate


class _Otlp:
    """The official OTLP exporter of the chosen transport."""

    def __init__(self, endpoint: str, protocol: str, timeout: float) -> None:
        # Said without the URL's credentials, in every line (and the exporter's reasons).
        self.where = f"{shown_uri(endpoint)} (OTLP/{'gRPC' if protocol == 'grpc' else 'HTTP'})"
        self._credentials = urlsplit(endpoint).netloc.rpartition("@")[0]
        self._exporter: Any
        if protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )

            self._exporter = GrpcExporter(
                endpoint=endpoint, insecure=endpoint.startswith("http://"), timeout=timeout
            )
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter as HttpExporter,
            )

            self._exporter = HttpExporter(endpoint=endpoint, timeout=timeout)

    def send(self, spans: Sequence[ProjectedSpan]) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        for at in range(0, len(spans), BATCH):
            part = spans[at : at + BATCH]
            with _exporter_log() as said:
                result = self._exporter.export(_readable(part))
            if result is not SpanExportResult.SUCCESS:
                reason = said[-1] if said else "the exporter gave no reason"
                if self._credentials:
                    reason = reason.replace(self._credentials, "***")
                raise ExportFailed(f"could not export {len(part)} spans to {self.where}: {reason}")

    def close(self) -> None:
        with _exporter_log():
            self._exporter.shutdown()


class _Console:
    """The OpenTelemetry SDK's ``ConsoleSpanExporter`` on stdout."""

    where = "stdout"

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        self._exporter = ConsoleSpanExporter(out=sys.stdout)

    def send(self, spans: Sequence[ProjectedSpan]) -> None:
        self._exporter.export(_readable(spans))
        sys.stdout.flush()

    def close(self) -> None:
        self._exporter.shutdown()


class _JsonLines:
    """One span per line (:meth:`ProjectedSpan.as_json`); a line is on disk before the
    follower saves past it."""

    def __init__(self, path: str, *, append: bool) -> None:
        self.where = path
        self._append = append
        self._lines: list[str] = []

    def send(self, spans: Sequence[ProjectedSpan]) -> None:
        from agentjournal.read.traces.jsonl import span_line

        self.add([span_line(span) for span in spans])

    def add(self, lines: Sequence[str]) -> None:
        """Write spans' lines (:func:`~agentjournal.read.traces.jsonl.span_line`)."""
        if not self._append:  # a one-shot export: written whole at the end, never half
            self._lines.extend(lines)
            return
        with open(self.where, "a", encoding="utf-8") as handle:
            handle.writelines(lines)
            handle.flush()
            os.fsync(handle.fileno())

    def close(self) -> None:
        if not self._append:
            write_atomically(self.where, self._lines)


def _readable(spans: Sequence[ProjectedSpan]) -> list[ReadableSpan]:
    """Projected spans as the SDK's ``ReadableSpan``: made with their own ids (a tracer would
    make random ones)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

    resource = Resource.create({"service.name": "agentjournal"})
    scope = InstrumentationScope("agentjournal.read.traces")
    sampled = TraceFlags(TraceFlags.SAMPLED)
    made = []
    for span in spans:
        trace_id = int(span.trace_id, 16)
        parent = (
            SpanContext(trace_id, int(span.parent_id, 16), is_remote=False, trace_flags=sampled)
            if span.parent_id is not None
            else None
        )
        made.append(
            ReadableSpan(
                name=span.name,
                context=SpanContext(
                    trace_id, int(span.span_id, 16), is_remote=False, trace_flags=sampled
                ),
                parent=parent,
                resource=resource,
                attributes=dict(span.attributes),
                events=[
                    Event(e.name, attributes=dict(e.attributes), timestamp=e.time_ns)
                    for e in span.events
                ],
                links=[
                    Link(
                        SpanContext(
                            int(link.trace_id, 16),
                            int(link.span_id, 16),
                            is_remote=False,
                            trace_flags=sampled,
                        ),
                        attributes=dict(link.attributes),
                    )
                    for link in span.links
                ],
                kind=SpanKind.INTERNAL,
                status=Status(StatusCode.ERROR, span.error)
                if span.error is not None
                else Status(StatusCode.UNSET),
                start_time=span.start_ns,
                end_time=span.end_ns,
                instrumentation_scope=scope,
            )
        )
    return made
