"""Property: any batch of items round-trips through a session exactly, or nothing is written."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import CodecError, Journal, JournalSession
from test_codec import bad_items, items

BATCHES = st.lists(st.lists(items() | bad_items(), min_size=1, max_size=4), min_size=1, max_size=4)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(BATCHES)
def test_batches_round_trip_exactly_or_write_nothing(batches: list[list[Any]]) -> None:
    asyncio.run(_check(batches))


async def _check(batches: list[list[Any]]) -> None:
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session("prop")
        kept: list[Any] = []
        for batch in batches:
            head = await journal.store.head(session.stream)
            try:
                await session.add_items(batch)
            except CodecError:
                assert await journal.store.head(session.stream) == head  # all or nothing
                continue
            kept.extend(batch)
        expected = [json.dumps(item) for item in kept]
        assert [json.dumps(item) for item in await session.get_items()] == expected
        cold = JournalSession(journal.store, "prop")  # its own cache: reads the store
        assert [json.dumps(item) for item in await cold.get_items()] == expected


async def test_an_item_whose_metadata_fields_are_not_unicode_writes_nothing(tmp_path: Path) -> None:
    # A lone surrogate is kept by JSON data, but a field the write copies into metadata
    # (aj.call_id, a tool rule) cannot be chained.
    item: dict[str, Any] = {
        "type": "function_call",
        "call_id": "c1",
        "name": "f",
        "arguments": "{}",
    }
    item["call_id"] = "\ud800"
    async with Journal.open(f"sqlite:///{tmp_path / 's.db'}") as journal:
        session = journal.session("s")
        await session.add_items([{"role": "user", "content": "hi"}])
        with pytest.raises(CodecError, match="lone surrogate"):
            await session.add_items([{"role": "user", "content": "more"}, item])  # type: ignore[list-item]
        assert await session.get_items() == [{"role": "user", "content": "hi"}]
