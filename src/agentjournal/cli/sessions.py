"""``agentjournal sessions``: one row per session, newest activity first (the catalog)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from agentjournal.cli._common import STORE_HELP, Commands, usage
from agentjournal.errors import InvalidInput

if TYPE_CHECKING:
    from collections.abc import Mapping

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentjournal._forked import Child
    from agentjournal.read.catalog import SessionRow
    from agentjournal.read.catalog.parts import OtherPart, Sent

_RELATIVE: Final = re.compile(r"(\d+)([smhdw])")
_UNITS: Final = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def register(commands: Commands) -> None:
    """Add the ``sessions`` command."""
    text = "list the sessions in the store, newest activity first"
    sessions = commands.add(
        "sessions", text, "agentjournal sessions --since 7d --pubkey journal.pem.pub"
    )
    sessions.add_argument("--app", help="only sessions of this app (default: all)")
    sessions.add_argument("--user", help="only sessions of this user (default: all)")
    sessions.add_argument(
        "--since",
        metavar="TIME",
        help="only sessions active at or after TIME: an ISO 8601 date or time (UTC unless "
        "it says otherwise), or an age such as 30m, 2h, 7d, 2w (default: all)",
    )
    sessions.add_argument(
        "--pubkey",
        metavar="KEY",
        action="append",
        default=[],
        help="a trusted Ed25519 public key (a file or the key itself; repeat for several): "
        "the integrity column is verified only for checkpoints signed by one, or by a key "
        "a recorded rotation leads to; the configured signing key is trusted too "
        "(default: none)",
    )
    sessions.add_argument(
        "--fresh",
        action="store_true",
        help="ignore the catalog saved in the store (anyone who can write the store can "
        "forge it): read every event from the start, save nothing (default: off)",
    )
    sessions.add_argument(
        "--json", action="store_true", help="print the rows as JSON (default: a table)"
    )
    sessions.add_argument("--uri", help=STORE_HELP + "; never created")
    sessions.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    from agentjournal._gc import no_collection

    # One pass in a process of its own (and its child's, forked with the collector off):
    # what the fold makes is acyclic and lives until the rows are printed, so the cyclic
    # collector would only scan the growing catalog again and again (about a tenth of a
    # cold call's time); the few cycles made wait for the process's end.
    with no_collection():
        return _listed(args)


def _listed(args: argparse.Namespace) -> int:
    from agentjournal.cli._common import trusted_with_own

    # Forked before anything runs a thread (the store's): the child opens its own store.
    now, second = int(time.time() * 1_000_000), None
    with contextlib.suppress(InvalidInput):  # list_sessions says what is wrong
        second = _second_part(args.uri, now, trusted_with_own(args.pubkey), fresh=args.fresh)
    try:
        other = None
        if second is not None:
            from agentjournal.read.catalog.parts import OtherPart

            other = OtherPart(now, second.result)
        return asyncio.run(list_sessions(args, other))
    finally:
        if second is not None:
            second.close()
            with contextlib.suppress(ChildProcessError):  # reaped: its CPU counts as ours
                os.waitpid(second.pid, 0)


def _second_part(
    uri: str | None, now: int, keys: Mapping[str, Ed25519PublicKey], *, fresh: bool
) -> Child | None:
    """A child process folding the second part of the session trees of the SQLite store
    at ``uri`` from the start, its checkpoints checked with ``keys`` trusted
    (:mod:`agentjournal.read.catalog.parts`), should this call fold from the start,
    when a second core is free and forking is safe; else None (a KurrentDB store: whether it
    holds a saved catalog would take a gRPC call before the fork, and gRPC does not support a
    forked child's use of it after the parent's; see DESIGN §14)."""
    from agentjournal._forked import core_to_spare, forked
    from agentjournal.read.catalog import parts  # noqa: F401 (imported once, for both)
    from agentjournal.store import sqlite_path, store_uri

    where = store_uri(uri)
    try:
        path = sqlite_path(where) if where.startswith("sqlite://") else ":memory:"
    except InvalidInput:
        return None
    if path == ":memory:" or not core_to_spare():
        return None
    catalogued = _catalogued(path)
    if catalogued is None or (catalogued and not fresh):
        return None
    import agentjournal.store.sqlite  # noqa: F401 (the store both open: imported once, here)

    return forked(lambda: asyncio.run(_part_of(where, now, keys, fresh=fresh)))


def _catalogued(path: str) -> bool | None:
    """Whether the SQLite file at ``path`` holds a saved catalog (else a call folds from the
    start), asked on a connection of its own, closed before any fork; None when that cannot
    be told (no such file, or not one of ours: the listing says what is wrong)."""
    import sqlite3
    from pathlib import Path

    from agentjournal.read.catalog.listing import NAME
    from agentjournal.streams import projection_stream

    try:
        with contextlib.closing(
            sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        ) as db:
            found = db.execute(
                "SELECT 1 FROM streams WHERE name = ?", (projection_stream(NAME),)
            ).fetchone()
    except sqlite3.Error:
        return None
    return found is not None


async def _part_of(
    uri: str, now: int, keys: Mapping[str, Ed25519PublicKey], *, fresh: bool
) -> Sent | None:
    """What the child sends: its part of the store at ``uri`` (see :func:`_second_part`)."""
    from agentjournal.read.catalog.parts import second_part
    from agentjournal.store import open_store

    store = await open_store(uri, create=False)
    try:
        return await second_part(store, now, keys, fresh=fresh)
    finally:
        await store.close()


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """A ``--since`` value as a UTC time: an ISO 8601 date or time, or an age (``2h``).

    Raises:
        InvalidInput: It is neither.
    """
    now = now or datetime.now(UTC)
    relative = _RELATIVE.fullmatch(text.strip())
    if relative is not None:
        amount, unit = int(relative.group(1)), relative.group(2)
        try:
            return now - timedelta(**{_UNITS[unit]: amount})
        except OverflowError:
            raise InvalidInput(f"--since {text!r} is too far back") from None
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidInput(
            f"--since {text!r} is neither an ISO 8601 date or time (2026-11-30, "
            "2026-11-30T08:00:00Z) nor an age (30m, 2h, 7d, 2w)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


async def list_sessions(args: argparse.Namespace, other: OtherPart | None = None) -> int:
    """Print the catalog's rows (filtered); a warning line when it could not be saved.
    ``other``: a process folding the second half of the trees (:func:`_second_part`).

    Raises:
        JournalError: The store cannot be opened or read (a usage error: 1).
    """
    from agentjournal.cli._common import trusted_with_own
    from agentjournal.cli._render import Lines, progress, table
    from agentjournal.read import catalog
    from agentjournal.store import open_store, store_uri

    try:
        since = parse_since(args.since) if args.since is not None else None
        keys = trusted_with_own(args.pubkey)
    except InvalidInput as error:
        return usage(str(error))
    store = await open_store(store_uri(args.uri), create=False)
    try:
        with progress("reading the store") as advance:
            listing = await catalog.refresh(
                store, keys=keys, progress=advance, fresh=args.fresh, other=other
            )
    finally:
        await store.close()
    if listing.warning is not None:
        print(f"agentjournal: warning: {listing.warning}", file=sys.stderr)
    rows = [
        row
        for row in listing.rows
        if (args.app is None or row.app == args.app)
        and (args.user is None or row.user == args.user)
        and (since is None or row.last_activity >= since)
    ]
    if args.json:
        print(json.dumps([row.as_dict() for row in rows], indent=2, ensure_ascii=False))
        return 0
    out = Lines()
    if not rows:
        out.line("no sessions" + (" match" if len(listing.rows) else ""))
        return 0
    columns = (
        "session",
        "app",
        "user",
        "agent",
        "items",
        "subagents(o/c/f)",
        "blocks",
        "refusals",
        "tokens",
        "branches",
        "score",
        "first",
        "last",
        "integrity",
    )
    table(
        out,
        columns,
        [
            (
                row.session_id,
                row.app or "-",
                row.user or "-",
                row.agent or "-",
                row.items,
                f"{row.subagents_open}/{row.subagents_closed}/{row.subagents_failed}",
                row.guardrail_blocks,
                row.refusals,
                row.tokens,
                _branches(row),
                score_text(row),
                _when(row.first_activity),
                _when(row.last_activity),
                _STATE_WORDS[row.integrity.state],
            )
            for row in rows
        ],
    )
    for line in _integrity_notes(rows):
        out.line(line)
    return 0


_STATE_WORDS: Final = {
    "verified": "verified",
    "untrusted": "untrusted key",
    "unsigned": "unsigned",
    "failed": "FAILED",
}
"""The integrity column's words, one per state."""

