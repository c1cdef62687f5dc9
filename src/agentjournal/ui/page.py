"""The viewer's pages: what a session or the sessions list shows, as data and as HTML.

:func:`session_page` gathers one session from the read side — its tree
(:func:`~agentjournal.walk.read_tree`), its verification report
(:func:`~agentjournal.audit.verify.verify_records`), its flat history
(:func:`~agentjournal.read.replay.replay`, :func:`~agentjournal.read.replay.history_before`)
and its usage (:func:`~agentjournal.read.usage.usage_of`) — and :func:`session_data` (pure)
turns those into the JSON the page draws: a lane per agent, every event with the
line :func:`~agentjournal.read.views.describe_record` gives it and its exact stored record,
a before/after diff for each guardrail MODIFY, and the first failing position of the
report. :func:`render` wraps page data in HTML: linked assets for the server, or every
asset inline for a file that opens from ``file://`` with no network.

Escaping: no stored value is ever written into markup here. The data rides in a
``<script type="application/json">`` block with ``<``, ``>`` and ``&`` escaped as
JSON ``\\u`` escapes (so no value can close the block), and the script writes every
value with ``textContent``. What the HTML itself holds (a title, an id) goes
through :func:`html.escape`.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import html
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from importlib import resources
from typing import TYPE_CHECKING, Any, Final, Literal

from agentjournal import events
from agentjournal.errors import InvalidInput
from agentjournal.read.views import LEGEND, describe_record, tree_view
from agentjournal.records import DamagedEvent, Record, TreeRecords
from agentjournal.streams import (
    KEYS_STREAM,
    MAIN_BRANCH,
    authority_stream,
    ledger_stream,
    session_stream,
)
from agentjournal.ui import console
from agentjournal.walk import read_tree

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentjournal.audit.verify import Report
    from agentjournal.engine.fork import Branch
    from agentjournal.read.catalog import SessionRow
    from agentjournal.read.catalog.query import ListQuery
    from agentjournal.shred.keys import SubjectKeyStore
    from agentjournal.shred.sealing import OpeningStore
    from agentjournal.store.contract import EventStore

Kind = Literal["session", "sessions"]

STYLES: Final = ("ui.css", "evals.css")
SCRIPTS: Final = ("evals.js", "ui.js")
"""The page's assets, in order: ``evals.js`` (eval scores and runs) before the script
that draws the page and calls it."""

MAX_EXPORTED_HISTORIES: Final = 500
"""A one-file export carries the history before each of at most this many items."""


def asset(name: str) -> str:
    """The text of a shipped asset (``ui.css``, ``ui.js``) from ``agentjournal/ui/static``.

    Raises:
        FileNotFoundError: There is no such asset.
    """
    return resources.files("agentjournal.ui").joinpath("static", name).read_text("utf-8")


async def session_page(
    store: EventStore,
    session_id: str,
    keys: Mapping[str, Ed25519PublicKey],
    *,
    at: int | None = None,
    every_history: bool = False,
    branch: str | None = None,
    subject_keys: SubjectKeyStore | None = None,
) -> dict[str, Any]:
    """Read one session and return its page data (see :func:`session_data`).

    The tree is verified as stored; everything the page shows of it has its sealed
    content opened under ``subject_keys`` (``[erased]`` once its subject was erased), or
    marked ``[sealed]`` without them (:func:`~agentjournal.shred.sealing.shown_record`).

    With ``branch`` (a name from ``agentjournal fork``), the page shows that line: its
    own streams on the timeline, its items (prefix included) on the Replay tab, its own
    model responses as usage; the integrity tab is the session's report (the verifier
    checks every line).

    Args:
        store: The store to read (nothing is written).
        session_id: The session.
        keys: The trusted public keys the ledger is verified against.
        at: Open the Replay tab at the history just before item ``#at``.
        every_history: Also carry the history before every item (a one-file export,
            which cannot ask a server), up to :data:`MAX_EXPORTED_HISTORIES` items.
        branch: The line to show (None or ``"main"``: the session itself).
        subject_keys: The key store sealed content is shown with (default: none).

    Raises:
        InvalidInput: The session or the branch does not exist, or the line has no
            item ``at``.
        StoreUnavailable: The store could not be read.
    """
    from agentjournal.audit.verify import Report, verify_records
    from agentjournal.read.replay import check_read_model, history_before, replay

    # The position first: an event written while the page is read is announced after it.
    position = await last_position(store)
    try:
        tree = await read_tree(store, session_id)
    except DamagedEvent as bad:
        report = Report()
        report.fail("integrity", bad.stream, bad.revision, bad.message)
        return session_data(TreeRecords(session_id, {}), report, [], None, position=position)
    report = verify_records(tree, keys)
    # Every check `verify` makes: the read model `get_items` answers from, too.
    report.model_checked(await check_read_model(store, session_id), session_stream(session_id))
    from agentjournal.engine.fork import read_branches
    from agentjournal.shred.keys import MemoryKeyStore
    from agentjournal.shred.sealing import OpeningStore, shown_tree

    opener = subject_keys if subject_keys is not None else MemoryKeyStore()
    tree = shown_tree(tree, opener)
    shown = OpeningStore(store, opener, shown=True)
    branches = await read_branches(store, session_id)
    if branch is not None and branch != MAIN_BRANCH:
        return await _branch_page(
            store,
            shown,
            tree,
            report,
            branches,
            branch,
            at=at,
            every_history=every_history,
            position=position,
        )
    current = await replay(shown, session_id)
    main = main_line(tree)
    histories: dict[int, list[dict[str, Any]]] = {}
    if at is not None:
        histories[at] = history_before(tree, at)
    if every_history:
        for index in _item_indexes(main)[:MAX_EXPORTED_HISTORIES]:
            histories.setdefault(index, history_before(tree, index))
    data = session_data(
        main,
        report,
        current,
        _usage(main),
        position=position,
        histories=histories,
        at=at,
        branches=branches,
    )
    data["approvals"] = await pending_approvals(shown, session_id)
    return data


async def _branch_page(
    store: EventStore,
    shown: OpeningStore,
    main: TreeRecords,
    report: Report,
    branches: Sequence[Branch],
    name: str,
    *,
    at: int | None,
    every_history: bool,
    position: int,
) -> dict[str, Any]:
    """A branch line's page data (see :func:`session_page`): its records read as stored,
    shown with ``shown``'s keys; its items read through ``shown``."""
    from agentjournal.read.lines import find_branch, line_indexes, line_records, line_replay
    from agentjournal.shred.sealing import shown_streams

    session_id = main.session_id
    found = await find_branch(store, session_id, name)
    own = await line_records(store, session_id, found)
    tree = TreeRecords(session_id, shown_streams(own, shown.keys))
    current = await line_replay(shown, session_id, name)
    indexes = await line_indexes(store, session_id, found)
    histories: dict[int, list[dict[str, Any]]] = {}
    if at is not None:
        histories[at] = await line_replay(shown, session_id, name, at=at)
    if every_history:
        for index in indexes[:MAX_EXPORTED_HISTORIES]:
            if index not in histories:
                histories[index] = await line_replay(shown, session_id, name, at=index)
    data = session_data(
        tree,
        report,
        current,
        _usage(tree),
        position=position,
        histories=histories,
        at=at,
        branches=branches,
        line=found,
    )
    data["replay"]["indexes"] = indexes
    data["approvals"] = await pending_approvals(shown, session_id, found)
    from agentjournal.ui.compare import compare_lines

    # The line beside its parent, from the fork: what a saved copy's Compare tab shows.
    data["compare"] = await compare_lines(shown, session_id, found.parent, found.name)
    main_header = _header(main)
    data["header"].update({k: main_header[k] for k in ("app", "user", "agent")})
    return data


