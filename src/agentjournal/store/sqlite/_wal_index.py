"""The header of a SQLite file's WAL index (its ``-shm`` file), read without SQLite.

In WAL mode every commit, by any connection of any process, rewrites this header
(https://www.sqlite.org/walformat.html, "The WAL-Index Header"): 48 bytes written twice,
the second copy first, holding among others a counter of commits (``iChange``), the
last committed frame (``mxFrame``), the WAL's salts and the checksum of its frames up to
that frame. Equal bytes read at two moments therefore mean the same committed content
(:meth:`SQLiteEventStore.heads_now` answers from what it knows of that content without
starting a read transaction, which costs more after every commit). A read whose two
copies differ (a commit writing them meanwhile), of a header not yet initialised, of
another version or of a file that is not there gives None: the caller asks SQLite.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from typing import Final

_HEADER: Final = 48
_VERSION: Final = 3007000  # iVersion, the WAL-index format SQLite writes
_FIELDS: Final = struct.Struct("=III?xHI")
"""iVersion, unused, iChange, isInit, (bigEndCksum), szPage, mxFrame, in native order."""


class WalIndex:
    """One file descriptor of a WAL index, owned by one thread (or guarded by its lock)."""

    __slots__ = ("_fd",)

    def __init__(self, database: str) -> None:
        """Open ``database``'s ``-shm`` file read-only (OSError: none to open)."""
        flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)
        self._fd: int | None = os.open(database + "-shm", flags)

    def header(self) -> bytes | None:
        """The header as the last commit wrote it, or None (not known for sure)."""
        fd = self._fd
        if fd is None:
            return None
        try:
            raw = os.pread(fd, 2 * _HEADER, 0)
        except OSError:
            return None
        if len(raw) != 2 * _HEADER:
            return None
        first = raw[:_HEADER]
        if first != raw[_HEADER:]:
            return None
        version, _unused, _changes, initialised, _page, frames = _FIELDS.unpack_from(first)
        if version != _VERSION or not initialised or frames == 0:
            # An empty WAL (after a checkpoint that emptied it): a header SQLite rebuilds
            # then comes out the same bytes each time, with a commit between or not.
            return None
        return first

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def commits(header: bytes) -> int:
    """The header's commit counter (``iChange``): one more for each commit."""
    return int(_FIELDS.unpack_from(header)[2])


def open_wal_index(database: str) -> WalIndex | None:
    """``database``'s WAL index, or None when it cannot be opened (or read: no
    ``os.pread`` on this system)."""
    if not hasattr(os, "pread"):
        return None
    try:
        return WalIndex(database)
    except OSError:
        return None


class KnownHeads:
    """Streams' heads as of one WAL index header: true as long as the header is unchanged
    (equal bytes: no commit since). Replaced whole, never changed in place, so a reader on
    another thread sees one header with its own heads."""

    __slots__ = ("_known",)

    LIMIT: Final = 1024
    """At most this many streams' heads are kept."""

    def __init__(self) -> None:
        self._known: tuple[bytes, dict[str, int]] | None = None

    def answer(self, header: bytes | None, streams: Sequence[str]) -> dict[str, int] | None:
        """The heads of ``streams`` (those that exist) if ``header`` is the one they are
        known at and every one of them is known; None otherwise."""
        known = self._known
        if header is None or known is None or known[0] != header:
            return None
        heads = known[1]
        if not all(stream in heads for stream in streams):
            return None
        return {stream: heads[stream] for stream in streams if heads[stream] >= 0}

    def learn(self, header: bytes, heads: dict[str, int], *, since: bytes) -> None:
        """Keep ``heads`` (-1: no such stream) as true of the content ``header`` names, with
        what was known of the content ``since`` names (the same, or the one just before a
        commit that moved only ``heads`` made it ``header``'s) when that is what is known."""
        known = self._known
        if known is not None and known[0] == since and len(known[1]) < self.LIMIT:
            heads = {**known[1], **heads}
        self._known = (header, heads)

    def committed(self, before: bytes | None, after: bytes | None, moved: dict[str, int]) -> None:
        """Learn the heads a commit moved (``moved``), begun at header ``before`` and read
        ``after`` it: only when ``after`` is the very next commit's (another connection's
        commit between, or any doubt, and nothing is learnt)."""
        if before is None or after is None or not moved:
            return
        if commits(after) != (commits(before) + 1) & 0xFFFFFFFF:
            return
        self.learn(after, moved, since=before)
