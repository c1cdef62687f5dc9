"""A policy that asks a person instead of refusing: a tool rule's ``approval``.

``approval: {above: [refund]}`` on ``issue_refund``: a refund within the acting agent's cap
runs without asking; one above it stops the run for a person (``InterruptIssued`` records
what the agent held), runs once with exactly the approved amount after ``approve`` and never
after ``reject``; a call outside the agent's scopes is refused as before. ``approval:
always`` asks on every call. Without ``session.guard(agent)`` the hooks cannot stop the run
for a person, so such a call is refused. The verifier passes an over-ceiling call only
after a person's approval of exactly its arguments on its stream.

Every run is the SDK's real ``Runner`` with ``ScriptedModel`` on the ``journal`` fixture.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunContextWrapper, RunState, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import AuthorityDenied, InvalidInput, Journal, JournalSession
from agentjournal import events as ev
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Report, verify_bundle, verify_records
from agentjournal.authority import ApprovalRule, Authority, Cap, Policy, ToolRule
from agentjournal.engine.approvals import Approval, approves
from agentjournal.sdk.gates import Gatekeeper
from agentjournal.walk import read_tree
from drive import METHODS, Method, drive
from ledger_sessions import relink

SID = "approval-policy-1"
SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAP = 5000


def policy(approval: Any = None, *, visibility: bool = True) -> Policy:
    """billing may refund up to CAP cents; notes may only read; issue_refund's rule has
    ``approval`` (its YAML form; default ``{above: [refund]}``)."""
    rule: dict[str, Any] = {"scope": "orders.refund", "ceilings": {"refund": "amount_cents"}}
    rule["approval"] = approval if approval is not None else {"above": ["refund"]}
    return Policy.from_json(
        {
            "agents": {
                "billing": {
                    "scopes": ["orders.read", "orders.refund"],
                    "ceilings": {"refund": {"kind": "cap", "limit": CAP}},
                },
                "notes": {"scopes": ["orders.read"]},
            },
            "tools": {"issue_refund": rule},
            "visibility": visibility,
        }
    )


def refunder(
    ran: list[int],
    amount: int | None,
    *,
    name: str = "billing",
    own: Any = False,
) -> Agent[Any]:
    """``name`` calls ``issue_refund(amount)`` then says "done"; with ``amount`` None, the
    agent that resumes a paused run (it says "done" once the call is decided). Each run of
    the tool's body is noted in ``ran``."""

    @function_tool(needs_approval=own)
    def issue_refund(amount_cents: int) -> str:
        """Refund an order."""
        ran.append(amount_cents)
        return f"refunded {amount_cents}"

    steps: list[Any] = [[assistant_message("done", item_id="m1")]]
    if amount is not None:
        call = function_call("issue_refund", {"amount_cents": amount}, call_id="r1")
        steps.insert(0, [call])
    return Agent(name=name, model=ScriptedModel(steps), tools=[issue_refund])


async def run(
    session: JournalSession, agent: Agent[Any], method: Method = "run", *, guard: bool = True
) -> Any:
    return await drive(
        session.guard(agent) if guard else agent,
        "refund",
        method=method,
        session=session,
        hooks=session,
    )


async def typed(journal: Journal, *types: str) -> list[Any]:
    return [e for e in await journal.store.read_all() if e.type in types]


async def verified(journal: Journal) -> Report:
    return verify_records(await read_tree(journal.store, SID), {}, allow_uncovered=True)


def outputs(result: Any) -> list[str]:
    return [
        str(item.raw_item["output"])
        for item in result.new_items
        if getattr(item, "type", None) == "tool_call_output_item"
    ]


# -- within the cap, above it, outside the scope --------------------------------------------


@pytest.mark.parametrize("method", METHODS)
async def test_a_refund_within_the_cap_runs_without_asking(
    journal: Journal, method: Method
) -> None:
    ran: list[int] = []
    session = journal.session(SID, policy=policy())
    result = await run(session, refunder(ran, 1250), method)
    assert result.interruptions == []
    assert result.final_output == "done"
    assert ran == [1250]
    assert await typed(journal, ev.INTERRUPT_ISSUED, ev.AUTHORITY_REFUSED) == []
    assert (await verified(journal)).ok


