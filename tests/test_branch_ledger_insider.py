"""What the trusted key's holder cannot forge in a session's branches (SCHEMA "In the ledger").

Every stream re-chained, every fork re-bound to the re-chained parent events and one
checkpoint over every head re-signed with the trusted key, four forgeries are still caught
by the branches check — a branch renamed while its stream keeps the old name, the registry
reordered so a child is registered before its parent, a forged ``cut.position``, a forged
``aj.open`` or ``aj.next_index`` on a ``BranchStarted`` — each FAIL with a one-line reason,
never a crash.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Report, verify_bundle
from agentjournal.cli.bundle import sign_every_line
from agentjournal.ledger import SigningKey
from agentjournal.streams import (
    branch_stream,
    branches_stream,
    ledger_stream,
    session_stream,
)
from branch_items import assistant as _assistant
from branch_items import user as _user
from drive import drive
from ledger_sessions import rechain, sign_heads
from paused_graph import paused_graph

SID = "ledger-insider"
MAIN = session_stream(SID)
REGISTRY = branches_stream(SID)
KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}


# -- the insider's tools -----------------------------------------------------------------------


def _stream(bundle: dict[str, Any], name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = next(s for s in bundle["streams"] if s["name"] == name)["events"]
    return found


def _by_id(bundle: dict[str, Any], event_id: str) -> tuple[str, dict[str, Any]]:
    return next(
        (s["name"], e) for s in bundle["streams"] for e in s["events"] if e["id"] == event_id
    )


def _edit(event: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> None:
    body = json.loads(event["data"])
    change(body)
    event["data"] = json.dumps(body, separators=(",", ":"))


def _rebound(bundle: dict[str, Any]) -> bool:
    """Point every place a fork or a continuation binds, and every close, at the hash the
    bound event has now (both twins of a fork alike); whether anything changed."""
    events = {e["id"]: e for s in bundle["streams"] for e in s["events"]}
    heads = {s["name"]: s["events"] for s in bundle["streams"]}
    changed = False

    def rebind(place: dict[str, Any]) -> None:
        nonlocal changed
        found = heads.get(place["stream"], [])
        if 0 <= place["revision"] < len(found):
            current = found[place["revision"]]["metadata"]["aj.hash"]
            changed |= place["hash"] != current
            place["hash"] = current

    for stream in bundle["streams"]:
        for event in stream["events"]:
            if event["type"] in ("agentjournal.BranchStarted", "agentjournal.BranchForked"):

                def places(body: dict[str, Any]) -> None:
                    for place in [*body["base"], body["authority"]]:
                        if place is not None:
                            rebind(place)

                _edit(event, places)
            elif event["type"] == "agentjournal.SubagentContinued":
                _edit(event, lambda body: rebind(body["continues"]))
            closed = events.get(event["metadata"].get("aj.twin", ""))
            if "aj.closes_hash" in event["metadata"] and closed is not None:
                current = closed["metadata"]["aj.hash"]
                changed |= event["metadata"]["aj.closes_hash"] != current
                event["metadata"]["aj.closes_hash"] = current
    return changed


def _insider(bundle: dict[str, Any]) -> None:
    """What the trusted key's holder can do after an edit: re-chain every stream, re-bind
    every fork to the re-chained parent events (until nothing moves), and replace the
    checkpoints by one over every head, signed with the trusted key. Only the checks of
    what is bound can catch what was changed."""
    ledger = ledger_stream(SID)
    for _ in range(20):
        for stream in bundle["streams"]:
            if stream["name"] not in (ledger, "AgentKeys"):
                rechain(bundle, stream["name"])
        if not _rebound(bundle):
            break
    sign_heads(bundle, KEY)


def _fails(bundle: dict[str, Any], reason: str) -> Report:
    """Re-chained and re-signed, the bundle fails the branches check with ``reason``."""
    _insider(bundle)
    report = verify_bundle(bundle, TRUSTED)
    assert not report.ok, report.text()
    last = report.text().splitlines()[-1]
    assert last.startswith("FAILED: "), last
    assert last.endswith("(branches)"), last
    assert reason in last, last
    return report


ALPHA = branch_stream(SID, "alpha")
BETA = branch_stream(SID, "beta")
GAMMA = branch_stream(SID, "gamma")


async def _forks(uri: str) -> dict[str, Any]:
    """main q1 a1 q2 a2 q3, then (signed) ``alpha`` forked at #2, ``beta`` at #4, each
    written; ``gamma`` forked from ``beta`` at #5; ``dropped`` at main's head, written and
    deleted; ``inside`` and ``solo`` forked at main's
    head while billing waits for an approval (each continues it), never written."""
    async with Journal.open(uri, signing_key=KEY) as journal:
        main = journal.session(SID)
        await main.add_items(
            [_user("q1"), _assistant("a1"), _user("q2"), _assistant("a2"), _user("q3")]
        )
        await main.fork(2, name="alpha")
        await main.fork(4, name="beta")
        for name in ("alpha", "beta"):
            line = journal.session(SID, branch=name)
            await line.add_items([_user(f"{name} q"), _assistant(f"{name} a")])
            await line.checkpoint()
        await journal.session(SID, branch="beta").fork(5, name="gamma")
        await main.fork(name="dropped")
        await journal.session(SID, branch="dropped").add_items([_user("dropped q")])
        await main.delete_branch("dropped")
        await drive(paused_graph(), "Refund 42", session=main, hooks=main)
        await main.fork(name="inside")
        await main.fork(name="solo")
        await main.checkpoint()
        # A deleted branch's BranchDeleted is signed by no session: export signs it.
        assert await sign_every_line(journal.store, SID, KEY) is not None
        bundle = await export_bundle(journal.store, SID)
    parsed: dict[str, Any] = json.loads(json.dumps(bundle))
    return parsed


@pytest.fixture(scope="module")
def forks(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('insider') / 'journal.db'}"
    return asyncio.run(_forks(uri))


@pytest.fixture
def bundle(forks: dict[str, Any]) -> dict[str, Any]:
    """A fresh copy to attack."""
    return copy.deepcopy(forks)


def test_the_honest_bundle_verifies_even_re_signed(bundle: dict[str, Any]) -> None:
    report = verify_bundle(copy.deepcopy(bundle), TRUSTED)
    assert report.ok, report.text()
    _insider(bundle)  # the insider's tools change nothing by themselves
    report = verify_bundle(bundle, TRUSTED)
    assert report.ok, report.text()


# -- a branch renamed while its stream keeps its name ---------------------------------------


def _renamed(bundle: dict[str, Any], old: str, new: str) -> None:
    """Every event naming branch ``old`` (its twins, its registry entry, its forks' parent,
    its usage) names ``new``: consistent everywhere but in the stream's name."""
    for stream in bundle["streams"]:
        for event in stream["events"]:
            if event["type"].startswith("agentjournal.Branch") or event["type"] in (
                "agentjournal.TurnUsage",
            ):

                def change(body: dict[str, Any]) -> None:
                    for key in ("branch", "parent"):
                        if body.get(key) == old:
                            body[key] = new

                _edit(event, change)


