"""The pure write plans (engine/plan.py), directly: for a tree, the session's facts, a run
and items, the exact appends — streams, expected revisions, types, ids, indices, twins,
chain links — and the commit the tree takes on. No store, no SDK."""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from agentjournal import events
from agentjournal._digests import data_digest
from agentjournal.authority import Authority, Cap, Policy, ToolRule
from agentjournal.engine.approvals import Approval
from agentjournal.engine.checkpoints import plan_checkpoint
from agentjournal.engine.codec import exact_json
from agentjournal.engine.items import earlier_calls
from agentjournal.engine.plan import (
    Ask,
    Grant,
    ItemsPlan,
    Produced,
    Responded,
    SessionFacts,
    WritePlan,
)
from agentjournal.engine.plan_control import plan_control
from agentjournal.engine.plan_items import plan_items
from agentjournal.engine.plan_log import plan_log, run_grant
from agentjournal.engine.sealing import seal_event
from agentjournal.engine.timeline import Clear, Entry, Pop
from agentjournal.engine.tree import AuthorityLog, Commit, SessionTree
from agentjournal.ledger import redaction
from agentjournal.ledger.chain import CHAIN_KEY, GENESIS, HASH_KEY, PREV_KEY, SEQ_KEY, chain_hash
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import SigningKey, signed_event_id
from agentjournal.store.contract import AppendRequest, NewEvent, StreamState, event_id
from agentjournal.streams import subagent_id, subsession_stream

SID = "s1"
S = "AgentSession-s1"
A = "AgentSubsession-s1-sub-billing-h1"  # billing, opened by triage's handoff h1
B = "AgentSubsession-s1-sub-refunds-h2"  # refunds, opened by billing's handoff h2
LOG = "AgentAuthority-s1"
NOW = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)
TRACE = {
    events.TRACE_ID_KEY: "0af7651916cd43dd8448eb211c80319c",
    events.SPAN_ID_KEY: "b7ad6b7169203331",
}
NONCE = "5f0c"
H_S, H_A, H_B, H_LOG = "a" * 64, "b" * 64, "c" * 64, "d" * 64

BILLING = events.Subagent("sub-billing-h1", "billing", "triage", "h1", A, S, "")
REFUNDS = events.Subagent("sub-refunds-h2", "refunds", "billing", "h2", B, A, "")
POLICY = Policy(
    agents={"triage": Authority.of("billing.*"), "billing": Authority.of("billing.read")},
    tools={"refund": ToolRule("billing.refund", {"spend": "amount_cents"})},
)
HELD = Authority.of("billing.read", spend=Cap(5000))


