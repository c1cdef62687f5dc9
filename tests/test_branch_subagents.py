"""Branches: subagents, guardrails and authority at forks.

A subagent open at a fork continues on the branch in a continuation stream of its own
(``SubagentContinued``): the branch's runs speak, resume and close inside it while the
parent keeps and closes its original. Guardrail decisions land on the line the run is
on. What every agent last held is per line: a branch inherits the authority log in
force at its cut, never a grant made on the parent after it.

Every Runner test runs the SDK's real ``Runner`` with ``ScriptedModel`` (``Runner.run``
and ``Runner.run_streamed``) on SQLite (file and memory) and the KurrentDB double.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from agents import Agent, RunHooks, SQLiteSession, function_tool
from agents.memory import Session
from agents.run_state import RunState
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import GuardrailBlocked, Journal, JournalSession
from agentjournal import events as ev
from agentjournal.audit.verify import verify_records
from agentjournal.engine.fork import continues, plan_fork, subagent_opened
from agentjournal.engine.plan import SessionFacts
from agentjournal.engine.tree import SessionTree
from agentjournal.ledger.chain import GENESIS, HASH_KEY
from agentjournal.records import opened_stream
from agentjournal.store.contract import EventStore, RecordedEvent, StreamState
from agentjournal.streams import (
    authority_stream,
    branch_authority_stream,
    branch_stream,
    branches_stream,
    session_stream,
)
from agentjournal.walk import read_tree
from drive import METHODS, Method, drive
from handoff_scenarios import nested, single, top_level
from paused_graph import resumed
from refund_authority import handing_off, refund, refund_policy
from scripted_guardrail import ScriptedGuardrail

SID = "subagents-1"
MAIN = session_stream(SID)


def _texts(items: list[Any]) -> list[str]:
    return [json.dumps(item, sort_keys=True) for item in items]


async def _agrees(store: EventStore, session: JournalSession, expected: list[Any]) -> None:
    """Every way of reading the line gives ``expected``: warm and cold, windowed and whole."""
    line = None if session.branch == "main" else session.branch
    for limit in (None, 1, 2, 3, len(expected), len(expected) + 4):
        want = expected if limit is None else expected[max(len(expected) - limit, 0) :]
        assert _texts(await session.get_items(limit)) == _texts(want), limit
        cold = JournalSession(store, SID, branch=line)
        assert _texts(await cold.get_items(limit)) == _texts(want), ("cold", limit)
        assert _texts(await cold.get_items()) == _texts(expected), ("cold then whole", limit)


async def _stream(store: EventStore, stream: str) -> list[RecordedEvent]:
    return await store.read(stream)


async def _everything(store: EventStore) -> list[RecordedEvent]:
    return [event async for event in _all(store)]


async def _all(store: EventStore) -> Any:
    for event in await store.read_all():
        yield event


def _closes(events_: list[RecordedEvent]) -> list[tuple[str, str, str]]:
    """(stream, closed subsession, outcome) of every parent copy of ``SubagentCompleted``."""
    found = []
    for event in events_:
        if event.type == ev.SUBAGENT_COMPLETED and ev.CLOSES_KEY in event.metadata:
            _, closed, outcome = ev.decode_subagent_completed(event.data)
            found.append((event.stream, closed, outcome))
    return found


async def _verifies(store: EventStore) -> None:
    """The offline verifier passes every line of the session: chains, twins, the forks'
    bindings, the continuations and each line's authority log (unsigned here)."""
    report = verify_records(await read_tree(store, SID), {}, allow_uncovered=True)
    assert report.ok, report.text()


async def _started(store: EventStore, name: str) -> ev.BranchStarted:
    (first,) = await store.read(branch_stream(SID, name), limit=1)
    return ev.BranchStarted.decode(first.data)


