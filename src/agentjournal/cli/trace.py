"""``agentjournal trace export``: session trees as OpenTelemetry traces (OTLP, console, JSONL).

The spans come from :mod:`agentjournal.read.traces` (pure); this module reads the store,
hands the spans to the official exporters (``opentelemetry-exporter-otlp``: HTTP/protobuf
or gRPC; the SDK's ``ConsoleSpanExporter``) or writes JSON Lines, and with ``--follow``
keeps its position in the store (:mod:`agentjournal.read.projections`), saved only after the
destination acknowledged every span before it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar
from urllib.parse import urlsplit

from agentjournal.cli._common import STORE_HELP, Commands, writable_folder, write_atomically
from agentjournal.errors import ConcurrencyError, InvalidInput, JournalError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

    from agentjournal._forked import Child
    from agentjournal.read.traces import ProjectedSpan, Projector
    from agentjournal.read.traces.parts import Part, Place
    from agentjournal.store.contract import EventStore, RecordedEvent

BATCH: Final = 512
"""Spans per export call, and events folded before a follower saves (at most)."""
PAGE: Final = 5000
"""Events per read of a one-shot export of every tree."""
SAVE_EVERY: Final = 1000
"""A follower saves its position at least every this many events it folded."""
TICK_SECONDS: Final = 0.5
"""A follower that got nothing for this long is caught up: it checks for quiet runs."""


class ExportFailed(JournalError):
    """Raised when the destination did not take the spans (nothing was saved after them)."""


def register(commands: Commands) -> None:
    """Add ``trace export``."""
    group = commands.group("trace", "project session trees into OpenTelemetry traces")
    text = (
        "export session trees as OpenTelemetry spans: a span per run, subagent, model "
        "response and tool call; guardrail decisions and refusals as span events; a "
        "branch's runs are traces of their own, linked to the parent's run at the fork"
    )
    export = group.add(
        "export",
        text,
        "agentjournal trace export support-4711 --otlp http://localhost:4318",
    )
    export.add_argument("session", nargs="?", help="the session id (or --all)")
    export.add_argument(
        "--all", action="store_true", help="every session tree in the store (default: off)"
    )
    export.add_argument(
        "--branch",
        metavar="B",
        help="with SESSION: only this line's spans: 'main' (the session's own tree) or a "
        "branch's own runs, never its shared prefix (those are its parent's spans; each run "
        "span links to the parent's run at the fork) (default: main and every branch)",
    )
    export.add_argument(
        "--follow",
        action="store_true",
        help="keep exporting what is written, from where the last follower of this "
        "destination stopped (its position is saved in the store; default: off)",
    )
    export.add_argument(
        "--otlp", metavar="URL", help="an OTLP collector, e.g. http://host:4318 (default: none)"
    )
    export.add_argument(
        "--protocol",
        choices=("http", "grpc"),
        help="the OTLP transport: http (HTTP/protobuf, POST URL/v1/traces when URL has no "
        "path) or grpc (default: http)",
    )
    export.add_argument(
        "--console", action="store_true", help="print the spans as JSON (default: off)"
    )
    export.add_argument(
        "--jsonl",
        metavar="FILE",
        help="write one span per line (a one-shot export writes FILE anew; --follow appends; "
        "default: none)",
    )
    export.add_argument(
        "--name",
        help="--follow: the name its position is saved under, AgentProjection-NAME "
        "(default: trace- and a digest of the destination and the session)",
    )
    export.add_argument(
        "--idle",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="--follow: a run whose session wrote nothing for this long is over and its "
        "run span is sent (default: 10)",
    )
    export.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long an OTLP export may take, retries included (default: 10)",
    )
    export.add_argument("--uri", help=STORE_HELP + "; never created")
    export.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    destination = _destination(args)
    # Forked before anything runs a thread (the store's): the child opens its own store.
    second = None
    if args.all and not args.follow:
        second = _second_part(args.uri, _output(destination))
    try:
        return asyncio.run(_export(args, destination, second))
    finally:
        if second is not None:
            second.close()
            with contextlib.suppress(ChildProcessError):  # reaped: its CPU counts as ours
                os.waitpid(second.pid, 0)


# -- where the spans go ------------------------------------------------------------------


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
        if not value > 0:
            raise InvalidInput(f"{option} must be a positive number of seconds, got {value}")
    protocol = args.protocol or "http"
    if args.otlp:
        return _Destination("otlp", _endpoint(args.otlp, protocol), protocol)
    if args.jsonl:
        writable_folder(args.jsonl)
        return _Destination("jsonl", os.path.abspath(args.jsonl), "")
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
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        raise InvalidInput(f"--otlp {url!r} has an invalid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(
            f"--otlp {url!r} is not a collector URL: use http://HOST:PORT or https://HOST:PORT"
        )
    if parts.query or parts.fragment:
        raise InvalidInput(f"--otlp {url!r}: a collector URL has no query or fragment")
    if protocol == "grpc":
        if parts.path not in ("", "/"):
            raise InvalidInput(f"--otlp {url!r}: a gRPC collector URL has no path")
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
        self.where = f"{endpoint} (OTLP/{'gRPC' if protocol == 'grpc' else 'HTTP'})"
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


# -- reading ----------------------------------------------------------------------------


async def _export(
    args: argparse.Namespace, destination: _Destination, second: Child | None = None
) -> int:
    from agentjournal.cli._store import open_session
    from agentjournal.store import open_store, store_uri

    session: str | None = None
    branch: str | None = args.branch
    if args.session is not None:
        store, session = await open_session(args.uri, args.session)
    else:
        store = await open_store(store_uri(args.uri), create=False)
    try:
        if session is not None and branch is not None:
            await _check_line(store, session, branch)  # before anything is written
        sink = destination.open(follow=args.follow, timeout=args.timeout)
        try:
            if args.follow:
                name = args.name or destination.key(session, branch)
                return await _Follower(store, sink, session, name, args.idle, branch).run()
            if session is not None:
                spans = await _once(store, session, branch)
                sink.send(spans)
                traces = [span.trace_id for span in spans]
            elif isinstance(sink, _JsonLines):  # the parts print their own lines
                lines = await _every_tree(store, second, _lines())
                sink.add([text for _, text in lines])
                traces = [trace for trace, _ in lines]
            else:
                spans = await _every_tree(store, second, _as_is)
                sink.send(spans)
                traces = [span.trace_id for span in spans]
        finally:
            sink.close()
    finally:
        await store.close()
    summary = f"exported {len(traces)} spans of {len(set(traces))} traces to {sink.where}"
    print(summary, file=sys.stderr if destination.kind == "console" else sys.stdout)
    return 0


async def _check_line(store: EventStore, session: str, branch: str) -> None:
    """``--branch``: main, or a branch the session has (a deleted one too: what ran on it
    stays history, as ``show`` and ``usage`` read it).

    Raises:
        InvalidInput: The session has no such branch (the message lists those it has).
    """
    from agentjournal.streams import MAIN_BRANCH

    if branch != MAIN_BRANCH:
        from agentjournal.read.lines import find_branch

        await find_branch(store, session, branch)


async def _once(store: EventStore, session: str, branch: str | None = None) -> list[ProjectedSpan]:
    """Every span of one session tree (every line, or the one ``branch`` names), each run
    span with the evaluation events of the eval scores of its turns
    (:mod:`agentjournal.read.traces.evaluations`)."""
    from agentjournal.read.evals.scores import session_scores
    from agentjournal.read.traces import project_tree
    from agentjournal.read.traces.evaluations import scores_of, turn_marks, with_evaluations
    from agentjournal.walk import read_tree

    tree = await read_tree(store, session)
    scores = await session_scores(store, session)
    projected = project_tree(tree, line=branch)
    return with_evaluations(projected, turn_marks(tree.records()), scores_of(scores.runs))


S = TypeVar("S")
# What one part of an export of every tree sends: its spans as its output makes them,
# placed, and the damaged events it left out (position, stream, what is wrong).
# Where each span was sent, the spans, the damaged events left out, and the end of what was
# read: the position after its last event (0: none).
_Projected = tuple[list["Place"], list[S], list[tuple[int, str, str]], int]


_Line = tuple[str, str]
"""A span's trace id and its ``--jsonl`` line: a plain tuple, which a child sends through
its pipe at a third of the cost of a named tuple."""


def _lines() -> Callable[[ProjectedSpan], _Line]:
    """What makes a span's :data:`_Line` (the printer imported once, not per span)."""
    from agentjournal.read.traces.jsonl import span_line

    def line(span: ProjectedSpan) -> _Line:
        return span.trace_id, span_line(span)

    return line