async def pending_approvals(
    store: EventStore, session_id: str, branch: Branch | None = None
) -> list[dict[str, Any]]:
    """The approvals that wait for an answer on a line (``branch`` None: main), oldest
    first, read as ``session.pending_approvals()`` reads them (the engine's read of the
    line's followed streams: its top stream's and its open subagents', neither answered
    nor run; a question of a subagent that has ended waits no more), as the page's panel
    shows them."""
    from agentjournal.read.approvals import line_pending

    name, stream = (branch.name, branch.stream) if branch is not None else (None, None)
    return [
        {
            "request_id": a.request_id,
            "agent": a.agent,
            "tool": a.tool_name,
            "arguments": a.arguments,
            "asked_at": a.issued_at.isoformat(),
            "stream": a.stream,
            "revision": a.revision,
        }
        for a in await line_pending(store, session_id, branch=name, stream=stream)
    ]


def main_line(tree: TreeRecords) -> TreeRecords:
    """The main line of a session tree (pure): its top stream, the subsessions opened on it
    at any depth, its authority log and its ledger — not the branches' streams, which a
    session's tree holds too (each branch has its own page)."""
    keep = {tree.session_stream, authority_stream(tree.session_id), ledger_stream(tree.session_id)}
    if KEYS_STREAM in tree.streams:
        keep.add(KEYS_STREAM)
    pending = [tree.session_stream]
    while pending:
        for record in tree.streams.get(pending.pop(), ()):
            child = record.opens
            if child is not None and child not in keep:
                keep.add(child)
                pending.append(child)
    return TreeRecords(tree.session_id, {n: r for n, r in tree.streams.items() if n in keep})


