"""``agentjournal experiment``: a candidate agent replays recorded sessions on branches; both
lines scored and compared."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentjournal.cli._common import STORE_HELP, Commands, check_guardrails

if TYPE_CHECKING:
    from agentjournal.evals.candidate import Candidate
    from agentjournal.evals.report import ExperimentReport
    from agentjournal.evals.scorers.base import Scorer
    from agentjournal.evals.turn_script import TurnScript


def _turn(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a turn number (1, 2, ...)")
    return value


def register(commands: Commands) -> None:
    """Add the ``experiment`` command."""
    text = (
        "run a candidate agent on a branch of each session (the same user messages, "
        "guardrails and policy), score both lines and compare them"
    )
    command = commands.add(
        "experiment",
        text,
        "agentjournal experiment --sessions s1,s2 --candidate my_agents:triage "
        "--scorers scorers.yml",
    )
    command.add_argument(
        "--sessions",
        nargs="+",
        required=True,
        metavar="SESSION",
        help="the recorded sessions: S1,S2,... or S1 S2 ... (no default)",
    )
    command.add_argument(
        "--candidate",
        required=True,
        help="MODULE:AGENT (an agents.Agent; MODULE dotted, or a .py file) or a directory "
        "of agent.yml manifests (DIR, or DIR:ID when it holds several); no default",
    )
    command.add_argument(
        "--at-turn",
        type=_turn,
        default=1,
        metavar="N",
        help="the first turn the candidate answers; the branch holds the turns before it "
        "(default: 1, the session's start)",
    )
    command.add_argument(
        "--model-script",
        metavar="FILE",
        help="the candidate's scripted model answers per session and turn, offline "
        "(default: the candidate's own models)",
    )
    command.add_argument(
        "--scorers", required=True, metavar="FILE", help="the scorers file (no default)"
    )
    command.add_argument(
        "--id",
        dest="experiment_id",
        metavar="EXP",
        help="the experiment's id, its branches' name (default: exp- and a digest of the "
        "inputs, so running the same command again resumes it)",
    )
    command.add_argument(
        "--guardrails",
        metavar="URL",
        help="the guardrail service the candidate is checked by (default: "
        "$AGENTJOURNAL_GUARDRAIL_URL, else none)",
    )
    command.add_argument(
        "--retake",
        action="store_true",
        help="take again a turn another run took and did not finish, only when that run "
        "has stopped: one on another host, boot or process namespace, or one whose process "
        "lives on after its run raised (default: off; a run on this host that has ended is "
        "passed over anyway)",
    )
    command.add_argument(
        "--json", action="store_true", help="print the report as JSON (default: a table)"
    )
    command.add_argument("--uri", help=STORE_HELP + "; never created")
    command.set_defaults(run=run_command)


def session_list(given: list[str]) -> list[str]:
    """``--sessions`` as ids: commas and spaces both separate (pure)."""
    return [part for chunk in given for part in chunk.split(",") if part.strip()]


def run_command(args: argparse.Namespace) -> int:
    """Check every input, run the experiment, print its report.

    Raises:
        InvalidInput: The candidate, model script, scorers, a session or the turn is bad
            (one line, exit 1; nothing was written).
        JournalError: The store cannot be opened, read or written (exit 1; running the
            same command again resumes).
    """
    import hashlib
    import json
    import os
    from pathlib import Path

    from agentjournal.errors import InvalidInput
    from agentjournal.evals.candidate import load_candidate
    from agentjournal.evals.report import render_text
    from agentjournal.evals.scorers import load_scorers
    from agentjournal.evals.turn_script import load_turn_script

    sessions = session_list(args.sessions)
    check_guardrails(args.guardrails)
    if os.getcwd() not in sys.path:  # MODULE:AGENT names a module where the command runs
        sys.path.insert(0, os.getcwd())
    candidate = load_candidate(args.candidate)
    script = (
        load_turn_script(
            args.model_script,
            sessions=sessions,
            first_agent=candidate.name,
            agents=candidate.agents,
        )
        if args.model_script
        else None
    )
    scorers = load_scorers(args.scorers)
    try:
        criteria = "sha256:" + hashlib.sha256(Path(args.scorers).read_bytes()).hexdigest()
    except OSError as error:
        raise InvalidInput(f"--scorers {args.scorers}: cannot be read ({error.strerror})") from None
    report = asyncio.run(
        _experiment(args, sessions, candidate, script, scorers, criteria, quiet=args.json)
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        print(render_text(report))
    return 0


async def _experiment(
    args: argparse.Namespace,
    sessions: list[str],
    candidate: Candidate,
    script: TurnScript | None,
    scorers: Sequence[Scorer],
    criteria: str,
    *,
    quiet: bool,
) -> ExperimentReport:
    from agentjournal.evals.experiment import run_experiment
    from agentjournal.journal import Journal
    from agentjournal.ledger.keys import SigningKey
    from agentjournal.store import open_store, store_uri

    uri = store_uri(args.uri)
    store = await open_store(uri, create=False)
    journal = Journal(store, uri, signing_key=SigningKey.from_environment())

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    async with journal:
        return await run_experiment(
            journal,
            sessions,
            candidate,
            scorers=scorers,
            at_turn=args.at_turn,
            model_script=script,
            experiment_id=args.experiment_id,
            guardrails=args.guardrails,
            criteria=criteria,
            progress=None if quiet else progress,
            retake=args.retake,
        )
