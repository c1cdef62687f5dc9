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
