"""``agentjournal replay SESSION``: the flat history the SDK gets back, as JSON Lines."""

from __future__ import annotations

import argparse
import asyncio

from agentjournal.cli._common import STORE_HELP, Commands


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def register(commands: Commands) -> None:
    """Add the ``replay`` command."""
    text = "print a session's items as JSON Lines, exactly as get_items returns them"
    replay = commands.add("replay", text, "agentjournal replay support-4711 --limit 10")
    replay.add_argument("session", help="the session id")
    replay.add_argument(
        "--limit",
        metavar="N",
        type=_count,
        help="only the newest N items, as get_items(limit=N) (default: every item)",
    )
    replay.add_argument(
        "--at",
        metavar="INDEX",
        type=_count,
        help="the history as it was just before the item with message index INDEX was "
        "written (the #N of `agentjournal show`; the items of one add_items written before "
        "it are included; default: as it is now)",
    )
    replay.add_argument(
        "--branch",
        metavar="B",
        default="main",
        help="the line to replay: a branch made by `agentjournal fork` (its prefix is the "
        "parent's history as of the fork; --at counts the line's items as get_items on it "
        "does) (default: main, the session itself)",
    )
    replay.add_argument("--uri", help=STORE_HELP + "; never created")
    replay.set_defaults(run=lambda args: asyncio.run(replay_session(args)))


async def replay_session(args: argparse.Namespace) -> int:
    """Print one item per line, in the compact JSON the session stored it in.

    Raises:
        InvalidInput: The session or ``--branch`` is not in the store, or the line has no
            item ``--at`` (exit 1).
        JournalError: The store cannot be opened or read (exit 1).
    """
    import sys

    from agentjournal.cli._store import open_session
    from agentjournal.engine.codec import exact_json
    from agentjournal.read.lines import line_replay

    store, session_id = await open_session(args.uri, args.session)
    try:
        items = await line_replay(store, session_id, args.branch, limit=args.limit, at=args.at)
    finally:
        await store.close()
    sys.stdout.writelines(exact_json(item) + "\n" for item in items)
    return 0
