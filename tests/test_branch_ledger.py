"""Branches in the ledger: it sees every line.

A session with branches is written by the SDK's real ``Runner`` (handoffs on main and on a
branch, a fork of a fork, forks by revision, index and turn) with a signing key, on a SQLite
file and on the KurrentDB double, and exported. The bundle verifies offline with the public
key alone, one report line per branch; then each attack an auditor must catch is made as an
attacker would — editing, re-chaining (no key needed) and, where it matters, re-signing every
checkpoint with the trusted key itself, so that only the fork's binding to its parent can
catch it — and each FAILS with a one-line reason. Crafted branch events never crash the
verifier. ``bundle export`` with a signing key signs every line, not main's alone.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import Journal, JournalSession
from agentjournal import events as ev
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Report, verify_bundle, verify_records
from agentjournal.authority import Authority, Policy
from agentjournal.engine.sealing import seal_event
from agentjournal.ledger import SigningKey
from agentjournal.records import DamagedEvent
from agentjournal.store.contract import NewEvent
from agentjournal.streams import (
    authority_stream,
    branch_stream,
    branches_stream,
    ledger_stream,
    session_stream,
)
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from agentjournal.walk import read_tree
from branch_items import assistant as _assistant
from branch_items import user as _user
from cli_run import run
from drive import drive
from handoff_scenarios import nested, single
from ledger_sessions import rechain, sign_heads
from paused_graph import paused_graph

SID = "ledger-branches"
MAIN = session_stream(SID)
DRAFT = branch_stream(SID, "draft")
EARLY = branch_stream(SID, "early")
DEEPER = branch_stream(SID, "deeper")
REGISTRY = branches_stream(SID)
GONE = branch_stream(SID, "gone")
KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}


async def _write(journal: Journal) -> None:
    """Main holds a first turn; ``early`` forks it before item #1, ``first-turn`` before
    turn 1, ``draft`` at its head; ``draft`` writes, ``deeper`` forks it at its head and
    writes; then main runs triage -> billing -> refunds and ``draft`` a handoff of its own
    (the Runner's handoffs, on two lines); main writes on."""
    main = journal.session(SID)
    await main.add_items([_user("hello"), _assistant("hi")])
    await main.fork(1, name="early")
    await main.fork(turn=1, name="first-turn")
    await main.fork(name="draft")
    draft = journal.session(SID, branch="draft")
    await draft.add_items([_user("on the draft")])
    await draft.fork(name="deeper")
    deeper = journal.session(SID, branch="deeper")
    await deeper.add_items([_user("on the deeper branch")])
    await deeper.checkpoint()
    await drive(nested(), "refund please", session=main, hooks=main)
    await drive(single(), "Why was I charged twice?", session=draft, hooks=draft)
    await main.add_items([_user("main goes on")])
    await main.checkpoint()


async def _recorded(uri: str) -> dict[str, Any]:
    async with Journal.open(uri, signing_key=KEY) as journal:
        await _write(journal)
        bundle = await export_bundle(journal.store, SID)
        report = verify_records(await read_tree(journal.store, SID), TRUSTED)
        assert report.ok, report.text()
    # Through JSON, as a file on disk would carry it.
    parsed: dict[str, Any] = json.loads(json.dumps(bundle))
    return parsed


@pytest.fixture(scope="module", params=["sqlite", "kurrentdb"])
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The branched session's bundle, written on a SQLite file or the KurrentDB double."""
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path_factory.mktemp('branch-ledger') / 'journal.db'}"
        return asyncio.run(_recorded(uri))
    with KurrentDBDouble.in_thread() as double:
        return asyncio.run(_recorded(double.uri))


@pytest.fixture
def bundle(recorded: dict[str, Any]) -> dict[str, Any]:
    """A fresh copy to attack."""
    return copy.deepcopy(recorded)


# -- the attacker's tools ----------------------------------------------------------------------


