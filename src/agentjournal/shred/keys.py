"""Subject keys: the key store contract, one in memory, and a cache of bounded lifetime.

Content of a data subject is encrypted under the subject's current key; erasing the
subject destroys every key it had. A key store keeps, per key, its id, its subject and
its secret until destroyed, and after that the id and subject only (a tombstone), so a
reader can tell "erased" from "not my key store" and an interrupted erasure can be
finished. :class:`~agentjournal.shred.sqlite_keys.SQLiteKeyStore` is the embedded one.

A key store is called synchronously: a lookup is one indexed row of a small local file
(or a dict), and :class:`CachedKeyStore` keeps answers in memory for a bounded time.
A store over a remote KMS should keep its own cache behind the same protocol.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from agentjournal.shred._cipher import new_key

__all__ = ["CachedKeyStore", "MemoryKeyStore", "SubjectKey", "SubjectKeyStore"]


@dataclass(frozen=True)
class SubjectKey:
    """One key of one data subject.

    Attributes:
        key_id: Names the key in every envelope sealed under it (random, no personal data).
        subject: The subject's identifier, as the application names it.
        secret: The AES-256 key.
    """

    key_id: str
    subject: str
    secret: bytes = field(repr=False)


class SubjectKeyStore(Protocol):
    """Keeps one live key per data subject, and destroys a subject's keys for good."""

    def current(self, subject: str) -> SubjectKey:
        """The subject's live key, made now if it has none (a subject erased before gets a
        new key: what it writes afterwards is readable until it is erased again)."""
        ...

    def find(self, key_id: str) -> SubjectKey | None:
        """The key ``key_id``; None when it was destroyed.

        Raises:
            KeyError: This store never held ``key_id``.
        """
        ...

    def destroy(self, subject: str) -> list[str]:
        """Destroy every key of ``subject`` (its secret is gone from the store's files);
        return the ids of all its destroyed keys, including those destroyed before."""
        ...

    def is_destroyed(self, key_id: str) -> bool:
        """Whether ``key_id`` was destroyed (False also for an id never held)."""
        ...

    def close(self) -> None:
        """Release the store's files; it cannot be used afterwards."""
        ...


class MemoryKeyStore:
    """A key store in a dict: for tests and for stores whose process is the key's lifetime."""

    def __init__(self) -> None:
        self._keys: dict[str, SubjectKey | None] = {}
        self._subjects: dict[str, str] = {}
        self._lock = threading.Lock()

    def current(self, subject: str) -> SubjectKey:
        with self._lock:
            for key in self._keys.values():
                if key is not None and key.subject == subject:
                    return key
            key = SubjectKey(uuid.uuid4().hex, subject, new_key())
            self._keys[key.key_id] = key
            self._subjects[key.key_id] = subject
            return key

    def find(self, key_id: str) -> SubjectKey | None:
        with self._lock:
            return self._keys[key_id]

    def destroy(self, subject: str) -> list[str]:
        with self._lock:
            ids = [kid for kid, owner in self._subjects.items() if owner == subject]
            for kid in ids:
                self._keys[kid] = None
            return ids

    def is_destroyed(self, key_id: str) -> bool:
        with self._lock:
            return key_id in self._keys and self._keys[key_id] is None

    def close(self) -> None:
        pass


class CachedKeyStore:
    """Another key store's answers kept in memory for at most ``ttl`` seconds.

    A key destroyed through this object leaves the cache at once. One destroyed by another
    process is never used to seal again: :meth:`current` asks the inner store whether its
    cached key was destroyed before answering (one indexed read), so a writer racing an
    erasure elsewhere seals under a fresh key, not the destroyed one. :meth:`find` (what
    reads use) answers from the cache until its entry is ``ttl`` old.

    Args:
        inner: The key store asked on a miss.
        ttl: Seconds an answer is kept (default 60).
        clock: Monotonic seconds (for tests).
    """

    def __init__(
        self,
        inner: SubjectKeyStore,
        *,
        ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self._ttl = ttl
        self._clock = clock
        self._current: dict[str, tuple[float, SubjectKey]] = {}
        self._found: dict[str, tuple[float, SubjectKey | None]] = {}
        self._lock = threading.Lock()

    def _fresh(self, at: float) -> bool:
        return self._clock() - at < self._ttl

    def current(self, subject: str) -> SubjectKey:
        with self._lock:
            hit = self._current.get(subject)
        if hit is not None and self._fresh(hit[0]) and not self.inner.is_destroyed(hit[1].key_id):
            return hit[1]
        key = self.inner.current(subject)
        with self._lock:
            self._current[subject] = self._found[key.key_id] = (self._clock(), key)
        return key

    def find(self, key_id: str) -> SubjectKey | None:
        with self._lock:
            hit = self._found.get(key_id)
            if hit is not None and self._fresh(hit[0]):
                return hit[1]
        key = self.inner.find(key_id)
        with self._lock:
            self._found[key_id] = (self._clock(), key)
        return key

    def destroy(self, subject: str) -> list[str]:
        with self._lock:
            self._current.pop(subject, None)
            for kid in [k for k, (_, key) in self._found.items() if key and key.subject == subject]:
                del self._found[kid]
        ids = self.inner.destroy(subject)
        with self._lock:
            for kid in ids:
                self._found.pop(kid, None)
        return ids

    def is_destroyed(self, key_id: str) -> bool:
        return self.inner.is_destroyed(key_id)

    def forget(self) -> None:
        """Drop every cached key now."""
        with self._lock:
            self._current.clear()
            self._found.clear()

    def close(self) -> None:
        self.forget()
        self.inner.close()
