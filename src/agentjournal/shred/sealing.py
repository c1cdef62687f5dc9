"""Sealing a session's writes under its subject's key, and a store whose reads open them.

:class:`SubjectSealer` is what a session that encrypts adds to every write: the engine
hands it each event before the event is chained, so the chain covers the ciphertext and
destroying the key changes no hash. :class:`OpeningStore` wraps the event store the
session reads: every event it hands out has its sealed fields opened (or, once the key
is destroyed, shown as ``[erased]``); writes pass through untouched. The wrapper declares
none of its inner store's abilities (:func:`agentjournal.store.abilities.abilities_of`),
so a sealed session keeps no plaintext in a store's read model: it reads its events.

The read tools show sealed content the same way, leniently (``shown``): an
``OpeningStore(store, keys, shown=True)`` for what they fold from a store, and
:func:`shown_record` for each event they print, so a key they lack reads ``[sealed]``
instead of failing the read, and the stored bytes stay what is verified.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, replace

from agentjournal.errors import UndecodableEvent
from agentjournal.records import Record, TreeRecords
from agentjournal.shred._cipher import Unopenable, keyed_digest
from agentjournal.shred.fields import (
    ENVELOPE_PREFIX,
    KEY_ID_KEY,
    open_content,
    seal_content,
)
from agentjournal.shred.keys import SubjectKey, SubjectKeyStore
from agentjournal.store.contract import (
    AppendRequest,
    AppendResult,
    EventStore,
    Expected,
    NewEvent,
    RecordedEvent,
)

_MARK = ENVELOPE_PREFIX.encode()


@dataclass(frozen=True)
class SubjectSealer:
    """Seals the content of a session's events under the current key of ``subject``.

    Attributes:
        subject: The data subject whose content the session holds.
        keys: Where the subject's keys live.
    """

    subject: str
    keys: SubjectKeyStore

    def seal(
        self, stream: str, event_id: str, type_: str, data: bytes, metadata: dict[str, str]
    ) -> bytes:
        """``data`` with its content sealed (naming the key in ``metadata``), or as it is
        when its type holds no content."""
        key: SubjectKey = self.keys.current(self.subject)
        sealed = seal_content(type_, data, stream=stream, event_id=event_id, key=key)
        if sealed is None:
            return data
        metadata[KEY_ID_KEY] = key.key_id
        return sealed

    def digest(self, value: str) -> str:
        """The keyed digest of ``value`` under the subject's current key (``hmac-sha256:``,
        :func:`~agentjournal.shred._cipher.keyed_digest`): what a sealed event may carry in
        the clear to name its content; it confirms no guess once the key is destroyed."""
        return keyed_digest(self.keys.current(self.subject).secret, value)

    def opening(self, store: EventStore) -> OpeningStore:
        """``store`` as this session reads it: sealed fields opened."""
        return OpeningStore(store, self.keys)


def open_event(
    event: RecordedEvent, keys: SubjectKeyStore, *, shown: bool = False
) -> RecordedEvent:
    """``event`` with its sealed fields opened (itself when none is sealed); with ``shown``,
    as a read tool displays it (:func:`~agentjournal.shred.fields.open_content`).

    Raises:
        UndecodableEvent: A field is sealed under a key ``keys`` never held, or was altered
            (not with ``shown``).
    """
    if _MARK not in event.data or KEY_ID_KEY not in event.metadata:
        return event
    try:
        data = open_content(
            event.type,
            event.data,
            stream=event.stream,
            event_id=str(event.id),
            find=keys.find,
            shown=shown,
        )
    except KeyError as error:
        raise UndecodableEvent(
            event.stream,
            f"{event.type} at {event.stream}@{event.revision} is sealed under key {error}, which"
            " this key store never held: open the journal with the key store it was written with",
        ) from None
    except Unopenable as error:
        raise UndecodableEvent(
            event.stream,
            f"{event.type} at {event.stream}@{event.revision}: {error} (altered or moved)",
        ) from None
    return RecordedEvent(
        id=event.id,
        type=event.type,
        data=data,
        metadata=event.metadata,
        stream=event.stream,
        revision=event.revision,
        position=event.position,
        recorded_at=event.recorded_at,
    )


def shown_record(record: Record, keys: SubjectKeyStore) -> Record:
    """``record`` as a read tool displays it: its sealed fields opened under ``keys``,
    ``[erased]``, ``[sealed]`` or ``[unopenable]`` (see
    :func:`~agentjournal.shred.fields.open_content`); its place, metadata and
    ``data_sha256`` (the stored bytes') as they are. Itself when nothing is sealed."""
    if record.data is None or ENVELOPE_PREFIX not in record.data:
        return record
    if KEY_ID_KEY not in record.metadata:
        return record
    try:
        data = open_content(
            record.type,
            record.data.encode(),
            stream=record.stream,
            event_id=record.id,
            find=keys.find,
            shown=True,
        )
    except ValueError:  # not JSON: nothing agentjournal sealed; shown as stored
        return record
    return replace(record, data=data.decode())


def shown_streams(
    streams: Mapping[str, Sequence[Record]], keys: SubjectKeyStore
) -> dict[str, list[Record]]:
    """Every record of ``streams`` as :func:`shown_record` displays it."""
    return {name: [shown_record(r, keys) for r in records] for name, records in streams.items()}


def shown_tree(tree: TreeRecords, keys: SubjectKeyStore) -> TreeRecords:
    """Every record of ``tree`` as :func:`shown_record` displays it."""
    return TreeRecords(tree.session_id, shown_streams(tree.streams, keys))


class OpeningStore:
    """``inner`` with every event read opened under ``keys`` (see the module docs); with
    ``shown``, as a read tool displays it (a key ``keys`` never held reads ``[sealed]``,
    an altered value ``[unopenable]``, instead of failing the read).

    Closing it leaves ``inner`` open: its owner closes it.
    """

    def __init__(self, inner: EventStore, keys: SubjectKeyStore, *, shown: bool = False) -> None:
        self.inner = inner
        self.keys = keys
        self.shown = shown

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        return await self.inner.append(stream, events, expected=expected)

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        return await self.inner.append_many(requests)

    async def read(
        self,
        stream: str,
        *,
        from_revision: int | None = None,
        backwards: bool = False,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        read = await self.inner.read(
            stream, from_revision=from_revision, backwards=backwards, limit=limit
        )
        return [open_event(event, self.keys, shown=self.shown) for event in read]

    async def head(self, stream: str) -> int | None:
        return await self.inner.head(stream)

    async def read_all(
        self, *, from_position: int | None = None, limit: int | None = None
    ) -> list[RecordedEvent]:
        read = await self.inner.read_all(from_position=from_position, limit=limit)
        return [open_event(event, self.keys, shown=self.shown) for event in read]

    async def subscribe(self, *, after_position: int | None = None) -> AsyncIterator[RecordedEvent]:
        async for event in self.inner.subscribe(after_position=after_position):
            yield open_event(event, self.keys, shown=self.shown)

    async def close(self) -> None:
        pass