def test_a_branch_renamed_while_its_stream_keeps_its_name_fails(bundle: dict[str, Any]) -> None:
    _renamed(bundle, "alpha", "renamed")
    report = _fails(bundle, f"{ALPHA} is not the stream of branch 'renamed'")
    problems = [str(problem) for problem in report.problems]
    assert f"{ALPHA}@0: the BranchStarted names branch 'renamed', not {ALPHA}'s" in str(problems)


def test_a_parent_branch_renamed_fails(bundle: dict[str, Any]) -> None:
    """beta, the parent of gamma, renamed in its fork, its entry and gamma's ``parent``."""
    _renamed(bundle, "beta", "other")
    report = _fails(bundle, f"{BETA} is not the stream of branch 'other'")
    assert "the BranchStarted names branch 'other'" in str([str(p) for p in report.problems])


def test_a_registry_entry_naming_another_stream_for_its_branch_fails(
    bundle: dict[str, Any],
) -> None:
    """A ``BranchRemoved`` entry naming another branch than its stream's (its stream, its
    event, the ``BranchDeleted``, are all there)."""
    (removed,) = [e for e in _stream(bundle, REGISTRY) if e["type"] == "agentjournal.BranchRemoved"]
    _edit(removed, lambda body: body.__setitem__("branch", "alpha"))
    _fails(bundle, f"{branch_stream(SID, 'dropped')} is not the stream of branch 'alpha'")


