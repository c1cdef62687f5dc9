"""Branches: the offline verifier checks delegation per line.

Each line's grants are recomputed from that line's authority log: the log it inherits
(its parent line's, up to the place ``BranchStarted.authority`` binds, recursively down
the lines) followed by its own ``AgentAuthority-{id}@{key}``. Authority never widens across
a fork: a grant on a branch that only the parent's later log would allow fails, and so does
a fork whose bound place is not the log in force at its cut. A continuation may continue a
continuation (a fork of a branch inside its continuations): it is checked against that one.

The sessions are written by the SDK's real ``Runner`` (``ScriptedModel``) with a signing key
on a SQLite file, exported, and attacked as an attacker would: editing, re-chaining (no key
needed) and re-signing every checkpoint with the trusted key itself, so that only the
delegation and fork checks can catch the edit.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.run_state import RunState
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal
from agentjournal import events as ev
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Report, verify_bundle, verify_records
from agentjournal.authority import Authority
from agentjournal.ledger import SigningKey
from agentjournal.streams import (
    authority_stream,
    branch_authority_stream,
    branch_stream,
    session_stream,
)
from agentjournal.walk import read_tree
from drive import drive
from handoff_scenarios import nested
from ledger_sessions import POLICY, rechain, sign_heads
from refund_authority import handing_off, refund, refund_policy

SID = "delegation-lines"
MAIN = session_stream(SID)
LOG = authority_stream(SID)
AFTER = branch_stream(SID, "after")
AFTER_LOG = branch_authority_stream(SID, "after")
KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}


async def _widened_on_main(path: Path) -> dict[str, Any]:
    """billing starts uncapped; a handoff narrows it to triage's cap; fork ``after``; then
    main resets billing and refunds 9,000 uncapped. On ``after`` billing stays capped: it
    refunds 100 (its grant capped), and is refused 9,000."""
    async with Journal.open(f"sqlite:///{path}", signing_key=KEY) as journal:
        main = journal.session(SID, policy=refund_policy())
        assert await refund(main, 100) == [100]
        await drive(handing_off(), "hello", session=main, hooks=main)  # narrows billing
        await main.fork(name="after")
        await main.reset_authority("billing", reason="widened on main after the fork")
        assert await refund(main, 9000) == [9000]
        after = journal.session(SID, branch="after", policy=refund_policy())
        assert await refund(after, 100) == [100]
        await after.checkpoint()
        await main.checkpoint()
        report = verify_records(await read_tree(journal.store, SID), TRUSTED)
        assert report.ok, report.text()
        bundle = await export_bundle(journal.store, SID)
    parsed: dict[str, Any] = json.loads(json.dumps(bundle))
    return parsed


@pytest.fixture(scope="module")
def widened(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return asyncio.run(_widened_on_main(tmp_path_factory.mktemp("delegation") / "j.db"))


@pytest.fixture
def bundle(widened: dict[str, Any]) -> dict[str, Any]:
    """A fresh copy to attack."""
    return copy.deepcopy(widened)


# -- the attacker's tools ----------------------------------------------------------------------


def _stream(bundle: dict[str, Any], name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = next(s for s in bundle["streams"] if s["name"] == name)["events"]
    return found


def _body(event: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(event["data"])
    return body


def _set_body(event: dict[str, Any], body: dict[str, Any]) -> None:
    event["data"] = json.dumps(body, separators=(",", ":"), sort_keys=True)


def _resign_all(bundle: dict[str, Any]) -> None:
    """Re-signed by the key's holder (:func:`ledger_sessions.sign_heads`)."""
    sign_heads(bundle, KEY)


def _failed(bundle: dict[str, Any], check: str) -> list[str]:
    report: Report = verify_bundle(bundle, TRUSTED)
    assert not report.ok, report.text()
    assert report.text().splitlines()[-1].startswith("FAILED: ")
    return [str(p) for p in report.problems if p.check == check]