def _as_is(span: ProjectedSpan) -> ProjectedSpan:
    return span


def _output(destination: _Destination) -> Callable[[ProjectedSpan], Any]:
    """What a part of an export of every tree makes of each span for ``destination``: its
    line for ``--jsonl`` (printed in the part's process), else the span itself."""
    return _lines() if destination.kind == "jsonl" else _as_is


def _second_part(uri: str | None, output: Callable[[ProjectedSpan], Any]) -> Child | None:
    """A child process folding the second half of the trees (:mod:`.parts`) of the store
    at ``uri``, each span sent as ``output`` makes it, when a second core is free and
    forking is safe; else None."""
    from agentjournal._forked import core_to_spare, forked

    _import_parts(uri)  # first: whether forking is safe is then judged after the imports
    if not core_to_spare():
        return None
    return forked(lambda: asyncio.run(_part_of(uri, 1, 2, output)))


def _import_parts(uri: str | None) -> None:
    """Import what both parts run (the projector, the printer, the store's backend) before
    the fork: the child then has them without importing them again (imported once, not
    twice: about a tenth of a second of CPU). One process imports them all the same."""
    import agentjournal._gc
    import agentjournal.cli._render
    import agentjournal.read.traces
    import agentjournal.read.traces.evaluations
    import agentjournal.read.traces.jsonl
    import agentjournal.read.traces.parts
    from agentjournal.store import store_uri

    if store_uri(uri).startswith("sqlite://"):
        import agentjournal.store.sqlite  # noqa: F401


