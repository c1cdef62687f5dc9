"""``agentjournal approvals``, ``approve`` and ``reject``: the calls that wait for a person,
and a person's answer to one.

``approvals`` lists what ``Journal.pending_approvals`` finds (every session, or one);
``approve``/``reject`` record the answer (``InterruptResolved``) on the line that asked,
through :func:`agentjournal.read.approvals.answer` (the viewer's route too: the engine's
own write, as ``JournalSession.approve`` calls it), without the Agents SDK: one answer per request,
whichever processes race. The paused run is resumed by whoever runs the agent
(``session.resume(agent)``, or ``agentjournal run`` with ``approvals`` in its input).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING

from agentjournal.cli._common import STORE_HELP, Commands

if TYPE_CHECKING:
    from agentjournal.read.approvals import PendingApproval

_ARGUMENTS = 60
"""How much of a call's arguments the table shows (``--json`` has all)."""


def register(commands: Commands) -> None:
    """Add ``approvals``, ``approve`` and ``reject``."""
    text = "list the tool calls that wait for a person's approval, oldest first"
    listing = commands.add("approvals", text, "agentjournal approvals support-4711")
    which = listing.add_mutually_exclusive_group()
    which.add_argument("session", nargs="?", help="only this session (default: every session)")
    which.add_argument(
        "--all", action="store_true", help="every session of the store (the default)"
    )
    listing.add_argument("--app", help="only sessions of this app_name (default: any)")
    listing.add_argument("--user", help="only sessions of this user_id (default: any)")
    listing.add_argument(
        "--json",
        action="store_true",
        help="print each approval in full as JSON (default: a table, arguments shortened)",
    )
    listing.add_argument("--uri", help=STORE_HELP + "; never created")
    listing.set_defaults(run=lambda args: asyncio.run(list_approvals(args)))
    for name, verb in (("approve", "approve"), ("reject", "reject")):
        answer = commands.add(
            name,
            f"{verb} a tool call that waits for a person's approval (the run is resumed "
            "by whoever runs the agent)",
            f"agentjournal {name} support-4711 call_42 --as dana --reason 'checked the order'",
        )
        answer.add_argument("session", help="the session id")
        answer.add_argument("request", help="the request id (the call's id; see `approvals`)")
        answer.add_argument(
            "--as",
            dest="by",
            metavar="NAME",
            required=True,
            help="who decides: recorded with the answer (no default)",
        )
        answer.add_argument(
            "--reason", default="", help="why, recorded with the answer (default: none)"
        )
        answer.add_argument(
            "--branch",
            metavar="B",
            help="the line that asked, when several ask the same request "
            "(default: the one where it waits; `approvals` lists it)",
        )
        answer.add_argument(
            "--key",
            metavar="PEM",
            help="the approver's Ed25519 private key (as `agentjournal keygen` writes): the "
            "answer is signed with it; needed where the policy names approvers for the tool "
            "(default: unsigned)",
        )
        answer.add_argument("--uri", help=STORE_HELP + "; never created")
        answer.set_defaults(
            run=lambda args, approve=(name == "approve"): asyncio.run(answer_request(args, approve))
        )


async def list_approvals(args: argparse.Namespace) -> int:
    """Print the pending approvals (a table, or ``--json``).

    Raises:
        InvalidInput: SESSION is not in the store (exit 1).
        JournalError: The store cannot be opened or read (exit 1).
    """
    from agentjournal.cli._store import open_session
    from agentjournal.read.approvals import pending_approvals
    from agentjournal.store import open_store, store_uri

    sessions = None
    if args.session is not None:
        store, session_id = await open_session(args.uri, args.session)
        sessions = [session_id]
    else:
        store = await open_store(store_uri(args.uri), create=False)
    try:
        found = await pending_approvals(store, sessions=sessions, app=args.app, user=args.user)
    finally:
        await store.close()
    if args.json:
        print(json.dumps([p.as_dict() for p in found], indent=2, ensure_ascii=False))
        return 0
    _print_table(found)
    return 0


def _print_table(found: list[PendingApproval]) -> None:
    from agentjournal._text import cut
    from agentjournal.cli._render import console, table

    out = console()
    if not found:
        out.print("no approvals wait", markup=False)
        return
    rows = [
        (
            p.session_id if p.branch == "main" else f"{p.session_id} --branch {p.branch}",
            p.approval.request_id,
            p.approval.agent,
            p.approval.tool_name,
            cut(p.arguments, _ARGUMENTS),
            p.approval.issued_at.strftime("%Y-%m-%d %H:%M:%S"),
        )
        for p in found
    ]
    table(out, ("session", "request", "agent", "tool", "arguments", "asked at (UTC)"), rows)


async def answer_request(args: argparse.Namespace, approve: bool) -> int:
    """Record the answer on the line that asked the request; print it.

    Raises:
        InvalidInput: The session, branch or request is unknown, the request no longer
            waits (its call has run, or the subagent that asked it has ended), ``--as`` is
            empty, ``--key`` is no Ed25519 private key, or a recorded policy does not read
            (exit 1).
        AlreadyResolved: The request was answered already; names who answered (exit 1).
        ApproverNotAllowed: The session's recorded policy names approvers for the tool
            and ``--key`` is none of theirs (or missing) (exit 1).
        JournalError: The store cannot be opened, read or written (exit 1).
    """
    from agentjournal._text import printable
    from agentjournal.cli._store import open_session
    from agentjournal.errors import InvalidInput
    from agentjournal.ledger.keys import SigningKey
    from agentjournal.read.approvals import UnknownRequest, answer

    if not args.by.strip():
        raise InvalidInput("--as needs the name of who decides")
    approver = SigningKey.from_file(args.key) if args.key is not None else None
    store, session_id = await open_session(args.uri, args.session)
    try:
        # With a signing key configured the answer is signed as every write is.
        branch, decided = await answer(
            store,
            session_id,
            args.request,
            branch=args.branch,
            approve=approve,
            by=args.by,
            reason=args.reason,
            key=approver,
            signing_key=SigningKey.from_environment(),
        )
    except UnknownRequest as error:
        raise InvalidInput(f"{error}: see `agentjournal approvals {session_id}`") from None
    finally:
        await store.close()
    where = f" --branch {branch}" if branch is not None else ""
    signed = f", signed by {decided.key_id}" if decided.signed else ""
    print(
        printable(
            f"{decided.outcome} request {decided.request_id} of session {session_id}{where} "
            f"as {decided.by}{signed}"
        )
    )
    return 0
