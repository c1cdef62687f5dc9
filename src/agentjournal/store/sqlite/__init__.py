"""The embedded event store: KurrentDB stream semantics in one SQLite file.

The package holds the store class with its reads (``_store``), its write path: the
queue, group commit and each write's transaction (``_writes``), what passes between
callers' event loops and the store's thread (``_handoff``), the file's schema
(``_schema``), the events table's rows (``_rows``), the read model (``_model``) and its
purge (``_purge``), the stored form of the text columns (``_stored``) and the header of
the file's WAL index, which tells the heads probe whether anything was committed since
(``_wal_index``), and a store this process cannot write: how that is told, and the guard of
its reads (``_read_only``).

Layout (schema version 3, kept in ``PRAGMA user_version``)::

    streams(id, name UNIQUE, head,          one row per stream; head = last revision;
            tree, modelled)                 its tree's root stream, and the revision
                                            the read model reflects (see below)
    events(position INTEGER PRIMARY KEY,     the global order: rowids, which only grow
           stream_id, revision,              because no row is ever deleted
           id, type, data, metadata,         UNIQUE(stream_id, revision): tail reads
           recorded_at, dictionary)          are an index range scan, O(limit)
    items(tree, idx, stream_id, revision,    the read model: each tree's visible items,
          part, item, dictionary)            keyed by (root stream id, message index)
    trees(tree, floor, mixed)                the highest index a clear has hidden; whether
                                             an item not marked plain was ever added
    dictionaries(id, content)                what the rows' values are compressed with:
                                             a row's ``dictionary`` (NULL: stored as given)

The read model (``items``, ``trees``, ``streams.tree``/``modelled``) is derived
from the events, written in the same transaction as they are, and read only to
answer a full read of a session quickly (:meth:`SQLiteEventStore.read_model`);
it is a cache with a high-water mark per stream, never a record. A file of an
earlier version is upgraded in place when opened (one transaction): a version 1
file's streams join no tree, so their sessions are read from their events as
before; a version 2 file's rows read as given, and later ones are compressed.

Every call runs on one worker thread that owns the connection, so the event
loop never blocks on SQLite. Writes take ``BEGIN IMMEDIATE``: the expected-state
check and the insert happen under SQLite's single write lock, which serialises
writers in this process and in other processes on the same file (WAL mode,
``synchronous=FULL``: a returned append is on disk). A writer that cannot get
the lock within ``busy_timeout`` gets :class:`StoreUnavailable`. Writes that
wait for the thread together commit together (group commit: one transaction,
one fsync, a SAVEPOINT per write so each is still all-or-nothing on its own);
a write's drain starts at the end of its event loop's current pass, so the
writes of sessions woken by one commit share the next.

Subscriptions wake at once for appends made through this object and notice
appends by other processes with a cheap check every 50 ms.

One read runs on the caller's thread instead: :meth:`SQLiteEventStore.heads_now`,
a few streams' heads on a read-only connection of its own, which never waits
(a warm session read asks it whether anything moved before hopping).
"""

from __future__ import annotations

from agentjournal.store.sqlite._store import SQLiteEventStore

__all__ = ["SQLiteEventStore"]
