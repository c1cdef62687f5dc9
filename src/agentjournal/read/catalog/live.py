"""The catalog held in memory by a long-lived reader (the viewer): fold only what is new.

:class:`LiveCatalog` keeps a :class:`~agentjournal.read.catalog.fold.Catalog` and its
:class:`~agentjournal.read.catalog.search.ContentIndex` between calls. Its first
:meth:`~LiveCatalog.refresh` reads the store's global order from the start (it neither
loads nor saves the catalog's saved state: that save lives in the store it describes,
and the content index could not be loaded from it anyway); every later call folds only
the events written since, settles what the fold left open with point reads (as
:func:`~agentjournal.read.catalog.listing.refresh` does, with the same functions), and
builds again only the rows of the sessions those touched (every row after a key
rotation). One lock: one refresh at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentjournal.read.catalog.fold import Catalog
from agentjournal.read.catalog.listing import catch_up, settle
from agentjournal.read.catalog.rows import SessionRow
from agentjournal.read.catalog.scores import scored_session
from agentjournal.read.catalog.search import TEXT_EVENT_TYPES, ContentIndex
from agentjournal.streams import KEYS_STREAM

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentjournal.store.contract import EventStore, RecordedEvent


@dataclass(frozen=True)
class Snapshot:
    """The catalog as one :meth:`LiveCatalog.refresh` left it.

    Attributes:
        rows: Every session, in no particular order (a list no later refresh changes).
        position: The global position folded through (None: the store is empty).
        folded: Events of session trees this refresh folded.
        seconds: How long this refresh took (the first one reads the whole store).
        index: The content index (:meth:`ContentIndex.matching` answers ``q``).
    """

    rows: list[SessionRow]
    position: int | None
    folded: int
    seconds: float
    index: ContentIndex


class LiveCatalog:
    """The catalog and its content index in memory, folded forward on each refresh."""

    def __init__(self, keys: Mapping[str, Ed25519PublicKey] | None = None) -> None:
        self._keys = dict(keys or {})
        self._catalog = Catalog()
        self._index = ContentIndex()
        self._position: int | None = None
        self._rows: dict[str, SessionRow] | None = None  # None: to build them all
        self._touched: set[str] = set()  # sessions whose rows are to be built again
        self._lock = asyncio.Lock()
        self.ready = False  # the first refresh (the whole store) is done

    @property
    def position(self) -> int | None:
        """The global position folded through so far (during a refresh too)."""
        return self._position

    def _also(self, event: RecordedEvent) -> None:
        # The position of every event folded, as it is folded: a read that fails half-way
        # leaves the catalog and the position in step, and the next call goes on from there.
        self._position = event.position
        if event.stream == KEYS_STREAM:
            self._rows = None  # a key rotation: every row's trust may change
            return
        session_id = self._catalog.session_of(event) or scored_session(event)
        if session_id is None:
            return
        self._touched.add(session_id)
        if event.type in TEXT_EVENT_TYPES:
            self._index.fold(session_id, event)

    async def refresh(self, store: EventStore) -> Snapshot:
        """Fold the events written since the last call and return the rows.

        Raises:
            StoreUnavailable: The store could not be read (what was folded before the
                failure stays folded; the next call goes on from there).
        """
        async with self._lock:
            started = time.perf_counter()
            catalog = self._catalog
            position, folded = await catch_up(store, catalog, self._position, also=self._also)
            self._position = position
            trusted = catalog.trusted(self._keys)
            # What settling decides changes those sessions' rows only.
            self._touched.update(session_id for session_id, *_ in catalog.unsettled())
            self._touched.update(catalog.needs_signature(trusted))
            await settle(store, catalog, trusted)
            if self._rows is None:
                self._rows = {row.session_id: row for row in catalog.rows(trusted)}
            else:
                for session_id in self._touched:
                    row = catalog.row(session_id, trusted)
                    if row is not None:
                        self._rows[session_id] = row
            self._touched.clear()
            self.ready = True
            return Snapshot(
                list(self._rows.values()),
                position,
                folded,
                time.perf_counter() - started,
                self._index,
            )