_NOTED: Final = 10  # sessions whose failure or untrusted key is spelt out under the table


def _integrity_notes(rows: list[SessionRow]) -> list[str]:
    """What the integrity column rests on, and why each FAILED or untrusted row is so."""
    oldest = min(row.checked_at for row in rows).strftime("%Y-%m-%d %H:%M:%S")
    notes = [
        "integrity: every chain link, the newest checkpoint and nothing after it, as folded "
        "(the oldest fold "
        f"{oldest} UTC); `agentjournal verify SESSION` checks everything, `--fresh` "
        "re-reads every event"
    ]
    flagged = [row for row in rows if row.integrity.state in ("failed", "untrusted")]
    for row in flagged[:_NOTED]:
        notes.append(f"  {row.session_id}: {row.integrity.text()}")
    if len(flagged) > _NOTED:
        notes.append(f"  ... and {len(flagged) - _NOTED} more (--json has every one)")
    return notes


def _branches(row: SessionRow) -> str:
    """The branches column: how many live branches, and how many were deleted or cleared."""
    gone = sum(1 for branch in row.branches if branch.deleted is not None)
    live = len(row.branches) - gone
    return f"{live}" + (f" (+{gone} gone)" if gone else "") if row.branches else "-"


def score_text(row: SessionRow) -> str:
    """The score column: the latest eval score and its label (and line, when a branch's),
    then the newest rating a person gave; ``-`` when never scored."""
    parts = []
    if row.score is not None:
        line = f" ({row.score.line})" if row.score.line != "main" else ""
        parts.append(f"{row.score.score:.2f} {row.score.label}{line}".strip())
    if row.rating is not None:
        parts.append(f"rated {row.rating.score:.2f}")
    return " · ".join(parts) or "-"


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S")