def _stream(bundle: dict[str, Any], name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = next(s for s in bundle["streams"] if s["name"] == name)["events"]
    return found


def _by_id(bundle: dict[str, Any], event_id: str) -> tuple[str, dict[str, Any]]:
    return next(
        (s["name"], e) for s in bundle["streams"] for e in s["events"] if e["id"] == event_id
    )


def _resign_all(bundle: dict[str, Any]) -> None:
    """Re-signed by the key's holder (:func:`ledger_sessions.sign_heads`)."""
    sign_heads(bundle, KEY)


def _edit_fork(
    bundle: dict[str, Any], branch: str, change: Callable[[dict[str, Any]], None]
) -> None:
    """Change the data of a branch's ``BranchStarted`` and of its ``BranchForked`` twin on the
    parent line alike, and re-chain both streams (no key needed)."""
    first = _stream(bundle, branch)[0]
    parent, marker = _by_id(bundle, first["metadata"]["aj.twin"])
    for event in (first, marker):
        body = json.loads(event["data"])
        change(body)
        event["data"] = json.dumps(body, separators=(",", ":"))
    rechain(bundle, branch)
    rechain(bundle, parent)


def _failed(bundle: dict[str, Any], **options: Any) -> Report:
    report = verify_bundle(bundle, TRUSTED, **options)
    assert not report.ok, report.text()
    last = report.text().splitlines()[-1]
    assert last.startswith("FAILED: ")
    return report


def _messages(report: Report, check: str | None = None) -> list[str]:
    return [str(p) for p in report.problems if check is None or p.check == check]


# -- what verifies ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_signed_session_with_branches_verifies_offline(recorded: dict[str, Any]) -> None:
    assert recorded["version"] == 3
    names = [s["name"] for s in recorded["streams"]]
    for stream in (MAIN, DRAFT, EARLY, DEEPER, REGISTRY, branch_stream(SID, "first-turn")):
        assert stream in names
    # The branch's handoff opened a subsession on its line; it is in the bundle too.
    draft_children = [
        json.loads(e["data"])["subsession_stream"]
        for e in _stream(recorded, DRAFT)
        if e["type"] == "SubagentStarted"
    ]
    assert draft_children
    assert all(child in names for child in draft_children)
    report = verify_bundle(recorded, TRUSTED)
    assert report.ok, report.text()
    lines = report.text().splitlines()
    assert lines[-1].startswith("VERIFIED: "), lines[-1]
    assert "branches: 4 branches, each bound to its parent line's chain; registry ok" in lines
    per_branch = [line for line in lines if line.startswith("  branch ")]
    assert [line.split("'")[1] for line in per_branch] == ["early", "first-turn", "draft", "deeper"]
    assert any("forked from draft at revision" in line for line in per_branch)
    assert any("forked from main at index 1" in line for line in per_branch)
    assert any("forked from main at turn 1" in line for line in per_branch)
    assert "twins: 3 subagents started, 3 closed, links ok" in lines
    # Without a key nothing is vouched for.
    assert not verify_bundle(recorded, {}).ok


def test_a_redacted_bundle_with_branches_verifies(tmp_path: Path) -> None:
    async def go() -> dict[str, Any]:
        async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", signing_key=KEY) as journal:
            await _write(journal)
            return await export_bundle(journal.store, SID, redact=True)

    redacted = asyncio.run(go())
    assert redacted["redacted"]
    assert redacted["version"] == 3
    report = verify_bundle(redacted, TRUSTED)
    assert report.ok, report.text()


def test_a_bundle_without_branches_stays_version_2(tmp_path: Path) -> None:
    async def go() -> dict[str, Any]:
        async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", signing_key=KEY) as journal:
            session = journal.session("plain")
            await session.add_items([_user("hi")])
            await session.checkpoint()
            return await export_bundle(journal.store, "plain")

    plain = asyncio.run(go())
    assert plain["version"] == 2  # what every 0.2 verifier reads
    assert verify_bundle(plain, TRUSTED).ok


# -- each attack fails, with a one-line reason ------------------------------------------------


def test_a_version_2_label_on_a_bundle_with_branches_fails(bundle: dict[str, Any]) -> None:
    bundle["version"] = 2
    report = _failed(bundle)
    assert report.problems[0].check == "structure"
    assert "only a version 3 bundle carries branches" in report.problems[0].message


def test_a_branch_missing_from_the_bundle_fails(bundle: dict[str, Any]) -> None:
    bundle["streams"] = [s for s in bundle["streams"] if s["name"] != DEEPER]
    _resign_all(bundle)  # even the checkpoints re-signed over what is left
    report = _failed(bundle)
    found = _messages(report, "branches")
    assert any(f"branch 'deeper': its stream {DEEPER} is missing" in m for m in found), found


def test_a_branch_dropped_without_the_key_is_caught_by_its_checkpoint(
    bundle: dict[str, Any],
) -> None:
    bundle["streams"] = [s for s in bundle["streams"] if s["name"] != DEEPER]
    report = _failed(bundle)
    assert any("the stream was truncated" in m for m in _messages(report, "checkpoints"))


def test_a_forged_fork_point_fails(bundle: dict[str, Any]) -> None:
    def forge(body: dict[str, Any]) -> None:
        body["base"][0]["hash"] = "0" * 64

    _edit_fork(bundle, DRAFT, forge)
    _resign_all(bundle)
    report = _failed(bundle)
    (problem,) = [p for p in report.problems if p.stream == DRAFT]
    assert problem.check == "branches"
    assert "the shared prefix is not the parent's" in problem.message


def test_a_fork_bound_to_another_parent_event_fails(bundle: dict[str, Any]) -> None:
    """The base moved to a real earlier event of main, with its real hash."""
    main = _stream(bundle, MAIN)

    def move(body: dict[str, Any]) -> None:
        revision = body["base"][0]["revision"] - 1
        body["base"][0] = {
            "stream": MAIN,
            "revision": revision,
            "hash": main[revision]["metadata"]["aj.hash"],
        }

    _edit_fork(bundle, DRAFT, move)
    _resign_all(bundle)
    report = _failed(bundle)
    found = _messages(report, "branches")
    assert any(DRAFT in m and "the cut was moved" in m for m in found), found


def test_a_moved_cut_fails(bundle: dict[str, Any]) -> None:
    def move(body: dict[str, Any]) -> None:
        body["cut"]["value"] -= 1

    _edit_fork(bundle, EARLY, move)
    _resign_all(bundle)
    report = _failed(bundle)
    found = _messages(report, "branches")
    assert any(EARLY in m and "(index 0) is not where its base is" in m for m in found), found


def test_a_moved_cut_without_the_key_is_caught_by_the_checkpoints(bundle: dict[str, Any]) -> None:
    def move(body: dict[str, Any]) -> None:
        body["cut"]["value"] -= 1

    _edit_fork(bundle, EARLY, move)
    report = _failed(bundle)
    assert _messages(report, "checkpoints")
    assert _messages(report, "branches")


def test_a_wrong_next_index_fails(bundle: dict[str, Any]) -> None:
    def shift(body: dict[str, Any]) -> None:
        body["next_index"] += 1

    _edit_fork(bundle, DRAFT, shift)
    _resign_all(bundle)
    found = _messages(_failed(bundle), "branches")
    assert any(DRAFT in m for m in found), found


def test_an_edited_parent_event_behind_a_fork_fails(bundle: dict[str, Any]) -> None:
    main = _stream(bundle, MAIN)
    user = next(e for e in main if e["type"] == "UserMessageReceived")
    user["data"] = user["data"].replace("hello", "goodbye")
    assert "goodbye" in user["data"]
    rechain(bundle, MAIN)  # main's own chain is whole again
    _resign_all(bundle)  # and every checkpoint vouches for it
    report = _failed(bundle)
    found = _messages(report, "branches")
    for branch in (DRAFT, EARLY):
        assert any(branch in m and "the shared prefix is not the parent's" in m for m in found), (
            found
        )


def test_an_edited_parent_event_without_rechaining_breaks_main_s_chain(
    bundle: dict[str, Any],
) -> None:
    user = next(e for e in _stream(bundle, MAIN) if e["type"] == "UserMessageReceived")
    user["data"] = user["data"].replace("hello", "goodbye")
    report = _failed(bundle)
    assert report.problems[0].check == "integrity"
    assert report.problems[0].stream == MAIN


def test_a_deleted_branch_started_fails(bundle: dict[str, Any]) -> None:
    events = _stream(bundle, DEEPER)
    del events[0]
    rechain(bundle, DEEPER)
    _resign_all(bundle)
    report = _failed(bundle)
    found = _messages(report)
    assert any("does not begin with BranchStarted" in m for m in found), found


def test_a_deleted_branch_forked_marker_fails(bundle: dict[str, Any]) -> None:
    first = _stream(bundle, EARLY)[0]
    parent, marker = _by_id(bundle, first["metadata"]["aj.twin"])
    events = _stream(bundle, parent)
    events.remove(marker)
    rechain(bundle, parent)
    _resign_all(bundle)
    found = _messages(_failed(bundle), "branches")
    assert any(EARLY in m and "its BranchForked is missing" in m for m in found), found


def test_a_registry_that_lost_an_entry_fails(bundle: dict[str, Any]) -> None:
    registry = _stream(bundle, REGISTRY)
    lost = next(e for e in registry if json.loads(e["data"])["stream"] == EARLY)
    registry.remove(lost)
    rechain(bundle, REGISTRY)
    _resign_all(bundle)
    found = _messages(_failed(bundle), "branches")
    assert any("branch 'early' has no entry in" in m for m in found), found


def test_a_registry_entry_that_names_another_branch_fails(bundle: dict[str, Any]) -> None:
    registry = _stream(bundle, REGISTRY)
    entry = next(e for e in registry if json.loads(e["data"])["stream"] == EARLY)
    body = json.loads(entry["data"])
    body["branch"] = "renamed"
    entry["data"] = json.dumps(body)
    rechain(bundle, REGISTRY)
    _resign_all(bundle)
    found = _messages(_failed(bundle), "branches")
    assert any("the entry of branch 'renamed' is not its fork" in m for m in found), found


def test_twins_that_disagree_fail(bundle: dict[str, Any]) -> None:
    first = _stream(bundle, EARLY)[0]
    body = json.loads(first["data"])
    body["prefix_items"] += 5  # the branch alone
    first["data"] = json.dumps(body, separators=(",", ":"))
    rechain(bundle, EARLY)
    _resign_all(bundle)
    found = _messages(_failed(bundle), "branches")
    assert any("BranchForked and its BranchStarted disagree" in m for m in found), found


def test_a_ledger_cut_before_a_branch_s_checkpoint_leaves_the_branch_uncovered(
    bundle: dict[str, Any],
) -> None:
    ledger = ledger_stream(SID)
    events = _stream(bundle, ledger)
    first = next(n for n, e in enumerate(events) if DEEPER in json.loads(e["data"])["heads"])
    del events[first:]  # the tail of the ledger: no re-chaining needed
    report = _failed(bundle)
    found = _messages(report, "checkpoints")
    assert any(DEEPER in m and "not covered" in m for m in found), found


def test_a_branch_s_checkpoint_covers_its_whole_line_through_the_forks(
    bundle: dict[str, Any],
) -> None:
    """One checkpoint of the deeper branch's head (and nothing else) covers what it shares:
    draft up to deeper's base, main up to draft's base (the subsessions closed before it
    too, through their closing events); only what came after those bases is not covered."""
    streams = {s["name"]: s["events"] for s in bundle["streams"]}
    sign_heads(bundle, KEY, [DEEPER, REGISTRY])
    report = verify_bundle(bundle, TRUSTED, allow_uncovered=True)
    assert report.ok, report.text()
    uncovered = {
        line.split()[1].rsplit("@", 1)[0]: int(line.split()[1].rsplit("@", 1)[1].rstrip(":"))
        for line in report.lines
        if line.startswith("  warning: ") and "after the last checkpoint" in line
    }
    draft_base = json.loads(streams[DRAFT][0]["data"])["base"][0]
    # Everything main and draft wrote after those bases (the Runner's runs, their
    # subsessions) is not covered; the shared prefix is.
    deeper_base = json.loads(streams[DEEPER][0]["data"])["base"][0]
    assert (draft_base["stream"], deeper_base["stream"]) == (MAIN, DRAFT)
    assert uncovered[MAIN] == draft_base["revision"] + 1
    assert uncovered.get(DRAFT, len(streams[DRAFT])) == deeper_base["revision"] + 1
    assert DEEPER not in uncovered
    assert REGISTRY not in uncovered
    assert EARLY in uncovered  # a sibling line is not covered by this one


# -- hostile input never crashes the verifier ------------------------------------------------


def _crafted(kind: str) -> Callable[[dict[str, Any]], None]:
    def change(body: dict[str, Any]) -> None:
        if kind == "empty base":
            body["base"] = []
        elif kind == "base elsewhere":
            body["base"][0]["stream"] = "AgentSession-someone-else"
        elif kind == "huge revision":
            body["base"][0]["revision"] = 2**70
        elif kind == "negative revision":
            body["base"][0]["revision"] = -1
        elif kind == "self parent":
            body["parent"] = body["branch"]
        elif kind == "unknown parent":
            body["parent"] = "nobody"
        elif kind == "cut kind":
            body["cut"]["kind"] = "sideways"
        elif kind == "continuation":
            body["continuations"] = {MAIN: MAIN}
        elif kind == "authority":
            body["authority"] = {"stream": MAIN, "revision": 0, "hash": "x"}
        elif kind == "types":
            body["next_index"] = "seven"
        elif kind == "other session":
            body["session_id"] = "other"
        elif kind == "stream":
            body["branch_stream"] = MAIN
        else:
            body.clear()

    return change


HOSTILE = [
    "empty base",
    "base elsewhere",
    "huge revision",
    "negative revision",
    "self parent",
    "unknown parent",
    "cut kind",
    "continuation",
    "authority",
    "types",
    "other session",
    "stream",
    "nothing",
]


@pytest.mark.parametrize("kind", HOSTILE)
def test_crafted_fork_events_fail_without_crashing(bundle: dict[str, Any], kind: str) -> None:
    _edit_fork(bundle, DRAFT, _crafted(kind))
    _resign_all(bundle)
    report = _failed(bundle)
    assert _messages(report, "branches"), report.text()


@pytest.mark.parametrize(
    "data",
    ["not json", "[]", '{"base": 1}', json.dumps({"continuations": {"a": 1}}), '"x"'],
)
def test_crafted_branch_started_data_fails_without_crashing(
    bundle: dict[str, Any], data: str
) -> None:
    _stream(bundle, DEEPER)[0]["data"] = data
    rechain(bundle, DEEPER)
    _resign_all(bundle)
    report = _failed(bundle)
    assert _messages(report, "branches"), report.text()


def _registry_entries() -> Iterator[str]:
    yield "not json"
    yield json.dumps({"branch": "x", "stream": MAIN, "parent": "main", "event": "nope"})
    yield json.dumps(
        {
            "branch": "x",
            "stream": MAIN,
            "parent": "main",
            "event": "0" * 8 + "-0000-0000-0000-" + "0" * 12,
        }
    )


@pytest.mark.parametrize("data", list(_registry_entries()))
def test_crafted_registry_entries_fail_without_crashing(bundle: dict[str, Any], data: str) -> None:
    registry = _stream(bundle, REGISTRY)
    entry = copy.deepcopy(registry[-1])
    entry["data"] = data
    entry["id"] = "0" * 8 + "-0000-4000-8000-" + "0" * 12
    registry.append(entry)
    rechain(bundle, REGISTRY)
    _resign_all(bundle)
    assert _messages(_failed(bundle), "branches")


# -- the store side: read_tree, checkpoints, the command line ------------------------------------


def test_bundle_export_with_a_key_signs_every_line(tmp_path: Path) -> None:
    """Forks written without a key — ``retry`` at a head where billing is open (a
    continuation on the branch), ``gone`` written then deleted — are covered by the one
    checkpoint ``bundle export`` signs: the bundle verifies with the public key alone."""
    key = tmp_path / "key.pem"
    assert run("keygen", "-o", str(key)).returncode == 0
    db = tmp_path / "j.db"
    uri = f"sqlite:///{db}"
    streams: list[str] = []

    async def write() -> None:
        async with Journal.open(uri) as journal:  # no key: nothing is signed
            main = journal.session(SID)
            paused: Any = await drive(paused_graph(), "Refund 42", session=main, hooks=main)
            assert paused.interruptions
            await main.fork(name="retry")
            retry = journal.session(SID, branch="retry")
            (continuation,) = await retry.open_subagents()  # left open, never written
            streams.append(continuation.stream)
            await main.fork(name="gone")
            gone = journal.session(SID, branch="gone")
            await gone.add_items([_user("soon gone"), _assistant("ok")])
            await main.delete_branch("gone")

    asyncio.run(write())
    env = {"AGENTJOURNAL_SIGNING_KEY_FILE": str(key)}
    out = tmp_path / "b.json"
    exported = run("bundle", "export", SID, "--uri", uri, "-o", str(out), env=env)
    assert exported.returncode == 0, exported.stdout + exported.stderr
    assert "signed a checkpoint" in exported.stdout
    checked = run("bundle", "verify", str(out), "--pubkey", f"{key}.pub")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1].startswith("VERIFIED: ")
    assert len([line for line in checked.stdout.splitlines() if line.startswith("  branch ")]) == 2
    # One checkpoint names each line's top stream, the open subsession on main and its
    # continuation on the branch, and the registry; nothing else (no closed subsession).
    bundle = json.loads(out.read_text())
    (checkpoint,) = _stream(bundle, ledger_stream(SID))
    heads = set(json.loads(checkpoint["data"])["heads"])
    (billing,) = [name for name in heads if name.endswith("-sub-billing-h1")]
    assert heads == {MAIN, billing, *streams, branch_stream(SID, "retry"), GONE, REGISTRY}