@pytest.mark.parametrize("method", METHODS)
async def test_a_refund_above_the_cap_asks_and_runs_once_with_the_approved_amount(
    journal: Journal, method: Method
) -> None:
    """The run stops for a person instead of refusing; the question records what billing
    held; approved, the resumed run refunds 9000 exactly once, and the verifier passes."""
    ran: list[int] = []
    session = journal.session(SID, policy=policy())
    paused = await run(session, refunder(ran, 9000), method)
    assert [item.raw_item.call_id for item in paused.interruptions] == ["r1"]
    assert ran == []
    assert await typed(journal, ev.AUTHORITY_REFUSED) == []
    (held,) = await session.hold(paused)
    assert held.arguments == '{"amount_cents":9000}'
    assert held.authority == Authority.of("orders.read", "orders.refund", refund=Cap(CAP)).to_json()
    await session.approve("r1", by="ann", reason="checked the order")
    resuming = session.guard(refunder(ran, None))
    result: Any
    if method == "run":
        result = await session.resume(resuming)
    else:
        state = await session.resumable(resuming)
        result = await drive(resuming, state, method=method, session=session, hooks=session)
    assert result.final_output == "done"
    assert ran == [9000]
    with pytest.raises(InvalidInput, match="resumed already"):
        await session.resume(session.guard(refunder(ran, None)))
    assert ran == [9000]
    assert await typed(journal, ev.AUTHORITY_REFUSED) == []
    report = await verified(journal)
    assert report.ok, report.text()


async def test_a_rejected_refund_above_the_cap_never_runs(journal: Journal) -> None:
    ran: list[int] = []
    session = journal.session(SID, policy=policy())
    await session.hold(await run(session, refunder(ran, 9000)))
    await session.reject("r1", by="ann", reason="too much")
    result = await session.resume(session.guard(refunder(ran, None)))
    assert ran == []
    (said,) = outputs(result)
    assert "refunded" not in said  # the SDK's rejection message
    report = await verified(journal)
    assert report.ok, report.text()


async def test_a_refund_outside_the_agent_s_scopes_is_refused_without_asking(
    journal: Journal,
) -> None:
    """notes holds no orders.refund: the call is refused (an error output), no question
    (visibility off, so that the model is offered the tool and calls it)."""
    ran: list[int] = []
    session = journal.session(SID, policy=policy(visibility=False))
    result = await run(session, refunder(ran, 9000, name="notes"))
    assert result.interruptions == []
    assert ran == []
    assert await typed(journal, ev.INTERRUPT_ISSUED) == []
    (refused,) = await typed(journal, ev.AUTHORITY_REFUSED)
    body = json.loads(refused.data)
    assert (body["scope"], body["enforcement"]) == ("orders.refund", "tool_refused")
    assert "may not call issue_refund" in outputs(result)[0]
    assert (await verified(journal)).ok


async def test_approval_always_asks_on_every_call_within_authority(journal: Journal) -> None:
    ran: list[int] = []
    session = journal.session(SID, policy=policy("always"))
    paused = await run(session, refunder(ran, 1250))
    assert [item.raw_item.call_id for item in paused.interruptions] == ["r1"]
    await session.hold(paused)
    await session.approve("r1", by="ann")
    await session.resume(session.guard(refunder(ran, None)))
    assert ran == [1250]
    assert (await verified(journal)).ok


async def test_approval_always_does_not_lift_the_cap(journal: Journal) -> None:
    """``always`` asks within authority; beyond the cap the call is refused, not asked."""
    ran: list[int] = []
    session = journal.session(SID, policy=policy("always"))
    result = await run(session, refunder(ran, 9000))
    assert result.interruptions == []
    assert ran == []
    assert await typed(journal, ev.INTERRUPT_ISSUED) == []
    assert len(await typed(journal, ev.AUTHORITY_REFUSED)) == 1


