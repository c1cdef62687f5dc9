"""A minimal correct Session and broken variants of it, to show the conformance suite bites.

:class:`ListSession` keeps each session's items as JSON text on a shared
:class:`Shelf` (the "store"); it passes the whole suite. Each mutant breaks one
rule of the ``Session`` contract the way real implementations have (a
``pop_item`` that removed nothing, ``items[-limit:]`` with ``limit=0``, a
read-modify-write across an ``await``, a per-object cache, ...), and
:data:`MUTANTS` names the suite's tests that must fail for it.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit


class Shelf:
    """The store of :class:`ListSession`: rows per session id; ``memory`` is lost on reopen."""

    def __init__(self, rows: dict[str, list[str]] | None = None) -> None:
        self.rows: dict[str, list[str]] = rows if rows is not None else {}
        self.memory: dict[str, list[str]] = {}

    def reopen(self) -> Shelf:
        """The shelf as a new process finds it."""
        return Shelf({key: list(rows) for key, rows in self.rows.items()})


class ListSession:
    """A correct ``Session`` in a few lines: every method is one step with no ``await`` inside."""

    def __init__(self, session_id: str, shelf: Shelf) -> None:
        self.session_id = session_id
        self.session_settings: SessionSettings | None = None
        self.shelf = shelf

    def rows(self) -> list[str]:
        return self.shelf.rows.setdefault(self.session_id, [])

    def encode(self, item: Any) -> str:
        return json.dumps(item)

    def decode(self, row: str) -> Any:
        return json.loads(row)

    def window(self, rows: list[str], limit: int | None) -> list[str]:
        resolved = resolve_session_limit(limit, self.session_settings)
        if resolved is None:
            return rows
        return rows[-resolved:] if resolved > 0 else []

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return [self.decode(row) for row in self.window(self.rows(), limit)]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self.rows().extend(self.encode(item) for item in items)

    async def pop_item(self) -> TResponseInputItem | None:
        rows = self.rows()
        return self.decode(rows.pop()) if rows else None

    async def clear_session(self) -> None:
        self.rows().clear()


# -- mutants ------------------------------------------------------------------------------


class RenamesTheSessionId(ListSession):
    def __init__(self, session_id: str, shelf: Shelf) -> None:
        super().__init__(session_id.upper(), shelf)


class PopOnEmptyFails(ListSession):
    async def pop_item(self) -> TResponseInputItem | None:
        item: TResponseInputItem = self.decode(self.rows().pop())
        return item


class NewestFirst(ListSession):
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        return list(reversed(await super().get_items(limit)))


class BelongsToOneLoop(ListSession):
    """Bound to the first event loop that uses it, like a gRPC channel."""

    loop: asyncio.AbstractEventLoop | None = None

    def rows(self) -> list[str]:
        loop = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = loop
        if loop is not self.loop:
            raise RuntimeError("attached to a different loop")
        return super().rows()


class LimitFromTheStart(ListSession):
    def window(self, rows: list[str], limit: int | None) -> list[str]:
        resolved = resolve_session_limit(limit, self.session_settings)
        return rows if resolved is None else rows[:resolved]


class LimitZeroIsEverything(ListSession):
    def window(self, rows: list[str], limit: int | None) -> list[str]:
        resolved = resolve_session_limit(limit, self.session_settings)
        return rows if resolved is None else rows[-resolved:]


class IgnoresSessionSettings(ListSession):
    def window(self, rows: list[str], limit: int | None) -> list[str]:
        if limit is None:
            return rows
        return rows[-limit:] if limit > 0 else []


class PopsTheOldest(ListSession):
    async def pop_item(self) -> TResponseInputItem | None:
        rows = self.rows()
        return self.decode(rows.pop(0)) if rows else None


class PopRemovesNothing(ListSession):
    async def pop_item(self) -> TResponseInputItem | None:
        rows = self.rows()
        return self.decode(rows[-1]) if rows else None


class ClearHidesFromReadsOnly(ListSession):
    """``get_items`` starts after the cut; ``pop_item`` still reaches behind it."""

    cut: int = 0

    def window(self, rows: list[str], limit: int | None) -> list[str]:
        return super().window(rows[self.cut :], limit)

    async def clear_session(self) -> None:
        self.cut = len(self.rows())


class SharesItemsOut(ListSession):
    """Keeps the objects themselves and hands them out."""

    def encode(self, item: Any) -> Any:
        return copy.deepcopy(item)

    def decode(self, row: Any) -> Any:
        return row


class KeepsTheGivenItems(ListSession):
    """Keeps the caller's objects and hands out copies."""

    def encode(self, item: Any) -> Any:
        return item

    def decode(self, row: Any) -> Any:
        return copy.deepcopy(row)


class EmptyAddFails(ListSession):
    async def add_items(self, items: list[TResponseInputItem]) -> None:
        if not items:
            raise ValueError("nothing to add")
        await super().add_items(items)