def _line(branch: Branch) -> dict[str, Any]:
    """A branch as the page's line selector and header show it."""

    cut = branch.cut
    where = cut.text()
    return {
        "name": branch.name,
        "stream": branch.stream,
        "parent": branch.parent,
        "cut": cut.to_json(),
        "where": where,
        "prefix_items": branch.prefix_items,
        "next_index": branch.next_index,
        "deleted": branch.deleted,
    }


async def last_position(store: EventStore) -> int:
    """The store's last global position (0 when empty): an append of no events reports it
    and writes nothing."""
    from agentjournal.store.contract import StreamState

    return (await store.append(KEYS_STREAM, [], expected=StreamState.ANY)).position


def _usage(tree: TreeRecords) -> dict[str, Any] | None:
    """The line's usage by agent and by model, priced from the maintained table; None
    when no model response was recorded."""
    from agentjournal.read.usage import Prices, usage_of

    if not any(r.type == events.MODEL_RESPONDED for r in tree.records()):
        return None
    prices = Prices.default()
    return {
        "agent": usage_of(tree, by="agent", prices=prices).as_dict(),
        "model": usage_of(tree, by="model", prices=prices).as_dict(),
    }


def _item_indexes(tree: TreeRecords) -> list[int]:
    found: set[int] = set()
    for record in tree.records():
        index = record.metadata.get(events.INDEX_KEY)
        # An item: anything with a message index but a subagent's close and the twin
        # of its opening (the parent copy of SubagentStarted is the handoff item).
        if index is None or not index.isdigit() or record.type == events.SUBAGENT_COMPLETED:
            continue
        if record.type != events.SUBAGENT_STARTED or record.opens is not None:
            found.add(int(index))
    return sorted(found)


