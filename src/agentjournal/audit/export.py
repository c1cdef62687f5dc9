"""Exporting a bundle: a session tree read from a store, as one JSON object.

The format is :mod:`agentjournal.audit.bundle`'s; this is its only part that reads a
store, kept apart so that verifying a bundle file loads no store, no asyncio and no
engine.
"""

from __future__ import annotations

from typing import Any

from agentjournal.audit.bundle import bundle_of
from agentjournal.store.contract import EventStore
from agentjournal.walk import read_tree

__all__ = ["export_bundle"]


async def export_bundle(
    store: EventStore, session_id: str, *, redact: bool = False
) -> dict[str, Any]:
    """Read every stream of the session tree into a bundle (see
    :mod:`agentjournal.audit.bundle`).

    Raises:
        InvalidInput: The session id is malformed, or the session does not exist.
        DamagedEvent: A stored event cannot be bundled (data that is not UTF-8, ...).
        StoreUnavailable: The store could not be read.
    """
    return bundle_of(await read_tree(store, session_id), redact=redact)
