"""The ``agentjournal`` command line.

Commands:
    demo        a scripted support conversation with nested handoffs, offline,
                written to the store; prints every stream, the replay and how
                to verify it
    selfcheck   check an event store end to end (a fresh temporary SQLite file
                unless --uri or $AGENTJOURNAL_URI names a store)
    guardrail serve
                run the reference guardrail service (POST /v1/validate)
    verify SESSION
                verify a session tree in the store (chains, checkpoints, twins,
                delegation, containment)
    bundle export SESSION -o FILE [--redact]
                write the session tree as a bundle for offline verification
    bundle verify FILE --pubkey KEY
                verify a bundle offline: no store, no network
    keygen -o FILE [--rotate OLD]
                write a new Ed25519 signing key; print its public key; with
                --rotate, record in the store that OLD hands over to it

Every command that uses a store takes ``--uri`` (default ``$AGENTJOURNAL_URI``,
else ``sqlite:///agentjournal.db``); the commands that only read one
(``verify``, ``bundle export``) never create it.

Exit codes: 0 success, 1 usage or unexpected error, 2 a check failed. An
expected error is one line on stderr saying what to do; ``--debug`` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import NoReturn

from agentjournal._text import plural, shown_uri
from agentjournal.errors import JournalError
from agentjournal.store import DEFAULT_URI, URI_ENV, store_uri

_STORE_HELP = f"the store (default: ${URI_ENV}, else {DEFAULT_URI})"


async def _selfcheck(uri: str | None) -> int:
    from agentjournal.store import open_store
    from agentjournal.store.selfcheck import run_selfcheck

    with tempfile.TemporaryDirectory(prefix="agentjournal-selfcheck-") as directory:
        target = uri or f"sqlite:///{os.path.join(directory, 'selfcheck.db')}"
        print(f"agentjournal selfcheck on {shown_uri(target)}")
        store = await open_store(target)
        try:
            ok = await run_selfcheck(store, print)
        finally:
            await store.close()
    print("OK" if ok else "FAILED")
    return 0 if ok else 2


def _guardrail_serve(host: str, port: int, rules_file: str | None) -> int:
    from agentjournal.guardrails.rules import load_rules
    from agentjournal.guardrails.service import serve

    text = "rules: [{kind: redact_pii}]"
    if rules_file is not None:
        try:
            with open(rules_file, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError) as error:
            return _error(f"cannot read rules {rules_file}: {_reason(error)}")
    try:
        rules = load_rules(text)
    except ValueError as error:
        return _error(f"invalid rules in {rules_file}: {error}")
    count = len(rules.rules)

    def ready(url: str) -> None:
        # Flushed: a caller reading our stdout through a pipe learns the port at once.
        print(f"reference guardrail on {url}/v1/validate ({plural(count, 'rule')})")
        sys.stdout.flush()

    serve(rules, host=host, port=port, ready=ready)
    return 0


class _Parser(argparse.ArgumentParser):
    """Usage errors exit with 1 (2 means a check failed)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(1)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentjournal")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``agentjournal`` command."""
    # --debug is accepted before and after the command; SUPPRESS keeps a subcommand
    # from resetting what the top level parsed.
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the traceback of an error (default: one line)",
    )
    parser = _Parser(
        prog="agentjournal",
        description="Event-sourced, tamper-evident session store for the OpenAI Agents SDK.",
        epilog="Exit codes: 0 success, 1 usage or unexpected error, 2 a check failed.",
    )
    parser.add_argument("--version", action="version", version=f"agentjournal {_version()}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (default: one line)"
    )
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    def command(parent: argparse._SubParsersAction[_Parser], name: str, text: str) -> _Parser:
        return parent.add_parser(name, help=text, description=text, parents=[common])

    demo = command(commands, "demo", "run a scripted conversation with handoffs, offline")
    where = demo.add_mutually_exclusive_group()
    where.add_argument("--uri", help=_STORE_HELP + "; created when missing")
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

    guardrail = command(commands, "guardrail", "the reference guardrail service")
    guardrail_commands = guardrail.add_subparsers(
        dest="guardrail_command", required=True, parser_class=_Parser
    )
    serve = command(guardrail_commands, "serve", "serve POST /v1/validate until interrupted")
    serve.add_argument("--host", default="127.0.0.1", help="the address (default: 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=8787, help="the port; 0 picks a free one (default: 8787)"
    )
    serve.add_argument(
        "--rules",
        metavar="FILE",
        help="YAML rules, e.g. samples/guardrail-rules.yml (default: PII redaction only)",
    )

    check = command(commands, "selfcheck", "check an event store end to end")
    check.add_argument(
        "--uri",
        help=f"the store to check; writes a few events to new SelfCheck-* streams "
        f"(default: ${URI_ENV}, else a fresh temporary SQLite file)",
    )

    verify = command(commands, "verify", "verify a session tree in the store")
    verify.add_argument("session", help="the session id")
    verify.add_argument("--uri", help=_STORE_HELP + "; never created")
    _verification_arguments(verify)

    bundle = command(commands, "bundle", "export or verify a session bundle")
    bundle_commands = bundle.add_subparsers(
        dest="bundle_command", required=True, parser_class=_Parser
    )
    export = command(bundle_commands, "export", "write a session tree as a bundle")
    export.add_argument("session", help="the session id")
    export.add_argument("-o", "--output", required=True, help="the bundle file to write")
    export.add_argument("--uri", help=_STORE_HELP + "; never created")
    export.add_argument(
        "--redact",
        action="store_true",
        help="withhold conversation payloads; digests stay (default: off)",
    )
    export.add_argument(
        "--no-checkpoint",
        action="store_true",
        help="do not sign a checkpoint of the heads first (default: one is signed when a "
        "key is set)",
    )
    check_bundle = command(bundle_commands, "verify", "verify a bundle offline")
    check_bundle.add_argument("bundle", help="the bundle file")
    _verification_arguments(check_bundle)
    check_bundle.add_argument(
        "--max-bytes",
        metavar="BYTES",
        type=_byte_count,
        default=None,
        help="refuse a bundle larger than this many bytes, read whole into memory "
        "(default: 268435456, i.e. 256 MiB)",
    )

    keygen = command(commands, "keygen", "write a new Ed25519 signing key")
    keygen.add_argument(
        "-o",
        "--output",
        required=True,
        help="the private key file (PEM); FILE.pub gets the public key",
    )
    keygen.add_argument(
        "--rotate",
        metavar="OLD",
        help="the key file being replaced: the new public key is recorded in the store, "
        "signed by OLD, so a verifier that trusts OLD trusts the new key too (default: none)",
    )
    keygen.add_argument("--uri", help=_STORE_HELP + "; with --rotate only; never created")
    return parser


