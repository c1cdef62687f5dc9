"""``agentjournal replay SESSION``: the flat history the SDK gets back, as JSON Lines."""

from __future__ import annotations

import argparse
import asyncio

from agentjournal.cli._common import STORE_HELP, Commands, add_keys_argument


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    if value > _LARGEST:
        raise argparse.ArgumentTypeError(f"{text} is larger than any store counts (2**62 at most)")
    return value


_LARGEST = 2**62
"""The largest count or index taken: beyond any store's, and within SQLite's integers."""


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
    replay.add_argument(
        "--approvals",
        action="store_true",
        help="after the items, the line's approval events, oldest first, one JSON object "
        'each: {"event", "stream", "revision", "description"} (the question: agent, '
        "tool, arguments, request; the answer: outcome, who, why; the paused run: its "
        "requests), described as `agentjournal show` does; not with --at (default: items "
        "only, exactly as get_items)",
    )
    add_keys_argument(replay)
    replay.add_argument("--uri", help=STORE_HELP + "; never created")
    replay.set_defaults(run=lambda args: asyncio.run(replay_session(args)))


async def replay_session(args: argparse.Namespace) -> int:
    """Print one item per line, in the compact JSON the session stored it in.

    Raises:
        InvalidInput: The session or ``--branch`` is not in the store, the line has no
            item ``--at``, or ``--approvals`` is given with ``--at`` (exit 1).
        JournalError: The store cannot be opened or read (exit 1).
    """
    import json
    import sys

    from agentjournal.cli._common import key_file
    from agentjournal.cli._store import open_session, reading_keys, showing
    from agentjournal.engine.codec import exact_json
    from agentjournal.errors import InvalidInput
    from agentjournal.read.lines import find_branch, line_path, line_replay
    from agentjournal.read.views import describe_record, is_approval
    from agentjournal.streams import MAIN_BRANCH

    if args.approvals and args.at is not None:
        raise InvalidInput("--approvals shows the line as it is now: leave out --at")
    subject_keys = reading_keys(key_file(args))
    try:
        stored, session_id = await open_session(args.uri, args.session)
        store = showing(stored, subject_keys)
        try:
            items = await line_replay(store, session_id, args.branch, limit=args.limit, at=args.at)
            asked = []
            if args.approvals:
                branch = None
                if args.branch != MAIN_BRANCH:
                    branch = await find_branch(store, session_id, args.branch)
                asked = [r for r in await line_path(store, session_id, branch) if is_approval(r)]
        finally:
            await stored.close()
    finally:
        subject_keys.close()
    sys.stdout.writelines(exact_json(item) + "\n" for item in items)
    for record in asked:
        described = {
            "event": record.type,
            "stream": record.stream,
            "revision": record.revision,
            "description": describe_record(record),
        }
        sys.stdout.write(json.dumps(described, ensure_ascii=False) + "\n")
    return 0
