"""The store's optional abilities: what a backend may do beyond the contract, declared.

A backend declares an ability by naming its Protocol among its bases
(``class SQLiteEventStore(ReadModel, HeadsProbe, ...)``); :func:`abilities_of` is the
one place that reads the declarations, and every caller asks it instead of probing
the store. The declaration is read from the store's class, never through the object:
a wrapper that passes other calls on (``__getattr__``) has none of its inner store's
abilities, so it sees every read and every append as it did before the ability
existed. A read model is in force only where the class whose ``read_model`` is in force
also defines the ``append`` and ``append_many`` in force: a subclass that intercepts
appends (and may rebuild them without their model changes) writes and reads events
only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from agentjournal.store.contract import ModelSnapshot, RecordedEvent

__all__ = [
    "Abilities",
    "BatchedReads",
    "HeadsProbe",
    "Purge",
    "ReadModel",
    "RevisionIndex",
    "TypedReads",
    "abilities_of",
]


class ReadModel(Protocol):
    """Keeps the read model the engine writes with each append and reads whole."""

    async def read_model(self, tree: str) -> ModelSnapshot | None:
        """The read model of the tree rooted at ``tree``, or None when it is not current."""
        ...


class HeadsProbe(Protocol):
    """Answers the heads of some streams at once, on the calling thread."""

    def heads_now(self, streams: Sequence[str]) -> dict[str, int] | None:
        """Each existing stream's head, or None when that cannot be answered at once."""
        ...


class BatchedReads(Protocol):
    """Reads several whole streams in one trip."""

    async def read_streams(
        self, reads: Sequence[tuple[str, int | None]]
    ) -> list[list[RecordedEvent] | None]:
        """Per (stream, limit) pair, its events from revision 0, or None: no such stream."""
        ...


class RevisionIndex(Protocol):
    """Finds a stream's last revision before a global position in one query."""

    async def revision_at(self, stream: str, position: int) -> int:
        """The revision of ``stream``'s last event before ``position`` (-1: none)."""
        ...


class TypedReads(Protocol):
    """Reads a stream's events of some types only."""

    async def read_types(
        self, stream: str, after: int, types: Sequence[str]
    ) -> list[RecordedEvent]:
        """``stream``'s events after ``after`` whose type is one of ``types``."""
        ...


class Purge(Protocol):
    """Removes the plaintext copies it keeps beside the events (an erasure's last step)."""

    async def purge(self, streams: Sequence[str]) -> None:
        """Drop every derived copy of ``streams``' items (the read model's rows), so that
        their bytes are gone from the store's files, free pages and write-ahead log."""
        ...


@dataclass(frozen=True, slots=True)
class Abilities:
    """What one store declares beyond the contract; None where it declares nothing."""

    read_model: ReadModel | None = None
    heads: HeadsProbe | None = None
    batched: BatchedReads | None = None
    revisions: RevisionIndex | None = None
    typed: TypedReads | None = None
    purge: Purge | None = None


def _declares(kind: type, ability: type) -> type | None:
    """The class of ``kind``'s MRO that names ``ability`` as a base, if any."""
    return next((c for c in kind.__mro__ if ability in c.__bases__), None)


def abilities_of(store: object) -> Abilities:
    """The abilities ``store``'s class declares (see the module docs)."""
    kind = type(store)
    # The class whose read_model is in force, when one declares the ability.
    owner = _declares(kind, ReadModel) and next(c for c in kind.__mro__ if "read_model" in vars(c))
    keeps_model = owner is not None and all(
        name in vars(owner) and getattr(kind, name) is vars(owner)[name]
        for name in ("append", "append_many")
    )
    return Abilities(
        read_model=store if keeps_model else None,  # type: ignore[arg-type]
        heads=store if _declares(kind, HeadsProbe) else None,  # type: ignore[arg-type]
        batched=store if _declares(kind, BatchedReads) else None,  # type: ignore[arg-type]
        revisions=store if _declares(kind, RevisionIndex) else None,  # type: ignore[arg-type]
        typed=store if _declares(kind, TypedReads) else None,  # type: ignore[arg-type]
        purge=store if _declares(kind, Purge) else None,  # type: ignore[arg-type]
    )
