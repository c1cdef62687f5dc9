"""A process that writes to one session: ``python tests/session_writer.py URI SESSION NAME COUNT``.

Each of COUNT calls adds two items in one ``add_items``; the racing tests run
several of these at once and check nothing is lost or duplicated.
"""

from __future__ import annotations

import asyncio
import sys

from agentjournal import Journal


async def main(uri: str, session_id: str, name: str, count: int) -> None:
    async with Journal.open(uri) as journal:
        session = journal.session(session_id)
        for n in range(count):
            await session.add_items(
                [
                    {"role": "user", "content": f"{name}-{n}"},
                    {"role": "user", "content": f"{name}-{n}-b"},
                ]
            )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