def _byte_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes") from None
    if value < 1:
        raise argparse.ArgumentTypeError("a size is at least 1 byte")
    return value


def _verification_arguments(parser: argparse.ArgumentParser) -> None:
    """The options ``verify`` and ``bundle verify`` share."""
    parser.add_argument(
        "--pubkey",
        metavar="KEY",
        action="append",
        default=[],
        help="a trusted Ed25519 public key: a file (PEM or raw hex/base64) or the key itself; "
        "repeat for several. Keys are never taken from the bundle (default: none, so "
        "--allow-uncovered is needed)",
    )
    parser.add_argument(
        "--allow-uncovered",
        action="store_true",
        help="report events after the last checkpoint as warnings, not failures (default: off)",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="the authority policy (YAML) the session must have run under: every policy it "
        "recorded must be this one (an outside anchor, like the keys; default: none)",
    )
    parser.add_argument(
        "--not-before",
        metavar="TIME",
        help="RFC 3339 time the newest checkpoint must not be older than (an outside anchor: "
        "a bundle cut back to an earlier checkpoint verifies otherwise; default: none)",
    )


def _reason(error: BaseException) -> str:
    """An exception as one line: its message without line breaks."""
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror + (f": {error.filename}" if error.filename else "")
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split())


def _error(message: str) -> int:
    print(f"agentjournal: {' '.join(message.split())}", file=sys.stderr)
    return 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "selfcheck":
        return asyncio.run(_selfcheck(args.uri or os.environ.get(URI_ENV)))
    if args.command == "guardrail":
        return _guardrail_serve(args.host, args.port, args.rules)
    if args.command == "verify":
        from agentjournal.cli._audit import verify_session

        return asyncio.run(
            verify_session(
                args.session,
                args.uri,
                args.pubkey,
                args.allow_uncovered,
                args.not_before,
                policy_file=args.policy,
            )
        )
    if args.command == "bundle" and args.bundle_command == "export":
        from agentjournal.cli._audit import export_to_file

        return asyncio.run(
            export_to_file(args.session, args.uri, args.output, args.redact, not args.no_checkpoint)
        )
    if args.command == "bundle":
        from agentjournal.cli._audit import DEFAULT_MAX_BYTES, verify_file

        return verify_file(
            args.bundle,
            args.pubkey,
            args.allow_uncovered,
            args.not_before,
            max_bytes=args.max_bytes or DEFAULT_MAX_BYTES,
            policy_file=args.policy,
        )
    if args.command == "keygen" and args.rotate is not None:
        from agentjournal.cli._audit import rotate

        return asyncio.run(rotate(args.rotate, args.output, args.uri))
    if args.command == "keygen":
        from agentjournal.cli._audit import keygen

        if args.uri is not None:
            return _error("--uri is for --rotate: a new key alone is not recorded anywhere")
        return keygen(args.output)
    if args.command == "demo":
        from agentjournal.cli.demo import run_demo  # loads the Agents SDK

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
    return 1  # pragma: no cover - argparse rejects unknown commands


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:
        return 130
    except (JournalError, OSError) as error:  # expected: bad input, a missing file or store
        if args.debug:
            raise
        return _error(_reason(error))
    except Exception as error:
        if args.debug:
            raise
        return _error(
            f"unexpected error: {type(error).__name__}: {_reason(error)} "
            "(run again with --debug for the traceback)"
        )


if __name__ == "__main__":
    sys.exit(main())
