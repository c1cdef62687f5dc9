"""``agentjournal ui`` (the live viewer) and ``agentjournal view`` (one session as one file)."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import re
import signal
import socket
import sys
import threading
from typing import Final

from agentjournal.cli._common import STORE_HELP, Commands, add_keys_argument, usage

TOKEN_ENV: Final = "AGENTJOURNAL_UI_TOKEN"
_TOKEN: Final = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")
_PUBKEY_HELP: Final = (
    "a trusted Ed25519 public key (a file or the key itself; repeat for several): the "
    "Integrity tab verifies the ledger against these and the configured signing key "
    "(default: none)"
)


def register(commands: Commands) -> None:
    """Add ``ui`` and ``view``."""
    text = (
        "serve a read-only web viewer of the store: the sessions list and each session "
        "(lanes per agent, guardrail decisions, integrity, replay), updating live"
    )
    ui = commands.add(
        "ui",
        text,
        "agentjournal ui --pubkey journal.pem.pub, then open http://127.0.0.1:8766/ "
        '(elsewhere: agentjournal ui --host 0.0.0.0 --token "$(openssl rand -hex 16)")',
    )
    ui.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    ui.add_argument(
        "--port",
        type=int,
        default=8766,
        help="port to listen on; 0 picks a free one (default: %(default)s)",
    )
    ui.add_argument(
        "--token",
        help=f"require this bearer token (default: ${TOKEN_ENV}; required when --host is "
        "not a loopback address)",
    )
    ui.add_argument("--pubkey", metavar="KEY", action="append", default=[], help=_PUBKEY_HELP)
    add_keys_argument(ui)
    ui.add_argument("--uri", help=STORE_HELP + "; never created")
    ui.set_defaults(run=_ui)

    text = "write one session's page as a self-contained HTML file that opens offline"
    view = commands.add(
        "view", text, "agentjournal view support-4711 -o session.html --pubkey journal.pem.pub"
    )
    view.add_argument("session", help="the session id")
    view.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="FILE",
        help="the HTML file to write (-: standard output)",
    )
    view.add_argument(
        "--at",
        type=int,
        metavar="INDEX",
        help="open the Replay tab just before item #INDEX (default: off)",
    )
    view.add_argument(
        "--branch",
        metavar="B",
        help="the line to show: a branch made by `agentjournal fork` (its own streams, its "
        "items with the shared prefix, its history before each item) (default: main)",
    )
    view.add_argument("--pubkey", metavar="KEY", action="append", default=[], help=_PUBKEY_HELP)
    add_keys_argument(view)
    view.add_argument("--uri", help=STORE_HELP + "; never created")
    view.set_defaults(run=lambda args: asyncio.run(_view(args)))


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback address (a name is resolved)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    return bool(found) and all(
        ipaddress.ip_address(str(address[4][0]).split("%")[0]).is_loopback for address in found
    )


def _ui(args: argparse.Namespace) -> int:
    from agentjournal.cli._common import key_file, missing_service, trusted_with_own
    from agentjournal.cli._store import reading_keys
    from agentjournal.store import open_store, store_uri

    if not 0 <= args.port <= 65535:
        return usage(f"--port must be 0 to 65535, got {args.port}")
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV) or None
    if token is not None and _TOKEN.fullmatch(token) is None:
        return usage(
            "the token must be 16 to 512 characters of A-Z a-z 0-9 . _ ~ + / = - "
            "(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe())')"
        )
    if token is None and not is_loopback(args.host):
        return usage(
            f"--host {args.host} is not a loopback address: give a token (--token or "
            f"${TOKEN_ENV}) so only those who have it can read the store"
        )
    try:
        from agentjournal.ui.app import create_app, serve
    except ImportError as error:
        return missing_service(error, "agentjournal ui needs Starlette and uvicorn")
    keys = trusted_with_own(args.pubkey)
    target = store_uri(args.uri)
    # Long-running: a key destroyed by `agentjournal erase` shows [erased] within a second.
    subject_keys = reading_keys(key_file(args), ttl=1.0)
    try:

        async def check() -> None:  # a missing store is one line now, not a failed startup
            await (await open_store(target, create=False)).close()

        asyncio.run(check())

        def ready(url: str) -> None:
            where = f"{url}/?token=…" if token is not None else f"{url}/"
            # With a token a person may answer a pending approval: the one write it makes.
            mode = "read-only but for answers to approvals" if token is not None else "read-only"
            print(f"agentjournal ui: serving {where} ({mode}); Ctrl-C stops it", flush=True)

        closing = threading.Event()
        app = create_app(
            lambda: open_store(target, create=False),
            keys=keys,
            token=token,
            closing=closing,
            subject_keys=subject_keys,
        )
        # uvicorn shuts down on SIGINT or SIGTERM, then raises the signal again: as
        # KeyboardInterrupt both times here, so Ctrl-C and a service manager's stop exit 0.
        previous = signal.signal(signal.SIGTERM, _interrupted)
        try:
            serve(app, host=args.host, port=args.port, ready=ready, closing=closing)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
        # Whether uvicorn raised the signal again or returned (a signal that came while
        # it was shutting down already), the server has stopped.
        print("agentjournal ui: stopped", file=sys.stderr, flush=True)
    finally:
        subject_keys.close()
    return 0


def _interrupted(number: int, frame: object) -> None:
    raise KeyboardInterrupt


async def _view(args: argparse.Namespace) -> int:
    """Write the session page with every asset and all its data inline, atomically.

    Raises:
        InvalidInput: The session (or ``--branch``) is not in the store, the line has no
            item ``--at``, or the output's folder does not exist (exit 1).
    """
    from agentjournal.cli._common import (
        key_file,
        trusted_with_own,
        writable_output,
        write_atomically,
    )
    from agentjournal.cli._store import open_session, reading_keys, showing
    from agentjournal.read.evals.scores import scored_runs
    from agentjournal.ui.evals import session_scores_data
    from agentjournal.ui.page import check_at, render, session_page

    to_stdout = args.output == "-"
    target = args.output if to_stdout else writable_output(args.output)  # what is written
    check_at(args.at)
    keys = trusted_with_own(args.pubkey)
    subject_keys = reading_keys(key_file(args))
    try:
        store, session_id = await open_session(args.uri, args.session)
        if sys.stderr.isatty():  # reading, checking and pricing take a moment: say so
            print(f"agentjournal view: reading session {session_id}…", file=sys.stderr, flush=True)
        try:
            data = await session_page(
                store,
                session_id,
                keys,
                at=args.at,
                every_history=True,
                branch=args.branch,
                subject_keys=subject_keys,
            )
            runs = await scored_runs(store, session_id)
            data["scores"] = await session_scores_data(
                showing(store, subject_keys), session_id, runs, line=args.branch or "main"
            )
        finally:
            await store.close()
    finally:
        subject_keys.close()
    page = render(data, inline=True)
    if to_stdout:  # UTF-8, as the page declares, whatever the terminal's encoding
        sys.stdout.flush()
        binary = getattr(sys.stdout, "buffer", None)
        if binary is not None:
            binary.write(page.encode())
            binary.flush()
        else:  # a text-only stream (an embedding program's)
            sys.stdout.write(page)
    else:
        write_atomically(target, page)
    line = f", branch {args.branch!r}" if data.get("branch") else ""
    integrity = data["integrity"]["text"]
    where = "standard output" if to_stdout else args.output
    print(f"wrote {where}: session {session_id}{line}; {integrity}", file=sys.stderr)
    return 0
