"""``agentjournal demo``: a scripted support conversation with nested handoffs, offline."""

from __future__ import annotations

import argparse
import asyncio
import os

from agentjournal.cli._common import STORE_HELP, Commands


def register(commands: Commands) -> None:
    """Add the ``demo`` command."""
    text = "run a scripted conversation with handoffs, offline"
    demo = commands.add("demo", text, "agentjournal demo --policy samples/policy.yml")
    where = demo.add_mutually_exclusive_group()
    where.add_argument("--uri", help=STORE_HELP + "; created when missing")
    where.add_argument(
        "--db",
        metavar="PATH",
        help="a SQLite file: the same as --uri sqlite:///PATH (default: none)",
    )
    demo.add_argument(
        "--session",
        metavar="ID",
        help="the new session's id (default: support- and 8 random hex digits)",
    )
    demo.add_argument(
        "--key",
        metavar="FILE",
        help="the signing key, made when missing (default: $AGENTJOURNAL_SIGNING_KEY_FILE "
        "or $AGENTJOURNAL_SIGNING_KEY, else ./agentjournal-demo.pem)",
    )
    demo.add_argument(
        "--rules",
        metavar="FILE",
        help="the guardrail's rules, e.g. samples/guardrail-rules.yml (default: a refund "
        "ceiling of 2000 cents and PII redaction)",
    )
    demo.add_argument(
        "--policy",
        metavar="FILE",
        help="an authority policy, e.g. samples/policy.yml (default: none)",
    )
    demo.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from agentjournal.cli._common import missing_service
    from agentjournal.store import store_uri

    try:
        from agentjournal.cli._demo import run_demo  # loads the Agents SDK and the service
    except ImportError as error:
        return missing_service(error, "the demo runs the reference guardrail service")
    uri = f"sqlite:///{os.path.abspath(args.db)}" if args.db else store_uri(args.uri)
    return asyncio.run(
        run_demo(
            uri,
            session_id=args.session,
            key_file=args.key,
            rules_file=args.rules,
            policy_file=args.policy,
        )
    )
