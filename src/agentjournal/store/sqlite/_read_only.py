"""A SQLite store this process cannot write: how that is told, what it says, and the guard
that keeps its reads from being answered stale.

Such a store is read as it was when opened, and its reader makes no file. Where its ``-wal``
and ``-shm`` are both there (a writer has it open), SQLite reads through them without writing
them, but does not keep such a reader up to date with later writes; otherwise the file is read
as SQLite's unchanging (``immutable``) one, with no locks. Either way whoever can write the
store still can, so every read is guarded (:class:`ReadGuard`):
answered only if the files were not written since the store was opened, else refused, to be
run again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

from agentjournal.errors import StoreUnavailable

_T = TypeVar("_T")


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


def beside(path: str) -> bool:
    """Whether both files a WAL reader reads by are beside the store at ``path`` (a writer
    has it open, or left them): then SQLite reads it through them without making any."""
    return all(os.path.exists(f"{path}{suffix}") for suffix in ("-wal", "-shm"))


def _stamp(file: str) -> tuple[object, ...]:
    """What a write changes: the file's inode, size and modification time; whether the
    ``-shm`` beside it exists; and the ``-wal``'s size, modification time and header (its
    salts change when a writer starts it again from the top; None where it cannot be read
    here), or None without one."""
    found = os.stat(file)
    wal_path = f"{file}-wal"
    wal: tuple[object, ...] | None
    try:
        with open(wal_path, "rb") as handle:
            log = os.fstat(handle.fileno())
            wal = (log.st_size, log.st_mtime_ns, handle.read(32))
    except FileNotFoundError:
        wal = None
    except OSError:  # there, but not readable here: its size and time still tell a write
        try:
            log = os.stat(wal_path)
        except FileNotFoundError:
            wal = None
        else:
            wal = (log.st_size, log.st_mtime_ns, None)
    return (
        found.st_ino,
        found.st_size,
        found.st_mtime_ns,
        os.path.exists(f"{file}-shm"),
        wal,
    )


class ReadGuard:
    """The guard of a read-only store: each read is answered only when the files are as
    they were when it was opened, before and after the read. A writer opening the store
    makes ``-wal`` and ``-shm`` beside it; a commit grows the ``-wal`` or starts it again;
    a checkpoint rewrites the file. (Where the file system keeps modification times in
    whole seconds, a checkpoint that leaves the file's size as it was, by a writer that
    opened and closed the store within that second, is not told apart.)

    Args:
        path: The store's path, as its messages name it.
        file: The file SQLite opened.
    """

    def __init__(self, path: str, file: str) -> None:
        self._path = path
        self._file = file
        self._stamp = _stamp(file)

    def around(self, read: Callable[[], _T]) -> _T:
        """``read()``, if the store was not written since it was opened.

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
            raise StoreUnavailable(
                f"SQLite store {self._path} was written since this process opened it "
                "read-only: run the command again to read it as it is now"
            )
