"""``agentjournal selfcheck [--uri URI]``: check an event store end to end."""

from __future__ import annotations

import asyncio
import os
import tempfile

from agentjournal.cli._common import Commands
from agentjournal.store import URI_ENV


def register(commands: Commands) -> None:
    """Add the ``selfcheck`` command."""
    text = "check an event store end to end"
    check = commands.add(
        "selfcheck", text, 'agentjournal selfcheck --uri "kurrentdb://127.0.0.1:2113?Tls=false"'
    )
    check.add_argument(
        "--uri",
        help=f"the store to check; writes a few events to new SelfCheck-* streams "
        f"(default: ${URI_ENV}, else a fresh temporary SQLite file)",
    )
    check.set_defaults(
        run=lambda args: asyncio.run(_selfcheck(args.uri or os.environ.get(URI_ENV)))
    )


async def _selfcheck(uri: str | None) -> int:
    from agentjournal._text import shown_uri
    from agentjournal.store import open_store
    from agentjournal.store.selfcheck import run_selfcheck

    with tempfile.TemporaryDirectory(prefix="agentjournal-selfcheck-") as directory:
        target = uri or f"sqlite:///{os.path.join(directory, 'selfcheck.db')}"
        print(f"agentjournal selfcheck on {shown_uri(target)}")
        store = await open_store(target)
        try:
            ok = await run_selfcheck(store, print)
        finally:
            await store.close()
    print("OK" if ok else "FAILED")
    return 0 if ok else 2
