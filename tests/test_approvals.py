"""Approvals on the record: a function tool call that waits for a person.

A run whose tool needs approval stops; the call's ``InterruptIssued`` lands on the acting
agent's stream in the same write as the call, and is no item (``get_items`` and replay
are the SDK's). ``hold`` stores the paused run, ``approve``/``reject`` record exactly one
answer per request, and ``resume`` (or ``resumable`` for ``run_streamed``) runs the stored
run with the recorded answers, in any process, once.

Every Runner test runs the SDK's real ``Runner`` with ``ScriptedModel`` (``Runner.run``
and ``Runner.run_streamed``) beside the SDK's own ``SQLiteSession``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from agents import Agent, RunContextWrapper, SQLiteSession, function_tool
from agents.memory import Session
from agents.run_state import RunState
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import AlreadyResolved, InvalidInput, Journal, JournalSession
from agentjournal import events as ev
from agentjournal.audit.verify import verify_records
from agentjournal.cli import main as cli
from agentjournal.engine.approvals import fold_approvals
from agentjournal.engine.plan import Ask
from agentjournal.store.contract import EventStore, RecordedEvent
from agentjournal.streams import session_stream
from agentjournal.walk import read_tree
from drive import METHODS, Method, drive

SID = "approvals-1"
MAIN = session_stream(SID)
ASK = "Refund order 42"
ARGUMENTS = '{"order_id":"42","amount_cents":1250}'


def graph(ran: list[str], *, depth: int = 1, answer: str | None = None) -> Agent[Any]:
    """triage -> billing (-> refunds at depth 2), whose ``issue_refund`` waits for approval;
    with ``answer``, the graph that resumes it (the acting agent then says ``answer``).
    Each run of the tool's body is noted in ``ran``."""

    @function_tool(needs_approval=True)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        """Refund part of an order (a person approves it first)."""
        ran.append(f"{order_id}:{amount_cents}")
        return f"refunded {amount_cents} cents on {order_id}"

    refund = [function_call("issue_refund", {"order_id": "42", "amount_cents": 1250}, call_id="r1")]
    said = [assistant_message(answer, item_id="m1")] if answer is not None else None
    acting = Agent(
        name="refunds" if depth == 2 else "billing",
        model=ScriptedModel([said if said else refund]),
        tools=[issue_refund],
    )
    if depth == 1:
        billing = acting
    else:
        to_refunds = [] if said else [[function_call("transfer_to_refunds", {}, call_id="h2")]]
        billing = Agent(name="billing", model=ScriptedModel(to_refunds), handoffs=[acting])
    to_billing = [] if said else [[function_call("transfer_to_billing", {}, call_id="h1")]]
    return Agent(name="triage", model=ScriptedModel(to_billing), handoffs=[billing])


async def pause(
    method: Method, session: Session, hooks: Any, ran: list[str], depth: int = 1
) -> Any:
    result: Any = await drive(
        graph(ran, depth=depth), ASK, method=method, session=session, hooks=hooks
    )
    assert [item.raw_item.call_id for item in result.interruptions] == ["r1"]
    return result


async def resume(
    method: Method, session: JournalSession, ran: list[str], answer: str, depth: int = 1
) -> None:
    """The session resumes its stored run with the recorded answers (``resume`` for
    ``Runner.run``; ``resumable`` then ``Runner.run_streamed``)."""
    agent = graph(ran, depth=depth, answer=answer)
    result: Any
    if method == "run":
        result = await session.resume(agent)
    else:
        state = await session.resumable(agent)
        result = await drive(agent, state, method=method, session=session, hooks=session)
    assert result.final_output == answer


async def reference(method: Method, *, approve: bool, answer: str, depth: int = 1) -> list[Any]:
    """What the SDK's own ``SQLiteSession`` holds after the same steps (no hooks)."""
    sdk = SQLiteSession("reference")
    try:
        paused = await pause(method, sdk, None, [], depth)
        agent = graph([], depth=depth, answer=answer)
        state = await RunState.from_string(agent, paused.to_state().to_string())
        (item,) = state.get_interruptions()
        state.approve(item) if approve else state.reject(item)
        await drive(agent, state, method=method, session=sdk)
        return await sdk.get_items()
    finally:
        sdk.close()


