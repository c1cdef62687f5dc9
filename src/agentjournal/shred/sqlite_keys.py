"""The embedded key store: subject keys in a SQLite file of their own, apart from the events.

The file is opened with ``PRAGMA secure_delete = ON`` (a destroyed secret's bytes are
overwritten with zeros in the page, not left in free space) and a rollback journal
(``journal_mode = DELETE``): no WAL that another connection's open read could keep a
destroyed key's old page in; a destroy waits for readers, commits, and the journal file
is deleted. A file still in WAL mode (kept there by another connection) is checkpointed
and its WAL truncated, or the destroy fails. So the secret is in neither the file, its
free pages nor a WAL afterwards. A destroyed key keeps its row: id, subject and when.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import urllib.parse
import uuid
from datetime import UTC, datetime

from agentjournal.errors import InvalidInput, StoreUnavailable
from agentjournal.shred._cipher import new_key
from agentjournal.shred.keys import CachedKeyStore, SubjectKey

__all__ = ["SQLiteKeyStore", "open_key_file"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS subject_keys (
    key_id TEXT PRIMARY KEY,
    subject TEXT NOT NULL,
    secret BLOB,
    created_at TEXT NOT NULL,
    destroyed_at TEXT
);
CREATE INDEX IF NOT EXISTS subject_keys_subject ON subject_keys(subject);
"""


class SQLiteKeyStore:
    """Subject keys in the SQLite file at ``path`` (made if missing).

    With ``read_only`` (what the read commands open), the file must exist and be a key
    store, and nothing is ever written to it: :meth:`current` and :meth:`destroy` raise
    ``sqlite3`` errors. Safe to share between threads. Close it with :meth:`close`.

    Raises:
        InvalidInput: ``path`` cannot be opened as a key store.
    """

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False) -> None:
        self.path = os.fspath(path)
        try:
            if read_only:
                self._db = _reader(self.path)
            else:
                self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
                self._db.execute("PRAGMA busy_timeout = 10000")
                self._db.execute("PRAGMA secure_delete = ON")
                # A rollback journal, deleted at each commit: no WAL that another
                # connection's open read could keep a destroyed key's old page in.
                self._db.execute("PRAGMA journal_mode = DELETE")
                self._db.execute("PRAGMA synchronous = FULL")
                self._db.executescript(_SCHEMA)
        except sqlite3.Error as error:
            raise InvalidInput(f"cannot open the key store {self.path}: {error}") from error
        self._lock = threading.Lock()

    def current(self, subject: str) -> SubjectKey:
        with self._lock:
            row = self._db.execute(
                "SELECT key_id, secret FROM subject_keys"
                " WHERE subject = ? AND secret IS NOT NULL ORDER BY created_at DESC LIMIT 1",
                (subject,),
            ).fetchone()
            if row is not None:
                return SubjectKey(row[0], subject, bytes(row[1]))
            key = SubjectKey(uuid.uuid4().hex, subject, new_key())
            self._db.execute(
                "INSERT INTO subject_keys (key_id, subject, secret, created_at) VALUES (?,?,?,?)",
                (key.key_id, subject, key.secret, _now()),
            )
            return key

    def find(self, key_id: str) -> SubjectKey | None:
        with self._lock:
            row = self._db.execute(
                "SELECT subject, secret FROM subject_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
        if row is None:
            raise KeyError(key_id)
        return None if row[1] is None else SubjectKey(key_id, row[0], bytes(row[1]))

    def destroy(self, subject: str) -> list[str]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "UPDATE subject_keys SET secret = NULL, destroyed_at = ?"
                    " WHERE subject = ? AND secret IS NOT NULL",
                    (_now(), subject),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._no_wal_copy()
            rows = self._db.execute(
                "SELECT key_id FROM subject_keys WHERE subject = ? AND secret IS NULL"
                " ORDER BY created_at",
                (subject,),
            ).fetchall()
        return [row[0] for row in rows]

    def _no_wal_copy(self) -> None:
        """A key file still in WAL mode (another connection kept it there) holds the old
        page image, with the secret, in its WAL until it is checkpointed into the file
        (where secure_delete zeroed it) and the WAL truncated: insist until it is.

        Raises:
            StoreUnavailable: Another connection kept the WAL from being emptied.
        """
        mode = self._db.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            return
        wal = self.path + "-wal"
        for _ in range(100):
            busy = self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            if not busy and (not os.path.exists(wal) or os.path.getsize(wal) == 0):
                return
            time.sleep(0.05)
        raise StoreUnavailable(
            f"the key store {self.path} could not empty its WAL (another connection reads "
            "it): the destroyed key may remain there; close its readers and erase again"
        )

    def is_destroyed(self, key_id: str) -> bool:
        with self._lock:
            row = self._db.execute(
                "SELECT secret IS NULL FROM subject_keys WHERE key_id = ?", (key_id,)
            ).fetchone()
        return bool(row is not None and row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


def open_key_file(
    path: str | os.PathLike[str], *, read_only: bool = False, ttl: float = 60.0
) -> CachedKeyStore:
    """The embedded key store at ``path``, its answers kept in memory for ``ttl`` seconds:
    how ``Journal.open(keys=PATH)`` and the read commands' ``--keys`` open a key file
    (``read_only``: the file must already be a key store; see :class:`SQLiteKeyStore`).

    Raises:
        InvalidInput: ``path`` cannot be opened as a key store.
    """
    return CachedKeyStore(SQLiteKeyStore(path, read_only=read_only), ttl=ttl)


def _reader(path: str) -> sqlite3.Connection:
    """A read-only connection to the key store at ``path``, which must exist and be one.

    Raises:
        InvalidInput: There is no file, or it holds no key store.
        sqlite3.Error: It is not a SQLite file.
    """
    if not os.path.isfile(path):
        raise InvalidInput(f"no key store at {path}: check --keys (it is never created)")
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 10000")
    try:
        found = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'subject_keys'"
        ).fetchone()
    except BaseException:
        db.close()
        raise
    if found is None:
        db.close()
        raise InvalidInput(f"{path} is not a key store (it has no subject keys)")
    return db


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")
