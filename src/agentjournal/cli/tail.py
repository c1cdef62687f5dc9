"""``agentjournal tail [SESSION]``: every event as it is written, by any process.

A catch-up subscription over the store's global order (``store.subscribe``), from
now (the store's last position when it starts) or ``--from-start``. With a session,
only its tree: the session stream and every subsession, which it learns from the
parent copies of ``SubagentStarted`` as they arrive (and, starting from now, from the
tree as it is when it starts). Ctrl-C or SIGTERM ends it: exit 0, output flushed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from typing import TYPE_CHECKING, Any

from agentjournal.cli._common import STORE_HELP, Commands, add_keys_argument

if TYPE_CHECKING:
    from agentjournal.records import Record
    from agentjournal.shred.keys import SubjectKeyStore
    from agentjournal.store.contract import EventStore, RecordedEvent


def register(commands: Commands) -> None:
    """Add ``tail``."""
    text = (
        "print each event as it is written, by any process: the whole store, or one "
        "session tree with its subsessions; Ctrl-C ends it"
    )
    tail = commands.add("tail", text, "agentjournal tail support-4711 --from-start")
    tail.add_argument("session", nargs="?", help="only this session tree (default: everything)")
    tail.add_argument(
        "--from-start",
        action="store_true",
        help="print what is stored first (default: off: only what is written from now on)",
    )
    tail.add_argument(
        "--branch",
        metavar="B",
        help="with SESSION: only this line: 'main' (the session's own tree) or a branch's "
        "own streams (default: the session tree and every branch of it, those forked "
        "while it runs too)",
    )
    tail.add_argument(
        "--wait",
        action="store_true",
        help="with SESSION: if it has not started yet, wait for its first event and follow it "
        "(default: off: a session not in the store is an error)",
    )
    tail.add_argument(
        "--json", action="store_true", help="one JSON object per event and line (default: off)"
    )
    add_keys_argument(tail)
    tail.add_argument("--uri", help=STORE_HELP + "; never created")
    tail.set_defaults(run=lambda args: asyncio.run(_tail(args)))


async def last_position(store: EventStore) -> int:
    """The store's last global position (0 when empty): an append of no events reports it
    and writes nothing."""
    from agentjournal.store.contract import StreamState
    from agentjournal.streams import KEYS_STREAM

    return (await store.append(KEYS_STREAM, [], expected=StreamState.ANY)).position


async def _tail(args: argparse.Namespace) -> int:
    from agentjournal.cli._common import key_file, usage
    from agentjournal.cli._store import reading_keys

    if args.branch is not None and args.session is None:
        return usage("--branch needs a SESSION: a branch is a line of one session")
    if args.wait and (args.session is None or args.branch is not None):
        return usage("--wait needs a SESSION (and no --branch): it waits for a session to start")
    keys = reading_keys(key_file(args), ttl=1.0)  # long-running: an erasure shows within 1 s
    try:
        return await _tail_with(args, keys)
    finally:
        keys.close()


async def _tail_with(args: argparse.Namespace, keys: SubjectKeyStore) -> int:
    from agentjournal.cli._store import open_session
    from agentjournal.engine.fork import read_branches
    from agentjournal.store import open_store, store_uri
    from agentjournal.streams import MAIN_BRANCH, session_stream, validate_id
    from agentjournal.walk import walk_tree

    waiting = False
    after: int | None = None
    if args.session is not None and args.wait:
        session = validate_id(args.session, "session id")
        store = await open_store(store_uri(args.uri), create=False)
        try:
            # Where to start first, then whether it started: a session whose first events
            # land in between is followed from them, never missed.
            after = None if args.from_start else await last_position(store)
            waiting = await store.head(session_stream(session)) is None
        except BaseException:
            await store.close()
            raise
    elif args.session is not None:
        store, session = await open_session(args.uri, args.session, hint="--wait")
    else:
        store, session = await open_store(store_uri(args.uri), create=False), None
    try:
        if not waiting and not args.from_start and after is None:
            after = await last_position(store)
        streams: set[str] | None = None
        follow_forks = session is not None and args.branch is None
        if session is not None and waiting:
            # Not started: its stream appears with its first event; the rest follows it.
            streams = {session_stream(session)}
            print(
                f"waiting for session {session} to start; Ctrl-C ends it",
                file=sys.stderr,
                flush=True,
            )
        elif session is not None:
            roots = [session_stream(session)] if args.branch in (None, MAIN_BRANCH) else []
            if args.branch not in (None, MAIN_BRANCH):
                from agentjournal.read.lines import find_branch

                roots.append((await find_branch(store, session, args.branch)).stream)
            elif follow_forks:
                roots.extend(branch.stream for branch in await read_branches(store, session))
            streams = set(roots)
            if after is not None:
                # Subagents opened before now may still speak: their streams, from the tree.
                for root in roots:
                    async for stream, _ in walk_tree(store, root):
                        streams.add(stream)
        what = "every stream" if session is None else f"session {session} and its subsessions"
        if session is not None and args.branch not in (None, MAIN_BRANCH):
            what = f"branch {args.branch!r} of session {session} and its subsessions"
        elif follow_forks:
            what += " and branches"
        start = "the start" if after is None else f"position {after}"
        print(f"tailing {what} from {start}; Ctrl-C ends it", file=sys.stderr, flush=True)
        return await _follow(store, keys, after, streams, as_json=args.json, forks=follow_forks)
    finally:
        await store.close()


async def _follow(
    store: EventStore,
    keys: SubjectKeyStore,
    after: int | None,
    streams: set[str] | None,
    *,
    as_json: bool,
    forks: bool = False,
) -> int:
    from agentjournal._text import printable
    from agentjournal.cli._render import TONE_STYLES, console
    from agentjournal.read.views import tone_of
    from agentjournal.records import DamagedEvent, Record
    from agentjournal.shred.sealing import shown_record

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, stop.set)
    out = console()
    events = store.subscribe(after_position=after)
    stopping = asyncio.create_task(stop.wait())
    try:
        while True:
            step = asyncio.ensure_future(anext(events))
            await asyncio.wait({step, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await step
                return 0
            event: RecordedEvent = step.result()
            if streams is not None and event.stream not in streams:
                continue
            try:
                record = Record.of(event)
            except DamagedEvent as bad:
                if as_json:  # a line of its own kind: the output stays one object per line
                    damaged = {
                        "stream": event.stream,
                        "revision": event.revision,
                        "position": event.position,
                        "damaged": bad.message,
                    }
                    sys.stdout.write(json.dumps(damaged, ensure_ascii=False) + "\n")
                    sys.stdout.flush()
                else:
                    shown = f"{printable(event.stream)}@{event.revision} damaged: {bad.message}"
                    print(shown, flush=True)
                continue
            if streams is not None and record.opens is not None:
                streams.add(record.opens)
            if streams is not None and forks:
                forked = _forked_stream(record)
                if forked is not None:  # the fork commits before the branch's first event
                    streams.add(forked)
            record = shown_record(record, keys)  # sealed content opened, or marked
            # A reader that went away (`| head`) ends it: the command line exits 0 quietly.
            if as_json:
                sys.stdout.write(json.dumps(_as_json(record), ensure_ascii=False) + "\n")
            else:
                tone = TONE_STYLES.get(tone_of(record), "")
                out.print(_line(record), style=tone, markup=False, highlight=False)
            sys.stdout.flush()
    finally:
        stopping.cancel()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(number)
        with contextlib.suppress(Exception):
            await events.aclose()  # type: ignore[attr-defined]


def _forked_stream(record: Record) -> str | None:
    """The branch stream a ``BranchForked`` names (None for any other event)."""
    from agentjournal import events

    if record.type != events.BRANCH_FORKED:
        return None
    body = record.body
    stream = body.get("branch_stream") if body is not None else None
    return stream if isinstance(stream, str) else None


def _line(record: Record) -> str:
    from agentjournal._text import printable
    from agentjournal.read.views import describe_record

    when = record.recorded_at.strftime("%H:%M:%S.%f")[:-3] if record.recorded_at else "-"
    kind = printable(record.type.removeprefix("agentjournal."))
    where = f"{printable(record.stream)}@{record.revision}"
    return f"{when}  {where}  {kind}  {describe_record(record)}".rstrip()


def _as_json(record: Record) -> dict[str, Any]:
    from agentjournal.read.views import describe_record

    return {**record.as_dict(), "description": describe_record(record)}
