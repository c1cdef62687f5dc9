"""Listing the catalog: load the saved fold, fold what is new from the global order, settle
what the fold left open with point reads, save (:func:`refresh`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from agentjournal._gc import no_collection
from agentjournal.errors import (
    ConcurrencyError,
    InvalidInput,
    JournalError,
    StoreError,
    StreamNotFound,
)
from agentjournal.ledger.chain import HASH_KEY
from agentjournal.ledger.checkpoints import Checkpoint
from agentjournal.read import projections
from agentjournal.read.catalog.fold import Catalog
from agentjournal.read.catalog.rows import SessionRow
from agentjournal.streams import ledger_stream, projection_stream

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentjournal.read.catalog.parts import OtherPart
    from agentjournal.store.contract import EventStore, RecordedEvent

NAME: Final = "catalog"
"""The projection's name: its state is saved on ``AgentProjection-catalog``."""
PAGE: Final = 2000
"""Events per ``read_all`` page."""

_SAVE_ATTEMPTS: Final = 5


@dataclass(frozen=True)
class Listing:
    """What one :func:`refresh` found.

    Attributes:
        rows: Every session, newest activity first.
        position: The global position folded through (None: the store is empty).
        folded: Events of session trees (and key rotations) this call folded (0: nothing
            new since the last save; the saves of projections do not count).
        saved: Whether the state was saved (False when nothing changed, or the store
            refused the save: see ``warning``).
        warning: One line on what went wrong loading or saving, if anything did.
    """

    rows: list[SessionRow]
    position: int | None
    folded: int
    saved: bool
    warning: str | None = None


Progress = Callable[[int], None]


async def refresh(
    store: EventStore,
    *,
    keys: Mapping[str, Ed25519PublicKey] | None = None,
    progress: Progress | None = None,
    fresh: bool = False,
    other: OtherPart | None = None,
) -> Listing:
    """Bring the saved catalog up to date and return its rows.

    Loads the catalog's last save, folds every event written since (the first call
    reads the whole global order, in pages of :data:`PAGE`, calling ``progress``
    with the number of events of each page), settles checkpoint heads and signatures
    with one point read each, and saves the state on top of the save it loaded. If a
    twin saved in between (``ConcurrencyError``), it loads that save and folds again
    from there. A store that refuses the save (read-only) still gets its rows, with
    ``warning`` set; so does a saved catalog that cannot be read back (it is folded
    again from the start and saved over).

    Args:
        store: The store to list.
        keys: Trusted public keys by key id: a checkpoint signed by one of them, or
            by a key a recorded rotation from them leads to, can be ``ok``.
        progress: Called with each page's event count while reading.
        fresh: Ignore the saved catalog: fold every event from the start, and save
            nothing. The save lives in the store it describes, so anyone who can write
            the store can forge it; this does not trust it (``verify`` is the full check).
        other: Another process folding the second half of the trees from the start
            (:mod:`.parts`), for this call to use if it folds from the start.

    Raises:
        StoreUnavailable: The store could not be read.
    """
    trusted_keys = dict(keys or {})
    if fresh:
        unsaved, position, folded = await _from_start(store, other, progress, trusted_keys)
        trusted = unsaved.trusted(trusted_keys)
        await settle(store, unsaved, trusted)
        return Listing(unsaved.rows(trusted), position, folded, False)
    damaged = None
    for _ in range(_SAVE_ATTEMPTS):
        try:
            saved = await projections.load(store, NAME)
        except projections.DamagedProjection as error:
            # Derived data: fold it again from the streams and save over the damage.
            damaged = f"the saved catalog was damaged ({error}) and is rebuilt"
            head = await store.head(projection_stream(NAME))
            saved = projections.Saved(None, b"", head if head is not None else -1)
        catalog = Catalog.load(saved.state) if saved is not None else None
        position = saved.position if saved is not None and catalog is not None else None
        if catalog is None:  # folded from the start and saved over what was there
            catalog, position, folded = await _from_start(store, other, progress, trusted_keys)
            other = None  # its part is taken: a save lost to a twin is folded again alone
        else:
            position, folded = await catch_up(store, catalog, position, progress)
        trusted = catalog.trusted(trusted_keys)
        settled = await settle(store, catalog, trusted)
        rows = catalog.rows(trusted)
        if not folded and not settled and damaged is None:
            return Listing(rows, position, 0, False)
        try:
            await projections.save(
                store, NAME, position=position, state=catalog.dump(), after=saved
            )
        except ConcurrencyError:
            continue  # a twin saved first: start again from its save
        except StoreError as error:
            warning = f"the catalog could not be saved ({error}); the next call reads it again"
            return Listing(rows, position, folded, False, _joined(damaged, warning))
        return Listing(rows, position, folded, True, damaged)
    warning = "the catalog was not saved: other readers kept saving it first"
    return Listing(rows, position, folded, False, _joined(damaged, warning))


