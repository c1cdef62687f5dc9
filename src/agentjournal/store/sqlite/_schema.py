"""The SQLite file's schema: its tables and version, opening, refusing a foreign file, upgrading."""

from __future__ import annotations

import numbers
import os
import sqlite3
import threading
import time
import urllib.parse
from typing import Final

from agentjournal.errors import (
    InvalidInput,
    StoreUnavailable,
)
from agentjournal.store.sqlite._read_only import beside, old_schema, writable_here

SCHEMA_VERSION: Final = 3


# The read model (schema version 2). WITHOUT ROWID: a full read is one range scan of the
# primary key, with the row in the key's b-tree (no second lookup per item).
_MODEL_SCHEMA = """
CREATE INDEX IF NOT EXISTS streams_by_tree ON streams(tree);
CREATE TABLE IF NOT EXISTS items (
    tree      INTEGER NOT NULL,
    idx       INTEGER NOT NULL,
    stream_id INTEGER NOT NULL,
    revision  INTEGER NOT NULL,
    part      INTEGER NOT NULL,
    item      TEXT    NOT NULL,
    dictionary INTEGER NULL,
    PRIMARY KEY (tree, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trees (
    tree  INTEGER PRIMARY KEY,
    floor INTEGER NOT NULL,
    mixed INTEGER NOT NULL
);
"""

