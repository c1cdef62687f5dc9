"""The event store contract: the ``EventStore`` protocol, and the records it speaks.

The records live in :mod:`agentjournal.store._events` (events, stream states, ids),
:mod:`agentjournal.store._append` (a write and its checks) and :mod:`agentjournal.store.model`
(the read model); this module names them all.

Both backends (:mod:`agentjournal.store.sqlite`, :mod:`agentjournal.store.kurrentdb`)
implement this contract with KurrentDB's stream semantics, and both pass the one
conformance suite in :mod:`agentjournal.testing.store_conformance`:

* A stream is an ordered list of events. Revisions start at 0 and are gapless.
* Every write states what it expects of the stream: :attr:`StreamState.ANY`,
  :attr:`StreamState.NO_STREAM`, :attr:`StreamState.EXISTS` or an exact revision
  (the revision of the stream's last event). A mismatch raises
  :class:`~agentjournal.errors.ConcurrencyError` and writes nothing.
* :meth:`EventStore.append_many` is one atomic transaction across streams: all
  of its streams are written or none is. A stream appears at most once per call
  (compared case-insensitively, as KurrentDB does).
* Idempotency: re-sending the same event ids at the same position with an exact
  revision or ``NO_STREAM`` succeeds without writing twice and returns what the
  first write returned; ids that only partly match are a conflict. With ``ANY``
  or ``EXISTS`` a retry is not guaranteed to be recognised: writers that retry
  should use exact revisions and deterministic ids (see :func:`event_id`).
* Every event also has a global position: one total order over all streams,
  strictly increasing, not necessarily gapless.
* Invalid input raises :class:`~agentjournal.errors.InvalidInput` before
  anything is written (see :func:`validate_append`).

A store may also keep a **read model** (optional; SQLite does, KurrentDB does not):
the visible items of each session tree, changed in the same transaction as the
events that change them. A writer that knows what its events do to a tree says so
on each request (:attr:`AppendRequest.model`, a :class:`ModelChange`); a store
without the capability ignores it. What the contract promises of a store that has
it (``read_model``, see :class:`ModelSnapshot`):

* The model is derived, never a source of truth: events are stored unchanged, and
  nothing that verifies or shows a session reads the model.
* A stream created by a request with a :class:`ModelChange` joins its tree. Its
  model stays *current* while every event appended to it came with a change for
  that tree (its ``modelled`` revision follows its head); one append without one
  (another writer, an older agentjournal, a plain :meth:`EventStore.append`)
  leaves it behind for good, and then ``read_model`` of its tree answers None:
  the reader reads the events, as a store without the capability always does. A
  stream that existed before it was first written with a change never is current.
* The changes of one request are applied once: a retry the store recognises
  (same ids at the same revision) changes nothing, a write that fails or
  conflicts changes nothing.
* An item's place must fit its packed key (:func:`model_key`): an item of a part
  from :data:`MODEL_PARTS`, or of a revision below 0 or from :data:`MODEL_REVISIONS`,
  makes its tree not current, and ``read_model`` answers None for a tree with a head
  revision from :data:`MODEL_REVISIONS`.
* A tree started by a :class:`ModelCopy` holds rows whose places are on another tree's
  streams; its snapshot's ``names`` name those streams too (its ``heads`` only its own).
* ``read_model`` answers None when an item is on a stream that is not one of the tree's,
  unless it is in a copied prefix (every such row before every row on the tree's own
  streams, each on a stream that exists): a hand-edited file; the events answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, runtime_checkable

from agentjournal.store._append import (
    AppendRequest,
    AppendResult,
    validate_append,
    validate_stream_name,
)
from agentjournal.store._append import (
    encode_metadata as encode_metadata,
)
from agentjournal.store._events import (
    MAX_EVENT_BYTES,
    RESERVED_METADATA_PREFIXES,
    Expected,
    NewEvent,
    RecordedEvent,
    StreamState,
    event_id,
    expected_label,
    expected_matches,
)
from agentjournal.store._events import (
    event_id_series as event_id_series,
)
from agentjournal.store._events import (
    new_event as new_event,
)
from agentjournal.store.model import (
    MODEL_PARTS,
    MODEL_REVISIONS,
    ModelAdd,
    ModelChange,
    ModelClear,
    ModelCopy,
    ModelItems,
    ModelOp,
    ModelRemove,
    ModelRow,
    ModelSnapshot,
    model_key,
    model_place,
)

__all__ = [
    "MAX_EVENT_BYTES",
    "RESERVED_METADATA_PREFIXES",
    "AppendRequest",
    "AppendResult",
    "EventStore",
    "ModelAdd",
    "ModelChange",
    "ModelClear",
    "ModelCopy",
    "ModelOp",
    "ModelRemove",
    "ModelItems",
    "ModelRow",
    "ModelSnapshot",
    "MODEL_PARTS",
    "MODEL_REVISIONS",
    "model_key",
    "model_place",
    "Expected",
    "NewEvent",
    "RecordedEvent",
    "StreamState",
    "event_id",
    "expected_label",
    "expected_matches",
    "validate_append",
    "validate_stream_name",
]


@runtime_checkable
class EventStore(Protocol):
    """An append-only store of streams with KurrentDB semantics (see module docs).

    Implementations are async, safe to share between asyncio tasks, and must be
    closed with :meth:`close` (or used as an async context manager).
    """

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        """Append ``events`` to ``stream`` if it is in the ``expected`` state.

        With no events the call only checks ``expected`` and reports the
        stream's current revision (``-1`` if it does not exist) and the
        store's last position.

        Raises:
            ConcurrencyError: The stream is not in the expected state.
            StreamDeleted: The stream was deleted.
            InvalidInput: The request is malformed; nothing was written.
            StoreUnavailable: The store could not be reached.
        """
        ...

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        """Append to several streams in one atomic transaction.

        Returns one result per request, in request order. If any stream is not
        in its expected state nothing at all is written.

        Raises:
            ConcurrencyError: Some stream was not in its expected state.
            InvalidInput: The request is malformed; nothing was written.
            StoreUnavailable: The store could not be reached.
        """
        ...

    async def read(
        self,
        stream: str,
        *,
        from_revision: int | None = None,
        backwards: bool = False,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        """Read events of ``stream``.

        Forwards starts at ``from_revision`` (default 0); backwards starts at
        ``from_revision`` (default the last event) and goes down. Both include
        ``from_revision``. ``limit`` caps the count; a tail read
        (``backwards=True, limit=N``) costs O(N) whatever the stream's length.

        Raises:
            StreamNotFound: The stream does not exist.
        """
        ...

    async def head(self, stream: str) -> int | None:
        """Return the revision of the stream's last event, or None if it does not exist.

        Raises:
            StreamDeleted: The stream was tombstoned (KurrentDB).
            StoreUnavailable: The store could not be reached.
        """
        ...

    async def read_all(
        self, *, from_position: int | None = None, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Read events of all streams in global order, from ``from_position`` inclusive.

        Pass positions the store gave out: on KurrentDB any other position
        costs a backward scan to the nearest event boundary.

        Raises:
            StoreUnavailable: The store could not be reached.
        """
        ...

    def subscribe(self, *, after_position: int | None = None) -> AsyncIterator[RecordedEvent]:
        """Yield every event after ``after_position`` (exclusive), then follow new ones.

        A catch-up subscription over the global order: it first delivers what
        is stored, then each new event shortly after it is committed (within
        100 ms), without busy polling. It ends only when the consumer stops
        iterating or the store is closed.

        Raises:
            StoreUnavailable: The store cannot be reached (after retries).
        """
        ...

    async def close(self) -> None:
        """Release connections; the store cannot be used afterwards."""
        ...
