"""An eval run in a process of its own, to kill: ``python tests/eval_worker.py URI RUN
SESSIONS [DIE_AT]``.

Opens the store at URI (and the signing key in ``$EVAL_WORKER_SIGNING_KEY``, a key file,
when set), prints ``ready`` and waits for a line on stdin, then runs the eval run RUN over
the sessions ``support-0`` .. ``support-{SESSIONS-1}`` with two scorers (each turn's
scoring takes ``$EVAL_WORKER_PAUSE`` seconds, default 0.001, so a run lasts long enough to
be killed from outside), printing
a line per session scored and ``done`` at the end. The parent (``tests/test_eval_kill.py``)
either SIGKILLs it after a delay, or names DIE_AT, a point where it SIGKILLs itself:

- ``after-append:K``: right after its K-th append to the run's stream landed;
- ``before-append:K``: right before its K-th append to the run's stream is sent.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from agentjournal.evals.run import run_eval
from agentjournal.evals.scorers.base import Score
from agentjournal.ledger import SigningKey
from agentjournal.read.evals.turns import ScoredTurn
from agentjournal.store import open_store
from eval_sessions import AnswerScorer

SIGNING_KEY = "EVAL_WORKER_SIGNING_KEY"
PAUSE = "EVAL_WORKER_PAUSE"


class Slow(AnswerScorer):
    """An answer scorer that takes ``$EVAL_WORKER_PAUSE`` seconds a turn."""

    async def score_turn(self, turn: ScoredTurn) -> Score | None:
        await asyncio.sleep(float(os.environ.get(PAUSE, "0.001")))
        return await super().score_turn(turn)


def scorers() -> list[Any]:
    return [Slow(), Slow("refund", "12.50", whole=True)]


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def dying(append: Callable[..., Awaitable[Any]], run: str, die_at: str) -> Callable[..., Any]:
    """``append`` (a store's) that kills the process at ``die_at`` (see the module docs)."""
    when, _, count = die_at.partition(":")
    at = int(count)
    seen = 0

    async def wrapped(stream: str, *args: Any, **kwargs: Any) -> Any:
        nonlocal seen
        if stream != run:
            return await append(stream, *args, **kwargs)
        seen += 1
        if when == "before-append" and seen >= at:
            die()
        result = await append(stream, *args, **kwargs)
        if when == "after-append" and seen >= at:
            die()
        return result

    return wrapped


async def work(uri: str, run_id: str, sessions: int, die_at: str) -> None:
    path = os.environ.get(SIGNING_KEY)
    signing_key = SigningKey.from_file(path) if path else None
    store: Any = await open_store(uri, create=False)
    try:
        if die_at:
            store.append = dying(store.append, f"EvalRun-{run_id}", die_at)
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        await run_eval(
            store,
            scorers(),
            [(f"support-{n}", "main") for n in range(sessions)],
            run_id=run_id,
            signing_key=signing_key,
            progress=lambda done: print(done.text(), flush=True),
        )
        print("done", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    uri, run_id, count = sys.argv[1:4]
    asyncio.run(work(uri, run_id, int(count), sys.argv[4] if len(sys.argv) > 4 else ""))
