"""What ``get_items`` shows: the visible items of a session tree, folded from its events (pure).

A session's items live on its stream and on the subsession streams of its
subagents; every item has a session-wide ``message_index`` and the SDK's flat
history is all items in index order. ``ItemPopped`` hides one item,
``SessionCleared`` hides every item up to an index; nothing is ever removed
from a stream.

:class:`Timeline` holds the newest visible items. It grows at the end as
events are appended (:meth:`Timeline.apply`), and a :class:`Picker` chooses
the newest ``limit`` items from events read backwards, so ``get_items(limit=N)``
reads about N events however long the session is. Hiding is by key and by
index, so pops and clears may be folded in any order relative to the items.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from agentjournal._fastjson import loads as parse_item
from agentjournal._fastjson import orjson_loads
from agentjournal.store.contract import ModelItems, ModelRow


def items_of(entries: list[Entry]) -> list[dict[str, Any]]:
    """Fresh SDK items of ``entries``, as :meth:`Entry.item` gives each, in one pass.

    Plain entries not parsed yet (a read model's, every one after the first hand-out)
    go straight to ``orjson``, all in one call when every entry is such (their texts
    joined as one JSON array, as :func:`_rows_items` parses a read model's rows); at the
    first that cannot, the rest go one by one.
    """
    texts = [entry.item_json for entry in entries if entry.plain and entry.fresh is None]
    if len(texts) == len(entries) > 1:
        try:
            whole: list[dict[str, Any]] = orjson_loads("[" + ",".join(texts) + "]")
        except ValueError:  # NaN, 1e400, a lone surrogate...: entry by entry below
            pass
        else:
            if len(whole) == len(entries):
                return whole
    items: list[dict[str, Any]] = []
    append = items.append
    try:
        for entry in entries:
            if entry.plain and entry.fresh is None:
                append(orjson_loads(entry.item_json))
            else:
                append(entry.item())
    except ValueError:
        items.extend(entry.item() for entry in entries[len(items) :])
    return items


def model_items(rows: Sequence[ModelRow], plain: bool) -> list[dict[str, Any]]:
    """Fresh SDK items of a read model's rows (``plain``: the snapshot's mark), as a full
    read of them gives (a fork looks for a turn's user message among them)."""
    return _rows_items(rows, plain)


def _rows_items(rows: Sequence[ModelRow], plain: bool) -> list[dict[str, Any]]:
    """Fresh SDK items of a read model's rows, as :func:`items_of` gives them for entries
    made with ``plain`` (``orjson`` when plain, else :func:`parse_item`, which checks).

    Items a store read in one row (:class:`ModelItems` with its texts joined) are parsed
    as one JSON array, one ``orjson`` call for all: the same values, since each text is
    one JSON value (else the count differs or the parse fails, and each row is parsed
    on its own, which fails as it would have) and none holds 19 digits in a row.
    """
    if not plain:
        return [parse_item(text) for _, _, text in rows]
    if isinstance(rows, ModelItems) and rows.texts is not None:
        try:
            whole: list[dict[str, Any]] = orjson_loads("[" + rows.texts + "]")
        except ValueError:  # NaN, 1e400, a lone surrogate...: row by row below
            pass
        else:
            if len(whole) == len(rows):
                return whole
    items: list[dict[str, Any]] = []
    append = items.append
    try:
        for _, _, text in rows:
            append(orjson_loads(text))
    except ValueError:  # NaN, 1e400, a lone surrogate...: the rest one by one, as Entry.item
        items.extend(
            Entry("", 0, 0, 0, text, None, True).item() for _, _, text in rows[len(items) :]
        )
    return items


def _last_rows(rows: Sequence[ModelRow], n: int) -> Sequence[ModelRow]:
    """The newest ``n`` (> 0) rows (of a :class:`ModelItems`, without making the rest)."""
    return rows.last(n) if isinstance(rows, ModelItems) else rows[-n:]


def _entries_of(rows: Sequence[ModelRow], names: Mapping[int, str], plain: bool) -> list[Entry]:
    return [
        Entry(names[key >> 40], (key >> 8) & 0xFFFF_FFFF, key & 0xFF, index, text, None, plain)
        for index, key, text in rows
    ]


Key: TypeAlias = tuple[str, int, int]
"""Where an item lives: (stream, revision, part). ``part`` is 0 except for
foreign events that rebuild into several SDK items."""


@dataclass(slots=True)
class Entry:
    """One visible item.

    Attributes:
        stream: The stream its event is on.
        revision: Its event's revision there.
        part: Which item of that event (0 unless a foreign event holds several).
        index: Its session-wide ``message_index`` (-1 if a foreign writer gave none).
        item_json: The SDK item as JSON, exactly as it was written.
        fresh: The item already parsed from ``item_json`` and not yet handed
            out; the first :meth:`item` call takes it, saving a parse.
        plain: ``item_json`` is known to hold no 19 digits in a row, so ``orjson``
            reads it exactly (see :func:`parse_item`) without the check.
    """

    stream: str
    revision: int
    part: int
    index: int
    item_json: str
    fresh: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    plain: bool = field(default=False, compare=False, repr=False)

    @property
    def key(self) -> Key:
        return (self.stream, self.revision, self.part)

    def item(self) -> dict[str, Any]:
        """Return a fresh copy of the SDK item (callers may mutate it)."""
        fresh, self.fresh = self.fresh, None
        if fresh is not None:
            return fresh
        item: dict[str, Any]
        if self.plain:
            try:
                item = orjson_loads(self.item_json)
                return item
            except ValueError:
                pass  # NaN, 1e400, a lone surrogate...: json reads them
        item = parse_item(self.item_json)
        return item


@dataclass(frozen=True, slots=True)
class Pop:
    """An ``ItemPopped`` event: the item at ``key`` is no longer visible.

    Attributes:
        key: Where the item lives.
        index: Its ``message_index`` (-1: not known); the store's read model finds it by it.
    """

    key: Key
    index: int = field(default=-1, compare=False)


@dataclass(frozen=True, slots=True)
class Clear:
    """A ``SessionCleared`` event: no item up to ``through_index`` is visible."""

    through_index: int


TimelineEvent: TypeAlias = Entry | Pop | Clear


ENTRY_BYTES: Final = 150
"""What an entry costs beside its item's text, as :meth:`Timeline.bound` counts: the
:class:`Entry` object and its numbers (measured: ``bench/session.py``, case (e))."""


_TEXT: Final = operator.attrgetter("item_json")
_ROW_TEXT: Final = operator.itemgetter(2)


def _cost(entry: Entry) -> int:
    return ENTRY_BYTES + len(entry.item_json)


class Timeline:
    """The newest visible items of a session, oldest first.

    Args:
        budget: The bytes its entries may hold after :meth:`bound` (item texts plus
            :data:`ENTRY_BYTES` each); None: no bound.
    """

    def __init__(self, budget: int | None = None) -> None:
        self._entries: list[Entry] = []
        # A read model's rows not made into entries yet (they come before ``_entries``,
        # which is then empty): a full read hands out their items without an Entry each;
        # anything else that looks at the entries makes them first (:attr:`entries`).
        self._rows: Sequence[ModelRow] = ()
        self._names: Mapping[int, str] = {}
        self._plain = False
        self.complete = False
        self.hidden: set[Key] = set()  # popped items older than `entries`
        self.floor = -1  # the highest index a clear has hidden
        self.budget = budget
        self.size = 0  # the entries' cost, kept up to date by every change

    @property
    def entries(self) -> list[Entry]:
        """The entries, oldest first (a read model's rows are made into entries first)."""
        if self._rows:
            self._entries = _entries_of(self._rows, self._names, self._plain)
            self._rows = ()
        return self._entries

    @entries.setter
    def entries(self, entries: list[Entry]) -> None:
        self._rows = ()
        self._entries = entries

    def __len__(self) -> int:
        return len(self._rows) + len(self._entries)

    @classmethod
    def whole(cls, entries: list[Entry], floor: int) -> Timeline:
        """Every visible item of a session (complete), oldest first, as a read model
        holds them: what :func:`fold` makes of all of its events, with the highest
        index a clear hid (``floor``)."""
        timeline = cls()
        timeline.entries = entries
        timeline.size = len(entries) * ENTRY_BYTES + sum(map(len, map(_TEXT, entries)))
        timeline.floor = floor
        timeline.complete = True
        return timeline

    @classmethod
    def modelled(
        cls, rows: Sequence[ModelRow], names: Mapping[int, str], floor: int, plain: bool
    ) -> Timeline:
        """:meth:`whole` of a read model's rows, each made into an :class:`Entry` (stream
        number to name by ``names``, ``plain`` as given) only when something needs it: a
        full read (:meth:`items`) needs none. Every row's stream must be in ``names``."""
        timeline = cls()
        timeline._rows, timeline._names, timeline._plain = rows, names, plain
        chars = (
            rows.chars() if isinstance(rows, ModelItems) else sum(map(len, map(_ROW_TEXT, rows)))
        )
        timeline.size = len(rows) * ENTRY_BYTES + chars
        timeline.floor = floor
        timeline.complete = True
        return timeline

    def items(self, limit: int | None) -> list[dict[str, Any]]:
        """Fresh SDK items of :meth:`latest` ``(limit)``, oldest first."""
        rows = self._rows
        if not rows:
            return items_of(self.latest(limit))
        if limit is not None:
            rows = _last_rows(rows, limit) if limit > 0 else ()
        return _rows_items(rows, self._plain)

    def apply(self, event: TimelineEvent) -> None:
        """Fold in an event appended after everything the timeline was built from."""
        if isinstance(event, Entry):
            if event.key in self.hidden:
                self.hidden.discard(event.key)
            elif not 0 <= event.index <= self.floor:
                self.entries.append(event)
                self.size += _cost(event)
        elif isinstance(event, Pop):
            for position in range(len(self.entries) - 1, -1, -1):
                if self.entries[position].key == event.key:
                    self.size -= _cost(self.entries[position])
                    del self.entries[position]
                    return
            self.hidden.add(event.key)
        else:
            # Everything written before a clear is hidden; indexless items of other
            # writers that are already here were written before it too.
            self.floor = max(self.floor, event.through_index)
            self.entries = [e for e in self.entries if e.index > self.floor]
            self.size = sum(map(_cost, self.entries))
            self.hidden.clear()
            self.complete = True

    def bound(self) -> None:
        """Drop the oldest entries until the rest fit the budget.

        What is dropped is only forgotten, never hidden: the timeline stops being
        complete, so a read that needs older items reads them from the store again
        (a window backwards, or the whole tree), exactly as on a cold start. A pop of
        a dropped item is remembered in ``hidden`` like that of any older item.
        """
        if self.budget is None or self.size <= self.budget:
            return
        rows = self._rows
        # A read model's rows are cut as rows: no Entry is made only to be dropped.
        costs = (ENTRY_BYTES + len(row[2]) for row in rows) if rows else map(_cost, self._entries)
        size, cut = self.size, 0
        for cost in costs:
            if size <= self.budget:
                break
            size -= cost
            cut += 1
        if rows:
            self._rows = rows[cut:]
        else:
            del self._entries[:cut]
        self.size = size
        self.complete = False

    def latest(self, limit: int | None) -> list[Entry]:
        """Return the newest ``limit`` entries (all when None), oldest first."""
        if limit is not None and 0 < limit < len(self._rows) and not self._entries:
            # A few of a read model's newest rows (a pop, a windowed read): only those
            # become entries here; the rest stay rows until something needs them.
            return _entries_of(_last_rows(self._rows, limit), self._names, self._plain)
        if limit is None:
            return list(self.entries)
        if limit <= 0:
            return []
        return self.entries[-limit:]

    def covers(self, limit: int | None) -> bool:
        """Return True if :meth:`latest` can answer ``limit`` without older events."""
        return self.complete or (limit is not None and len(self) >= limit)

    def take(self, picker: Picker) -> None:
        """Replace the contents with a window read backwards (see :class:`Picker`)."""
        self.entries = list(reversed(picker.picked))
        self.size = sum(map(_cost, self.entries))
        self.complete = picker.complete
        self.hidden = picker.hidden
        self.floor = picker.floor

    def reset(self) -> None:
        """Forget everything (the next read rebuilds from the store)."""
        self.entries, self.complete, self.hidden, self.floor = [], False, set(), -1
        self.size = 0


class Picker:
    """Picks the newest ``limit`` visible items from events fed newest first.

    Feed items by descending ``message_index``, each pop and clear before the
    items it hides (both are always written after them). :meth:`feed` returns
    False once the window is full or a clear has cut the rest off.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.picked: list[Entry] = []  # newest first
        self.hidden: set[Key] = set()
        self.floor = -1
        self.complete = True
        self._cleared = False

    def feed(self, event: TimelineEvent) -> bool:
        """Take one more (older) event; False when no older event can matter."""
        if isinstance(event, Pop):
            self.hidden.add(event.key)
        elif isinstance(event, Clear):
            self._cleared = True
            self.floor = max(self.floor, event.through_index)
        elif self._cleared and event.index <= self.floor:
            return False  # this item and everything older were cleared
        elif event.key in self.hidden:
            self.hidden.discard(event.key)
        elif self.limit is not None and len(self.picked) >= self.limit:
            self.complete = False
            return False
        else:
            self.picked.append(event)
        return True


def fold(timeline: Timeline, new: list[TimelineEvent]) -> None:
    """Apply events read from several streams: items by index, then what hides them.

    Pops hide by key and clears by index, so this order gives the same result
    as applying everything in the order it was written.
    """
    # ``new`` holds each stream's events in stream order; an item another writer
    # left without an index sorts right after the indexed item before it.
    last: dict[str, int] = {}
    keyed: list[tuple[int, int, int, Entry]] = []
    for order, entry in enumerate(e for e in new if isinstance(e, Entry)):
        if entry.index >= 0:
            last[entry.stream] = entry.index
            keyed.append((entry.index, 0, order, entry))
        else:
            keyed.append((last.get(entry.stream, -1), 1, order, entry))
    for *_, entry in sorted(keyed, key=lambda k: k[:3]):
        timeline.apply(entry)
    for hiding in new:
        if not isinstance(hiding, Entry):
            timeline.apply(hiding)