# -- a fork inside open subagents, then a new run on each line --------------------------


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_a_fork_inside_nested_subagents_continues_both_on_the_branch(
    journal: Journal, method: Method
) -> None:
    """triage -> billing -> refunds; fork inside refunds' transcript (both open at the cut,
    both closed after it on main): the branch continues both, reads the prefix exactly,
    and its next run closes the continuations (``error``, innermost first) on the branch
    while main keeps its own closes."""
    store = journal.store
    main = journal.session(SID)
    await drive(nested(), "Why was I charged twice?", method=method, session=main, hooks=main)
    history = await main.get_items()
    assert len(history) == 10  # user, h1 call/ack, t1 call/output, h2 call/ack, t2, output, m2
    closed_on_main = _closes(await _everything(store))
    assert [outcome for _, _, outcome in closed_on_main] == ["success", "success"]

    branch = await main.fork(at=7, name="inside")  # before refunds' issue_refund call
    assert branch.prefix_items == 7
    started = await _started(store, "inside")
    billing, refunds = (place.stream for place in started.base[1:])
    assert [place.stream for place in started.base] == [MAIN, billing, refunds]
    assert billing.startswith(f"AgentSubsession-{SID}-sub-billing-h1")
    # Each place is its stream's last event before the cut, bound by its chain hash.
    for place in started.base:
        recorded = await store.read(place.stream)
        before = [e for e in recorded if e.position < started.cut.position]
        assert (before[-1].revision, before[-1].metadata[HASH_KEY]) == (
            place.revision,
            place.hash,
        )
    continuations = [started.continuations[billing], started.continuations[refunds]]
    assert len(set(continuations) | {billing, refunds}) == 4
    firsts = [(await store.read(stream, limit=1))[0] for stream in continuations]
    assert [first.type for first in firsts] == [ev.SUBAGENT_CONTINUED] * 2
    outer, inner = (ev.SubagentContinued.decode(first.data) for first in firsts)
    assert (outer.agent_type, outer.source_agent, outer.call_id) == ("billing", "triage", "h1")
    assert (inner.agent_type, inner.source_agent, inner.call_id) == ("refunds", "billing", "h2")
    assert (outer.parent_stream, inner.parent_stream) == (branch.stream, continuations[0])
    assert (outer.continues, inner.continues) == (started.base[1], started.base[2])
    # The branch's open chain is found like any line's: aj.open from its first event.
    (top_first,) = await store.read(branch.stream, limit=1)
    assert top_first.metadata[ev.OPEN_KEY] == continuations[0]
    assert firsts[0].metadata[ev.OPEN_KEY] == continuations[1]

    line = journal.session(SID, branch="inside")
    opened = await JournalSession(store, SID, branch="inside").open_subagents()
    assert [(s.agent_name, s.stream) for s in opened] == [
        ("billing", continuations[0]),
        ("refunds", continuations[1]),
    ]
    assert await main.open_subagents() == []
    await _agrees(store, line, history[:7])

    # Both lines go on: a new run on each. The branch's writes nothing on main's streams.
    heads = [await store.head(stream) for stream in (MAIN, billing, refunds)]
    await drive(top_level(), "Anything else?", method=method, session=line, hooks=line)
    assert [await store.head(stream) for stream in (MAIN, billing, refunds)] == heads
    await drive(top_level(), "Anything else?", method=method, session=main, hooks=main)
    own = await _reference(method, [(top_level, "Anything else?")])
    await _agrees(store, line, [*history[:7], *own])
    await _agrees(store, journal.session(SID), [*history, *own])
    assert await line.open_subagents() == []

    everything = await _everything(store)
    closes = _closes(everything)
    on_branch = [(s, c, o) for s, c, o in closes if (s, c, o) not in closed_on_main]
    # Innermost first: refunds' continuation on billing's, then billing's on the branch.
    assert on_branch == [
        (continuations[0], continuations[1], "error"),
        (branch.stream, continuations[0], "error"),
    ]
    # Main's originals were closed once each, on main's side only.
    assert [c for c in closes if c[1] in (billing, refunds)] == closed_on_main
    await _verifies(journal.store)


async def _reference(method: Method, runs: list[tuple[Any, str]]) -> list[Any]:
    """What the SDK's own ``SQLiteSession`` holds after ``runs`` (no hooks)."""
    reference = SQLiteSession("reference")
    try:
        for build, text in runs:
            await drive(build(), text, method=method, session=reference)
        return await reference.get_items()
    finally:
        reference.close()


