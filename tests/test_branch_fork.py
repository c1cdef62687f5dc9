"""Forks: where a fork leaves its line, the fork's one atomic write, names that race, on
every store (SQLite file and memory, the KurrentDB double)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from agentjournal import Journal, JournalSession
from agentjournal import events as ev
from agentjournal.engine import stamps
from agentjournal.engine.fork import cut_position, fork_point, plan_fork, revision_at
from agentjournal.engine.plan import SessionFacts
from agentjournal.engine.tree import SessionTree
from agentjournal.errors import InvalidInput
from agentjournal.ledger.chain import GENESIS, HASH_KEY, seal
from agentjournal.ledger.keys import SigningKey
from agentjournal.read.replay import check_read_model
from agentjournal.store.contract import NewEvent, RecordedEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.streams import branch_stream, branches_stream, session_stream
from branch_items import assistant as _assistant
from branch_items import user as _user

SID = "fork-1"
MAIN = session_stream(SID)


async def _two_turns(journal: Journal) -> JournalSession:
    session = journal.session(SID)
    await session.add_items([_user("u1")])
    await session.add_items([_assistant("a1")])
    await session.add_items([_user("u2"), _assistant("a2")])
    return session


async def _stream(journal: Journal, stream: str) -> list[RecordedEvent]:
    return await journal.store.read(stream)


# -- revision_at ----------------------------------------------------------------------------


class _Plain:
    """A store whose class defines no ``revision_at``: the engine searches by halves."""

    def __init__(self, store: Any) -> None:
        self._store = store

    async def head(self, stream: str) -> int | None:
        answer: int | None = await self._store.head(stream)
        return answer

    async def read(self, stream: str, **kw: Any) -> list[RecordedEvent]:
        answer: list[RecordedEvent] = await self._store.read(stream, **kw)
        return answer


@pytest.mark.slow
async def test_revision_at_is_the_last_revision_before_a_position(journal: Journal) -> None:
    store = journal.store
    for n in range(7):
        for stream in ("A-x", "B-x") if n % 3 else ("A-x",):
            event = NewEvent("T", b"{}", {}, uuid.uuid4())
            await store.append(stream, [event], expected=StreamState.ANY)
    every = sorted(
        [e for s in ("A-x", "B-x") for e in await store.read(s)], key=lambda e: e.position
    )
    probes = sorted({0, *(e.position for e in every), *(e.position + 1 for e in every)})
    for stream in ("A-x", "B-x", "C-missing"):
        for position in probes:
            expected = max(
                (e.revision for e in every if e.stream == stream and e.position < position),
                default=-1,
            )
            assert await revision_at(store, stream, position) == expected
            assert await revision_at(_Plain(store), stream, position) == expected  # type: ignore[arg-type]


async def test_sqlite_answers_revision_at_itself(tmp_path: Any) -> None:
    store = await SQLiteEventStore.open(str(tmp_path / "j.db"))
    try:
        assert callable(getattr(type(store), "revision_at", None))
        with pytest.raises(InvalidInput):
            await store.revision_at("A-x", -1)
    finally:
        await store.close()


# -- the plan (pure) ------------------------------------------------------------------------


def _started(**change: Any) -> ev.BranchStarted:
    fields: dict[str, Any] = {
        "session_id": SID,
        "branch": "draft",
        "branch_stream": branch_stream(SID, "draft"),
        "parent": "main",
        "cut": ev.Cut("index", 2, 40),
        "base": (ev.StreamPlace(MAIN, 2, "ab" * 32),),
        "authority": None,
        "next_index": 2,
        "prefix_items": 2,
        "continuations": {},
    }
    return ev.BranchStarted(**{**fields, **change})


def _tree(head: int = 5) -> SessionTree:
    tree = SessionTree(MAIN)
    tree.loaded_with({MAIN: head}, {MAIN: "cd" * 32})
    return tree


def test_the_plan_writes_three_streams_at_exact_states() -> None:
    plan = plan_fork(
        _tree(),
        SessionFacts(SID, MAIN),
        _started(),
        next_index=4,
        registry=(-1, ""),
        nonce="n1",
        trace={"trace_id": "1" * 32, "span_id": "2" * 16, "other": "x"},
    )
    marker, first, entry = plan.requests
    assert (marker.stream, marker.expected) == (MAIN, 5)
    assert (first.stream, first.expected) == (branch_stream(SID, "draft"), StreamState.NO_STREAM)
    assert (entry.stream, entry.expected) == (branches_stream(SID), StreamState.NO_STREAM)
    assert plan.foreign == {first.stream, entry.stream}
    assert dict(plan.commit.heads) == {MAIN: 6}
    (m,), (f,), (r,) = marker.events, first.events, entry.events
    assert (m.type, f.type, r.type) == (ev.BRANCH_FORKED, ev.BRANCH_STARTED, ev.BRANCH_ADDED)
    # Twins name each other; the branch continues from the cut's index, main from its own.
    assert m.metadata[ev.TWIN_KEY] == str(f.id)
    assert f.metadata[ev.TWIN_KEY] == str(m.id)
    assert m.metadata[ev.NEXT_INDEX_KEY] == "4"
    assert f.metadata[ev.NEXT_INDEX_KEY] == "2"
    assert ev.OPEN_KEY not in m.metadata
    assert json.loads(r.data)["event"] == str(f.id)
    assert "other" not in m.metadata
    assert m.metadata["trace_id"] == "1" * 32
    # The forked marker carries the started event's fields but its continuations.
    assert json.loads(f.data) == {**json.loads(m.data), "continuations": {}}
    # Each is sealed into its stream's chain, after the head it expects.
    for event, stream, revision, prev in (
        (m, MAIN, 6, "cd" * 32),
        (f, first.stream, 0, GENESIS),
        (r, entry.stream, 0, GENESIS),
    ):
        meta = {k: v for k, v in event.metadata.items() if k != HASH_KEY}
        recomputed = seal(stream, revision, str(event.id), event.type, event.data, meta, prev)
        assert recomputed == event.metadata[HASH_KEY]


def test_the_plan_is_the_same_for_the_same_nonce_and_follows_the_registry() -> None:
    def planned(nonce: str, registry: tuple[int, str]) -> Any:
        return plan_fork(
            _tree(),
            SessionFacts(SID, MAIN),
            _started(),
            next_index=4,
            registry=registry,
            nonce=nonce,
            trace={},
        )

    one, again, other = planned("n1", (-1, "")), planned("n1", (-1, "")), planned("n2", (-1, ""))
    ids = [[e.id for e in r.events] for r in one.requests]
    assert ids == [[e.id for e in r.events] for r in again.requests]
    assert ids != [[e.id for e in r.events] for r in other.requests]
    later = planned("n1", (3, "ef" * 32))
    assert later.requests[2].expected == 3
    assert later.requests[2].events[0].metadata["aj.prev"] == "ef" * 32


def test_the_marker_keeps_the_parent_s_open_subagent() -> None:
    sub = ev.Subagent("sub-b-c1", "B", "A", "c1", "AgentSubsession-fork-1-sub-b-c1", MAIN, "")
    tree = SessionTree(MAIN)
    tree.loaded_with({MAIN: 5, sub.stream: 1}, {MAIN: "cd" * 32, sub.stream: "ee" * 32})
    tree.opened(sub, None)
    plan = plan_fork(
        tree,
        SessionFacts(SID, MAIN),
        _started(),
        next_index=9,
        registry=(-1, ""),
        nonce="n",
        trace={},
    )
    assert plan.requests[0].events[0].metadata[ev.OPEN_KEY] == sub.stream


# -- cuts (pure, over events a store wrote) ------------------------------------------------


async def test_cuts_resolve_to_positions_and_the_line_as_of_them(journal: Journal) -> None:
    await _two_turns(journal)
    main = await _stream(journal, MAIN)  # SessionStarted, u1, a1, u2, a2
    read = {MAIN: main}
    assert cut_position(read, MAIN, "index", 2) == main[3].position
    assert cut_position(read, MAIN, "revision", 2) == main[2].position + 1
    point = fork_point(read, MAIN, main[3].position)
    assert (point.base.revision, point.next_index, point.prefix_items, point.open) == (
        2,
        2,
        2,
        None,
    )
    at_start = fork_point(read, MAIN, main[1].position)
    assert (at_start.base.revision, at_start.next_index, at_start.prefix_items) == (0, 0, 0)
    with pytest.raises(InvalidInput, match="no item #9"):
        cut_position(read, MAIN, "index", 9)
    with pytest.raises(InvalidInput, match="no revision 9"):
        cut_position(read, MAIN, "revision", 9)
    with pytest.raises(InvalidInput, match="nothing of"):
        fork_point(read, MAIN, main[0].position)


# -- the fork, on every store ----------------------------------------------------------------


async def test_a_fork_is_one_write_on_three_streams(journal: Journal) -> None:
    session = await _two_turns(journal)
    before = await session.get_items()
    branch = await session.fork(2, name="draft")
    main = await _stream(journal, MAIN)
    assert [e.type for e in main][-1] == ev.BRANCH_FORKED
    assert branch.name == "draft"
    assert branch.parent == "main"
    assert branch.stream == branch_stream(SID, "draft")
    assert branch.cut == ev.Cut("index", 2, main[3].position)
    assert (branch.next_index, branch.prefix_items, branch.deleted) == (2, 2, None)
    (first,) = await _stream(journal, branch.stream)
    started = ev.BranchStarted.decode(first.data)
    assert started.base == (ev.StreamPlace(MAIN, 2, main[2].metadata[HASH_KEY]),)
    assert started.authority is None
    assert first.metadata[ev.TWIN_KEY] == str(main[-1].id)
    assert main[-1].metadata[ev.TWIN_KEY] == str(first.id)
    assert ev.BranchForked.decode(main[-1].data).cut == branch.cut
    (entry,) = await _stream(journal, branches_stream(SID))
    assert ev.BranchAdded.decode(entry.data) == ev.BranchAdded(
        "draft", branch.stream, "main", str(first.id)
    )
    # Main reads and writes on as before (the marker is no item; its head is known).
    assert await session.get_items() == before
    await session.add_items([_user("u3")])
    assert (await session.get_items())[-1] == _user("u3")
    assert await journal.session(SID).get_items() == [*before, _user("u3")]
    assert await session.branches() == [branch]


async def test_the_fork_leaves_main_s_read_model_current(tmp_path: Any) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        session = await _two_turns(journal)
        await session.fork(turn=2, name="draft")
        await session.add_items([_user("u3")])
        store = journal.store
        snapshot = await store.read_model(MAIN)  # type: ignore[attr-defined]
        assert snapshot is not None
        assert set(snapshot.heads) == {MAIN}  # the branch's streams are not main's tree
        # The branch's tree starts as a copy of main's rows before the cut.
        copied = await store.read_model(branch_stream(SID, "draft"))  # type: ignore[attr-defined]
        assert copied is not None
        assert set(copied.heads) == {branch_stream(SID, "draft")}
        assert [index for index, _, _ in copied.items] == [0, 1]
        assert set(copied.names.values()) == {MAIN, branch_stream(SID, "draft")}
        checked = await check_read_model(store, SID)
        assert checked is not None
        assert checked[1] is None
        assert len(await JournalSession(store, SID).get_items()) == 5  # cold: the model


async def test_cuts_by_turn_revision_and_head(journal: Journal) -> None:
    session = await _two_turns(journal)
    main = await _stream(journal, MAIN)
    by_turn = await session.fork(turn=2, name="t2")
    assert by_turn.cut == ev.Cut("turn", 2, main[3].position)
    assert by_turn.prefix_items == 2
    by_turn_1 = await session.fork(turn=1, name="t1")
    assert (by_turn_1.cut.position, by_turn_1.prefix_items) == (main[1].position, 0)
    by_revision = await session.fork(revision=3, name="r3")
    assert by_revision.cut == ev.Cut("revision", 3, main[3].position + 1)
    assert (by_revision.prefix_items, by_revision.next_index) == (3, 3)
    head = await session.fork(name="head")
    main = await _stream(journal, MAIN)
    # After everything written before it (the three markers too, which are no items).
    assert head.cut == ev.Cut("revision", len(main) - 2, main[-2].position + 1)
    assert (head.prefix_items, head.next_index) == (4, 4)
    assert [b.name for b in await session.branches()] == ["t2", "t1", "r3", "head"]


async def test_refused_forks_write_nothing(journal: Journal) -> None:
    session = journal.session(SID)
    with pytest.raises(InvalidInput, match="nothing to fork"):
        await session.fork(name="x")
    await _two_turns(journal)
    size = len(await _stream(journal, MAIN))
    for kwargs, message in (
        ({"at": 1, "turn": 1}, "at most one"),
        ({"at": -1}, "integer >= 0"),
        ({"turn": 0}, "integer >= 1"),
        ({"at": True}, "integer"),
        ({"at": 9}, "no item #9"),
        ({"revision": 99}, "no revision 99"),
        ({"turn": 3}, "Turn 3 does not contain a user message in branch 'main'"),
        ({"name": " "}, "blank"),
        ({"name": "main"}, "main line"),
    ):
        with pytest.raises(InvalidInput, match=message):
            await session.fork(**kwargs)
    assert len(await _stream(journal, MAIN)) == size
    assert await session.branches() == []


async def test_a_used_name_is_refused_and_generated_names_step_on(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await _two_turns(journal)
    await session.fork(1, name="draft")
    with pytest.raises(InvalidInput, match="'draft' has already been used"):
        await session.fork(2, name="draft")
    monkeypatch.setattr(stamps, "unix_seconds", lambda: 1764590000)
    names = [(await session.fork(2)).name for _ in range(3)]
    assert names == ["fork_2_1764590000", "fork_2_1764590000_2", "fork_2_1764590000_3"]
    assert len(await session.branches()) == 4


async def test_two_writers_racing_for_one_name_one_wins(journal: Journal) -> None:
    await _two_turns(journal)
    # Two session objects that share nothing but the store (two processes, as far as
    # the engine can tell): each plans against what it read.
    one = JournalSession(journal.store, SID)
    two = JournalSession(journal.store, SID)
    await one.get_items()
    await two.get_items()
    outcomes = await asyncio.gather(
        one.fork(1, name="race"), two.fork(2, name="race"), return_exceptions=True
    )
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(won) == 1
    assert len(lost) == 1
    assert isinstance(lost[0], InvalidInput)
    assert "already been used" in str(lost[0])
    markers = [e for e in await _stream(journal, MAIN) if e.type == ev.BRANCH_FORKED]
    assert len(markers) == 1
    assert len(await _stream(journal, branches_stream(SID))) == 1
    assert await one.branches() == won


async def test_two_forks_of_different_names_both_land_after_a_retry(journal: Journal) -> None:
    await _two_turns(journal)
    one = JournalSession(journal.store, SID)
    two = JournalSession(journal.store, SID)
    await one.get_items()
    await two.get_items()
    first, second = await asyncio.gather(one.fork(1, name="a"), two.fork(3, name="b"))
    # Whichever lost the race for main's head (or the registry's) planned its marker
    # again; its cut did not move.
    assert (first.cut.value, second.cut.value) == (1, 3)
    markers = [e for e in await _stream(journal, MAIN) if e.type == ev.BRANCH_FORKED]
    assert sorted(ev.BranchForked.decode(m.data).branch for m in markers) == ["a", "b"]
    assert {b.name for b in await one.branches()} == {"a", "b"}
    assert await one.get_items() == await two.get_items()


class _Overtaken:
    """A store through which another writer creates ``stream`` right after this writer
    looked for it and found nothing: the interleaving a second process makes."""

    def __init__(self, store: Any, stream: str) -> None:
        self._store = store
        self._stream = stream
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def head(self, stream: str) -> int | None:
        answer: int | None = await self._store.head(stream)
        if stream == self._stream and not self.fired:
            self.fired = True
            other = NewEvent(ev.BRANCH_STARTED, b"{}", {}, uuid.uuid4())
            await self._store.append(stream, [other], expected=StreamState.NO_STREAM)
        return answer


async def test_a_branch_stream_created_after_the_check_makes_the_fork_fail(
    journal: Journal,
) -> None:
    await _two_turns(journal)
    overtaken = _Overtaken(journal.store, branch_stream(SID, "late"))
    session = JournalSession(overtaken, SID)
    with pytest.raises(InvalidInput, match="'late' has already been used"):
        await session.fork(1, name="late")
    assert overtaken.fired
    assert len(await _stream(journal, branch_stream(SID, "late"))) == 1  # the other's only
    assert not [e for e in await _stream(journal, MAIN) if e.type == ev.BRANCH_FORKED]
    assert await session.branches() == []


async def test_main_s_checkpoints_name_main_s_streams_and_the_registry(journal: Journal) -> None:
    session = await _two_turns(journal)
    signed = JournalSession(journal.store, SID, signing_key=SigningKey.generate())
    await signed.fork(2, name="draft")
    # The tree follows its own streams only (its heads are what it signs and reads on).
    assert set(signed._core.tree.heads) == {MAIN}
    checkpoint = await signed.checkpoint()
    assert checkpoint is not None
    # Its line's streams and the registry; never a branch's streams.
    assert set(checkpoint.heads) == {MAIN, branches_stream(SID)}
    assert checkpoint.heads[MAIN][0] == len(await _stream(journal, MAIN)) - 1
    assert await session.get_items() == await signed.get_items()
