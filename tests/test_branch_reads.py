"""Branch reads: a branch reads as its parent's history as of
the fork followed by its own items — windowed (O(limit), crossing into the parent's
stream at the fork) and whole, warm and cold — and is written like the main line."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import Journal, JournalSession
from agentjournal import events as ev
from agentjournal.audit.verify import verify_records
from agentjournal.authority import Authority, Policy
from agentjournal.errors import InvalidInput
from agentjournal.ledger.chain import HASH_KEY
from agentjournal.ledger.keys import SigningKey
from agentjournal.store.contract import EventStore, RecordedEvent
from agentjournal.streams import authority_stream, branch_stream, session_stream
from agentjournal.walk import read_tree
from branch_items import assistant as _assistant
from branch_items import user as _user
from drive import METHODS, Method, drive, sdk_reference
from handoff_scenarios import single

SID = "reads-1"
MAIN = session_stream(SID)


def _texts(items: list[Any]) -> list[str]:
    return [json.dumps(item, sort_keys=True) for item in items]


async def _agrees(store: EventStore, session: JournalSession, expected: list[Any]) -> None:
    """Every way of reading the line gives ``expected`` (warm, cold, windowed, whole)."""
    line = None if session.branch == "main" else session.branch
    for reader in (session, JournalSession(store, SID, branch=line)):
        for limit in (None, 0, 1, 2, 3, len(expected), len(expected) + 5):
            want = expected if limit is None else expected[max(len(expected) - limit, 0) :]
            want = want if limit != 0 else []
            assert _texts(await reader.get_items(limit)) == _texts(want), (reader, limit)
    for limit in (1, 3, None):  # cold, windowed first
        cold = JournalSession(store, SID, branch=line)
        want = expected if limit is None else expected[max(len(expected) - limit, 0) :]
        assert _texts(await cold.get_items(limit)) == _texts(want)
        assert _texts(await cold.get_items()) == _texts(expected)


async def test_a_branch_reads_its_prefix_then_its_own_items(journal: Journal) -> None:
    main = journal.session(SID)
    history = [_user("u1"), _assistant("a1"), _user("u2"), _assistant("a2")]
    await main.add_items(history[:2])
    await main.add_items(history[2:])
    await main.fork(2, name="draft")
    draft = journal.session(SID, branch="draft")
    assert draft.branch == "draft"
    assert draft.stream == branch_stream(SID, "draft")
    await _agrees(journal.store, draft, history[:2])
    await draft.add_items([_user("b1"), _assistant("b2")])
    await _agrees(journal.store, draft, [*history[:2], _user("b1"), _assistant("b2")])
    # The branch's own items continue from the fork's index: unique and gapless per line.
    own = await journal.store.read(draft.stream)
    assert [e.metadata.get(ev.INDEX_KEY) for e in own] == [None, "2", "3"]
    # Main is untouched, and writes on independently.
    await main.add_items([_user("u3")])
    await _agrees(journal.store, main, [*history, _user("u3")])
    await _agrees(journal.store, draft, [*history[:2], _user("b1"), _assistant("b2")])


async def test_pops_on_a_branch_hide_its_prefix_on_the_branch_only(journal: Journal) -> None:
    main = journal.session(SID)
    history = [_user("u1"), _assistant("a1"), _user("u2")]
    await main.add_items(history)
    await main.fork(name="draft")
    draft = journal.session(SID, branch="draft")
    assert await draft.pop_item() == _user("u2")  # a prefix item: popped on the branch
    (popped,) = [e for e in await journal.store.read(draft.stream) if e.type == ev.ITEM_POPPED]
    assert ev.ItemPopped.decode(popped.data).stream == MAIN  # the parent's key
    await _agrees(journal.store, draft, history[:2])
    await _agrees(journal.store, main, history)
    await draft.add_items([_user("b1")])
    await draft.pop_item()
    await draft.pop_item()
    await _agrees(journal.store, draft, history[:1])
    await _agrees(journal.store, main, history)


async def test_a_clear_from_a_branch_clears_every_line_and_moves_to_main(
    journal: Journal,
) -> None:
    """``clear_session`` is the SDK's: every line, the object moves to main."""
    main = journal.session(SID)
    history = [_user("u1"), _assistant("a1"), _user("u2")]
    await main.add_items(history)
    await main.fork(name="draft")
    draft = journal.session(SID, branch="draft")
    await draft.add_items([_user("b1")])
    await draft.clear_session()
    assert draft.branch == "main"
    await _agrees(journal.store, main, [])
    assert await main.get_items(branch_id="draft") == []
    await draft.add_items([_user("b2")])  # on main now
    await _agrees(journal.store, main, [_user("b2")])


async def test_a_prefix_with_pops_and_clears_is_as_of_the_fork(journal: Journal) -> None:
    main = journal.session(SID)
    await main.add_items([_user("old")])
    await main.clear_session()
    await main.add_items([_user("u1"), _user("u2"), _user("u3")])
    await main.pop_item()
    await main.fork(name="after-pop")  # sees u1, u2
    await main.pop_item()  # after the fork: not the branch's
    draft = journal.session(SID, branch="after-pop")
    await _agrees(journal.store, draft, [_user("u1"), _user("u2")])
    await _agrees(journal.store, main, [_user("u1")])


