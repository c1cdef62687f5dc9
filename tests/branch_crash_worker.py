"""A forking writer to kill: ``python tests/branch_crash_worker.py URI SESSION_ID SEED``.

Forks one session's lines over and over, forever, until it is killed
(``tests/test_branch_crash.py`` sends SIGKILL at random moments): each step forks a
random line (main or a branch) before a random item or at its head, then writes two
items on the new branch and one on its parent. It prints ``open`` once the journal is
open, then ``forked NAME`` after each fork and ``step N`` after each whole step, flushed.
Items are only ever added (no pops or clears), so a branch's prefix is always its
parent's first ``prefix_items`` items as they stand now.
"""

from __future__ import annotations

import asyncio
import random
import sys

from agentjournal import Journal


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def main(uri: str, session_id: str, seed: int) -> None:
    """Fork and write until killed."""
    rng = random.Random(seed)
    async with Journal.open(uri) as journal:
        _say("open")
        root = journal.session(session_id)
        if not await root.get_items(limit=1):
            await root.add_items([{"role": "user", "content": "hello"}])
        step = 0
        while True:
            lines = ["main"] + [b.name for b in await root.branches()]
            line = rng.choice(lines)
            parent = root if line == "main" else journal.session(session_id, branch=line)
            count = len(await parent.get_items())
            name = f"s{seed}-{step}"
            # A line can be empty: a fork at 0 whose first write a kill cut off.
            at = rng.randrange(count) if count and rng.random() < 0.7 else None
            await parent.fork(at, name=name) if at is not None else await parent.fork(name=name)
            _say(f"forked {name}")
            branch = journal.session(session_id, branch=name)
            await branch.add_items(
                [
                    {"role": "user", "content": f"{name} asks"},
                    {"role": "assistant", "content": f"{name} answers"},
                ]
            )
            await parent.add_items([{"role": "user", "content": f"{line} after {name}"}])
            step += 1
            _say(f"step {step}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