def session_data(
    tree: TreeRecords,
    report: Report,
    history: Sequence[Mapping[str, Any]],
    usage: Mapping[str, Any] | None,
    *,
    position: int | None = None,
    histories: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
    at: int | None = None,
    branches: Sequence[Branch] = (),
    line: Branch | None = None,
) -> dict[str, Any]:
    """The session page's data (pure): header, handoff tree, lanes, events, report, history.

    Args:
        tree: The session tree as read.
        report: Its verification report.
        history: The flat history as ``get_items()`` returns it now.
        usage: ``{"agent": ..., "model": ...}``, each ``UsageReport.as_dict()`` (priced),
            or None when nothing was counted.
        position: The store's last position when the tree was read (live pages follow
            from there).
        histories: The history before item ``#N``, for each N given.
        at: The item the Replay tab opens at.
        branches: The session's branches (the page's line selector).
        line: The branch shown (``tree`` then holds its own streams); None: main.
    """
    logs = {ledger_stream(tree.session_id), KEYS_STREAM}
    agents = _stream_agents(tree, None if line is None else line.stream)
    # The first failure marks its event (a missing trusted key is no event's fault).
    first = next((p for p in report.problems if not p.untrusted), None)
    lanes: list[str] = []
    rows: list[dict[str, Any]] = []
    records = [r for name, stream in tree.streams.items() if name not in logs for r in stream]
    # Commit order across streams; a record without a position keeps its stream order.
    records.sort(key=lambda r: (r.position is None, r.position or 0))
    authority = authority_stream(tree.session_id)
    for record in records:
        agent = _agent_of(record, agents, authority)
        if agent not in lanes:
            lanes.append(agent)
        rows.append(_event(record, agent, lanes.index(agent), first, authority))
    root = tree.session_stream if line is None else line.stream
    views = tree_view(tree, logs=False, root=root) if root in tree.streams else []
    for row, record in zip(rows, records, strict=True):
        row["said"] = console.said(record)
    header = _header(tree)
    return {
        "kind": "session",
        "session_id": tree.session_id,
        "header": header,
        "branch": _line(line) if line is not None else None,
        "branches": [_line(branch) for branch in branches],
        "position": position,
        "lanes": lanes,
        "tree": [
            {
                "stream": v.stream,
                "depth": v.depth,
                "agent": agents.get(v.stream, "?"),
                "events": len(v.lines),
            }
            for v in views
        ],
        "events": rows,
        "conversation": console.conversation(records, agents, root),
        "waterfall": console.waterfall(records, agents),
        "checkpoints": [
            {"revision": r.revision, "text": describe_record(r), "record": r.as_dict()}
            for r in tree.streams.get(ledger_stream(tree.session_id), ())
        ],
        "integrity": {
            "ok": report.ok,
            **report.integrity.as_dict(),
            "checked_at": datetime.now(UTC).isoformat(),
            "lines": list(report.lines),
            "problems": [
                {
                    "check": p.check,
                    "stream": p.stream,
                    "revision": p.revision,
                    "message": p.message,
                    "text": str(p),
                    "untrusted": p.untrusted,
                }
                for p in report.problems
            ],
            "report": report.text(),
        },
        "replay": {
            "current": list(history),
            "indexes": _item_indexes(tree),
            "histories": {str(k): list(v) for k, v in (histories or {}).items()},
            "at": at,
        },
        "usage": usage,
        "legend": LEGEND,
        # The line's pending approvals (session_page reads them); whether this page may
        # answer them (the viewer sets it when it runs with a token).
        "approvals": [],
        "decide": False,
    }


def _header(tree: TreeRecords) -> dict[str, Any]:
    started = next(
        (r for r in tree.streams.get(tree.session_stream, ()) if r.type == events.SESSION_STARTED),
        None,
    )
    body = started.body if started is not None else None
    body = body if isinstance(body, dict) else {}
    times = [r.recorded_at for r in tree.records() if r.recorded_at is not None]
    return {
        "app": _text(body.get("app_name")),
        "user": _text(body.get("user_id")),
        "agent": _text(body.get("agent_name")),
        "first": min(times).isoformat() if times else None,
        "last": max(times).isoformat() if times else None,
        "streams": len(tree.streams),
        "events": sum(len(s) for s in tree.streams.values()),
    }


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _stream_agents(tree: TreeRecords, root: str | None = None) -> dict[str, str]:
    """Stream -> the agent speaking there: the session's first agent (a branch line's:
    the first its top stream ``root`` names), then each subsession's receiver (its
    ``SubagentStarted`` twin names the agent type)."""
    agents: dict[str, str] = {}
    header = _header(tree)
    top = root or tree.session_stream
    agents[top] = header["agent"] or _first_agent(tree, top) or "session"
    for stream in tree.streams.values():
        for record in stream:
            # A subsession's opening names its receiver; a continuation's first event
            # (a subagent open at a fork, going on on the branch) names it too.
            child = record.opens
            if child is None and record.type == events.SUBAGENT_CONTINUED:
                child = record.stream
            body = record.body
            if child is not None and isinstance(body, dict):
                name = body.get("agent_type") or body.get("agent_id")
                agents[child] = name if isinstance(name, str) and name else child
    agents.setdefault(authority_stream(tree.session_id), "authority")
    return agents


def _first_agent(tree: TreeRecords, top: str) -> str | None:
    """The top stream's agent when ``SessionStarted`` names none: the first agent an
    event of that stream names (a decision, a response, a grant, a handoff's sender)."""
    for record in tree.streams.get(top, ()):
        body = record.body if isinstance(record.body, dict) else {}
        extensions = body.get("extensions")
        openai = extensions.get("openai") if isinstance(extensions, dict) else None
        named = body.get("agent") or (
            openai.get("source_agent") if isinstance(openai, dict) else None
        )
        if isinstance(named, str) and named:
            return named
    return None