def _billing_grant(bundle: dict[str, Any], stream: str) -> tuple[int, dict[str, Any]]:
    """The last ``AuthorityGranted`` of billing on ``stream`` (its revision and event)."""
    return [
        (n, e)
        for n, e in enumerate(_stream(bundle, stream))
        if e["type"] == ev.AUTHORITY_GRANTED and _body(e)["agent"] == "billing"
    ][-1]


def _widen_the_branch_s_grant(bundle: dict[str, Any]) -> None:
    """billing's grant on ``after`` and its log entry forged to hold its own entry uncapped
    (what main's log allows after its reset), both streams re-chained."""
    uncapped = Authority.of("billing.refund").to_json()
    _, grant = _billing_grant(bundle, AFTER)
    body = _body(grant)
    assert "spend" in json.dumps(body["authority"])  # capped, as inherited at the cut
    body["authority"] = uncapped
    _set_body(grant, body)
    (entry,) = [e for e in _stream(bundle, AFTER_LOG) if e["type"] == ev.AUTHORITY_HELD]
    held = _body(entry)
    held["authority"] = uncapped
    held["held"]["billing"] = uncapped
    _set_body(entry, held)
    rechain(bundle, AFTER)
    rechain(bundle, AFTER_LOG)


def _bind_authority(bundle: dict[str, Any], revision: int) -> None:
    """The fork's ``authority`` (both twins) moved to main's log entry at ``revision``, with
    that entry's real hash; both streams re-chained."""
    place = {
        "stream": LOG,
        "revision": revision,
        "hash": _stream(bundle, LOG)[revision]["metadata"]["aj.hash"],
    }
    first = _stream(bundle, AFTER)[0]
    (marker,) = [e for e in _stream(bundle, MAIN) if e["id"] == first["metadata"]["aj.twin"]]
    for event in (first, marker):
        body = _body(event)
        body["authority"] = place
        event["data"] = json.dumps(body, separators=(",", ":"))
    rechain(bundle, AFTER)
    rechain(bundle, MAIN)


def _held_entries(bundle: dict[str, Any], stream: str) -> list[tuple[int, dict[str, Any]]]:
    return [
        (n, _body(e))
        for n, e in enumerate(_stream(bundle, stream))
        if e["type"] == ev.AUTHORITY_HELD
    ]


# -- what verifies -----------------------------------------------------------------------------


def test_each_line_s_grants_are_recomputed_from_its_own_log(widened: dict[str, Any]) -> None:
    """The honest session verifies: main's grants against main's log (reset included), the
    branch's against main's log up to its fork's place, then its own."""
    report = verify_bundle(widened, TRUSTED)
    assert report.ok, report.text()
    (line,) = [t for t in report.lines if t.startswith("delegation: ")]
    assert "each recomputed from its policy" in line
    assert "2 lines" in line, line


# -- authority never widens across a fork ------------------------------------------------------


def test_a_branch_grant_only_the_parent_s_later_log_allows_fails(bundle: dict[str, Any]) -> None:
    """billing's grant on the branch widened to what main holds after its reset: the log the
    branch inherits ends at its cut (billing capped), so the grant is not the policy's."""
    _widen_the_branch_s_grant(bundle)
    _resign_all(bundle)
    found = _failed(bundle, "delegation")
    revision, _ = _billing_grant(bundle, AFTER)
    assert any(
        m.startswith(f"{AFTER}@{revision}:") and "billing was granted" in m for m in found
    ), found


def test_a_fork_bound_to_the_parent_s_later_log_fails(bundle: dict[str, Any]) -> None:
    """The widening made consistent: the fork's authority moved to main's last entry (its
    uncapped billing, after the cut) and the branch's grant widened to match. The replay
    alone would accept it; the fork's place is not the log in force at its cut."""
    (last, entry), *_ = reversed(_held_entries(bundle, LOG))
    assert entry["agent"] == "billing"
    _bind_authority(bundle, last)
    _widen_the_branch_s_grant(bundle)
    _resign_all(bundle)
    found = _failed(bundle, "branches")
    assert any(
        m.startswith(f"{AFTER}@0:") and "not the log in force at its cut" in m for m in found
    ), found


