"""``agentjournal eval run|show|list``: scorers over recorded sessions, on the record.

``eval run`` checks the scorers file and every session before anything is written, then
writes one ``EvalRun-{run_id}`` stream (DESIGN §20), printing a line per session to
stderr as it goes; run again with the same ``--id`` it finishes an interrupted run. ``eval
show`` prints one run, ``eval list`` every run. Without a judge in the scorers file no
command loads the Agents SDK.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
from typing import TYPE_CHECKING, Any

from agentjournal.cli._common import STORE_HELP, Commands, add_keys_argument, key_file
from agentjournal.errors import InvalidInput

if TYPE_CHECKING:
    from agentjournal.read.evals.runs import EvalRunResult, RunCompletion
    from agentjournal.shred.keys import SubjectKeyStore
    from agentjournal.store import EventStore


def register(commands: Commands) -> None:
    """Add the ``eval`` commands."""
    group = commands.group("eval", "score recorded sessions: eval runs on the record")
    run = group.add(
        "run",
        "score sessions with the scorers of a file (one EvalRun stream)",
        "agentjournal eval run --scorers scorers.yaml support-1 support-2",
    )
    run.add_argument("sessions", nargs="*", metavar="SESSION", help="the sessions to score")
    run.add_argument(
        "--scorers", metavar="FILE", required=True, help="the scorers file (YAML; docs/evals.md)"
    )
    run.add_argument(
        "--app", help="score the sessions of this app (with --since: active since; default: none)"
    )
    run.add_argument(
        "--since",
        metavar="TIME",
        help="score the sessions active at or after TIME (an ISO 8601 time or an age: 7d; "
        "default: none)",
    )
    run.add_argument(
        "--all", action="store_true", help="score every session of the store (default: off)"
    )
    run.add_argument(
        "--branch",
        metavar="B",
        default="main",
        help="score this line of each session (default: main)",
    )
    run.add_argument(
        "--id",
        dest="run_id",
        metavar="RUN",
        help="the run's id; an existing run's id finishes that run (default: a new id)",
    )
    add_keys_argument(run)
    run.add_argument(
        "--json", action="store_true", help="print the run as JSON (default: a summary line)"
    )
    run.add_argument("--uri", help=STORE_HELP + "; never created")
    run.set_defaults(run=lambda args: asyncio.run(run_command(args)))

    show = group.add(
        "show", "print one eval run", "agentjournal eval show eval-20261205T1200-1a2b3c"
    )
    show.add_argument("run_id", metavar="RUN", help="the run's id")
    add_keys_argument(show)
    show.add_argument(
        "--json", action="store_true", help="print the run as JSON (default: a text report)"
    )
    show.add_argument("--uri", help=STORE_HELP + "; never created")
    show.set_defaults(run=lambda args: asyncio.run(show_command(args)))

    listing = group.add("list", "list the eval runs of the store", "agentjournal eval list")
    listing.add_argument(
        "--json", action="store_true", help="print the runs as JSON (default: one line each)"
    )
    listing.add_argument("--uri", help=STORE_HELP + "; never created")
    listing.set_defaults(run=lambda args: asyncio.run(list_command(args)))


def _targets_asked(args: argparse.Namespace) -> None:
    """Refuse a run that names sessions two ways, or none.

    Raises:
        InvalidInput: It does.
    """
    chosen = args.app is not None or args.since is not None
    if args.sessions and (chosen or args.all):
        raise InvalidInput("name sessions, or choose them with --app/--since or --all: not both")
    if args.all and chosen:
        raise InvalidInput("--all scores every session: drop --app/--since")
    if not (args.sessions or chosen or args.all):
        raise InvalidInput("name the sessions to score, or choose them with --app/--since or --all")


def _criteria(path: str) -> str:
    with open(path, "rb") as handle:
        return "sha256:" + hashlib.sha256(handle.read()).hexdigest()


async def _open(args: argparse.Namespace) -> EventStore:
    from agentjournal.store import open_store, store_uri

    return await open_store(store_uri(args.uri), create=False)


def _keys(args: argparse.Namespace) -> SubjectKeyStore | None:
    from agentjournal.cli._store import reading_keys

    path = key_file(args)
    return reading_keys(path) if path is not None else None


async def run_command(args: argparse.Namespace) -> int:
    """Score the sessions asked for; print the run.

    Raises:
        InvalidInput: The scorers file, a session, the line or the run id is wrong
            (exit 1, nothing written).
        JournalError: The store cannot be opened or written (exit 1: run it again with
            the same --id to finish).
    """
    from agentjournal.cli.sessions import parse_since
    from agentjournal.evals.run import new_run_id, run_eval, select_sessions
    from agentjournal.evals.scorers.file import load_scorers
    from agentjournal.ledger.keys import SigningKey
    from agentjournal.streams import validate_id

    _targets_asked(args)
    since = parse_since(args.since) if args.since is not None else None
    run_id = validate_id(args.run_id, "--id") if args.run_id is not None else new_run_id()
    validate_id(args.branch, "--branch")
    scorers = load_scorers(args.scorers)
    criteria = _criteria(args.scorers)
    signing_key = SigningKey.from_environment()
    keys = _keys(args)
    store = await _open(args)
    try:
        if args.sessions:
            sessions = [validate_id(s, "session id") for s in args.sessions]
        else:
            sessions = await select_sessions(store, app=args.app, since=since)
            if not sessions:
                raise InvalidInput("no session matches: nothing to score")
        result = await run_eval(
            store,
            scorers,
            [(session, args.branch) for session in sessions],
            run_id=run_id,
            keys=keys,
            signing_key=signing_key,
            progress=lambda done: print(done.text(), file=sys.stderr, flush=True),
            criteria=criteria,
        )
    except Exception:
        if args.run_id is None and await _started(store, run_id):  # its id was never shown
            print(
                f"agentjournal: eval run {run_id} is unfinished: add --id {run_id} to finish it",
                file=sys.stderr,
            )
        raise
    finally:
        await store.close()
        if keys is not None:
            keys.close()
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
    else:
        print(_summary(result))
    return 0


async def _started(store: EventStore, run_id: str) -> bool:
    """Whether the run's stream exists (False, too, when the store cannot say)."""
    from agentjournal.errors import JournalError
    from agentjournal.streams import eval_run_stream

    try:
        return await store.head(eval_run_stream(run_id)) is not None
    except JournalError:
        return False