def _agent_of(record: Record, agents: Mapping[str, str], authority: str) -> str:
    """The lane of an event: its stream's agent; an authority log entry's own agent."""
    if record.stream == authority:
        body = record.body
        named = body.get("agent") if isinstance(body, dict) else None
        if isinstance(named, str) and named:
            return named
    return agents.get(record.stream, record.stream)


def _event(record: Record, agent: str, lane: int, first: Any, authority: str) -> dict[str, Any]:
    body = record.body if isinstance(record.body, dict) else {}
    log = "authority log " if record.stream == authority else ""
    event: dict[str, Any] = {
        "stream": record.stream,
        "revision": record.revision,
        "where": f"{log}@{record.revision}",
        "position": record.position,
        "kind": record.type.removeprefix("agentjournal."),
        "text": describe_record(record),
        "agent": agent,
        "lane": lane,
        "index": record.metadata.get(events.INDEX_KEY),
        "record": record.as_dict(),
        "failed": first is not None
        and first.stream == record.stream
        and (first.revision is None or first.revision == record.revision),
    }
    if record.type == events.GUARDRAIL_DECIDED:
        event["decision"] = _text(body.get("decision"))
        if body.get("modified_payload") is not None:
            event["diff"] = _diff(body.get("payload"), body.get("modified_payload"))
    elif record.type == events.AUTHORITY_REFUSED:
        event["decision"] = "REFUSED"
    elif record.type == events.SUBAGENT_COMPLETED:
        event["decision"] = _text(body.get("outcome")).upper()
    elif events.INTERRUPT_KEY in record.metadata:
        # A person's approval: asked, then approved or rejected.
        outcome = body.get("outcome") if record.type == events.INTERRUPT_RESOLVED else "asked"
        event["decision"] = _text(outcome).upper()
    return event


def _readable(value: Any) -> Any:
    """A payload with JSON text inside it (tool call arguments) opened up, so a diff
    shows which field changed rather than one long line."""
    if isinstance(value, dict):
        return {k: _readable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_readable(v) for v in value]
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return _readable(json.loads(value))
        except ValueError:
            return value
    return value


def _diff(before: Any, after: Any) -> list[list[str]]:
    """A line diff of two payloads: ``[op, line]`` with op ``" "``, ``"-"`` or ``"+"``."""

    def lines(value: Any) -> list[str]:
        return json.dumps(_readable(value), indent=2, ensure_ascii=False, sort_keys=True).split(
            "\n"
        )

    out: list[list[str]] = []
    for line in difflib.ndiff(lines(before), lines(after)):
        op = line[:1]
        if op in (" ", "-", "+"):
            out.append([op, line[2:]])
    return out


def sessions_data(
    rows: Sequence[SessionRow],
    query: ListQuery | None = None,
    *,
    position: int | None,
    warning: str | None = None,
    checked: Mapping[str, Mapping[str, Any]] | None = None,
    content: Callable[[str], set[str]] | None = None,
) -> dict[str, Any]:
    """The sessions list's data: one page of the catalog's rows (pure).

    ``checked`` holds the full checks of session pages viewed since (their ``integrity``):
    one that FAILED replaces the catalog's cheaper check of that session, before the
    rows are filtered and sorted, so the list never shows (nor finds, nor sorts) a
    session as sound whose page says it is not. ``content`` answers ``q`` from the
    content index (:func:`~agentjournal.read.catalog.query.page_of`).
    """
    from agentjournal.read.catalog.query import ListQuery, page_of

    query = query or ListQuery()
    found = page_of(fully_checked(rows, checked or {}), query, content=content)
    return {
        "kind": "sessions",
        "position": position,
        "rows": [row.as_dict() for row in found.rows],
        "total": found.total,
        "offset": found.offset,
        "limit": found.limit,
        "sessions": found.sessions,
        "query": query.as_params(),
        "choices": found.choices,
        "warning": warning,
    }