# -- a fork in the middle of a run, from inside the subagent ----------------------------


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_a_fork_made_mid_run_inside_a_subagent(journal: Journal, method: Method) -> None:
    """billing's tool forks the session while billing is open (the run goes on): main
    closes its billing when the run ends; the branch's continuation is open until the
    branch's next run, which closes it and hands off into a subsession of its own."""
    store = journal.store
    main = journal.session(SID)
    seen: list[Any] = []

    @function_tool
    async def lookup_order(order_id: str) -> str:
        """Look up an order (and fork the conversation here)."""
        seen.extend(await JournalSession(store, SID).get_items())
        await main.fork(name="mid")
        return f"order {order_id}: charged twice"

    billing = Agent(
        name="billing",
        model=ScriptedModel(
            [
                [function_call("lookup_order", {"order_id": "42"}, call_id="t1")],
                [assistant_message("Charged twice; refund coming.", item_id="m1")],
            ]
        ),
        tools=[lookup_order],
    )
    triage = Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]]),
        handoffs=[billing],
    )
    await drive(triage, "Why was I charged twice?", method=method, session=main, hooks=main)
    assert [item.get("type") for item in seen][-1] == "function_call_output"  # in billing
    started = await _started(store, "mid")
    assert len(started.base) == 2
    assert started.continuations
    (continuation,) = started.continuations.values()
    line = journal.session(SID, branch="mid")
    await _agrees(store, line, seen)
    assert [s.stream for s in await line.open_subagents()] == [continuation]

    await drive(single(), "Try again", method=method, session=line, hooks=line)
    own = await _reference(method, [(single, "Try again")])
    await _agrees(store, line, [*seen, *own])
    await _agrees(
        store,
        journal.session(SID),
        await _reference(method, [(_billing_run, "Why was I charged twice?")]),
    )
    branch_events = await store.read(branch_stream(SID, "mid"))
    closes = _closes(branch_events)
    assert closes[0] == (branch_stream(SID, "mid"), continuation, "error")
    assert closes[1][2] == "success"  # the branch's own handoff, in a stream of its own
    opened = [opened_stream(e) for e in branch_events if opened_stream(e)]
    assert len(opened) == 1
    assert opened[0] not in (continuation, *started.continuations)
    assert opened[0] not in [s.stream for s in await main.open_subagents()]
    await _verifies(journal.store)


def _billing_run() -> Agent[Any]:
    """The main line's run of the mid-run test, for the SDK's reference (no fork)."""
    billing = Agent(
        name="billing",
        model=ScriptedModel(
            [
                [function_call("lookup_order", {"order_id": "42"}, call_id="t1")],
                [assistant_message("Charged twice; refund coming.", item_id="m1")],
            ]
        ),
        tools=[_lookup],
    )
    return Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]]),
        handoffs=[billing],
    )