def _texts(items: list[Any]) -> list[str]:
    return [json.dumps(item, sort_keys=True) for item in items]


async def replays(store: EventStore, session: JournalSession, expected: list[Any]) -> None:
    """Warm and cold, windowed and whole: the SDK's history exactly."""
    for limit in (None, 1, 2, 3, len(expected)):
        want = expected if limit is None else expected[len(expected) - limit :]
        assert _texts(await session.get_items(limit)) == _texts(want), limit
        cold = JournalSession(store, SID)
        assert _texts(await cold.get_items(limit)) == _texts(want), ("cold", limit)


async def verifies(store: EventStore) -> None:
    report = verify_records(await read_tree(store, SID), {}, allow_uncovered=True)
    assert report.ok, report.text()


async def cli_says(argv: list[str]) -> str:
    """What ``agentjournal ARGV`` prints (it must succeed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = await asyncio.to_thread(cli, argv)
    assert code == 0, out.getvalue()
    return out.getvalue()


async def cli_verifies(uri: str) -> None:
    """``agentjournal verify SESSION`` passes (a store another process can open)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = await asyncio.to_thread(cli, ["verify", SID, "--uri", uri, "--allow-uncovered"])
    assert code == 0, out.getvalue()
    assert "FAIL" not in out.getvalue(), out.getvalue()


async def typed(store: EventStore, *types: str) -> list[RecordedEvent]:
    return [e for e in await store.read_all() if e.type in types]


# -- the question: an event beside the call, no item ---------------------------------------


@pytest.mark.parametrize("method", METHODS)
async def test_a_run_stopped_for_approval_records_the_question_beside_the_call(
    journal: Journal, method: Method
) -> None:
    """``InterruptIssued`` follows the call's item on billing's stream, in the same write
    (the next revision, the same ``aj.next_index``); it is no item: the history is the
    SDK's, and the verifier passes."""
    store, ran = journal.store, list[str]()
    session = journal.session(SID)
    await pause(method, session, session, ran)
    assert ran == []
    (billing,) = [s.stream for s in await session.open_subagents()]
    stream = await store.read(billing)
    at = next(i for i, e in enumerate(stream) if e.type == ev.INTERRUPT_ISSUED)
    call, issued = stream[at - 1], stream[at]
    assert call.metadata[ev.CALL_ID_KEY] == "r1"
    assert call.type == "AssistantToolCallsGenerated"
    assert issued.metadata[ev.INTERRUPT_KEY] == "tool_approval"
    assert issued.metadata[ev.CALL_ID_KEY] == "r1"
    assert ev.INDEX_KEY not in issued.metadata
    assert issued.metadata[ev.NEXT_INDEX_KEY] == call.metadata[ev.NEXT_INDEX_KEY]
    asked = ev.ApprovalAsked.decode(issued.data)
    assert (asked.request_id, asked.tool_name, asked.arguments, asked.agent) == (
        "r1",
        "issue_refund",
        ARGUMENTS,
        "billing",
    )
    assert asked.authority is None  # no policy
    body = json.loads(issued.data)
    assert (body["kind"], body["prompt"]) == ("tool_approval", ARGUMENTS)

    sdk = SQLiteSession("reference")
    try:
        await pause(method, sdk, None, [])
        await replays(store, session, await sdk.get_items())
    finally:
        sdk.close()
    await verifies(store)


def test_the_question_is_planned_in_the_call_s_write_unless_the_write_carries_the_output() -> None:
    """Pure: the plan of the call's write holds the call then its ``InterruptIssued``, one
    request; the same call written with its output asks nothing."""
    from test_plan import Run, by_stream, call, items_plan, output, tree_at, types

    tree = tree_at({MAIN_S: 0})
    ask = Ask("c1", "issue_refund", "{}", "triage")
    plan = items_plan(tree, [call("c1", "issue_refund")], Run(asks={"c1": ask}))
    (request,) = plan.requests
    assert types(list(request.events)) == ["AssistantToolCallsGenerated", ev.INTERRUPT_ISSUED]
    answered = items_plan(
        tree_at({MAIN_S: 0}),
        [call("c1", "issue_refund"), output("c1", "ok")],
        Run(asks={"c1": ask}),
    )
    assert ev.INTERRUPT_ISSUED not in types(by_stream(answered)[MAIN_S])


