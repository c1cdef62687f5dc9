"""``agentjournal fork SESSION --at N``: a branch that continues a session as of a cut."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

from agentjournal.cli._common import STORE_HELP, Commands


def _whole(least: int) -> Callable[[str], int]:
    """An option's type: a whole number of at least ``least``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{text} is less than {least}")
        return value

    return parse


def register(commands: Commands) -> None:
    """Add the ``fork`` command."""
    text = "fork a session: a new branch that continues it as of an item, a turn or a revision"
    fork = commands.add("fork", text, "agentjournal fork support-4711 --at 7 --name refund")
    fork.add_argument("session", help="the session id")
    cut = fork.add_mutually_exclusive_group(required=True)
    cut.add_argument(
        "--at",
        metavar="INDEX",
        type=_whole(0),
        help="fork just before the item with message index INDEX (the #N of `agentjournal "
        "show`, the --at of `agentjournal replay`): the branch's history is the line's "
        "history before it (no default: give one of --at, --turn and --revision)",
    )
    cut.add_argument(
        "--turn",
        metavar="T",
        type=_whole(1),
        help="fork just before turn T's user message (the T-th user message visible now; "
        "no default)",
    )
    cut.add_argument(
        "--revision",
        metavar="R",
        type=_whole(0),
        help="fork just after revision R of the line's top stream (the @N of `show`; no default)",
    )
    fork.add_argument(
        "--name",
        help="the branch's name: any non-blank text up to 1,000 characters but 'main', never "
        "used in this session before (default: fork_{N}_{unix seconds})",
    )
    fork.add_argument(
        "--from",
        dest="line",
        metavar="BRANCH",
        default="main",
        help="the line to fork: a branch's name forks that branch (default: main)",
    )
    fork.add_argument("--uri", help=STORE_HELP + "; never created")
    fork.set_defaults(run=lambda args: asyncio.run(fork_session(args)))


async def fork_session(args: argparse.Namespace) -> int:
    """Fork the line, print the branch, its cut and how to replay it.

    The fork is one atomic write (nothing is half-written: the marker on the parent, the
    branch's first event and the registry entry land together or not at all). Runs
    without the Agents SDK: the engine's own :meth:`SessionCore.fork`, as
    ``JournalSession.fork`` calls it.

    Raises:
        InvalidInput: The session, the line or the item, turn or revision does not exist,
            or the name is refused or already used (exit 1).
        JournalError: The store cannot be opened, read or written (exit 1).
    """
    from agentjournal._text import printable
    from agentjournal.cli._store import open_session
    from agentjournal.engine.core import open_line
    from agentjournal.ledger.keys import SigningKey
    from agentjournal.streams import MAIN_BRANCH, branch_key, session_stream

    if args.name is not None:
        branch_key(args.name)  # a refused name is refused before the store is opened
    store, session_id = await open_session(args.uri, args.session)
    try:
        line = None
        stream = session_stream(session_id)
        if args.line != MAIN_BRANCH:
            from agentjournal.read.lines import find_branch

            found = await find_branch(store, session_id, args.line)
            if found.deleted is not None:
                from agentjournal.errors import InvalidInput

                raise InvalidInput(
                    f"branch {args.line!r} of session {session_id} was {found.deleted}: "
                    "fork a live line"
                )
            line, stream = found.name, found.stream
        # With a signing key configured the fork signs at once (SessionCore.fork): the
        # parent line's new head, the branch's first event and each continuation.
        key = SigningKey.from_environment()
        core = open_line(store, session_id, branch=line, stream=stream, signing_key=key)
        branch = await core.fork(
            at=args.at, turn=args.turn, revision=args.revision, name=args.name, trace={}
        )
    finally:
        await store.close()
    cut = branch.cut
    where = cut.text()
    print(f"forked branch {printable(repr(branch.name))} of session {session_id}")
    print(f"  from     {branch.parent} {where} (global position {cut.position})")
    print(f"  stream   {branch.stream}")
    print(f"  shares   {branch.prefix_items} items; its own items start at #{branch.next_index}")
    quoted = _quoted(branch.name)
    print(f"  replay   agentjournal replay {session_id} --branch {quoted}")
    return 0


def _quoted(text: str) -> str:
    import shlex

    from agentjournal._text import printable

    return printable(shlex.quote(text))
