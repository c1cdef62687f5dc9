"""The write path: cheap nonces that still never repeat, cheap ids that are the
same ids, a head update that is one compare-and-set, and a bounded cache of stream ids."""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, JournalSession
from agentjournal.engine.plan import ItemsPlan
from agentjournal.engine.stamps import _NONCES
from agentjournal.engine.tree import Commit, items_commit
from agentjournal.errors import ConcurrencyError, InvalidInput
from agentjournal.store import _append as append_module
from agentjournal.store.contract import (
    AppendRequest,
    NewEvent,
    StreamState,
    event_id,
    event_id_series,
    new_event,
    validate_append,
    validate_stream_name,
)
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.store.sqlite import _writes as sqlite_writes


def item(text: str) -> Any:
    return {"role": "user", "content": text}


async def test_a_program_that_seeds_random_does_not_repeat_event_ids(tmp_path: Path) -> None:
    # Two writers of one session whose program seeds `random` alike (tests, simulations):
    # the ids of their writes must still differ, or one's write would pass for the
    # other's retry (or, at another revision, sit on the stream under a used id).
    async with await Journal.open(f"sqlite:///{tmp_path / 'seeded.db'}") as journal:
        first, second = (JournalSession(journal.store, "s-1") for _ in range(2))
        random.seed(18)
        await first.add_items([item("one")])
        random.seed(18)
        await second.add_items([item("two")])
        stored = await journal.store.read("AgentSession-s-1")
        assert len({event.id for event in stored}) == len(stored) == 3  # started + 2 items
        held: list[Any] = await first.get_items()
        assert [m["content"] for m in held] == ["one", "two"]


def test_a_forked_child_draws_its_own_nonces() -> None:
    # Prefork servers import agentjournal, then fork: each worker must write other ids.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, _NONCES.next().encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 200).decode()
    os.close(read)
    parent = _NONCES.next()
    assert child
    assert child[:24] != parent[:24]  # another process prefix, not just another count


def test_event_id_series_gives_event_id_bit_for_bit() -> None:
    # Retries are recognised by their ids, and stored bytes (twins, hashes) name them:
    # the faster series must be exactly event_id, whatever the parts.
    for parts in (("AgentSession-s", "0f" * 12 + "00000001"), ("a\x1fb", 7), ("\u00e9\U0001f600",)):
        nth = event_id_series(*parts)
        for n in (0, 1, 9, 10, 12345, 2**40):
            made, expected = nth(n), event_id(*parts, n)
            assert made == expected
            assert made.bytes == expected.bytes
            assert (str(made), hash(made), made.version, made.variant) == (
                str(expected),
                hash(expected),
                5,
                uuid.RFC_4122,
            )
            assert made.is_safe is expected.is_safe


def _statements(store: SQLiteEventStore) -> list[str]:
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)
    return seen


async def test_a_write_at_the_head_is_one_compare_and_set(tmp_path: Path) -> None:
    store = await SQLiteEventStore.open(tmp_path / "cas.db")
    try:
        await store.append("s-1", [_new()], expected=StreamState.NO_STREAM)
        await store.append("s-1", [_new()], expected=0)  # the store has now seen s-1
        seen = await asyncio.get_running_loop().run_in_executor(store._executor, _statements, store)
        result = await store.append("s-1", [_new(), _new()], expected=1)
        assert result.revision == 3
        # BEGIN, the head moved from 1 to 3 only if it was 1, both rows, COMMIT: no head SELECT,
        # no separate last_insert_rowid() query.
        assert len(seen) == 4, seen
        assert seen[1].startswith("UPDATE streams SET head = 3 WHERE id = 1 AND head = 1")
        assert not any(statement.startswith("SELECT") for statement in seen)
        assert result.position == (await store.read("s-1", from_revision=3))[0].position
    finally:
        await store.close()


async def test_a_stale_stream_id_never_moves_another_stream(tmp_path: Path) -> None:
    # A cached id whose stream row was rolled back may later name another stream: the
    # compare-and-set also compares the name, and the write goes the checked way.
    store = await SQLiteEventStore.open(tmp_path / "stale.db")
    try:
        await store.append("s-1", [_new()], expected=StreamState.NO_STREAM)
        await store.append("s-2", [_new()], expected=StreamState.NO_STREAM)
        s2 = await asyncio.get_running_loop().run_in_executor(
            store._executor,
            lambda: store._db.execute("SELECT id FROM streams WHERE name = 's-2'").fetchone()[0],
        )
        store._writes._stream_ids["s-1"] = (
            s2  # s-2 is at head 0 too: only the name tells them apart
        )
        result = await store.append("s-1", [_new()], expected=0)
        assert (result.stream, result.revision) == ("s-1", 1)
        assert await store.head("s-2") == 0
        assert await store.head("s-1") == 1
        assert [e.revision for e in await store.read("s-2")] == [0]
        assert [e.revision for e in await store.read("s-1")] == [0, 1]
    finally:
        await store.close()