def test_a_fork_bound_to_an_earlier_log_entry_fails(bundle: dict[str, Any]) -> None:
    """The fork's authority moved back before the narrowing handoff's entry (billing
    uncapped there): the entry after it records a grant in the prefix."""
    (first, entry), *_ = _held_entries(bundle, LOG)
    assert entry["agent"] == "billing"
    assert entry["cause"] == "run"
    _bind_authority(bundle, first)
    _resign_all(bundle)
    found = _failed(bundle, "branches")
    assert any(
        m.startswith(f"{AFTER}@0:") and "not the log in force at its cut" in m for m in found
    ), found


def test_a_branch_log_entry_naming_another_line_s_grant_fails(bundle: dict[str, Any]) -> None:
    """The branch's log entry re-pointed at main's uncapped grant after the cut: a line's
    log records its own line's grants only."""
    revision, grant = _billing_grant(bundle, MAIN)
    (entry,) = [e for e in _stream(bundle, AFTER_LOG) if e["type"] == ev.AUTHORITY_HELD]
    held = _body(entry)
    held["event"], held["stream"] = grant["id"], MAIN
    _set_body(entry, held)
    rechain(bundle, AFTER_LOG)
    _resign_all(bundle)
    found = _failed(bundle, "delegation")
    assert any(
        m.startswith(f"{AFTER_LOG}@") and f"{MAIN}@{revision}" in m and "another line" in m
        for m in found
    ), found


# -- continuations of continuations ------------------------------------------------------------


async def _forked_twice(path: Path) -> dict[str, Any]:
    """triage -> billing -> refunds under a policy on main; ``one`` forks inside refunds and
    writes there; ``two`` forks ``one`` at its head (continuing its continuations)."""
    async with Journal.open(f"sqlite:///{path}", signing_key=KEY) as journal:
        main = journal.session(SID, policy=POLICY)
        await drive(main.guard(nested()), "Why was I charged twice?", session=main, hooks=main)
        await main.fork(at=7, name="one")
        one = journal.session(SID, branch="one", policy=POLICY)
        extra: Any = {"role": "assistant", "content": "written inside refunds' continuation"}
        await one.add_items([extra])
        await one.fork(name="two")
        await main.checkpoint()
        await one.checkpoint()
        tree = await read_tree(journal.store, SID)
        (first,) = await journal.store.read(branch_stream(SID, "two"), limit=1)
        two = ev.BranchStarted.decode(first.data)
        # read_tree follows each continuation and the continuation it continues.
        assert len(two.continuations) == 2
        for original, continuation in two.continuations.items():
            assert original in tree.streams
            assert continuation in tree.streams
            assert tree.streams[original][0].type == ev.SUBAGENT_CONTINUED
        report = verify_records(tree, TRUSTED)
        assert report.ok, report.text()
        bundle = await export_bundle(journal.store, SID)
    parsed: dict[str, Any] = json.loads(json.dumps(bundle))
    return parsed


async def test_a_fork_inside_subagents_signs_its_continuations(tmp_path: Path) -> None:
    """A signing session's fork checkpoints at once: the branch stream and every
    continuation it creates (one write) are covered with nothing else written."""
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", signing_key=KEY) as journal:
        main = journal.session(SID, policy=POLICY)
        await drive(main.guard(nested()), "Why was I charged twice?", session=main, hooks=main)
        await main.fork(at=7, name="one")
        (first,) = await journal.store.read(branch_stream(SID, "one"), limit=1)
        assert len(ev.BranchStarted.decode(first.data).continuations) == 2
        report = verify_records(await read_tree(journal.store, SID), TRUSTED)
        assert report.ok, report.text()


