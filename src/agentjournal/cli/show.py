"""``agentjournal show SESSION``: a stored session tree, one line per event, where it happened."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from agentjournal.cli._common import STORE_HELP, Commands, add_keys_argument

if TYPE_CHECKING:
    from agentjournal.engine.fork import Branch
    from agentjournal.read.evals.scores import SessionScores
    from agentjournal.read.views import StreamView
    from agentjournal.records import Record, TreeRecords
    from agentjournal.shred.keys import SubjectKeyStore
    from agentjournal.store.contract import EventStore


def register(commands: Commands) -> None:
    """Add the ``show`` command."""
    text = "show a session tree: every event of every stream, subsessions nested"
    show = commands.add("show", text, "agentjournal show support-4711")
    show.add_argument("session", help="the session id")
    show.add_argument(
        "--stream",
        metavar="STREAM",
        help="only this stream of the tree, e.g. a subsession (default: every stream)",
    )
    show.add_argument(
        "--branch",
        metavar="B",
        help="only this line: 'main' (the session's own tree) or a branch made by "
        "`agentjournal fork`, whose shared prefix is summarised, not repeated (default: "
        "main's tree, then every branch under a header naming its parent and cut)",
    )
    show.add_argument(
        "--pubkey",
        metavar="KEY",
        action="append",
        default=[],
        help="a trusted Ed25519 public key (a file or the key itself; repeat for several): the "
        "last line names the session's integrity as `verify` does, checked against these and "
        "the configured signing key (default: none)",
    )
    show.add_argument(
        "--json", action="store_true", help="print the records as JSON (default: the tree as text)"
    )
    add_keys_argument(show)
    show.add_argument("--uri", help=STORE_HELP + "; never created")
    show.set_defaults(run=lambda args: asyncio.run(show_session(args)))


async def show_session(args: argparse.Namespace) -> int:
    """Print the session tree (a rich tree on a terminal, indented text in a pipe).

    Raises:
        InvalidInput: The session (or the ``--stream``) is not in the store (exit 1).
        JournalError: The store cannot be opened or read (exit 1).
    """
    from agentjournal.audit.verify import verify_records
    from agentjournal.cli._common import key_file, trusted_with_own
    from agentjournal.cli._render import console
    from agentjournal.cli._store import open_session, reading_keys
    from agentjournal.errors import InvalidInput
    from agentjournal.read.replay import check_read_model
    from agentjournal.read.views import LEGEND, plain_lines, tree_view
    from agentjournal.records import TreeRecords
    from agentjournal.shred.sealing import shown_streams, shown_tree
    from agentjournal.streams import MAIN_BRANCH, session_stream
    from agentjournal.walk import read_tree

    keys = trusted_with_own(args.pubkey)
    subject_keys = reading_keys(key_file(args))
    try:
        store, session_id = await open_session(args.uri, args.session)
        try:
            tree = await read_tree(store, session_id)
            lines = await _lines(store, session_id, args.branch)
            model = await check_read_model(store, session_id)
            scores = await _scores(store, session_id, args, subject_keys)
        finally:
            await store.close()
        # The whole tree, every line, as `verify` checks it (the records are already read):
        # the stored bytes, which the chains cover; then shown with sealed content opened.
        report = verify_records(tree, keys)
        tree = shown_tree(tree, subject_keys)
        lines = [(branch, shown_streams(streams, subject_keys)) for branch, streams in lines]
    finally:
        subject_keys.close()
    report.model_checked(model, session_stream(session_id))
    integrity = report.integrity
    only_main = args.branch == MAIN_BRANCH
    if args.branch is not None and not only_main:
        tree = TreeRecords(session_id, {})  # only the branch's own streams are shown
    known = [*tree.streams, *(name for _, streams in lines for name in streams)]
    if args.stream is not None and args.stream not in known:
        raise InvalidInput(
            f"session {session_id} has no stream {args.stream!r}: its streams are "
            + ", ".join(known)
        )
    if args.json:
        data = {**_json(session_id, tree, lines, args.stream), "integrity": integrity.as_dict()}
        if scores is not None:
            data["scores"] = scores.as_dict()
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    shown = tree.streams and (args.stream is None or args.stream in tree.streams)
    main_views = tree_view(tree, stream=args.stream) if shown else []
    branch_views = [
        (branch, _branch_views(session_id, branch, streams, args.stream))
        for branch, streams in lines
        if args.stream is None or args.stream in streams
    ]
    out = console()
    if not out.is_terminal:
        for text in plain_lines(main_views):
            out.print(text, markup=False, highlight=False)
        for branch, views_of in branch_views:
            out.print(_header(branch), markup=False, highlight=False)
            for text in plain_lines(views_of):
                out.print("  " + text, markup=False, highlight=False)
        for text in _score_texts(scores):
            out.print(text, markup=False, highlight=False)
        out.print(LEGEND, markup=False, highlight=False)
        out.print(f"integrity: {integrity.text()}", markup=False, highlight=False)
        return 0
    from rich.text import Text
    from rich.tree import Tree

    root = Tree(Text(f"session {session_id}", style="bold"))
    _add(root, main_views)
    for branch, views_of in branch_views:
        _add(root.add(Text(_header(branch), style="bold yellow")), views_of)
    texts = _score_texts(scores)
    if texts:
        node = root.add(Text(texts[0], style="bold green"))
        run = node
        for text in texts[1:]:
            if text.startswith("  "):  # a score, under its run
                run.add(Text(text.strip()))
            else:
                run = node.add(Text(text, style="dim"))
    out.print(root)
    out.print(Text(LEGEND, style="dim"))
    out.print(Text(f"integrity: {integrity.text()}", style=_STATE_STYLES[integrity.state]))
    return 0


_STATE_STYLES: Final = {
    "verified": "green",
    "untrusted": "yellow",
    "unsigned": "yellow",
    "failed": "bold red",
}
"""How each integrity state looks on a terminal."""


async def _scores(
    store: EventStore, session_id: str, args: argparse.Namespace, keys: SubjectKeyStore
) -> SessionScores | None:
    """The session's scores from every eval run, of the lines shown (None: ``--stream``
    shows one stream only)."""
    from agentjournal.read.evals.scores import session_scores

    if args.stream is not None:
        return None
    lines = None if args.branch is None else [args.branch]
    return await session_scores(store, session_id, keys=keys, lines=lines)


def _score_texts(scores: SessionScores | None) -> list[str]:
    """The scores' heading and lines (none when nothing scored the lines shown)."""
    from agentjournal.read.evals.scores import SCORES_HEADER, score_lines

    if scores is None or not scores.runs:
        return []
    return [SCORES_HEADER, *score_lines(scores)]


