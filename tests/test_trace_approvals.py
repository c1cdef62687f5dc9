"""The wait for a person as a span: ``await_approval {tool}``, from the question to the
answer, under the span of the agent that asked, exported to the OTLP collector double.

A run pauses with the SDK's real ``Runner`` and ``ScriptedModel`` (tests/paused_graph.py)
on a SQLite file; ``agentjournal trace export`` sends its spans over OTLP/HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from agents import Runner

from agentjournal import Journal
from agentjournal import events as ev
from agentjournal.read.traces import project_tree
from agentjournal.read.traces.ids import ns
from agentjournal.walk import read_tree
from cli_run import run
from otlp_collector import Collector, Received, collector
from paused_graph import approval_graph, paused_graph

SID = "wait-1"


@pytest.fixture
def otlp() -> Iterator[Collector]:
    with collector() as sink:
        yield sink


async def export(uri: str, sink: Collector) -> list[Received]:
    sink.clear()
    done = await asyncio.to_thread(
        run, "trace", "export", SID, "--otlp", sink.http_url, "--uri", uri
    )
    assert done.returncode == 0, done.stderr
    return sink.snapshot()


async def times(uri: str) -> dict[str, int]:
    """When the question, the paused run and the answer were recorded (ns), and the
    newest event of the tree."""
    async with Journal.open(uri) as journal:
        tree = await read_tree(journal.store, SID)
    found = {r.type: ns(r.recorded_at) for r in tree.records() if r.recorded_at is not None}
    found["newest"] = max(ns(r.recorded_at) for r in tree.records() if r.recorded_at)
    return found


def waits(spans: list[Received]) -> list[Received]:
    return [s for s in spans if s.name.startswith("await_approval")]


async def test_the_wait_for_a_person_is_a_span_from_question_to_answer(
    otlp: Collector, tmp_path: Path
) -> None:
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    async with Journal.open(uri) as journal:
        session = journal.session(SID)
        result = await Runner.run(paused_graph(), "Refund order 42", session=session, hooks=session)
        await session.hold(result)
    at = await times(uri)

    # Unanswered: the span ends at the line's newest event, pending and in progress.
    spans = await export(uri, otlp)
    (waiting,) = waits(spans)
    billing = next(s for s in spans if s.name == "invoke_agent billing")
    assert waiting.name == "await_approval issue_refund"
    assert (waiting.trace_id, waiting.parent_id) == (billing.trace_id, billing.span_id)
    assert waiting.start_ns == at[ev.INTERRUPT_ISSUED]
    assert waiting.end_ns == at["newest"]
    assert waiting.attributes["agentjournal.approval_request_id"] == "r1"
    assert waiting.attributes["gen_ai.tool.name"] == "issue_refund"
    assert waiting.attributes["gen_ai.agent.name"] == "billing"
    assert waiting.attributes["agentjournal.approval_outcome"] == "pending"
    assert waiting.attributes["agentjournal.in_progress"] is True
    assert "agentjournal.approval_by" not in waiting.attributes

    async with Journal.open(uri) as journal:
        session = journal.session(SID)
        await asyncio.sleep(0.01)  # the answer comes later than the paused run's last event
        await session.approve("r1", by="dana", reason="checked")
        await session.resume(approval_graph("refunded"))
    at = await times(uri)

    # Answered: the same span, ending at the answer, with the outcome and who answered.
    spans = await export(uri, otlp)
    (answered,) = waits(spans)
    assert (answered.trace_id, answered.span_id, answered.parent_id) == (
        waiting.trace_id,
        waiting.span_id,
        waiting.parent_id,
    )
    assert (answered.start_ns, answered.end_ns) == (
        at[ev.INTERRUPT_ISSUED],
        at[ev.INTERRUPT_RESOLVED],
    )
    assert answered.attributes["agentjournal.approval_outcome"] == "approved"
    assert answered.attributes["agentjournal.approval_by"] == "dana"
    assert "agentjournal.in_progress" not in answered.attributes
    # The answer belongs to no run: the paused run's span ends before it.
    paused_run = next(s for s in spans if s.parent_id is None and s.trace_id == waiting.trace_id)
    assert paused_run.end_ns < at[ev.INTERRUPT_RESOLVED]


async def test_a_rejected_call_s_wait_says_rejected_and_a_follower_sends_it_when_answered(
    tmp_path: Path,
) -> None:
    """Projected as a follower does, event by event (restarted from its saved state while
    the call waits): no wait span before the answer, one when it comes."""
    from agentjournal.read.traces import Projector

    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    async with Journal.open(uri) as journal:
        session = journal.session(SID)
        result = await Runner.run(paused_graph(), "Refund order 42", session=session, hooks=session)
        await session.hold(result)
        await session.reject("r1", by="lee")
        tree = await read_tree(journal.store, SID)
    projector = Projector(SID)
    sent = []
    for record in sorted(tree.records(), key=lambda r: r.position or 0):
        if record.position is None:
            continue
        spans = projector.feed(record)
        names = [s.name for s in spans]
        if record.type == ev.INTERRUPT_RESOLVED:
            assert names == ["await_approval issue_refund"]
        else:
            assert "await_approval issue_refund" not in names
        sent += spans
        if record.type == ev.RUN_PAUSED:  # a follower restarted from its save goes on
            projector = Projector.load(projector.dump())
    (rejected,) = [s for s in sent if s.name.startswith("await_approval")]
    assert rejected.attributes["agentjournal.approval_outcome"] == "rejected"
    assert rejected.attributes["agentjournal.approval_by"] == "lee"
    assert not [s for s in projector.finish() if s.name.startswith("await_approval")]
    assert [s.name for s in project_tree(tree) if s.name.startswith("await")] == [
        "await_approval issue_refund"
    ]
