"""The SQLite store's read model (schema version 2): a cold full read answered from the
visible items written with the events, exactly as from the events, and each fallback.

Every comparison reads the same file twice from fresh session objects: once through the
store (the model) and once through a wrapper without ``read_model`` (the events).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal import JournalSession
from agentjournal._fastjson import loads as parse_item
from agentjournal._fastjson import plain_text
from agentjournal.engine.timeline import Entry, items_of
from agentjournal.engine.tree import SessionTree
from agentjournal.errors import StoreUnavailable
from agentjournal.store.abilities import ReadModel, abilities_of
from agentjournal.store.contract import (
    MODEL_PARTS,
    MODEL_REVISIONS,
    AppendRequest,
    AppendResult,
    Expected,
    ModelAdd,
    ModelChange,
    ModelSnapshot,
    NewEvent,
    RecordedEvent,
    StreamState,
    model_place,
)
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.store.sqlite import _model as sqlite_store
from agentjournal.store.sqlite._stored import Unpacker
from agentjournal.streams import session_stream
from drive import drive
from handoff_scenarios import failing, nested, single, top_level
from store_without_read_model import WithoutReadModel

# -- exact parsing --------------------------------------------------------------------------


def _shape(value: Any) -> Any:
    """A value with its exact types, key order and float bits (NaN equal to itself)."""
    if isinstance(value, dict):
        return ("dict", [(key, _shape(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [_shape(item) for item in value])
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else value.hex())
    return (type(value).__name__, value)


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()
    | st.sampled_from([-0.0, 1e-320, 5e-324, 1.7976931348623157e308, 2.0**63, 1e22])
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_json_values, st.booleans())
def test_parse_item_reads_exactly_what_json_reads(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert _shape(parse_item(text)) == _shape(json.loads(text))
    entry = Entry("S", 0, 0, 0, text, None, plain_text(text))
    assert _shape(entry.item()) == _shape(json.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        "18446744073709551616",  # 2**64: orjson would give a float
        "-9223372036854775809",
        "[9223372036854775807, -9223372036854775808, 18446744073709551615]",
        '{"n": 123456789012345678901234567890}',
        "1e400",
        "-1e400",
        "[1e-400, -0.0, 1e-320, 1.7976931348623157e308]",
        "NaN",
        "[Infinity, -Infinity]",
        '"\\ud800"',
        '"\\udc00x\\ud83d\\ude00"',
        '{"a": 1, "b": 2, "a": 3}',
        '{"a": {"x": 1}, "a": [2]}',
        "-0",
        '"1234567890123456789 in a string"',
    ],
)
def test_parse_item_edge_cases(text: str) -> None:
    assert _shape(parse_item(text)) == _shape(json.loads(text))
    assert _shape(Entry("S", 0, 0, 0, text, None, plain_text(text)).item()) == _shape(
        json.loads(text)
    )


def test_a_lone_surrogate_character_is_read_by_json() -> None:
    text = '"\ud800"'  # the character itself, not its escape: not valid UTF-8
    assert parse_item(text) == json.loads(text)
    assert Entry("S", 0, 0, 0, text, None, True).item() == json.loads(text)


def test_items_of_hands_out_what_each_entry_gives() -> None:
    texts = ['{"a": 1}', '"\\ud800"', "[18446744073709551616]", "NaN", '{"b": [2.5, -0.0]}']
    entries = [Entry("S", n, 0, n, t, None, plain_text(t)) for n, t in enumerate(texts)]
    entries[-1].fresh = {"b": [2.5, -0.0]}  # written by this process, not parsed again
    items = items_of(entries)
    assert [_shape(item) for item in items] == [_shape(json.loads(text)) for text in texts]
    assert items[-1] is not None
    assert entries[-1].fresh is None  # handed out once
    again = items_of(entries)
    assert [_shape(item) for item in again] == [_shape(item) for item in items]
    copies = [(a, b) for a, b in zip(items, again, strict=True) if isinstance(a, (dict, list))]
    assert all(a is not b for a, b in copies)  # fresh copies


# -- helpers --------------------------------------------------------------------------------


class Counting(WithoutReadModel, ReadModel):
    """Counts event reads; keeps the read model (it declares it, and its own ``append`` and
    ``append_many`` pass model changes on: store.abilities.abilities_of)."""

    reads = 0

    async def read(self, stream: str, **options: Any) -> list[RecordedEvent]:
        self.reads += 1
        return await self.inner.read(stream, **options)

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        return await self.inner.append(stream, events, expected=expected)

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        return await self.inner.append_many(requests)

    async def read_model(self, tree: str) -> ModelSnapshot | None:
        return await self.inner.read_model(tree)


def _state(session: JournalSession) -> dict[str, Any]:
    """Everything a session tree took on from a read, item texts byte for byte."""
    tree = session._core.tree
    timeline = tree.timeline
    return {
        "entries": [(e.key, e.index, e.item_json) for e in timeline.entries],
        "complete": timeline.complete,
        "floor": timeline.floor,
        "heads": tree.heads,
        "hashes": tree.hashes,
        "chain": [s.stream for s in tree.chain],
        "grants": tree.grants,
        "next_index": tree.next_index,
    }


async def _both(store: SQLiteEventStore, session_id: str) -> tuple[dict[str, Any], Any, Any]:
    """A cold full read through the model and through the events: both states, both item
    lists (each read by a fresh session object)."""
    modelled = JournalSession(store, session_id)
    from_model = await modelled.get_items()
    evented = JournalSession(WithoutReadModel(store), session_id)
    from_events = await evented.get_items()
    assert _state(modelled) == _state(evented)
    assert from_model == from_events
    return _state(modelled), from_model, from_events


async def _model(store: SQLiteEventStore, session_id: str) -> ModelSnapshot | None:
    return await store.read_model(session_stream(session_id))


def _message(rng: random.Random, n: int) -> Any:
    words = ["refund", "ünïcode ✓", "😀", "line\nbreak", '"quoted"', "12345678901234567890"]
    return {"role": rng.choice(["user", "assistant"]), "content": f"{n} {rng.choice(words)}"}


# -- equivalence ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(6))
async def test_model_read_equals_events_read(tmp_path: Path, seed: int) -> None:
    """Random sessions: adds, pops, clears, compactions, nested handoffs through the Runner;
    after each step a cold read from the model equals one from the events, and the next
    step is written by the session object that read the model."""
    rng = random.Random(seed)
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        n = 0
        for _ in range(14):
            step = rng.choice(["add", "add", "add", "pop", "clear", "suffix", "all", "run", "run"])
            if step == "add":
                await session.add_items([_message(rng, n + k) for k in range(rng.randint(1, 4))])
                n += 4
            elif step == "pop":
                await session.pop_item()
            elif step == "clear" and rng.random() < 0.4:
                await session.clear_session()
            elif step == "suffix":
                snapshot = await session._get_compaction_snapshot(rng.randint(1, 3))
                if snapshot is not None and snapshot.items:
                    summary: Any = {"role": "assistant", "content": f"summary {n}"}
                    await snapshot.replace_suffix(0, [summary])
            elif step == "all":
                replacement: list[Any] = [_message(rng, n)]
                await session._atomic_replace_items(replacement)
            elif step == "run":
                scenario = rng.choice([nested, nested, single, failing, top_level])()
                # failing(): billing stays open until the next run
                with contextlib.suppress(RuntimeError):
                    await drive(scenario, f"run {n}", session=session, hooks=session)
            await _both(store, "s")
            if await store.head(session_stream("s")) is not None:  # (a pop may write nothing)
                assert await _model(store, "s") is not None  # the model answered
            session = JournalSession(store, "s")
            await session.get_items()  # this object's tree now comes from the model


async def test_a_cold_full_read_reads_no_events(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await session.add_items([{"role": "user", "content": str(n)} for n in range(300)])
        counting = Counting(store)
        fresh = JournalSession(counting, "s")
        items = await fresh.get_items()
        assert len(items) == 300
        assert counting.reads == 0
        await _both(store, "s")


async def test_a_bounded_cache_rereads_everything_from_the_model(tmp_path: Path) -> None:
    """A loaded tree whose timeline was cut to its budget reads everything again from the
    model when it is at the heads the tree has seen, and from the events when not."""
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        writer = JournalSession(store, "s")
        await writer.add_items([{"role": "user", "content": str(n)} for n in range(50)])
        counting = Counting(store)
        tree = SessionTree(session_stream("s"), cache_bytes=2000)
        bounded = JournalSession(counting, "s", tree=tree)
        expected = await JournalSession(WithoutReadModel(store), "s").get_items()
        assert await bounded.get_items() == expected
        assert not tree.timeline.complete  # cut to the budget after the answer
        reads = counting.reads
        assert await bounded.get_items() == expected
        assert counting.reads == reads + 1  # the catch-up's one empty read, then the model
        await writer.add_items([{"role": "user", "content": "more"}])
        assert await bounded.get_items() == [*expected, {"role": "user", "content": "more"}]


async def test_writes_after_a_model_read_continue_exactly(tmp_path: Path) -> None:
    """A session read from the model goes on writing as one read from the events: it
    follows the open subagents, and what it holds after its writes is what a fresh read
    (from either) finds."""
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await drive(nested(), "go", session=session, hooks=session)
        with pytest.raises(RuntimeError, match="backend down"):
            await drive(failing(), "again", session=session, hooks=session)
        state, _, _ = await _both(store, "s")
        assert len(state["chain"]) == 1  # billing is still open
        other = JournalSession(store, "s")
        await other.get_items()
        more: list[Any] = [{"role": "user", "content": "next"}, {"role": "user", "content": "x"}]
        await other.add_items(more)
        await other.pop_item()
        after, items, _ = await _both(store, "s")
        assert items[-1] == more[0]
        held = _state(other)
        for key in ("entries", "heads", "hashes", "chain", "next_index", "floor"):
            assert held[key] == after[key], key
        assert await _model(store, "s") is not None
        closing = JournalSession(store, "s")  # read from the model, closes billing
        await drive(top_level(), "there?", session=closing, hooks=closing)
        state, _, _ = await _both(store, "s")
        assert state["chain"] == []


class MovingOn(Counting):
    """Keeps the model; right after each model read another writer appends to the
    stream ``moved`` (before the reader reads that stream's last event)."""

    moved = ""

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        return await self.inner.append(stream, events, expected=expected)

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        return await self.inner.append_many(requests)

    async def read_model(self, tree: str) -> ModelSnapshot | None:
        snapshot = await self.inner.read_model(tree)
        if snapshot is not None:
            await self.inner.append(
                self.moved, [NewEvent("Foreign.Note", b"{}")], expected=snapshot.heads[self.moved]
            )
        return snapshot


async def test_an_open_subsession_that_moved_after_the_model_read_reads_the_events(
    tmp_path: Path,
) -> None:
    """The model holds only the root's last event; an open subagent's is read apart, and
    if that stream moved on since the model was read, the events answer, so the tree
    stands at the heads a read of the events finds."""
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await drive(nested(), "go", session=session, hooks=session)
        with pytest.raises(RuntimeError, match="backend down"):
            await drive(failing(), "again", session=session, hooks=session)
        before, _, _ = await _both(store, "s")
        assert len(before["chain"]) == 1  # billing is still open
        moving = MovingOn(store)
        moving.moved = before["chain"][0]
        assert abilities_of(moving).read_model is not None
        modelled = JournalSession(moving, "s")
        items = await modelled.get_items()
        evented = JournalSession(WithoutReadModel(store), "s")
        assert items == await evented.get_items()
        assert _state(modelled) == _state(evented)
        assert _state(modelled)["heads"] != before["heads"]  # the foreign event counts


def test_only_a_store_whose_own_appends_carry_the_model_keeps_one() -> None:
    class Intercepting(SQLiteEventStore):
        async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
            return await super().append_many(requests)

    class Passing:
        def __init__(self, inner: SQLiteEventStore) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    store = SQLiteEventStore.connect(":memory:")
    intercepting = Intercepting.connect(":memory:")
    try:
        assert abilities_of(store).read_model is not None
        assert abilities_of(Counting(store)).read_model is not None
        assert abilities_of(WithoutReadModel(store)).read_model is None
        # It sees every read and append as before:
        assert abilities_of(Passing(store)).read_model is None
        assert abilities_of(intercepting).read_model is None
    finally:
        store.close_sync()
        intercepting.close_sync()


# -- fallbacks --------------------------------------------------------------------------------


async def test_a_foreign_append_to_the_session_stream_falls_back(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await session.add_items([{"role": "user", "content": "one"}])
        stream = session_stream("s")
        head = await store.head(stream)
        assert head is not None
        assert await _model(store, "s") is not None
        foreign = {"role": "user", "content": "foreign", "message_index": 1}
        await store.append(
            stream,
            [NewEvent("UserMessageAdded", json.dumps(foreign).encode())],
            expected=head,
        )
        assert await _model(store, "s") is None
        _, items, _ = await _both(store, "s")
        await session.add_items([{"role": "user", "content": "two"}])  # ours again
        assert await _model(store, "s") is None  # behind for good
        _, after, _ = await _both(store, "s")
        assert len(after) == len(items) + 1


async def test_a_foreign_append_to_a_subsession_stream_falls_back(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await drive(nested(), "go", session=session, hooks=session)
        snapshot = await _model(store, "s")
        assert snapshot is not None
        children = sorted(set(snapshot.heads) - {session_stream("s")})
        assert len(children) == 2  # billing, and refunds inside it
        inner = children[-1]
        await store.append(inner, [NewEvent("Foreign.Note", b"{}")], expected=snapshot.heads[inner])
        assert await _model(store, "s") is None
        await _both(store, "s")


async def test_a_wrapper_store_writes_no_model(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        wrapped = JournalSession(WithoutReadModel(store), "s")
        await wrapped.add_items([{"role": "user", "content": str(n)} for n in range(5)])
        await drive(single(), "go", session=wrapped, hooks=wrapped)
        assert await _model(store, "s") is None
        _, items, _ = await _both(store, "s")
        assert len(items) >= 5


# -- the packed keys of a model read ----------------------------------------------------------


async def test_keys_packed_in_python_for_big_stream_numbers_read_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stream numbers too big to pack in SQLite's 64 bits are packed in Python: the same
    snapshot, the same reads."""
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await drive(nested(), "go", session=session, hooks=session)
        await session.pop_item()
        packed_in_sql = await _model(store, "s")
        monkeypatch.setattr(sqlite_store, "_SQL_KEYS", 0)
        packed_in_python = await _model(store, "s")
        assert packed_in_sql is not None
        assert packed_in_python == packed_in_sql
        keys = {model_place(key) for _, key, _ in packed_in_sql.items}
        assert len({stream for stream, _, _ in keys}) == 3  # the session and two subsessions
        await _both(store, "s")


async def test_a_revision_a_key_cannot_hold_sends_the_reader_to_the_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await session.add_items([{"role": "user", "content": str(n)} for n in range(5)])
        assert await _model(store, "s") is not None
        monkeypatch.setattr(sqlite_store, "MODEL_REVISIONS", 4)
        assert await _model(store, "s") is None
        _, items, _ = await _both(store, "s")
        assert len(items) == 5


async def test_an_item_of_a_part_a_key_cannot_hold_makes_the_tree_not_current(
    tmp_path: Path,
) -> None:
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        tree = session_stream("s")
        first = [ModelAdd(0, tree, 0, MODEL_PARTS - 1, "[0]")]
        await store.append_many(
            [
                AppendRequest(
                    tree, [NewEvent("X", b"{}")], StreamState.NO_STREAM, ModelChange(tree, first)
                )
            ]
        )
        snapshot = await _model(store, "s")
        assert snapshot is not None
        assert [model_place(key) for _, key, _ in snapshot.items] == [(1, 0, MODEL_PARTS - 1)]
        second = [ModelAdd(1, tree, 1, MODEL_PARTS, "[1]")]
        await store.append_many(
            [AppendRequest(tree, [NewEvent("X", b"{}")], 0, ModelChange(tree, second))]
        )
        assert await _model(store, "s") is None


# -- schema version 2 and the upgrade ---------------------------------------------------------

_V1 = """
CREATE TABLE streams (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, head INTEGER NOT NULL);
CREATE TABLE events (
    position INTEGER PRIMARY KEY, stream_id INTEGER NOT NULL REFERENCES streams(id),
    revision INTEGER NOT NULL, id BLOB NOT NULL, type TEXT NOT NULL, data BLOB NOT NULL,
    metadata BLOB NOT NULL, recorded_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX events_by_stream ON events(stream_id, revision);
PRAGMA user_version = 1;
"""


def _as_v1(source: Path, target: Path) -> None:
    """A version 1 file (the DDL agentjournal 0.2 wrote) holding ``source``'s events."""
    db = sqlite3.connect(target)
    db.executescript(_V1)
    db.execute("ATTACH ? AS v2", (str(source),))
    db.execute("INSERT INTO streams SELECT id, name, head FROM v2.streams")
    db.commit()
    db.execute("DETACH v2")
    # Version 1 stored every value as given: the rows' values as written (the stored form).
    stored = sqlite3.connect(source)
    unpack = Unpacker(stored).unpack
    rows = [
        (*row[:5], unpack(row[5], row[8]), unpack(row[6], row[8]), row[7])
        for row in stored.execute(
            "SELECT position, stream_id, revision, id, type, data, metadata, recorded_at, "
            "dictionary FROM events"
        )
    ]
    stored.close()
    db.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()


def _tables(path: Path) -> tuple[int, set[str], list[str]]:
    db = sqlite3.connect(path)
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        columns = [r[1] for r in db.execute("PRAGMA table_info(streams)")]
        return version, tables, columns
    finally:
        db.close()


async def test_a_new_file_has_schema_version_3(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "new.db"):
        pass
    version, tables, columns = _tables(tmp_path / "new.db")
    assert version == 3
    assert {"streams", "events", "items", "trees", "dictionaries"} <= tables
    assert columns == ["id", "name", "head", "tree", "modelled"]


async def test_a_version_1_file_is_upgraded_in_place_and_read_from_its_events(
    tmp_path: Path,
) -> None:
    async with await SQLiteEventStore.open(tmp_path / "v2.db") as store:
        session = JournalSession(store, "s")
        await drive(nested(), "go", session=session, hooks=session)
        await session.add_items([{"role": "user", "content": "after"}])
        expected = await JournalSession(store, "s").get_items()
    _as_v1(tmp_path / "v2.db", tmp_path / "v1.db")
    assert _tables(tmp_path / "v1.db")[0] == 1
    async with await SQLiteEventStore.open(tmp_path / "v1.db") as store:
        version, tables, columns = _tables(tmp_path / "v1.db")
        assert version == 3
        assert {"items", "trees", "dictionaries"} <= tables
        assert columns[-2:] == ["tree", "modelled"]
        assert await _model(store, "s") is None  # nothing of it is modelled
        _, items, _ = await _both(store, "s")
        assert items == expected
        session = JournalSession(store, "s")
        await session.add_items([{"role": "user", "content": "on v2"}])
        assert await _model(store, "s") is None  # its streams hold unmodelled events
        _, items, _ = await _both(store, "s")
        assert items[-1] == {"role": "user", "content": "on v2"}
        # A session begun after the upgrade has its model.
        fresh = JournalSession(store, "t")
        await fresh.add_items([{"role": "user", "content": "new"}])
        assert await _model(store, "t") is not None
        await _both(store, "t")
    async with await SQLiteEventStore.open(tmp_path / "v1.db"):  # opened again: no change
        assert _tables(tmp_path / "v1.db")[0] == 3


async def test_a_version_1_file_with_a_foreign_table_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "odd.db")
    db.executescript(_V1 + "CREATE TABLE items (x);")
    db.close()
    with pytest.raises(StoreUnavailable, match="something else"):
        await SQLiteEventStore.open(tmp_path / "odd.db")
    assert _tables(tmp_path / "odd.db")[0] == 1  # not altered


async def test_an_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "future.db")
    db.executescript(_V1.replace("user_version = 1", "user_version = 4"))
    db.close()
    with pytest.raises(StoreUnavailable, match="schema version 4"):
        await SQLiteEventStore.open(tmp_path / "future.db")


async def test_a_foreign_event_atop_an_open_subsession_hides_no_message_index(
    tmp_path: Path,
) -> None:
    """Another writer's event without ``aj.index``/``aj.next_index`` at the head of an open
    subsession stream: a fresh session object still finds where message indices continue (the
    newest event of each stream that says), so its next write takes a free index."""
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        session = JournalSession(store, "s")
        await drive(nested(), "go", session=session, hooks=session)
        with pytest.raises(RuntimeError, match="backend down"):
            await drive(failing(), "again", session=session, hooks=session)
        state, _, _ = await _both(store, "s")
        (open_stream,) = state["chain"]
        used = max(index for _, index, _ in state["entries"])
        head = await store.head(open_stream)
        assert head is not None
        await store.append(open_stream, [NewEvent("Foreign.Note", b"{}")], expected=head)
        fresh = JournalSession(WithoutReadModel(store), "s")
        await fresh.get_items(limit=1)
        assert _state(fresh)["next_index"] == used + 1


@pytest.mark.parametrize("revision", [MODEL_REVISIONS, 2 * MODEL_REVISIONS, -1])
async def test_an_item_at_a_revision_a_key_cannot_hold_makes_the_tree_not_current(
    tmp_path: Path, revision: int
) -> None:
    """``read_model`` refuses a tree whose heads reach MODEL_REVISIONS, but a model change
    naming a revision beyond its stream's head (or below 0) was kept: its packed key then
    read as another place — 2**32 as revision 0, 2**33 as revision 0 of the stream two
    numbers on (here the tree's own subsession). Such an item makes its tree not current,
    as an item of a part a key cannot hold does."""
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        tree, child, extra = "AgentSession-s", "AgentSubsession-s-a", "AgentSubsession-s-b"
        bare = ModelChange(tree)
        await store.append_many(
            [
                AppendRequest(stream, [NewEvent("X", b"{}")], StreamState.NO_STREAM, bare)
                for stream in (tree, child, extra)
            ]
        )
        assert await store.read_model(tree) is not None
        add = [ModelAdd(0, tree, revision, 0, "[0]")]
        await store.append_many(
            [
                AppendRequest(tree, [NewEvent("X", b"{}")], 0, ModelChange(tree, add)),
                AppendRequest(child, [NewEvent("X", b"{}")], 0, bare),
            ]
        )
        snapshot = await store.read_model(tree)
        assert snapshot is None, [model_place(key) for _, key, _ in snapshot.items]
