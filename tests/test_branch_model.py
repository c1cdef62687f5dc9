"""Branches: the SQLite read model for branches.

A fork whose cut the parent's read model can say exactly reads it from the model (the turn's
user message, the next index, the prefix's items) and starts the branch's model as a copy of
the parent's rows before the cut, in the fork's own write (``ModelCopy``); every other fork
reads the line's events once and leaves the branch on the events path. Either way every
line's cold full read equals the events path (``use_model=False``, the oracle), and a fork
through the model writes exactly the ``BranchStarted`` a fork through the events writes.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentjournal import Journal, JournalSession
from agentjournal import events as ev
from agentjournal.engine.core import SessionCore
from agentjournal.engine.plan import SessionFacts
from agentjournal.engine.tree import SessionTree
from agentjournal.errors import InvalidInput
from agentjournal.read.replay import check_read_model
from agentjournal.store.contract import NewEvent
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.streams import branch_stream, session_stream
from branch_items import assistant as _assistant
from branch_items import user as _user
from drive import drive
from handoff_scenarios import nested, single, top_level, two_handoffs
from test_read_model import _as_v1

SID = "model-1"
MAIN = session_stream(SID)


def _stream_of(line: str | None) -> str:
    return MAIN if line is None else branch_stream(SID, line)


def _core(store: Any, line: str | None, *, use_model: bool) -> SessionCore:
    """A fresh session object on a line (cold), reading through the model or the events."""
    stream = _stream_of(line)
    return SessionCore(
        store, SessionFacts(SID, stream, branch=line), SessionTree(stream), use_model=use_model
    )


async def _texts_of(store: Any, line: str | None, *, use_model: bool) -> list[str]:
    items = await _core(store, line, use_model=use_model).items(None)
    return [json.dumps(item) for item in items]


async def _started(store: Any, line: str) -> ev.BranchStarted:
    first = (await store.read(branch_stream(SID, line), limit=1))[0]
    return ev.BranchStarted.decode(first.data)


def _fields(started: ev.BranchStarted) -> tuple[Any, ...]:
    """What a fork read from its line (not its name or streams)."""
    return (
        started.parent,
        started.cut,
        started.base,
        started.authority,
        started.next_index,
        started.prefix_items,
    )


async def _modelled(store: Any, line: str | None) -> bool:
    return await store.read_model(_stream_of(line)) is not None


async def _exact(store: Any, lines: list[str | None]) -> None:
    """Every line's cold full read (the model's where current) is its events' read."""
    for line in lines:
        from_events = await _texts_of(store, line, use_model=False)
        assert await _texts_of(store, line, use_model=True) == from_events, line
    checked = await check_read_model(store, SID)
    assert checked is not None
    assert checked[1] is None, checked


async def _long(session: JournalSession, turns: int, prefix: str = "") -> None:
    for n in range(turns):
        await session.add_items([_user(f"{prefix}u{n}"), _assistant(f"{prefix}a{n}")])


# -- the model path --------------------------------------------------------------------------


