"""The write path's ids (issue 18): cheap nonces that still never repeat."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from agentjournal import Journal, JournalSession
from agentjournal.engine.core import _NONCES


def item(text: str) -> Any:
    return {"role": "user", "content": text}


async def test_a_program_that_seeds_random_does_not_repeat_event_ids(tmp_path: Path) -> None:
    # Two writers of one session whose program seeds `random` alike (tests, simulations):
    # the ids of their writes must still differ, or one's write would pass for the
    # other's retry (or, at another revision, sit on the stream under a used id).
    async with await Journal.open(f"sqlite:///{tmp_path / 'seeded.db'}") as journal:
        first, second = (JournalSession(journal.store, "s-1") for _ in range(2))
        random.seed(18)
        await first.add_items([item("one")])
        random.seed(18)
        await second.add_items([item("two")])
        stored = await journal.store.read("AgentSession-s-1")
        assert len({event.id for event in stored}) == len(stored) == 3  # started + 2 items
        held: list[Any] = await first.get_items()
        assert [m["content"] for m in held] == ["one", "two"]


def test_a_forked_child_draws_its_own_nonces() -> None:
    # Prefork servers import agentjournal, then fork: each worker must write other ids.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, _NONCES.next().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 200).decode()
    os.close(read)
    parent = _NONCES.next()
    assert child
    assert child[:24] != parent[:24]  # another process prefix, not just another count
