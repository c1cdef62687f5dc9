"""agentjournal: an event-sourced, tamper-evident session store for the OpenAI Agents SDK.

::

    from agentjournal import Journal

    async with Journal.open() as journal:               # ./agentjournal.db, or $AGENTJOURNAL_URI
        session = journal.session("support-4711")
        result = await Runner.run(agent, "hi", session=session, hooks=session)

    # Guardrails: every action checked against a /v1/validate service, every decision recorded.
    session = journal.session("support-4711", guardrails="http://127.0.0.1:8787")
    result = await Runner.run(session.guard(agent), "hi", session=session, hooks=session)

``Journal`` and ``JournalSession`` load the Agents SDK, which takes a few
seconds to import; they are imported on first use, so code that only needs the
stores (``agentjournal.store``) starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentjournal.errors import (
    AuthorityDenied,
    CodecError,
    ConcurrencyError,
    GuardrailBlocked,
    InvalidInput,
    JournalError,
    StoreError,
    StoreUnavailable,
    StreamDeleted,
    StreamNotFound,
)

if TYPE_CHECKING:
    from agentjournal.guardrails.client import GuardrailClient
    from agentjournal.journal import Journal
    from agentjournal.sdk.session import JournalSession

__all__ = [
    "AuthorityDenied",
    "CodecError",
    "ConcurrencyError",
    "GuardrailBlocked",
    "GuardrailClient",
    "InvalidInput",
    "Journal",
    "JournalError",
    "JournalSession",
    "StoreError",
    "StoreUnavailable",
    "StreamDeleted",
    "StreamNotFound",
]


def __getattr__(name: str) -> Any:
    if name == "Journal":
        from agentjournal.journal import Journal

        return Journal
    if name == "GuardrailClient":
        from agentjournal.guardrails.client import GuardrailClient

        return GuardrailClient
    if name == "JournalSession":
        from agentjournal.sdk.session import JournalSession

        return JournalSession
    raise AttributeError(f"module 'agentjournal' has no attribute {name!r}")
