"""The one JSON codec of agentjournal's own events: field specs, one encode, one decode.

An event (or a value nested in one) is a frozen dataclass whose fields, in order, are
the members of its JSON object, under the same names. A field's ``metadata`` may hold a
:class:`Wire` (the constants below: ``field(metadata=TEXT)``) saying how the member is
read and checked, and how it is written; a field without one is any JSON value the
object must hold, written as it is.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self

from agentjournal._fastjson import loads_bytes
from agentjournal.errors import CodecError

Reader = Callable[[Mapping[str, Any], str, str], Any]
"""``(object, key, event type) -> value``: one member read and checked.

Raises:
    CodecError: The member is missing or malformed (the message names the event type).
"""


@dataclass(frozen=True, slots=True)
class Wire:
    """How one field is on the wire.

    Attributes:
        read: Reads the member from the event's JSON object.
        write: Its JSON value from the field's value; None: the value as it is.
        screen: A check that runs instead of ``read`` when the class lists the field in
            ``READ_FIRST`` (``read`` then runs in field order).
    """

    read: Reader
    write: Callable[[Any], Any] | None = None
    screen: Reader | None = None


_WIRE: Final = "agentjournal.wire"


def wire(
    read: Reader, *, write: Callable[[Any], Any] | None = None, screen: Reader | None = None
) -> Mapping[str, Wire]:
    """A field's ``metadata`` naming its :class:`Wire`."""
    return {_WIRE: Wire(read, write, screen)}


def _lacks(type_: str, key: str) -> CodecError:
    return CodecError(f"{type_} lacks {key!r}")


def present(body: Mapping[str, Any], key: str, type_: str) -> Any:
    """Any JSON value, which must be there (null included)."""
    try:
        return body[key]
    except KeyError:
        raise _lacks(type_, key) from None


def text(body: Mapping[str, Any], key: str, type_: str) -> str:
    """A non-empty string."""
    value = present(body, key, type_)
    if not isinstance(value, str) or not value:
        raise CodecError(f"{type_}: {key} must be a non-empty string, got {value!r}")
    return value


def text_or_empty(body: Mapping[str, Any], key: str, type_: str) -> str:
    """A string, empty or not (the message still asks for a non-empty one)."""
    value = present(body, key, type_)
    if not isinstance(value, str):
        raise CodecError(f"{type_}: {key} must be a non-empty string, got {value!r}")
    return value


def optional_text(body: Mapping[str, Any], key: str, type_: str) -> str | None:
    """A string or null, which must be there."""
    if present(body, key, type_) is None:
        return None
    return text_or_empty(body, key, type_)


def at_least(least: int) -> Reader:
    """An integer (not a boolean) >= ``least``."""

    def read(body: Mapping[str, Any], key: str, type_: str) -> int:
        value = present(body, key, type_)
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise CodecError(f"{type_}: {key} must be an integer >= {least}, got {value!r}")
        return value

    return read


count: Final = at_least(0)
"""An integer (not a boolean) >= 0."""


def one_of(values: Collection[str], label: str | None = None) -> Reader:
    """A non-empty string among ``values`` (``label`` names it in the message, else its key)."""

    def read(body: Mapping[str, Any], key: str, type_: str) -> str:
        value = text(body, key, type_)
        if value not in values:
            raise CodecError(f"{type_}: {label or key} must be one of {values}, got {value!r}")
        return value

    return read


def event_id(body: Mapping[str, Any], key: str, type_: str) -> str:
    """The text of an event id (a UUID)."""
    value = text(body, key, type_)
    try:
        uuid.UUID(value)
    except ValueError:
        raise CodecError(f"{type_}: {key} must be an event id, got {value!r}") from None
    return value


def mapping(body: Mapping[str, Any], key: str, type_: str) -> Mapping[str, Any]:
    """A JSON object."""
    value = present(body, key, type_)
    if not isinstance(value, dict):
        raise CodecError(f"{type_}: {key} must be a JSON object, got {value!r}")
    return value


def plain(kind: type[Any]) -> Reader:
    """A value of ``kind`` (a boolean is no ``int``), any value of it; the message names
    the key alone, as the events read this way always have."""

    def read(body: Mapping[str, Any], key: str, type_: str) -> Any:
        value = present(body, key, type_)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise CodecError(f"{key} must be {kind.__name__}, got {value!r}")
        return value

    return read


