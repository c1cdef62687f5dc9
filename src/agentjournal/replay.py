"""What ``get_items`` shows: the visible items of a session, rebuilt from its events (pure).

A session stream holds item events, ``ItemPopped`` events (hide one earlier item)
and ``SessionCleared`` events (hide everything before them). Nothing is ever
removed from the stream; :class:`Timeline` folds those events into the list the
SDK sees.

A timeline may hold only the newest part of the history: it is filled forwards
as events are appended and extended backwards on demand, so ``get_items(limit=N)``
reads about N events however long the session is. ``complete`` says whether it
reaches back to the start (or to a clear).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = ["Clear", "Entry", "Pop", "Timeline", "TimelineEvent"]

Key: TypeAlias = tuple[str, int, int]
"""Where an item lives: (stream, revision, part). ``part`` is 0 except for
foreign events that rebuild into several SDK items."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One visible item.

    Attributes:
        stream: The stream its event is on.
        revision: Its event's revision there.
        part: Which item of that event (0 unless a foreign event holds several).
        index: Its session-wide ``message_index``.
        item_json: The SDK item as JSON, exactly as it was written.
    """

    stream: str
    revision: int
    part: int
    index: int
    item_json: str

    @property
    def key(self) -> Key:
        return (self.stream, self.revision, self.part)

    def item(self) -> dict[str, Any]:
        """Return a fresh copy of the SDK item (callers may mutate it)."""
        item: dict[str, Any] = json.loads(self.item_json)
        return item


@dataclass(frozen=True, slots=True)
class Pop:
    """An ``ItemPopped`` event: the item at ``key`` is no longer visible."""

    key: Key


@dataclass(frozen=True, slots=True)
class Clear:
    """A ``SessionCleared`` event: nothing before it is visible."""


TimelineEvent: TypeAlias = Entry | Pop | Clear


class Timeline:
    """The newest visible items of a session, oldest first."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.complete = False
        # Pops met while reading backwards whose items are older than `entries`.
        self._hidden: set[Key] = set()

    def apply(self, event: TimelineEvent) -> None:
        """Apply an event appended after everything the timeline has seen."""
        if isinstance(event, Entry):
            self.entries.append(event)
        elif isinstance(event, Pop):
            for position in range(len(self.entries) - 1, -1, -1):
                if self.entries[position].key == event.key:
                    del self.entries[position]
                    return
            self._hidden.add(event.key)
        else:
            self.entries.clear()
            self._hidden.clear()
            self.complete = True

    def extend_backwards(
        self, newest_first: Iterable[TimelineEvent], *, reached_start: bool
    ) -> None:
        """Add older events, read newest first, in front of the current entries.

        Args:
            newest_first: Events older than everything the timeline holds.
            reached_start: True when these events go back to the stream's start.
        """
        older: list[Entry] = []
        for event in newest_first:
            if isinstance(event, Clear):
                self.complete = True
                break
            if isinstance(event, Pop):
                self._hidden.add(event.key)
            elif event.key in self._hidden:
                self._hidden.discard(event.key)
            else:
                older.append(event)
        else:
            self.complete = self.complete or reached_start
        older.reverse()
        self.entries[:0] = older

    def latest(self, limit: int | None) -> list[Entry]:
        """Return the newest ``limit`` entries (all when None), oldest first."""
        if limit is None:
            return list(self.entries)
        if limit <= 0:
            return []
        return self.entries[-limit:]

    def covers(self, limit: int | None) -> bool:
        """Return True if :meth:`latest` can answer ``limit`` without older events."""
        if self.complete:
            return True
        return limit is not None and len(self.entries) >= limit

    def reset(self) -> None:
        """Forget everything (the next read rebuilds from the store)."""
        self.entries.clear()
        self._hidden.clear()
        self.complete = False
