"""Opening the store a command reads, never creating it."""

from __future__ import annotations

from agentjournal._text import shown_uri
from agentjournal.errors import InvalidInput
from agentjournal.store import EventStore, open_store, store_uri
from agentjournal.streams import session_stream, validate_id


async def open_session(uri: str | None, session_id: str) -> tuple[EventStore, str]:
    """Open an existing store holding ``session_id`` (never creating either).

    Raises:
        InvalidInput: The session id is malformed or the session is not in the store.
        StoreUnavailable: There is no store at the URI, or it cannot be reached.
    """
    session_id = validate_id(session_id, "session id")
    target = store_uri(uri)
    store = await open_store(target, create=False)
    try:
        if await store.head(session_stream(session_id)) is None:
            raise InvalidInput(
                f"no session {session_id!r} in {shown_uri(target)}: check the id, or pass --uri"
            )
    except BaseException:
        await store.close()
        raise
    return store, session_id
