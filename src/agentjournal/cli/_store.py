"""Opening the store a command reads, never creating it, and the key store it shows sealed
content with."""

from __future__ import annotations

from agentjournal._text import shown_uri
from agentjournal.errors import InvalidInput
from agentjournal.shred.keys import MemoryKeyStore, SubjectKeyStore
from agentjournal.shred.sealing import OpeningStore
from agentjournal.shred.sqlite_keys import open_key_file
from agentjournal.store import EventStore, open_store, store_uri
from agentjournal.streams import session_stream, validate_id


async def open_session(
    uri: str | None, session_id: str, *, hint: str | None = None
) -> tuple[EventStore, str]:
    """Open an existing store holding ``session_id`` (never creating either); ``hint``
    names the option that waits for a session not started yet, when the command has one.

    Raises:
        InvalidInput: The session id is malformed or the session is not in the store.
        StoreUnavailable: There is no store at the URI, or it cannot be reached.
    """
    session_id = validate_id(session_id, "session id")
    target = store_uri(uri)
    store = await open_store(target, create=False)
    try:
        if await store.head(session_stream(session_id)) is None:
            also = f", or {hint} for it to start" if hint is not None else ""
            raise InvalidInput(
                f"no session {session_id!r} in {shown_uri(target)}: check the id, or pass "
                f"--uri{also}"
            )
    except BaseException:
        await store.close()
        raise
    return store, session_id


def reading_keys(path: str | None, *, ttl: float = 60.0) -> SubjectKeyStore:
    """The key store a read command shows sealed content with: the file at ``path``,
    opened read-only (its answers cached ``ttl`` seconds), or with no path an empty one,
    under which every sealed value reads ``[sealed]``. Open it before the event store:
    a bad path is refused with nothing opened. The caller closes it.

    Raises:
        InvalidInput: ``path`` is not an existing key store.
    """
    if path is None:
        return MemoryKeyStore()
    return open_key_file(path, read_only=True, ttl=ttl)


def showing(store: EventStore, keys: SubjectKeyStore) -> OpeningStore:
    """``store`` as the read commands show it: every event read has its sealed content
    opened under ``keys``, or marked (:func:`~agentjournal.shred.fields.open_content`)."""
    return OpeningStore(store, keys, shown=True)
