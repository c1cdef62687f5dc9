"""The saved state of a projection: round trip, fencing, large states, damage."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentjournal.errors import ConcurrencyError, InvalidInput
from agentjournal.read import projections
from agentjournal.store import SQLiteEventStore
from agentjournal.store.contract import NewEvent, StreamState
from agentjournal.streams import projection_stream


async def test_nothing_saved_loads_none(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(str(tmp_path / "s.db")) as store:
        assert await projections.load(store, "catalog") is None


async def test_round_trip_and_fencing(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(str(tmp_path / "s.db")) as store:
        first = await projections.save(store, "catalog", position=7, state=b"abc", after=None)
        loaded = await projections.load(store, "catalog")
        assert loaded == first
        assert (loaded.position, loaded.state) == (7, b"abc")
        second = await projections.save(store, "catalog", position=9, state=b"", after=loaded)
        assert await projections.load(store, "catalog") == second
        # a twin that loaded the first save cannot save over the second
        with pytest.raises(ConcurrencyError):
            await projections.save(store, "catalog", position=8, state=b"x", after=first)
        with pytest.raises(ConcurrencyError):
            await projections.save(store, "catalog", position=1, state=b"x", after=None)
        assert (await projections.load(store, "catalog")) == second


async def test_a_state_larger_than_a_chunk(tmp_path: Path) -> None:
    state = os.urandom(projections.CHUNK_BYTES * 2 + 10)  # incompressible: three chunks
    async with await SQLiteEventStore.open(str(tmp_path / "s.db")) as store:
        await projections.save(store, "big", position=None, state=state, after=None)
        loaded = await projections.load(store, "big")
        assert loaded is not None
        assert loaded.state == state
        assert loaded.position is None
        events = await store.read(projection_stream("big"))
        assert [e.type for e in events] == [projections.CHUNK] * 3 + [projections.SAVED]


async def test_damage_is_reported_not_returned(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(str(tmp_path / "s.db")) as store:
        await store.append(
            projection_stream("bad"),
            [NewEvent(projections.SAVED, b'{"position":1,"chunks":1,"state_sha256":"00"}')],
            expected=StreamState.NO_STREAM,
        )
        with pytest.raises(projections.DamagedProjection, match="chunks are missing"):
            await projections.load(store, "bad")
        await store.append(
            projection_stream("bad2"), [NewEvent("Other", b"{}")], expected=StreamState.NO_STREAM
        )
        with pytest.raises(projections.DamagedProjection):
            await projections.load(store, "bad2")


def test_names_are_ids() -> None:
    with pytest.raises(InvalidInput):
        projection_stream("no spaces")