async def test_a_resent_write_is_still_recognised_after_a_compare_and_set(tmp_path: Path) -> None:
    store = await SQLiteEventStore.open(tmp_path / "resent.db")
    try:
        await store.append("s-1", [_new()], expected=StreamState.NO_STREAM)
        events = [_new(), _new()]
        first = await store.append("s-1", events, expected=0)
        again = await store.append("s-1", events, expected=0)  # an unknown outcome, resent
        assert again == first
        assert len(await store.read("s-1")) == 3
    finally:
        await store.close()


def _new() -> NewEvent:
    return NewEvent(type="Noted", data=b"{}", metadata={"k": "v"}, id=uuid.uuid4())


async def test_writes_queued_in_one_pass_of_the_loop_share_one_commit(tmp_path: Path) -> None:
    # Sessions woken by one commit each plan and queue their next write in the same pass
    # of the loop; planning releases the GIL now and then (a warm read's probe of the
    # heads is an SQLite call). The drain must not start on the first write while the
    # others are still being planned, or group commit degrades to one fsync per write.
    store = await SQLiteEventStore.open(tmp_path / "pass.db")
    try:
        seen = await asyncio.get_running_loop().run_in_executor(store._executor, _statements, store)

        async def write(n: int) -> None:
            time.sleep(0.002)  # noqa: ASYNC251 - planning that gives up the GIL meanwhile
            await store.append(f"s-{n}", [_new()], expected=StreamState.NO_STREAM)

        await asyncio.gather(*(write(n) for n in range(8)))
        assert sum(statement == "BEGIN IMMEDIATE" for statement in seen) == 1, seen
        assert all([await store.head(f"s-{n}") == 0 for n in range(8)])
    finally:
        await store.close()


async def test_a_lone_write_starts_its_drain_at_once_and_a_busy_pass_defers_it(
    tmp_path: Path,
) -> None:
    # With nothing else ready in the loop's pass, no other write can join
    # this one before the pass ends, so the drain starts from the writing task itself
    # instead of from a kick one pass later. With anything else ready (another task,
    # any callback), the kick still waits for the end of the pass (group commit).
    store = await SQLiteEventStore.open(tmp_path / "kick.db")
    try:
        started_in: list[bool] = []
        schedule = store._writes._schedule_drain

        def spy() -> None:
            started_in.append(asyncio.current_task() is not None)  # None: a loop callback
            schedule()

        store._writes._schedule_drain = spy  # type: ignore[method-assign]
        await asyncio.sleep(0)  # nothing of the test's set-up left in the ready queue
        await store.append("s-1", [_new()], expected=StreamState.NO_STREAM)
        assert started_in == [True]
        asyncio.get_running_loop().call_soon(lambda: None)  # something else is ready
        await store.append("s-1", [_new()], expected=0)
        assert started_in == [True, False]
        assert await store.head("s-1") == 1
    finally:
        await store.close()


