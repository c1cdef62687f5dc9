"""Exporting a session tree as a bundle a verifier can check offline.

A bundle is one JSON object::

    {"format": "agentjournal-bundle", "version": 1, "session_id": "...",
     "exported_at": "...", "redacted": false,
     "streams": [{"name": "AgentSession-...", "events": [
         {"revision": 0, "id": "...", "type": "...", "data": "<UTF-8 text or null>",
          "data_sha256": "...", "metadata": {...}}, ...]}, ...]}

Streams: the session stream, every subsession a handoff opened (found by
following ``SubagentStarted``), and the checkpoint stream ``AgentLedger-{id}``.
With ``redact=True`` the data of conversation events (messages, reasoning,
tool results, other items) is withheld — ``data`` is null, the digest stays,
so the chain still verifies — while tool calls, lifecycle events, guardrail
decisions, authority events and checkpoints are kept for the checks that
need them. Guardrail decisions carry the payloads they judged.
"""

from __future__ import annotations

import json
from collections import deque
from datetime import UTC, datetime
from typing import Any

from agentjournal import events, ledger
from agentjournal.errors import InvalidInput, StreamNotFound
from agentjournal.store.base import EventStore, RecordedEvent
from agentjournal.streams import session_stream, validate_id
from agentjournal.verify import BUNDLE_FORMAT, BUNDLE_VERSION, REDACTABLE

__all__ = ["export_bundle"]


async def export_bundle(
    store: EventStore, session_id: str, *, redact: bool = False
) -> dict[str, Any]:
    """Read every stream of the session tree into a bundle (see the module docs).

    Raises:
        InvalidInput: The session id is malformed, or the session does not exist.
        StoreUnavailable: The store could not be read.
    """
    session_id = validate_id(session_id, "session id")
    root = session_stream(session_id)
    # The checkpoints first: a session written meanwhile then only adds uncovered
    # events, never a checkpoint naming events the export lacks.
    try:
        checkpoints = await store.read(ledger.ledger_stream(session_id))
    except StreamNotFound:
        checkpoints = []
    streams: list[dict[str, Any]] = []
    pending: deque[str] = deque([root])
    seen = {root}
    while pending:
        name = pending.popleft()
        try:
            recorded = await store.read(name)
        except StreamNotFound:
            if name == root:
                raise InvalidInput(f"session {session_id!r} does not exist") from None
            continue  # a missing subsession: the verifier reports it
        streams.append({"name": name, "events": [_event(e, redact) for e in recorded]})
        for event in recorded:
            if event.type == events.SUBAGENT_STARTED and events.INDEX_KEY in event.metadata:
                child = json.loads(event.data).get("subsession_stream")
                if isinstance(child, str) and child not in seen:
                    seen.add(child)
                    pending.append(child)
    if checkpoints:
        streams.append(
            {
                "name": ledger.ledger_stream(session_id),
                "events": [_event(e, False) for e in checkpoints],
            }
        )
    return {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "session_id": session_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "redacted": redact,
        "streams": streams,
    }


def _event(event: RecordedEvent, redact: bool) -> dict[str, Any]:
    try:
        text: str | None = event.data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(
            f"{event.stream}@{event.revision} holds data that is not UTF-8; it cannot be bundled"
        ) from None
    return {
        "revision": event.revision,
        "id": str(event.id),
        "type": event.type,
        "data": None if redact and event.type in REDACTABLE else text,
        "data_sha256": ledger.data_digest(event.data),
        "metadata": dict(event.metadata),
    }