# The stored form (schema version 3, ``_stored``): the dictionaries rows were compressed
# with, by id; a row's ``dictionary`` names its own (NULL: its values are stored as given).
_STORED_FORM_SCHEMA = """
CREATE TABLE IF NOT EXISTS dictionaries (
    id      INTEGER PRIMARY KEY,
    content BLOB    NOT NULL
);
"""
_STORED_FORM_UPGRADE = (
    "ALTER TABLE events ADD COLUMN dictionary INTEGER NULL;"
    "ALTER TABLE items ADD COLUMN dictionary INTEGER NULL;" + _STORED_FORM_SCHEMA
)

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS streams (
    id       INTEGER PRIMARY KEY,
    name     TEXT    NOT NULL UNIQUE,
    head     INTEGER NOT NULL,
    tree     TEXT    NULL,
    modelled INTEGER NULL
);
CREATE TABLE IF NOT EXISTS events (
    position    INTEGER PRIMARY KEY,
    stream_id   INTEGER NOT NULL REFERENCES streams(id),
    revision    INTEGER NOT NULL,
    id          BLOB    NOT NULL,
    type        TEXT    NOT NULL,
    data        BLOB    NOT NULL,
    metadata    BLOB    NOT NULL,
    recorded_at INTEGER NOT NULL,
    dictionary  INTEGER NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_stream ON events(stream_id, revision);
"""
    + _MODEL_SCHEMA
    + _STORED_FORM_SCHEMA
)

_TABLES: Final = frozenset({"streams", "events", "items", "trees", "dictionaries"})
# The tables each earlier version has (the tables a version adds come with its upgrade).
_VERSION_TABLES: Final = {
    1: frozenset({"streams", "events"}),
    2: frozenset({"streams", "events", "items", "trees"}),
    SCHEMA_VERSION: _TABLES,
}


MAX_BUSY_TIMEOUT: Final = 2147483.647
"""The longest ``busy_timeout`` (seconds): SQLite's is a 32-bit count of milliseconds (a larger
one would wrap to a store that does not wait at all)."""


def _resolved_connect(
    path: str, busy_timeout: float, create: bool = True, stop: threading.Event | None = None
) -> tuple[str, sqlite3.Connection]:
    """The file's absolute path (for the heads probe, opened later, perhaps after the
    process changed directory) and the store's connection to it. The path is the file SQLite
    opened, as SQLite names it: not ``path`` made absolute, which names another file when
    it goes through a symlink and then ``..``. ``stop``: as for :func:`_connect`.

    Raises:
        InvalidInput: ``busy_timeout`` is not a number of seconds SQLite can wait (0 to
            :data:`MAX_BUSY_TIMEOUT`); nothing is opened.
        StoreUnavailable: As for :meth:`SQLiteEventStore.open`.
    """
    if (
        not isinstance(busy_timeout, numbers.Real)
        or isinstance(busy_timeout, bool)
        or not 0 <= float(busy_timeout) <= MAX_BUSY_TIMEOUT  # NaN too
    ):
        raise InvalidInput(
            f"busy_timeout must be a number of seconds from 0 to {MAX_BUSY_TIMEOUT}, "
            f"got {busy_timeout!r}"
        )
    db = _connect(path, float(busy_timeout), create, stop)
    try:
        opened = str(db.execute("PRAGMA database_list").fetchone()[2])
    except sqlite3.Error:
        opened = ""
    return opened or os.path.abspath(path), db


def _connect(
    path: str, busy_timeout: float, create: bool = True, stop: threading.Event | None = None
) -> sqlite3.Connection:
    """Open and set up the store's connection, waiting up to about ``busy_timeout``
    seconds, also for the locks SQLite's busy handler does not wait for: making a new file
    WAL needs an exclusive lock, and a connection that meets another one's pending write
    there (as when processes create one store together) gets SQLITE_BUSY at once. Each
    try is whole: nothing a failed one began stays (the schema's creation and upgrades
    are single transactions).

    ``stop``, once set (its caller gave up: cancelled, or timed out), ends the waiting at
    the next try: each try waits for a lock in SQLite's busy handler at most
    :data:`_TRY_WAIT` at a time, so an abandoned open does not go on waiting for the lock,
    and holding up the process's exit, for the rest of ``busy_timeout``.
    """
    deadline = time.monotonic() + busy_timeout
    pause = 0.001
    while True:
        if stop is not None and stop.is_set():
            raise StoreUnavailable(f"cannot open SQLite store {path}: the open was abandoned")
        # Each try waits in SQLite's busy handler only for the time left (and, with a
        # ``stop``, a short while), so that the whole open waits about busy_timeout at
        # most; the connection then waits the full time.
        left = max(deadline - time.monotonic(), 0.0)
        wait = left if stop is None else min(left, _TRY_WAIT)
        try:
            db = _connect_once(path, wait, create)
        except StoreUnavailable as error:
            busy = error.__cause__
            if not _is_busy(busy) or time.monotonic() + pause > deadline:
                raise
        else:
            if wait != busy_timeout:
                db.execute(f"PRAGMA busy_timeout = {round(busy_timeout * 1000)}")
            return db
        if stop is not None:
            stop.wait(pause)
        else:
            time.sleep(pause)
        pause = min(pause * 2, 0.05)


_TRY_WAIT: Final = 0.1
"""The longest (seconds) one try of an open that may be abandoned waits in SQLite's busy
handler before it is tried again whole (:func:`_connect`)."""


def _is_busy(error: BaseException | None) -> bool:
    """SQLITE_BUSY, in any of its extended codes."""
    code = getattr(error, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_BUSY


def missing_directory(path: str) -> str | None:
    """Why the SQLite store at ``path`` cannot be opened: its directory does not exist (None:
    it does)."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(directory):
        return None
    return (
        f"cannot open SQLite store {path}: directory {directory} does not exist (create it first)"
    )


