"""The session trees in parts, projected apart and put back in one order (pure, no I/O).

A one-shot export of every tree can fold its trees in several processes: each part folds
the events of its own trees (:class:`Part`, by a digest of the session id: a branch is on
its session's part) and, of the other parts' trees, only what changes which tree a stream
is on (the lines), so each of its trees folds as it does in one projector
(:meth:`~agentjournal.read.traces.Projector.skips`). A span is placed by what sent it:
the event that ended it (its global position), or the end of the export (its tree's key);
:func:`in_order` puts the parts' spans back in the one projector's order.
"""

from __future__ import annotations

import heapq
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

Place = tuple[int, int, str]
"""Where a span was sent: ``(0, position, "")`` by the event at ``position``, else
``(FINISHED, 0, tree key)`` at the end."""
FINISHED = 1

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Part:
    """One of ``count`` parts of the session trees (``index`` from 0)."""

    index: int
    count: int

    def owns(self, session: str) -> bool:
        """Whether this part folds ``session``'s trees (its main line and every branch)."""
        return zlib.crc32(session.encode("utf-8", "surrogatepass")) % self.count == self.index


def in_order(parts: Iterable[Sequence[tuple[Place, T]]]) -> list[T]:
    """The parts' placed items in one order: by the event that sent them, then the
    finished ones by tree; each part's own order is kept (a part's items are in order)."""
    return [item for _, item in heapq.merge(*parts, key=lambda placed: placed[0])]
