"""The bundle: a session tree in one JSON file a verifier can check offline.

A bundle is one JSON object::

    {"format": "agentjournal-bundle", "version": 2, "session_id": "...",
     "exported_at": "...", "redacted": false,
     "streams": [{"name": "AgentSession-...", "events": [
         {"revision": 0, "id": "...", "type": "...", "data": "<UTF-8 text or null>",
          "data_sha256": "...", "metadata": {...}, "view": null}, ...]}, ...]}

Streams: the session tree as :func:`agentjournal.records.read_tree` reads it —
the session stream, every subsession a handoff opened, the authority log
``AgentAuthority-{id}``, the checkpoint stream ``AgentLedger-{id}`` and the
journal's key rotations ``AgentKeys``, each when it exists.

With ``redact=True`` no conversation leaves the store
(:mod:`agentjournal.ledger.redaction`): the data of every event is withheld
(``data`` null, its digest kept, so the chain still verifies) except for what
holds none; events that mix conversation with what a verifier needs carry their
committed ``view`` instead.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from agentjournal import events
from agentjournal.ledger import redaction
from agentjournal.records import Record, TreeRecords, read_tree
from agentjournal.store.base import EventStore

__all__ = ["BUNDLE_FORMAT", "BUNDLE_VERSION", "bundle_of", "export_bundle"]

BUNDLE_FORMAT: Final = "agentjournal-bundle"
BUNDLE_VERSION: Final = 2
"""Version 2 adds each event's ``view`` (redacted bundles), the authority log and the keys."""


async def export_bundle(
    store: EventStore, session_id: str, *, redact: bool = False
) -> dict[str, Any]:
    """Read every stream of the session tree into a bundle (see the module docs).

    Raises:
        InvalidInput: The session id is malformed, or the session does not exist.
        DamagedEvent: A stored event cannot be bundled (data that is not UTF-8, ...).
        StoreUnavailable: The store could not be read.
    """
    return bundle_of(await read_tree(store, session_id), redact=redact)


def bundle_of(tree: TreeRecords, *, redact: bool = False) -> dict[str, Any]:
    """A session tree's records as a bundle, withholding the conversation with ``redact``."""
    return {
        "format": BUNDLE_FORMAT,
        "version": BUNDLE_VERSION,
        "session_id": tree.session_id,
        "exported_at": datetime.now(UTC).isoformat(),
        "redacted": redact,
        "streams": [
            {"name": name, "events": [_event(record, redact) for record in records]}
            for name, records in tree.streams.items()
        ],
    }


def _event(record: Record, redact: bool) -> dict[str, Any]:
    text = record.data
    shown: dict[str, Any] | None = None
    if redact and redaction.withholds(record.type, record.metadata):
        text = None
        if events.REDACTED_KEY in record.metadata and record.data is not None:
            try:
                shown = redaction.view(record.type, record.data.encode(), record.metadata)
            except ValueError:
                shown = None  # unreadable: withheld whole, the verifier reports it
    return {
        "revision": record.revision,
        "id": record.id,
        "type": record.type,
        "data": text,
        "data_sha256": record.data_sha256,
        "metadata": dict(record.metadata),
        "view": shown,
    }