@pytest.mark.slow
async def test_read_tree_reads_every_line_and_follows_only_this_session_s_streams(
    journal: Journal,
) -> None:
    await _write(journal)
    other = journal.session("other")
    await other.add_items([_user("someone else")])
    # A crafted registry entry naming another session's stream (chained, so that only the
    # entry itself is wrong): read_tree does not follow it; the verifier fails it.
    registry = await journal.store.read(REGISTRY)
    crafted = ev.BranchAdded("x", session_stream("other"), "main", str(registry[0].id))
    metadata: dict[str, str] = {}
    event_id = uuid.uuid4()
    data = crafted.encode()
    seal_event(
        REGISTRY,
        len(registry),
        event_id,
        ev.BRANCH_ADDED,
        data,
        metadata,
        registry[-1].metadata["aj.hash"],
    )
    await journal.store.append(
        REGISTRY, [NewEvent(ev.BRANCH_ADDED, data, metadata, event_id)], expected=len(registry) - 1
    )
    tree = await read_tree(journal.store, SID)
    assert session_stream("other") not in tree.streams
    for stream in (MAIN, DRAFT, EARLY, DEEPER, REGISTRY):
        assert stream in tree.streams
    main_only = tree.main_line()
    assert DRAFT not in main_only.streams
    assert REGISTRY not in main_only.streams
    assert MAIN in main_only.streams
    report = verify_records(tree, TRUSTED, allow_uncovered=True)
    found = _messages(report, "branches")
    assert any(f"branch 'x': its stream {session_stream('other')} is missing" in m for m in found)


