"""The session page's console data: the conversation, the waterfall, two lines compared.

Over real runs (``ui_support.write_store``: the demo with a policy; a run paused inside a
subagent and forked there): every event of a line appears exactly once in the
conversation, each decision beside the call it judged, each handoff a block inside its
parent's; the waterfall's bars are the recorded times; the compare view counts what each
line did after the items they share.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentjournal.cli._common import trusted_keys
from agentjournal.records import Record
from agentjournal.store import open_store
from agentjournal.ui.console import conversation, said, waterfall
from agentjournal.ui.page import session_page
from ui_support import Stored, serving, write_forked_in_handoff, write_store

pytestmark = pytest.mark.slow  # the demo as a real process, and a fork of a paused run


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    stored = write_store(tmp_path_factory.mktemp("console"))
    asyncio.run(write_forked_in_handoff(stored.uri, str(stored.pubkey.with_suffix(""))))
    return stored


def _page(stored: Stored, session_id: str, branch: str | None = None) -> dict[str, Any]:
    async def read() -> dict[str, Any]:
        store = await open_store(stored.uri, create=False)
        try:
            keys = trusted_keys([str(stored.pubkey)])
            return await session_page(store, session_id, keys, branch=branch)
        finally:
            await store.close()

    return asyncio.run(read())


def _walk(nodes: list[dict[str, Any]], depth: int = 0) -> Iterator[tuple[str, int, Any]]:
    """(role, depth, value) of every place the conversation names an event."""
    for node in nodes:
        if "block" in node:
            block = node["block"]
            yield "open", depth, block
            for check in block["checks"]:
                yield "check", depth, check
            yield from _walk(block["nodes"], depth + 1)
            if block["close"] is not None:
                yield "close", depth, block["close"]
        else:
            yield "event", depth, node["event"]
            for check in node["checks"]:
                yield "check", depth, check


def _named(nodes: list[dict[str, Any]]) -> list[int]:
    found: list[int] = []
    for role, _, value in _walk(nodes):
        found.append(value["open"] if role == "open" else value)
    return found


def test_every_event_of_the_line_is_in_the_conversation_once_but_the_twins(
    stored: Stored,
) -> None:
    data = _page(stored, "demo-1")
    named = _named(data["conversation"])
    assert len(named) == len(set(named))
    # Everything but a subsession's own copies of its opening and closing is shown.
    for i in set(range(len(data["events"]))) - set(named):
        event = data["events"][i]
        assert event["kind"] in ("SubagentStarted", "SubagentCompleted")
        body = event["record"]["data"]
        own = body.get("subsession_stream") or body["extensions"]["openai"]["subsession_stream"]
        assert own == event["stream"]
        assert "aj.closes" not in event["record"]["metadata"]


def test_handoffs_nest_and_each_decision_sits_beside_what_it_judged(stored: Stored) -> None:
    data = _page(stored, "demo-1")
    events = data["events"]
    blocks = [(depth, v) for role, depth, v in _walk(data["conversation"]) if role == "open"]
    assert [(depth, block["agent"], block["outcome"]) for depth, block in blocks] == [
        (0, "billing", "success"),
        (1, "refunds", "success"),
    ]
    # The handoff's own check is on its block.
    for _, block in blocks:
        (check,) = block["checks"]
        assert events[check]["text"].startswith("AGENT_HANDOFF " + block["agent"])

    def call_node(tool: str, nodes: list[dict[str, Any]]) -> dict[str, Any]:
        for node in nodes:
            if "block" in node:
                try:
                    return call_node(tool, node["block"]["nodes"])
                except LookupError:
                    continue
            spoken = events[node["event"]]["said"]
            calls = spoken["calls"] if spoken and spoken["role"] == "call" else []
            if calls and calls[0]["name"] == tool and node["checks"]:
                return node
        raise LookupError(tool)

    note = call_node("add_note", data["conversation"])
    assert [events[c]["decision"] for c in note["checks"]] == ["MODIFY"]
    assert any("[REDACTED]" in line for _, line in events[note["checks"][0]]["diff"])
    blocked = call_node("issue_refund", data["conversation"])
    assert [events[c]["decision"] for c in blocked["checks"]] in (["BLOCK"], ["ALLOW"])
    decisions = [
        events[c]["decision"]
        for role, _, c in _walk(data["conversation"])
        if role == "check" and events[c]["kind"] == "GuardrailDecided"
    ]
    assert decisions.count("BLOCK") == 1
    # A check without a call (an agent's input, its answer) stays where it was taken.
    standalone = [
        events[v]["text"]
        for role, _, v in _walk(data["conversation"])
        if role == "event" and events[v]["kind"] == "GuardrailDecided"
    ]
    assert standalone
    assert all(t.startswith(("AGENT_INPUT", "AGENT_RESPONSE")) for t in standalone)


def test_messages_carry_their_whole_text(stored: Stored) -> None:
    data = _page(stored, "demo-1")
    spoken = [e["said"] for e in data["events"] if e["said"] is not None]
    assert spoken[0] == {"role": "user", "text": "Why was I charged twice for order 42?"}
    calls = [s for s in spoken if s["role"] == "call"]
    assert {
        "name": "lookup_order",
        "call_id": "call_lookup",
        "arguments": '{"order_id": "42"}',
    } in [c for s in calls for c in s["calls"]]
    assert any(s["role"] == "result" and "charged twice" in s["text"] for s in spoken)


def test_the_waterfall_draws_each_run_model_call_and_check_from_its_recorded_times(
    stored: Stored,
) -> None:
    data = _page(stored, "demo-1")
    bars = data["waterfall"]["bars"]
    kinds = [b["kind"] for b in bars]
    events = data["events"]
    assert kinds.count("run") == 3  # the first turn, its resume after the approval, thanks
    assert kinds.count("model") == sum(e["kind"] == "ModelResponded" for e in events)
    assert kinds.count("guardrail") == sum(e["kind"] == "GuardrailDecided" for e in events)
    assert all(0 <= b["from"] <= b["to"] for b in bars)
    # Each run comes first, then what it timed, inside it.
    runs = [i for i, b in enumerate(bars) if b["kind"] == "run"]
    assert runs[0] == 0
    for start, end in zip(runs, [*runs[1:], len(bars)], strict=True):
        run = bars[start]
        for bar in bars[start + 1 : end]:
            assert run["from"] <= bar["from"]
            assert bar["to"] <= run["to"] + 0.001
    model = next(b for b in bars if b["kind"] == "model")
    record = events[model["event"]]["record"]["data"]
    assert record["started_at"] < record["ended_at"]


def test_a_subagent_continued_on_a_branch_is_a_block_of_its_own(stored: Stored) -> None:
    data = _page(stored, "paused-1", branch="rejected")
    blocks = [v for role, _, v in _walk(data["conversation"]) if role == "open"]
    assert [(b["agent"], b["continued"], b["outcome"]) for b in blocks] == [
        ("billing", True, "success")
    ]
    inside = [data["events"][n["event"]]["said"] for n in blocks[0]["nodes"] if "event" in n]
    assert {"role": "assistant", "text": "Not refunded."} in inside
    # The saved copy's Compare tab: the line beside its parent, from the fork.
    compare = data["compare"]
    assert (compare["a"]["name"], compare["b"]["name"]) == ("main", "rejected")
    assert compare["a"]["summary"]["answer"] == "Refunded."
    assert compare["b"]["summary"]["answer"] == "Not refunded."
    assert compare["shared"] >= 1
    # One model request each after the fork: main's own, not the branch's (a session's tree
    # holds every line's streams).
    assert compare["a"]["summary"]["requests"] == compare["b"]["summary"]["requests"] == 1


def test_compare_over_http_answers_two_lines_and_refuses_bad_ones(stored: Stored) -> None:
    with serving(stored.uri, pubkey=stored.pubkey) as base:
        answer = httpx.get(f"{base}/api/sessions/paused-1/compare?a=main&b=rejected")
        assert answer.status_code == 200
        body = answer.json()
        assert body["a"]["items"] != body["b"]["items"]
        assert body["b"]["summary"]["tool_calls"] == []  # rejected: the refund never ran
        for query, status, message in [
            ("b=nope", 404, "has no branch 'nope'"),
            ("a=main&b=main", 400, "give two different lines"),
            ("a=main", 400, "give two different lines"),
        ]:
            bad = httpx.get(f"{base}/api/sessions/paused-1/compare?{query}")
            assert bad.status_code == status
            assert message in bad.json()["error"]
        missing = httpx.get(f"{base}/api/sessions/nope-1/compare?b=x")
        assert missing.status_code == 404


def test_said_and_the_waterfall_skip_what_they_cannot_read() -> None:
    def record(kind: str, data: str, **metadata: str) -> Record:
        return Record("AgentSession-s", 0, "0" * 8, kind, data, "", metadata)

    assert said(record("UserMessageReceived", "[1, 2]")) is None
    assert said(record("UserMessageReceived", '{"content": null}')) == {"role": "user", "text": ""}
    odd = [
        record("agentjournal.ModelResponded", '{"started_at": "yesterday", "ended_at": 5}'),
        record("agentjournal.GuardrailDecided", '{"latency_ms": true}'),
        record(
            "ToolResultReceived",
            "{}",
            **{"aj.started_at": "2026-01-01T00:00:01Z", "aj.ended_at": "2026-01-01T00:00:00Z"},
        ),
    ]
    assert waterfall(odd, {}) == {"start": None, "end": None, "bars": []}
    assert conversation(odd, {}, "AgentSession-s") == [
        {"event": 0, "checks": []},
        {"event": 1, "checks": []},
        {"event": 2, "checks": []},
    ]


def test_a_tool_call_s_recorded_times_make_its_bar(tmp_path: Path) -> None:
    def record(kind: str, data: str, revision: int, **metadata: str) -> Record:
        return Record("AgentSession-s", revision, "0" * 8, kind, data, "", metadata)

    calls = '{"tool_calls": [{"call_id": "c1", "tool_name": "lookup", "arguments": "{}"}]}'
    timed = [
        record("AssistantToolCallsGenerated", calls, 0, **{"aj.call_id": "c1"}),
        record(
            "ToolResultReceived",
            '{"call_id": "c1", "result": "ok"}',
            1,
            **{
                "aj.started_at": "2026-01-01T00:00:00.100Z",
                "aj.ended_at": "2026-01-01T00:00:00.350Z",
            },
        ),
    ]
    (bar,) = waterfall(timed, {"AgentSession-s": "triage"})["bars"]
    assert bar == {
        "kind": "tool",
        "label": "lookup",
        "agent": "triage",
        "event": 1,
        "from": 0.0,
        "to": 250.0,
    }


def _record(stream: str, revision: int, kind: str, body: dict[str, Any], **metadata: str) -> Record:
    import json
    from datetime import UTC, datetime, timedelta

    moment = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=revision)
    return Record(
        stream,
        revision,
        f"id-{revision}",
        kind,
        json.dumps(body),
        "",
        metadata,
        position=revision,
        recorded_at=moment,
    )


def test_a_decision_joins_a_call_of_its_own_run_only() -> None:
    """Run 1's BLOCK of call t1 (its item never written: the run stopped) stays in run 1;
    run 2 reuses the id t1, and only run 2's ALLOW goes on run 2's call."""
    top = "AgentSession-s"
    decided = "agentjournal.GuardrailDecided"
    calls = {"tool_calls": [{"call_id": "t1", "tool_name": "refund", "arguments": "{}"}]}
    records = [
        _record(top, 0, "UserMessageReceived", {"content": "one"}, trace_id="a"),
        _record(top, 1, decided, {"call_id": "t1", "decision": "BLOCK"}, trace_id="a"),
        _record(top, 2, "UserMessageReceived", {"content": "two"}, trace_id="b"),
        _record(top, 3, decided, {"call_id": "t1", "decision": "ALLOW"}, trace_id="b"),
        _record(top, 4, "AssistantToolCallsGenerated", calls, trace_id="b", **{"aj.call_id": "t1"}),
    ]
    assert conversation(records, {}, top) == [
        {"event": 0, "checks": []},
        {"event": 1, "checks": []},
        {"event": 2, "checks": []},
        {"event": 4, "checks": [3]},
    ]


@pytest.mark.parametrize("where", ["extension", "body"])
def test_a_subagent_closed_by_a_writer_without_agentjournal_metadata_closes_its_block(
    where: str,
) -> None:
    top, sub = "AgentSession-s", "AgentSubsession-s-x"
    opened = {"agent_id": "x", "agent_type": "billing", "subsession_stream": sub}
    closed: dict[str, Any] = {"agent_id": "x", "outcome": "success"}
    if where == "body":
        closed["subsession_stream"] = sub
    else:
        closed["extensions"] = {"openai": {"subsession_stream": sub}}
    records = [
        _record(top, 0, "SubagentStarted", opened),
        _record(sub, 1, "SubagentStarted", opened),
        _record(sub, 2, "AssistantTextGenerated", {"content": "done"}),
        _record(sub, 3, "SubagentCompleted", closed),
        _record(top, 4, "SubagentCompleted", closed),
    ]
    (node,) = conversation(records, {sub: "billing"}, top)
    block = node["block"]
    assert (block["agent"], block["close"], block["outcome"]) == ("billing", 4, "success")
    assert block["nodes"] == [{"event": 2, "checks": []}]


def test_each_turn_in_one_sdk_trace_is_a_run_of_its_own() -> None:
    top = "AgentSession-s"
    records = [
        _record(top, 0, "UserMessageReceived", {"content": "first turn"}, trace_id="t"),
        _record(top, 1, "AssistantTextGenerated", {"content": "a"}, trace_id="t"),
        _record(top, 2, "UserMessageReceived", {"content": "second turn"}, trace_id="t"),
        _record(top, 3, "AssistantTextGenerated", {"content": "b"}, trace_id="t"),
    ]
    runs = [b["label"] for b in waterfall(records, {})["bars"] if b["kind"] == "run"]
    assert runs == ["run 1: first turn", "run 2: second turn"]


def test_times_no_call_can_have_are_not_drawn() -> None:
    top = "AgentSession-s"
    far = {"aj.started_at": "0001-01-01T00:00:00Z", "aj.ended_at": "2026-01-01T00:00:00Z"}
    late = {"aj.started_at": "2026-01-01T00:00:00Z", "aj.ended_at": "9999-01-01T00:00:00Z"}
    records = [
        _record(top, 5, "ToolResultReceived", {"call_id": "a", "result": ""}, **far),
        _record(top, 6, "ToolResultReceived", {"call_id": "b", "result": ""}, **late),
    ]
    assert waterfall(records, {})["bars"] == []


def test_the_main_line_s_page_holds_none_of_its_branches_events(stored: Stored) -> None:
    data = _page(stored, "paused-1")
    streams = {e["stream"] for e in data["events"]}
    assert not any(s.startswith(("AgentBranch-", "AgentBranches-")) for s in streams)
    spoken = [e["said"]["text"] for e in data["events"] if e["said"] and "text" in e["said"]]
    assert "Refunded." in spoken
    assert "Not refunded." not in spoken  # the branch's answer is on the branch's page
    blocks = [v for role, _, v in _walk(data["conversation"]) if role == "open"]
    assert [(b["agent"], b["continued"]) for b in blocks] == [("billing", False)]
    bars = data["waterfall"]["bars"]
    assert len([b for b in bars if b["kind"] == "run"]) == 2  # the paused run, its resume


def _answering(text: str) -> Any:
    from agents import Agent
    from agents.testing import ScriptedModel, assistant_message

    return Agent(name="triage", model=ScriptedModel([[assistant_message(text)]]))


async def test_compare_parts_two_lines_where_they_part_at_any_depth(tmp_path: Path) -> None:
    """main: turns one and two. ``early`` leaves main before turn 2 and says three;
    ``late`` leaves ``early`` at its end and says four."""
    from agentjournal import Journal
    from agentjournal.ui.compare import compare_lines
    from drive import drive

    async with Journal.open(f"sqlite:///{tmp_path / 'c.db'}") as journal:
        main = journal.session("c-1")
        for text in ("one", "two"):
            await drive(_answering(f"said {text}"), text, session=main, hooks=main)
        await main.fork(turn=2, name="early")
        early = journal.session("c-1", branch="early")
        await drive(_answering("said three"), "three", session=early, hooks=early)
        await early.fork(name="late")
        late = journal.session("c-1", branch="late")
        await drive(_answering("said four"), "four", session=late, hooks=late)

        def said_of(side: dict[str, Any]) -> tuple[int, int, str | None]:
            summary = side["summary"]
            return len(side["items"]), summary["requests"], summary["answer"]

        found = await compare_lines(journal.store, "c-1", "main", "early")
        assert found["shared"] == 2  # turn one: its message and its answer
        assert said_of(found["a"]) == (2, 1, "said two")
        assert said_of(found["b"]) == (2, 1, "said three")
        found = await compare_lines(journal.store, "c-1", "early", "late")
        assert found["shared"] == 4
        assert said_of(found["a"]) == (0, 0, None)  # early did nothing after late left it
        assert said_of(found["b"]) == (2, 1, "said four")
        found = await compare_lines(journal.store, "c-1", "main", "late")
        assert found["shared"] == 2
        assert said_of(found["a"]) == (2, 1, "said two")
        assert said_of(found["b"]) == (4, 2, "said four")  # early's turn three, then its own
        await main.delete_branch("late")
        found = await compare_lines(journal.store, "c-1", "late", "main")
        assert found["a"]["deleted"] == "deleted"
        assert found["a"]["items"] == []


def test_a_foreign_event_whose_extensions_are_no_object_does_not_break_the_page() -> None:
    from agentjournal.audit.verify import Report
    from agentjournal.records import TreeRecords
    from agentjournal.ui.page import session_data

    top = "AgentSession-s"
    records = [
        _record(top, 0, "SessionStarted", {"app_name": "x"}),
        _record(top, 1, "AssistantTextGenerated", {"content": "hi", "extensions": "n/a"}),
    ]
    data = session_data(TreeRecords("s", {top: records}), Report(), [], None)
    assert [e["said"] for e in data["events"]][1] == {"role": "assistant", "text": "hi"}
    assert data["lanes"] == ["session"]


async def test_a_person_s_approval_sits_on_the_call_it_answers(tmp_path: Path) -> None:
    """A refund waits for a person (asked), who approves it from another journal; the run
    resumes: the question and the answer are both on the call, in the conversation."""
    from agentjournal import Journal
    from drive import drive
    from paused_graph import approval_graph

    uri = f"sqlite:///{tmp_path / 'a.db'}"
    async with Journal.open(uri) as journal:
        session = journal.session("ask-1")
        paused = await drive(approval_graph(), "Refund order 42", session=session, hooks=session)
        await session.hold(paused)
    async with Journal.open(uri) as journal:
        (asked,) = await journal.session("ask-1").pending_approvals()
        await journal.session("ask-1").approve(asked.request_id, by="ann", reason="checked")
    async with Journal.open(uri) as journal:
        await journal.session("ask-1").resume(approval_graph(answer="Refunded."))
        store = journal.store
        data = await session_page(store, "ask-1", {})
    events_ = data["events"]
    (call,) = [
        node
        for role, _, node in _walk_nodes(data["conversation"])
        if (events_[node["event"]]["said"] or {}).get("role") == "call"
        and events_[node["event"]]["said"]["calls"][0]["name"] == "issue_refund"
    ]
    assert [events_[c]["decision"] for c in call["checks"]] == ["ASKED", "APPROVED"]


def _walk_nodes(nodes: list[dict[str, Any]]) -> Iterator[tuple[str, int, dict[str, Any]]]:
    for node in nodes:
        if "block" in node:
            yield from _walk_nodes(node["block"]["nodes"])
        else:
            yield "event", 0, node