def fully_checked(
    rows: Sequence[SessionRow], checked: Mapping[str, Mapping[str, Any]]
) -> Sequence[SessionRow]:
    """``rows``, each session whose page's full check FAILED with that check's integrity —
    unless the session has written since that check (its run went on, a checkpoint came):
    then the row's own check stands again, until its page is served again."""
    if not any(full.get("state") == "failed" for full in checked.values()):
        return rows
    from dataclasses import replace

    from agentjournal.ledger.integrity import Integrity

    out = []
    for row in rows:
        full = checked.get(row.session_id)
        if (
            full is not None
            and full.get("state") == "failed"
            and row.last_activity <= datetime.fromisoformat(full["checked_at"])
        ):
            row = replace(
                row,
                integrity=Integrity("failed", tuple(full["keys"]), full["problem"]),
                checked_at=datetime.fromisoformat(full["checked_at"]),
            )
        out.append(row)
    return out


def _embedded(data: Mapping[str, Any]) -> str:
    # Inside <script type="application/json"> only "</script" could end the block:
    # escaping <, > and & as JSON \u escapes keeps every value inert and the JSON intact.
    text = json.dumps(data, ensure_ascii=False, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def render(
    data: Mapping[str, Any], *, inline: bool = False, live: bool = False, title: str = ""
) -> str:
    """A page as HTML: the data embedded, the assets linked (``/static/…``) or inline.

    Args:
        data: :func:`session_data` or :func:`sessions_data`.
        inline: Put the CSS and the script in the page (a file that opens from
            ``file://``), under a Content-Security-Policy that allows exactly those
            two and nothing from any network.
        live: The page follows the store (server-sent events from the server).
        title: The page's title (escaped here).
    """
    heading = title or (
        f"session {data.get('session_id', '')}" if data.get("kind") == "session" else "sessions"
    )
    head = [
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(heading)} · agentjournal</title>",
    ]
    if inline:
        css = "".join(asset(name) for name in STYLES)
        script = "".join(asset(name) for name in SCRIPTS)
        policy = (
            f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(css)}; "
            "img-src data:; base-uri 'none'; form-action 'none'"
        )
        head.insert(1, f'<meta http-equiv="Content-Security-Policy" content="{policy}">')
        head.append(f"<style>{css}</style>")
        tail = f"<script>{script}</script>"
    else:
        head.extend(f'<link rel="stylesheet" href="/static/{name}">' for name in STYLES)
        head.append('<link rel="icon" href="data:,">')
        tail = "".join(f'<script src="/static/{name}"></script>' for name in SCRIPTS)
    mode = "live" if live else ("file" if inline else "static")
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n'
        + "\n".join(head)
        + f'\n</head>\n<body data-mode="{mode}">\n'
        + f'<header class="top"><a class="brand" href="{"/" if not inline else "#"}">'
        + 'agentjournal</a><h1 id="title">'
        + html.escape(heading)
        + '</h1><span id="status"></span></header>\n<main id="app"></main>\n'
        + '<script type="application/json" id="aj-data">'
        + _embedded(data)
        + "</script>\n"
        + tail
        + "\n</body>\n</html>\n"
    )


def waiting(message: str) -> str:
    """A plain page saying what the viewer is still doing; it loads itself again in 2 s."""
    return (
        '<!doctype html>\n<html lang="en">\n<head><meta charset="utf-8">'
        '<meta http-equiv="refresh" content="2">'
        '<link rel="stylesheet" href="/static/ui.css"><link rel="icon" href="data:,">'
        "<title>reading the store · agentjournal</title></head>\n<body>"
        '<header class="top"><a class="brand" href="/">agentjournal</a>'
        f'<h1>sessions</h1></header><main><p class="missing" id="warming">{html.escape(message)}'
        "</p></main></body>\n</html>\n"
    )


def not_found(message: str, *, title: str = "not found") -> str:
    """A plain page saying what was not found, or what was wrong (escaped)."""
    heading = html.escape(title)
    return (
        '<!doctype html>\n<html lang="en">\n<head><meta charset="utf-8">'
        '<link rel="stylesheet" href="/static/ui.css"><link rel="icon" href="data:,">'
        f"<title>{heading} · agentjournal</title></head>\n<body>"
        '<header class="top"><a class="brand" href="/">agentjournal</a>'
        f'<h1>{heading}</h1></header><main><p class="missing">{html.escape(message)}</p>'
        '<p><a href="/">all sessions</a></p></main></body>\n</html>\n'
    )


def check_at(value: int | None) -> None:
    """Refuse a negative ``--at``.

    Raises:
        InvalidInput: It is negative.
    """
    if value is not None and value < 0:
        raise InvalidInput(f"--at must be 0 or more, got {value}")
