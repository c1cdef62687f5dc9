"""Places the branch events name: a stream place, an item place and a cut, with their specs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agentjournal.errors import CodecError
from agentjournal.events._codec import (
    COUNT,
    TEXT,
    Value,
    mapping,
    one_of,
    present,
    wire,
)

CUT_KINDS: Final = ("index", "turn", "revision")


@dataclass(frozen=True, slots=True)
class StreamPlace(Value):
    """One event a fork binds to: a stream, a revision and that event's chain hash.

    The verifier checks that the stream holds at ``revision`` an event whose ``aj.hash``
    is ``hash``: everything before it on that stream is then the chain's.
    """

    stream: str = field(metadata=TEXT)
    revision: int = field(metadata=COUNT)
    hash: str = field(metadata=TEXT)

    NOUN = "a stream place"


@dataclass(frozen=True, slots=True)
class ItemPlace(Value):
    """Where an item is: its event's stream and revision, and which item of the event."""

    stream: str = field(metadata=TEXT)
    revision: int = field(metadata=COUNT)
    part: int = field(metadata=COUNT)

    NOUN = "an item place"


def cut_words(kind: str, value: object) -> str:
    """Where a branch leaves its parent, as the tools print it: ``before #N``,
    ``before turn T`` or ``after @R`` (a kind this version does not know: ``at KIND V``)."""
    return {
        "index": f"before #{value}",
        "turn": f"before turn {value}",
        "revision": f"after @{value}",
    }.get(kind, f"at {kind} {value}")


@dataclass(frozen=True, slots=True)
class Cut(Value):
    """Where a branch leaves its parent line.

    Attributes:
        kind: ``index`` (before item #value), ``turn`` (before turn value's user message) or
            ``revision`` (after revision value of the parent line's top stream).
        value: The index, turn or revision asked for.
        position: The global position the cut resolves to: the parent line's events
            before it are the branch's prefix.
    """

    kind: str = field(metadata=wire(one_of(CUT_KINDS, "cut kind")))
    value: int = field(metadata=COUNT)
    position: int = field(metadata=COUNT)

    NOUN = "cut"

    def text(self) -> str:
        """Where it leaves the parent, as the tools print it (:func:`cut_words`)."""
        return cut_words(self.kind, self.value)


def _to_json(value: Value) -> dict[str, Any]:
    return value.to_json()


def _place(body: Mapping[str, Any], key: str, type_: str) -> StreamPlace:
    return StreamPlace.from_json(body.get(key), type_)


def _optional_place(body: Mapping[str, Any], key: str, type_: str) -> StreamPlace | None:
    value = present(body, key, type_)
    return None if value is None else StreamPlace.from_json(value, type_)


def _write_optional_place(place: StreamPlace | None) -> dict[str, Any] | None:
    return None if place is None else place.to_json()


def _places(body: Mapping[str, Any], key: str, type_: str) -> tuple[StreamPlace, ...]:
    value = body.get(key)
    if not isinstance(value, list) or not value:
        raise CodecError(f"{type_}: {key} must be a non-empty list, got {value!r}")
    places = tuple(StreamPlace.from_json(place, type_) for place in value)
    if len({place.stream for place in places}) != len(places):
        raise CodecError(f"{type_}: {key} names a stream twice")
    return places


def _write_places(places: tuple[StreamPlace, ...]) -> list[dict[str, Any]]:
    return [place.to_json() for place in places]


def _item_place(body: Mapping[str, Any], key: str, type_: str) -> ItemPlace:
    return ItemPlace.from_json(mapping(body, key, type_), type_)


def _cut(body: Mapping[str, Any], key: str, type_: str) -> Cut:
    return Cut.from_json(body.get(key), type_)


PLACE: Final = wire(_place, write=_to_json)
"""A :class:`StreamPlace` (a missing one is refused as a non-object)."""
OPTIONAL_PLACE: Final = wire(_optional_place, write=_write_optional_place, screen=present)
"""A :class:`StreamPlace` or null, which must be there (screened for presence alone)."""
PLACES: Final = wire(_places, write=_write_places)
"""A non-empty list of :class:`StreamPlace` on distinct streams."""
ITEM_PLACE: Final = wire(_item_place, write=_to_json, screen=mapping)
"""An :class:`ItemPlace` (screened for being an object alone)."""
CUT: Final = wire(_cut, write=_to_json)
"""A :class:`Cut` (a missing one is refused as a non-object)."""
