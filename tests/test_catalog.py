"""The catalog's fold, event by event (pure: no store).

The end-to-end behaviour (real runs, both stores, saving, fencing) is in
``test_read_commands.py``; here the rules of each column are pinned on hand-made events,
chained as the writer chains them.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from agentjournal import events
from agentjournal.ledger.chain import GENESIS, seal
from agentjournal.read.catalog import Catalog, SessionRow
from agentjournal.store.contract import RecordedEvent
from agentjournal.tokens import ModelResponse, Usage

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


class Writer:
    """Chains hand-made events per stream and numbers them in one global order."""

    def __init__(self) -> None:
        self.heads: dict[str, tuple[int, str]] = {}
        self.position = 0
        self.written: list[RecordedEvent] = []

    def add(self, stream: str, type_: str, body: Any, **metadata: str) -> RecordedEvent:
        revision, prev = self.heads.get(stream, (-1, GENESIS))
        data = json.dumps(body).encode()
        meta = {events.SCHEMA_VERSION_KEY: "2", **metadata}
        event_id = uuid.uuid4()
        digest = seal(stream, revision + 1, str(event_id), type_, data, meta, prev)
        self.heads[stream] = (revision + 1, digest)
        self.position += 10
        event = RecordedEvent(
            id=event_id,
            type=type_,
            data=data,
            metadata=meta,
            stream=stream,
            revision=revision + 1,
            position=self.position,
            recorded_at=T0 + timedelta(seconds=self.position),
        )
        self.written.append(event)
        return event


def fold(writer: Writer) -> list[SessionRow]:
    catalog = Catalog()
    for event in writer.written:
        catalog.fold(event)
    return catalog.rows({})


def item(
    writer: Writer, stream: str, index: int, type_: str = "UserMessageReceived", **meta: str
) -> None:
    writer.add(
        stream, type_, {"content": f"item {index}"}, **{events.INDEX_KEY: str(index), **meta}
    )


def started(writer: Writer, parent: str, child: str, index: int) -> None:
    body = {
        "agent_id": child.rsplit("-", 1)[-1],
        "agent_type": "billing",
        "subsession_stream": child,
        "extensions": {
            "openai": {
                "source_agent": "triage",
                "call_id": "h1",
                "parent_stream": parent,
                "item_json": "{}",
            }
        },
    }
    writer.add(parent, events.SUBAGENT_STARTED, body, **{events.INDEX_KEY: str(index)})
    writer.add(child, events.SUBAGENT_STARTED, body)


def completed(writer: Writer, parent: str, child: str, outcome: str) -> None:
    body = {
        "agent_id": "x",
        "outcome": outcome,
        "extensions": {"openai": {"subsession_stream": child, "parent_stream": parent}},
    }
    writer.add(child, events.SUBAGENT_COMPLETED, body)
    writer.add(parent, events.SUBAGENT_COMPLETED, body, **{events.CLOSES_KEY: child})


def test_items_follow_pops_and_clears() -> None:
    w = Writer()
    s = "AgentSession-a"
    w.add(s, events.SESSION_STARTED, {"app_name": "shop", "user_id": "u", "agent_name": ""})
    for index, kind in enumerate(
        ("UserMessageReceived", "AssistantThinkingGenerated", "AssistantTextGenerated")
    ):
        item(w, s, index, kind)  # reasoning is an item like any other
    w.add(s, events.ITEM_POPPED, {"stream": s, "revision": 3, "part": 0, "message_index": 2})
    assert fold(w)[0].items == 2
    w.add(s, events.SESSION_CLEARED, {"through_index": 1})
    assert fold(w)[0].items == 0
    item(w, s, 1)  # another writer's item the clear already hid
    item(w, s, 3)
    assert fold(w)[0].items == 1


def test_subsessions_at_any_depth_belong_to_their_session() -> None:
    w = Writer()
    s, b, r = "AgentSession-a", "AgentSubsession-a-sub-b", "AgentSubsession-a-sub-r"
    item(w, s, 0)
    started(w, s, b, 1)
    item(w, b, 2)
    started(w, b, r, 3)
    item(w, r, 4)
    completed(w, b, r, "error")
    item(w, "AgentSubsession-a-sub-unknown", 9)  # opened by nothing: not this session's
    (row,) = fold(w)
    assert row.items == 5
    assert (row.subagents_open, row.subagents_closed, row.subagents_failed) == (1, 0, 1)
    assert row.agent == "triage"  # no SessionStarted: the first agent that handed off
    assert row.integrity.state == "unsigned"


def test_tokens_count_model_responses_once_else_legacy_usage_once_per_response() -> None:
    w = Writer()
    s = "AgentSession-a"
    usage = json.dumps({"total_tokens": "150"})
    for index in range(2):  # one response, two tool calls: its usage rides on both
        item(w, s, index, "AssistantToolCallsGenerated", **{"$usage": usage, "aj.response_id": "r"})
    item(w, s, 2, "ToolResultReceived")
    item(w, s, 3, "AssistantTextGenerated", **{"$usage": usage, "aj.response_id": "r"})
    assert fold(w)[0].tokens == 300  # two responses (a model double reuses one id)
    response = ModelResponse("a", "triage", "m", None, "r", Usage(1, 100, 0, 20, 0, 120), None, "t")
    w.add(s, events.MODEL_RESPONDED, json.loads(response.encode()))
    # After the upgrade ModelResponded counts; the legacy responses before it still do
    # (no ModelResponded recorded them), and $usage after it on its stream no longer.
    assert fold(w)[0].tokens == 420
    item(w, s, 4, "AssistantTextGenerated", **{"$usage": usage, "aj.response_id": "r2"})
    assert fold(w)[0].tokens == 420


def test_sessions_and_usage_count_legacy_usage_by_one_rule() -> None:
    from agentjournal.read.usage import UsageFold

    w = Writer()
    s = "AgentSession-a"
    w.add(s, events.SESSION_STARTED, {"app_name": "x", "user_id": "u", "agent_name": "a"})
    usage = json.dumps({"total_tokens": 10, "input_tokens": 8, "output_tokens": 2})
    other = json.dumps({"total_tokens": 1000, "input_tokens": 800, "output_tokens": 200})
    steps = [
        ("AssistantToolCallsGenerated", usage, "r"),  # one response, two calls
        ("AssistantToolCallsGenerated", usage, "r"),
        ("ToolResultReceived", None, None),
        ("AssistantTextGenerated", usage, "r"),  # a model double reuses its id
        ("AssistantTextGenerated", other, None),  # no id: counts alone
        ("AssistantTextGenerated", other, None),
    ]
    for index, (kind, tokens, response) in enumerate(steps):
        metadata = {"$usage": tokens} if tokens else {}
        if response:
            metadata["aj.response_id"] = response
        item(w, s, index, kind, **metadata)
    folded = UsageFold()
    folded.add_all(w.written)
    total = folded.report(by="session").total.usage.total_tokens
    assert total == 2020
    assert fold(w)[0].tokens == total


def test_a_broken_link_is_reported_where_it_is() -> None:
    w = Writer()
    s = "AgentSession-a"
    item(w, s, 0)
    item(w, s, 1)
    w.written[1] = RecordedEvent(
        id=w.written[1].id,
        type=w.written[1].type,
        data=b'{"content": "edited"}',
        metadata=w.written[1].metadata,
        stream=s,
        revision=1,
        position=w.written[1].position,
        recorded_at=w.written[1].recorded_at,
    )
    (row,) = fold(w)
    assert row.integrity.state == "failed"
    assert row.integrity.problem == (
        f"{s}@1: the event's hash does not match its content (broken chain)"
    )


def test_state_round_trips_and_another_version_is_refolded() -> None:
    w = Writer()
    item(w, "AgentSession-a", 0)
    catalog = Catalog()
    for event in w.written:
        catalog.fold(event)
    again = Catalog.load(catalog.dump())
    assert again is not None
    assert again.rows({}) == catalog.rows({})
    assert Catalog.load(json.dumps({"v": 0}).encode()) is None
    assert Catalog.load(b"not json") is None


def test_foreign_items_count_as_get_items_returns_them(tmp_path: Any) -> None:
    """Items without ``aj.index`` (another writer's): the catalog uses the engine's index
    rule (the body's ``message_index``, else none) and get_items' clear rule."""
    import asyncio

    from agentjournal import Journal
    from agentjournal.read import catalog
    from agentjournal.store.contract import NewEvent

    def user(text: str, **body: Any) -> NewEvent:
        data = json.dumps({"content": text, "timestamp": "2026-12-01T08:40:00Z", **body})
        return NewEvent("UserMessageReceived", data.encode(), {"$schema_version": "2"})

    cases = {
        "none": [],
        "old": [user("cleared already", message_index=1)],  # at most the clear's floor
        "indexless": [user("no index")],
        "new": [user("after", message_index=30)],
        "mixed": [user("a", message_index=30), user("b"), user("c", message_index="31")],
    }

    async def check(clear: bool) -> None:
        uri = f"sqlite:///{tmp_path / f'foreign-{clear}.db'}"
        async with Journal.open(uri) as journal:
            for name, foreign in cases.items():
                session = journal.session(name)
                await session.add_items([{"role": "user", "content": f"{n}"} for n in range(3)])
                if clear:
                    await session.clear_session()
                    await session.add_items([{"role": "user", "content": "later"}])
                if foreign:
                    stream = f"AgentSession-{name}"
                    head = await journal.store.head(stream)
                    assert head is not None
                    await journal.store.append(stream, foreign, expected=head)
            listing = await catalog.refresh(journal.store, keys={})
            counted = {row.session_id: row.items for row in listing.rows}
            for name in cases:
                got = await Journal(journal.store, uri).session(name).get_items()
                assert counted[name] == len(got), (name, clear, counted[name], got)

    asyncio.run(check(clear=False))
    asyncio.run(check(clear=True))


def test_one_helper_reads_a_session_out_of_a_stream_name() -> None:
    from agentjournal.read.traces import session_of_stream
    from agentjournal.streams import session_of

    assert session_of("AgentSession-s1") == "s1"
    assert session_of("AgentLedger-s1") is None
    assert session_of("AgentLedger-s1", logs=True) == "s1"
    assert session_of("AgentAuthority-s1", logs=True) == "s1"
    assert session_of("AgentBranches-s1", logs=True) == "s1"  # the branch registry
    assert session_of("AgentAuthority-s1@retry", logs=True) == "s1"  # a branch's own log
    assert session_of("AgentBranch-s1@retry", logs=True) is None  # learnt from its fork
    for name in ("AgentSession-", "AgentSession-bad id", "AgentSubsession-s1-sub-x", "Other"):
        assert session_of(name, logs=True) is None
    assert session_of_stream("AgentSession-bad id") is None
