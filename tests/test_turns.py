"""Turns, step 4 of issue 19 (DESIGN §17.1, §17.6): ``get_conversation_turns``,
``find_turns_by_content``, ``get_conversation_by_turns`` and ``get_tool_usage`` on a journal
session return what the SDK's ``AdvancedSQLiteSession`` returns for the same writes — the
SDK's class runs beside ours on every example."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import Journal
from agentjournal.engine import turns

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