async def test_an_unknown_branch_is_refused_before_anything_is_written(journal: Journal) -> None:
    main = journal.session(SID)
    await main.add_items([_user("u1")])
    ghost = journal.session(SID, branch="ghost")
    with pytest.raises(InvalidInput, match="has no branch 'ghost'"):
        await ghost.add_items([_user("x")])
    with pytest.raises(InvalidInput, match="has no branch 'ghost'"):
        await ghost.get_items()
    assert await journal.store.head(branch_stream(SID, "ghost")) is None
    assert journal.session(SID, branch="main").stream == MAIN


@pytest.mark.slow
async def test_a_windowed_read_stops_near_the_fork(journal: Journal) -> None:
    """O(limit): a branch of a long session reads a few events of its parent, not all."""
    main = journal.session(SID)
    for n in range(300):
        await main.add_items([_user(f"u{n}")])
    await main.fork(name="late")
    reads: list[tuple[str, Any, int]] = []

    class Counting:
        def __init__(self, store: EventStore) -> None:
            self._store = store

        def __getattr__(self, name: str) -> Any:
            return getattr(self._store, name)

        async def read(self, stream: str, **kw: Any) -> list[RecordedEvent]:
            found: list[RecordedEvent] = await self._store.read(stream, **kw)
            reads.append((stream, kw.get("limit"), len(found)))
            return found

    cold = JournalSession(Counting(journal.store), SID, branch="late")
    assert await cold.get_items(3) == [_user("u297"), _user("u298"), _user("u299")]
    assert sum(count for _, _, count in reads) < 40


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_a_run_on_a_branch_hands_off_into_a_stream_of_its_own(
    journal: Journal, method: Method
) -> None:
    main = journal.session(SID)
    await drive(single(), "Why was I charged twice?", method=method, session=main, hooks=main)
    await main.fork(name="retry")
    await main.fork(name="twin")
    expected = await sdk_reference(
        method, [(single, "Why was I charged twice?"), (single, "And again?")]
    )
    # The scripted model reuses the handoff's call id, and both branches write the handoff
    # at the same index: each opens a stream of its own line.
    for name in ("twin", "retry"):
        line = journal.session(SID, branch=name)
        await drive(single(), "And again?", method=method, session=line, hooks=line)
        assert _texts(await line.get_items()) == _texts(expected)
    draft = journal.session(SID, branch="retry")
    assert _texts(await JournalSession(journal.store, SID, branch="retry").get_items(5)) == (
        _texts(expected[-5:])
    )
    starts = [e for e in await journal.store.read(draft.stream) if e.type == ev.SUBAGENT_STARTED]
    (start,) = starts
    opened = ev.decode_subagent_started(start.data)[0]
    main_starts = [e for e in await journal.store.read(MAIN) if e.type == ev.SUBAGENT_STARTED]
    assert opened.stream != ev.decode_subagent_started(main_starts[0].data)[0].stream
    assert opened.parent_stream == draft.stream
    assert re.fullmatch(r"sub-billing-[0-9a-f]{24}", opened.agent_id)
    first = await journal.store.read(opened.stream, limit=1)
    assert first[0].type == ev.SUBAGENT_STARTED  # its twin opens it
    assert _texts(await main.get_items()) == _texts(
        await sdk_reference(method, [(single, "Why was I charged twice?")])
    )


# -- the oracle -----------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 3), st.integers(1, 3)),
        st.tuples(st.just("pop"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("clear"), st.integers(0, 3), st.just(0)),
        st.tuples(st.just("fork"), st.integers(-1, 30), st.integers(0, 5)),
        st.tuples(st.just("fork"), st.integers(-1, 30), st.integers(0, 5)),
    ),
    min_size=1,
    max_size=14,
)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_every_line_reads_as_an_oracle_that_copies_lists(ops: list[tuple[str, int, int]]) -> None:
    asyncio.run(_oracle(ops))