MAIN_S = "AgentSession-s1"  # test_plan's session stream


@pytest.mark.parametrize("amount", [50, 5000])
async def test_a_callable_needs_approval_asks_only_when_it_says_so(amount: int) -> None:
    """``needs_approval`` as a callable is evaluated as the SDK does (context, parsed
    arguments, call id): a question is recorded exactly when the run stops."""
    seen: list[tuple[dict[str, Any], str]] = []

    async def above_limit(
        context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        seen.append((params, call_id))
        return bool(params["amount_cents"] > 1000)

    @function_tool(needs_approval=above_limit)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        """Refund part of an order."""
        return "refunded"

    steps: list[Any] = [
        [function_call("issue_refund", {"order_id": "42", "amount_cents": amount}, call_id="r9")],
        [assistant_message("done", item_id="m9")],
    ]
    agent = Agent(name="billing", model=ScriptedModel(steps), tools=[issue_refund])
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session(SID)
        result: Any = await drive(agent, ASK, session=session, hooks=session)
        questions = await typed(journal.store, ev.INTERRUPT_ISSUED)
        assert bool(result.interruptions) == (amount > 1000)
        assert len(questions) == (1 if amount > 1000 else 0)
        assert [a.request_id for a in await session.pending_approvals()] == (
            ["r9"] if amount > 1000 else []
        )
    assert seen
    assert all(call_id == "r9" for _, call_id in seen)


# -- answers and resumes -------------------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("approve", [True, False], ids=["approve", "reject"])
async def test_an_answer_is_recorded_and_the_stored_run_resumes_with_it(
    journal: Journal, method: Method, approve: bool
) -> None:
    """hold -> pending -> approve/reject -> resume: the tool runs once (never when
    rejected), ``InterruptResolved`` names who and why, the history is the SDK's after
    the same steps, a second resume runs nothing, and the verifier passes."""
    store, ran = journal.store, list[str]()
    session = journal.session(SID)
    paused = await pause(method, session, session, ran)
    held = await session.hold(paused)
    (pending,) = await session.pending_approvals()
    assert held == [pending]
    assert (pending.request_id, pending.tool_name, pending.arguments, pending.agent) == (
        "r1",
        "issue_refund",
        ARGUMENTS,
        "billing",
    )
    assert pending.stream.startswith("AgentSubsession-")
    assert pending.issued_at <= datetime.now(UTC)
    (stored,) = await typed(store, ev.RUN_PAUSED)
    assert stored.stream == MAIN
    assert ev.RunPaused.decode(stored.data).state == paused.to_state().to_string()

    answer = "Refunded." if approve else "Not refunded."
    decide = session.approve if approve else session.reject
    decided = await decide("r1", by="ann@example.com", reason="checked the order")
    assert await session.pending_approvals() == []
    (resolved,) = await typed(store, ev.INTERRUPT_RESOLVED)
    assert resolved.stream == pending.stream
    assert resolved.metadata[ev.INTERRUPT_KEY] == "tool_approval"
    assert ev.ApprovalDecided.decode(resolved.data) == decided
    assert (decided.outcome, decided.by, decided.reason, decided.issued) == (
        "approved" if approve else "rejected",
        "ann@example.com",
        "checked the order",
        pending.event_id,
    )
    assert json.loads(resolved.data)["response"] == "checked the order"

    await resume(method, session, ran, answer)
    assert ran == (["42:1250"] if approve else [])
    with pytest.raises(InvalidInput, match="resumed already"):
        await session.resume(graph(ran, answer=answer))
    assert ran == (["42:1250"] if approve else [])
    await replays(store, session, await reference(method, approve=approve, answer=answer))
    await verifies(store)


async def test_unknown_and_answered_requests_are_refused_and_write_nothing(
    journal: Journal,
) -> None:
    session = journal.session(SID)
    await session.hold(await pause("run", session, session, []))
    before = len(await journal.store.read_all())
    with pytest.raises(InvalidInput, match="no approval request 'nope'"):
        await session.approve("nope", by="ann")
    with pytest.raises(InvalidInput, match="by="):
        await session.approve("r1", by=" ")
    with pytest.raises(InvalidInput, match="no answer yet"):
        await session.resume(graph([], answer="x"))
    assert len(await journal.store.read_all()) == before
    await session.reject("r1", by="bob", reason="no")
    with pytest.raises(AlreadyResolved, match="'r1' was already rejected by 'bob'") as raised:
        await session.approve("r1", by="ann")
    assert (raised.value.outcome, raised.value.by) == ("rejected", "bob")
    assert len(await journal.store.read_all()) == before + 1
    said = ScriptedModel([[assistant_message("hi", item_id="m0")]])
    finished = await drive(Agent(name="x", model=said), "hi")
    with pytest.raises(InvalidInput, match="nothing to hold"):
        await session.hold(finished)


async def test_a_run_without_hooks_cannot_be_held(journal: Journal) -> None:
    """Without ``hooks=session`` no question is on the record: nothing to hold."""
    session = journal.session(SID)
    paused = await pause("run", session, None, [])
    with pytest.raises(InvalidInput, match="hooks=session"):
        await session.hold(paused)


@pytest.mark.parametrize("method", METHODS)
async def test_an_approval_inside_a_nested_subagent_resumes_there(
    journal: Journal, method: Method
) -> None:
    """triage -> billing -> refunds: the question is on refunds' stream (two subagents
    deep); resumed there, both subagents close and the history is the SDK's."""
    store, ran = journal.store, list[str]()
    session = journal.session(SID)
    await session.hold(await pause(method, session, session, ran, depth=2))
    opened = [s.stream for s in await session.open_subagents()]
    (pending,) = await session.pending_approvals()
    assert len(opened) == 2
    assert pending.stream == opened[-1]
    assert pending.agent == "refunds"
    await session.approve("r1", by="ann")
    await resume(method, session, ran, "Refunded.", depth=2)
    assert ran == ["42:1250"]
    assert await session.open_subagents() == []
    await replays(
        store, session, await reference(method, approve=True, answer="Refunded.", depth=2)
    )
    await verifies(store)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("uri_kind", ["sqlite-file", "kurrentdb"])
async def test_an_answer_given_after_the_first_process_closed_resumes_once_elsewhere(
    method: Method, uri_kind: str, tmp_path: Any, request: pytest.FixtureRequest
) -> None:
    """The run pauses and is held in one journal, which closes; a second answers and
    stops before resuming (a crash between the answer and the resume); a third resumes:
    the tool runs exactly once, and again nothing runs."""
    uri = (
        f"sqlite:///{tmp_path / 'journal.db'}"
        if uri_kind == "sqlite-file"
        else request.getfixturevalue("kurrentdb_double").uri
    )
    ran: list[str] = []
    async with Journal.open(uri) as first:
        session = first.session(SID)
        await session.hold(await pause(method, session, session, ran))
    async with Journal.open(uri) as second:
        (pending,) = await second.session(SID).pending_approvals()
        await second.session(SID).approve(pending.request_id, by="ann")
    assert ran == []
    async with Journal.open(uri) as third:
        session = third.session(SID)
        await resume(method, session, ran, "Refunded.")
        assert ran == ["42:1250"]
        with pytest.raises(InvalidInput, match="resumed already"):
            await session.resumable(graph(ran, answer="Refunded."))
        await replays(
            third.store, session, await reference(method, approve=True, answer="Refunded.")
        )
        await verifies(third.store)
    if uri_kind == "sqlite-file":
        await cli_verifies(uri)
        shown = await cli_says(["show", SID, "--uri", uri])
        assert "billing waits for approval of issue_refund(" in shown
        assert "approved by ann [request r1]" in shown
        assert "run paused for approval of r1" in shown


async def test_two_racing_answers_land_exactly_one(journal: Journal) -> None:
    """Two session objects (each its own view of the streams) answer one request at once:
    one answer lands, the other is refused naming it; the run resumes with the winner's."""
    ran: list[str] = []
    session = journal.session(SID)
    await session.hold(await pause("run", session, session, ran))
    first, second = JournalSession(journal.store, SID), JournalSession(journal.store, SID)
    await asyncio.gather(first.pending_approvals(), second.pending_approvals())  # both warm
    outcomes = await asyncio.gather(
        first.approve("r1", by="ann"), second.reject("r1", by="bob"), return_exceptions=True
    )
    landed = [o for o in outcomes if isinstance(o, ev.ApprovalDecided)]
    refused = [o for o in outcomes if isinstance(o, AlreadyResolved)]
    assert len(landed) == 1, outcomes
    assert len(refused) == 1, outcomes
    assert (refused[0].by, refused[0].outcome) == (landed[0].by, landed[0].outcome)
    assert len(await typed(journal.store, ev.INTERRUPT_RESOLVED)) == 1
    await resume("run", session, ran, "Done.")
    assert ran == (["42:1250"] if landed[0].outcome == "approved" else [])
    await verifies(journal.store)


# -- pure ------------------------------------------------------------------------------------


def test_the_fold_pairs_answers_with_their_questions_and_notes_calls_that_ran() -> None:
    """An answer names its question by event id; a tool output on the question's stream
    settles it; MCP approval items (no ``aj.interrupt``) and unreadable events are none."""
    now = datetime.now(UTC)
    asked = ev.ApprovalAsked("c1", "t", "{}", "a", None, now)

    def event(revision: int, type_: str, data: bytes, **metadata: str) -> RecordedEvent:
        from uuid import UUID

        return RecordedEvent(
            id=UUID(int=revision + 1),
            stream="S",
            revision=revision,
            type=type_,
            data=data,
            metadata=metadata,
            position=revision,
            recorded_at=now,
        )

    mark: dict[str, str] = {ev.INTERRUPT_KEY: "tool_approval"}
    question = event(0, ev.INTERRUPT_ISSUED, asked.encode(), **mark)
    mcp = event(1, ev.INTERRUPT_ISSUED, asked.encode())
    broken = event(2, ev.INTERRUPT_RESOLVED, b"{}", **mark)
    (only,) = fold_approvals({"S": [question, mcp, broken]})
    assert only.pending
    assert only.event_id == str(question.id)
    answer = ev.ApprovalDecided("c1", "approved", "", "ann", str(question.id), now)
    ran = event(4, "ToolResultReceived", b"{}", **{ev.CALL_ID_KEY: "c1"})
    (done,) = fold_approvals(
        {"S": [question, event(3, ev.INTERRUPT_RESOLVED, answer.encode(), **mark), ran]}
    )
    assert done.decision == answer
    assert done.ran
    assert not done.pending


async def test_under_a_policy_the_question_records_what_the_agent_held() -> None:
    """A guarded run under a policy: the question carries the acting agent's authority
    then (what the handoff granted billing), the answer lets the call run within it, and
    the verifier's authority checks pass."""
    from refund_authority import refund_policy

    ran: list[str] = []
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session(SID, policy=refund_policy())
        paused: Any = await drive(session.guard(graph(ran)), ASK, session=session, hooks=session)
        assert [item.raw_item.call_id for item in paused.interruptions] == ["r1"]
        (held,) = await session.hold(paused)
        assert held.authority is not None
        assert "billing.refund" in json.dumps(held.authority)
        (issued,) = await typed(journal.store, ev.INTERRUPT_ISSUED)
        assert ev.ApprovalAsked.decode(issued.data).authority == held.authority
        await session.approve("r1", by="ann")
        result = await session.resume(session.guard(graph(ran, answer="Refunded.")))
        assert result.final_output == "Refunded."
        assert ran == ["42:1250"]
        await verifies(journal.store)
