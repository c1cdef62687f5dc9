"""An erasure in a process of its own, to kill: ``python tests/erase_worker.py URI KEYS
SUBJECT [DIE_AT]``.

Opens the journal at URI with the embedded key store at KEYS (and the signing key in
``$ERASE_WORKER_SIGNING_KEY``, a key file, when set), prints ``ready`` and waits for a
line on stdin, then runs ``journal.erase(subject=SUBJECT, ...)`` and prints its sessions
as one JSON line. The parent (``tests/test_shred_kill.py``) either SIGKILLs it from
outside after a delay, or names DIE_AT, a point where the worker SIGKILLs itself:

- ``before-destroy``: before the key store is asked to destroy the subject's keys;
- ``after-destroy``: right after the keys are destroyed, before anything is written;
- ``after-erased:K``: right after the K-th ``agentjournal.SubjectErased`` was appended
  (before its session's checkpoint, with a signing key);
- ``before-purge``: after every session was told, before the store purges its copies.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from agentjournal import Journal
from agentjournal.ledger import SigningKey

SIGNING_KEY = "ERASE_WORKER_SIGNING_KEY"
REASON = "GDPR art. 17, request 31"
BY = "dpo@example.com"


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def dying_after_erased(append: Callable[..., Awaitable[Any]], at: int) -> Callable[..., Any]:
    """``append`` (a store's ``append`` or ``append_many``) that kills the process right
    after the ``at``-th ``SubjectErased`` it appended."""
    seen = 0

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        nonlocal seen
        result = await append(*args, **kwargs)
        requests = args[0] if len(args) == 1 else [args[1]]
        events = [e for r in requests for e in getattr(r, "events", r)]
        seen += sum(1 for e in events if e.type == "agentjournal.SubjectErased")
        if seen >= at:
            die()
        return result

    return wrapped


def arm(journal: Journal, die_at: str) -> None:
    """Make ``journal`` kill this process at ``die_at`` (see the module docs)."""
    store: Any = journal.store
    keys: Any = journal.keys
    if die_at in ("before-destroy", "after-destroy"):
        destroy = keys.destroy

        def destroying(subject: str) -> list[str]:
            if die_at == "before-destroy":
                die()
            ids: list[str] = destroy(subject)
            die()
            return ids

        keys.destroy = destroying
    elif die_at.startswith("after-erased:"):
        at = int(die_at.split(":")[1])
        store.append = dying_after_erased(store.append, at)
        store.append_many = dying_after_erased(store.append_many, at)
    elif die_at == "before-purge":

        async def purging(streams: list[str]) -> None:
            die()

        store.purge = purging
    elif die_at:
        raise SystemExit(f"unknown DIE_AT {die_at!r}")


async def erase(uri: str, keys: str, subject: str, die_at: str) -> list[str]:
    path = os.environ.get(SIGNING_KEY)
    signing_key = SigningKey.from_file(path) if path else None
    async with Journal.open(uri, keys=keys, signing_key=signing_key) as journal:
        arm(journal, die_at)
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        erasure = await journal.erase(subject=subject, reason=REASON, by=BY)
        return list(erasure.sessions)


def main() -> None:
    uri, keys, subject = sys.argv[1:4]
    die_at = sys.argv[4] if len(sys.argv) > 4 else ""
    sessions = asyncio.run(erase(uri, keys, subject, die_at))
    print(json.dumps({"sessions": sessions}), flush=True)


if __name__ == "__main__":
    main()
