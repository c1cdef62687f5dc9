"""``AdvancedSQLiteSession``'s branch and usage API on JournalSession.

What the SDK's own suite (``tests/test_sdk_advanced_suite.py``) cannot show on ours: the
events a delete, a clear and a usage booking write, a branch deleted under a stale object,
writes retried after an unknown outcome (recognised by their derived ids, not written
twice), usage on branches beside the SDK's class run on the same program, a clear across
every line (one atomic write, re-planned whole on a conflict) and a run that stays on the
line it started on. Real stores throughout; the interleavings come from store subclasses
that act when a request matches, never from sleeps.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest
from agents import RunContextWrapper
from agents.extensions.memory import AdvancedSQLiteSession
from agents.usage import Usage

from agentjournal import Journal, JournalSession
from agentjournal import events as ev
from agentjournal.engine.fork import LineHead, plan_line_ends
from agentjournal.errors import BranchDeleted, InvalidInput, StoreUnavailable
from agentjournal.ledger.chain import GENESIS, HASH_KEY, seal
from agentjournal.store.contract import AppendRequest, AppendResult, NewEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.streams import branch_stream, branches_stream, session_stream
from branch_items import run_result

SID = "adv-1"


def _user(text: str) -> Any:
    return {"role": "user", "content": text}


def _assistant(text: str) -> Any:
    return {"role": "assistant", "content": text}


def _types(events: Sequence[Any]) -> list[str]:
    return [event.type for event in events]


# -- the plan that ends lines (pure) ----------------------------------------------------------


def test_ending_lines_is_planned_at_exact_heads_with_ids_from_the_nonce() -> None:
    lines = [
        LineHead("one", branch_stream(SID, "one"), "main", 4, "ab" * 32, 7),
        LineHead("two", branch_stream(SID, "two"), "one", 0, "cd" * 32, 3),
    ]

    def planned(nonce: str, registry: tuple[int, str]) -> Any:
        return plan_line_ends(
            SID, lines, reason="cleared", registry=registry, nonce=nonce, trace={"x": "1"}
        )

    requests, hashes = planned("n1", (2, "ef" * 32))
    again, _ = planned("n1", (2, "ef" * 32))
    other, _ = planned("n2", (2, "ef" * 32))
    ids = [[e.id for e in r.events] for r in requests]
    assert ids == [[e.id for e in r.events] for r in again]  # a retry carries the same ids
    assert not {i for r in ids for i in r} & {e.id for r in other for e in r.events}
    one, two, registry = requests
    assert (one.stream, one.expected, two.expected) == (lines[0].stream, 4, 0)
    assert (registry.stream, registry.expected) == (branches_stream(SID), 2)
    assert [ev.BranchDeleted.decode(r.events[0].data) for r in (one, two)] == [
        ev.BranchDeleted("one", "cleared", 6),
        ev.BranchDeleted("two", "cleared", 2),
    ]
    removed = [ev.BranchRemoved.decode(e.data) for e in registry.events]
    assert removed == [
        ev.BranchRemoved("one", lines[0].stream, "main", str(one.events[0].id)),
        ev.BranchRemoved("two", lines[1].stream, "one", str(two.events[0].id)),
    ]
    # Each is sealed after the head it expects; the registry's two entries chain in order.
    prev = "ef" * 32
    for event, stream, revision, before in (
        (one.events[0], one.stream, 5, "ab" * 32),
        (two.events[0], two.stream, 1, "cd" * 32),
        (registry.events[0], registry.stream, 3, prev),
        (registry.events[1], registry.stream, 4, registry.events[0].metadata[HASH_KEY]),
    ):
        meta = {k: v for k, v in event.metadata.items() if k != HASH_KEY}
        recomputed = seal(stream, revision, str(event.id), event.type, event.data, meta, before)
        assert recomputed == event.metadata[HASH_KEY]
    assert hashes == {s.stream: s.events[0].metadata[HASH_KEY] for s in (one, two)}
    assert "x" not in one.events[0].metadata  # only trace ids ride along
    first, _ = planned("n1", (-1, ""))
    assert first[-1].expected is StreamState.NO_STREAM
    entry = first[-1].events[0]
    meta = {k: v for k, v in entry.metadata.items() if k != HASH_KEY}
    assert (
        seal(first[-1].stream, 0, str(entry.id), entry.type, entry.data, meta, GENESIS)
        == entry.metadata[HASH_KEY]
    )


# -- a deleted current branch ---------------------------------------------------------------


async def test_a_branch_deleted_under_a_stale_object_is_refused_not_resurrected(
    journal: Journal,
) -> None:
    stale = journal.session(SID)
    other = JournalSession(journal.store, SID)  # another object (as another process would be)
    await stale.add_items([_user("u1"), _assistant("a1"), _user("u2")])
    assert await stale.create_branch_from_turn(2, "draft") == "draft"
    assert stale.branch == "draft"
    await stale.add_items([_user("d2")])
    await other.delete_branch("draft")
    top = branch_stream(SID, "draft")
    written = await journal.store.read(top)
    assert written[-1].type == ev.BRANCH_DELETED
    for call in (stale.add_items([_user("again")]), stale.pop_item()):
        with pytest.raises(BranchDeleted, match="'draft' of session adv-1 was deleted"):
            await call
    assert await journal.store.read(top) == written  # nothing after BranchDeleted
    # Reads answer as the SDK's do: the deleted line is empty.
    assert await stale.get_items() == []
    assert await stale.get_conversation_turns() == []
    assert await other.get_items(branch_id="draft") == []
    assert [b["branch_id"] for b in await other.list_branches()] == ["main"]
    (made,) = await other.branches()
    assert made.deleted == "deleted"
    with pytest.raises(InvalidInput, match="Branch 'draft' does not exist"):
        await stale.switch_to_branch("draft")
    await stale.switch_to_branch("main")
    assert await stale.get_items() == [_user("u1"), _assistant("a1"), _user("u2")]
    with pytest.raises(InvalidInput, match="Branch ID 'draft' has already been used"):
        await stale.create_branch_from_turn(1, "draft")


class _DeletesFirst(SQLiteEventStore):
    """A real store where, just before the first item write on ``target``, another object
    deletes that branch: the write was planned on the line before it ended."""

    target = ""
    deleter: JournalSession | None = None

    async def _maybe_delete(self, streams: list[str]) -> None:
        if self.deleter is not None and self.target in streams:
            deleter, self.deleter = self.deleter, None
            await deleter.delete_branch("draft")

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        await self._maybe_delete([r.stream for r in requests])
        return await super().append_many(requests)

    async def append(self, stream: str, events: Sequence[NewEvent], **kw: Any) -> AppendResult:
        await self._maybe_delete([stream])
        return await super().append(stream, events, **kw)


async def test_a_write_planned_before_a_delete_lands_is_refused(tmp_path: Path) -> None:
    store = cast(_DeletesFirst, await _DeletesFirst.open(tmp_path / "d.db"))
    try:
        stale = JournalSession(store, SID)
        await stale.add_items([_user("u1"), _user("u2")])
        await stale.create_branch_from_turn(2, "draft")
        await stale.add_items([_user("d1")])  # the line is loaded and current
        store.target = branch_stream(SID, "draft")
        store.deleter = JournalSession(store, SID)
        with pytest.raises(BranchDeleted):
            await stale.add_items([_user("late")])
        events = await store.read(store.target)
        assert events[-1].type == ev.BRANCH_DELETED
        assert not [e for e in events if b"late" in e.data]
    finally:
        await store.close()


# -- retries after an unknown outcome --------------------------------------------------------


class _AnswerLost(SQLiteEventStore):
    """A real store that lands the first write holding an event of ``lose``, then fails to
    answer: the writer sends the same events again and must recognise them."""

    lose = ""
    lost = 0

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        results = await super().append_many(requests)
        if not self.lost and any(e.type == self.lose for r in requests for e in r.events):
            self.lost += 1
            raise StoreUnavailable("the answer was lost after the commit")
        return results

    async def append(self, stream: str, events: Sequence[NewEvent], **kw: Any) -> AppendResult:
        result = await super().append(stream, events, **kw)
        if not self.lost and any(e.type == self.lose for e in events):
            self.lost += 1
            raise StoreUnavailable("the answer was lost after the commit")
        return result


async def test_a_usage_booking_retried_after_a_lost_answer_is_booked_once(
    tmp_path: Path,
) -> None:
    store = cast(_AnswerLost, await _AnswerLost.open(tmp_path / "u.db"))
    try:
        session = JournalSession(store, SID)
        await session.add_items([_user("u1"), _assistant("a1")])
        store.lose = ev.TURN_USAGE
        await session.store_run_usage(run_result(2, 100))
        assert store.lost == 1
        booked = [e for e in await store.read(session_stream(SID)) if e.type == ev.TURN_USAGE]
        assert len(booked) == 1
        assert await session.get_session_usage() == {
            "requests": 2,
            "input_tokens": 100,
            "output_tokens": 50,
            "total_tokens": 150,
            "total_turns": 1,
        }
    finally:
        await store.close()


async def test_a_delete_retried_after_a_lost_answer_lands_once(tmp_path: Path) -> None:
    store = cast(_AnswerLost, await _AnswerLost.open(tmp_path / "d.db"))
    try:
        session = JournalSession(store, SID)
        await session.add_items([_user("u1"), _user("u2")])
        await session.create_branch_from_turn(2, "draft")
        await session.add_items([_user("d2")])
        await session.switch_to_branch("main")
        store.lose = ev.BRANCH_DELETED
        await session.delete_branch("draft")
        assert store.lost == 1
        top = await store.read(branch_stream(SID, "draft"))
        assert _types(top).count(ev.BRANCH_DELETED) == 1
        registry = await store.read(branches_stream(SID))
        assert _types(registry) == [ev.BRANCH_ADDED, ev.BRANCH_REMOVED]
        removed = ev.BranchRemoved.decode(registry[-1].data)
        assert removed.event == str(top[-1].id)
        assert (removed.branch, removed.parent) == ("draft", "main")
    finally:
        await store.close()


# -- usage on branches, beside the SDK's class ------------------------------------------------


async def _usage_program(session: Any) -> list[Any]:
    """One program of adds, forks, switches, bookings, pops and deletes; what it reads."""
    seen: list[Any] = []

    async def look() -> None:
        seen.append(await session.get_turn_usage())
        seen.append(await session.get_session_usage())
        seen.append(await session.get_session_usage("main"))
        # The SDK orders by creation second, so within one second its order is SQLite's
        # grouping (by name); ours is main, then fork order. Compared by name.
        listed = [
            {k: v for k, v in b.items() if k != "created_at"} for b in await session.list_branches()
        ]
        seen.append(sorted(listed, key=lambda b: str(b["branch_id"])))

    await session.add_items([_user("u1"), _assistant("a1")])
    await session.store_run_usage(run_result(1, 10))
    await session.add_items([_user("u2"), _assistant("a2")])
    await session.store_run_usage(run_result(2, 20))
    await session.store_run_usage(run_result(3, 30))  # a resumed run: the newest counts
    await look()
    await session.create_branch_from_turn(2, "alt")
    await look()  # a branch starts with no usage (the SDK copies none)
    await session.add_items([_user("alt2"), _assistant("b2")])
    await session.store_run_usage(run_result(4, 40))
    await look()
    seen.append(await session.get_turn_usage(2, "alt"))
    seen.append(await session.get_session_usage("alt"))
    await session.pop_item()
    await session.pop_item()  # turn 2 leaves the branch: its booking with it
    await look()
    await session.add_items([_user("alt2 again")])  # turn 2 reused: not booked
    await look()
    await session.switch_to_branch("main")
    await session.delete_branch("alt")
    await look()
    await session.clear_session()
    await look()
    return seen


@pytest.mark.slow
async def test_usage_on_branches_reads_as_the_sdk_class_reads_it(journal: Journal) -> None:
    sdk = AdvancedSQLiteSession(session_id=SID, create_tables=True)
    try:
        expected = await _usage_program(sdk)
    finally:
        sdk.close()
    ours = await _usage_program(journal.session(SID))
    assert ours == expected
    assert json.dumps(ours)  # plain data


async def test_usage_on_a_branch_is_booked_on_the_branch_stream(journal: Journal) -> None:
    session = journal.session(SID)
    await session.add_items([_user("u1"), _user("u2")])
    await session.create_branch_from_turn(2, "alt")
    await session.add_items([_user("b2"), _assistant("b")])
    await session.store_run_usage(run_result(1, 10))
    top = branch_stream(SID, "alt")
    (booked,) = [e for e in await journal.store.read(top) if e.type == ev.TURN_USAGE]
    usage = ev.TurnUsage.decode(booked.data)
    assert (usage.branch, usage.turn, usage.anchor.stream) == ("alt", 2, top)
    assert not [e for e in await journal.store.read(session_stream(SID)) if e.type == ev.TURN_USAGE]


# -- clear across lines ----------------------------------------------------------------------


class _RivalOnBranch(SQLiteEventStore):
    """A real store where another writer appends to ``rival`` just before the first request
    that writes a ``SessionCleared``: the clear conflicts there and is planned again."""

    rival = ""
    beaten = 0

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        clears = any(e.type == ev.SESSION_CLEARED for r in requests for e in r.events)
        if clears and not self.beaten:
            self.beaten += 1
            note = NewEvent(type="OtherWriterNote", data=b"{}")
            await super().append(self.rival, [note], expected=StreamState.ANY)
        return await super().append_many(requests)


async def test_a_clear_ends_every_live_branch_in_one_write(tmp_path: Path) -> None:
    store = cast(_RivalOnBranch, await _RivalOnBranch.open(tmp_path / "c.db"))
    try:
        session = JournalSession(store, SID)
        await session.add_items([_user("u1"), _user("u2"), _user("u3")])
        await session.create_branch_from_turn(3, "one")
        await session.add_items([_user("o3")])
        await session.create_branch_from_turn(2, "two")  # a fork of a fork
        await session.add_items([_user("t2")])
        await session.switch_to_branch("main")
        await session.create_branch_from_turn(2, "gone")
        await session.add_items([_user("g2")])
        await session.switch_to_branch("main")
        await session.delete_branch("gone")
        stale = JournalSession(store, SID, branch="two")
        assert await stale.get_items() == [_user("u1"), _user("t2")]
        store.rival = branch_stream(SID, "one")
        await session.switch_to_branch("two")
        await session.clear_session()
        assert store.beaten == 1
        assert session.branch == "main"
        main = await store.read(session_stream(SID))
        assert _types(main).count(ev.SESSION_CLEARED) == 1
        for name in ("one", "two"):
            ended = await store.read(branch_stream(SID, name))
            assert ended[-1].type == ev.BRANCH_DELETED
            assert ev.BranchDeleted.decode(ended[-1].data).reason == "cleared"
        gone = await store.read(branch_stream(SID, "gone"))
        assert _types(gone).count(ev.BRANCH_DELETED) == 1  # ended once, by its delete
        registry = _types(await store.read(branches_stream(SID)))
        assert registry.count(ev.BRANCH_REMOVED) == 3
        # One transaction: the clear's events sit at consecutive global positions.
        ends: list[int] = []
        for stream in (session_stream(SID), branch_stream(SID, "one"), branch_stream(SID, "two")):
            ends += [
                e.position
                for e in await store.read(stream)
                if e.type in (ev.SESSION_CLEARED, ev.BRANCH_DELETED)
            ]
        ends.sort()
        assert ends == list(range(ends[0], ends[0] + 3))
        # Another object on a cleared branch moves to main at its next call.
        await stale.add_items([_user("after")])
        assert stale.branch == "main"
        assert await session.get_items() == [_user("after")]
        assert await session.list_branches() == [
            {
                "branch_id": "main",
                "message_count": 1,
                "user_turns": 1,
                "is_current": True,
                "created_at": (await session.list_branches())[0]["created_at"],
            }
        ]
        assert {b.name: b.deleted for b in await session.branches()} == {
            "one": "cleared",
            "two": "cleared",
            "gone": "deleted",
        }
    finally:
        await store.close()


# -- a run stays on its line -----------------------------------------------------------------


async def test_a_switch_mid_run_does_not_move_the_run(journal: Journal) -> None:
    session = journal.session(SID)
    await session.add_items([_user("u1"), _user("u2")])
    await session.create_branch_from_turn(2, "alt")
    await session.add_items([_user("b2")])
    await session.switch_to_branch("main")
    run = RunContextWrapper(context=None, usage=Usage())
    assert await session.get_items(wrapper=run) == [_user("u1"), _user("u2")]  # the run starts
    await session.switch_to_branch("alt")
    await session.add_items([_assistant("from the run")], wrapper=run)
    await session.add_items([_assistant("not from the run")])
    assert await session.get_items(branch_id="main") == [
        _user("u1"),
        _user("u2"),
        _assistant("from the run"),
    ]
    assert await session.get_items() == [_user("u1"), _user("b2"), _assistant("not from the run")]


async def test_usage_before_the_first_user_message_is_booked_on_turn_zero(
    journal: Journal,
) -> None:
    """As the SDK: items before any user message are turn 0, and usage lands there."""

    async def program(session: Any) -> list[Any]:
        await session.store_run_usage(run_result(1, 10))  # no item: nothing booked
        await session.add_items([_assistant("hello first")])
        await session.store_run_usage(run_result(2, 20))
        return [await session.get_turn_usage(), await session.get_session_usage()]

    sdk = AdvancedSQLiteSession(session_id=SID, create_tables=True)
    try:
        expected = await program(sdk)
    finally:
        sdk.close()
    assert await program(journal.session(SID)) == expected
    assert expected[0][0]["user_turn_number"] == 0
