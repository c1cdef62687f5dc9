"""The read and verify paths: what their fast paths must not change.

The shared cache is bounded and still answers exactly; a bulk read leaves the
garbage collector as it found it; a view's digest is RFC 8785's whatever path
computes it.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import logging
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from agents import Agent, RunConfig, Runner, SQLiteSession
from agents.testing import ScriptedModel, assistant_message, function_call
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal import Journal, JournalSession
from agentjournal.audit.verify import verify_bundle
from agentjournal.engine.timeline import ENTRY_BYTES
from agentjournal.errors import InvalidInput
from agentjournal.ledger.redaction import view_digest
from agentjournal.store.contract import NewEvent, StreamState
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.walk import walk_tree
from ledger_sessions import TRUSTED, rechain, record

CONFIG = RunConfig(tracing_disabled=True)


def handoff_run(n: int) -> Agent[Any]:
    """Triage hands off to billing, which answers: one subsession per run."""
    billing: Agent[Any] = Agent(
        name="billing", model=ScriptedModel([[assistant_message(f"done {n}", item_id=f"m{n}")]])
    )
    return Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id=f"h{n}")]]),
        handoffs=[billing],
    )


def _pair(n: int) -> list[Any]:
    return [
        {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": f'{{"n":{n}}}'},
        {"type": "function_call_output", "call_id": f"c{n}", "output": f"result {n} " * 5},
    ]


async def test_the_shared_cache_holds_at_most_its_budget_and_still_answers_exactly(
    tmp_path: Path,
) -> None:
    budget = 20 * (ENTRY_BYTES + 120)  # about 20 items of the 200
    sdk = SQLiteSession("bounded", str(tmp_path / "sdk.db"))
    async with Journal.open(f"sqlite:///{tmp_path / 'aj.db'}") as opened:
        journal = Journal(opened.store, opened.uri, cache_bytes=budget)
        session = journal.session("bounded")
        for n in range(100):
            await session.add_items(_pair(n))
            await sdk.add_items(_pair(n))
        tree = journal._trees["bounded"]
        assert 0 < tree.timeline.size <= budget  # writes are bounded too
        assert await journal.session("bounded").get_items() == await sdk.get_items()
        assert tree.timeline.size <= budget  # the full read was answered, then trimmed
        assert len(tree.timeline.entries) < 200
        assert not tree.timeline.complete
        assert await journal.session("bounded").get_items(limit=5) == await sdk.get_items(5)
        # Pops and clears of items the cache dropped are still exact.
        assert await session.pop_item() == await sdk.pop_item()
        assert await journal.session("bounded").get_items() == await sdk.get_items()
        await session.clear_session()
        await sdk.clear_session()
        await session.add_items(_pair(1000))
        await sdk.add_items(_pair(1000))
        assert await journal.session("bounded").get_items() == await sdk.get_items()
        # A budget of nothing keeps nothing and still answers.
        empty = Journal(opened.store, opened.uri, cache_bytes=0)
        assert await empty.session("bounded").get_items() == await sdk.get_items()
        assert empty._trees["bounded"].timeline.entries == []
    sdk.close()


def test_the_cache_budget_is_checked() -> None:
    for bad in (-1, 1.5, "1"):
        with pytest.raises(InvalidInput, match="cache_bytes"):
            Journal(None, "sqlite://:memory:", cache_bytes=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="cache_bytes"):
            Journal.open("sqlite://:memory:", cache_bytes=bad)  # type: ignore[arg-type]


async def test_journal_open_takes_the_cache_budget() -> None:
    async with Journal.open("sqlite://:memory:", cache_bytes=0) as journal:
        session = journal.session("open")
        await session.add_items(_pair(1))
        assert await session.get_items() == _pair(1)
        assert journal._trees["open"].timeline.entries == []


async def test_a_full_read_leaves_the_collector_as_it_found_it(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'aj.db'}") as journal:
        await journal.session("gc").add_items([item for n in range(300) for item in _pair(n)])
        assert gc.isenabled()
        assert len(await JournalSession(journal.store, "gc").get_items()) == 600
        assert gc.isenabled()
        gc.disable()
        try:
            assert len(await JournalSession(journal.store, "gc").get_items()) == 600
            assert not gc.isenabled()
        finally:
            gc.enable()


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.just("lone \ud800 surrogate"),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(_json)
def test_a_view_digest_is_that_of_its_rfc8785_bytes(value: Any) -> None:
    # The fast path (no float, no key beyond U+FFFF) must give RFC 8785's bytes, and its
    # fallback (lone surrogates, integers beyond 2**53) Python's sorted compact JSON.
    try:
        encoded = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeError):
        encoded = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode("utf-8", "surrogatepass")
    assert view_digest(value) == hashlib.sha256(encoded).hexdigest()


async def test_sqlite_reads_many_streams_in_one_trip_as_it_reads_each(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'aj.db'}") as journal:
        store = journal.store
        assert isinstance(store, SQLiteEventStore)
        for name, count in (("A-1", 3), ("B-1", 1)):
            await store.append(
                name,
                [
                    NewEvent(type="T", data=b'{"n":%d}' % n, metadata={"k": "v"})
                    for n in range(count)
                ],
                expected=StreamState.NO_STREAM,
            )
        found = await store.read_streams(
            [("A-1", None), ("missing-1", None), ("B-1", 5), ("A-1", 2)]
        )
        assert found == [
            await store.read("A-1"),
            None,
            await store.read("B-1"),
            await store.read("A-1", limit=2),
        ]
        with pytest.raises(InvalidInput):
            await store.read_streams([("A-1", -1)])


async def test_a_tree_walk_in_one_trip_per_level_skips_a_missing_subsession(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Two handoffs open two subsessions; one of them is then lost from the file.
    async with Journal.open(f"sqlite:///{tmp_path / 'aj.db'}") as journal:
        session = journal.session("walk", agent_name="triage")
        for n in range(2):
            await Runner.run(
                handoff_run(n), f"q {n}", session=session, hooks=session, run_config=CONFIG
            )
        streams = [stream async for stream, _ in walk_tree(journal.store, session.stream)]
        assert len(streams) == 3
        lost = streams[2]
        store = journal.store
        assert isinstance(store, SQLiteEventStore)
    db = sqlite3.connect(tmp_path / "aj.db")
    with db:
        db.execute(
            "DELETE FROM events WHERE stream_id = (SELECT id FROM streams WHERE name = ?)", (lost,)
        )
        db.execute("DELETE FROM streams WHERE name = ?", (lost,))
    db.close()
    async with Journal.open(f"sqlite:///{tmp_path / 'aj.db'}") as journal:
        with caplog.at_level(logging.WARNING, logger="agentjournal.records"):
            walked = [stream async for stream, _ in walk_tree(journal.store, streams[0])]
        assert walked == streams[:2]
        assert f"subsession stream {lost} is missing" in caplog.text


def test_a_subsession_written_on_after_its_close_fails_verification_and_ends() -> None:
    # A forged bundle: one more (correctly chained) event after a subsession's closing twin.
    # The checkpoint-coverage pass reports the event and ends (it must not loop on it).
    bundle = record()["nested"]
    stream = next(
        s
        for s in bundle["streams"]
        if s["name"].startswith("AgentSubsession")
        and s["events"][-1]["type"] == "SubagentCompleted"
    )
    extra = copy.deepcopy(stream["events"][1])
    extra["id"] = str(uuid.uuid4())
    stream["events"].append(extra)
    rechain(bundle, stream["name"])
    done: list[Any] = []
    worker = threading.Thread(
        target=lambda: done.append(verify_bundle(bundle, TRUSTED)), daemon=True
    )
    worker.start()
    worker.join(60)
    assert done, "verification did not end"
    report = done[0]
    where = f"{stream['name']}@{len(stream['events']) - 1}"
    assert str(report.problems[0]) == f"{where}: events after the subagent closed (twins)"
    assert f"{where}: events after the last checkpoint" in report.text()
