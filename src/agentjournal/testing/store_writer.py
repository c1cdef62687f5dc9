"""A writer process for the multi-process conformance tests.

``python -m agentjournal.testing.store_writer URI STREAM COUNT WRITER`` appends
COUNT events, one per call, at exact revisions to STREAM; a conflict means
another writer took that revision, so it reads the head again and retries.
"""

from __future__ import annotations

import asyncio
import json
import sys

from agentjournal.errors import ConcurrencyError
from agentjournal.store import NewEvent, StreamState, event_id, open_store


async def write(uri: str, stream: str, count: int, writer: str) -> None:
    """Append ``count`` events from ``writer`` to ``stream`` with retry on conflict."""
    store = await open_store(uri)
    try:
        for n in range(count):
            event = NewEvent(
                type="Written",
                data=json.dumps({"writer": writer, "n": n}).encode(),
                metadata={"writer": writer},
                id=event_id("store_writer", stream, writer, n),
            )
            for _ in range(10_000):
                head = await store.head(stream)
                expected = StreamState.NO_STREAM if head is None else head
                try:
                    await store.append(stream, [event], expected=expected)
                    break
                except ConcurrencyError:
                    await asyncio.sleep(0)
            else:  # pragma: no cover - would mean livelock
                raise RuntimeError(f"{writer} could not append event {n}")
    finally:
        await store.close()


def main(argv: list[str]) -> int:
    """Run the writer; arguments as in the module docstring."""
    uri, stream, count, writer = argv
    asyncio.run(write(uri, stream, int(count), writer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
