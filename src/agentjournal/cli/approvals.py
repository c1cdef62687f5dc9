"""``agentjournal approvals``, ``approve`` and ``reject``: the calls that wait for a person,
and a person's answer on the record.

The answer is the same ``InterruptResolved`` ``session.approve``/``reject`` write (one
answer per request, whichever processes race); the run goes on when the application
resumes it (``session.resume(agent)``) or, for a manifest's agent, on the next
``agentjournal run`` with the thread. Runs without the Agents SDK.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Any

from agentjournal.cli._common import STORE_HELP, Commands

if TYPE_CHECKING:
    from agentjournal.read.approvals import PendingApproval

_ARGUMENTS = 60
"""How much of a call's arguments the table shows (``--json`` shows them whole)."""


def register(commands: Commands) -> None:
    """Add the ``approvals``, ``approve`` and ``reject`` commands."""
    text = "list the tool calls that wait for a person's approval"
    listing = commands.add("approvals", text, "agentjournal approvals --all")
    which = listing.add_mutually_exclusive_group()
    which.add_argument("session", nargs="?", help="only this session (default: every session)")
    which.add_argument("--all", action="store_true", help="every session (the default)")
    listing.add_argument("--app", help="only sessions of this app_name (default: any)")
    listing.add_argument("--user", help="only sessions of this user_id (default: any)")
    listing.add_argument(
        "--json",
        action="store_true",
        help="one JSON array, arguments whole (default: off: a table)",
    )
    listing.add_argument("--uri", help=STORE_HELP + "; never created")
    listing.set_defaults(run=lambda args: asyncio.run(list_approvals(args)))
    for name, verb in (("approve", "approve"), ("reject", "reject")):
        answer = commands.add(
            name,
            f"{verb} a call that waits for a person: InterruptResolved on the record",
            f"agentjournal {name} support-4711 call_r1 --as ann@example.com --reason 'checked'",
        )
        answer.add_argument("session", help="the session id")
        answer.add_argument("request", help="the request id (the call id `approvals` lists)")
        answer.add_argument(
            "--as",
            dest="by",
            metavar="NAME",
            required=True,
            help="who decides, recorded as given (required)",
        )
        answer.add_argument("--reason", default="", help="why (recorded; default: none)")
        answer.add_argument(
            "--branch",
            metavar="B",
            default="main",
            help="the line the run is on (default: main; `approvals` lists it)",
        )
        answer.add_argument("--uri", help=STORE_HELP + "; never created")
        answer.set_defaults(run=lambda args, a=name == "approve": asyncio.run(decide(args, a)))


async def list_approvals(args: argparse.Namespace) -> int:
    """Print the pending approvals, oldest first (a table, or ``--json``).

    Raises:
        InvalidInput: The session is not in the store (exit 1).
        JournalError: The store cannot be opened or read (exit 1).
    """
    from agentjournal.cli._store import open_session
    from agentjournal.read.approvals import pending_approvals
    from agentjournal.store import open_store, store_uri

    if args.session is not None:
        store, session_id = await open_session(args.uri, args.session)
        sessions: list[str] | None = [session_id]
    else:
        store, sessions = await open_store(store_uri(args.uri), create=False), None
    try:
        found = await pending_approvals(store, sessions=sessions, app=args.app, user=args.user)
    finally:
        await store.close()
    if args.json:
        print(json.dumps([_as_json(p) for p in found], indent=2, ensure_ascii=False))
        return 0
    if not found:
        print("no approval waits for an answer")
        return 0
    for line in _table(found):
        print(line)
    return 0


def _as_json(pending: PendingApproval) -> dict[str, Any]:
    a = pending.approval
    return {
        "session_id": pending.session_id,
        "line": pending.line,
        "request_id": a.request_id,
        "agent": a.agent,
        "tool": a.tool_name,
        "arguments": a.arguments,
        "stream": a.stream,
        "revision": a.revision,
        "asked_at": a.issued_at.isoformat(),
    }


def _table(found: list[PendingApproval]) -> list[str]:
    from agentjournal._text import cut, printable

    rows = [
        (
            p.session_id + ("" if p.line == "main" else f" --branch {p.line}"),
            p.approval.request_id,
            p.approval.agent,
            p.approval.tool_name,
            cut(p.approval.arguments, _ARGUMENTS),
            p.approval.issued_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
        for p in found
    ]
    header = ("SESSION", "REQUEST", "AGENT", "TOOL", "ARGUMENTS", "ASKED (UTC)")
    shown = [tuple(printable(str(v)) for v in row) for row in [header, *rows]]
    widths = [max(len(row[i]) for row in shown) for i in range(len(header))]
    return [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in shown
    ]


async def decide(args: argparse.Namespace, approve: bool) -> int:
    """Record the answer and say how the run goes on.

    Raises:
        InvalidInput: The session, branch or request is unknown, ``--as`` is blank.
        AlreadyResolved: The request was answered already (naming who answered; exit 1).
        JournalError: The store cannot be opened, read or written (exit 1).
    """
    from agentjournal._text import printable
    from agentjournal.cli._store import open_session
    from agentjournal.engine.core import open_line
    from agentjournal.errors import InvalidInput
    from agentjournal.ledger.keys import SigningKey
    from agentjournal.streams import MAIN_BRANCH

    if not args.by.strip():
        raise InvalidInput("--as needs the name of who decides")
    store, session_id = await open_session(args.uri, args.session)
    try:
        line, stream = None, None
        if args.branch != MAIN_BRANCH:
            from agentjournal.read.lines import find_branch

            found = await find_branch(store, session_id, args.branch)
            line, stream = found.name, found.stream
        key = SigningKey.from_environment()
        core = open_line(store, session_id, branch=line, stream=stream, signing_key=key)
        decided = await core.resolve(
            args.request, approve=approve, by=args.by, reason=args.reason, trace={}
        )
    finally:
        await store.close()
    on = "" if line is None else f" --branch {line}"
    print(
        printable(
            f"{decided.outcome} request {decided.request_id} of session {session_id}{on} "
            f"as {decided.by}"
        )
    )
    print("  the run goes on when the application resumes it: session.resume(agent)")
    return 0
