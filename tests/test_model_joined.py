"""The read model's items read in one row: a SQLite model read
joins the item texts, keys and indexes in SQL (``store.model.ModelItems``) and a full read
parses all items in one ``orjson`` call. Each test holds the joined form to the rows it
stands for and the model read to the events read, on the edges a join could get wrong:
texts with commas, brackets, quotes, escapes and text beyond the BMP, big integers, NaN,
no item and one item, indexes with a gap, streams numbered with gaps, a text with a
newline of its own, a text that is not one JSON value.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal import JournalSession
from agentjournal.engine.timeline import ENTRY_BYTES, Timeline
from agentjournal.store.contract import (
    ModelItems,
    ModelSnapshot,
)
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.store.sqlite import _model as sqlite_store
from agentjournal.store.sqlite._stored import Unpacker
from agentjournal.streams import session_stream
from drive import drive
from handoff_scenarios import nested, single
from store_without_read_model import WithoutReadModel


def _state(session: JournalSession) -> dict[str, Any]:
    """What a session tree took on from a read, item texts byte for byte."""
    tree = session._core.tree
    timeline = tree.timeline
    return {
        "entries": [(e.key, e.index, e.item_json) for e in timeline.entries],
        "complete": timeline.complete,
        "floor": timeline.floor,
        "heads": tree.heads,
        "hashes": tree.hashes,
        "chain": [s.stream for s in tree.chain],
        "next_index": tree.next_index,
        "size": timeline.size,
    }


async def _same(store: SQLiteEventStore, session_id: str) -> list[Any]:
    """A cold full read through the model equals one through the events (items, their JSON
    text, the tree); then a pop by each reader leaves the two equal again (the rows made
    from the joined form). The items, as read."""
    modelled = JournalSession(store, session_id)
    from_model = await modelled.get_items()
    evented = JournalSession(WithoutReadModel(store), session_id)
    from_events = await evented.get_items()
    assert json.dumps(from_model) == json.dumps(from_events)
    assert _state(modelled) == _state(evented)
    return from_model


async def _snapshot(store: SQLiteEventStore, session_id: str) -> ModelSnapshot:
    snapshot = await store.read_model(session_stream(session_id))
    assert snapshot is not None
    return snapshot


def _rows(path: Path, session_id: str) -> list[tuple[int, int, str]]:
    """The model's rows as the row-per-item query reads them."""
    db = sqlite3.connect(path)
    Unpacker(db)  # the query reads compressed items' text through the stored form's function
    try:
        (root,) = db.execute(
            "SELECT id FROM streams WHERE name = ?", (session_stream(session_id),)
        ).fetchone()
        return db.execute(sqlite_store._MODEL_ITEMS, (root,)).fetchall()
    finally:
        db.close()


def _edit(path: Path, sql: str, *params: Any) -> None:
    db = sqlite3.connect(path)
    try:
        assert db.execute(sql, params).rowcount == 1
        db.commit()
    finally:
        db.close()


_ODD: list[Any] = [
    {"role": "user", "content": 'a, b], [c}, {d"e\\f ,\n\t'},
    {"role": "assistant", "content": "ünïcode ✓ 😀 \u2028 \x00 \ud7ff"},
    {"role": "user", "content": [{"type": "input_text", "text": "[1,2],[3]"}]},
    {"role": "user", "content": "", "extra": {"k": [], "m": {}, "n": None, "t": True}},
    {"role": "user", "content": "x", "n": -0.0, "f": 1e-320, "g": 1.7976931348623157e308},
]


@pytest.mark.parametrize(
    "extra",
    [
        [],
        [{"role": "user", "content": "big", "n": 12345678901234567890123}],  # not plain
        [{"role": "user", "content": "lone \ud800 surrogate"}],  # plain, orjson refuses it
    ],
    ids=["plain", "big-integer", "lone-surrogate"],
)
async def test_joined_items_are_the_rows_and_read_exactly(tmp_path: Path, extra: list[Any]) -> None:
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await session.add_items([*_ODD, *extra])
        await drive(nested(), "go", session=session, hooks=session)
        snapshot = await _snapshot(store, "s")
        assert isinstance(snapshot.items, ModelItems)
        assert snapshot.items.texts is not None  # joined: one row for all
        assert list(snapshot.items) == _rows(tmp_path / "j.db", "s")
        items = await _same(store, "s")
        assert items[: len(_ODD)] == _ODD
        assert json.dumps(items[len(_ODD) : len(_ODD) + len(extra)]) == json.dumps(extra)
        reader = JournalSession(store, "s")  # its rows made from the joined form by a pop
        assert await reader.get_items() == items
        assert json.dumps(await reader.pop_item()) == json.dumps(items[-1])
        assert json.dumps(await reader.get_items()) == json.dumps(items[:-1])
        await _same(store, "s")