async def test_a_fork_signs_the_branch_s_first_event(journal: Journal) -> None:
    """A fork by a signing session checkpoints at once: the branch's BranchStarted and the
    registry are covered before anything is written on the branch."""
    main = JournalSession(journal.store, SID, signing_key=KEY)
    await main.add_items([_user("u0")])
    await main.checkpoint()
    await main.fork(name="quiet")
    tree = await read_tree(journal.store, SID)
    last = json.loads(tree.streams[ledger_stream(SID)][-1].data or "")
    assert set(last["heads"]) == {MAIN, REGISTRY, branch_stream(SID, "quiet")}
    report = verify_records(tree, TRUSTED)
    assert report.ok, report.text()


async def test_a_branch_left_unsigned_is_reported_uncovered(journal: Journal) -> None:
    main = JournalSession(journal.store, SID, signing_key=KEY)
    await main.add_items([_user("u0")])
    await main.fork(name="b")
    line = JournalSession(journal.store, SID, branch="b")  # no key
    await line.add_items([_user("unsigned")])
    report = verify_records(await read_tree(journal.store, SID), TRUSTED)
    assert not report.ok
    found = _messages(report, "checkpoints")
    assert any(branch_stream(SID, "b") in m and "not covered" in m for m in found), found
    # Signed by a session on the branch, it verifies.
    signer = JournalSession(journal.store, SID, signing_key=KEY, branch="b")
    assert await signer.checkpoint() is not None
    report = verify_records(await read_tree(journal.store, SID), TRUSTED)
    assert report.ok, report.text()