@dataclass
class Run:
    """What the adapter's run state tells a write (a RunView)."""

    identity: Any = None
    speaker: str | None = "triage"
    handoffs: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    grants: list[Grant] = field(default_factory=list)
    finished: str | None = None
    produced: dict[str, Produced] = field(default_factory=dict)  # by item id
    responses: list[Responded] = field(default_factory=list)
    asks: dict[str, Ask] = field(default_factory=dict)
    decisions: dict[str, bool] = field(default_factory=dict)  # call id -> approved

    def produced_by(self, item: Mapping[str, Any]) -> Produced | None:
        return self.produced.get(str(item.get("id")))

    def tool_call_times(self, call_id: str) -> tuple[str, str] | None:
        return None

    def decided(self, call_id: str, tool: str) -> bool | None:
        return self.decisions.get(call_id)

    def same_run(self, run: Any) -> bool:
        return run is not None and run is self.identity


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def said(text: str, item_id: str = "msg_1") -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "id": item_id,
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def output(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def tree_at(heads: Mapping[str, int], *chain: events.Subagent) -> SessionTree:
    """A tree that has read ``heads`` (hashes as in :data:`HASHES`), with subagents open."""
    tree = SessionTree(S)
    tree.loaded_with(heads, {stream: HASHES[stream] for stream in heads})
    for subagent in chain:
        tree.opened(subagent, None)
    return tree


HASHES = {S: H_S, A: H_A, B: H_B}


def facts(**changes: Any) -> SessionFacts:
    return SessionFacts(SID, S, **changes)


def items_plan(
    tree: SessionTree, items: list[dict[str, Any]], run: Run | None = None, **options: Any
) -> ItemsPlan:
    options.setdefault("first_index", 0)
    plan = plan_items(
        tree,
        options.pop("facts", facts()),
        run or Run(),
        items,
        nonce=NONCE,
        now=NOW,
        trace=TRACE,
        **options,
    )
    assert plan is not None
    return plan


def ids(count: int) -> list[uuid.UUID]:
    """The ids of a write with :data:`NONCE`, in the order its events are made."""
    return [event_id(S, NONCE, n) for n in range(count)]


def by_stream(plan: WritePlan) -> dict[str, list[NewEvent]]:
    return {request.stream: list(request.events) for request in plan.requests}


def types(new: list[NewEvent]) -> list[str]:
    return [event.type for event in new]


def chained(request: AppendRequest, prev: str) -> str:
    """Check each event's chain keys from ``prev`` on (as a verifier would); the last hash."""
    expected = request.expected
    start = 0 if expected is StreamState.NO_STREAM else int(expected) + 1  # type: ignore[arg-type]
    for offset, event in enumerate(request.events):
        revision = start + offset
        assert event.metadata[SEQ_KEY] == str(revision)
        assert event.metadata[PREV_KEY] == (GENESIS if revision == 0 else prev)
        digest = chain_hash(
            request.stream,
            revision,
            str(event.id),
            event.type,
            data_digest(event.data),
            event.metadata,
        )
        assert event.metadata[HASH_KEY] == digest
        prev = digest
    return prev


def body(event: NewEvent) -> Any:
    return json.loads(event.data)


# -- plan_items: plain items -------------------------------------------------------------


def test_the_first_write_starts_the_session() -> None:
    items = [user("Why was I charged twice?"), said("Let me look.")]
    plan = items_plan(SessionTree(S), items, facts=facts(app_name="app", user_id="u-7"))
    (request,) = plan.requests
    assert (request.stream, request.expected) == (S, StreamState.NO_STREAM)
    new = list(request.events)
    assert types(new) == ["SessionStarted", "UserMessageReceived", "AssistantTextGenerated"]
    assert [event.id for event in new] == ids(3)
    started = body(new[0])
    # The agent speaking now names the session when the session object names none.
    assert (started["app_name"], started["user_id"], started["agent_name"]) == (
        "app",
        "u-7",
        "triage",
    )
    assert [event.metadata.get(events.INDEX_KEY) for event in new] == [None, "0", "1"]
    for event in new:
        assert event.metadata[events.NEXT_INDEX_KEY] == "2"  # where indices continue, after it
        assert event.metadata[events.SCHEMA_VERSION_KEY] == "2"
        assert {k: event.metadata[k] for k in TRACE} == TRACE
        assert events.OPEN_KEY not in event.metadata
    assert body(new[1])["extensions"]["openai"]["item_json"] == exact_json(items[0])
    last = chained(request, GENESIS)
    assert plan.commit == Commit(
        heads={S: 2},
        hashes={S: last},
        entries=[
            Entry(S, 1, 0, 0, exact_json(items[0])),
            Entry(S, 2, 0, 1, exact_json(items[1])),
        ],
        written=3,
        chain=[],
        next_index=2,
        call_owner=OrderedDict(),
        run=None,
        grants={},
        authority=None,
    )
    assert (plan.closed, plan.opened, plan.shown) == (0, set(), ())


def test_a_write_continues_after_the_revision_the_tree_last_saw() -> None:
    run = Run(identity=object())
    plan = items_plan(tree_at({S: 4}), [user("again")], run, first_index=7)
    (request,) = plan.requests
    assert request.expected == 4  # exact: another writer in between is a conflict
    (event,) = request.events
    assert event.type == "UserMessageReceived"
    assert (event.metadata[events.INDEX_KEY], event.metadata[events.NEXT_INDEX_KEY]) == ("7", "8")
    assert (event.metadata[SEQ_KEY], event.metadata[PREV_KEY]) == ("5", H_S)
    assert plan.commit.heads == {S: 5}
    assert plan.commit.hashes == {S: chained(request, H_S)}
    assert plan.commit.next_index == 8
    assert plan.commit.run is run.identity


def test_the_same_nonce_plans_the_same_write() -> None:
    items = [user("hi"), call("t1", "lookup"), output("t1", "ok")]
    first = items_plan(tree_at({S: 0}), items)
    again = items_plan(tree_at({S: 0}), items)
    assert first.requests == again.requests  # ids, data, metadata: a retry is recognised
    other = plan_items(
        tree_at({S: 0}), facts(), Run(), items, first_index=0, nonce="other", now=NOW, trace=TRACE
    )
    assert other is not None
    assert not {e.id for e in first.requests[0].events} & {e.id for e in other.requests[0].events}


def test_a_write_of_nothing_plans_nothing() -> None:
    for tree in (SessionTree(S), tree_at({S: 3})):
        assert (
            plan_items(tree, facts(), Run(), [], first_index=0, nonce=NONCE, now=NOW, trace=TRACE)
            is None
        )


def test_an_item_the_hooks_saw_produced_carries_its_usage_and_response() -> None:
    usage = '{"input_tokens":100,"output_tokens":20}'
    run = Run(
        produced={
            "msg_1": Produced("resp_1", usage, "billing"),
            "fc_1": Produced("resp_2", usage, "billing"),
            "out_1": Produced("resp_2", usage, "billing"),
        }
    )
    items = [
        said("Checking.", "msg_1"),
        {**call("t1", "lookup"), "id": "fc_1"},
        {**output("t1", "ok"), "id": "out_1"},
        said("Unseen.", "msg_2"),
    ]
    new = by_stream(items_plan(tree_at({S: 0}), items, run))[S]
    assert types(new) == [
        "AssistantTextGenerated",
        "AssistantToolCallsGenerated",
        "ToolResultReceived",
        "AssistantTextGenerated",
    ]
    for event in new[:2]:
        assert event.metadata[events.USAGE_KEY] == usage
        assert event.metadata[events.RESPONSE_ID_KEY] in ("resp_1", "resp_2")
    assert body(new[0])["author_name"] == "billing"  # who produced it, not who speaks now
    for event in new[2:]:  # an output is no model output; msg_2 the hooks never saw
        assert events.USAGE_KEY not in event.metadata
        assert events.RESPONSE_ID_KEY not in event.metadata
    assert body(new[3])["author_name"] == "triage"


def test_tool_calls_carry_what_a_verifier_checks_without_the_payload() -> None:
    items = [
        call("t1", "refund", '{"amount_cents": 1250}'),
        call("t2", "lookup"),
        output("t1", "done"),
        {"__enc__": 1, "v": 1, "kid": "k", "payload": "opaque"},
    ]
    new = by_stream(items_plan(tree_at({S: 0}), items, facts=facts(policy=POLICY, guarded=True)))[S]
    rule = '{"ceilings":{"spend":"amount_cents"},"scope":"billing.refund"}'
    metadata = [{k: v for k, v in e.metadata.items() if k.startswith("aj.")} for e in new]
    assert metadata[0] == {
        **_common(metadata[0]),
        events.CALL_ID_KEY: "t1",
        events.ITEM_TYPE_KEY: "function_call",
        events.GUARDED_KEY: "1",
        events.POLICY_KEY: POLICY.digest,
        events.TOOL_RULE_KEY: rule,
        events.REDACTED_KEY: metadata[0][events.REDACTED_KEY],
    }
    assert metadata[1][events.TOOL_RULE_KEY] == "null"  # no rule: a verifier expects a refusal
    assert {k: metadata[2].get(k) for k in (events.CALL_ID_KEY, events.ITEM_TYPE_KEY)} == {
        events.CALL_ID_KEY: "t1",
        events.ITEM_TYPE_KEY: "function_call_output",
    }
    assert events.GUARDED_KEY not in metadata[2]
    assert events.POLICY_KEY not in metadata[2]
    assert metadata[3][events.OPAQUE_KEY] == "1"


def _common(metadata: Mapping[str, str]) -> dict[str, str]:
    keys = (events.INDEX_KEY, events.NEXT_INDEX_KEY, SEQ_KEY, PREV_KEY, CHAIN_KEY, HASH_KEY)
    return {k: metadata[k] for k in keys}


def test_without_a_policy_or_guardrail_a_call_says_only_what_it_is() -> None:
    (event,) = by_stream(items_plan(tree_at({S: 0}), [call("t1", "refund")]))[S]
    assert {k for k in event.metadata if k.startswith("aj.")} == {
        events.INDEX_KEY,
        events.NEXT_INDEX_KEY,
        events.CALL_ID_KEY,
        events.ITEM_TYPE_KEY,
        events.REDACTED_KEY,
        SEQ_KEY,
        PREV_KEY,
        CHAIN_KEY,
        HASH_KEY,
    }


# -- plan_items: subagents ----------------------------------------------------------------


def test_a_handoff_opens_a_subagent_with_twins_on_both_streams() -> None:
    handoff = call("h1", "transfer_to_billing", '{"reason":"refund"}')
    ack = output("h1", '{"assistant": "billing"}')
    run = Run(handoffs={"h1": ("triage", "billing")})
    plan = items_plan(tree_at({S: 2}), [handoff, ack], run, first_index=3)
    assert [(r.stream, r.expected) for r in plan.requests] == [
        (S, 2),
        (A, StreamState.NO_STREAM),  # a subsession is always new
    ]
    new = by_stream(plan)
    assert types(new[S]) == ["SubagentStarted"]
    assert types(new[A]) == ["SubagentStarted", "ToolResultReceived"]
    owner, twin, acked = new[S][0], new[A][0], new[A][1]
    assert [owner.id, twin.id, acked.id] == ids(3)
    assert owner.metadata[events.TWIN_KEY] == str(twin.id)
    assert twin.metadata[events.TWIN_KEY] == str(owner.id)
    assert owner.metadata[events.INDEX_KEY] == "3"
    assert events.INDEX_KEY not in twin.metadata  # the twin is no item
    assert acked.metadata[events.INDEX_KEY] == "4"  # the acknowledgement is the receiver's first
    assert owner.metadata[events.OPEN_KEY] == A  # after it, the parent's open child is billing
    assert events.OPEN_KEY not in twin.metadata
    for event in (owner, twin, acked):
        assert event.metadata[events.NEXT_INDEX_KEY] == "5"
    subagent, item_json = events.decode_subagent_started(owner.data)
    assert subagent == events.Subagent(
        "sub-billing-h1", "billing", "triage", "h1", A, S, '{"reason":"refund"}'
    )
    assert item_json == exact_json(handoff)
    assert events.decode_subagent_started(twin.data) == (subagent, None)
    assert body(owner)["extensions"]["openai"]["twin_event_id"] == str(twin.id)
    assert body(twin)["extensions"]["openai"]["twin_event_id"] == str(owner.id)
    assert chained(plan.requests[1], GENESIS) == plan.commit.hashes[A]
    assert chained(plan.requests[0], H_S) == plan.commit.hashes[S]
    commit = plan.commit
    assert commit.heads == {S: 3, A: 1}
    assert commit.entries == [Entry(S, 3, 0, 3, item_json), Entry(A, 1, 0, 4, exact_json(ack))]
    assert commit.chain == [subagent]
    assert commit.call_owner == OrderedDict()  # the handoff's output has come
    assert commit.grants == {A: None}
    assert commit.next_index == 5
    assert (plan.opened, plan.closed) == ({A}, 0)


def test_a_subsession_name_already_taken_gets_the_items_index() -> None:
    run = Run(handoffs={"h1": ("triage", "billing")})
    plan = items_plan(
        tree_at({S: 2}), [call("h1", "transfer_to_billing")], run, first_index=3, taken={A}
    )
    renamed = subsession_stream(SID, subagent_id("billing", "h1.3"))
    assert plan.streams == [S, renamed]
    assert plan.opened == {renamed}


def test_items_of_an_open_subagent_go_to_its_stream_with_the_parent_named_open() -> None:
    tree = tree_at({S: 3, A: 1}, BILLING)
    plan = items_plan(tree, [call("t9", "lookup"), output("t9", "ok")], first_index=5)
    assert [(r.stream, r.expected) for r in plan.requests] == [(A, 1)]
    assert types(by_stream(plan)[A]) == ["AssistantToolCallsGenerated", "ToolResultReceived"]
    assert all(events.OPEN_KEY not in e.metadata for e in plan.requests[0].events)
    assert plan.commit.chain == [BILLING]


def test_closing_completes_every_open_subagent_innermost_first() -> None:
    tree = tree_at({S: 3, A: 4, B: 1}, BILLING, REFUNDS)
    plan = items_plan(tree, [], first_index=9, closing=("error", "the run failed"))
    assert [(r.stream, r.expected) for r in plan.requests] == [(B, 1), (A, 4), (S, 3)]
    new = by_stream(plan)
    assert types(new[B]) == ["SubagentCompleted"]
    assert types(new[A]) == ["SubagentCompleted", "SubagentCompleted"]
    assert types(new[S]) == ["SubagentCompleted"]
    refunds_own, refunds_parent, billing_own, billing_parent = (
        new[B][0],
        new[A][0],
        new[A][1],
        new[S][0],
    )
    # Each close: the subsession's own copy first, then the parent's.
    assert [refunds_own.id, refunds_parent.id, billing_own.id, billing_parent.id] == ids(4)
    for own, parent, closed in ((refunds_own, refunds_parent, B), (billing_own, billing_parent, A)):
        assert own.metadata[events.TWIN_KEY] == str(parent.id)
        assert parent.metadata[events.TWIN_KEY] == str(own.id)
        assert parent.metadata[events.CLOSES_KEY] == closed
        assert events.CLOSES_KEY not in own.metadata
        for copy in (own, parent):
            _, stream, outcome = events.decode_subagent_completed(copy.data)
            assert (stream, outcome) == (closed, "error")
            assert body(copy)["extensions"]["openai"]["reason"] == "the run failed"
            assert body(copy)["extensions"]["openai"]["twin_event_id"] == str(
                parent.id if copy is own else own.id
            )
    # The parent's copy covers the subsession's whole chain, its own copy included.
    assert refunds_parent.metadata[events.CLOSES_HASH_KEY] == refunds_own.metadata[HASH_KEY]
    assert billing_parent.metadata[events.CLOSES_HASH_KEY] == billing_own.metadata[HASH_KEY]
    for event in (refunds_own, refunds_parent, billing_own, billing_parent):
        assert events.OPEN_KEY not in event.metadata  # nothing is open after the write
        assert event.metadata[events.NEXT_INDEX_KEY] == "9"
    hashes = {r.stream: chained(r, HASHES[r.stream]) for r in plan.requests}
    assert plan.commit.heads == {B: 2, A: 6, S: 4}
    assert plan.commit.hashes == hashes
    assert plan.commit.chain == []
    assert plan.commit.entries == []
    assert plan.commit.next_index == 9
    assert plan.closed == 2


def test_a_finished_run_closes_its_subagents_after_its_last_item() -> None:
    tree = tree_at({S: 3, A: 4}, BILLING)
    reply = said("Refunded 12.50 EUR.")
    plan = items_plan(tree, [reply], Run(finished="Refunded 12.50 EUR."), first_index=8)
    new = by_stream(plan)
    assert types(new[A]) == ["AssistantTextGenerated", "SubagentCompleted"]
    assert types(new[S]) == ["SubagentCompleted"]
    for copy in (new[A][1], new[S][0]):
        assert (body(copy)["outcome"], body(copy)["summary"]) == ("success", "Refunded 12.50 EUR.")
        assert "reason" not in body(copy)["extensions"]["openai"]
    assert plan.commit.entries == [Entry(A, 5, 0, 8, exact_json(reply))]
    assert plan.commit.chain == []


def test_a_new_run_closes_what_an_earlier_run_left_open_then_writes_at_the_top() -> None:
    tree = tree_at({S: 3, A: 4}, BILLING)
    plan = items_plan(tree, [user("Hello again")], Run(identity=object()), first_index=8)
    new = by_stream(plan)
    assert types(new[A]) == ["SubagentCompleted"]
    assert types(new[S]) == ["SubagentCompleted", "UserMessageReceived"]
    assert body(new[S][0])["outcome"] == "error"
    assert "next run began" in body(new[S][0])["extensions"]["openai"]["reason"]
    assert plan.commit.entries == [Entry(S, 5, 0, 8, exact_json(user("Hello again")))]


def test_the_run_that_wrote_inside_a_subagent_keeps_writing_there() -> None:
    run = Run(identity=object())
    tree = tree_at({S: 3, A: 4}, BILLING)
    tree.apply(Commit(heads={}, hashes={}, run=run.identity))  # this run wrote inside billing
    plan = items_plan(tree, [user("and the other order?")], run, first_index=8)
    assert plan.streams == [A]
    assert plan.closed == 0


def test_a_subsession_name_still_followed_is_planned_as_a_new_stream() -> None:
    # A new run closes billing (h1) and hands off with the call id h1 again: the receiver's
    # stream is named as the one just closed. It must be new, so the store refuses the
    # write and the session plans it again under another name (never appends to it).
    tree = tree_at({S: 3, A: 4}, BILLING)
    run = Run(identity=object(), handoffs={"h1": ("triage", "billing")})
    plan = items_plan(tree, [user("again"), call("h1", "transfer_to_billing")], run, first_index=8)
    assert types(by_stream(plan)[A]) == ["SubagentCompleted", "SubagentStarted"]
    assert {r.stream: r.expected for r in plan.requests}[A] is StreamState.NO_STREAM
    assert plan.opened == {A}


# -- plan_items: hiding ---------------------------------------------------------------------


@pytest.mark.parametrize(("chain", "innermost"), [((), S), ((BILLING,), A)])
def test_what_a_write_hides_goes_first_to_the_innermost_stream(
    chain: tuple[events.Subagent, ...], innermost: str
) -> None:
    tree = tree_at({S: 5, A: 2} if chain else {S: 5}, *chain)
    popped = Entry(S, 2, 1, 2, exact_json(user("old")))  # the second item of a foreign event
    replacement = said("summary")  # no user message: that would begin a new run
    plan = items_plan(tree, [replacement], first_index=6, hides=[popped, Clear(4)])
    new = by_stream(plan)[innermost]
    assert types(new) == [events.ITEM_POPPED, events.SESSION_CLEARED, "AssistantTextGenerated"]
    assert events.ItemPopped.decode(new[0].data) == events.ItemPopped(S, 2, 1, 2)
    assert events.SessionCleared.decode(new[1].data) == events.SessionCleared(4)
    assert [e.metadata.get(events.INDEX_KEY) for e in new] == [None, None, "6"]
    head = 2 if chain else 5
    assert plan.commit.entries == [
        Pop((S, 2, 1)),
        Clear(4),
        Entry(innermost, head + 3, 0, 6, exact_json(replacement)),
    ]


def test_hiding_alone_is_a_write() -> None:
    plan = items_plan(tree_at({S: 5}), [], first_index=6, hides=[Clear(5)])
    assert types(by_stream(plan)[S]) == [events.SESSION_CLEARED]
    assert plan.commit.next_index == 6


# -- plan_items: grants and the authority log ----------------------------------------------


def test_a_handoffs_grant_rides_its_subagent_started_and_the_authority_log() -> None:
    grant = Grant("triage", "billing", HELD, call_id="h1")
    run = Run(handoffs={"h1": ("triage", "billing")}, grants=[grant])
    plan = items_plan(
        tree_at({S: 2}),
        [call("h1", "transfer_to_billing")],
        run,
        facts=facts(policy=POLICY),
        first_index=3,
        log=AuthorityLog(),
    )
    assert [(r.stream, r.expected) for r in plan.requests] == [
        (S, 2),
        (A, StreamState.NO_STREAM),
        (LOG, StreamState.NO_STREAM),
    ]
    new = by_stream(plan)
    text = json.dumps(HELD.to_json(), sort_keys=True, separators=(",", ":"))
    for copy in (new[S][0], new[A][0]):
        assert body(copy)["extensions"]["agentjournal"]["granted_authority"] == text
    assert types(new[LOG]) == [events.POLICY_RECORDED, events.AUTHORITY_HELD]
    recorded = events.PolicyRecorded.decode(new[LOG][0].data)
    assert recorded == events.PolicyRecorded(POLICY.digest, POLICY.to_json())
    held = events.AuthorityHeld.decode(new[LOG][1].data)
    assert held == events.AuthorityHeld(
        "billing",
        HELD.to_json(),
        "handoff",
        str(new[S][0].id),  # the parent's copy of SubagentStarted
        S,
        POLICY.digest,
        {"billing": HELD.to_json()},
    )
    for entry in new[LOG]:  # the log carries the trace, nothing of the session's streams
        assert set(entry.metadata) == {
            events.SCHEMA_VERSION_KEY,
            *TRACE,
            SEQ_KEY,
            PREV_KEY,
            CHAIN_KEY,
            HASH_KEY,
        }
    last = chained(plan.requests[2], GENESIS)
    assert plan.commit.authority == AuthorityLog(
        1, last, POLICY.digest, {"billing": HELD.to_json()}
    )
    assert plan.commit.grants == {A: HELD.to_json()}
    assert plan.shown == (grant,)


def test_a_log_that_has_the_policy_continues_at_its_head() -> None:
    grant = Grant("triage", "billing", HELD, call_id="h1")
    run = Run(handoffs={"h1": ("triage", "billing")}, grants=[grant])
    before = {"triage": Authority.of("billing.*").to_json()}
    plan = items_plan(
        tree_at({S: 2}),
        [call("h1", "transfer_to_billing")],
        run,
        facts=facts(policy=POLICY),
        first_index=3,
        log=AuthorityLog(3, H_LOG, POLICY.digest, before),
    )
    request = plan.requests[2]
    assert (request.stream, request.expected) == (LOG, 3)
    assert types(list(request.events)) == [events.AUTHORITY_HELD]  # no PolicyRecorded again
    assert request.events[0].metadata[PREV_KEY] == H_LOG
    after = {**before, "billing": HELD.to_json()}
    assert events.AuthorityHeld.decode(request.events[0].data).held == after
    assert plan.commit.authority == AuthorityLog(4, chained(request, H_LOG), POLICY.digest, after)


def test_a_grant_this_write_does_not_show_is_recorded_after_its_items() -> None:
    grant = Grant("triage", "billing", HELD)  # the hooks saw the handoff; its call is not here
    plan = items_plan(
        tree_at({S: 2}),
        [user("hi")],
        Run(grants=[grant]),
        facts=facts(policy=POLICY),
        first_index=3,
        log=AuthorityLog(),
    )
    new = by_stream(plan)
    assert types(new[S]) == ["UserMessageReceived", events.AUTHORITY_GRANTED]
    granted = new[S][1]
    assert body(granted) == {
        "agent": "billing",
        "authority": HELD.to_json(),
        "cause": "handoff",
        "sender": "triage",
    }
    assert events.INDEX_KEY not in granted.metadata
    held = events.AuthorityHeld.decode(new[LOG][1].data)
    assert (held.event, held.stream, held.cause) == (str(granted.id), S, "handoff")
    assert plan.shown == ()
    assert plan.commit.grants == {}


# -- plan_control ---------------------------------------------------------------------------


def test_a_control_event_goes_right_after_its_streams_head() -> None:
    popped = events.ItemPopped(S, 3, 0, 3)
    entries = [Pop((S, 3, 0))]
    plan = plan_control(
        tree_at({S: 4}),
        facts(),
        S,
        events.ITEM_POPPED,
        popped.encode(),
        next_index=9,
        metadata={**TRACE, "x-note": "kept"},
        entries=entries,
    )
    (request,) = plan.requests
    assert (request.stream, request.expected) == (S, 4)
    (event,) = request.events
    assert (event.type, event.data) == (events.ITEM_POPPED, popped.encode())
    assert event.id.version == 4  # no retry plans it again with other inputs: a random id
    assert {k: v for k, v in event.metadata.items() if k not in (HASH_KEY,)} == {
        **TRACE,
        "x-note": "kept",
        events.NEXT_INDEX_KEY: "9",
        events.SCHEMA_VERSION_KEY: "2",
        SEQ_KEY: "5",
        PREV_KEY: H_S,
        CHAIN_KEY: "2",
    }
    assert plan.commit == Commit(
        heads={S: 5}, hashes={S: chained(request, H_S)}, entries=entries, written=1
    )


def test_a_control_event_starts_a_stream_that_does_not_exist() -> None:
    plan = plan_control(
        SessionTree(S),
        facts(),
        S,
        events.SESSION_CLEARED,
        b'{"through_index": -1}',
        next_index=0,
        metadata={},
    )
    (request,) = plan.requests
    assert request.expected is StreamState.NO_STREAM
    assert request.events[0].metadata[SEQ_KEY] == "0"
    assert request.events[0].metadata[PREV_KEY] == GENESIS


def test_a_control_event_on_a_parent_names_the_subagent_open_below_it() -> None:
    tree = tree_at({S: 4, A: 2}, BILLING)
    on_parent = plan_control(
        tree, facts(), S, events.AUTHORITY_GRANTED, b"{}", next_index=7, metadata={}
    )
    on_child = plan_control(
        tree, facts(), A, events.AUTHORITY_GRANTED, b"{}", next_index=7, metadata={}
    )
    assert on_parent.requests[0].events[0].metadata[events.OPEN_KEY] == A
    assert events.OPEN_KEY not in on_child.requests[0].events[0].metadata


def test_a_runs_grant_and_its_log_entry_are_one_write() -> None:
    data = run_grant("triage", HELD)
    plan = plan_control(
        tree_at({S: 4}),
        facts(policy=POLICY),
        S,
        events.AUTHORITY_GRANTED,
        data,
        next_index=7,
        metadata={**TRACE, "x-note": "not on the log"},
        held=("triage", HELD.to_json()),
        log=AuthorityLog(),
    )
    assert [(r.stream, r.expected) for r in plan.requests] == [
        (S, 4),
        (LOG, StreamState.NO_STREAM),
    ]
    granted = plan.requests[0].events[0]
    log = list(plan.requests[1].events)
    assert types(log) == [events.POLICY_RECORDED, events.AUTHORITY_HELD]
    held = events.AuthorityHeld.decode(log[1].data)
    assert (held.agent, held.cause, held.event, held.stream) == (
        "triage",
        "run",
        str(granted.id),
        S,
    )
    assert all("x-note" not in entry.metadata for entry in log)
    assert all(entry.metadata[events.TRACE_ID_KEY] == TRACE[events.TRACE_ID_KEY] for entry in log)
    assert plan.commit.authority == AuthorityLog(
        1, chained(plan.requests[1], GENESIS), POLICY.digest, {"triage": HELD.to_json()}
    )


def test_run_grant_is_compact_sorted_json() -> None:
    assert run_grant("triage", Authority.of("kb.read")) == (
        b'{"agent":"triage","authority":'
        + json.dumps(
            Authority.of("kb.read").to_json(), sort_keys=True, separators=(",", ":")
        ).encode()
        + b',"cause":"run"}'
    )


# -- plan_log -------------------------------------------------------------------------------


@pytest.mark.parametrize("policy_changed", [False, True])
def test_a_reset_writes_the_authority_log_alone(policy_changed: bool) -> None:
    before = {"triage": {"scopes": ["billing.*"]}, "billing": {"scopes": ["billing.read"]}}
    log = AuthorityLog(2, H_LOG, "old" if policy_changed else POLICY.digest, before)
    held = {"triage": before["triage"]}
    reset = events.AuthorityReset("billing", "a new ticket", POLICY.digest, held)
    plan = plan_log(
        facts(policy=POLICY), log, [(events.AUTHORITY_RESET, reset.encode())], held, TRACE
    )
    (request,) = plan.requests
    assert (request.stream, request.expected) == (LOG, 2)
    expected_types = [events.POLICY_RECORDED] if policy_changed else []
    assert types(list(request.events)) == [*expected_types, events.AUTHORITY_RESET]
    last = chained(request, H_LOG)
    assert plan.commit == Commit(
        heads={},
        hashes={},
        written=len(request.events),
        authority=AuthorityLog(2 + len(request.events), last, POLICY.digest, held),
    )


# -- plan_checkpoint ------------------------------------------------------------------------


@pytest.mark.parametrize("ledger", [(-1, GENESIS), (3, H_LOG)])
def test_a_checkpoint_signs_the_heads_at_the_next_place_of_the_ledger(
    ledger: tuple[int, str],
) -> None:
    key = SigningKey.generate()
    heads = {S: (4, H_S), A: (1, H_A)}
    plan, checkpoint = plan_checkpoint(SID, key, heads, ledger, now=NOW, trace=TRACE)
    (request,) = plan.requests
    head, prev = ledger
    assert request.stream == "AgentLedger-s1"
    assert request.expected == (StreamState.NO_STREAM if head < 0 else head)
    (event,) = request.events
    assert event.type == CHECKPOINT
    assert event.data == checkpoint.encode()
    assert event.id == signed_event_id("AgentLedger-s1", checkpoint.signature)
    assert checkpoint.verify(key.public_key)
    assert (checkpoint.session_id, dict(checkpoint.heads)) == (SID, heads)
    assert (checkpoint.sequence, checkpoint.previous) == (head + 1, prev)
    assert checkpoint.key_id == key.key_id
    # Everything on the event but its chain keys is signed.
    assert dict(checkpoint.metadata) == {events.SCHEMA_VERSION_KEY: "2", **TRACE}
    assert {
        k: v for k, v in event.metadata.items() if k not in (SEQ_KEY, PREV_KEY, CHAIN_KEY, HASH_KEY)
    } == (dict(checkpoint.metadata))
    sealed = chained(request, prev)
    assert plan.commit == Commit(heads={}, hashes={}, ledger=(head + 1, sealed), signed=True)
    assert Checkpoint.decode(json.loads(event.data)) == checkpoint


# -- seal_event -----------------------------------------------------------------------------


def test_seal_event_commits_the_redacted_view_then_chains() -> None:
    data = json.dumps({"tool_calls": []}).encode()
    for type_ in ("AssistantToolCallsGenerated", "UserMessageReceived"):
        metadata = {events.INDEX_KEY: "0", HASH_KEY: "stale"}
        shown = redaction.view(type_, data, dict(metadata))
        id_ = uuid.uuid4()
        digest = seal_event(S, 7, id_, type_, data, metadata, H_S)
        if shown is None:
            assert events.REDACTED_KEY not in metadata
        else:
            assert metadata[events.REDACTED_KEY] == redaction.view_digest(shown)
        assert (metadata[SEQ_KEY], metadata[PREV_KEY], metadata[HASH_KEY]) == ("7", H_S, digest)
        assert digest == chain_hash(S, 7, str(id_), type_, data_digest(data), metadata)
    assert redaction.view("AssistantToolCallsGenerated", data, {}) is not None
    assert redaction.view("UserMessageReceived", data, {}) is None


# -- model responses ----------------------------------------------------------------------


def responded(agent: str, n: int) -> Responded:
    return Responded(
        uuid.UUID(int=n),
        agent,
        f'{{"agent":"{agent}","n":{n}}}'.encode(),
        {"trace_id": "a" * 32, "span_id": "b" * 16, events.RESPONSE_ID_KEY: f"resp_{n}"},
    )


def test_responses_go_first_each_on_its_agents_stream_with_its_own_trace() -> None:
    # billing (A) handed to refunds (B); refunds' answer closes both; a response of each.
    run = Run(responses=[responded("billing", 1), responded("refunds", 2)], finished="done")
    plan = items_plan(tree_at({S: 3, A: 5, B: 2}, BILLING, REFUNDS), [said("done")], run)
    new = by_stream(plan)
    assert types(new[A])[0] == events.MODEL_RESPONDED
    assert types(new[B])[:2] == [events.MODEL_RESPONDED, "AssistantTextGenerated"]
    assert types(new[B])[-1] == events.SUBAGENT_COMPLETED  # the close comes after it
    first = new[A][0]
    assert first.id == uuid.UUID(int=1)  # its own id, the same on every attempt
    assert first.data == b'{"agent":"billing","n":1}'
    assert first.metadata["trace_id"] == "a" * 32  # its own trace, not the write's
    assert first.metadata[events.RESPONSE_ID_KEY] == "resp_1"
    assert first.metadata[events.SCHEMA_VERSION_KEY] == "2"
    assert SEQ_KEY in first.metadata
    assert list(plan.commit.responded) == [uuid.UUID(int=1), uuid.UUID(int=2)]


def test_a_response_of_an_agent_outside_the_chain_goes_to_the_session_stream() -> None:
    run = Run(responses=[responded("triage", 1)])
    plan = items_plan(tree_at({S: 3, A: 5}, BILLING), [], run, closing=("error", "stopped"))
    new = by_stream(plan)
    assert types(new[S])[0] == events.MODEL_RESPONDED
    assert types(new[A]) == [events.SUBAGENT_COMPLETED]


def test_responses_alone_are_a_write_and_landed_ones_are_not_planned_again() -> None:
    tree = tree_at({S: 3})
    run = Run(responses=[responded("triage", 1), responded("triage", 2)])
    plan = items_plan(tree, [], run)  # nothing else to write: still a write
    assert types(by_stream(plan)[S]) == [events.MODEL_RESPONDED] * 2
    tree.apply(plan.commit)
    assert list(tree.responded) == [uuid.UUID(int=1), uuid.UUID(int=2)]
    again = plan_items(tree, facts(), run, [], first_index=0, nonce=NONCE, now=NOW, trace=TRACE)
    assert again is None


def test_a_control_write_carries_the_pending_responses_before_its_event() -> None:
    tree = tree_at({S: 4, A: 1}, BILLING)
    run = Run(responses=[responded("billing", 1)])
    plan = plan_control(
        tree,
        facts(),
        A,
        events.GUARDRAIL_DECIDED,
        b"{}",
        next_index=9,
        metadata={**TRACE, events.TOOL_RULE_KEY: "null"},
        run=run,
    )
    (request,) = plan.requests
    assert [e.type for e in request.events] == [events.MODEL_RESPONDED, events.GUARDRAIL_DECIDED]
    response, decision = request.events
    assert events.TOOL_RULE_KEY not in response.metadata  # the decision's metadata is its own
    assert decision.metadata[events.TOOL_RULE_KEY] == "null"
    assert decision.metadata[PREV_KEY] == response.metadata[HASH_KEY]
    assert list(plan.commit.responded) == [uuid.UUID(int=1)]


def test_user_messages_are_numbered_on_from_the_last_turn() -> None:
    """Each user message of a write gets the next ``aj.turn``, keyed where its event
    lands; without ``last_turn`` nothing is numbered (readers count)."""
    items = [user("q"), said("a"), user("r")]
    plan = items_plan(SessionTree(S), items, last_turn=4)
    new = by_stream(plan)[S]
    assert types(new)[0] == "SessionStarted"
    assert [e.metadata.get(events.TURN_KEY) for e in new] == [None, "5", None, "6"]
    assert plan.turns == (((S, 1, 0), 5), ((S, 3, 0), 6))
    unnumbered = by_stream(items_plan(SessionTree(S), items))[S]
    assert all(events.TURN_KEY not in e.metadata for e in unnumbered)


# -- the run's own answer to a question that waits ---------------------------------------------


def waiting(request_id: str = "r1", stream: str = S) -> Approval:
    """A question on ``stream`` for call ``request_id`` with no answer and no output."""
    return Approval(request_id, "refund", "{}", "triage", stream, 3, str(ids(1)[0]), NOW)


@pytest.mark.parametrize("approved", [True, False])
def test_an_output_of_a_call_whose_question_waits_comes_right_after_the_run_s_answer(
    approved: bool,
) -> None:
    run = Run(decisions={"r1": approved})
    plan = items_plan(tree_at({S: 5}), [output("r1", "done")], run, unanswered={"r1": waiting()})
    (answer_event, output_event) = by_stream(plan)[S]  # one append: both land or neither
    assert types([answer_event, output_event]) == [events.INTERRUPT_RESOLVED, "ToolResultReceived"]
    answer = events.ApprovalDecided.decode(answer_event.data)
    assert answer.outcome == ("approved" if approved else "rejected")
    assert (answer.by, answer.source, answer.issued) == (
        events.RUN_STATE_BY,
        events.RUN_STATE,
        waiting().event_id,
    )
    assert answer_event.metadata[events.INTERRUPT_KEY] == events.TOOL_APPROVAL
    assert answer_event.metadata[events.CALL_ID_KEY] == "r1"


def test_no_answer_is_made_up_when_the_run_cannot_tell_or_the_question_is_elsewhere() -> None:
    for run, question in (
        (Run(), waiting()),  # the run does not know what was decided
        (Run(decisions={"r1": True}), waiting(stream=A)),  # asked on another stream
        (Run(decisions={"r1": True}), waiting("r2")),  # another call's question
    ):
        plan = items_plan(
            tree_at({S: 5}), [output("r1", "done")], run, unanswered={question.request_id: question}
        )
        assert types(by_stream(plan)[S]) == ["ToolResultReceived"]


def test_only_outputs_of_calls_an_earlier_write_made_can_have_a_question_waiting() -> None:
    owner = {"r1": A, "r2": S}
    items = [output("r1", "x"), call("r2", "refund"), output("r2", "y"), output("r3", "z")]
    assert earlier_calls(items, owner) == {"r1": A}
    assert earlier_calls([call("r1", "refund")], owner) == {}


def test_calls_with_ids_that_are_not_text_wait_for_nothing() -> None:
    """An item whose call id is not text (a list, a number) neither makes a call nor names
    one that could wait: no error, nothing waits."""
    from agentjournal.engine.items import earlier_calls

    items = [
        {"type": "function_call", "call_id": ["x"], "name": "t", "arguments": "{}"},
        {"type": "function_call_output", "call_id": ["x"], "output": "o"},
        {"type": "function_call_output", "call_id": 7, "output": "o"},
        {"type": "function_call_output", "call_id": "c1", "output": "o"},
    ]
    assert earlier_calls(items, {"c1": "S"}) == {"c1": "S"}
