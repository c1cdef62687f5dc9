"""A thread's state, kept as events on its session and merged with what each invocation passes.

``agentjournal.ThreadState`` (SCHEMA.md) on ``AgentSession-{thread_id}`` holds the
state an invocation ended with, the ``run_id`` and the final agent. The next
invocation of the thread reads the newest one (a backwards read of the session's
stream: it is normally among the last few events) and merges:

1. start from the stored state (``{}`` for a new thread);
2. the invocation's ``state`` overrides it key by key (top-level keys; a value
   of ``null`` is kept as ``null``, not a deletion);
3. each ``system::handoff``'s ``state`` overrides it key by key, in order,
   before its target runs.

The result is the ``state`` of the output and of the new ``ThreadState`` event,
written after the run whatever its status (a blocked or failed run may have
handed off and merged state already; what it did is on the record either way) —
but only on a session that exists: a run that failed before its first write
(the store refused the input message) leaves no stream, and a ``ThreadState``
alone would start one without its ``SessionStarted``. Then nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from agentjournal.errors import StreamNotFound
from agentjournal.store.contract import EventStore
from agentjournal.streams import session_stream

THREAD_STATE: Final = "agentjournal.ThreadState"
_PAGE = 32


def merge_state(stored: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` overridden key by key by ``given`` (pure; neither is changed)."""
    return {**stored, **given}


def state_event(
    state: Mapping[str, Any], *, run_id: str, agent_id: str | None, status: str
) -> bytes:
    """The data of a ``ThreadState`` event."""
    document = {"run_id": run_id, "agent_id": agent_id or "", "status": status, "state": state}
    return json.dumps(document, ensure_ascii=False, separators=(",", ":")).encode()


async def load_state(store: EventStore, thread_id: str) -> dict[str, Any]:
    """The newest stored state of ``thread_id`` (``{}`` when it has none).

    A ``ThreadState`` whose data is not a JSON object with a ``state`` object is
    skipped (the one before it counts).
    """
    stream = session_stream(thread_id)
    start: int | None = None
    while True:
        try:
            page = await store.read(stream, from_revision=start, backwards=True, limit=_PAGE)
        except StreamNotFound:
            return {}
        for event in page:
            if event.type != THREAD_STATE:
                continue
            try:
                document = json.loads(event.data)
            except ValueError:
                continue
            state = document.get("state") if isinstance(document, dict) else None
            if isinstance(state, dict):
                return state
        if len(page) < _PAGE or page[-1].revision == 0:
            return {}
        start = page[-1].revision - 1


async def session_started(store: EventStore, thread_id: str) -> bool:
    """Whether the session of ``thread_id`` has a stream (its first write happened)."""
    try:
        await store.read(session_stream(thread_id), backwards=True, limit=1)
    except StreamNotFound:
        return False
    return True
