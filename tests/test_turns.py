"""Turns: ``get_conversation_turns``,
``find_turns_by_content``, ``get_conversation_by_turns`` and ``get_tool_usage`` on a journal
session return what the SDK's ``AdvancedSQLiteSession`` returns for the same writes — the
SDK's class runs beside ours on every example."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import Journal, JournalSession
from agentjournal import events as ev
from agentjournal.engine import turns
from agentjournal.engine.sealing import seal_event
from agentjournal.ledger.chain import CHAIN_KEYS, GENESIS
from agentjournal.store.contract import AppendRequest, NewEvent, StreamState
from agentjournal.streams import session_stream

SID = "turns-1"

_TEXT = st.sampled_from(["hello", "Héllo wörld", "a_b%c", "HELLO there", 'quote " and \\', ""])


def _user(text: str, parts: bool) -> Any:
    if parts:
        return {"role": "user", "content": [{"type": "input_text", "text": text}]}
    return {"role": "user", "content": text}


def _assistant(text: str) -> Any:
    return {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


_CALLS = st.sampled_from(
    [
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        {
            "type": "function_call",
            "call_id": "c2",
            "name": "get",
            "namespace": "crm",
            "arguments": "{}",
        },
        {
            "type": "function_call",
            "call_id": "c3",
            "name": "same",
            "namespace": "same",
            "arguments": "{}",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {
            "type": "mcp_call",
            "id": "m1",
            "server_label": "kb",
            "name": "search",
            "arguments": "{}",
        },
        {
            "type": "mcp_approval_request",
            "id": "m2",
            "server_label": "kb",
            "name": "",
            "arguments": "{}",
        },
        {"type": "shell_call", "call_id": "s1", "action": {"commands": ["ls"]}},
        {"type": "tool_search_call", "call_id": "t1", "arguments": {}},
        {"type": "tool_search_output", "call_id": "t1", "tools": []},
        {"type": "computer_call", "call_id": "k1", "id": "k1", "action": {"type": "click"}},
        {"type": "reasoning", "id": "r1", "summary": []},
        {"role": "system", "content": "be brief"},
        {"type": "custom_tool_call", "call_id": "x1", "name": "grep", "input": "a"},
    ]
)

_ITEM = st.one_of(
    st.builds(_user, _TEXT, st.booleans()),
    st.builds(_assistant, _TEXT),
    _CALLS,
)

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(_ITEM, min_size=1, max_size=5)),
        st.tuples(st.just("pop"), st.just([])),
        st.tuples(st.just("clear"), st.just([])),
    ),
    min_size=1,
    max_size=10,
)


def _untimed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "timestamp"} for row in rows]


def _by_turn_then_name(rows: Sequence[tuple[str | None, int, int]]) -> list[Any]:
    # The SDK orders by turn only; within a turn the order is SQLite's grouping's.
    return sorted(rows, key=lambda r: (r[2], r[0] is not None, r[0] or ""))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_turn_reads_match_the_sdk_on_the_same_writes(ops: list[tuple[str, list[Any]]]) -> None:
    asyncio.run(_parity(ops))


async def _parity(ops: list[tuple[str, list[Any]]]) -> None:
    sdk = AdvancedSQLiteSession(session_id=SID, create_tables=True)
    try:
        async with Journal.open("sqlite://:memory:") as journal:
            ours = journal.session(SID)
            for op, items in ops:
                if op == "add":
                    await sdk.add_items([dict(i) for i in items])  # type: ignore[misc]
                    await ours.add_items([dict(i) for i in items])  # type: ignore[misc]
                elif op == "pop":
                    assert await ours.pop_item() == await sdk.pop_item()
                else:
                    await sdk.clear_session()
                    await ours.clear_session()
            assert await ours.get_items() == await sdk.get_items()
            # Every visible user message carries, as its aj.turn, the SDK's number for it.
            recorded = [t.turn for t in await ours._core.turned() if turns.is_user(t.item)]
            assert recorded == [row["turn"] for row in await sdk.get_conversation_turns()]
            assert await ours.get_conversation_by_turns() == await sdk.get_conversation_by_turns()
            assert _by_turn_then_name(await ours.get_tool_usage()) == _by_turn_then_name(
                await sdk.get_tool_usage()
            )
            mine = await ours.get_conversation_turns()
            assert _untimed(mine) == _untimed(await sdk.get_conversation_turns())
            assert all(isinstance(row["timestamp"], str) for row in mine)
            for term in ("hello", "HÉLLO", "é", "a_b", "%", '"', "\\", "zzz"):
                assert _untimed(await ours.find_turns_by_content(term)) == _untimed(
                    await sdk.find_turns_by_content(term)
                ), term
    finally:
        sdk.close()


@given(_ITEM)
def test_classification_and_tool_names_are_the_sdks(item: Any) -> None:
    sdk = AdvancedSQLiteSession(session_id=SID, create_tables=True)
    try:
        assert turns.classify(item) == sdk._classify_message_type(item)
        assert turns.tool_name(item) == sdk._extract_tool_name(item)
    finally:
        sdk.close()


async def test_several_users_in_one_write_pops_and_a_searched_turn() -> None:
    """Turn numbers through a multi-user write, a pop of a user message and a clear; a
    ``tool_search_output`` counts only in a turn without a ``tool_search_call``."""
    search = {"type": "tool_search_call", "call_id": "t1", "arguments": {}}
    found = {"type": "tool_search_output", "call_id": "t1", "tools": []}
    writes: list[list[Any]] = [
        [_user("one", False), search, found, _user("two", True), found],
        [_assistant("x"), _user("three", False)],
    ]
    await _parity([("add", w) for w in writes] + [("pop", [])] + [("add", [_user("4", False)])])
    await _parity([("add", writes[0]), ("clear", []), ("add", [found, _user("a", False)])])
    async with Journal.open("sqlite://:memory:") as journal:
        ours = journal.session(SID)
        await ours.add_items(writes[0])
        assert await ours.get_tool_usage() == [("tool_search", 1, 1), ("tool_search", 1, 2)]


async def _recorded_turns(journal: Journal, stream: str) -> list[int | None]:
    return [
        ev.turn_of(event.metadata)
        for event in await journal.store.read(stream)
        if event.type == "UserMessageReceived"
    ]


async def test_each_writer_numbers_on_from_the_newest_visible_user_message() -> None:
    """Two objects (no shared cache) write in turns; a pop of a user message frees its
    number; a clear starts again at 1; a compaction-like hide of the newest user message
    in the same write counts from the one before."""
    async with Journal.open("sqlite://:memory:") as journal:
        one, two = JournalSession(journal.store, SID), JournalSession(journal.store, SID)
        await one.add_items([_user("a", False), _assistant("x")])
        await two.add_items([_user("b", False), _user("c", True)])
        await one.add_items([_assistant("y"), _user("d", False)])
        assert await two.pop_item() == _user("d", False)
        await two.pop_item()
        await one.add_items([_user("e", False)])
        await two.clear_session()
        await one.add_items([_user("f", False)])
        assert await _recorded_turns(journal, session_stream(SID)) == [1, 2, 3, 4, 4, 1]
        assert [r["turn"] for r in await two.get_conversation_turns()] == [1]


async def test_a_branch_numbers_on_from_its_cut() -> None:
    async with Journal.open("sqlite://:memory:") as journal:
        main = journal.session(SID)
        for k in range(3):
            await main.add_items([_user(f"u{k}", False), _assistant(f"a{k}")])
        await main.fork(turn=2, name="b")
        branch = journal.session(SID, branch="b")
        await branch.add_items([_user("on b", False)])
        rows = await branch.get_conversation_turns()
        assert [(r["turn"], r["full_content"]) for r in rows] == [(1, "u0"), (2, "on b")]
        turned = await branch._core.turned()
        assert [t.turn for t in turned if turns.is_user(t.item)] == [1, 2]


async def _without_turns(source: Journal, target: Journal) -> None:
    """Copy the session's main stream into ``target`` as a writer before ``aj.turn``
    wrote it: the same events, no ``aj.turn``, the chain sealed again."""
    stream = session_stream(SID)
    prev, copied = GENESIS, []
    for event in await source.store.read(stream):
        metadata = {
            key: value
            for key, value in event.metadata.items()
            if key not in CHAIN_KEYS and key not in (ev.TURN_KEY, ev.REDACTED_KEY)
        }
        prev = seal_event(stream, event.revision, event.id, event.type, event.data, metadata, prev)
        copied.append(NewEvent(event.type, event.data, metadata, event.id))
    await target.store.append_many([AppendRequest(stream, copied, StreamState.NO_STREAM)])


async def test_a_session_written_before_aj_turn_is_counted_then_numbered_on() -> None:
    async with (
        Journal.open("sqlite://:memory:") as source,
        Journal.open("sqlite://:memory:") as target,
    ):
        old = source.session(SID)
        await old.add_items([_user("a", False), _assistant("x"), _user("b", False)])
        await old.add_items([_assistant("y"), _user("c", False)])
        await old.pop_item()
        await _without_turns(source, target)
        stream = session_stream(SID)
        assert await _recorded_turns(target, stream) == [None, None, None]
        legacy = target.session(SID)
        rows = await legacy.get_conversation_turns()
        assert [(r["turn"], r["full_content"]) for r in rows] == [(1, "a"), (2, "b")]
        await legacy.add_items([_user("d", False), _assistant("z"), _user("e", False)])
        assert await _recorded_turns(target, stream) == [None, None, None, 3, 4]
        fresh = JournalSession(target.store, SID)
        assert await fresh.get_conversation_by_turns() == await old_by_turns(
            [
                *(_user("a", False), _assistant("x"), _user("b", False), _assistant("y")),
                *(_user("d", False), _assistant("z"), _user("e", False)),
            ]
        )


async def old_by_turns(items: list[Any]) -> dict[int, list[dict[str, str | None]]]:
    """What the SDK's class makes of ``items`` written at once."""
    sdk = AdvancedSQLiteSession(session_id=SID, create_tables=True)
    try:
        await sdk.add_items(items)
        return await sdk.get_conversation_by_turns()
    finally:
        sdk.close()