TEXT: Final = wire(text)
TEXT_OR_EMPTY: Final = wire(text_or_empty)
OPTIONAL_TEXT: Final = wire(optional_text)
COUNT: Final = wire(count)
EVENT_ID: Final = wire(event_id)
PLAIN_STR: Final = wire(plain(str))
PLAIN_INT: Final = wire(plain(int))
_ANY: Final = Wire(present)

_Step = tuple[str, Reader, bool]

# Each class's specs, worked out once on first use (a class's fields never change).
_WRITERS: dict[type, tuple[tuple[str, Callable[[Any], Any] | None], ...]] = {}
_STEPS: dict[tuple[type, tuple[str, ...]], tuple[_Step, ...]] = {}


def _specs(cls: type) -> dict[str, Wire]:
    return {field.name: field.metadata.get(_WIRE, _ANY) for field in dataclasses.fields(cls)}


def _writers(cls: type) -> tuple[tuple[str, Callable[[Any], Any] | None], ...]:
    writers = _WRITERS.get(cls)
    if writers is None:
        writers = _WRITERS[cls] = tuple((name, spec.write) for name, spec in _specs(cls).items())
    return writers


def _steps(cls: type, first: tuple[str, ...]) -> tuple[_Step, ...]:
    """What reading ``cls`` does, in order: (key, reader, keep its value)."""
    steps = _STEPS.get((cls, first))
    if steps is None:
        specs = _specs(cls)
        early = [(name, specs[name]) for name in first]
        done = {name for name, spec in early if spec.screen is None}
        steps = _STEPS[cls, first] = (
            *(
                (name, spec.read, True) if spec.screen is None else (name, spec.screen, False)
                for name, spec in early
            ),
            *((name, spec.read, True) for name, spec in specs.items() if name not in done),
        )
    return steps


def json_object(value: object) -> dict[str, Any]:
    """The JSON object of a record: its fields in order, each written by its spec."""
    return {
        name: getattr(value, name) if write is None else write(getattr(value, name))
        for name, write in _writers(type(value))
    }


def read_fields(
    cls: type[object], body: Mapping[str, Any], type_: str, first: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The field values of a ``cls`` read from its JSON object (``first`` read first).

    Raises:
        CodecError: A member is missing or malformed.
    """
    values: dict[str, Any] = {}
    for key, read, keep in _steps(cls, first):
        value = read(body, key, type_)
        if keep:
            values[key] = value
    return values


def json_body(data: bytes, type_: str) -> dict[str, Any]:
    """The JSON object an event's data holds.

    Raises:
        CodecError: The data is not a JSON object.
    """
    try:
        body = loads_bytes(data)  # json.loads's value and error, mostly through orjson
    except ValueError as error:
        raise CodecError(f"{type_} data is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise CodecError(f"{type_} data is not a JSON object")
    return body


class Value:
    """A record nested in an event's JSON object (see the module docstring)."""

    __slots__ = ()
    NOUN: ClassVar[str]
    """What the refusal of a non-object calls it."""

    def to_json(self) -> dict[str, Any]:
        """Its JSON object."""
        return json_object(self)

    @classmethod
    def from_json(cls, body: Any, type_: str) -> Self:
        """Read one back from ``type_``'s data.

        Raises:
            CodecError: ``body`` is not such an object.
        """
        if not isinstance(body, dict):
            raise CodecError(f"{type_}: {cls.NOUN} must be a JSON object, got {body!r}")
        return cls(**read_fields(cls, body, type_))


class Event:
    """One of agentjournal's own events, its data a JSON object (see the module docstring)."""

    __slots__ = ()
    EVENT_TYPE: ClassVar[str]
    READ_FIRST: ClassVar[tuple[str, ...]] = ()
    """Fields read before the others, in this order. Of a body's several faults, the one it
    is refused for is what a reader reports (a verifier's finding quotes it), so each class
    keeps the order its fields have always been checked in."""
    SPACED: ClassVar[bool] = False
    """Written with ``json.dumps``' default separators and ASCII escapes, not compact UTF-8."""

    def encode(self) -> bytes:
        """Its data: compact UTF-8 JSON of every field (unless ``SPACED``)."""
        body = json_object(self)
        if self.SPACED:
            return json.dumps(body).encode()
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Self:
        """Read it back.

        Raises:
            CodecError: The data is not such an event.
        """
        type_ = cls.EVENT_TYPE
        return cls(**read_fields(cls, json_body(data, type_), type_, cls.READ_FIRST))