# -- the registry reordered ---------------------------------------------------------------


def _order(bundle: dict[str, Any]) -> list[str]:
    return [json.loads(e["data"])["branch"] for e in _stream(bundle, REGISTRY)]


def test_a_child_registered_before_its_parent_fails(bundle: dict[str, Any]) -> None:
    entries = _stream(bundle, REGISTRY)
    assert _order(bundle) == ["alpha", "beta", "gamma", "dropped", "dropped", "inside", "solo"]
    entries[1], entries[2] = entries[2], entries[1]  # gamma before beta
    _fails(bundle, "branch 'gamma' is registered before its parent 'beta'")


def test_forks_of_one_line_registered_out_of_their_order_fail(bundle: dict[str, Any]) -> None:
    entries = _stream(bundle, REGISTRY)
    entries[0], entries[1] = entries[1], entries[0]  # beta before alpha: both main's
    _fails(bundle, "out of the order of their BranchForked markers")


def test_a_reversed_registry_fails(bundle: dict[str, Any]) -> None:
    _stream(bundle, REGISTRY).reverse()
    _fails(bundle, "registered")


# -- a forged cut position -----------------------------------------------------------------


@pytest.mark.parametrize("position", [10**40, 2**64])
def test_a_forged_cut_position_fails(bundle: dict[str, Any], position: int) -> None:
    first = _stream(bundle, ALPHA)[0]
    _, marker = _by_id(bundle, first["metadata"]["aj.twin"])
    for event in (first, marker):
        _edit(event, lambda body: body["cut"].__setitem__("position", position))
    _fails(bundle, "is not a store position")


# -- forged aj.open / aj.next_index on a BranchStarted -------------------------------------


def _continuation(bundle: dict[str, Any]) -> str:
    started = json.loads(_stream(bundle, branch_stream(SID, "inside"))[0]["data"])
    (stream,) = started["continuations"].values()
    return str(stream)


@pytest.mark.parametrize(
    ("line", "value", "reason"),
    [
        ("alpha", "main", "aj.open"),
        ("alpha", "itself", "aj.open"),
        ("alpha", "no such", "aj.open"),
        ("inside", "main", "aj.open"),
        ("inside", "itself", "aj.open"),
        ("inside", None, "aj.open"),
    ],
)
def test_a_forged_aj_open_on_a_branch_started_fails(
    bundle: dict[str, Any], line: str, value: str | None, reason: str
) -> None:
    stream = branch_stream(SID, line)
    first = _stream(bundle, stream)[0]
    forged = {
        "main": MAIN,
        "itself": stream,
        "no such": f"AgentSubsession-{SID}-sub-x-1",
    }
    if value is None:
        del first["metadata"]["aj.open"]
    else:
        first["metadata"]["aj.open"] = forged[value]
    _fails(bundle, reason)


@pytest.mark.parametrize("value", ["99", "-5", "3", "x", None])
def test_a_forged_aj_next_index_on_a_branch_started_fails(
    bundle: dict[str, Any], value: str | None
) -> None:
    first = _stream(bundle, ALPHA)[0]
    if value is None:
        del first["metadata"]["aj.next_index"]
    else:
        first["metadata"]["aj.next_index"] = value
    _fails(bundle, "aj.next_index")


@pytest.mark.parametrize("key", ["aj.open", "aj.next_index"])
def test_forged_metadata_on_a_continuation_fails(bundle: dict[str, Any], key: str) -> None:
    first = _stream(bundle, _continuation(bundle))[0]
    first["metadata"][key] = MAIN if key == "aj.open" else "99"
    _fails(bundle, key)