async def _part_of(
    uri: str | None, index: int, count: int, output: Callable[[ProjectedSpan], S]
) -> _Projected[S]:
    """What the child sends: one part's spans of every tree of the store at ``uri``."""
    from agentjournal.read.traces.parts import Part
    from agentjournal.store import open_store, store_uri

    store = await open_store(store_uri(uri), create=False)
    try:
        return await _project(store, Part(index, count), output)
    finally:
        await store.close()


async def _every_tree(
    store: EventStore, second: Child | None, output: Callable[[ProjectedSpan], S]
) -> list[S]:
    """Every span of every tree in the store, each run span with the evaluation events of
    the eval scores of its turns: on one process, or in two parts, this process's and
    ``second``'s (a child folding the other part with the same ``output``; if it fails,
    this process folds that part too), each as ``output`` makes it. The spans and the
    warnings are those of one process, in its order."""
    from agentjournal.read.traces.parts import Part, in_order

    warned: set[str] = set()
    if second is None:
        _, made, damaged, _ = await _project(store, None, output, shown=True)
        for _, stream, problem in damaged:
            _skipped(stream, problem, warned)
        return made
    mine = await _project(store, Part(0, 2), output, shown=True)
    sent: _Projected[S] | None = second.result()
    if sent is None or sent[3] != mine[3]:
        # The child failed, or read up to another end (a writer appended meanwhile): its part
        # is folded here, up to where this process read, so both parts are of one prefix of
        # the global order, as one process's export is.
        sent = await _project(store, Part(1, 2), output, until=mine[3])
    parts = [mine, sent]
    for _, stream, problem in in_order(
        [[((0, at, ""), (at, s, p)) for at, s, p in part[2]] for part in parts]
    ):
        _skipped(stream, problem, warned)
    return in_order([list(zip(places, made, strict=True)) for places, made, _, _ in parts])