def test_a_continuation_of_a_continuation_is_checked_against_it(tmp_path: Path) -> None:
    """``two``'s continuations continue ``one``'s (not main's originals): they verify, and
    one whose copied grant is widened (re-chained, re-signed) fails."""
    bundle = asyncio.run(_forked_twice(tmp_path / "j.db"))
    assert verify_bundle(bundle, TRUSTED).ok
    two = _body(_stream(bundle, branch_stream(SID, "two"))[0])
    widened = 0
    for continuation in two["continuations"].values():
        first = _stream(bundle, continuation)[0]
        body = _body(first)
        if body["granted_authority"] is None:
            continue
        body["granted_authority"] = Authority.of("orders.*", "billing.*").to_json()
        first["data"] = json.dumps(body, separators=(",", ":"))
        rechain(bundle, continuation)
        widened += 1
        _resign_all(bundle)
        found = _failed(bundle, "branches")
        assert any(
            m.startswith(f"{continuation}@0:") and "does not match the subagent it continues" in m
            for m in found
        ), found
        break
    assert widened == 1


# -- a fork of a branch after a run resumed inside its continuation ---------------------------


def _approval_graph(
    ran: list[str], billing_steps: list[Any], triage_steps: list[Any]
) -> Agent[Any]:
    @function_tool(needs_approval=True)
    def issue_refund(amount_cents: int) -> str:
        """Refund (a person approves it first)."""
        ran.append(str(amount_cents))
        return "refunded"

    billing = Agent(name="billing", model=ScriptedModel(billing_steps), tools=[issue_refund])
    return Agent(name="triage", model=ScriptedModel(triage_steps), handoffs=[billing])


async def test_a_fork_binds_the_log_entry_of_a_grant_inside_a_closed_continuation(
    journal: Journal,
) -> None:
    """billing's refund waits for approval; fork ``resumed`` there; resumed on the branch,
    billing's run grant is on the continuation (logged on the branch's log) and the
    continuation closes. A fork of the branch after that binds that entry: the grant is in
    its prefix through the continuation its parent line closed before the cut."""
    policy = refund_policy()
    ran: list[str] = []
    main = journal.session(SID, policy=policy)
    pause = [[function_call("issue_refund", {"amount_cents": 1250}, call_id="r1")]]
    handoff = [[function_call("transfer_to_billing", {}, call_id="h1")]]
    paused: Any = await drive(
        main.guard(_approval_graph(ran, pause, handoff)), "refund", session=main, hooks=main
    )
    saved = paused.to_state().to_string()
    await main.fork(name="resumed")
    line = journal.session(SID, branch="resumed", policy=policy)
    graph = line.guard(_approval_graph(ran, [[assistant_message("ok", item_id="m1")]], []))
    state = await RunState.from_string(graph, saved)
    state.approve(state.get_interruptions()[0])
    await drive(graph, state, session=line, hooks=line)
    assert ran == ["1250"]
    log = await journal.store.read(branch_authority_stream(SID, "resumed"))
    (entry,) = [e for e in log if e.type == ev.AUTHORITY_HELD]
    (started,) = await journal.store.read(branch_stream(SID, "resumed"), limit=1)
    (continuation,) = ev.BranchStarted.decode(started.data).continuations.values()
    assert json.loads(entry.data)["stream"] == continuation  # the grant is on it
    await line.fork(name="later")
    (first,) = await journal.store.read(branch_stream(SID, "later"), limit=1)
    later = ev.BranchStarted.decode(first.data)
    assert later.continuations == {}  # the continuation closed before this cut
    assert later.authority is not None
    assert (later.authority.stream, later.authority.revision) == (entry.stream, entry.revision)
    report = verify_records(await read_tree(journal.store, SID), {}, allow_uncovered=True)
    assert report.ok, report.text()