async def test_a_fork_through_the_model_starts_the_branch_s_model_as_a_copy(
    tmp_path: Path,
) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        store: Any = journal.store
        main = journal.session(SID)
        await _long(main, 3)
        await main.pop_item()  # #5, before every cut below: part of each prefix
        await _long(main, 3, "late-")  # #6 to #11
        revision = await store.head(MAIN)
        assert revision is not None
        by_turn = await JournalSession(store, SID).fork(turn=4, name="t3")
        by_index = await JournalSession(store, SID).fork(8, name="i7")
        by_revision = await JournalSession(store, SID).fork(revision=revision - 2, name="r5")
        at_head = await JournalSession(store, SID).fork(name="head")
        assert (by_turn.next_index, by_turn.prefix_items) == (6, 5)
        assert (by_index.next_index, by_index.prefix_items) == (8, 7)
        assert (by_revision.next_index, by_revision.prefix_items) == (10, 9)
        assert (at_head.next_index, at_head.prefix_items) == (12, 11)
        for name in ("t3", "i7", "r5", "head"):
            assert await _modelled(store, name), name
            # The same fork through the events writes the same BranchStarted.
            started = await _started(store, name)
            cut = started.cut
            kw: dict[str, Any] = (
                {"turn": cut.value}
                if cut.kind == "turn"
                else {"at": cut.value}
                if cut.kind == "index"
                else {"revision": cut.value}
            )
            await _core(store, None, use_model=False).fork(**kw, name=f"{name}-ev", trace={})
            assert _fields(await _started(store, f"{name}-ev")) == _fields(started)
            assert not await _modelled(store, f"{name}-ev")
        assert by_revision.cut.position > 0
        own = journal.session(SID, branch="t3")
        await own.add_items([_user("b1")])
        assert await own.pop_item() == _user("b1")
        assert await own.pop_item() == _user("u2")  # a prefix item, popped on the branch
        await own.add_items([_user("b2")])
        assert await _modelled(store, "t3")
        await _exact(store, [None, "t3", "t3-ev", "i7", "r5", "head"])
        # The copy keeps the parent's places: the rows name main's stream.
        snapshot = await store.read_model(branch_stream(SID, "t3"))
        assert snapshot is not None
        assert MAIN in snapshot.names.values()


async def test_forks_of_forks_copy_in_their_own_part_and_read_events_in_their_prefix(
    tmp_path: Path,
) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        store: Any = journal.store
        main = journal.session(SID)
        await _long(main, 3)
        await main.fork(name="one")
        one = journal.session(SID, branch="one")
        await one.add_items([_user("o1"), _assistant("o2")])
        await one.fork(7, name="two")  # in one's own part: through the model
        await one.fork(2, name="low")  # in one's prefix: through the events
        two = journal.session(SID, branch="two")
        await two.add_items([_user("t1")])
        await two.fork(turn=2, name="three")  # a turn in main's part of two's line
        assert await _modelled(store, "two")
        assert not await _modelled(store, "low")
        for name in ("two", "low", "three"):
            started = await _started(store, name)
            line = started.parent
            await _core(store, None if line == "main" else line, use_model=False).fork(
                at=started.next_index if started.cut.kind == "index" else None,
                turn=started.cut.value if started.cut.kind == "turn" else None,
                name=f"{name}-ev",
                trace={},
            )
            assert _fields(await _started(store, f"{name}-ev")) == _fields(started)
        await _exact(store, [None, "one", "two", "low", "three"])


async def test_a_hide_since_the_cut_sends_the_fork_to_the_events(tmp_path: Path) -> None:
    """A pop or a clear on the parent after the cut may hide an item of the prefix: the
    model cannot say what was visible at the cut, so the events do (no copy)."""
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        store: Any = journal.store
        main = journal.session(SID)
        await _long(main, 3)
        await main.pop_item()  # hides #5, after a cut at #2
        await main.fork(2, name="popped")
        await main.fork(turn=1, name="turn-1")
        await _exact(store, [None, "popped", "turn-1"])
        await main.clear_session()  # ends every branch too (as the SDK's does)
        await main.add_items([_user("new")])
        await main.fork(1, name="cleared")  # #1 is not visible now: the events find it
        await main.fork(name="after-clear")  # at the head: nothing since the cut
        assert not await _modelled(store, "popped")
        assert not await _modelled(store, "turn-1")
        assert not await _modelled(store, "cleared")
        assert await _modelled(store, "after-clear")
        assert (await _started(store, "popped")).prefix_items == 2
        assert (await _started(store, "after-clear")).prefix_items == 1
        await _exact(store, [None, "cleared", "after-clear"])