async def test_a_group_is_settled_by_one_hand_off_per_loop(tmp_path: Path) -> None:
    # The writes of one group that wait on one loop are settled by one
    # callback (one wake-up of the loop), each with its own outcome, in order.
    store = await SQLiteEventStore.open(tmp_path / "settle.db")
    loop = asyncio.get_running_loop()
    handed: list[str] = []
    threadsafe = loop.call_soon_threadsafe

    def spy(callback: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(getattr(callback, "__name__", ""))
        return threadsafe(callback, *args, **kwargs)

    try:
        loop.call_soon_threadsafe = spy  # type: ignore[method-assign, assignment]
        await store.append("s-0", [_new()], expected=StreamState.NO_STREAM)
        assert [name for name in handed if name.startswith("_settle")] == ["_settle"]
        handed.clear()
        writes = [
            store.append(f"s-{n}", [_new()], expected=StreamState.NO_STREAM) for n in range(1, 8)
        ]
        # One of them conflicts: its own outcome, the others land.
        writes.append(store.append("s-0", [_new()], expected=StreamState.NO_STREAM))
        outcomes = await asyncio.gather(*writes, return_exceptions=True)
        assert [name for name in handed if name.startswith("_settle")] == ["_settle_all"]
        assert [getattr(o, "revision", None) for o in outcomes[:7]] == [0] * 7
        assert isinstance(outcomes[7], ConcurrencyError)
    finally:
        del loop.call_soon_threadsafe
        await store.close()


async def test_a_write_queued_as_the_store_closes_is_committed(tmp_path: Path) -> None:
    store = await SQLiteEventStore.open(tmp_path / "closing.db")
    writing = asyncio.ensure_future(store.append("s-1", [_new()], expected=StreamState.NO_STREAM))
    await asyncio.sleep(0)  # queued; its drain starts at the end of this pass
    await store.close()  # in the same pass: the queued write still lands first
    assert (await writing).revision == 0
    again = await SQLiteEventStore.open(tmp_path / "closing.db")
    try:
        assert await again.head("s-1") == 0
    finally:
        await again.close()


async def test_the_stream_id_cache_is_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compare-and-set's stream ids are a cache on a long-lived store: one entry per
    stream ever written (a server with millions of sessions) must not grow without end."""
    monkeypatch.setattr(sqlite_writes, "_STREAM_IDS_KEPT", 8)
    async with await SQLiteEventStore.open(tmp_path / "ids.db") as store:
        for n in range(40):
            stream = f"s-{n}"
            for revision in range(3):
                event = NewEvent(type="Noted", data=b"{}", metadata={}, id=uuid.uuid4())
                expected = StreamState.NO_STREAM if revision == 0 else revision - 1
                await store.append(stream, [event], expected=expected)
            assert await store.head(stream) == 2
        assert len(store._writes._stream_ids) <= 8


def test_new_event_is_the_constructors_event() -> None:
    metadata = {"aj.index": "3", "aj.hash": "ab"}
    made = new_event("ItemAdded", b'{"a":1}', metadata, event_id("s", 1))
    built = NewEvent(type="ItemAdded", data=b'{"a":1}', metadata=metadata, id=event_id("s", 1))
    assert made == built
    assert type(made) is NewEvent
    metadata["aj.index"] = "4"  # the event keeps its own copy, read-only
    assert made.metadata["aj.index"] == "3"
    with pytest.raises(TypeError):
        made.metadata["x"] = "y"  # type: ignore[index]
    with pytest.raises(AttributeError):
        made.type = "Other"  # type: ignore[misc]


def test_items_commit_and_plan_are_the_constructors() -> None:
    fields: dict[str, Any] = {
        "heads": {"s": 3},
        "hashes": {"s": "ab"},
        "entries": [],
        "written": 2,
        "chain": None,
        "next_index": 4,
        "call_owner": None,
        "run": ("r", 1),
        "grants": {},
        "authority": None,
        "responded": (),
    }
    made = items_commit(**fields)
    assert made == Commit(**fields)
    assert vars(made) == vars(Commit(**fields))
    request = AppendRequest("s", [], StreamState.ANY)
    plan = ItemsPlan.made([request], made, None, (), ())  # type: ignore[arg-type]
    built = ItemsPlan([request], made, routed=None, shown=(), turns=())  # type: ignore[arg-type]
    assert plan == built
    assert vars(plan) == vars(built)
    with pytest.raises(AttributeError):
        plan.shown = ()  # type: ignore[misc]


def test_a_valid_name_or_type_once_seen_leaves_the_invalid_refused() -> None:
    good = NewEvent(type="Seen.Type", data=b"{}", id=event_id("x"))
    validate_append([AppendRequest("seen-stream", [good], StreamState.ANY)], many=True)
    validate_append([AppendRequest("seen-stream", [good], StreamState.ANY)], many=True)

    class Odd(str):
        pass

    for stream in ("seen stream", "$seen-stream", "", Odd("seen stream")):
        with pytest.raises(InvalidInput, match="stream name"):
            validate_stream_name(stream)
    for type_ in ("Seen Type", "$Seen.Type", Odd("Seen Type")):
        bad = NewEvent(type=type_, data=b"{}", id=event_id("y"))
        with pytest.raises(InvalidInput, match="event type"):
            validate_append([AppendRequest("seen-stream", [bad], StreamState.ANY)], many=True)


def test_the_valid_names_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(append_module, "_VALID_KEPT", 3)
    for n in range(10):
        validate_stream_name(f"bounded-{n}")
    assert len(append_module._VALID_NAMES) <= 3
    assert validate_stream_name("bounded-0") == "bounded-0"
