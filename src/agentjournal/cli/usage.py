"""``agentjournal usage [SESSION]``: tokens and requests per model, agent or session, with cost.

One session is read as its tree (:func:`agentjournal.walk.read_tree`); without a
session the store's global order is read in pages, with progress on a terminal.
Either way the counting is :class:`agentjournal.read.usage.UsageFold`'s: each model
response once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import TYPE_CHECKING, Final, cast

from agentjournal.cli._common import STORE_HELP, Commands, usage

if TYPE_CHECKING:
    from decimal import Decimal

    from agentjournal.read.usage import Group, Prices, UsageReport, UsageRow

PAGE: Final = 1000
"""Events per ``read_all`` page when every session is read."""

_BY: Final = ("model", "agent", "session")


def register(commands: Commands) -> None:
    """Add the ``usage`` command."""
    text = "tokens, requests and cost per model, agent or session (each model response once)"
    command = commands.add(
        "usage", text, "agentjournal usage support-4711 --by agent --prices prices.yml"
    )
    command.add_argument(
        "session", nargs="?", help="the session id (default: every session in the store)"
    )
    command.add_argument(
        "--by",
        default="model",
        metavar="GROUP",
        help="one row per model, agent or session (default: model)",
    )
    command.add_argument(
        "--prices",
        metavar="FILE",
        help="prices of your own (YAML, USD per 1M tokens per model, or 'as: MODEL'; see "
        "docs/commands.md): they override the maintained table (genai-prices) and price "
        "the models it lacks (default: the maintained table alone)",
    )
    command.add_argument(
        "--branch",
        metavar="B",
        help="with SESSION: only the model responses of this line: 'main' (the session's "
        "own tree) or a branch's own streams, never its shared prefix (that usage is its "
        "parent's) (default: the session's tree)",
    )
    command.add_argument(
        "--json", action="store_true", help="print the report as JSON (default: a table)"
    )
    command.add_argument("--uri", help=STORE_HELP + "; never created")
    command.set_defaults(run=lambda args: asyncio.run(show_usage(args)))


async def show_usage(args: argparse.Namespace) -> int:
    """Print the usage report of one session or of every session.

    Raises:
        JournalError: The store or the session is missing or cannot be read, or the
            price table cannot be read (a usage error: 1).
    """
    from agentjournal.read.usage import Prices

    if args.by not in _BY:
        return usage(f"--by must be model, agent or session, not {args.by!r}")
    by = cast("Group", args.by)
    prices = Prices.load(args.prices) if args.prices is not None else Prices.default()
    if args.branch is not None and args.session is None:
        return usage("--branch needs a SESSION: a branch is a line of one session")
    if args.session is not None:
        report = await _one(args.uri, args.session, by, prices, args.branch)
        session = args.session
    else:
        report, session = await _every(args.uri, by, prices), None
    if args.json:
        print(json.dumps({"session": session, **report.as_dict()}, ensure_ascii=False))
        return 0
    _print(report, prices)
    return 0


async def _one(
    uri: str | None,
    session_id: str,
    by: Group,
    prices: Prices | None,
    branch: str | None = None,
) -> UsageReport:
    from agentjournal.cli._store import open_session
    from agentjournal.read.usage import usage_of
    from agentjournal.records import TreeRecords
    from agentjournal.streams import MAIN_BRANCH
    from agentjournal.walk import read_tree

    store, session_id = await open_session(uri, session_id)
    try:
        if branch is None or branch == MAIN_BRANCH:
            records = await read_tree(store, session_id)
        else:
            from agentjournal.read.lines import find_branch, line_records

            found = await find_branch(store, session_id, branch)
            records = TreeRecords(session_id, await line_records(store, session_id, found))
    finally:
        await store.close()
    return usage_of(records, by=by, prices=prices)


async def _every(uri: str | None, by: Group, prices: Prices | None) -> UsageReport:
    from agentjournal.cli._render import progress
    from agentjournal.read.usage import UsageFold
    from agentjournal.store import open_store, store_uri

    fold = UsageFold()
    store = await open_store(store_uri(uri), create=False)
    try:
        with progress("reading every session") as advance:
            position: int | None = None
            while True:
                # From the last position read, inclusive: a position the store gave out
                # (KurrentDB finds it without a scan; position + 1 may be none).
                page = await store.read_all(from_position=position, limit=PAGE)
                fresh = [e for e in page if position is None or e.position > position]
                if not fresh:
                    break
                fold.add_all(fresh)
                advance(len(fresh))
                position = fresh[-1].position
    finally:
        await store.close()
    return fold.report(by=by, prices=prices)


def _print(report: UsageReport, prices: Prices) -> None:
    from agentjournal.cli._render import console, table
    from agentjournal.read.usage import STAND_INS
    from agentjournal.read.views import UNNAMED

    columns = [report.by, "requests", "input", "cached", "output", "reasoning", "total"]
    if report.priced:
        columns.append("cost USD")
    rows = [_cells(row, report.priced, unnamed=UNNAMED) for row in report.rows]
    rows.append(_cells(report.total, report.priced, unnamed="total"))
    out = console()
    table(out, columns, rows)
    if report.by == "model":  # say which models were priced as another
        for row in report.rows:
            named = prices.priced_as.get(row.key or "") or STAND_INS.get(row.key or "")
            if named is not None and row.key not in prices.models:
                out.print(f"{row.key} is priced as {named}", markup=False, highlight=False)
    if report.legacy:
        out.print(
            f"{report.legacy} of these responses were counted from $usage (written before "
            "ModelResponded existed: a response that produced only a handoff is missing there)",
            markup=False,
        )


def _cells(row: UsageRow, priced: bool, *, unnamed: str) -> list[str]:
    counts = row.usage
    cells = [
        row.key if row.key is not None else unnamed,
        str(counts.requests),
        str(counts.input_tokens),
        str(counts.cached_input_tokens),
        str(counts.output_tokens),
        str(counts.reasoning_tokens),
        str(counts.total_tokens),
    ]
    if priced:
        cells.append(_usd(row.cost))
    return cells


def _usd(cost: Decimal | None) -> str:
    return "unknown" if cost is None else f"{cost:.6f}"
