"""The trace projector's fold (``agentjournal.read.traces``), on sessions written by real runs:
ids reused or derived, runs split, failures as ERROR, state saved mid-way, quiet runs."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import timedelta
from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.read.traces import ProjectedSpan, Projector, project_tree
from agentjournal.records import Record, TreeRecords
from agentjournal.walk import read_tree
from drive import METHODS, Method, drive
from handoff_scenarios import failing, nested, top_level
from trace_scenarios import write_support


def _ordered(tree: TreeRecords) -> list[Record]:
    return sorted(tree.records(), key=lambda r: r.position or 0)


def _shape(spans: list[ProjectedSpan]) -> list[tuple[object, ...]]:
    return [
        (s.trace_id, s.span_id, s.parent_id, s.name, s.start_ns, s.end_ns, s.error, s.events)
        for s in spans
    ]


@pytest.fixture(scope="module")
def support(tmp_path_factory: pytest.TempPathFactory) -> TreeRecords:
    uri = f"sqlite:///{tmp_path_factory.mktemp('traces') / 'journal.db'}"

    async def written() -> TreeRecords:
        await write_support(uri, "s1")
        async with Journal.open(uri) as journal:
            return await read_tree(journal.store, "s1")

    return asyncio.run(written())


def test_saved_and_loaded_at_any_event_the_fold_goes_on_identically(
    support: TreeRecords,
) -> None:
    records = _ordered(support)
    whole = project_tree(support)
    for cut in range(0, len(records), 7):
        first = Projector("s1")
        spans = [span for record in records[:cut] for span in first.feed(record)]
        again = Projector.load(first.dump())
        spans += [span for record in records[cut:] for span in again.feed(record)]
        assert _shape(spans + again.finish()) == _shape(whole), cut


def test_a_run_span_waits_until_its_session_is_quiet(support: TreeRecords) -> None:
    records = _ordered(support)
    projector = Projector("s1")
    spans = [span for record in records for span in projector.feed(record)]
    # The first run ended when the second began; the second is still "in progress".
    assert [s.name for s in spans].count("agentjournal.run") == 1
    last = max(record.recorded_at for record in records if record.recorded_at is not None)
    assert projector.idle(last + timedelta(seconds=5), timedelta(seconds=10)) == []
    quiet = projector.idle(last + timedelta(seconds=11), timedelta(seconds=10))
    assert [s.name for s in quiet] == ["agentjournal.run"]
    assert projector.idle(last + timedelta(seconds=60), timedelta(seconds=10)) == []
    assert projector.finish() == []  # everything was sent, once


async def _tree(session_id: str, *runs: tuple[object, bool], scope: bool = False) -> TreeRecords:
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session(session_id)
        for build, hooked in runs:
            agent = build()  # type: ignore[operator]
            try:
                if scope:
                    async with session.run_scope():
                        await drive(agent, "hi", session=session, hooks=session if hooked else None)
                else:
                    await drive(agent, "hi", session=session, hooks=session if hooked else None)
            except RuntimeError:
                pass
        return await read_tree(journal.store, session_id)


async def test_a_failed_subagent_is_an_error_and_so_is_its_run() -> None:
    tree = await _tree("failed", (failing, True), (top_level, True), scope=True)
    spans = project_tree(tree)
    billing = next(s for s in spans if s.name == "invoke_agent billing")
    assert billing.error is not None
    assert billing.error.startswith("error: RuntimeError")
    assert billing.attributes["agentjournal.outcome"] == "error"
    roots = [s for s in spans if s.parent_id is None]
    assert len(roots) == 2
    failed = next(r for r in roots if r.trace_id == billing.trace_id)
    assert failed.error == f"subagent billing ended with {billing.error}"
    # The closing was written after the run, with no trace ids: it still ends that run.
    assert failed.end_ns >= billing.end_ns
    assert next(r for r in roots if r is not failed).error is None


async def test_without_trace_ids_every_id_is_derived_from_event_ids() -> None:
    tree = await _tree("plain", (nested, True), (top_level, True))
    bare = TreeRecords(
        tree.session_id,
        {
            stream: [
                Record(
                    r.stream,
                    r.revision,
                    r.id,
                    r.type,
                    r.data,
                    r.data_sha256,
                    {k: v for k, v in r.metadata.items() if k not in ("trace_id", "span_id")},
                    r.view,
                    r.position,
                    r.recorded_at,
                )
                for r in records
            ]
            for stream, records in tree.streams.items()
        },
    )
    spans = project_tree(bare)
    assert _shape(spans) == _shape(project_tree(bare))  # deterministic
    recorded = {r.metadata.get("span_id") for r in tree.records()}
    assert not {s.span_id for s in spans} & recorded
    roots = [s for s in spans if s.parent_id is None]
    assert len(roots) == 2  # a user message after other events starts the next run
    assert all(root.attributes["agentjournal.trace_recorded"] is False for root in roots)
    assert len({s.span_id for s in spans}) == len(spans)
    refunds = next(s for s in spans if s.name == "invoke_agent refunds")
    billing = next(s for s in spans if s.name == "invoke_agent billing")
    assert refunds.parent_id == billing.span_id
    assert billing.parent_id in {r.span_id for r in roots}


async def test_one_span_id_recorded_everywhere_is_used_once() -> None:
    """A session without hooks records the current span on every event: the run span takes
    it, the subagents get derived ids, so no id is used twice."""
    tree = await _tree("hookless", (nested, False))
    spans = project_tree(tree)
    assert len({s.span_id for s in spans}) == len(spans)
    by_id = {s.span_id: s for s in spans}
    for span in spans:
        assert span.parent_id is None or span.parent_id in by_id


async def test_a_session_in_progress_exports_what_is_open(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        session = journal.session("open")
        with contextlib.suppress(RuntimeError):
            await drive(failing(), "hi", session=session, hooks=session)  # no run_scope
        tree = await read_tree(journal.store, "open")
    spans = project_tree(tree)
    billing = next(s for s in spans if s.name == "invoke_agent billing")
    assert billing.attributes["agentjournal.in_progress"] is True
    assert billing.error is None


@pytest.mark.parametrize("method", METHODS)
async def test_both_runners_give_one_well_formed_tree_per_run(method: Method) -> None:
    """A streamed run writes its input after the first agent started: the shape is the same."""
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session("both")
        for build in (nested, top_level):
            await drive(build(), "hi", method=method, session=session, hooks=session)
        tree = await read_tree(journal.store, "both")
    spans = project_tree(tree)
    by_id = {span.span_id: span for span in spans}
    assert len(by_id) == len(spans)
    roots = [span for span in spans if span.parent_id is None]
    assert len(roots) == 2
    for span in spans:
        if span.parent_id is not None:
            assert by_id[span.parent_id].trace_id == span.trace_id
    named = {span.name: span for span in spans}
    assert named["invoke_agent refunds"].parent_id == named["invoke_agent billing"].span_id
    assert named["invoke_agent billing"].parent_id in {root.span_id for root in roots}
    tools = sorted(
        (s.attributes["gen_ai.tool.call.id"], by_id[s.parent_id or ""].name)
        for s in spans
        if s.name.startswith("execute_tool")
    )
    assert tools == [("t1", "invoke_agent billing"), ("t2", "invoke_agent refunds")]
    chats = sorted(str(s.attributes["gen_ai.agent.name"]) for s in spans if s.name == "chat")
    assert chats == ["billing", "billing", "refunds", "refunds", "triage", "triage"]
