"""A SQLite store this process cannot write: how that is told, what it says, and the guard
of a store read as SQLite's unchanging (``immutable``) file.

A reader of a WAL file keeps the WAL index in ``PATH-shm`` beside it. Where this process
cannot write the folder and no ``-shm`` is there (no writer has the store open), SQLite can
read the file only as an unchanging one, with no locks and nothing to coordinate with a
writer: exact only while nobody writes it. Whoever can write the folder (its owner) still
can, so every read of such a store is guarded (:class:`Unchanging`): answered only if the
file was not written before or while it ran, else refused, to be run again.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import TypeVar

from agentjournal.errors import StoreUnavailable

_T = TypeVar("_T")


class UnchangingConnection(sqlite3.Connection):
    """A connection to a store file read as SQLite's unchanging file (``immutable=1``)."""


def writable_here(path: str) -> bool:
    """Whether this process may write the existing store at ``path``: the file itself, and
    either its folder or both files SQLite keeps beside it in WAL mode (``-wal``, ``-shm``)."""
    if not os.access(path, os.W_OK):
        return False
    if os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
        return True
    return all(os.access(f"{path}{suffix}", os.W_OK) for suffix in ("-wal", "-shm"))


def refused_write(path: str, file: str) -> str:
    """Why a write to the store ``path`` (SQLite's ``file``) is refused: it is read-only
    here, naming what cannot be written (the folder, else the file)."""
    folder = os.path.dirname(file)
    cannot = folder if not os.access(folder, os.W_OK) else path
    return (
        f"SQLite store {path} is read-only here, as {cannot} cannot be written: nothing was written"
    )


def old_schema(path: str, version: int, current: int) -> str:
    """Why a store of an earlier schema version cannot be opened read-only: its upgrade is
    a write."""
    return (
        f"cannot open SQLite store {path} here: it has schema version {version}, upgraded "
        f"to {current} when first opened where it can be written, and it cannot be written here"
    )


def _stamp(file: str) -> tuple[int, int, int, bool, bool]:
    """What a write changes: the file's inode, size and modification time, and whether
    the files a writer keeps beside it exist."""
    found = os.stat(file)
    return (
        found.st_ino,
        found.st_size,
        found.st_mtime_ns,
        os.path.exists(f"{file}-wal"),
        os.path.exists(f"{file}-shm"),
    )


class Unchanging:
    """The guard of a store read as an unchanging file: each read is answered only when
    the file is as it was when opened, before and after the read (a writer opening the
    store makes ``-wal`` and ``-shm`` beside it; a checkpoint rewrites the file).

    Args:
        path: The store's path, as its messages name it.
        file: The file SQLite opened.
    """

    def __init__(self, path: str, file: str) -> None:
        self._path = path
        self._file = file
        self._stamp = _stamp(file)

    def around(self, read: Callable[[], _T]) -> _T:
        """``read()``, if the file was not written before or while it ran.

        Raises:
            StoreUnavailable: It was: the read's answer could be stale or torn.
        """
        self._check()
        try:
            answer = read()
        except Exception:
            self._check()  # a read torn by a write can fail as a damaged file: say why
            raise
        self._check()
        return answer

    def _check(self) -> None:
        try:
            same = _stamp(self._file) == self._stamp
        except OSError:
            same = False
        if not same:
            folder = os.path.dirname(self._file)
            raise StoreUnavailable(
                f"SQLite store {self._path} was written while read as an unchanging file "
                f"(by a process that can write {folder}): run the command again"
            )
