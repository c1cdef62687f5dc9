"""The ``agentjournal`` command line.

Commands:
    demo        a scripted support conversation with nested handoffs, offline,
                on the embedded store; prints every stream and the replay
    selfcheck   check an event store end to end (a fresh temporary SQLite file
                unless --uri names a store)
    guardrail serve
                run the reference guardrail service (POST /v1/validate)
    verify SESSION
                verify a session tree in the store (chains, checkpoints, twins,
                delegation, containment)
    bundle export SESSION -o FILE [--redact]
                write the session tree as a bundle for offline verification
    bundle verify FILE --pubkey KEY
                verify a bundle offline: no store, no network
    keygen -o FILE
                write a new Ed25519 signing key; print its public key

Exit codes: 0 success, 1 usage or unexpected error, 2 a check failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import NoReturn

from agentjournal.errors import JournalError
from agentjournal.selfcheck import run_selfcheck
from agentjournal.store import open_store


def _redacted(uri: str) -> str:
    scheme, sep, rest = uri.partition("://")
    if "@" in rest.split("/")[0]:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest


async def _selfcheck(uri: str | None) -> int:
    with tempfile.TemporaryDirectory(prefix="agentjournal-selfcheck-") as directory:
        target = uri or f"sqlite:///{os.path.join(directory, 'selfcheck.db')}"
        print(f"agentjournal selfcheck on {_redacted(target)}")
        store = await open_store(target)
        try:
            ok = await run_selfcheck(store, print)
        finally:
            await store.close()
    print("OK" if ok else "FAILED")
    return 0 if ok else 2


def _guardrail_serve(host: str, port: int, rules_file: str | None) -> int:
    from pydantic import ValidationError

    from agentjournal.guardrails.rules import load_rules
    from agentjournal.guardrails.service import serve

    text = "rules: [{kind: redact_pii}]"
    if rules_file is not None:
        try:
            with open(rules_file, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as error:
            print(f"agentjournal: cannot read rules: {error}", file=sys.stderr)
            return 1
    try:
        rules = load_rules(text)
    except (ValidationError, ValueError) as error:
        print(f"agentjournal: invalid rules in {rules_file}: {error}", file=sys.stderr)
        return 1
    print(f"reference guardrail on http://{host}:{port}/v1/validate ({len(rules.rules)} rules)")
    serve(rules, host=host, port=port)
    return 0


class _Parser(argparse.ArgumentParser):
    """Usage errors exit with 1 (2 means a check failed)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(1)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``agentjournal`` command."""
    parser = _Parser(
        prog="agentjournal",
        description="Event-sourced, tamper-evident session store for the OpenAI Agents SDK.",
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    demo = commands.add_parser("demo", help="run a scripted conversation with handoffs, offline")
    demo.add_argument(
        "--db",
        default="agentjournal-demo.db",
        help="SQLite file to write (default: ./agentjournal-demo.db; each run adds a new session)",
    )
    guardrail = commands.add_parser("guardrail", help="the reference guardrail service")
    guardrail_commands = guardrail.add_subparsers(
        dest="guardrail_command", required=True, parser_class=_Parser
    )
    serve = guardrail_commands.add_parser("serve", help="serve POST /v1/validate")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8787)
    serve.add_argument("--rules", help="YAML rules file (default: PII redaction only)")
    check = commands.add_parser("selfcheck", help="check an event store end to end")
    check.add_argument(
        "--uri",
        default=os.environ.get("AGENTJOURNAL_SELFCHECK_URI"),
        help="store to check (default: a fresh temporary SQLite file); writes a few "
        "events to new SelfCheck-* streams",
    )
    uri_help = "the store (default: $AGENTJOURNAL_URI, else sqlite:///agentjournal.db)"
    verify = commands.add_parser("verify", help="verify a session tree in the store")
    verify.add_argument("session", help="the session id")
    verify.add_argument("--uri", help=uri_help)
    _verification_arguments(verify)
    bundle = commands.add_parser("bundle", help="export or verify a session bundle")
    bundle_commands = bundle.add_subparsers(
        dest="bundle_command", required=True, parser_class=_Parser
    )
    export = bundle_commands.add_parser("export", help="write a session tree as a bundle")
    export.add_argument("session", help="the session id")
    export.add_argument("-o", "--output", required=True, help="the bundle file to write")
    export.add_argument("--uri", help=uri_help)
    export.add_argument(
        "--redact", action="store_true", help="withhold conversation payloads (digests stay)"
    )
    export.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="do not sign a checkpoint of the heads first (one is signed when a key is set)",
    )
    check_bundle = bundle_commands.add_parser("verify", help="verify a bundle offline")
    check_bundle.add_argument("bundle", help="the bundle file")
    _verification_arguments(check_bundle)
    keygen = commands.add_parser("keygen", help="write a new Ed25519 signing key")
    keygen.add_argument("-o", "--output", required=True, help="the private key file (PEM)")
    return parser


def _verification_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``verify`` and ``bundle verify`` share."""
    parser.add_argument(
        "--pubkey",
        action="append",
        default=[],
        help="a trusted Ed25519 public key: a file (PEM or raw hex/base64) or the key itself; "
        "repeat for several. Keys are never taken from the bundle",
    )
    parser.add_argument(
        "--allow-uncovered",
        action="store_true",
        help="report events after the last checkpoint as warnings, not failures",
    )
    parser.add_argument(
        "--not-before",
        help="RFC 3339 time the newest checkpoint must not be older than (an outside anchor: "
        "a bundle cut back to an earlier checkpoint verifies otherwise)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        if args.command == "selfcheck":
            return asyncio.run(_selfcheck(args.uri))
        if args.command == "guardrail":
            return _guardrail_serve(args.host, args.port, args.rules)
        if args.command == "verify":
            from agentjournal.audit import verify_session

            return asyncio.run(
                verify_session(
                    args.session, args.uri, args.pubkey, args.allow_uncovered, args.not_before
                )
            )
        if args.command == "bundle" and args.bundle_command == "export":
            from agentjournal.audit import export_to_file

            return asyncio.run(
                export_to_file(
                    args.session, args.uri, args.output, args.redact, not args.no_checkpoint
                )
            )
        if args.command == "bundle":
            from agentjournal.audit import verify_file

            return verify_file(args.bundle, args.pubkey, args.allow_uncovered, args.not_before)
        if args.command == "keygen":
            from agentjournal.audit import keygen

            return keygen(args.output)
        if args.command == "demo":
            from agentjournal.demo import run_demo  # loads the Agents SDK

            return asyncio.run(run_demo(os.path.abspath(args.db)))
    except JournalError as error:
        print(f"agentjournal: {error}", file=sys.stderr)
        return 1
    return 1  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