async def test_the_tool_s_own_needs_approval_still_asks_within_the_cap(journal: Journal) -> None:
    """Either asks: the tool's own callable asks for a call the policy lets run."""

    async def own(ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str) -> bool:
        return bool(params["amount_cents"] == 1250)

    ran: list[int] = []
    session = journal.session(SID, policy=policy())
    paused = await run(session, refunder(ran, 1250, own=own))
    assert [item.raw_item.call_id for item in paused.interruptions] == ["r1"]
    assert ran == []


async def test_without_a_guard_the_hooks_cannot_ask_so_the_call_is_refused(
    journal: Journal,
) -> None:
    """Hooks only: the SDK cannot be made to stop for the policy, so a refund above the cap
    stops the run as a call beyond authority does, and no question is recorded."""
    ran: list[int] = []
    session = journal.session(SID, policy=policy())
    with pytest.raises(AuthorityDenied, match="beyond ceiling 'refund'"):
        await run(session, refunder(ran, 9000), guard=False)
    assert ran == []
    assert await typed(journal, ev.INTERRUPT_ISSUED) == []
    (refused,) = await typed(journal, ev.AUTHORITY_REFUSED)
    assert json.loads(refused.data)["enforcement"] == "run_stopped"
    assert (await verified(journal)).ok


async def test_without_a_guard_approval_always_is_refused(journal: Journal) -> None:
    session = journal.session(SID, policy=policy("always"))
    with pytest.raises(AuthorityDenied, match=r"only session\.guard"):
        await run(session, refunder([], 1250), guard=False)
    assert (await verified(journal)).ok


async def test_a_call_approved_only_in_the_sdk_s_run_state_is_refused(journal: Journal) -> None:
    """The policy's approval must be on the record: a run state approved by hand (no
    ``session.approve``) resumes, and the invocation gate refuses the call (recorded);
    the tool body never runs and the verifier passes the refusal."""
    ran: list[int] = []
    session = journal.session(SID, policy=policy())
    paused = await run(session, refunder(ran, 9000))
    agent = session.guard(refunder(ran, None))
    state = await RunState.from_string(agent, paused.to_state().to_string())
    (item,) = state.get_interruptions()
    state.approve(item)
    result = await drive(agent, state, session=session, hooks=session)
    assert ran == []
    assert "none on the record approves these arguments" in outputs(result)[0]
    (refused,) = await typed(journal, ev.AUTHORITY_REFUSED)
    body = json.loads(refused.data)
    assert (body["call_id"], body["ceiling"], body["enforcement"]) == (
        "r1",
        "refund",
        "tool_refused",
    )
    report = await verified(journal)
    assert report.ok, report.text()


def test_only_the_newest_question_approved_with_exactly_these_arguments_lets_a_call_run() -> None:
    """Pure: the answer must approve the newest question of the call, asked by the acting
    agent, of the tool, with exactly the arguments, and the call must not have run."""
    now = datetime.now(UTC)
    yes = ev.ApprovalDecided("r1", "approved", "", "ann", "q", now)
    no = ev.ApprovalDecided("r1", "rejected", "", "ann", "q", now)

    def asked(arguments: str = "{}", **changes: Any) -> Approval:
        found = Approval("r1", "issue_refund", arguments, "billing", "S", 1, "q", now, None, yes)
        return replace(found, **changes)

    def lets(*found: Approval, arguments: str = "{}") -> bool:
        return approves(
            found,
            agent="billing",
            call_id="r1",
            tool="issue_refund",
            arguments=arguments,
            policies=(),
            session_id=SID,
        )

    assert lets(asked())
    assert not lets(asked(), arguments='{"amount_cents":1}')
    assert not lets(asked(decision=no))
    assert not lets(asked(decision=None))
    assert not lets(asked(ran=True))
    assert not lets(asked(agent="triage"))
    assert not lets(asked(tool_name="add_note"))
    assert not lets(asked(request_id="r2"))
    assert not lets(asked(), asked(decision=None))


