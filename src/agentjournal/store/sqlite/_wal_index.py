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
Which file's index to read is the one thing asked of SQLite (:func:`wal_index_of`).
"""

from __future__ import annotations

import os
import sqlite3
import struct
from collections.abc import Sequence
from typing import Final

_HEADER: Final = 48
_VERSION: Final = 3007000  # iVersion, the WAL-index format SQLite writes
_FIELDS: Final = struct.Struct("=III?xHI")
"""iVersion, unused, iChange, isInit, (bigEndCksum), szPage, mxFrame, in native order."""


class WalIndex:
    """The WAL index of one file, read through the descriptor SQLite holds open on it in
    this process; owned by one thread (or guarded by its lock).

    It never opens or closes a descriptor of its own: closing any descriptor of a file
    drops every POSIX lock this process holds on that file
    (https://www.sqlite.org/howtocorrupt.html, "Posix advisory locks canceled by a
    separate thread doing close()"), SQLite's locks on the ``-shm`` included, which would
    let another process take the write lock or rebuild the index under this one's
    connections. SQLite keeps one descriptor per ``-shm`` file in a process for as long
    as a connection that has read the database in WAL mode is open there, so the borrowed
    one stays valid while the caller's connection (one that has) does; each read also
    checks it is still that file.
    """

    __slots__ = ("_fd", "_file")

    def __init__(self, fd: int, file: tuple[int, int]) -> None:
        self._fd: int | None = fd
        self._file = file

    def header(self) -> bytes | None:
        """The header as the last commit wrote it, or None (not known for sure)."""
        fd = self._fd
        if fd is None:
            return None
        try:
            raw = os.pread(fd, 2 * _HEADER, 0)
            status = os.fstat(fd)
        except OSError:
            return None
        if (status.st_dev, status.st_ino) != self._file or len(raw) != 2 * _HEADER:
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
        """Stop reading; the descriptor is SQLite's and stays open."""
        self._fd = None


def commits(header: bytes) -> int:
    """The header's commit counter (``iChange``): one more for each commit."""
    return int(_FIELDS.unpack_from(header)[2])


def open_wal_index(database: str) -> WalIndex | None:
    """``database``'s WAL index as SQLite has it open in this process (call it with a
    connection to ``database`` open, one that has read it), or None: no ``-shm`` file,
    no descriptor of SQLite's on it, no way to list this process's descriptors or no
    ``os.pread`` on this system."""
    if not hasattr(os, "pread"):
        return None
    try:
        status = os.stat(database + "-shm")
    except OSError:
        return None
    file = (status.st_dev, status.st_ino)
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(listing)
        except OSError:
            continue
        for name in names:
            try:
                fd = int(name)
                found = os.fstat(fd)
            except (ValueError, OSError):
                continue  # the listing's own descriptor, closed by now
            if (found.st_dev, found.st_ino) == file:
                return WalIndex(fd, file)
        return None
    return None


def wal_index_of(db: sqlite3.Connection) -> WalIndex | None:
    """The WAL index SQLite keeps for ``db``'s file: beside the file SQLite opened, which
    is not the path given when that is a symlink (SQLite follows it)."""
    try:
        file = db.execute("PRAGMA database_list").fetchone()[2]
    except sqlite3.Error:
        return None
    return open_wal_index(file) if file else None


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
