"""``agentjournal trace export``: session trees as OpenTelemetry traces (OTLP, console, JSONL).

The spans come from :mod:`agentjournal.read.traces` (pure); the command reads the store,
hands the spans to the official exporters (``opentelemetry-exporter-otlp``: HTTP/protobuf
or gRPC; the SDK's ``ConsoleSpanExporter``) or writes JSON Lines, and with ``--follow``
keeps its position in the store (:mod:`agentjournal.read.projections`), saved only after the
destination acknowledged every span before it.

The destinations are in :mod:`._trace_sinks`, the export of every tree in :mod:`._trace_all`,
the follower in :mod:`._trace_follow`; this module adds the command and runs it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from typing import TYPE_CHECKING

from agentjournal.cli._common import STORE_HELP, Commands
from agentjournal.cli._trace_all import _as_is, _every_tree, _lines, _output, _second_part
from agentjournal.cli._trace_follow import _Follower
from agentjournal.cli._trace_sinks import ExportFailed as ExportFailed  # the command's error
from agentjournal.cli._trace_sinks import _Destination, _destination, _JsonLines

if TYPE_CHECKING:
    from agentjournal._forked import Child
    from agentjournal.read.traces import ProjectedSpan
    from agentjournal.store.contract import EventStore


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
        "run span is sent; at most a day (default: 10)",
    )
    export.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long an OTLP export may take, retries included, at most a day (default: 10)",
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