async def test_inside_a_subagent_the_handoff_s_cap_asks_and_the_approval_resumes_there(
    journal: Journal,
) -> None:
    """triage (cap 3000) hands off to billing (its own entry: no cap): billing holds the
    meet, so 4000 is above its cap and asks; the question is on billing's stream with the
    granted authority, the approval lets it run there once, and the verifier passes."""
    body = policy().to_json()
    body["agents"]["billing"] = {"scopes": ["orders.refund"]}
    body["agents"]["triage"] = {
        "scopes": ["orders.*"],
        "ceilings": {"refund": {"kind": "cap", "limit": 3000}},
    }
    capped = Policy.from_json(body)
    ran: list[int] = []

    def team(amount: int | None) -> Agent[Any]:
        to_billing = [[function_call("transfer_to_billing", {}, call_id="h1")]]
        billing = refunder(ran, amount)
        return Agent(
            name="triage",
            model=ScriptedModel(to_billing if amount is not None else []),
            handoffs=[billing],
        )

    session = journal.session(SID, policy=capped)
    (held,) = await session.hold(await run(session, team(4000)))
    assert held.stream.startswith("AgentSubsession-")
    assert Authority.from_json(held.authority) == Authority.of("orders.refund", refund=Cap(3000))
    await session.approve("r1", by="ann")
    result = await session.resume(session.guard(team(None)))
    assert result.final_output == "done"
    assert ran == [4000]
    assert await session.open_subagents() == []
    report = await verified(journal)
    assert report.ok, report.text()


class _UnreadableRecord:
    """A session port whose record of approvals cannot be read (what the gatekeeper
    records through, :class:`agentjournal.sdk.port.RefusalRecorder`)."""

    def __init__(self) -> None:
        self.refusals: list[ev.AuthorityRefused] = []

    async def record_refusal(self, refused: ev.AuthorityRefused) -> None:
        self.refusals.append(refused)

    async def authority_stopped(self, error: AuthorityDenied) -> None:
        pass

    async def record_grant(self, agent: str, authority: Authority) -> None:
        pass

    async def open_grant(self, agent: str) -> tuple[bool, Authority | None]:
        return False, None

    async def held_grant(self, agent: str) -> Authority | None:
        return None

    async def handoff_granted(self, sender: str, receiver: str, authority: Authority) -> None:
        pass

    async def approved(self, agent: str, call_id: str, tool: str, arguments: str) -> bool:
        raise OSError("disk I/O error")


async def test_a_call_whose_approval_cannot_be_established_is_refused_and_recorded() -> None:
    """Fail closed: when the record of approvals cannot be read, the invocation gate
    refuses the call that asks, and records the refusal."""
    record = _UnreadableRecord()
    gates = Gatekeeper(policy(), recorder=record)
    arguments = '{"amount_cents":9000}'
    assert await gates.asks("billing", "issue_refund", arguments)
    said = await gates.refuse_call("billing", "r1", "issue_refund", arguments)
    assert said is not None
    assert "could not be established (OSError)" in said
    (refused,) = record.refusals
    assert (refused.call_id, refused.ceiling, refused.enforcement) == (
        "r1",
        "refund",
        "tool_refused",
    )
    assert await gates.refuse_call("billing", "r2", "issue_refund", '{"amount_cents":10}') is None


# -- the verifier -----------------------------------------------------------------------------


async def approved_bundle() -> dict[str, Any]:
    """A session whose refund of 9000 (above the cap) ran after a person approved it."""
    ran: list[int] = []
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session(SID, policy=policy())
        await session.hold(await run(session, refunder(ran, 9000)))
        await session.approve("r1", by="ann")
        await session.resume(session.guard(refunder(ran, None)))
        assert ran == [9000]
        return await export_bundle(journal.store, SID)


