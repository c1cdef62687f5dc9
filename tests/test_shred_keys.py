"""Subject keys and the content cipher: sealing, keyed digests, key stores, the cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentjournal.shred import CachedKeyStore, MemoryKeyStore, SQLiteKeyStore, SubjectKeyStore
from agentjournal.shred._cipher import (
    Unopenable,
    associated,
    decrypt,
    encrypt,
    keyed_digest,
    new_key,
)


def test_a_sealed_field_opens_only_with_its_key_stream_event_and_path() -> None:
    key = new_key()
    sealed = encrypt(key, b"secret text", associated("AgentSession-s", "e1", "content"))
    assert b"secret text" not in sealed
    assert decrypt(key, sealed, associated("AgentSession-s", "e1", "content")) == b"secret text"
    for aad in (
        associated("AgentSession-t", "e1", "content"),
        associated("AgentSession-s", "e2", "content"),
        associated("AgentSession-s", "e1", "result"),
    ):
        with pytest.raises(Unopenable):
            decrypt(key, sealed, aad)
    with pytest.raises(Unopenable):
        decrypt(new_key(), sealed, associated("AgentSession-s", "e1", "content"))
    flipped = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(Unopenable):
        decrypt(key, flipped, associated("AgentSession-s", "e1", "content"))


def test_two_seals_of_one_text_differ() -> None:
    key = new_key()
    aad = associated("s", "e", "p")
    assert encrypt(key, b"x", aad) != encrypt(key, b"x", aad)


def test_keyed_digests_agree_under_one_key_and_differ_under_another() -> None:
    key = new_key()
    assert keyed_digest(key, "did the user write this?") == keyed_digest(
        key, "did the user write this?"
    )
    assert keyed_digest(key, "a") != keyed_digest(key, "b")
    assert keyed_digest(key, "a") != keyed_digest(new_key(), "a")
    assert keyed_digest(key, "a").startswith("hmac-sha256:")


@pytest.fixture(params=["memory", "sqlite", "cached"])
def keys(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SubjectKeyStore]:
    store: SubjectKeyStore
    if request.param == "memory":
        store = MemoryKeyStore()
    elif request.param == "sqlite":
        store = SQLiteKeyStore(tmp_path / "keys.db")
    else:
        store = CachedKeyStore(MemoryKeyStore())
    yield store
    store.close()


def test_a_subject_keeps_one_live_key_until_it_is_destroyed(keys: SubjectKeyStore) -> None:
    first = keys.current("alice")
    assert keys.current("alice") == first
    other = keys.current("bob")
    assert other.key_id != first.key_id
    assert other.secret != first.secret
    assert keys.find(first.key_id) == first
    assert not keys.is_destroyed(first.key_id)

    assert keys.destroy("alice") == [first.key_id]
    assert keys.find(first.key_id) is None
    assert keys.is_destroyed(first.key_id)
    assert keys.find(other.key_id) == other  # another subject is untouched

    again = keys.current("alice")  # written after the erasure: a new key
    assert again.key_id != first.key_id
    assert sorted(keys.destroy("alice")) == sorted([first.key_id, again.key_id])


def test_an_unknown_key_id_is_not_a_destroyed_one(keys: SubjectKeyStore) -> None:
    with pytest.raises(KeyError):
        keys.find("0" * 32)
    assert not keys.is_destroyed("0" * 32)
    assert keys.destroy("nobody") == []


def test_the_sqlite_key_store_keeps_keys_across_a_reopen(tmp_path: Path) -> None:
    store = SQLiteKeyStore(tmp_path / "keys.db")
    key = store.current("alice")
    store.destroy("bob")
    store.close()
    store = SQLiteKeyStore(tmp_path / "keys.db")
    assert store.current("alice") == key
    store.close()


def _files_bytes(folder: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.iterdir()) if path.is_file())


def test_a_destroyed_key_is_in_no_byte_of_the_key_store_files(tmp_path: Path) -> None:
    folder = tmp_path / "keys"
    folder.mkdir()
    store = SQLiteKeyStore(folder / "keys.db")
    doomed = [store.current(f"erase-me-{n}").secret for n in range(20)]
    kept = [store.current(f"keep-{n}").secret for n in range(20)]
    assert all(secret in _files_bytes(folder) for secret in doomed)  # the scan can find them

    for n in range(20):
        store.destroy(f"erase-me-{n}")
    while_open = _files_bytes(folder)
    assert not [secret for secret in doomed if secret in while_open]
    store.close()
    after_close = _files_bytes(folder)
    assert not [secret for secret in doomed if secret in after_close]
    assert all(secret in after_close for secret in kept)


def test_the_cache_answers_for_its_lifetime_then_asks_again() -> None:
    now = [0.0]
    inner = MemoryKeyStore()
    cache = CachedKeyStore(inner, ttl=10.0, clock=lambda: now[0])
    key = cache.current("alice")
    inner.destroy("alice")  # another process erased alice
    now[0] = 9.0
    assert cache.find(key.key_id) == key  # a read is answered from the cache
    # but nothing is sealed under a destroyed key: the cache asks first
    assert cache.current("alice").key_id != key.key_id
    now[0] = 20.0
    assert cache.find(key.key_id) is None


def test_a_key_destroyed_through_the_cache_leaves_it_at_once() -> None:
    cache = CachedKeyStore(MemoryKeyStore(), ttl=3600.0)
    key = cache.current("alice")
    assert cache.find(key.key_id) == key
    cache.destroy("alice")
    assert cache.find(key.key_id) is None
    assert cache.current("alice").key_id != key.key_id


def test_a_destroyed_key_leaves_no_byte_even_while_another_connection_reads(
    tmp_path: Path,
) -> None:
    """A reader (``ui --keys``, another process) in the middle of a read transaction when
    the key is destroyed: the destroy waits for it, and afterwards no file of the key store
    holds the secret — no WAL keeps the old page."""
    import sqlite3
    import threading

    folder = tmp_path / "keys"
    folder.mkdir()
    store = SQLiteKeyStore(folder / "keys.db")
    for n in range(50):
        store.current(f"other-{n}")
    doomed = store.current("alice").secret
    reader = sqlite3.connect(
        f"file:{folder / 'keys.db'}?mode=ro", uri=True, check_same_thread=False
    )
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM subject_keys").fetchone()
    ends = threading.Timer(0.3, lambda: reader.execute("COMMIT"))
    ends.start()
    store.destroy("alice")
    ends.join()
    assert doomed not in _files_bytes(folder)
    reader.execute("SELECT count(*) FROM subject_keys").fetchone()
    assert doomed not in _files_bytes(folder)
    reader.close()
    store.close()
    assert doomed not in _files_bytes(folder)