class AddsItemByItem(ListSession):
    async def add_items(self, items: list[TResponseInputItem]) -> None:
        for item in items:
            self.rows().append(self.encode(item))
            await asyncio.sleep(0)


class LosesConcurrentUpdates(ListSession):
    async def add_items(self, items: list[TResponseInputItem]) -> None:
        rows = list(self.rows())
        await asyncio.sleep(0)
        self.shelf.rows[self.session_id] = rows + [self.encode(item) for item in items]


class PopsTwice(ListSession):
    async def pop_item(self) -> TResponseInputItem | None:
        rows = self.rows()
        if not rows:
            return None
        row = rows[-1]
        await asyncio.sleep(0)
        if rows and rows[-1] == row:
            rows.pop()
        item: TResponseInputItem = self.decode(row)
        return item


class StaleCache(ListSession):
    """Reads the shelf once, then serves and updates its own copy."""

    def __init__(self, session_id: str, shelf: Shelf) -> None:
        super().__init__(session_id, shelf)
        self.cache: list[str] | None = None

    def rows(self) -> list[str]:
        if self.cache is None:
            self.cache = list(super().rows())
        return self.cache

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        await super().add_items(items)
        self.shelf.rows[self.session_id] = list(self.rows())


class ForgetsOnRestart(ListSession):
    def rows(self) -> list[str]:
        return self.shelf.memory.setdefault(self.session_id, [])


class IgnoresTheSessionId(ListSession):
    def rows(self) -> list[str]:
        return self.shelf.rows.setdefault("one-for-all", [])


class DropsNoneValues(ListSession):
    def encode(self, item: Any) -> str:
        return json.dumps({key: value for key, value in item.items() if value is not None})


class WholeFloatsBecomeInts(ListSession):
    """``==`` cannot tell (``1 == 1.0``); the runner's fingerprint can."""

    def decode(self, row: str) -> Any:
        return json.loads(row, parse_float=_whole_to_int)


def _whole_to_int(text: str) -> float | int:
    number = float(text)
    return int(number) if number.is_integer() else number


MUTANTS: dict[type[ListSession], tuple[str, ...]] = {
    RenamesTheSessionId: ("test_is_a_session",),
    BelongsToOneLoop: ("test_one_object_serves_several_event_loops",),
    PopOnEmptyFails: ("test_a_new_session_is_empty", "test_empty_add_items_is_a_no_op"),
    NewestFirst: (
        "test_add_items_appends_in_order_across_calls",
        "test_limit_returns_the_latest_in_order[3]",
    ),
    LimitFromTheStart: (
        "test_limit_returns_the_latest_in_order[3]",
        "test_sdk_items_round_trip_in_one_call",
        "test_a_second_object_shares_the_history",
    ),
    LimitZeroIsEverything: (
        "test_limit_zero_returns_nothing",
        "test_session_settings_limit_is_the_default",
    ),
    IgnoresSessionSettings: ("test_session_settings_limit_is_the_default",),
    PopsTheOldest: (
        "test_pop_returns_the_newest_and_removes_it",
        "test_add_after_pop_continues_the_history",
        "test_sdk_items_pop_back_exactly",
    ),
    PopRemovesNothing: (
        "test_pop_returns_the_newest_and_removes_it",
        "test_a_popped_item_is_a_copy",
        "test_concurrent_pops_take_each_item_once",
    ),
    ClearHidesFromReadsOnly: ("test_clear_empties_and_adding_after_works",),
    SharesItemsOut: ("test_returned_items_are_copies", "test_a_popped_item_is_a_copy"),
    KeepsTheGivenItems: ("test_given_items_are_copied",),
    EmptyAddFails: ("test_empty_add_items_is_a_no_op",),
    AddsItemByItem: (
        "test_concurrent_add_items_on_one_object",
        "test_a_reader_sees_whole_calls_only",
    ),
    LosesConcurrentUpdates: (
        "test_concurrent_add_items_on_one_object",
        "test_concurrent_add_items_on_two_objects",
    ),
    PopsTwice: (
        "test_concurrent_pops_take_each_item_once",
        "test_racing_adds_and_pops_lose_and_duplicate_nothing",
    ),
    StaleCache: ("test_a_second_object_shares_the_history",),
    ForgetsOnRestart: ("test_the_history_survives_a_restart",),
    IgnoresTheSessionId: ("test_session_ids_are_isolated",),
    DropsNoneValues: (
        "test_sdk_items_round_trip_in_one_call",
        "test_sdk_items_pop_back_exactly",
        "test_sdk_items_round_trip_one_per_call",
    ),
    WholeFloatsBecomeInts: (
        "test_sdk_items_round_trip_in_one_call",
        "test_sdk_items_round_trip_one_per_call",
    ),
}
"""Each mutant and the suite's tests that must fail against it (``name[limit]`` for a parameter)."""