def events_of(bundle: dict[str, Any], type_: str) -> list[dict[str, Any]]:
    return [e for s in bundle["streams"] for e in s["events"] if e["type"] == type_]


def edit_question(bundle: dict[str, Any]) -> None:
    """The person approved 5000; the call that ran asked for 9000."""
    (question,) = events_of(bundle, ev.INTERRUPT_ISSUED)
    body = json.loads(question["data"])
    body["prompt"] = body["prompt"].replace("9000", "5000")
    question["data"] = json.dumps(body)


def drop_answer(bundle: dict[str, Any]) -> None:
    """No answer on the record: the call ran without one."""
    for stream in bundle["streams"]:
        stream["events"] = [e for e in stream["events"] if e["type"] != ev.INTERRUPT_RESOLVED]


def flip_answer(bundle: dict[str, Any]) -> None:
    """The answer names another question."""
    (answer,) = events_of(bundle, ev.INTERRUPT_RESOLVED)
    body = json.loads(answer["data"])
    body["extensions"]["agentjournal"]["issued"] = "00000000-0000-0000-0000-000000000000"
    answer["data"] = json.dumps(body)


@pytest.mark.parametrize("tamper", [edit_question, drop_answer, flip_answer])
async def test_the_verifier_fails_an_over_ceiling_call_without_its_approval(tamper: Any) -> None:
    """Edited and re-chained: the refund above the cap ran without a person's approval of
    exactly its arguments, which fails containment naming the call's stream and revision."""
    bundle = await approved_bundle()
    report = verify_bundle(bundle, {}, allow_uncovered=True)
    assert report.ok, report.text()
    tamper(bundle)
    relink(bundle)
    report = verify_bundle(bundle, {}, allow_uncovered=True)
    assert not report.ok
    (failure,) = [p for p in report.problems if p.check == "containment"]
    assert "ran beyond authority" in failure.message
    assert "AgentSession-" in failure.stream
    assert failure.revision is not None


async def test_a_redacted_bundle_of_an_approved_over_ceiling_call_verifies() -> None:
    """The question's view keeps the digest of the call's payload: containment finds the
    approval of exactly these arguments without either's arguments."""
    ran: list[int] = []
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session(SID, policy=policy())
        await session.hold(await run(session, refunder(ran, 9000)))
        await session.approve("r1", by="ann")
        await session.resume(session.guard(refunder(ran, None)))
        redacted = await export_bundle(journal.store, SID, redact=True)
    report = verify_bundle(redacted, {}, allow_uncovered=True)
    assert report.ok, report.text()
    assert "9000" not in json.dumps(events_of(redacted, ev.INTERRUPT_ISSUED))


async def test_the_verifier_fails_an_approval_always_call_that_ran_unanswered() -> None:
    """``approval: always``: a call within the cap that ran is contained only by its answer."""
    ran: list[int] = []
    async with Journal.open("sqlite://:memory:") as journal:
        session = journal.session(SID, policy=policy("always"))
        await session.hold(await run(session, refunder(ran, 1250)))
        await session.approve("r1", by="ann")
        await session.resume(session.guard(refunder(ran, None)))
        bundle = await export_bundle(journal.store, SID)
    assert verify_bundle(bundle, {}, allow_uncovered=True).ok
    drop_answer(bundle)
    relink(bundle)
    report = verify_bundle(bundle, {}, allow_uncovered=True)
    (failure,) = [p for p in report.problems if p.check == "containment"]
    assert "needs a person's approval, and it ran without a person's answer" in failure.message


# -- the policy's form --------------------------------------------------------------------------


