"""The catalog's first fold in two parts: half the session trees here, the others in
another process, both from the start of the global order to one end of it.

Each part reads every event and folds the events of its own trees (:class:`Share`: by a
digest of the session id, as the trace export's parts), and of the other part's trees
only what decides which tree a stream is on (:meth:`Catalog.fold`), so each tree folds as
it does in one fold. Each part checks its trees' checkpoints (``settle``) as soon as it
has folded them, this one while the other may still fold. The two parts are put
together (:meth:`Catalog.merge`) once both have folded through the same last event: the
one that read less (a writer appended in between) folds on to where the other stopped,
so the listing is of one prefix of the global order. The other process sends its part's
:class:`Catalog` whole (pickled by :mod:`agentjournal._forked`); if it sends nothing,
this process folds that part too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from agentjournal._gc import no_collection
from agentjournal.read.catalog.fold import Catalog
from agentjournal.read.catalog.listing import NAME, Progress, catch_up, settle
from agentjournal.streams import projection_stream

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentjournal.store.contract import EventStore


@dataclass(frozen=True, slots=True)
class Share:
    """The session trees one of the two parts folds: the first part those whose session
    id's SHA-256 (its first 8 bytes, modulo 100) falls below ``cut``, the second the
    others. Not CRC-32: its residues of ids that differ in a digit are far from even.

    The first part is this process's: once both have folded, it alone takes in the other's
    part, makes the rows, saves and prints, some 4% of a part's time more than the other
    spends sending its part (at 1,000 sessions as at 10,000: each grows with the rows). So
    it folds 48 hundredths of the trees, and the two end about together."""

    index: int
    cut: int = 48

    def owns(self, session: str) -> bool:
        """Whether this part folds ``session``'s trees (its main line and every branch)."""
        digest = hashlib.sha256(session.encode("utf-8", "surrogatepass")).digest()
        return (int.from_bytes(digest[:8], "big") % 100 < self.cut) == (self.index == 0)


FIRST: Final = Share(0)
SECOND: Final = Share(1)

Sent = tuple[int | None, int, Catalog]
"""What the other process sends: the position it folded through (None: no event), how
many events its part counted, and its part's catalog."""


@dataclass(frozen=True)
class OtherPart:
    """The second part, folded by another process from the start of the global order.

    Attributes:
        now: When the events are folded (unix µs), the same for both parts.
        result: What that process sent (None: it failed, or found a saved catalog).
    """

    now: int
    result: Callable[[], Sent | None]


async def second_part(
    store: EventStore, now: int, keys: Mapping[str, Ed25519PublicKey], *, fresh: bool
) -> Sent | None:
    """What the other process sends: the second part, folded from the start at ``now``,
    its checkpoints signed by one of ``keys`` checked; None when the store holds a saved
    catalog (unless ``fresh``): the call then folds only what is new, alone.

    A checkpoint checked in a part is checked alike after the merge: it reads what it
    names (written before it), and ``keys`` are trusted there as they are (a key trusted
    only through a rotation is left to the merge: more rotations may follow this end).
    What either part folds on after its check (to the other's end) is checked after the
    merge, with the rest.
    """
    if not fresh and await store.head(projection_stream(NAME)) is not None:
        return None
    catalog = Catalog(part=SECOND)
    end, folded = await catch_up(store, catalog, None, now=now)
    await settle(store, catalog, keys)
    return end, folded, catalog


async def in_parts(
    store: EventStore,
    other: OtherPart,
    progress: Progress | None,
    keys: Mapping[str, Ed25519PublicKey],
) -> tuple[Catalog, int | None, int] | None:
    """Every event folded from the start, the first part here and the second by
    ``other`` (or here, should it send nothing), both through one last event, each
    part's checkpoints signed by one of ``keys`` checked (as :func:`second_part` does):
    the catalog, that event's position, and how many events counted. None if a part
    failed to fold here: the caller folds every event in one part, and reports what it
    finds."""
    now = other.now
    try:
        mine = Catalog(part=FIRST)
        end, folded = await catch_up(store, mine, None, progress, now=now)
        await settle(store, mine, keys)  # while the other part may still be folding
        with no_collection():  # the part's rows: acyclic, and many
            sent = other.result()
        if not _whole(sent):
            theirs = Catalog(part=SECOND)
            their_end, their_folded = await catch_up(store, theirs, None, now=now, until=end)
        else:
            assert sent is not None
            their_end, their_folded, theirs = sent
        if _before(their_end, end):
            their_end, more = await catch_up(store, theirs, their_end, now=now, until=end)
            their_folded += more
        elif _before(end, their_end):
            end, more = await catch_up(store, mine, end, now=now, until=their_end)
            folded += more
    except Exception:  # one fold of every event finds the same, and says it
        return None
    if end != their_end:
        return None  # cannot happen: both read the one global order
    mine.merge(theirs)
    return mine, end, folded + their_folded


def _whole(sent: object) -> bool:
    """Whether ``sent`` is what :func:`second_part` returns for a part folded."""
    return (
        isinstance(sent, tuple)
        and len(sent) == 3
        and (sent[0] is None or type(sent[0]) is int)
        and type(sent[1]) is int
        and isinstance(sent[2], Catalog)
        and sent[2].part == SECOND
    )


def _before(one: int | None, other: int | None) -> bool:
    return (-1 if one is None else one) < (-1 if other is None else other)