@pytest.mark.parametrize("hide", ["pops", "clear"])
async def test_prefix_items_hidden_since_the_cut_are_the_prefix_s(
    tmp_path: Path, hide: str
) -> None:
    """Items of the prefix hidden after the cut, then new items: the rows written since
    the cut look whole (#4, #5), but the cut's next index is 2 and #1 was visible."""
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        store: Any = journal.store
        main = journal.session(SID)
        for n in range(4):
            await main.add_items([_user(f"u{n}")])
        cut = next(e for e in await store.read(MAIN) if e.metadata.get(ev.INDEX_KEY) == "1")
        if hide == "pops":
            for _ in range(3):
                await main.pop_item()  # #3, #2, #1
        else:
            await main.clear_session()
        await main.add_items([_user("u4"), _user("u5")])
        branch = await JournalSession(store, SID).fork(revision=cut.revision, name="b")
        assert (branch.next_index, branch.prefix_items) == (2, 2)
        assert not await _modelled(store, "b")
        await _core(store, None, use_model=False).fork(revision=cut.revision, name="b-ev", trace={})
        assert _fields(await _started(store, "b-ev")) == _fields(await _started(store, "b"))
        assert await journal.session(SID, branch="b").get_items() == [_user("u0"), _user("u1")]
        await _exact(store, [None, "b"])


async def test_a_missing_turn_is_refused_the_same_way_through_the_model(
    tmp_path: Path,
) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        main = journal.session(SID)
        await _long(main, 2)
        message = "Turn 3 does not contain a user message in branch 'main'"
        with pytest.raises(InvalidInput, match=message):
            await main.fork(turn=3, name="x")
        with pytest.raises(InvalidInput, match=message):
            await _core(journal.store, None, use_model=False).fork(turn=3, name="x", trace={})
        with pytest.raises(InvalidInput, match="has no revision 99"):
            await main.fork(revision=99, name="x")
        assert await main.branches() == []


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [single, nested, two_handoffs])
async def test_forks_at_every_item_of_runs_with_handoffs_agree_with_the_events(
    tmp_path: Path, scenario: Callable[[], Any]
) -> None:
    """Handoffs write one run's items on several streams: a fork at any item, turn or the
    head through the model writes the events' BranchStarted (or is refused the same way:
    a subagent open at the cut), and every branch reads exactly."""
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        store: Any = journal.store
        main = journal.session(SID)
        await drive(scenario(), "Why was I charged twice?", session=main, hooks=main)
        await drive(top_level(), "And now?", session=main, hooks=main)
        count = len(await main.get_items())
        cuts: list[dict[str, Any]] = [{"at": n} for n in range(count + 1)]
        cuts += [{"turn": 1}, {"turn": 2}, {}]
        made: list[str | None] = [None]
        for n, kw in enumerate(cuts):
            refused: str | None = None
            try:
                await JournalSession(store, SID).fork(**kw, name=f"f{n}")
            except InvalidInput as error:
                refused = str(error)
            if refused is not None:
                with pytest.raises(InvalidInput) as again:
                    await _core(store, None, use_model=False).fork(**kw, name=f"f{n}-ev", trace={})
                assert str(again.value) == refused
                continue
            started = await _started(store, f"f{n}")
            same = kw or {"revision": started.cut.value}
            await _core(store, None, use_model=False).fork(**same, name=f"f{n}-ev", trace={})
            assert _fields(await _started(store, f"f{n}-ev")) == _fields(started), kw
            made.append(f"f{n}")
        assert len(made) > 3
        await _exact(store, made)


# -- fallbacks --------------------------------------------------------------------------------


async def _foreign(store: Any, stream: str) -> None:
    """Another writer's event, appended without a model change."""
    head = await store.head(stream)
    await store.append(stream, [NewEvent("Foreign.Note", b"{}", {}, uuid.uuid4())], expected=head)


async def test_a_foreign_write_on_the_parent_leaves_a_forked_branch_s_model_exact(
    tmp_path: Path,
) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        store: Any = journal.store
        main = journal.session(SID)
        await _long(main, 3)
        await main.fork(turn=2, name="before")
        await _foreign(store, MAIN)  # main's model falls behind
        assert not await _modelled(store, None)
        assert await _modelled(store, "before")  # its prefix is the past: still exact
        await JournalSession(store, SID).fork(turn=2, name="after")  # through the events
        assert not await _modelled(store, "after")
        assert (
            _fields(await _started(store, "after"))[2:]
            == _fields(await _started(store, "before"))[2:]
        )
        await journal.session(SID, branch="before").add_items([_user("b")])
        await _exact(store, [None, "before", "after"])
        # A foreign write on the branch: its model falls behind, its reads take the events.
        await _foreign(store, branch_stream(SID, "before"))
        assert not await _modelled(store, "before")
        await _exact(store, [None, "before", "after"])


