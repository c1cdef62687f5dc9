"""A session with one damaged event, as something other than agentjournal could leave it."""

from __future__ import annotations

from agentjournal import Journal
from agentjournal.store.contract import NewEvent


async def add_damaged_session(uri: str, session_id: str) -> str:
    """Write ``session_id`` (two good items), then append an item whose data is not UTF-8;
    return where the damaged event is (``stream@revision``)."""
    async with Journal.open(uri) as journal:
        session = journal.session(session_id, agent_name="a")
        await session.add_items([{"role": "user", "content": "hi"}])
        stream = f"AgentSession-{session_id}"
        head = await journal.store.head(stream)
        assert head is not None
        await journal.store.append(
            stream, [NewEvent("UserMessageReceived", b"\xff\xfe garbage", {})], expected=head
        )
    return f"{stream}@{head + 1}"