async def _project(
    store: EventStore,
    part: Part | None,
    output: Callable[[ProjectedSpan], S],
    *,
    shown: bool = False,
    until: int | None = None,
) -> _Projected[S]:
    """Where each span was sent (with a ``part`` only: :func:`.parts.in_order` puts parts
    together by it), the spans of the trees of ``part`` (None: every tree) with the
    evaluation events of the eval scores of their turns, each as ``output`` makes it, the
    damaged events it left out, and the end of what it read. ``shown``: with a progress
    bar (on a terminal); ``until``: the events before that position only."""
    from agentjournal._gc import no_collection, settled
    from agentjournal.cli._render import progress
    from agentjournal.read.traces import Projector
    from agentjournal.read.traces.evaluations import Evaluations
    from agentjournal.read.traces.parts import FINISHED
    from agentjournal.read.traces.stored import StoredEvent
    from agentjournal.records import DamagedEvent

    projector = Projector(part=part)
    spans: list[ProjectedSpan] = []
    places: list[Place] = []
    evaluations = Evaluations()
    damaged: list[tuple[int, str, str]] = []
    end = 0
    feed, of, skips, folds = projector.feed, StoredEvent.of, projector.skips, projector.folds
    with (
        progress("reading the store") if shown else contextlib.nullcontext(_no_progress) as advance,
        settled() as settle,
    ):
        # The next page is read on the store's side while this one is projected.
        reading = asyncio.ensure_future(store.read_all(from_position=0, limit=PAGE))
        try:
            while True:
                page = await reading
                more = len(page) == PAGE
                if until is not None and page and page[-1].position >= until:
                    page = [event for event in page if event.position < until]
                    more = False
                if more:
                    after = page[-1].position + 1
                    reading = asyncio.ensure_future(store.read_all(from_position=after, limit=PAGE))
                if page:
                    end = page[-1].position + 1
                with no_collection():  # records, spans and state: acyclic, and many
                    for event in page:
                        evaluations.see(event)  # every part sees every score and turn
                        if part is not None and skips(event.stream, event.type):
                            continue
                        try:
                            sent = feed(of(event))
                        except DamagedEvent as bad:  # one damaged event must not cost all
                            if folds(event.stream):  # another part's: that part warns
                                damaged.append((event.position, bad.stream, str(bad)))
                            continue
                        if sent:
                            spans += sent
                            if part is not None:
                                places += [(0, event.position, "")] * len(sent)
                    settle()  # kept to the end: no collection between pages scans it again
                advance(len(page))
                if not more:
                    break
        finally:
            if not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError, JournalError):
                    await reading
    with no_collection():  # the spans left open, and every span's output: acyclic, and many
        for key, finished in projector.finish_by_tree():
            spans += finished
            if part is not None:
                places += [(FINISHED, 0, key)] * len(finished)
        made = list(map(output, evaluations.on(spans)))
    return places, made, damaged, end


def _no_progress(done: int) -> None:
    """No progress bar."""


def _skipped(stream: str, problem: str, warned: set[str]) -> None:
    """Warn on stderr that a damaged event is left out (once per stream: its next events
    are likely damaged the same way)."""
    from agentjournal._text import printable

    if stream not in warned:
        warned.add(stream)
        print(f"agentjournal: skipped {printable(problem)}", file=sys.stderr, flush=True)


async def _cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it is done, cancelling again while it goes on.

    One cancellation can be lost: Python 3.11's ``asyncio.wait_for`` returns its inner
    result when that completes in the same step as the cancellation. The SQLite
    subscription waited with it for a wake-up that the follower's own save had just sent,
    read on, and a single ``cancel`` and ``await`` hung the follower after SIGTERM (seen
    under load; the store now waits with ``asyncio.timeout``,
    ``tests/test_subscribe_cancel.py``). A subscription of another store, or code of a
    library's, can still do so: cancelling until done stops it whatever it awaits."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=TICK_SECONDS)
    if not task.cancelled():
        task.exception()  # retrieved: a failure here is not the command's result


