"""The read model's records: the changes a write makes to a tree's items, and a snapshot."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias, overload

from agentjournal.store._events import RecordedEvent


@dataclass(frozen=True, slots=True)
class ModelAdd:
    """A read model change: the item at ``index`` is visible (see :class:`ModelChange`).

    Attributes:
        index: Its session-wide ``message_index`` (>= 0).
        stream: The stream of the event that holds it.
        revision: That event's revision.
        part: Which item of that event (0 unless an event holds several).
        text: The item's exact JSON text.
        plain: The writer's mark that ``text`` is plain for a fast JSON parser (for
            agentjournal: no 19 digits in a row); a snapshot says whether every item
            ever added to its tree was so marked (:attr:`ModelSnapshot.plain`).
    """

    index: int
    stream: str
    revision: int
    part: int
    text: str
    plain: bool = False


@dataclass(frozen=True, slots=True)
class ModelRemove:
    """A read model change: the item at ``index``, held at (stream, revision, part), is hidden."""

    index: int
    stream: str
    revision: int
    part: int


@dataclass(frozen=True, slots=True)
class ModelClear:
    """A read model change: every item up to ``through_index`` is hidden, and no item
    added later at or below it is visible."""

    through_index: int


@dataclass(frozen=True, slots=True)
class ModelCopy:
    """A read model change that starts a new tree as another tree's prefix (a branch,
    DESIGN, "Branches"): the ``source`` tree's visible items below index ``below`` become
    this tree's, each at the same place (the source's stream, revision and part) with the
    same text, and the source's clear floor and plain mark with them.

    Only as the first op of the request that creates the tree's root stream. The copy is
    applied only if, at that moment (after the requests before it in the same write),
    every stream of the source tree is current and exactly at ``heads``, one entry per
    stream; otherwise (or anywhere else) the new tree is not current, and its reads take
    the events. A writer sends it only when it knows the source's rows below ``below``
    are exactly the items visible at the new tree's start.

    Attributes:
        source: The source tree's root stream.
        below: Rows with an index below this are copied.
        heads: Every stream of the source tree -> the revision it must be at.
    """

    source: str
    below: int
    heads: Mapping[str, int]


ModelOp: TypeAlias = ModelAdd | ModelRemove | ModelClear | ModelCopy
"""One change to a tree's visible items."""


@dataclass(frozen=True, slots=True)
class ModelChange:
    """What a request does to its tree's read model (a store without one ignores it).

    Attributes:
        tree: The tree's root stream (a session's stream names its tree).
        ops: The changes, applied in order, after every request of the write has
            been appended; a request of the tree that changes nothing visible
            still carries its tree (no ops), so the stream stays current.
    """

    tree: str
    ops: Sequence[ModelOp] = ()


MODEL_PARTS: Final = 256
"""A read model keeps items of parts below this (a part is 0 unless an event holds several
items); an item of a higher part makes its tree not current (the events answer)."""

MODEL_REVISIONS: Final = 1 << 32
"""A read model answers for trees whose streams' revisions are below this (else None)."""


def model_key(stream: int, revision: int, part: int) -> int:
    """A read model item's place, (stream number, revision, part), packed in one integer
    (:attr:`ModelSnapshot.items`): ``stream << 40 | revision << 8 | part``, for a
    revision below :data:`MODEL_REVISIONS` and a part below :data:`MODEL_PARTS`."""
    return stream << 40 | revision << 8 | part


def model_place(key: int) -> tuple[int, int, int]:
    """The (stream number, revision, part) packed in ``key`` (:func:`model_key`)."""
    return key >> 40, (key >> 8) & 0xFFFF_FFFF, key & 0xFF


ModelRow: TypeAlias = tuple[int, int, str]
"""A read model's item: ``(index, key, text)``, the key its place (:func:`model_key`)."""

_JOIN: Final = ",\n"