async def _oracle(ops: list[tuple[str, int, int]]) -> None:
    async with Journal.open("sqlite://:memory:") as journal:
        lines: dict[str, list[Any]] = {"main": []}
        # Each line's visible items just before its item #n was written, and its next index.
        before: dict[str, dict[int, list[Any]]] = {"main": {}}
        next_index = {"main": 0}
        forked_at: dict[str, int] = {}
        sessions = {"main": journal.session(SID)}
        ended: set[str] = set()
        made = 0
        for step, (op, which, count) in enumerate(ops):
            names = sorted(lines)
            name = names[which % len(names)]
            session = sessions[name]
            if op == "add":
                batch = [
                    (_user if k % 2 == 0 else _assistant)(f"{name}.{step}.{k}")
                    for k in range(count)
                ]
                for k in range(len(batch)):  # a cut before #n keeps its write's items before it
                    before[name][next_index[name]] = lines[name] + batch[:k]
                    next_index[name] += 1
                lines[name].extend(batch)
                await session.add_items(batch)
            elif op == "pop":
                popped = await session.pop_item()
                assert popped == (lines[name].pop() if lines[name] else None)
            elif op == "clear":
                if not before["main"]:
                    continue  # no session yet: nothing is written
                # The SDK's clear: every line; the branches end, their objects
                # move to main, their names stay used.
                await session.clear_session()
                ended.update(n for n in lines if n != "main")
                lines = {"main": []}
                sessions = {"main": sessions["main"]}
            elif op == "fork":
                source = names[count % len(names)]
                if source == "main" and not before["main"]:
                    continue  # no session yet: nothing to fork
                made += 1
                branch = f"b{made}"
                indexes = sorted(before[source])  # every item of the line, its prefix's too
                if which >= 0 and indexes:
                    at = indexes[which % len(indexes)]
                    await sessions[source].fork(at, name=branch)
                    lines[branch] = list(before[source][at])
                    before[branch] = {i: v for i, v in before[source].items() if i < at}
                    next_index[branch] = at
                else:
                    await sessions[source].fork(name=branch)
                    lines[branch] = list(lines[source])
                    before[branch] = dict(before[source])
                    next_index[branch] = next_index[source]
                sessions[branch] = journal.session(SID, branch=branch)
                forked_at[branch] = next_index[branch]
        for name, expected in lines.items():
            await _agrees(journal.store, sessions[name], expected)
        for name in ended:
            assert await sessions["main"].get_items(branch_id=name) == []
        for made_branch in await sessions["main"].branches():
            assert made_branch.next_index == forked_at[made_branch.name]
            assert (made_branch.deleted == "cleared") == (made_branch.name in ended)


async def test_forks_of_forks_read_every_segment(journal: Journal) -> None:
    main = journal.session(SID)
    await main.add_items([_user("m0"), _user("m1")])
    await main.fork(name="one")
    await main.add_items([_user("m2")])  # after the fork: not the branches'
    one = journal.session(SID, branch="one")
    await one.add_items([_user("o2"), _user("o3")])
    two = await one.fork(3, name="two")  # in one's own part: base on one's stream
    assert two.parent == "one"
    assert (two.next_index, two.prefix_items) == (3, 3)
    low = await one.fork(1, name="low")  # in one's prefix: base on main's stream
    first = (await journal.store.read(branch_stream(SID, "low"), limit=1))[0]
    assert ev.BranchStarted.decode(first.data).base[0].stream == MAIN
    assert (low.parent, low.next_index, low.prefix_items) == ("one", 1, 1)
    deep = journal.session(SID, branch="two")
    await deep.add_items([_user("t3")])
    three = await deep.fork(name="three")
    assert (three.next_index, three.prefix_items) == (4, 4)
    await _agrees(
        journal.store,
        journal.session(SID, branch="three"),
        [_user("m0"), _user("m1"), _user("o2"), _user("t3")],
    )
    await _agrees(journal.store, journal.session(SID, branch="low"), [_user("m0")])
    await _agrees(journal.store, deep, [_user("m0"), _user("m1"), _user("o2"), _user("t3")])
    assert [b.name for b in await main.branches()] == ["one", "two", "low", "three"]


async def test_writes_on_a_branch_leave_the_session_verifiable(journal: Journal) -> None:
    key = SigningKey.generate()
    main = JournalSession(journal.store, SID, signing_key=key)
    await main.add_items([_user("u1")])
    await main.fork(name="b")
    line = JournalSession(journal.store, SID, signing_key=key, branch="b")
    await line.add_items([_user("b1")])
    signed = await line.checkpoint()  # a branch signs its own streams
    assert signed is not None
    assert set(signed.heads) == {branch_stream(SID, "b"), f"AgentBranches-{SID}"}
    assert await main.checkpoint() is not None
    report = verify_records(await read_tree(journal.store, SID), {key.key_id: key.public_key})
    assert report.problems == []


async def test_a_fork_binds_the_authority_log_in_force_at_its_cut(journal: Journal) -> None:
    policy = Policy(agents={"a": Authority(scopes=frozenset({"x"}))})
    main = journal.session(SID, policy=policy)
    await main.add_items([_user("u0")])
    await main.reset_authority("a", reason="before the cut")  # PolicyRecorded, AuthorityReset
    await main.add_items([_user("u1")])
    log = await journal.store.read(authority_stream(SID))
    assert len(log) == 2
    before_log = await main.fork(0, name="early")
    after_log = await main.fork(1, name="late")
    await main.reset_authority("a", reason="after the forks")
    late = journal.session(SID, branch="late")
    await late.add_items([_user("l2")])
    await late.fork(name="own")  # in late's own part: what late inherited
    await late.fork(0, name="prefix")  # in late's prefix: main's log then

    async def authority(name: str) -> ev.StreamPlace | None:
        first = (await journal.store.read(branch_stream(SID, name), limit=1))[0]
        return ev.BranchStarted.decode(first.data).authority

    assert before_log.cut.value == 0
    assert await authority("early") is None
    bound = ev.StreamPlace(authority_stream(SID), 1, log[1].metadata[HASH_KEY])
    assert after_log.cut.value == 1
    assert await authority("late") == bound
    assert await authority("own") == bound
    assert await authority("prefix") is None