def test_the_command_line_verifies_every_line(tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    assert run("keygen", "-o", str(key)).returncode == 0
    db = tmp_path / "j.db"

    async def go() -> None:
        async with Journal.open(f"sqlite:///{db}", signing_key=SigningKey.from_file(key)) as j:
            await _write(j)

    asyncio.run(go())
    uri = f"sqlite:///{db}"
    verified = run("verify", SID, "--uri", uri, "--pubkey", f"{key}.pub")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    lines = verified.stdout.splitlines()
    assert lines[-1].startswith("VERIFIED: "), lines[-1]
    assert len([line for line in lines if line.startswith("  branch ")]) == 4
    assert any(line.startswith("read model: ") for line in lines)  # main's, compared
    out = tmp_path / "b.json"
    exported = run("bundle", "export", SID, "--uri", uri, "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    assert json.loads(out.read_text())["version"] == 3
    checked = run("bundle", "verify", str(out), "--pubkey", f"{key}.pub")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert len([line for line in checked.stdout.splitlines() if line.startswith("  branch ")]) == 4
    # A branch dropped from the file: exit 2, one line saying where.
    bundle = json.loads(out.read_text())
    bundle["streams"] = [s for s in bundle["streams"] if s["name"] != DEEPER]
    out.write_text(json.dumps(bundle))
    failed = run("bundle", "verify", str(out), "--pubkey", f"{key}.pub")
    assert failed.returncode == 2
    assert failed.stdout.splitlines()[-1].startswith("FAILED: ")
    assert "Traceback" not in failed.stdout + failed.stderr


@pytest.mark.slow
async def test_the_catalog_s_ledger_column_checks_branch_streams(journal_uri: str) -> None:
    """``sessions``' cheap ledger check knows the branch streams, the registry and the
    branches' checkpoints (learnt from the forks), and keeps the branches out of main's
    columns; a broken chain on a branch shows on the session's row."""
    from agentjournal.read import catalog

    async with Journal.open(journal_uri, signing_key=KEY) as signed:
        await _write(signed)
        listing = await catalog.refresh(signed.store, keys=TRUSTED)
        (row,) = [r for r in listing.rows if r.session_id == SID]
        assert (row.integrity.state, row.integrity.problem) == ("verified", None)
        assert row.items == len(await signed.session(SID).get_items())
        assert (row.subagents_closed, row.subagents_open) == (3, 0)  # every line's
        # An event appended to a branch without its chain: the row shows where.
        await signed.store.append(
            DEEPER,
            [NewEvent("Forged", b"{}", {}, uuid.uuid4())],
            expected=len(await signed.store.read(DEEPER)) - 1,
        )
        listing = await catalog.refresh(signed.store, keys=TRUSTED)
        (row,) = [r for r in listing.rows if r.session_id == SID]
        assert row.integrity.state == "failed"
        assert row.integrity.problem is not None
        assert row.integrity.problem.endswith("(broken chain)")
        assert row.integrity.problem.startswith(f"{DEEPER}@")


def test_an_edited_authority_log_entry_behind_a_fork_fails(tmp_path: Path) -> None:
    """A fork binds the parent's authority log as of its cut: rewriting an entry behind it
    (the log re-chained, every checkpoint re-signed) breaks the binding."""
    policy = Policy(agents={"a": Authority.of("x")})

    async def go() -> dict[str, Any]:
        async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", signing_key=KEY) as journal:
            main = journal.session(SID, policy=policy)
            await main.add_items([_user("u0")])
            await main.reset_authority("a", reason="before the cut")
            await main.add_items([_user("u1")])
            await main.fork(name="b")
            await main.checkpoint()
            return await export_bundle(journal.store, SID)

    bundle = asyncio.run(go())
    report = verify_bundle(bundle, TRUSTED)
    assert report.ok, report.text()
    log = authority_stream(SID)
    entry = _stream(bundle, log)[-1]
    assert entry["type"] == ev.AUTHORITY_RESET
    body = json.loads(entry["data"])
    body["reason"] = "rewritten"
    entry["data"] = json.dumps(body)
    rechain(bundle, log)
    _resign_all(bundle)
    found = _messages(_failed(bundle), "branches")
    assert any(log in m and "the shared prefix is not the parent's" in m for m in found), found


@pytest.mark.parametrize("data", [b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe", b"{}", b"null"])
async def test_hostile_branch_events_in_the_store_are_reported_never_raised(
    journal: Journal, data: bytes
) -> None:
    """A registry entry and a fork marker whose data is hostile (nested past the parser's
    depth, not UTF-8, not the event): read_tree skips what it cannot follow and the
    verifier reports it, with no exception."""
    main = JournalSession(journal.store, SID)
    await main.add_items([_user("u0")])
    await main.fork(name="b")
    for stream, type_ in ((REGISTRY, ev.BRANCH_ADDED), (MAIN, ev.BRANCH_FORKED)):
        head = len(await journal.store.read(stream)) - 1
        previous = (await journal.store.read(stream))[-1].metadata["aj.hash"]
        metadata: dict[str, str] = {}
        event_id = uuid.uuid4()
        seal_event(stream, head + 1, event_id, type_, data, metadata, previous)
        await journal.store.append(
            stream, [NewEvent(type_, data, metadata, event_id)], expected=head
        )
    if data == b"\xff\xfe":  # not UTF-8: one line naming the stream, as for any event
        with pytest.raises(DamagedEvent, match=f"^({REGISTRY}|{MAIN})"):
            await read_tree(journal.store, SID)
        return
    tree = await read_tree(journal.store, SID)
    report = verify_records(tree, {}, allow_uncovered=True)
    assert not report.ok
    assert _messages(report, "branches") or _messages(report, "structure"), report.text()


_KINDS = [
    "data",
    "metadata",
    "metadata-remove",
    "delete",
    "swap",
    "truncate",
    "duplicate",
    "type",
    "id",
]


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_KINDS), st.integers(0, 1000), st.integers(0, 1000))
def test_every_single_mutation_of_a_branched_session_is_detected(
    recorded: dict[str, Any], kind: str, stream_pick: int, event_pick: int
) -> None:
    """test_ledger.py's property on a session with branches: one edit anywhere (a branch's
    events, the registry, the checkpoints, main behind a fork), not re-chained, fails."""
    bundle = copy.deepcopy(recorded)
    stream = bundle["streams"][stream_pick % len(bundle["streams"])]
    events = stream["events"]
    index = event_pick % len(events)
    event = events[index]
    if kind == "data":
        event["data"] += " "
    elif kind == "metadata":
        key = sorted(event["metadata"])[event_pick % len(event["metadata"])]
        event["metadata"][key] += "x"
    elif kind == "metadata-remove":
        del event["metadata"][sorted(event["metadata"])[event_pick % len(event["metadata"])]]
    elif kind == "delete":
        del events[index]
    elif kind == "swap":
        other = (index + 1) % len(events)
        if other == index:
            events.append(copy.deepcopy(event))
        else:
            events[index], events[other] = events[other], events[index]
    elif kind == "truncate":
        del events[index:]
    elif kind == "duplicate":
        events.insert(index, copy.deepcopy(event))
    elif kind == "type":
        event["type"] += "X"
    else:
        event["id"] = "00000000-0000-0000-0000-000000000000"
    if not events:
        bundle["streams"].remove(stream)
    assert not verify_bundle(bundle, TRUSTED).ok, (kind, stream["name"], index)