async def _lines(
    store: EventStore, session_id: str, branch: str | None
) -> list[tuple[Branch, dict[str, list[Record]]]]:
    """The branches to show with their own streams: every one (None), the one named, or
    none (``main``)."""
    from agentjournal.engine.fork import read_branches
    from agentjournal.read.lines import find_branch, line_records
    from agentjournal.streams import MAIN_BRANCH

    if branch == MAIN_BRANCH:
        return []
    if branch is not None:
        chosen = [await find_branch(store, session_id, branch)]
    else:
        chosen = await read_branches(store, session_id)
    return [(one, await line_records(store, session_id, one)) for one in chosen]


def _header(branch: Branch) -> str:
    """A branch's header line: its name, parent, cut, base and shared prefix."""
    from agentjournal._text import printable

    cut = branch.cut
    where = cut.text()
    gone = f" [{branch.deleted}]" if branch.deleted is not None else ""
    return printable(
        f"\u2442 branch {branch.name!r}{gone} \u2190 {branch.parent} {where}: shares "
        f"{branch.prefix_items} items with {branch.parent} (not repeated), own items "
        f"from #{branch.next_index}"
    )


def _branch_views(
    session_id: str, branch: Branch, streams: dict[str, list[Record]], stream: str | None
) -> list[StreamView]:
    from agentjournal.read.views import tree_view
    from agentjournal.records import TreeRecords

    return tree_view(
        TreeRecords(session_id, streams),
        stream=stream,
        logs=False,
        root=branch.stream,
    )


def _json(
    session_id: str,
    tree: TreeRecords,
    lines: list[tuple[Branch, dict[str, list[Record]]]],
    stream: str | None,
) -> dict[str, Any]:
    def records(streams: Mapping[str, Sequence[Record]]) -> dict[str, Any]:
        names = [name for name in streams if stream is None or name == stream]
        return {name: [r.as_dict() for r in streams[name]] for name in names}

    return {
        "session_id": session_id,
        "streams": records(tree.streams),
        "branches": [
            {
                "name": branch.name,
                "stream": branch.stream,
                "parent": branch.parent,
                "cut": branch.cut.to_json(),
                "next_index": branch.next_index,
                "prefix_items": branch.prefix_items,
                "created": branch.created.isoformat(),
                "deleted": branch.deleted,
                "streams": records(streams),
            }
            for branch, streams in lines
        ],
    }


def _add(root: Any, views: Sequence[StreamView]) -> None:
    """Add the views to a rich tree, subsessions under the stream that opened them."""
    from rich.text import Text

    from agentjournal._text import printable
    from agentjournal.cli._render import TONE_STYLES

    nodes: dict[int, Any] = {}
    for view in views:
        parent = nodes.get(view.depth - 1, root) if view.depth else root
        node = parent.add(Text(printable(view.stream), style="bold cyan"))
        nodes[view.depth] = node
        for line in view.lines:
            styled = Text()  # a Text's own style would underlie every span: only @N is dim
            styled.append(f"@{line.revision:<3}", style="dim")
            tone = TONE_STYLES.get(line.tone, "")
            styled.append(f"{line.kind:<28} ", style=tone or _style(line.kind))
            styled.append(line.text, style=tone)
            node.add(styled)


def _style(kind: str) -> str:
    if kind.startswith("Branch"):
        return "yellow"
    if kind.startswith("Subagent"):
        return "magenta"
    if kind in ("ModelResponded", "Checkpoint"):
        return "cyan"
    return ""
