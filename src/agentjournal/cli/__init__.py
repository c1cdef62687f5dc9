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
    sessions [--app A] [--user U] [--since T] [--json]
                one row per session, newest activity first (the catalog
                projection, saved in the store: a call folds what is new)
    show SESSION [--branch B] [--stream S] [--pubkey KEY] [--json]
                a session tree, one line per event, subsessions nested
    replay SESSION [--branch B] [--limit N] [--at INDEX]
                the flat history as JSON Lines, exactly as get_items returns it
    fork SESSION (--at INDEX | --turn T | --revision R) [--name NAME] [--from B]
                a branch that continues the session (or branch B) as of a cut
    approvals [SESSION | --all] [--app A] [--user U] [--json]
                the tool calls that wait for a person's approval, oldest first
    approve|reject SESSION REQUEST --as NAME [--reason TEXT] [--key PEM] [--branch B]
                a person's answer on the record (the application resumes the run)
    erase --subject S --reason TEXT --as NAME [--keys FILE]
                destroy a data subject's keys: its sealed content reads [erased],
                SubjectErased on each session that held it, every chain verifies
    usage [SESSION] [--by model|agent|session] [--prices FILE] [--json]
                tokens, requests and cost per model, agent or session, each
                model response counted once (every session without SESSION)
    tail [SESSION] [--from-start] [--wait] [--json]
                print each event as it is written, by any process (Ctrl-C ends it)
    trace export [SESSION | --all] [--follow] (--otlp URL | --console | --jsonl FILE)
                session trees as OpenTelemetry spans; --follow keeps going and
                saves where it is in the store
    run --manifests DIR --agent ID
                run a manifest's agent: one JSON object on stdin, one on
                stdout (seed 000's contract; exit 0/1/2/3, see its --help)
    experiment --sessions S1,S2 --candidate MODULE:AGENT|DIR --scorers FILE
                [--at-turn N] [--model-script FILE] [--id EXP] [--json]
                a candidate agent on a branch of each session, both lines scored
                and compared (resumable: the same command again continues it)
    ui [--host H] [--port P] [--token T]
                a read-only web viewer of the store: sessions, lanes, integrity,
                replay, updating live (the [service] extra)
    view SESSION -o FILE
                one session's page as a self-contained HTML file (opens offline)
    eval run --scorers FILE [SESSION... | --app A --since T | --all] [--branch B] [--id RUN]
                score recorded sessions, written as one EvalRun stream (resumable by --id)
    eval show RUN | eval list
                one eval run, or every run

Every command that uses a store takes ``--uri`` (default ``$AGENTJOURNAL_URI``,
else ``sqlite:///agentjournal.db``); the commands that only read one
(``verify``, ``bundle export``, ``sessions``, ``show``, ``replay``, ``usage``, ``tail``,
``trace export``, ``ui``, ``view``, ``approvals``, ``eval show``, ``eval list``) never create
it, nor do ``fork``, ``approve``, ``reject`` and ``eval run`` (they write to an existing store
only).

``show``, ``replay``, ``tail``, ``view`` and ``ui`` take ``--keys FILE`` (default
``$AGENTJOURNAL_KEYS``, as ``erase``): sealed content shown opened, ``[erased]`` after an
erasure, ``[sealed]`` without keys (DESIGN.md, "Erasure that keeps the proof").

Exit codes: 0 success, 1 usage or unexpected error, 2 a check failed. An
expected error is one line on stderr saying what to do; ``--debug`` shows the
traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Final, NoReturn

from agentjournal.cli._common import Commands
from agentjournal.cli._common import usage as usage_error  # the module `usage` takes the name
from agentjournal.errors import JournalError

_MODULES: Final = (
    "demo",
    "selfcheck",
    "guardrail",
    "verify",
    "bundle",
    "keygen",
    "sessions",
    "show",
    "replay",
    "fork",
    "approvals",
    "erase",
    "usage",
    "tail",
    "trace",
    "eval",
    "run",
    "experiment",
    "ui",
)
"""The command modules of this package, in the order ``--help`` lists them: each
adds its parser and the function that runs it (``register``), and loads what it needs only
when it runs."""

_MODULE_OF: Final = {
    **{name: name for name in _MODULES},
    "approve": "approvals",
    "reject": "approvals",
    "view": "ui",
}
"""The module that adds each command (a module may add several)."""


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line, as every other error, and exit with 1 (2 means a check
    failed); the line names the help that shows the usage."""

    def error(self, message: str, prog: str | None = None) -> NoReturn:
        print(f"agentjournal: {message} (see {prog or self.prog} --help)", file=sys.stderr)
        sys.exit(1)

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but arguments no command takes are blamed on the command's help
        (its prog, which :class:`~agentjournal.cli._common.Commands` records), not the whole
        command's."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            given = list(sys.argv[1:] if args is None else args)
            command = getattr(parsed, "command", None)
            # Before the command's name, an argument is the whole command's to refuse.
            ours = command in given and given.index(extras[0]) > given.index(command)
            prog = getattr(parsed, "prog", None) if ours else None
            self.error(f"unrecognized arguments: {' '.join(extras)}", prog)
        return parsed


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentjournal")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _Version(argparse._VersionAction):
    """``--version``: the installed version, looked up only when asked (the lookup reads
    the package metadata, some 15 ms that every other command would pay)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(f"agentjournal {_version()}")
        parser.exit()


class _Refused(Exception):
    """A command line the parser of one command finds fault with."""


class _OneCommandParser(_Parser):
    """A parser that holds one command module's commands: a fault it finds is raised, for
    the whole parser to say (its usage names every command)."""

    def error(self, message: str, prog: str | None = None) -> NoReturn:
        raise _Refused(message)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``agentjournal`` command."""
    return _parser(_MODULES, _Parser)


def _parser(modules: Sequence[str], kind: type[_Parser]) -> argparse.ArgumentParser:
    """The parser of the commands ``modules`` add, of class ``kind``."""
    # --debug is accepted before and after the command; SUPPRESS keeps a subcommand
    # from resetting what the top level parsed.
    common = kind(add_help=False)
    common.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="show the traceback of an error (default: one line)",
    )
    parser = kind(
        prog="agentjournal",
        description="Event-sourced, tamper-evident session store for the OpenAI Agents SDK.",
        epilog="Exit codes: 0 success, 1 usage or unexpected error, 2 a check failed.",
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback of an error (default: one line)"
    )
    commands = Commands(
        parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=kind),
        common,
    )
    for name in modules:
        importlib.import_module(f"agentjournal.cli.{name}").register(commands)
    return parser


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` parsed as :func:`build_parser`'s parser parses it.

    A command line that names its command plainly (after ``--debug`` at most) is parsed by
    a parser of that command's module alone, so a command does not import the other
    commands' modules (and what they import) to start; whatever that parser finds fault
    with, the whole parser parses again, to say it as it does. (A command's parser, help
    and messages are the same in both: its module adds them alike.)
    """
    arguments = list(argv)
    at = 0
    while at < len(arguments) and arguments[at] == "--debug":
        at += 1
    module = _MODULE_OF.get(arguments[at]) if at < len(arguments) else None
    if module is not None:
        try:
            return _parser([module], _OneCommandParser).parse_args(arguments)
        except _Refused:
            pass
    return build_parser().parse_args(arguments)


def _reason(error: BaseException) -> str:
    """An exception as one line: its message without line breaks."""
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror + (f": {error.filename}" if error.filename else "")
    else:
        text = str(error) or type(error).__name__
    return " ".join(text.split())


def _discard_stdout() -> None:
    """Point stdout at the null device, so flushing it at exit cannot fail."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor (captured in tests): nothing to flush
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    args = parse(sys.argv[1:] if argv is None else argv)
    try:
        code: int = args.run(args)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`| head -1`): what it read is what it wanted, a quiet
        # success. Output still buffered must not fail again at exit (Python's advice).
        _discard_stdout()
        return 0
    except (JournalError, OSError) as error:  # expected: bad input, a missing file or store
        if args.debug:
            raise
        return usage_error(_reason(error))
    except Exception as error:
        if args.debug:
            raise
        return usage_error(
            f"unexpected error: {type(error).__name__}: {_reason(error)} "
            "(run again with --debug for the traceback)"
        )
