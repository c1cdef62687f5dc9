"""session_turns: a recorded session line read back as the turns scorers see."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.errors import InvalidInput
from agentjournal.read.evals.turns import GuardrailCheck, ScoredSession, session_turns
from agentjournal.records import Record
from agentjournal.shred.keys import MemoryKeyStore
from agentjournal.streams import session_stream
from agentjournal.walk import read_tree
from drive import METHODS, Method
from eval_support import (
    ANSWERS,
    BILLING,
    BRANCH_ANSWER,
    INPUTS,
    PRICES,
    TRIAGE,
    record_branch,
    record_support,
)


async def _read(
    journal: Journal, session_id: str = "support-1", *, line: str = "main", from_turn: int = 1
) -> ScoredSession:
    return await session_turns(
        journal.store, session_id, line=line, from_turn=from_turn, prices=PRICES
    )


async def test_each_turn_holds_its_input_answer_tool_calls_and_agents(journal: Journal) -> None:
    await record_support(journal, "support-1")
    read = await _read(journal)
    assert [t.index for t in read.turns] == [1, 2, 3]
    assert [t.input for t in read.turns] == list(INPUTS)
    assert [t.output for t in read.turns] == list(ANSWERS)
    first, second, third = read.turns
    (lookup,) = first.tool_calls
    assert (lookup.name, lookup.arguments, lookup.call_id) == (
        "lookup_order",
        {"order_id": "42"},
        "call_lookup",
    )
    assert lookup.output == "order 42: two charges of 12.50 EUR"
    assert [c.name for c in second.tool_calls] == ["transfer_to_billing", "refund"]
    blocked = second.tool_calls[1]
    assert blocked.arguments == {"order_id": "42", "amount_cents": 1250}
    assert "guardrail blocked" in str(blocked.output)
    assert third.tool_calls == ()
    assert first.agents == ("triage",)
    assert second.agents == ("triage", "billing")
    assert [t.session for t in read.turns] == ["support-1"] * 3
    assert {t.line for t in read.turns} == {"main"}


@pytest.mark.parametrize("method", METHODS)
async def test_guardrail_decisions_are_in_the_turn_they_were_made(
    tmp_path: Path, method: Method
) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1", method=method)
        first, second, third = (await _read(journal)).turns
    assert first.guardrails == third.guardrails == ()
    blocks = [g for g in second.guardrails if g.action == "BLOCK"]
    assert blocks == [
        GuardrailCheck(
            "BLOCK",
            "tool_call",
            "refund",
            "scripted BLOCK for TOOL_CALL",
            "SCRIPTED_BLOCK",
            "billing",
        )
    ]
    assert {g.kind for g in second.guardrails} == {"input", "handoff", "tool_call", "output"}


@pytest.mark.parametrize("method", METHODS)
async def test_turn_usage_counts_each_model_response_and_prices_it(
    tmp_path: Path, method: Method
) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1", method=method)
        read = await _read(journal)
        unpriced = await session_turns(
            journal.store, "support-1", prices=type(PRICES)({}, {}, False)
        )
    first, second, third = read.turns
    assert (first.usage.requests, first.usage.input_tokens, first.usage.output_tokens) == (
        2,
        2 * TRIAGE[0],
        2 * TRIAGE[1],
    )
    assert second.usage.requests == 3  # triage hands off, billing answers twice
    assert second.usage.input_tokens == TRIAGE[0] + 2 * BILLING[0]
    assert second.usage.total_tokens == sum(TRIAGE) + 2 * sum(BILLING)
    assert first.usage.cost == pytest.approx((2 * 120 * 1.0 + 2 * 30 * 4.0) / 1e6)
    assert read.usage.requests == 6
    assert read.usage.total_tokens == sum(t.usage.total_tokens for t in read.turns)
    assert read.usage.cost == pytest.approx(sum(t.usage.cost or 0 for t in read.turns))
    assert third.usage.requests == 1
    assert unpriced.turns[0].usage.cost is None  # a model no table prices: unknown, not 0
    assert unpriced.usage.cost is None


def _main_line(records: list[Record]) -> list[Record]:
    return sorted(
        (r for r in records if r.stream.startswith(("AgentSession-", "AgentSubsession-"))),
        key=lambda r: r.position or 0,
    )


async def test_a_turns_head_is_the_hash_of_its_last_event(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1")
        read = await _read(journal)
        tree = await read_tree(journal.store, "support-1")
    line = _main_line(tree.records())
    starts = [i for i, r in enumerate(line) if r.type == "UserMessageReceived"]
    assert len(starts) == 3
    # The last event before the next turn's user message, and the last one of all.
    expected = [line[starts[1] - 1].hash, line[starts[2] - 1].hash, line[-1].hash]
    assert [t.head for t in read.turns] == expected
    assert read.head == line[-1].hash
    assert len(set(expected)) == 3


async def test_a_turns_items_start_with_its_user_message(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        session = await record_support(journal, "support-1")
        read = await _read(journal)
        everything = await session.get_items()
    first = read.turns[0]
    assert [i.get("type", "message") for i in first.items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
    ]
    assert first.items[0]["role"] == "user"
    assert [item for turn in read.turns for item in turn.items] == everything


async def test_from_turn_leaves_the_earlier_turns_out(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1")
        read = await _read(journal, from_turn=2)
    assert [t.index for t in read.turns] == [2, 3]
    assert read.usage.requests == 4


async def test_a_branch_line_holds_the_prefix_turns_and_its_own(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1")
        before = await _read(journal)
        await record_branch(journal, "support-1", "retry")
        main = await _read(journal)
        branch = await _read(journal, line="retry")
    assert main == before  # a fork leaves every turn of its parent as it was, heads too
    assert [t.index for t in branch.turns] == [1, 2]
    assert [t.line for t in branch.turns] == ["retry", "retry"]
    assert branch.turns[0].output == ANSWERS[0]
    assert branch.turns[0].head == main.turns[0].head  # the same record
    assert branch.turns[0].tool_calls == main.turns[0].tool_calls
    assert branch.turns[1].input == INPUTS[1]
    assert branch.turns[1].output == BRANCH_ANSWER
    assert branch.turns[1].tool_calls == ()
    assert branch.turns[1].head not in {t.head for t in main.turns}
    assert branch.turns[1].usage.requests == 1


async def test_an_unknown_session_line_or_turn_is_invalid_input(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1")
        with pytest.raises(InvalidInput, match="session 'nobody' does not exist"):
            await session_turns(journal.store, "nobody")
        with pytest.raises(InvalidInput, match="has no branch 'nope'"):
            await session_turns(journal.store, "support-1", line="nope")
        with pytest.raises(InvalidInput, match="from_turn"):
            await session_turns(journal.store, "support-1", from_turn=0)
        with pytest.raises(InvalidInput, match="session id"):
            await session_turns(journal.store, "bad id\n")


async def test_sealed_content_opens_with_keys_reads_sealed_without_and_erased_after(
    tmp_path: Path,
) -> None:
    keys = MemoryKeyStore()
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", keys=keys) as journal:
        await record_support(journal, "support-1", user_id="alice")
        # The stored bytes hold no plaintext: the store alone cannot read the answers.
        raw = await journal.store.read(session_stream("support-1"))
        assert not any(ANSWERS[0].encode() in event.data for event in raw)
        opened = await session_turns(journal.store, "support-1", keys=keys)
        sealed = await session_turns(journal.store, "support-1")
        await journal.erase(subject="alice", reason="request 7", by="dpo")
        erased = await session_turns(journal.store, "support-1", keys=keys)
    assert [t.output for t in opened.turns] == list(ANSWERS)
    assert [t.input for t in opened.turns] == list(INPUTS)
    assert opened.turns[0].tool_calls[0].arguments == {"order_id": "42"}
    assert {t.input for t in sealed.turns} == {"[sealed]"}
    assert {t.output for t in sealed.turns} == {"[sealed]"}
    assert sealed.turns[0].tool_calls[0].name == "lookup_order"  # names stay in the clear
    assert {t.input for t in erased.turns} == {"[erased]"}
    assert {t.output for t in erased.turns} == {"[erased]"}
    # Scores stay bound to the same records: neither sealing nor erasure moves a head.
    assert [t.head for t in sealed.turns] == [t.head for t in opened.turns]
    assert [t.head for t in erased.turns] == [t.head for t in opened.turns]


async def test_a_deleted_branch_has_no_turns_to_score(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record_support(journal, "support-1")
        await record_branch(journal, "support-1", "retry")
        await journal.session("support-1").delete_branch("retry")
        with pytest.raises(InvalidInput, match="branch 'retry' of session support-1 was "):
            await session_turns(journal.store, "support-1", line="retry")
        main = await _read(journal)
    assert [t.output for t in main.turns] == list(ANSWERS)