def unwritable_directory(path: str) -> str | None:
    """Why the SQLite store at ``path`` cannot be written here: its directory cannot be (None:
    it can, as far as this process's rights say)."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.access(directory, os.W_OK):
        return None
    return f"cannot write SQLite store {path}: {directory} cannot be written here"


def _connect_once(path: str, busy_timeout: float, create: bool) -> sqlite3.Connection:
    """One try of :func:`_connect`. An existing store (``create`` False) this process cannot
    write is opened read-only (``query_only``), whatever the caller means to do, and makes
    no file: the ordinary way where its ``-wal`` and ``-shm`` are there to read by, else as
    an unchanging file (:func:`_open_unchanging`)."""
    if path != ":memory:":
        if not create and not os.path.isfile(path):
            raise StoreUnavailable(f"no store at {path}: check the path or --uri")
        missing = missing_directory(path)
        if missing is not None:
            raise StoreUnavailable(missing)
    # Only read: the store refuses every write before it reaches SQLite.
    reading_only = not create and path != ":memory:" and not writable_here(path)
    if reading_only and not beside(path):
        # Opened the ordinary way, SQLite would make -wal and -shm here, files its owner
        # might not be able to write or remove after: read it as an unchanging file.
        return _open_unchanging(path)
    target, as_uri = path, False
    if not create and path != ":memory:":
        # mode=rw: SQLite itself refuses to create the file (no race with the check above).
        target, as_uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=rw", True
    try:
        db = sqlite3.connect(
            target, timeout=busy_timeout, isolation_level=None, check_same_thread=False, uri=as_uri
        )
    except sqlite3.Error as error:
        return _unwritable(path, create, error)
    try:
        _refuse_foreign(db, path)  # before anything could change the file
        if not create and db.execute("PRAGMA user_version").fetchone()[0] == 0:
            raise StoreUnavailable(f"no store at {path}: the file is empty")
        db.execute(
            "PRAGMA journal_mode = WAL" if path != ":memory:" else "PRAGMA journal_mode = MEMORY"
        )
        db.execute("PRAGMA synchronous = FULL")
        # Deleted rows (an erasure's purge) are overwritten, not left in free pages; some
        # builds default to it, others not.
        db.execute("PRAGMA secure_delete = ON")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if reading_only:  # the ordinary way: a writer's -wal and -shm are here to read by
            if version != SCHEMA_VERSION:
                raise StoreUnavailable(old_schema(path, version, SCHEMA_VERSION))
            db.execute("PRAGMA query_only = 1")
            return db
        if version == 0:
            _create_schema(db, path)
        # Again until current: another process may have upgraded part of the way meanwhile.
        while (version := db.execute("PRAGMA user_version").fetchone()[0]) != SCHEMA_VERSION:
            _refuse_foreign(db, path)
            _upgrade_schema(db, path, version)
    except sqlite3.DatabaseError as error:
        db.close()
        return _unwritable(path, create, error)
    except BaseException:
        db.close()
        raise
    return db


def _unwritable(path: str, create: bool, error: sqlite3.Error) -> sqlite3.Connection:
    """After ``error`` opening the store at ``path``: when it is SQLite failing to write
    beside the file (the WAL index it keeps in ``PATH-shm``, or a new file) in a folder
    this process cannot write, an existing store (``create`` False) opened read-only;
    else raise. SQLite says so with SQLITE_READONLY_DIRECTORY, or on a read-only file
    system with SQLITE_CANTOPEN: the folder is asked too, so that no other failure to
    open is taken for it.

    Raises:
        StoreUnavailable: Always, but for an existing store opened read-only.
    """
    code = getattr(error, "sqlite_errorcode", None)
    if (
        path != ":memory:"
        and isinstance(code, int)
        and code & 0xFF in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN)
        and (unwritable := unwritable_directory(path)) is not None
    ):
        if not create:
            return _open_unchanging(path)
        raise StoreUnavailable(unwritable) from error
    raise StoreUnavailable(f"cannot open SQLite store {path}: {error}") from error


def _open_unchanging(path: str) -> sqlite3.Connection:
    """A read-only connection to the existing store at ``path``, which this process cannot
    write and whose ``-wal`` and ``-shm`` are not both there: read the ordinary way, SQLite
    would make them (or, in a folder it cannot write, fail), so the file is read as SQLite's
    ``immutable`` file, with nothing to coordinate with writers; the store guards every read
    (:class:`~agentjournal.store.sqlite._read_only.ReadGuard`, as it does every read-only
    store's). A store with a write-ahead log of writes no checkpoint has moved into the file
    yet is refused, as it cannot be read so (only with the WAL index), and so is one of an
    earlier schema version, whose upgrade is a write. Every write on the connection fails
    (``query_only``).

    Raises:
        StoreUnavailable: It cannot be read so, saying why and what to do.
    """
    wal = f"{path}-wal"
    try:
        pending = os.path.getsize(wal) > 0
    except FileNotFoundError:
        pending = False
    except OSError as error:
        raise StoreUnavailable(f"cannot open SQLite store {path}: {error}") from error
    if pending:
        raise StoreUnavailable(
            f"cannot open SQLite store {path} here: its writes in {wal} are read only with "
            f"the WAL index SQLite keeps in {path}-shm, which is not there, and this process "
            "cannot write the store; whoever can write it can open the store once, which "
            "moves them into the file"
        )
    uri = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro&immutable=1"
    try:
        db = sqlite3.connect(uri, isolation_level=None, check_same_thread=False, uri=True)
    except sqlite3.Error as error:
        raise StoreUnavailable(f"cannot open SQLite store {path}: {error}") from error
    try:
        _refuse_foreign(db, path)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            raise StoreUnavailable(f"no store at {path}: the file is empty")
        if version != SCHEMA_VERSION:
            raise StoreUnavailable(old_schema(path, version, SCHEMA_VERSION))
        db.execute("PRAGMA query_only = 1")
    except sqlite3.DatabaseError as error:
        db.close()
        raise StoreUnavailable(f"cannot open SQLite store {path}: {error}") from error
    except BaseException:
        db.close()
        raise
    return db


def read_only(db: sqlite3.Connection) -> bool:
    """Whether ``db`` was opened read-only (:func:`_connect_once`)."""
    return bool(db.execute("PRAGMA query_only").fetchone()[0])


def _probe_connection(path: str) -> sqlite3.Connection:
    """A read-only connection for :meth:`SQLiteEventStore.heads_now` (any thread, waits at
    most 5 ms for a lock: the loop thread must not stall on it); ``path`` is absolute."""
    uri = f"file:{urllib.parse.quote(path)}?mode=ro"
    db = sqlite3.connect(
        uri, timeout=0.005, isolation_level=None, check_same_thread=False, uri=True
    )
    try:
        db.execute("PRAGMA query_only = 1")
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            raise sqlite3.OperationalError("not in WAL mode: readers could wait for writers")
    except BaseException:
        db.close()
        raise
    return db


def _refuse_foreign(db: sqlite3.Connection, path: str) -> None:
    """Raise unless the file is empty or an agentjournal store of a schema version this
    code reads (an earlier one is upgraded when opened)."""
    # One statement, so that both come from one state of the file: another process's
    # upgrade committed between two reads would show an old version with new tables.
    rows = db.execute(
        "SELECT user_version, NULL FROM pragma_user_version UNION ALL "
        "SELECT NULL, name FROM sqlite_master WHERE type = 'table'"
    ).fetchall()
    version = next(row[0] for row in rows if row[1] is None)
    tables = {row[1] for row in rows if row[1] is not None}
    if version != 0 and version not in _VERSION_TABLES:
        raise StoreUnavailable(
            f"SQLite store {path} has schema version {version}; this agentjournal "
            f"reads versions 1 to {SCHEMA_VERSION}: upgrade agentjournal, or choose another file"
        )
    ours = _VERSION_TABLES.get(version, _TABLES)
    foreign = sorted(tables - ours - {"sqlite_sequence"})
    if foreign or (version != 0 and not ours <= tables):
        shown = foreign[0] if foreign else "missing tables of its version"
        raise StoreUnavailable(
            f"{path} is a SQLite database of something else ({shown!r}); choose another file"
        )


def _create_schema(db: sqlite3.Connection, path: str) -> None:
    _migrate(db, path, 0, _SCHEMA)


def _upgrade_schema(db: sqlite3.Connection, path: str, version: int) -> None:
    """Upgrade a file of an earlier version in place, in one transaction.

    1 -> 2: the model's columns and tables, empty. No stream joins a tree, so every
    session is read from its events until written again from scratch (a stream's model
    starts with its first event). 2 -> 3: the stored form's column on events and items,
    NULL in every row there is (stored as given), and its dictionaries table, empty: the
    rows written from then on are compressed, the earlier ones read as they are.
    """
    script = _STORED_FORM_UPGRADE
    if version == 1:
        script = (
            "ALTER TABLE streams ADD COLUMN tree TEXT NULL;"
            "ALTER TABLE streams ADD COLUMN modelled INTEGER NULL;"
            "ALTER TABLE events ADD COLUMN dictionary INTEGER NULL;"
            + _MODEL_SCHEMA
            + _STORED_FORM_SCHEMA
        )
    _migrate(db, path, version, script)


def _migrate(db: sqlite3.Connection, path: str, version: int, script: str) -> None:
    """Run ``script`` and set the current schema version, in one transaction under the
    write lock, if the file is still at ``version`` (another process may have got there
    first) and, checked again under the lock, no file of something else."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] == version:
            _refuse_foreign(db, path)
            for statement in script.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