async def test_a_version_1_file_forks_through_the_events(tmp_path: Path) -> None:
    async with await SQLiteEventStore.open(tmp_path / "v2.db") as store:
        await _long(JournalSession(store, SID), 3)
    _as_v1(tmp_path / "v2.db", tmp_path / "v1.db")
    async with await SQLiteEventStore.open(tmp_path / "v1.db") as store:
        main = JournalSession(store, SID)
        await main.fork(turn=2, name="old")
        assert not await _modelled(store, "old")  # main's tree is not current: no copy
        await JournalSession(store, SID, branch="old").add_items([_user("b")])
        await _exact(store, [None, "old"])
        assert await JournalSession(store, SID, branch="old").get_items() == [
            _user("u0"),
            _assistant("a0"),
            _user("b"),
        ]


class _Racing(SQLiteEventStore):
    """A store through which another writer appends to the parent while a fork reads its
    cut (between the model's read and the fork's write)."""

    racing: JournalSession | None = None

    async def read_types(self, stream: str, after: int, types: Any) -> Any:
        racing, self.racing = self.racing, None
        if racing is not None:
            await racing.add_items([_user("racer")])
        return await super().read_types(stream, after, types)


async def test_a_parent_moved_during_the_fork_gets_no_copy(tmp_path: Path) -> None:
    """The fork's marker conflicts, the fork is planned again with the same cut and, the
    line having moved since its model was read, without a copy: exact, on the events."""
    async with await _Racing.open(tmp_path / "j.db") as store:
        assert isinstance(store, _Racing)
        await _long(JournalSession(store, SID), 3)
        store.racing = JournalSession(store, SID)
        branch = await JournalSession(store, SID).fork(turn=2, name="raced")
        assert store.racing is None  # the race ran
        assert branch.next_index == 2
        assert not await _modelled(store, "raced")
        await _exact(store, [None, "raced"])


async def test_verify_compares_each_branch_s_model_with_its_events(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    async with Journal.open(f"sqlite:///{path}") as journal:
        main = journal.session(SID)
        await _long(main, 2)
        await main.fork(turn=2, name="b")
        await journal.session(SID, branch="b").add_items([_user("own")])
        checked = await check_read_model(journal.store, SID)
        assert checked == (
            "read model: 4 on main, 3 on branch 'b', exactly the events' items",
            None,
        )
    with sqlite3.connect(path) as db:  # edit a copied row of the branch's tree only
        (tree,) = db.execute(
            "SELECT id FROM streams WHERE name = ?", (branch_stream(SID, "b"),)
        ).fetchone()
        changed = db.execute(
            "UPDATE items SET item = ? WHERE tree = ? AND idx = 1",
            (json.dumps(_assistant("forged")), tree),
        ).rowcount
        assert changed == 1
    async with Journal.open(f"sqlite:///{path}") as journal:
        checked = await check_read_model(journal.store, SID)
        assert checked is not None
        line, problem = checked
        assert line == "read model: FAILED"
        assert problem is not None
        assert "of branch 'b' differs from the events at item 1" in problem


# -- the oracle: model against events on random branch trees ----------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 7), st.integers(1, 3)),
        st.tuples(st.just("pop"), st.integers(0, 7), st.just(0)),
        st.tuples(st.just("clear"), st.integers(0, 7), st.just(0)),
        st.tuples(
            st.sampled_from(["at", "turn", "revision", "head"]),
            st.integers(0, 7),
            st.integers(0, 12),
        ),
        st.tuples(st.sampled_from(["at", "turn", "head"]), st.integers(0, 7), st.integers(0, 12)),
    ),
    min_size=1,
    max_size=16,
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_every_line_s_model_is_its_events_and_every_fork_the_events_fork(
    ops: list[tuple[str, int, int]],
) -> None:
    asyncio.run(_program(ops))


