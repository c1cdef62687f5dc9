"""Crypto-shredding: a data subject's content sealed under the subject's key, so that
destroying the key erases the content while every hash chain over it still verifies.

- :mod:`~agentjournal.shred.keys` — the key store contract, in memory, cached.
- :mod:`~agentjournal.shred.sqlite_keys` — the embedded key store (its own SQLite file).
- :mod:`~agentjournal.shred._cipher` — AES-GCM and keyed digests (pure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentjournal._lazy import exports

if TYPE_CHECKING:
    from agentjournal.shred.keys import (
        CachedKeyStore,
        MemoryKeyStore,
        SubjectKey,
        SubjectKeyStore,
    )
    from agentjournal.shred.sqlite_keys import SQLiteKeyStore

__all__ = [
    "CachedKeyStore",
    "MemoryKeyStore",
    "SQLiteKeyStore",
    "SubjectKey",
    "SubjectKeyStore",
]

__getattr__, __dir__ = exports(
    __name__,
    {
        "CachedKeyStore": "agentjournal.shred.keys",
        "MemoryKeyStore": "agentjournal.shred.keys",
        "SQLiteKeyStore": "agentjournal.shred.sqlite_keys",
        "SubjectKey": "agentjournal.shred.keys",
        "SubjectKeyStore": "agentjournal.shred.keys",
    },
)
