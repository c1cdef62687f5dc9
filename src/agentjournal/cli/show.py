"""``agentjournal show SESSION``: a stored session tree, one line per event, where it happened."""

from __future__ import annotations

import argparse
import asyncio
import json

from agentjournal.cli._common import STORE_HELP, Commands

__all__ = ["register"]


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
        "--json", action="store_true", help="print the records as JSON (default: the tree as text)"
    )
    show.add_argument("--uri", help=STORE_HELP + "; never created")
    show.set_defaults(run=lambda args: asyncio.run(show_session(args)))


async def show_session(args: argparse.Namespace) -> int:
    """Print the session tree (a rich tree on a terminal, indented text in a pipe).

    Raises:
        InvalidInput: The session (or the ``--stream``) is not in the store (exit 1).
        JournalError: The store cannot be opened or read (exit 1).
    """
    from agentjournal._text import printable
    from agentjournal.cli._render import console
    from agentjournal.cli._store import open_session
    from agentjournal.errors import InvalidInput
    from agentjournal.records import read_tree
    from agentjournal.views import LEGEND, plain_lines, tree_view

    store, session_id = await open_session(args.uri, args.session)
    try:
        tree = await read_tree(store, session_id)
    finally:
        await store.close()
    if args.stream is not None and args.stream not in tree.streams:
        raise InvalidInput(
            f"session {session_id} has no stream {args.stream!r}: its streams are "
            + ", ".join(tree.streams)
        )
    if args.json:
        streams = [args.stream] if args.stream is not None else list(tree.streams)
        print(
            json.dumps(
                {
                    "session_id": session_id,
                    "streams": {
                        name: [r.as_dict() for r in tree.streams[name]] for name in streams
                    },
                },
                indent=2,
                ensure_ascii=False,
            )
        )
        return 0
    views = tree_view(tree, stream=args.stream)
    out = console()
    if not out.is_terminal:
        for text in plain_lines(views):
            out.print(text, markup=False, highlight=False)
        out.print(LEGEND, markup=False, highlight=False)
        return 0
    from rich.text import Text
    from rich.tree import Tree

    root = Tree(Text(f"session {session_id}", style="bold"))
    nodes: dict[int, Tree] = {}
    for view in views:
        parent = nodes.get(view.depth - 1, root) if view.depth else root
        node = parent.add(Text(printable(view.stream), style="bold cyan"))
        nodes[view.depth] = node
        for line in view.lines:
            styled = Text(f"@{line.revision:<3}", style="dim")
            styled.append(f"{line.kind:<28} ", style=_style(line.kind))
            styled.append(line.text)
            node.add(styled)
    out.print(root)
    out.print(Text(LEGEND, style="dim"))
    return 0


def _style(kind: str) -> str:
    if kind in ("GuardrailDecided", "AuthorityRefused"):
        return "yellow"
    if kind.startswith("Subagent"):
        return "magenta"
    if kind in ("ModelResponded", "Checkpoint"):
        return "green"
    return ""