async def _program(ops: list[tuple[str, int, int]]) -> None:
    async with Journal.open("sqlite://:memory:") as journal:
        store = journal.store
        lines: list[str | None] = [None]
        sessions: dict[str | None, JournalSession] = {None: journal.session(SID)}
        made = 0
        for step, (op, which, value) in enumerate([("add", 0, 3), *ops]):
            line = lines[which % len(lines)]
            session = sessions[line]
            if op == "add":
                await session.add_items(
                    [(_user if k % 2 == 0 else _assistant)(f"{step}.{k}") for k in range(value)]
                )
            elif op == "pop":
                await session.pop_item()
            elif op == "clear":
                if await store.head(_stream_of(line)) is not None:
                    await session.clear_session()
                    lines = [None]  # as the SDK's, a clear on any line ends every branch
            else:
                kw: dict[str, Any] = {}
                if op == "at":
                    kw["at"] = value
                elif op == "turn":
                    kw["turn"] = value + 1
                elif op == "revision":
                    kw["revision"] = value
                made += 1
                name = f"b{made}"
                refused: str | None = None
                try:
                    await JournalSession(store, SID, branch=line).fork(**kw, name=name)
                except InvalidInput as error:
                    refused = str(error)
                if refused is not None:  # refused the same way through the events
                    with pytest.raises(InvalidInput) as again:
                        await _core(store, line, use_model=False).fork(
                            **kw, name=f"{name}-ev", trace={}
                        )
                    assert str(again.value) == refused
                    continue
                started = await _started(store, name)
                if op == "head":  # the head has moved by the marker: the same cut by revision
                    kw = {"revision": started.cut.value}
                await _core(store, line, use_model=False).fork(**kw, name=f"{name}-ev", trace={})
                events_fork = await _started(store, f"{name}-ev")
                if op == "head":
                    assert events_fork.cut == started.cut
                assert _fields(events_fork) == _fields(started)
                event(f"fork {op}: {'copied' if await _modelled(store, name) else 'events'}")
                lines.extend([name, f"{name}-ev"])
                sessions[name] = journal.session(SID, branch=name)
                sessions[f"{name}-ev"] = journal.session(SID, branch=f"{name}-ev")
        if await store.head(MAIN) is not None:
            await _exact(store, lines)


async def test_a_row_moved_out_of_the_copied_prefix_reads_the_events(tmp_path: Path) -> None:
    """A branch's copied rows lie on the parent's streams and come before its own; a row of
    its own moved (by hand) onto a parent stream is neither: the store answers None and the
    reader takes the events, which still say where each item is."""
    path = tmp_path / "j.db"
    async with Journal.open(f"sqlite:///{path}") as journal:
        main = journal.session(SID)
        await _long(main, 2)
        await main.fork(name="b")
        await journal.session(SID, branch="b").add_items([_user("mine"), _assistant("ok")])
        assert await _modelled(journal.store, "b")
    with sqlite3.connect(path) as db:
        ids = dict(db.execute("SELECT name, id FROM streams").fetchall())
        db.execute(
            "UPDATE items SET stream_id = ? WHERE tree = ? AND idx = 5",
            (ids[session_stream(SID)], ids[branch_stream(SID, "b")]),
        )
    async with Journal.open(f"sqlite:///{path}") as journal:
        assert not await _modelled(journal.store, "b")
        await _exact(journal.store, [None, "b"])


async def test_verify_compares_the_model_of_a_session_with_a_deleted_branch(
    tmp_path: Path,
) -> None:
    """A deleted branch reads nothing (BranchDeleted): verify's model comparison skips its
    items instead of stopping on the refusal, and checks its model holds none."""
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        main = journal.session(SID)
        await _long(main, 2)
        await main.fork(at=1, name="alt")
        await journal.session(SID, branch="alt").add_items([_user("alt")])
        await main.delete_branch("alt")
        checked = await check_read_model(journal.store, SID)
        assert checked is not None
        assert checked[1] is None, checked
