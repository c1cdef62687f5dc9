"""The events the trace projector folds: a :class:`~agentjournal.records.Record`, or a
stored event read as one without building it (:class:`StoredEvent`, an export of every tree).

An export of every tree folds every event of the store once; a ``Record`` per event (a
frozen dataclass, its metadata behind a read-only proxy) was a quarter of its time. A
:class:`StoredEvent` holds the same fields, read from the stored event with the same checks
in the same order (:meth:`StoredEvent.of` raises the ``DamagedEvent`` ``Record.of``
raises), and gives its body and the stream it opens by ``Record``'s own rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, Protocol

from agentjournal.records import Record, stored_columns

if TYPE_CHECKING:
    from agentjournal.store.contract import RecordedEvent


class Event(Protocol):
    """What the projector reads of an event: a :class:`Record` or a :class:`StoredEvent`."""

    @property
    def stream(self) -> str: ...
    @property
    def revision(self) -> int: ...
    @property
    def id(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def data(self) -> str | None: ...
    @property
    def metadata(self) -> Mapping[str, str]: ...
    @property
    def position(self) -> int | None: ...
    @property
    def recorded_at(self) -> datetime | None: ...
    @property
    def body(self) -> dict[str, Any] | None: ...
    @property
    def opens(self) -> str | None: ...


# Record's own rules, run on a StoredEvent: they read its data, view, type, stream and body.
_body_of: Final[Callable[[Any], dict[str, Any] | None]] = vars(Record)["body"].func
_opens_of: Final[Callable[[Any], str | None]] = vars(Record)["opens"].fget
_UNREAD: Final[Any] = object()


class StoredEvent:
    """A stored event as the projector reads it: a record's fields, without a ``Record``.

    Attributes:
        raw: The data's stored bytes (what ``data`` decodes from).
        Every other attribute is the :class:`Record` attribute of the same name.
    """

    __slots__ = (
        "_body",
        "data",
        "id",
        "metadata",
        "position",
        "raw",
        "recorded_at",
        "revision",
        "stream",
        "type",
    )

    view: Final = None  # nothing is withheld from a stored event

    stream: str
    revision: int
    id: str
    type: str
    data: str
    raw: bytes
    metadata: Mapping[str, str]
    position: int
    recorded_at: datetime
    _body: dict[str, Any] | None

    @classmethod
    def of(cls, event: RecordedEvent) -> StoredEvent:
        """``event`` as the projector reads it; what :meth:`Record.of` checks, checked alike.

        Raises:
            DamagedEvent: It cannot be read as any event agentjournal writes can (the error
                ``Record.of`` raises for it).
        """
        event_id, metadata, text = stored_columns(event)
        made = _new(cls)
        made.stream = event.stream
        made.revision = event.revision
        made.id = event_id
        made.type = event.type
        made.data = text
        made.raw = event.data
        made.metadata = metadata
        made.position = event.position
        made.recorded_at = event.recorded_at
        made._body = _UNREAD
        return made

    @property
    def body(self) -> dict[str, Any] | None:
        """:attr:`Record.body`: the data as a JSON object (parsed once), else None."""
        body = self._body
        if body is _UNREAD:
            body = self._body = _body_of(self)
        return body

    @property
    def opens(self) -> str | None:
        """:attr:`Record.opens`: the subsession this parent copy of ``SubagentStarted``
        opens, else None."""
        return _opens_of(self)


_new: Final = object.__new__


def data_of(event: Event) -> bytes:
    """The event's data as bytes, for a decoder (a stored event's own bytes)."""
    if type(event) is StoredEvent:
        return event.raw
    return (event.data or "").encode()
