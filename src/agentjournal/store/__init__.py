"""Event stores: the contract and its backends.

``open_store(uri)`` picks the backend from the URI:

* ``sqlite:///relative/or/absolute/path.db`` or ``sqlite:////abs/path.db``:
  the embedded store in one SQLite file (the default).
* ``sqlite://:memory:``: an embedded store that lives as long as the object.
* ``kurrentdb://host:2113?Tls=false``: KurrentDB (also a cluster's seeds,
  ``kurrentdb://h1:2113,h2:2113,h3:2113?Tls=false``, or one DNS name to discover
  it from, ``kurrentdb+discover://cluster.example.com:2113?Tls=false``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Final

from agentjournal._lazy import exports
from agentjournal.errors import InvalidInput
from agentjournal.store.contract import (
    MAX_EVENT_BYTES,
    AppendRequest,
    AppendResult,
    EventStore,
    Expected,
    NewEvent,
    RecordedEvent,
    StreamState,
    event_id,
)

if TYPE_CHECKING:
    from agentjournal.store.kurrentdb import KurrentDBEventStore
    from agentjournal.store.sqlite import SQLiteEventStore

__all__ = [
    "DEFAULT_URI",
    "MAX_EVENT_BYTES",
    "AppendRequest",
    "AppendResult",
    "EventStore",
    "Expected",
    "KurrentDBEventStore",
    "NewEvent",
    "RecordedEvent",
    "SQLiteEventStore",
    "StreamState",
    "URI_ENV",
    "event_id",
    "open_store",
    "store_uri",
]

# The backends load on first use (the KurrentDB client brings gRPC).
__getattr__, __dir__ = exports(
    __name__,
    {
        "KurrentDBEventStore": "agentjournal.store.kurrentdb",
        "SQLiteEventStore": "agentjournal.store.sqlite",
    },
)

URI_ENV: Final = "AGENTJOURNAL_URI"
"""The environment variable naming the store when no URI is given."""
DEFAULT_URI: Final = "sqlite:///agentjournal.db"
"""Where the store is when neither an argument nor the environment says (a file in the
working directory)."""


def store_uri(uri: str | None = None) -> str:
    """The store to use: ``uri``, else ``$AGENTJOURNAL_URI``, else :data:`DEFAULT_URI`."""
    return uri or os.environ.get(URI_ENV) or DEFAULT_URI


_KURRENTDB_SCHEMES = ("kurrentdb://", "kurrentdb+discover://", "esdb://", "esdb+discover://")


async def open_store(uri: str, *, create: bool = True, deadline: float | None = None) -> EventStore:
    """Open the event store that ``uri`` names (see the module docs).

    Args:
        uri: The store's URI.
        create: With False, a SQLite file that does not exist (or is empty)
            raises instead of becoming a new store. KurrentDB has nothing to create.
        deadline: Seconds any one KurrentDB call may take before it is
            ``StoreUnavailable`` (default: the URI's ``DefaultDeadline``, else 10).
            The SQLite store does not wait on a network and ignores it.

    Raises:
        InvalidInput: The URI names no known backend, or ``deadline`` is not > 0.
        StoreUnavailable: The store cannot be opened or reached (or, with
            ``create=False``, there is no store at that path).
    """
    if deadline is not None and (
        isinstance(deadline, bool) or not isinstance(deadline, int | float) or not deadline > 0
    ):
        raise InvalidInput(f"deadline must be a number of seconds > 0, got {deadline!r}")
    if uri.startswith("sqlite://"):
        from agentjournal.store.sqlite import SQLiteEventStore

        path, compress = _sqlite_parts(uri)
        return await SQLiteEventStore.open(path, create=create, compress=compress)
    if uri.startswith(_KURRENTDB_SCHEMES):
        from agentjournal.store.kurrentdb import KurrentDBEventStore

        return await KurrentDBEventStore.open(uri, deadline=deadline)
    raise _unknown(uri)


def check_uri(uri: str) -> None:
    """Raise what opening the store ``uri`` names to write would refuse first, opening
    nothing: a backend this package does not know, a SQLite URI it does not read, or a
    SQLite file in a directory that does not exist or cannot be written. (A KurrentDB
    server is not reached.)

    Raises:
        InvalidInput: It would be refused.
    """
    if uri.startswith("sqlite://"):
        path = _sqlite_parts(uri)[0]
        if path != ":memory:":
            from agentjournal.store.sqlite._schema import missing_directory, unwritable_directory

            refused = missing_directory(path) or unwritable_directory(path)
            if refused is not None:
                raise InvalidInput(refused)
    elif not uri.startswith(_KURRENTDB_SCHEMES):
        raise _unknown(uri)


def _unknown(uri: str) -> InvalidInput:
    return InvalidInput(
        f"unknown store URI {uri.split('://')[0]!r}: use sqlite:///path.db, "
        "sqlite://:memory: or kurrentdb://host:2113?Tls=false"
    )


def sqlite_path(uri: str) -> str:
    """Return the file path (or ``:memory:``) a ``sqlite://`` URI names."""
    return _sqlite_parts(uri)[0]


def _sqlite_parts(uri: str) -> tuple[str, bool]:
    """The file path (or ``:memory:``) a ``sqlite://`` URI names, and whether it asks for
    compressed writes (``?compress=zstd``, the one option)."""
    rest, _, query = uri.removeprefix("sqlite://").partition("?")
    if query not in ("", "compress=zstd"):
        raise InvalidInput(
            f"invalid SQLite URI {uri!r}: the one option is ?compress=zstd "
            "(store the events written compressed)"
        )
    compress = bool(query)
    if rest in (":memory:", "/:memory:"):
        return ":memory:", compress
    if not rest.startswith("/") or rest == "/":
        raise InvalidInput(
            f"invalid SQLite URI {uri!r}: use sqlite:///relative.db, sqlite:////abs/path.db "
            "or sqlite://:memory:"
        )
    return rest[1:], compress
