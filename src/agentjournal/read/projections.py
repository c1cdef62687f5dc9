"""Where a projection is, saved in the store: the durable state of a reader of the global log.

A projection folds the store's global order (``read_all`` / ``subscribe``) into
something of its own: the session catalog behind ``agentjournal sessions``, the
spans ``agentjournal trace export --follow`` has sent. To survive a restart
without reading everything again, and without dropping or repeating what it
already did, it saves the last position it folded together with its state, as
events of its own stream ``AgentProjection-{name}``:

* zero or more ``agentjournal.ProjectionChunk`` events holding the state
  (zlib-compressed, cut into pieces of at most :data:`CHUNK_BYTES`, each as
  ``{"piece": base64}``: every event agentjournal writes is JSON), then
* one ``agentjournal.ProjectionSaved`` event naming the position, the number of
  chunks before it and the SHA-256 of the uncompressed state.

One save is one atomic append, conditional on the revision of the save it
follows: two instances of one projection cannot both save on top of the same
state (the second gets :class:`~agentjournal.errors.ConcurrencyError` and must
reload), so a projection is fenced against a twin. Loading reads the stream's
last event and the chunks just before it: O(state), whatever the stream's length.
"""

from __future__ import annotations

import base64
import hashlib
import json
import zlib
from dataclasses import dataclass
from typing import Final

from agentjournal import events
from agentjournal.errors import JournalError, StreamNotFound
from agentjournal.store.contract import EventStore, NewEvent, StreamState
from agentjournal.streams import projection_stream

__all__ = ["CHUNK", "CHUNK_BYTES", "SAVED", "DamagedProjection", "Saved", "load", "save"]

SAVED: Final = "agentjournal.ProjectionSaved"
CHUNK: Final = "agentjournal.ProjectionChunk"
CHUNK_BYTES: Final = 1 << 20
"""The largest piece of compressed state one event holds (far under any store's event limit)."""


class DamagedProjection(JournalError):
    """Raised when a projection's saved state cannot be read back as it was saved."""


@dataclass(frozen=True)
class Saved:
    """A projection's last save.

    Attributes:
        position: The global position of the last event it folded (None: none yet).
        state: Its state, as it handed it to :func:`save`.
        revision: The ``ProjectionSaved`` event's revision: the ``expected`` of the next save.
    """

    position: int | None
    state: bytes
    revision: int


async def load(store: EventStore, name: str) -> Saved | None:
    """Return the projection's last save, or None if it never saved.

    Raises:
        InvalidInput: ``name`` is not a valid id.
        DamagedProjection: The saved events are not what :func:`save` writes.
        StoreUnavailable: The store could not be reached.
    """
    stream = projection_stream(name)
    try:
        last = await store.read(stream, backwards=True, limit=1)
    except StreamNotFound:
        return None
    if not last:
        return None
    trailer = last[0]
    try:
        body = json.loads(trailer.data)
        position, count, digest = body["position"], body["chunks"], body["state_sha256"]
        if trailer.type != SAVED or not isinstance(count, int) or count < 0:
            raise ValueError("not a ProjectionSaved event")
        if position is not None and not isinstance(position, int):
            raise ValueError("position is not an integer")
    except (ValueError, KeyError, TypeError) as error:
        raise DamagedProjection(f"{stream}@{trailer.revision}: {error}") from None
    chunks = []
    if 0 < count <= trailer.revision:
        chunks = await store.read(stream, from_revision=trailer.revision - count, limit=count)
    if len(chunks) != count or any(chunk.type != CHUNK for chunk in chunks):
        raise DamagedProjection(f"{stream}@{trailer.revision}: its {count} chunks are missing")
    try:
        packed = b"".join(base64.b64decode(json.loads(chunk.data)["piece"]) for chunk in chunks)
        state = zlib.decompress(packed) if count else b""
    except (zlib.error, ValueError, KeyError, TypeError) as error:
        raise DamagedProjection(f"{stream}@{trailer.revision}: {error}") from None
    if hashlib.sha256(state).hexdigest() != digest:
        raise DamagedProjection(f"{stream}@{trailer.revision}: the state's digest does not match")
    return Saved(position, state, trailer.revision)


async def save(
    store: EventStore, name: str, *, position: int | None, state: bytes, after: Saved | None
) -> Saved:
    """Save the projection's position and state on top of ``after`` (its last save, or None).

    Raises:
        ConcurrencyError: Someone saved this projection since ``after``: reload and redo.
        InvalidInput: ``name`` is not a valid id.
        StoreUnavailable: The store could not be reached; the save may or may not have landed.
    """
    # Level 1: a 20 MB catalog (10,000 sessions) packs in 0.12 s instead of the default
    # level's 0.29 s, about 8% larger; a save of any level loads alike.
    packed = zlib.compress(state, 1) if state else b""
    pieces = [packed[at : at + CHUNK_BYTES] for at in range(0, len(packed), CHUNK_BYTES)]
    metadata = {events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE}
    trailer = json.dumps(
        {
            "position": position,
            "chunks": len(pieces),
            "state_sha256": hashlib.sha256(state).hexdigest(),
        },
        separators=(",", ":"),
    ).encode()
    batch = [
        NewEvent(CHUNK, json.dumps({"piece": base64.b64encode(piece).decode()}).encode(), metadata)
        for piece in pieces
    ]
    batch.append(NewEvent(SAVED, trailer, metadata))
    expected = StreamState.NO_STREAM if after is None else after.revision
    result = await store.append(projection_stream(name), batch, expected=expected)
    return Saved(position, state, result.revision)