class _Follower:
    """``--follow``: fold the subscription, send what ends, save the position after the
    destination took every span before it."""

    def __init__(
        self,
        store: EventStore,
        sink: _Sink,
        session: str | None,
        name: str,
        idle: float,
        branch: str | None = None,
    ) -> None:
        self._store, self._sink, self._session, self._name = store, sink, session, name
        self._branch = branch
        self._quiet = timedelta(seconds=idle)
        self._stop = asyncio.Event()
        self._warned: set[str] = set()

    async def run(self) -> int:
        from agentjournal.read import projections
        from agentjournal.read.traces import Projector

        saved = await projections.load(self._store, self._name)
        if saved is None:
            projector = Projector(self._session, line=self._branch)
        else:
            try:
                projector = Projector.load(saved.state)
            except (ValueError, KeyError, TypeError):
                raise InvalidInput(
                    f"AgentProjection-{self._name} is not a trace follower's: choose another --name"
                ) from None
            if projector.session_id != self._session:
                raise InvalidInput(
                    f"AgentProjection-{self._name} follows "
                    f"{projector.session_id or 'every session'}: choose another --name"
                )
            if projector.line != self._branch:
                followed = "every line" if projector.line is None else f"line {projector.line!r}"
                raise InvalidInput(
                    f"AgentProjection-{self._name} follows {followed} of session "
                    f"{self._session}: choose another --name"
                )
        where = "every session" if self._session is None else f"session {self._session}"
        if self._branch is not None:
            where = f"line {self._branch!r} of {where}"
        start = "the start" if saved is None or saved.position is None else saved.position
        print(
            f"following {where} into {self._sink.where} as AgentProjection-{self._name}, "
            f"from {start}; Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, self._stop.set)
        try:
            await self._loop(projector, saved)
        finally:
            for number in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(number)
        return 0

    async def _loop(self, projector: Projector, saved: Any) -> None:
        from agentjournal.read import projections
        from agentjournal.streams import projection_stream

        own = projection_stream(self._name)
        position = None if saved is None else saved.position
        queue: asyncio.Queue[RecordedEvent] = asyncio.Queue(maxsize=4 * BATCH)

        async def pump() -> None:
            async for event in self._store.subscribe(after_position=position):
                await queue.put(event)

        pumping = asyncio.create_task(pump())
        stopping = asyncio.create_task(self._stop.wait())
        spans: list[ProjectedSpan] = []
        folded = 0  # events folded since the last save that changed the state
        try:
            while not self._stop.is_set():
                getting = asyncio.create_task(queue.get())
                done, _ = await asyncio.wait(
                    {getting, pumping, stopping},
                    timeout=TICK_SECONDS,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if pumping in done:
                    getting.cancel()
                    pumping.result()  # the subscription failed: its error ends the command
                    return
                if getting not in done:
                    getting.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await getting
                    if self._stop.is_set():
                        break
                    # Caught up and nothing came: runs that went quiet are over.
                    spans.extend(projector.idle(datetime.now(UTC), self._quiet))
                    if spans or folded:
                        saved = await self._save(projector, spans, position, saved, projections)
                        spans, folded = [], 0
                    continue
                batch = [getting.result()]
                while len(batch) < BATCH and not queue.empty():
                    batch.append(queue.get_nowait())
                for event in batch:
                    position = event.position
                    if event.stream == own:
                        continue
                    if event.revision and projector.learns(event.stream):
                        await self._learn(projector, event.stream)
                    spans.extend(self._feed(projector, event))
                    if projector.knows(event.stream):
                        folded += 1
                if spans or folded >= SAVE_EVERY:
                    saved = await self._save(projector, spans, position, saved, projections)
                    spans, folded = [], 0
            if spans or folded:
                saved = await self._save(projector, spans, position, saved, projections)
        finally:
            for task in (pumping, stopping):
                await _cancelled(task)

    async def _learn(self, projector: Projector, stream: str) -> None:
        """A state saved before lines meets a branch forked before that save: feed the
        branch's ``BranchStarted`` (revision 0, the twin of its ``BranchForked``) first, so
        its runs name the branch and its fork as if the fork had been followed."""
        first = await self._store.read(stream, limit=1)
        if first and first[0].revision == 0:
            self._feed(projector, first[0])  # a BranchStarted ends no span

    def _feed(self, projector: Projector, event: RecordedEvent) -> list[ProjectedSpan]:
        from agentjournal.read.traces.stored import StoredEvent
        from agentjournal.records import DamagedEvent

        try:
            return projector.feed(StoredEvent.of(event))
        except DamagedEvent as bad:
            _skipped(bad.stream, str(bad), self._warned)
            return []

    async def _save(
        self,
        projector: Projector,
        spans: list[ProjectedSpan],
        position: int | None,
        saved: Any,
        projections: Any,
    ) -> Any:
        """Send, and only once the destination took them, save the position after them."""
        if spans:
            await asyncio.to_thread(self._sink.send, spans)
        try:
            return await projections.save(
                self._store, self._name, position=position, state=projector.dump(), after=saved
            )
        except ConcurrencyError:
            raise JournalError(
                f"another follower saved AgentProjection-{self._name} meanwhile: run one "
                "follower per name (its spans up to here were sent and may be sent again)"
            ) from None
