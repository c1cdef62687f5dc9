"""plan_write, the pure routing of a write: where items go, which subagents open and close."""

from __future__ import annotations

from typing import Any

from agentjournal.engine.routing import Plan, looks_like_a_handoff, plan_write, starts_a_run
from agentjournal.events import Subagent

P = "AgentSession-s1"


def call(call_id: str, name: str = "lookup") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}"}


def output(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def plan(items: list[Any], **kwargs: Any) -> Plan:
    defaults: dict[str, Any] = {
        "session_id": "s1",
        "session_stream": P,
        "chain": [],
        "call_owner": {},
        "first_index": 0,
        "handoffs": {},
    }
    defaults.update(kwargs)
    return plan_write(items, **defaults)


def where(result: Plan) -> list[tuple[str, str, int | None]]:
    return [(op.kind, op.stream, op.index) for op in result.ops]


BILLING = "AgentSubsession-s1-sub-billing-h1"


def billing(parent: str = P) -> Subagent:
    return Subagent("sub-billing-h1", "billing", "triage", "h1", BILLING, parent, "")


def test_plain_items_go_to_the_session_stream_with_consecutive_indices() -> None:
    result = plan([user("hi"), call("t1"), output("t1")], first_index=7)
    assert where(result) == [("item", P, 7), ("item", P, 8), ("item", P, 9)]
    assert result.indexed == 3
    assert result.chain == []


def test_a_handoff_beside_a_tool_call() -> None:
    result = plan(
        [call("t0"), call("h1", "transfer_to_billing"), output("t0"), output("h1")],
        handoffs={"h1": ("triage", "billing")},
    )
    assert where(result) == [
        ("item", P, 0),
        ("start", P, 1),
        ("item", P, 2),  # the sender's own tool output stays with the sender
        ("item", BILLING, 3),  # the acknowledgement opens the receiver's transcript
    ]
    assert result.chain == [billing()]
    assert result.unmatched_outputs == []


def test_only_the_matched_handoff_opens_a_subagent() -> None:
    result = plan(
        [
            call("h1", "transfer_to_billing"),
            call("h2", "transfer_to_sre"),
            output("h2"),
            output("h1"),
        ],
        handoffs={"h1": ("triage", "billing")},
    )
    assert [op.kind for op in result.ops] == ["start", "item", "item", "item"]
    assert [op.stream for op in result.ops] == [P, P, P, BILLING]


def test_the_next_write_goes_to_the_open_subagent() -> None:
    result = plan([call("t1"), output("t1")], chain=[billing()])
    assert where(result) == [("item", BILLING, 0), ("item", BILLING, 1)]


def test_nested_handoff_is_twinned_in_its_parent_subsession() -> None:
    result = plan(
        [call("h2", "transfer_to_refunds"), output("h2")],
        chain=[billing()],
        handoffs={"h2": ("billing", "refunds")},
    )
    refunds = result.chain[-1]
    assert refunds.parent_stream == BILLING
    assert refunds.stream == "AgentSubsession-s1-sub-refunds-h2"
    assert where(result) == [("start", BILLING, 0), ("item", refunds.stream, 1)]


def test_the_final_message_closes_every_subagent_innermost_first() -> None:
    refunds = Subagent("sub-refunds-h2", "refunds", "billing", "h2", "R", BILLING, "")
    result = plan(
        [{"role": "assistant", "content": "done"}],
        chain=[billing(), refunds],
        finished="done",
    )
    assert [(op.kind, op.stream) for op in result.ops] == [
        ("item", "R"),
        ("close", BILLING),  # refunds closes on its parent's stream first ...
        ("close", P),  # ... then billing on the session's
    ]
    assert all(op.outcome == "success" and op.summary == "done" for op in result.ops[1:])
    assert result.chain == []


def test_a_new_run_closes_what_an_earlier_run_left_open() -> None:
    result = plan([user("again")], chain=[billing()], new_run=True)
    assert [(op.kind, op.stream, op.outcome) for op in result.ops] == [
        ("close", P, "error"),
        ("item", P, "success"),
    ]
    assert "before this subagent completed" in (result.ops[0].reason or "")


def test_explicit_close_needs_no_items() -> None:
    result = plan([], chain=[billing()], closing=("cancelled", "CancelledError: x"))
    assert [(op.kind, op.outcome, op.reason) for op in result.ops] == [
        ("close", "cancelled", "CancelledError: x")
    ]
    assert result.indexed == 0


def test_a_taken_subsession_gets_an_id_with_the_index() -> None:
    result = plan(
        [call("h1", "transfer_to_billing")],
        handoffs={"h1": ("triage", "billing")},
        taken={BILLING},
        first_index=12,
    )
    assert result.chain[0].stream == BILLING + ".12"


def test_an_unmatched_handoff_acknowledgement_is_reported() -> None:
    ack = output("h1", '{"assistant": "billing"}')
    result = plan([call("h1", "transfer_to_billing"), ack])
    assert result.unmatched_outputs == [ack]
    assert result.chain == []


def test_inputs_are_not_mutated() -> None:
    chain = [billing()]
    owners = {"t9": P}
    plan([output("t9"), call("t10")], chain=chain, call_owner=owners)
    assert chain == [billing()]
    assert owners == {"t9": P}


def test_handoff_shape() -> None:
    assert looks_like_a_handoff(output("h1", '{"assistant": "billing"}'))
    assert not looks_like_a_handoff(output("t1", '{"assistant": "x", "more": 1}'))
    assert not looks_like_a_handoff(output("t1", "not json"))
    assert not looks_like_a_handoff(call("h1"))


def test_what_starts_a_run() -> None:
    assert starts_a_run(user("hi"))
    assert starts_a_run({"type": "message", "role": "user", "content": []})
    assert not starts_a_run(output("t1"))
    assert not starts_a_run({"role": "assistant", "content": "x"})


def test_an_output_whose_subagent_closed_stays_in_the_open_stream() -> None:
    result = plan([output("t1", "late")], call_owner={"t1": BILLING})  # billing has closed
    assert where(result) == [("item", P, 0)]


def test_a_receiver_stream_already_in_the_chain_gets_a_new_id() -> None:
    result = plan(
        [call("h1", "transfer_to_billing")],
        chain=[billing()],
        handoffs={"h1": ("billing", "billing")},
        first_index=5,
    )
    assert result.chain[-1].stream == BILLING + ".5"