def _summary(run: EvalRunResult) -> str:
    from agentjournal._text import plural

    completion = run.completion
    if completion is None:
        return f"eval run {run.run_id}: open, {len(run.turns)} turn scores"
    return (
        f"eval run {run.run_id}: {plural(completion.sessions, 'session line')}, "
        f"{plural(completion.turns_scored, 'turn score')}, average {completion.average:.3f}"
        + _judge_cost(completion)
        + f" (agentjournal eval show {run.run_id})"
    )


def _judge_cost(completion: RunCompletion) -> str:
    """What a judge cost, when one judged (``""`` without a judge's request)."""
    from agentjournal._text import plural

    requests = int(completion.judge.get("requests", 0) or 0)
    if not requests:
        return ""
    return f", judge {plural(requests, 'request')} ${completion.total_cost:.4f}"


async def show_command(args: argparse.Namespace) -> int:
    """Print one run.

    Raises:
        InvalidInput: No such run (exit 1).
        JournalError: The store cannot be opened or read (exit 1).
    """
    from agentjournal.read.evals.runs import read_run

    keys = _keys(args)
    store = await _open(args)
    try:
        run = await read_run(store, args.run_id, keys=keys)
    finally:
        await store.close()
        if keys is not None:
            keys.close()
    if args.json:
        print(json.dumps(run.as_dict(), indent=2))
    else:
        print("\n".join(show_lines(run)))
    return 0


def show_lines(run: EvalRunResult) -> list[str]:
    """A run as ``eval show`` prints it: its facts, each line's score, each turn's scores."""
    from agentjournal._text import cut, plural, printable

    out = [
        f"eval run {run.run_id} ({run.kind or 'not started'}, {run.status})",
        f"  scorers: {printable(run.scorer)}"
        + (f"  criteria {run.criteria}" if run.criteria else ""),
    ]
    if run.experiment:
        out.append(f"  experiment: {printable(json.dumps(dict(run.experiment)))}")
    if run.completion is not None:
        c = run.completion
        out.append(
            f"  {plural(c.turns_scored, 'turn score')}, average {c.average:.3f}" + _judge_cost(c)
        )
    by_line: dict[tuple[str, str], list[Any]] = {}
    for turn in run.turns:
        by_line.setdefault((turn.session, turn.line), []).append(turn)
    totals = {(s.session, s.line): s for s in run.session_scores}
    for key in dict.fromkeys([*run.sessions, *by_line, *totals]):
        session, line = key
        where = session if line == "main" else f"{session}@{line}"
        total = totals.get(key)
        head = f"{total.score:.2f} {total.label}" if total is not None else "not scored yet"
        if total is not None and total.by_scorer:
            means = ", ".join(f"{printable(k)} {v:.2f}" for k, v in sorted(total.by_scorer.items()))
            head += f" ({means})"
        out.append(f"{printable(where)}: {head}")
        for turn in by_line.get(key, []):
            who = f" by {printable(turn.by)}" if turn.human and turn.by else ""
            out.append(
                f"  turn {turn.turn} {printable(turn.scorer)}{who}: {turn.score:.2f} "
                f"{printable(turn.label)}  {printable(cut(turn.reason, 100))}"
            )
    return out


async def list_command(args: argparse.Namespace) -> int:
    """Print every run, newest first.

    Raises:
        JournalError: The store cannot be opened or read (exit 1).
    """
    from agentjournal._text import printable
    from agentjournal.read.evals.runs import list_runs

    store = await _open(args)
    try:
        runs = await list_runs(store)
    finally:
        await store.close()
    if args.json:
        print(json.dumps([run.summary() for run in runs], indent=2))
        return 0
    if not runs:
        print("no eval runs")
        return 0
    for run in runs:
        row = run.summary()
        average = row["average"]
        shown = f"{average:.3f}" if isinstance(average, float) else "-"
        sessions = "session " if row["sessions"] == 1 else "sessions"
        print(
            f"{run.run_id}  {run.kind:<10} {run.status:<9} {row['sessions']:>4} {sessions} "
            f"{row['turns_scored']:>6} scores  avg {shown}  {printable(run.scorer)}"
        )
    return 0