async def _from_start(
    store: EventStore,
    other: OtherPart | None,
    progress: Progress | None,
    keys: Mapping[str, Ed25519PublicKey],
) -> tuple[Catalog, int | None, int]:
    """Every event folded from the start, in two parts when ``other`` folds the second (and
    both folded), else here alone: the catalog, the last position, how many counted."""
    if other is not None:
        from agentjournal.read.catalog.parts import in_parts

        parted = await in_parts(store, other, progress, keys)
        if parted is not None:
            return parted
    catalog = Catalog()
    position, folded = await catch_up(store, catalog, None, progress)
    return catalog, position, folded


def _joined(*warnings: str | None) -> str | None:
    return "; ".join(w for w in warnings if w) or None


async def sessions(
    store: EventStore, *, keys: Mapping[str, Ed25519PublicKey] | None = None
) -> list[SessionRow]:
    """Every session of ``store``, newest activity first (see :func:`refresh`).

    Raises:
        StoreUnavailable: The store could not be read.
    """
    return (await refresh(store, keys=keys)).rows


async def catch_up(
    store: EventStore,
    catalog: Catalog,
    position: int | None,
    progress: Progress | None = None,
    *,
    also: Callable[[RecordedEvent], None] | None = None,
    now: int | None = None,
    until: int | None = None,
) -> tuple[int | None, int]:
    """Fold every event after ``position`` into ``catalog`` (and hand each to ``also``,
    after the catalog folded it): the last position folded, and how many the catalog
    counted. ``now``: when they are folded (unix µs; default: the clock's now);
    ``until``: fold none after that position.

    Pages of :data:`PAGE` events in position order; the next page is read on the store's
    side while this one is folded."""
    folded = 0
    catalog.now = int(time.time() * 1_000_000) if now is None else now
    reading = asyncio.ensure_future(_page_after(store, position))
    try:
        while True:
            page, full = await reading
            if until is not None and page and page[-1].position >= until:
                page = [event for event in page if event.position <= until]
                full = False
            if full:
                # From the last event of this page, inclusive (see _page_after).
                reading = asyncio.ensure_future(_page_after(store, page[-1].position))
            with no_collection():  # the fold makes only acyclic dicts and lists
                folded += catalog.fold_page(page, also)
            if page:
                position = page[-1].position
            if progress is not None and page:
                progress(len(page))
            if not full:
                return position, folded
    finally:
        if not reading.done():
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, JournalError):
                await reading


async def _page_after(store: EventStore, position: int | None) -> tuple[list[RecordedEvent], bool]:
    """The next page of events after ``position``, and whether more may follow.

    Read from ``position`` inclusive: a position the store gave out, which KurrentDB
    finds without a scan (``position + 1`` may not be one); the event at it is dropped."""
    page = await store.read_all(from_position=position, limit=PAGE)
    full = len(page) == PAGE
    if position is not None:
        page = [e for e in page if e.position > position]
    return page, full and bool(page)


async def read_pages(
    store: EventStore, position: int | None, limit: int
) -> list[list[RecordedEvent]]:
    """The pages :func:`catch_up` would fold after ``position``, at most ``limit`` events
    (what ``bench/catalog.py`` folds without I/O)."""
    pages: list[list[RecordedEvent]] = []
    count, full = 0, True
    while full and count < limit:
        page, full = await _page_after(store, position)
        if page:
            pages.append(page)
            count += len(page)
            position = page[-1].position
    return pages


def fold_pages(catalog: Catalog, pages: list[list[RecordedEvent]]) -> int:
    """Fold ``pages`` as :func:`catch_up` does, without reading: how many events."""
    with no_collection():
        for page in pages:
            catalog.fold_page(page, None)
    return sum(len(page) for page in pages)


async def settle(
    store: EventStore, catalog: Catalog, trusted: Mapping[str, Ed25519PublicKey]
) -> bool:
    """Decide what the fold left open, with one point read each; whether anything changed."""
    changed = False
    for session_id, stream, revision, _ in catalog.unsettled():
        try:
            found = await store.read(stream, from_revision=revision, limit=1)
        except StreamNotFound:
            found = []
        same = found and found[0].revision == revision
        stored = found[0].metadata.get(HASH_KEY) if same else None
        catalog.settle_head(session_id, stream, revision, stored)
        changed = True
    for session_id in catalog.needs_signature(trusted):
        mark = catalog.sessions[session_id]["ck"]
        checkpoint = catalog.fresh.get(session_id)
        if checkpoint is None:  # folded by an earlier call, before its key was trusted
            try:
                ledger = ledger_stream(session_id)
                found = await store.read(ledger, from_revision=mark["rev"], limit=1)
                checkpoint = Checkpoint.decode(json.loads(found[0].data)) if found else None
            except (StreamNotFound, ValueError, InvalidInput):
                checkpoint = None
        catalog.check_signature(session_id, checkpoint, trusted[mark["key"]])
        changed = True
    return changed