@function_tool(name_override="lookup_order")
def _lookup(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: charged twice"


# -- an approval pending at the fork: resumed on each line --------------------------------


def _approval_graph(
    ran: list[str], billing_steps: list[Any], triage_steps: list[Any]
) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def issue_refund(order_id: str, amount_cents: int) -> str:
        """Refund part of an order (a person approves it first)."""
        ran.append(f"{order_id}:{amount_cents}")
        return f"refunded {amount_cents} cents on {order_id}"

    billing = Agent(name="billing", model=ScriptedModel(billing_steps), tools=[issue_refund])
    return Agent(name="triage", model=ScriptedModel(triage_steps), handoffs=[billing])


_PAUSE_BILLING = [
    [function_call("issue_refund", {"order_id": "42", "amount_cents": 1250}, call_id="r1")]
]
_PAUSE_TRIAGE = [[function_call("transfer_to_billing", {}, call_id="h1")]]


async def _paused(
    method: Method, session: Session, hooks: RunHooks[Any] | None, ran: list[str]
) -> str:
    """triage -> billing, whose refund waits for approval: the saved run state."""
    graph = _approval_graph(ran, _PAUSE_BILLING, _PAUSE_TRIAGE)
    paused: Any = await drive(graph, "Refund order 42", method=method, session=session, hooks=hooks)
    assert paused.interruptions
    saved: str = paused.to_state().to_string()
    return saved


async def _resumed(
    method: Method,
    saved: str,
    session: Session,
    hooks: RunHooks[Any] | None,
    ran: list[str],
    *,
    approve: bool,
    text: str,
) -> None:
    graph = _approval_graph(ran, [[assistant_message(text, item_id="m1")]], [])
    if isinstance(session, JournalSession) and await session.pending_approvals():
        # The answer goes on the record first: a call asked on the record runs only on one
        # (the verifier checks). A branch does not see a question pending in its prefix.
        decide = session.approve if approve else session.reject
        await decide("r1", by="ann")
    await resumed(graph, saved, approve=approve, session=session, hooks=hooks, method=method)


async def _approval_reference(method: Method, *, approve: bool, text: str) -> list[Any]:
    reference = SQLiteSession("reference")
    try:
        saved = await _paused(method, reference, None, [])
        await _resumed(method, saved, reference, None, [], approve=approve, text=text)
        return await reference.get_items()
    finally:
        reference.close()


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_an_approval_pending_at_the_fork_resumes_inside_each_line_s_subagent(
    journal: Journal, method: Method
) -> None:
    """The run pauses inside billing for an approval; fork there; approve on main, reject on
    the branch: each resumes inside its own billing stream (the original, the
    continuation) and closes it with ``success`` on its own line; each replays exactly
    what the SDK's own session holds after the same steps."""
    store = journal.store
    ran: list[str] = []
    main = journal.session(SID)
    saved = await _paused(method, main, main, ran)
    (billing,) = [s.stream for s in await main.open_subagents()]
    branch = await main.fork(name="rejected")
    (continuation,) = (await _started(store, "rejected")).continuations.values()
    line = journal.session(SID, branch="rejected")

    await _resumed(method, saved, line, line, ran, approve=False, text="Not refunded.")
    billing_head = await store.head(billing)
    await main.approve("r1", by="ann")  # the question is on main's own subsession
    await _resumed(method, saved, main, main, ran, approve=True, text="Refunded.")
    assert ran == ["42:1250"]  # approved once, on main; rejected on the branch

    await _agrees(
        store,
        journal.session(SID),
        await _approval_reference(method, approve=True, text="Refunded."),
    )
    await _agrees(
        store, line, await _approval_reference(method, approve=False, text="Not refunded.")
    )
    # The branch's resumed items are on its continuation; main's on the original, which
    # the branch left untouched.
    assert billing_head == (await _started(store, "rejected")).base[1].revision
    outputs = [e for e in await store.read(continuation) if e.type == "ToolResultReceived"]
    assert len(outputs) == 1
    assert "refunded" not in outputs[0].data.decode()
    closes = _closes(await _everything(store))
    assert (branch.stream, continuation, "success") in closes
    assert (MAIN, billing, "success") in closes
    assert len(closes) == 2

    # -- guardrail decisions on a branch ---------------------------------------------------
    await _verifies(journal.store)


async def _decisions(store: EventStore) -> list[tuple[str, ev.GuardrailDecided]]:
    return [
        (event.stream, ev.GuardrailDecided.decode(event.data))
        for event in await store.read_all()
        if event.type == ev.GUARDRAIL_DECIDED
    ]


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_a_guardrail_block_on_a_branch_is_recorded_on_the_branch_only(
    journal: Journal, method: Method
) -> None:
    """Paused inside billing, forked; billing's reply is BLOCKed when resumed on the branch
    and ALLOWed on main: the BLOCK is on the branch's continuation (the acting agent's
    stream on the run's line), the run stops there and closes it ``error``; main's
    decisions stay on main's streams and main finishes."""
    store = journal.store
    ran: list[str] = []
    async with ScriptedGuardrail() as guardrail:
        main = journal.session(SID, guardrails=guardrail.url)
        saved = await _paused(method, main, main, ran)
        (billing,) = [s.stream for s in await main.open_subagents()]
        branch = await main.fork(name="blocked")
        (continuation,) = (await _started(store, "blocked")).continuations.values()
        before = len(await _decisions(store))

        line = journal.session(SID, branch="blocked", guardrails=guardrail.url)
        guardrail.decisions["AGENT_RESPONSE"] = "BLOCK"
        with pytest.raises(GuardrailBlocked):
            await _resumed(method, saved, line, line, ran, approve=True, text="Refunded.")
        on_branch = (await _decisions(store))[before:]
        guardrail.decisions["AGENT_RESPONSE"] = "ALLOW"
        await main.approve("r1", by="ann")  # the question is on main's own subsession
        await _resumed(method, saved, main, main, ran, approve=True, text="Refunded.")

    # Billing's input (checked again at its first model call of the resumed run) and its
    # blocked reply: both on the continuation.
    assert [(s, d.action_type, d.decision) for s, d in on_branch] == [
        (continuation, "AGENT_INPUT", "ALLOW"),
        (continuation, "AGENT_RESPONSE", "BLOCK"),
    ]
    everything = await _decisions(store)
    on_main = [(s, d.decision) for s, d in everything if (s, d) not in on_branch]
    assert on_main
    assert all(s in (MAIN, billing) and d == "ALLOW" for s, d in on_main)
    assert ran == ["42:1250", "42:1250"]  # approved on both lines
    closes = _closes(await _everything(store))
    assert (branch.stream, continuation, "error") in closes
    assert (MAIN, billing, "success") in closes
    # The blocked reply is stored on neither line.
    assert "Refunded." not in json.dumps(await line.get_items())
    assert "Refunded." in json.dumps(await journal.session(SID).get_items())

    # -- authority per line ---------------------------------------------------------------
    await _verifies(journal.store)


@pytest.mark.slow
async def test_a_branch_inherits_the_authority_in_force_at_its_cut(journal: Journal) -> None:
    """billing starts uncapped; a fork; then a handoff on main narrows billing to triage's
    cap. On main billing's next run is capped; on the branch forked before the narrowing
    it is not (a grant after the cut is not the branch's), on a branch forked after it it
    is (authority never widens across a fork). Each branch writes its own log."""
    store = journal.store
    main = journal.session(SID, policy=refund_policy())
    assert await refund(main, 100) == [100]  # billing's run start: its own entry, uncapped
    await main.fork(name="before")
    await drive(handing_off(), "hello", session=main, hooks=main)  # narrows billing
    await main.fork(name="after")
    main_log = await store.read(authority_stream(SID))

    assert await refund(main, 9000) == []  # capped at 5000 now
    before = journal.session(SID, branch="before", policy=refund_policy())
    assert await refund(before, 9000) == [9000]
    after = journal.session(SID, branch="after", policy=refund_policy())
    assert await refund(after, 9000) == []
    assert (
        await refund(JournalSession(store, SID, branch="after", policy=refund_policy()), 9000) == []
    )

    # Each branch's grants are on its own log; main's log has only main's.
    assert [e.id for e in (await store.read(authority_stream(SID)))[: len(main_log)]] == [
        e.id for e in main_log
    ]
    for name, capped in (("before", False), ("after", True)):
        log = await store.read(branch_authority_stream(SID, name))
        held = [json.loads(e.data) for e in log if e.type == ev.AUTHORITY_HELD]
        assert held
        assert held[0]["agent"] == "billing"
        assert ("spend" in json.dumps(held[0]["authority"])) is capped
    refused = [
        (event.stream, ev.AuthorityRefused.decode(event.data).ceiling)
        for event in await store.read_all()
        if event.type == ev.AUTHORITY_REFUSED
    ]
    assert sorted(stream for stream, _ in refused) == sorted(
        [MAIN, branch_stream(SID, "after"), branch_stream(SID, "after")]
    )
    await _verifies(journal.store)


async def test_a_resumed_subagent_on_a_branch_holds_its_original_grant(journal: Journal) -> None:
    """triage (capped at 5000) hands off to billing, whose refund waits for approval; fork
    there. Resumed on the branch, billing speaks inside the continuation with the grant
    copied from the original (capped): the approved refund runs; without the copied grant
    billing would hold nothing there and the refund would be refused."""
    store = journal.store
    policy = refund_policy()
    ran: list[str] = []
    main = journal.session(SID, policy=policy)
    graph = _approval_graph(ran, _PAUSE_BILLING, _PAUSE_TRIAGE)
    paused: Any = await drive(main.guard(graph), "Refund order 42", session=main, hooks=main)
    assert paused.interruptions
    saved = paused.to_state().to_string()
    await main.fork(name="resumed")
    started = await _started(store, "resumed")
    (original, continuation) = (started.base[1].stream, *started.continuations.values())
    (first,) = await store.read(continuation, limit=1)
    copied = ev.SubagentContinued.decode(first.data).granted_authority
    (opening,) = await store.read(original, limit=1)
    assert copied == ev.granted_authority(json.loads(opening.data))
    assert copied is not None
    assert "spend" in json.dumps(copied)

    line = journal.session(SID, branch="resumed", policy=policy)
    graph = line.guard(_approval_graph(ran, [[assistant_message("ok", item_id="m1")]], []))
    state = await RunState.from_string(graph, saved)
    state.approve(state.get_interruptions()[0])
    await drive(graph, state, session=line, hooks=line)
    assert ran == ["42:1250"]
    closes = _closes(await _everything(store))
    assert (branch_stream(SID, "resumed"), continuation, "success") in closes

    # -- the fork's plan with continuations (pure) ------------------------------------------
    await _verifies(journal.store)


def test_the_fork_plan_creates_each_continuation_in_the_same_write() -> None:
    """Two subagents open at the cut: the plan creates a continuation stream for each
    (``NO_STREAM``, ``SubagentContinued`` twinned to ``BranchStarted``), and the branch's
    open chain is in their metadata (``BranchStarted`` -> outer -> inner), as on any line."""
    top = branch_stream(SID, "draft")
    originals = [f"AgentSubsession-{SID}-sub-billing-h1", f"AgentSubsession-{SID}-sub-refunds-h2"]
    continuations = [f"AgentSubsession-{SID}-sub-billing-c1", f"AgentSubsession-{SID}-sub-r-c2"]
    places = [ev.StreamPlace(stream, 3, "ee" * 32) for stream in originals]
    grants: list[Any] = [{"scopes": []}, None]
    continued = [
        ev.SubagentContinued(f"sub-{n}", agent, source, call, stream, parent, places[n], grants[n])
        for n, (agent, source, call, stream, parent) in enumerate(
            [
                ("billing", "triage", "h1", continuations[0], top),
                ("refunds", "billing", "h2", continuations[1], continuations[0]),
            ]
        )
    ]
    started = ev.BranchStarted(
        session_id=SID,
        branch="draft",
        branch_stream=top,
        parent="main",
        cut=ev.Cut("index", 7, 40),
        base=(ev.StreamPlace(MAIN, 3, "ab" * 32), *places),
        authority=None,
        next_index=7,
        prefix_items=7,
        continuations=dict(zip(originals, continuations, strict=True)),
    )
    tree = SessionTree(MAIN)
    tree.loaded_with({MAIN: 5}, {MAIN: "cd" * 32})

    def planned(nonce: str) -> Any:
        return plan_fork(
            tree,
            SessionFacts(SID, MAIN),
            started,
            next_index=10,
            registry=(-1, ""),
            nonce=nonce,
            trace={},
            continued=continued,
        )

    plan = planned("n")
    assert plan.streams == [MAIN, top, branches_stream(SID), *continuations]
    requests = {request.stream: request for request in plan.requests}
    (first,) = requests[top].events
    assert first.metadata[ev.OPEN_KEY] == continuations[0]
    for n, stream in enumerate(continuations):
        request = requests[stream]
        assert request.expected == StreamState.NO_STREAM
        (event,) = request.events
        assert event.type == ev.SUBAGENT_CONTINUED
        assert ev.SubagentContinued.decode(event.data) == continued[n]
        assert event.metadata[ev.TWIN_KEY] == str(first.id)
        assert event.metadata[ev.NEXT_INDEX_KEY] == "7"
        assert event.metadata.get(ev.OPEN_KEY) == (continuations[1] if n == 0 else None)
        assert event.metadata["aj.prev"] == GENESIS
    assert plan.foreign >= {top, *continuations}
    assert dict(plan.commit.heads) == {MAIN: 6}  # the tree takes on its marker only
    # The same nonce plans the same ids (a retry is recognised); another, other ids.
    assert [e.id for r in planned("n").requests for e in r.events] == [
        e.id for r in plan.requests for e in r.events
    ]
    assert requests[continuations[0]].events[0].id not in {
        e.id for r in planned("m").requests for e in r.events
    }
    # A reader finds the subagent a continuation runs, with the original's grant.
    recorded = RecordedEvent(
        id=requests[continuations[0]].events[0].id,
        type=ev.SUBAGENT_CONTINUED,
        data=requests[continuations[0]].events[0].data,
        metadata=requests[continuations[0]].events[0].metadata,
        stream=continuations[0],
        revision=0,
        position=1,
        recorded_at=datetime.now(UTC),
    )
    subagent, grant = subagent_opened(recorded)
    assert (subagent.agent_name, subagent.stream, subagent.parent_stream) == (
        "billing",
        continuations[0],
        top,
    )
    assert grant == {"scopes": []}
    assert continues(recorded) == places[0]


@pytest.mark.slow
async def test_forks_of_a_branch_inside_its_continuations(journal: Journal) -> None:
    """A branch forked inside nested subagents is forked again: at its head (its
    continuations are open: the new branch continues the continuations, whose readers go
    on down to main's originals) and in its prefix (main's originals are continued
    directly). Every line reads exactly, and a run on the deepest closes its own."""
    store = journal.store
    main = journal.session(SID)
    await drive(nested(), "Why was I charged twice?", session=main, hooks=main)
    history = await main.get_items()
    await main.fork(at=7, name="one")
    one = journal.session(SID, branch="one")
    # No user message: a write that begins no new run stays inside the open subagents.
    extra: Any = {"role": "assistant", "content": "written inside refunds' continuation"}
    await one.add_items([extra])
    first = await _started(store, "one")
    inner = first.continuations[first.base[2].stream]
    assert (await store.read(inner))[-1].type == "AssistantTextGenerated"

    await one.fork(name="two")  # at one's head: both continuations open
    second = await _started(store, "two")
    assert [p.stream for p in second.base] == [
        branch_stream(SID, "one"),
        first.continuations[first.base[1].stream],
        inner,
    ]
    await one.fork(at=4, name="low")  # in one's prefix: billing open, refunds not yet
    low = await _started(store, "low")
    assert [p.stream for p in low.base] == [MAIN, first.base[1].stream]

    two = journal.session(SID, branch="two")
    await _agrees(store, two, [*history[:7], extra])
    await _agrees(store, journal.session(SID, branch="low"), history[:4])
    await _agrees(store, one, [*history[:7], extra])
    assert [s.agent_name for s in await two.open_subagents()] == ["billing", "refunds"]
    await drive(top_level(), "Anything else?", session=two, hooks=two)
    own = await _reference("run", [(top_level, "Anything else?")])
    await _agrees(store, two, [*history[:7], extra, *own])
    await _agrees(store, one, [*history[:7], extra])
    assert [s.agent_name for s in await one.open_subagents()] == ["billing", "refunds"]
    assert await two.open_subagents() == []
    await _verifies(journal.store)


async def test_a_fork_between_a_handoff_and_its_acknowledgement_keeps_the_narrowing(
    journal: Journal,
) -> None:
    """The handoff's grant is in the write of its call and acknowledgement, its log entry
    after both: a cut between them (billing open at it) still inherits the narrowing, so
    a run that starts at billing on the branch is capped (authority never widens across a
    fork)."""
    main = journal.session(SID, policy=refund_policy())
    assert await refund(main, 100) == [100]  # billing uncapped on the log
    await drive(handing_off(), "hello", session=main, hooks=main)  # narrows billing
    items = await main.get_items()
    (ack,) = [
        n
        for n, item in enumerate(items)
        if item.get("type") == "function_call_output" and item.get("call_id") == "h1"
    ]
    await main.fork(at=ack, name="between")
    started = await _started(journal.store, "between")
    assert len(started.base) == 2  # billing is open at the cut
    assert started.authority is not None
    line = journal.session(SID, branch="between", policy=refund_policy())
    assert await refund(line, 9000) == []
    assert await refund(line, 100) == [100]
    await _verifies(journal.store)