def test_the_approval_rule_round_trips_and_changes_the_digest() -> None:
    above, always, none = (
        policy(),
        policy("always"),
        Policy.from_json({"tools": {"issue_refund": {"scope": "orders.refund"}}}),
    )
    for each in (above, always, none):
        assert Policy.from_json(each.to_json()) == each
        assert Policy.from_json(each.to_json()).digest == each.digest
    assert above.tools["issue_refund"].approval == ApprovalRule(above=("refund",))
    assert above.to_json()["tools"]["issue_refund"]["approval"] == {"above": ["refund"]}
    assert always.to_json()["tools"]["issue_refund"]["approval"] == "always"
    assert "approval" not in none.to_json()["tools"]["issue_refund"]
    assert len({above.digest, always.digest, policy({"above": ["refund"]}).digest}) == 2


def test_the_decision_asks_only_what_a_person_may_approve() -> None:
    """Pure: beyond an approvable ceiling asks; beyond another ceiling, outside the scope or
    an argument missing is refused even when approved."""
    two = Policy(
        tools={
            "pay": ToolRule(
                "orders.pay",
                {"refund": "amount", "fee": "fee"},
                ApprovalRule(above=("refund",)),
            )
        }
    )
    held = Authority.of("orders.pay", refund=Cap(100), fee=Cap(10))
    assert not two.asks(held, "pay", '{"amount":50,"fee":5}')
    assert two.asks(held, "pay", '{"amount":500,"fee":5}')
    assert two.check_call(held, "pay", '{"amount":500,"fee":5}', approved=True) is None
    assert not two.asks(held, "pay", '{"amount":500,"fee":50}')
    assert not two.asks(held, "pay", '{"fee":5}')
    assert not two.asks(Authority.of("orders.read"), "pay", '{"amount":500,"fee":5}')
    refusal = two.check_call(held, "pay", '{"amount":500,"fee":50}', approved=True)
    assert refusal is not None
    assert refusal.ceiling == "fee"


@pytest.mark.parametrize(
    ("approval", "says"),
    [
        ("sometimes", "tool 'issue_refund': approval must be 'always' or {above: [ceiling, ...]}"),
        ({"above": []}, "tool 'issue_refund': approval must be 'always' or {above"),
        ({"above": "refund"}, "tool 'issue_refund': approval must be 'always' or {above"),
        ({"above": ["refund"], "by": "ann"}, "tool 'issue_refund': approval must be"),
        ({"above": ["spend"]}, "tool 'issue_refund': approval above ['spend'] names no ceiling"),
        ({"above": [7]}, "tool 'issue_refund': approval above must list ceiling names"),
        ({"above": ["refund", 7]}, "tool 'issue_refund': approval above must list ceiling"),
        ({"above": [["refund"]]}, "tool 'issue_refund': approval above must list ceiling"),
        (True, "tool 'issue_refund': approval must be 'always' or {above"),
    ],
)
def test_a_bad_approval_entry_is_a_one_line_error_naming_the_tool(approval: Any, says: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        policy(approval)
    assert str(raised.value).startswith(says), str(raised.value)
    assert "\n" not in str(raised.value)


def test_the_sample_policy_loads_and_its_approval_example_asks_above_the_cap(
    tmp_path: Path,
) -> None:
    """samples/policy.yml loads as it is (the demo refuses above the cap); with the
    ``approval`` line it shows in place of ``issue_refund``'s, a refund above billing's cap
    asks a person and one within it does not."""
    text = (SAMPLES / "policy.yml").read_text(encoding="utf-8")
    assert Policy.load(SAMPLES / "policy.yml").tools["issue_refund"].approval is None
    lines = text.splitlines()
    (example,) = [line for line in lines if line.startswith("  #   issue_refund:")]
    enabled = [
        example.replace("#   ", "", 1) if line.startswith("  issue_refund:") else line
        for line in lines
    ]
    path = tmp_path / "policy.yml"
    path.write_text("\n".join(enabled), encoding="utf-8")
    sample = Policy.load(path)
    assert sample.tools["issue_refund"].approval == ApprovalRule(above=("refund",))
    billing = sample.authority_of("billing")
    assert not sample.asks(billing, "issue_refund", '{"order_id":"42","amount_cents":1250}')
    assert sample.asks(billing, "issue_refund", '{"order_id":"42","amount_cents":9000}')
