"""Exporting a session tree as a bundle a verifier can check offline.

A bundle is one JSON object::

    {"format": "agentjournal-bundle", "version": 2, "session_id": "...",
     "exported_at": "...", "redacted": false,
     "streams": [{"name": "AgentSession-...", "events": [
         {"revision": 0, "id": "...", "type": "...", "data": "<UTF-8 text or null>",
          "data_sha256": "...", "metadata": {...}, "view": null}, ...]}, ...]}

Streams: the session stream, every subsession a handoff opened (found by
following ``SubagentStarted``), the authority log ``AgentAuthority-{id}``, the
checkpoint stream ``AgentLedger-{id}`` and the journal's key rotations
``AgentKeys`` — each when it exists.

With ``redact=True`` no conversation leaves the store
(:mod:`agentjournal.ledger.redaction`): the data of every event is withheld (``data``
null, its digest kept, so the chain still verifies) except for the types that
hold none; events that mix conversation with what a verifier needs (tool
calls, handoffs, completions, guardrail decisions, authority refusals) carry
their committed ``view`` instead.
"""

from __future__ import annotations

import json
from collections import deque
from datetime import UTC, datetime
from typing import Any, Final

from agentjournal import events
from agentjournal.digests import data_digest
from agentjournal.errors import InvalidInput, StreamNotFound
from agentjournal.ledger import redaction
from agentjournal.store.base import EventStore, RecordedEvent
from agentjournal.streams import (
    KEYS_STREAM,
    authority_stream,
    ledger_stream,
    session_stream,
    validate_id,
)

__all__ = ["BUNDLE_FORMAT", "BUNDLE_VERSION", "export_bundle"]

BUNDLE_FORMAT: Final = "agentjournal-bundle"
BUNDLE_VERSION: Final = 2
"""Version 2 adds each event's ``view`` (redacted bundles), the authority log and the keys."""


async def export_bundle(
    store: EventStore, session_id: str, *, redact: bool = False
) -> dict[str, Any]:
    """Read every stream of the session tree into a bundle (see the module docs).

    Raises:
        InvalidInput: The session id is malformed, the session does not exist, or an
            event cannot be bundled (data that is not UTF-8).
        StoreUnavailable: The store could not be read.
    """
    session_id = validate_id(session_id, "session id")
    root = session_stream(session_id)
    # The checkpoints first: a session written meanwhile then only adds uncovered
    # events, never a checkpoint naming events the export lacks.
    checkpoints = await _read(store, ledger_stream(session_id))
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
        streams.append(_stream(name, recorded, redact))
        for event in recorded:
            child = _opened(event)
            if child is not None and child not in seen:
                seen.add(child)
                pending.append(child)
    for name, recorded in (
        (authority_stream(session_id), await _read(store, authority_stream(session_id))),
        (ledger_stream(session_id), checkpoints),
        (KEYS_STREAM, await _read(store, KEYS_STREAM)),
    ):
        if recorded:
            streams.append(_stream(name, recorded, redact))
    return {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "session_id": session_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "redacted": redact,
        "streams": streams,
    }


def _opened(event: RecordedEvent) -> str | None:
    """The subsession a parent's copy of ``SubagentStarted`` opens; None for anything else,
    and for a damaged event (the verifier reports what it cannot find)."""
    if event.type != events.SUBAGENT_STARTED or events.INDEX_KEY not in event.metadata:
        return None
    try:
        body = json.loads(event.data)
    except (ValueError, RecursionError):
        return None
    child = body.get("subsession_stream") if isinstance(body, dict) else None
    return child if isinstance(child, str) else None


async def _read(store: EventStore, stream: str) -> list[RecordedEvent]:
    try:
        return await store.read(stream)
    except StreamNotFound:
        return []


def _stream(name: str, recorded: list[RecordedEvent], redact: bool) -> dict[str, Any]:
    return {"name": name, "events": [_event(event, redact) for event in recorded]}


def _event(event: RecordedEvent, redact: bool) -> dict[str, Any]:
    try:
        text: str | None = event.data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(
            f"{event.stream}@{event.revision} holds data that is not UTF-8; it cannot be bundled"
        ) from None
    shown: dict[str, Any] | None = None
    if redact and redaction.withholds(event.type, event.metadata):
        text = None
        if events.REDACTED_KEY in event.metadata:
            try:
                shown = redaction.view(event.type, event.data, event.metadata)
            except ValueError:
                shown = None  # unreadable: withheld whole, the verifier reports it
    return {
        "revision": event.revision,
        "id": str(event.id),
        "type": event.type,
        "data": text,
        "data_sha256": data_digest(event.data),
        "metadata": dict(event.metadata),
        "view": shown,
    }