class ModelItems(Sequence[ModelRow]):
    """A read model's visible items by ascending index (:attr:`ModelSnapshot.items`), as
    a store read them: a sequence of ``(index, key, text)`` rows, made only when asked.

    A store that reads them in one row (SQLite: one aggregate, no row per item) gives
    :meth:`joined`: every text in order joined by ``",\n"``, which no text holds, so that
    ``"[" + texts + "]"`` is the JSON array of the items (one parse for all) and the texts
    split back exactly; the keys and indexes as comma-separated decimals (or a ``range``
    of indexes when they have no gap), parsed only when rows are made. :meth:`of_rows`
    holds rows as they are (a text with a newline, a store that reads rows).
    """

    __slots__ = ("_indexes", "_keys", "_length", "_rows", "texts")

    def __init__(
        self,
        texts: str | None,
        keys: str,
        indexes: str | range,
        count: int,
        rows: list[ModelRow] | None = None,
    ) -> None:
        self.texts = texts
        """Every item's text in index order joined by ``",\n"`` (None: held as rows)."""
        self._length = count
        self._keys = keys
        self._indexes = indexes
        self._rows = rows

    @classmethod
    def joined(cls, texts: str, keys: str, indexes: str | range, count: int) -> ModelItems:
        """Items read in one row: ``count`` texts joined by ``",\n"`` (none holding a
        newline), their keys and indexes (comma-separated, or a range of indexes)."""
        return cls(texts, keys, indexes, count)

    @classmethod
    def of_rows(cls, rows: Sequence[ModelRow]) -> ModelItems:
        """Items held as ``(index, key, text)`` rows."""
        return cls(None, "", "", len(rows), list(rows))

    def rows(self) -> list[ModelRow]:
        """Every item as an ``(index, key, text)`` row (made once)."""
        if self._rows is None:
            if not self._length:
                self._rows = []
            else:
                assert self.texts is not None
                self._rows = list(
                    zip(
                        _numbers(self._indexes),
                        map(int, self._keys.split(",")),
                        self.texts.split(_JOIN),
                        strict=True,
                    )
                )
        return self._rows

    def last(self, n: int) -> list[ModelRow]:
        """The newest ``n`` (> 0) items as rows, without making the others'."""
        if self._rows is not None or self.texts is None or n >= self._length:
            return self.rows()[-n:]
        indexes = self._indexes
        return list(
            zip(
                indexes[-n:] if isinstance(indexes, range) else _numbers(indexes, n),
                map(int, self._keys.rsplit(",", n)[-n:]),
                self.texts.rsplit(_JOIN, n)[-n:],
                strict=True,
            )
        )

    def chars(self) -> int:
        """The length of every item's text together."""
        if self._rows is not None or self.texts is None:
            return sum(len(text) for _, _, text in self.rows())
        return len(self.texts) - len(_JOIN) * (self._length - 1) if self._length else 0

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> ModelRow: ...
    @overload
    def __getitem__(self, index: slice) -> list[ModelRow]: ...
    def __getitem__(self, index: int | slice) -> ModelRow | list[ModelRow]:
        return self.rows()[index]

    def __iter__(self) -> Iterator[ModelRow]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return self.rows() == list(other)

    __hash__ = None  # type: ignore[assignment]  # mutable rows cache: not hashable

    def __repr__(self) -> str:
        return f"ModelItems({self.rows()!r})"


def _numbers(text: str | range, last: int | None = None) -> Sequence[int]:
    """Comma-separated decimals as integers (only the ``last`` ones if given); a range
    as it is."""
    if isinstance(text, range):
        return text if last is None else text[-last:]
    if last is None:
        return list(map(int, text.split(",")))
    return list(map(int, text.rsplit(",", last)[-last:]))


@dataclass(frozen=True, slots=True)
class ModelSnapshot:
    """A tree's read model as of one moment (``read_model``, one read transaction).

    Attributes:
        heads: Every stream of the tree -> its last revision.
        last: The last event of the tree's root stream (the other streams' last events,
            where a reader needs them, are read apart and must be at :attr:`heads`).
        names: Stream number -> name, for :attr:`items`.
        items: The visible items by ascending index, each ``(index, key, text)``: the
            key is where the item lives packed in one integer, :func:`model_key`; a
            :class:`ModelItems` when the store read them in one row (SQLite).
        floor: The highest index a clear has hidden (-1: none).
        plain: Every item ever added to the tree was marked ``plain``
            (:attr:`ModelAdd.plain`).
    """

    heads: Mapping[str, int]
    last: RecordedEvent
    names: Mapping[int, str]
    items: Sequence[ModelRow]
    floor: int
    plain: bool
