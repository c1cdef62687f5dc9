"""agentjournal: an event-sourced, tamper-evident session store for the OpenAI Agents SDK.

::

    from agentjournal import Journal

    async with Journal.open() as journal:               # ./agentjournal.db, or $AGENTJOURNAL_URI
        session = journal.session("support-4711")
        result = await Runner.run(agent, "hi", session=session, hooks=session)
"""

from __future__ import annotations

from agentjournal.errors import (
    CodecError,
    ConcurrencyError,
    InvalidInput,
    JournalError,
    StoreError,
    StoreUnavailable,
    StreamDeleted,
    StreamNotFound,
)
from agentjournal.journal import Journal
from agentjournal.session import JournalSession

__all__ = [
    "CodecError",
    "ConcurrencyError",
    "InvalidInput",
    "Journal",
    "JournalError",
    "JournalSession",
    "StoreError",
    "StoreUnavailable",
    "StreamDeleted",
    "StreamNotFound",
]