async def test_a_tree_with_no_item_and_with_one(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await session.add_items([{"role": "user", "content": "only"}])
        snapshot = await _snapshot(store, "s")
        assert isinstance(snapshot.items, ModelItems)
        assert len(snapshot.items) == 1
        assert await _same(store, "s") == [{"role": "user", "content": "only"}]
        await session.pop_item()
        snapshot = await _snapshot(store, "s")
        assert list(snapshot.items) == []
        assert await _same(store, "s") == []
        reader = JournalSession(store, "s")
        assert await reader.get_items() == []
        assert await reader.pop_item() is None
        await reader.add_items([{"role": "user", "content": "again"}])  # continues exactly
        assert await _same(store, "s") == [{"role": "user", "content": "again"}]
        await reader.clear_session()
        assert await _same(store, "s") == []


async def test_indexes_with_a_gap_and_after_a_clear(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await session.add_items([{"role": "user", "content": str(n)} for n in range(4)])
        await session.pop_item()
        await session.add_items([{"role": "user", "content": "after the pop"}])
        indexes = [index for index, _, _ in (await _snapshot(store, "s")).items]
        assert indexes != list(range(indexes[0], indexes[-1] + 1))  # a gap
        assert indexes == [index for index, _, _ in _rows(tmp_path / "j.db", "s")]
        await _same(store, "s")
        await session.clear_session()
        await session.add_items([{"role": "user", "content": str(n)} for n in range(3)])
        indexes = [index for index, _, _ in (await _snapshot(store, "s")).items]
        assert indexes[0] > 0
        assert indexes == list(range(indexes[0], indexes[0] + 3))
        await _same(store, "s")


async def test_streams_numbered_with_gaps_check_each_item_stream(tmp_path: Path) -> None:
    """Two sessions written in turns: a tree's streams are numbered with gaps, and the
    check that every item is on one of the tree's streams looks each one up. An item
    moved (by hand) to another tree's stream sends the reader to the events."""
    path = tmp_path / "j.db"
    async with await SQLiteEventStore.open(path) as store:
        first, second = JournalSession(store, "a"), JournalSession(store, "b")
        await drive(single(), "go", session=first, hooks=first)
        await drive(single(), "go", session=second, hooks=second)
        await drive(single(), "again", session=first, hooks=first)
        snapshot = await _snapshot(store, "a")
        numbers = sorted(snapshot.names)
        assert numbers != list(range(numbers[0], numbers[-1] + 1))
        await _same(store, "a")
        await _same(store, "b")
    db = sqlite3.connect(path)
    root, other = (
        db.execute("SELECT id FROM streams WHERE name = ?", (session_stream(name),)).fetchone()[0]
        for name in ("a", "b")
    )
    db.close()
    _edit(path, "UPDATE items SET stream_id = ? WHERE idx = 1 AND tree = ?", other, root)
    async with await SQLiteEventStore.open(path) as store:
        assert await store.read_model(session_stream("a")) is None
        evented = await JournalSession(WithoutReadModel(store), "a").get_items()
        assert await JournalSession(store, "a").get_items() == evented


async def test_an_item_on_a_stream_outside_a_gapless_tree_reads_the_events(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.db"
    async with await SQLiteEventStore.open(path) as store:
        session = JournalSession(store, "s")
        await drive(nested(), "go", session=session, hooks=session)
        snapshot = await _snapshot(store, "s")
        numbers = sorted(snapshot.names)
        assert numbers == list(range(numbers[0], numbers[-1] + 1))  # gapless
    _edit(path, "UPDATE items SET stream_id = ? WHERE idx = 0", numbers[-1] + 1)
    async with await SQLiteEventStore.open(path) as store:
        assert await store.read_model(session_stream("s")) is None
        evented = await JournalSession(WithoutReadModel(store), "s").get_items()
        assert await JournalSession(store, "s").get_items() == evented


async def test_a_text_with_a_newline_of_its_own_is_read_as_rows(tmp_path: Path) -> None:
    """No item text this engine writes holds a newline (compact JSON); one put there by
    hand would not split back from the joined texts, so the model is read row by row."""
    path = tmp_path / "j.db"
    async with await SQLiteEventStore.open(path) as store:
        session = JournalSession(store, "s")
        await session.add_items([{"role": "user", "content": str(n)} for n in range(3)])
    edited = '{"role": "user",\n "content": "1",\n\n "x": [1,\n2]}'
    _edit(path, "UPDATE items SET item = ? WHERE idx = 1", edited)
    async with await SQLiteEventStore.open(path) as store:
        snapshot = await _snapshot(store, "s")
        assert isinstance(snapshot.items, ModelItems)
        assert snapshot.items.texts is None
        assert [text for _, _, text in snapshot.items][1] == edited
        reader = JournalSession(store, "s")
        assert (await reader.get_items())[1] == json.loads(edited)
        assert [e.item_json for e in reader._core.tree.timeline.entries][1] == edited
        assert await reader.pop_item() == {"role": "user", "content": "2"}
        assert await reader.get_items() == [{"role": "user", "content": "0"}, json.loads(edited)]


@pytest.mark.parametrize("text", ["1, 2", "", '{"a": 1}, {"b": 2', "[1"])
async def test_a_text_that_is_not_one_json_value_fails_as_before(tmp_path: Path, text: str) -> None:
    """The joined texts parse as one array only when each is one JSON value; a text edited
    into something else fails the read as it did when every row was parsed alone."""
    path = tmp_path / "j.db"
    async with await SQLiteEventStore.open(path) as store:
        session = JournalSession(store, "s")
        await session.add_items([{"role": "user", "content": str(n)} for n in range(3)])
    _edit(path, "UPDATE items SET item = ? WHERE idx = 1", text)
    async with await SQLiteEventStore.open(path) as store:
        with pytest.raises(json.JSONDecodeError):
            await JournalSession(store, "s").get_items()


# -- ModelItems itself ------------------------------------------------------------------------

_texts = st.builds(
    lambda value: json.dumps(value, ensure_ascii=False),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=6,
    ),
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**62), _texts), max_size=12))
def test_joined_items_equal_their_rows(drawn: list[tuple[int, int, str]]) -> None:
    """Joined texts, keys and indexes (a range when gapless) give back exactly the rows:
    all of them, the newest ``n``, their text length, a timeline's size."""
    index, rows = 0, []
    for gap, key, text in drawn:
        index += gap
        rows.append((index, key, text))
        index += 1
    indexes = [row[0] for row in rows]
    gapless = bool(rows) and indexes == list(range(indexes[0], indexes[-1] + 1))
    joined = ModelItems.joined(
        ",\n".join(text for _, _, text in rows),
        ",".join(str(key) for _, key, _ in rows),
        range(indexes[0], indexes[-1] + 1) if gapless else ",".join(map(str, indexes)),
        len(rows),
    )
    if not rows:
        joined = ModelItems.joined("", "", range(0), 0)
    assert list(joined) == rows
    assert len(joined) == len(rows)
    assert joined == ModelItems.of_rows(rows) == rows
    for n in range(1, len(rows) + 2 if rows else 1):
        assert ModelItems.joined(joined.texts or "", *_parts(rows, gapless)).last(n) == rows[-n:]
    assert joined.chars() == sum(len(text) for _, _, text in rows)
    names = {key >> 40: "S" for _, key, _ in rows}
    assert Timeline.modelled(joined, names, -1, True).size == len(rows) * ENTRY_BYTES + sum(
        len(text) for _, _, text in rows
    )


def _parts(rows: list[tuple[int, int, str]], gapless: bool) -> tuple[str, str | range, int]:
    indexes = [row[0] for row in rows]
    return (
        ",".join(str(key) for _, key, _ in rows),
        range(indexes[0], indexes[-1] + 1) if gapless else ",".join(map(str, indexes)),
        len(rows),
    )
