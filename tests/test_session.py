"""JournalSession on every backend: exact replay, canonical events, pop/clear, races, cost."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from kurrent_agent_schema import EVENT_TYPE_BY_NAME, UserMessageReceived, from_json, to_json

from agentjournal import CodecError, Journal, JournalSession
from agentjournal.events import MODEL_RESPONDED
from agentjournal.store import EventStore, NewEvent, RecordedEvent, StreamState
from drive import METHODS, Method, sdk_reference
from scenarios import TURNS, first_turns, run_turn

HERE = Path(__file__).resolve().parent


def dumps(items: Sequence[Any]) -> list[str]:
    """Items as the SDK fingerprints them: exact JSON, key order included."""
    return [json.dumps(item) for item in items]


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def contents(items: Sequence[Any]) -> list[Any]:
    return [item["content"] for item in items]


# -- runner level ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_runner_history_is_exactly_the_sdks(journal: Journal, method: Method) -> None:
    session = journal.session("conv-1", app_name="tests", user_id="u-7")
    for turn in range(len(TURNS)):
        await run_turn(method, turn, session)
    expected = await sdk_reference(method, first_turns(len(TURNS)))
    assert dumps(await session.get_items()) == dumps(expected)
    fresh = journal.session("conv-1")  # a cold cache reads the same from the store
    assert dumps(await fresh.get_items()) == dumps(expected)
    assert dumps(await fresh.get_items(limit=3)) == dumps(expected[-3:])


@pytest.mark.parametrize("method", METHODS)
async def test_events_are_canonical(journal: Journal, method: Method) -> None:
    session = journal.session("conv-2", app_name="tests", user_id="u-7", agent_name="triage")
    for turn in range(2):
        await run_turn(method, turn, session)
    recorded = await journal.store.read(session.stream)
    assert recorded[0].type == "SessionStarted"
    started = from_json(EVENT_TYPE_BY_NAME["SessionStarted"], recorded[0].data.decode())
    assert (started.app_name, started.user_id, started.agent_name) == ("tests", "u-7", "triage")
    items = [e for e in recorded if e.type not in ("SessionStarted", MODEL_RESPONDED)]
    assert all(e.metadata["$schema_version"] == "2" for e in recorded)
    assert [int(e.metadata["aj.index"]) for e in items] == list(range(len(items)))
    for event in items:
        if event.type in EVENT_TYPE_BY_NAME:
            message = from_json(EVENT_TYPE_BY_NAME[event.type], event.data.decode())
            assert json.loads(to_json(message)) == json.loads(event.data)  # schema round trip
    assistant = [e for e in items if e.type.startswith("Assistant")]
    assert assistant
    for event in assistant:
        usage = json.loads(event.metadata["$usage"])
        assert int(usage["input_tokens"]) >= 100
        assert event.metadata["aj.response_id"] == "resp-789"
        body = json.loads(event.data)
        assert body.get("author_name") == "triage"
    assert not any("$usage" in e.metadata for e in items if not e.type.startswith("Assistant"))
    types = [e.type for e in items]
    assert types[:5] == [
        "UserMessageReceived",
        "AssistantThinkingGenerated",
        "AssistantToolCallsGenerated",
        "ToolResultReceived",
        "AssistantTextGenerated",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_a_second_process_resumes_the_session(tmp_path: Path, method: Method) -> None:
    uri = f"sqlite:///{tmp_path / 'resume.db'}"
    for turn in range(2):
        process = await asyncio.create_subprocess_exec(
            sys.executable, str(HERE / "scenarios.py"), uri, "conv-3", str(turn), method
        )
        assert await asyncio.wait_for(process.wait(), 120) == 0
    async with Journal.open(uri) as journal:
        session = journal.session("conv-3")
        await run_turn(method, 2, session)
        expected = await sdk_reference(method, first_turns(3))
        assert dumps(await session.get_items()) == dumps(expected)
        recorded = await journal.store.read(session.stream)
        assert [e.type for e in recorded].count("SessionStarted") == 1


async def test_hooks_not_wired_still_store_and_replay(journal: Journal) -> None:
    session = journal.session("conv-4")
    await run_turn("run", 0, session, hooks=False)
    assert dumps(await session.get_items()) == dumps(await sdk_reference("run", first_turns(1)))


# -- Session semantics ----------------------------------------------------------


async def test_limits(journal: Journal) -> None:
    session = journal.session("limits")
    await session.add_items([user(f"m{n}") for n in range(10)])
    assert contents(await session.get_items(limit=3)) == ["m7", "m8", "m9"]
    assert await session.get_items(limit=0) == []
    assert len(await session.get_items(limit=100)) == 10
    limited = journal.session("limits", session_settings={"limit": 2})
    assert contents(await limited.get_items()) == ["m8", "m9"]
    assert len(await limited.get_items(limit=5)) == 5


async def test_returned_items_are_copies(journal: Journal) -> None:
    session = journal.session("copies")
    await session.add_items([user("original")])
    first: list[Any] = await session.get_items()
    first[0]["content"] = "mutated"
    assert contents(await session.get_items()) == ["original"]


async def test_pop_really_pops_and_keeps_history(journal: Journal) -> None:
    session = journal.session("pops")
    await session.add_items([user("a"), user("b"), user("c")])
    assert await session.pop_item() == user("c")
    assert await session.pop_item() == user("b")
    await session.add_items([user("d")])
    assert await session.get_items() == [user("a"), user("d")]
    cold = journal.session("pops")
    assert await cold.get_items() == [user("a"), user("d")]
    assert await cold.get_items(limit=1) == [user("d")]
    assert await cold.pop_item() == user("d")
    assert await session.get_items() == [user("a")]  # notices the other object's pop
    recorded = await journal.store.read(session.stream)
    assert [e.type for e in recorded].count("agentjournal.ItemPopped") == 3
    assert [e.type for e in recorded].count("UserMessageReceived") == 4  # nothing destroyed


async def test_pop_on_empty_session_returns_none(journal: Journal) -> None:
    session = journal.session("empty")
    assert await session.pop_item() is None
    assert await session.get_items() == []
    await session.clear_session()
    assert await journal.store.head(session.stream) is None  # nothing to record


async def test_clear_hides_everything_before_it(journal: Journal) -> None:
    session = journal.session("clears")
    await session.add_items([user("old-1"), user("old-2")])
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items([user("new")])
    assert await session.get_items() == [user("new")]
    cold = journal.session("clears")
    assert await cold.get_items() == [user("new")]
    recorded = await journal.store.read(session.stream)
    cleared = [e for e in recorded if e.type == "agentjournal.SessionCleared"]
    assert json.loads(cleared[0].data) == {"through_index": 1}
    assert int(recorded[-1].metadata["aj.index"]) == 2  # indices never restart


async def test_cold_window_skips_popped_items(journal: Journal) -> None:
    session = journal.session("window")
    await session.add_items([user(f"m{n}") for n in range(50)])
    for _ in range(5):
        await session.pop_item()
    cold = journal.session("window")
    got = await cold.get_items(limit=10)
    assert contents(got) == [f"m{n}" for n in range(35, 45)]
    assert len(await cold.get_items()) == 45


async def test_bad_item_writes_nothing(journal: Journal) -> None:
    session = journal.session("bad")
    await session.add_items([user("fine")])
    head = await journal.store.head(session.stream)
    bad: Any = {"role": "user", "content": {1, 2}}
    with pytest.raises(CodecError):
        await session.add_items([user("also fine"), bad])
    assert await journal.store.head(session.stream) == head
    assert await session.get_items() == [user("fine")]


async def test_invalid_session_id_is_refused(journal: Journal) -> None:
    with pytest.raises(ValueError, match="session id"):
        journal.session("has space")


async def test_malformed_event_is_skipped_with_a_warning(
    journal: Journal, caplog: pytest.LogCaptureFixture
) -> None:
    session = journal.session("malformed")
    await session.add_items([user("before")])
    head = await journal.store.head(session.stream)
    assert head is not None
    await journal.store.append(
        session.stream, [NewEvent(type="UserMessageReceived", data=b"{not json")], expected=head
    )
    await session.add_items([user("after")])
    with caplog.at_level(logging.WARNING, logger="agentjournal.sdk.session"):
        items = await journal.session("malformed").get_items()
    assert items == [user("before"), user("after")]
    assert f"{session.stream}@{head + 1}" in caplog.text


async def test_foreign_events_are_rebuilt(journal: Journal) -> None:
    stream = "AgentSession-foreign"
    message = UserMessageReceived(content="written elsewhere", message_index=0)
    await journal.store.append(
        stream,
        [NewEvent(type="UserMessageReceived", data=to_json(message).encode())],
        expected=StreamState.NO_STREAM,
    )
    session = journal.session("foreign")
    items = await session.get_items()
    assert len(items) == 1
    assert contents(items) == ["written elsewhere"]
    await session.add_items([user("ours")])
    assert len(await session.get_items()) == 2


async def test_session_accepts_the_runners_wrapper(journal: Journal) -> None:
    from agents.memory.session import _session_accepts_wrapper

    assert _session_accepts_wrapper(journal.session("wrapped"))


# -- concurrency ------------------------------------------------------------------


async def test_two_session_objects_racing(journal: Journal) -> None:
    one, two = journal.session("race"), journal.session("race")

    async def write(session: JournalSession, name: str) -> None:
        for n in range(15):
            await session.add_items([user(f"{name}-{n}"), user(f"{name}-{n}-b")])

    await asyncio.gather(write(one, "one"), write(two, "two"))
    items = await journal.session("race").get_items()
    assert len(items) == 60
    assert len({json.dumps(i) for i in items}) == 60
    recorded = [e for e in await journal.store.read(one.stream) if "aj.index" in e.metadata]
    assert sorted(int(e.metadata["aj.index"]) for e in recorded) == list(range(60))
    for name in ("one", "two"):
        mine = [text for text in contents(items) if text.startswith(name)]
        assert mine == [f"{name}-{n}{s}" for n in range(15) for s in ("", "-b")]


@pytest.mark.slow
async def test_processes_racing_on_one_session(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'race.db'}"
    writer = HERE / "session_writer.py"
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, str(writer), uri, "prace", f"p{p}", "20"
        )
        for p in range(3)
    ]
    for process in processes:
        assert await asyncio.wait_for(process.wait(), 120) == 0
    async with Journal.open(uri) as journal:
        items = await journal.session("prace").get_items()
        assert len(items) == 120
        recorded = [
            e for e in await journal.store.read("AgentSession-prace") if "aj.index" in e.metadata
        ]
        assert sorted(int(e.metadata["aj.index"]) for e in recorded) == list(range(120))


# -- cost ---------------------------------------------------------------------------


class CountingStore:
    """A real store that counts the events its reads return."""

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner
        self.events_read = 0

    async def read(self, stream: str, **kwargs: Any) -> list[RecordedEvent]:
        events = await self.inner.read(stream, **kwargs)
        self.events_read += len(events)
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.slow
async def test_get_items_with_limit_reads_o_limit_events(journal: Journal) -> None:
    writer = journal.session("long")
    for chunk in range(10):
        await writer.add_items([user(f"m{chunk}-{n}") for n in range(200)])
    counting = CountingStore(journal.store)
    cold = JournalSession(counting, "long")
    got = await cold.get_items(limit=20)
    assert contents(got)[-1] == "m9-199"
    assert counting.events_read <= 40
    before = counting.events_read
    await cold.get_items(limit=20)  # warm: no events read at all
    assert counting.events_read == before
    await writer.add_items([user("new")])
    assert (await cold.get_items(limit=1))[0] == user("new")  # notices the other writer
    assert counting.events_read == before + 1


async def test_indices_continue_after_a_foreign_event_at_the_head(journal: Journal) -> None:
    session = journal.session("foreign-head")
    await session.add_items([user("ours-0"), user("ours-1")])
    head = await journal.store.head(session.stream)
    assert head is not None
    message = UserMessageReceived(content="written elsewhere")
    await journal.store.append(
        session.stream,
        [NewEvent(type="UserMessageReceived", data=to_json(message).encode())],
        expected=head,
    )
    cold = JournalSession(journal.store, "foreign-head")
    await cold.add_items([user("ours-2")])
    recorded = [e for e in await journal.store.read(session.stream) if "aj.index" in e.metadata]
    assert [int(e.metadata["aj.index"]) for e in recorded] == [0, 1, 2]
    assert contents(await cold.get_items()) == ["ours-0", "ours-1", "written elsewhere", "ours-2"]


async def test_a_malformed_index_does_not_crash_a_read(journal: Journal) -> None:
    session = journal.session("odd-index")
    await session.add_items([user("hi")])
    head = await journal.store.head(session.stream)
    assert head is not None
    data = to_json(UserMessageReceived(content="odd")).encode()
    await journal.store.append(
        session.stream,
        [NewEvent(type="UserMessageReceived", data=data, metadata={"aj.index": "²"})],
        expected=head,
    )
    assert contents(await JournalSession(journal.store, "odd-index").get_items()) == ["hi", "odd"]
