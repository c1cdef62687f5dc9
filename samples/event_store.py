"""The event store on its own: append, atomic multi-stream append, conflicts, tail reads.

Run: ``python samples/event_store.py [sqlite:///path.db]`` (default: in memory).
"""

from __future__ import annotations

import asyncio
import json
import sys

from agentjournal.errors import ConcurrencyError
from agentjournal.store import AppendRequest, NewEvent, StreamState, open_store


def event(kind: str, **data: object) -> NewEvent:
    return NewEvent(type=kind, data=json.dumps(data).encode(), metadata={"$schema_version": "2"})


async def main(uri: str) -> None:
    store = await open_store(uri)
    try:
        parent, child = "AgentSession-demo", "AgentSubsession-demo-sub-billing-1"
        await store.append(
            parent, [event("UserMessageReceived", content="hi")], expected=StreamState.NO_STREAM
        )
        # Both streams or neither: the parent's marker and the subsession's first event.
        await store.append_many(
            [
                AppendRequest(parent, [event("SubagentStarted", agent_id="sub-billing-1")], 0),
                AppendRequest(
                    child,
                    [event("SubagentStarted", agent_id="sub-billing-1")],
                    StreamState.NO_STREAM,
                ),
            ]
        )
        try:
            await store.append(
                parent, [event("AssistantTextGenerated", content="late")], expected=0
            )
        except ConcurrencyError as error:
            print(f"conflict, as expected: {error}")
        for name in (parent, child):
            for recorded in await store.read(name):
                print(f"{name}@{recorded.revision} #{recorded.position} {recorded.type}")
        tail = await store.read(parent, backwards=True, limit=1)
        print(f"tail of {parent}: {tail[0].type}")
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "sqlite://:memory:"))
