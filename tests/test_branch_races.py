"""Races of ``clear_session``, ``reset_authority`` and ``fork`` with forks and deletes.

Each race is staged deterministically as two processes could make it: the write under test
is planned on its own store connection, and right before it reaches the store another
object, on another connection, commits the racing write. On a SQLite file and on the
KurrentDB double (real kurrentdbclient over gRPC); each scenario ends with the offline
verifier.

- A clear while a subagent is open on main writes its ``SessionCleared`` on the subagent's
  stream, which a fork of main (``BranchForked`` on main's top stream, ``BranchAdded`` in the
  registry) does not touch, and with no live branch to end it expects nothing a fork writes.
  So the clear also appends ``agentjournal.LineGuarded`` at main's exact head: a fork landing
  between its plan and its write conflicts, and the clear plans again with the branch (and
  ends it).
- Without an open subagent, or with a live branch, every fork already conflicts with the
  clear (main's top stream, the branch's head, the registry): pinned here as the proof that
  no other fork slips through.
- ``reset_authority`` on a branch guards the line's head the same way and re-checks the
  line in every plan, so a delete or clear of the line landing between its liveness check
  and its write makes it plan again and refuse (``errors.BranchDeleted``, one line): no
  reset lands on an ended line.
- A fork racing a delete of its own line is refused; a clear racing a fork ends the new
  branch too; a deleted line's authority cannot be reset.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, JournalSession
from agentjournal import events as ev
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle, verify_records
from agentjournal.authority import Policy
from agentjournal.errors import BranchDeleted
from agentjournal.ledger import SigningKey
from agentjournal.store.contract import (
    AppendRequest,
    AppendResult,
    EventStore,
    NewEvent,
    StreamState,
)
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.streams import (
    authority_stream,
    branch_authority_stream,
    branch_stream,
    session_stream,
)
from agentjournal.testing.kurrentdb_double import ThreadedKurrentDBDouble
from agentjournal.walk import read_tree
from branch_items import assistant as _assistant
from branch_items import user as _user
from drive import METHODS, Method, drive
from ledger_sessions import rechain
from paused_graph import paused_graph

SID = "races"
MAIN = session_stream(SID)
GUARDED = "agentjournal.LineGuarded"  # spelled as the stored bytes spell it
POLICY = Path(__file__).parents[1] / "samples" / "policy.yml"
KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}


@pytest.fixture(params=["sqlite-file", "kurrentdb"])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store two connections can share: a SQLite file, or the KurrentDB double."""
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'races.db'}"
    double: ThreadedKurrentDBDouble = request.getfixturevalue("kurrentdb_double")
    return double.uri


class Before:
    """A store that, right before the first write carrying an event of type ``kind``
    reaches it, lets ``first`` commit (another object's write on another connection):
    the interleaving a second process could make between a plan and its write."""

    def __init__(self, inner: EventStore, kind: str, first: Callable[[], Awaitable[None]]) -> None:
        self._inner, self._kind, self._first, self.fired = inner, kind, first, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def _maybe(self, new: Sequence[NewEvent]) -> None:
        if not self.fired and any(event.type == self._kind for event in new):
            self.fired = True
            await self._first()

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: StreamState | int
    ) -> AppendResult:
        await self._maybe(events)
        return await self._inner.append(stream, events, expected=expected)

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        await self._maybe([event for request in requests for event in request.events])
        return await self._inner.append_many(requests)


@asynccontextmanager
async def _journals(uri: str, count: int, **options: Any) -> AsyncIterator[list[Journal]]:
    """``count`` journals on one store, each with its own connection (and its own trees:
    objects of two journals share no lock, as two processes would not)."""
    opened = [Journal.open(uri, **options) for _ in range(count)]
    journals = [await journal.__aenter__() for journal in opened]
    try:
        yield journals
    finally:
        for journal in reversed(opened):
            await journal.__aexit__(None, None, None)


def _text(item: Any) -> Any:
    return item["content"]


async def _verifies(store: EventStore, **options: Any) -> None:
    report = verify_records(await read_tree(store, SID), TRUSTED, **options)
    assert report.ok, report.text()
    assert report.integrity.state in ("verified", "unsigned"), report.text()


# -- a run paused inside a subagent (billing waits for an approval) --------------------------


async def _pause_inside_billing(session: JournalSession, method: Method) -> str:
    """triage hands off to billing, whose refund waits for approval: billing stays open on
    main; its stream's name."""
    paused: Any = await drive(
        paused_graph(), "Refund order 42", method=method, session=session, hooks=session
    )
    assert paused.interruptions
    (billing,) = await session.open_subagents()
    return billing.stream


# -- 1. a clear racing a fork ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_a_fork_landing_inside_a_clear_with_a_subagent_open_is_ended_by_it(
    uri: str, method: Method
) -> None:
    """The gap: billing open on main, no branch yet; another process forks main while this
    clear is between its plan and its write. The clear lands after the fork, so it must end
    the new branch too (before: ``late`` stayed live, with main's items)."""
    async with _journals(uri, 3, signing_key=KEY) as (journal, forker, clearer):
        billing = await _pause_inside_billing(journal.session(SID), method)

        async def fork() -> None:
            await forker.session(SID).fork(name="late")

        racing = Before(clearer.store, ev.SESSION_CLEARED, fork)
        await JournalSession(racing, SID).clear_session()
        assert racing.fired

        fresh = journal.session(SID)
        assert await fresh.list_branches() == []  # as the SDK's clear: no branch left
        assert {(b.name, b.deleted) for b in await fresh.branches()} == {("late", "cleared")}
        assert await fresh.get_items() == []
        assert await fresh.get_items(branch_id="late") == []
        # The clear planned again after the fork: main's guard sits after the marker, the
        # clear on billing's stream (still open: the run has not ended) names it.
        top = [e.type for e in await journal.store.read(MAIN)]
        assert top[-2:] == [ev.BRANCH_FORKED, GUARDED]
        (cleared,) = [e for e in await journal.store.read(billing) if e.type == ev.SESSION_CLEARED]
        guard = (await journal.store.read(MAIN))[-1]
        assert cleared.metadata[ev.TWIN_KEY] == str(guard.id)
        assert guard.metadata[ev.TWIN_KEY] == str(cleared.id)
        assert guard.metadata[ev.OPEN_KEY] == billing  # billing stays open after the guard
        await _verifies(journal.store, allow_uncovered=True)


async def test_a_clear_with_a_subagent_open_and_no_race_guards_main_once(uri: str) -> None:
    """Without a race the guard is one more event on main's top stream, and the session
    reads, resumes and verifies as before."""
    async with _journals(uri, 1, signing_key=KEY) as (journal,):
        main = journal.session(SID)
        await _pause_inside_billing(main, "run")
        before = await journal.store.head(MAIN)
        assert before is not None
        await main.clear_session()
        assert await main.get_items() == []
        assert [e.type for e in await journal.store.read(MAIN, from_revision=before + 1)] == [
            GUARDED
        ]
        await main.add_items([_user("after the clear")])
        assert [_text(i) for i in await journal.session(SID).get_items()] == ["after the clear"]
        await _verifies(journal.store, allow_uncovered=True)


@pytest.mark.parametrize("parent", ["main", "alt"])
async def test_every_other_fork_already_conflicts_with_a_clear(uri: str, parent: str) -> None:
    """The proof that no other fork slips through: with no subagent open the clear writes on
    main's top stream, where every fork of main writes its marker; a live branch's fork
    writes on that branch's head and the registry, both of which the clear ends at their
    exact heads. Either way the fork conflicts, the clear plans again and ends it."""
    async with _journals(uri, 3) as (journal, forker, clearer):
        main = journal.session(SID)
        await main.add_items([_user("q1"), _assistant("a1"), _user("q2"), _assistant("a2")])
        if parent == "alt":
            await main.fork(at=2, name="alt")

        async def fork() -> None:
            line = forker.session(SID, branch=None if parent == "main" else parent)
            await line.fork(name="late")

        racing = Before(clearer.store, ev.SESSION_CLEARED, fork)
        await JournalSession(racing, SID).clear_session()
        assert racing.fired
        ended = {(b.name, b.deleted) for b in await journal.session(SID).branches()}
        assert ("late", "cleared") in ended
        assert all(deleted == "cleared" for _, deleted in ended)
        assert GUARDED not in [e.type for e in await journal.store.read(MAIN)]
        await _verifies(journal.store, allow_uncovered=True)


# -- 2. a reset racing the end of its line --------------------------------------------------


@pytest.mark.parametrize("end", ["delete_branch", "clear_session"])
async def test_a_reset_racing_the_end_of_its_line_is_refused(uri: str, end: str) -> None:
    """The reset checks the line is live, then another process deletes (or clears) it
    before the reset's log entry lands: the reset guards the line's head, so the end
    conflicts it, it plans again, sees the end and refuses."""
    async with _journals(uri, 3, signing_key=KEY) as (journal, ender, resetter):
        main = journal.session(SID, policy=str(POLICY))
        await main.add_items([_user("q1"), _assistant("a1")])
        await main.fork(name="alt")
        await journal.session(SID, branch="alt").add_items([_user("on alt")])
        log = branch_authority_stream(SID, "alt")
        before = await journal.store.head(log)

        async def finish() -> None:
            other = ender.session(SID, policy=str(POLICY))
            if end == "delete_branch":
                await other.delete_branch("alt")
            else:
                await other.clear_session()

        racing = Before(resetter.store, ev.AUTHORITY_RESET, finish)
        stale = JournalSession(racing, SID, branch="alt", policy=Policy.load(POLICY))
        await stale.get_items()
        with pytest.raises(BranchDeleted) as raised:
            await stale.reset_authority("triage", reason="after the end")
        assert racing.fired
        assert len(str(raised.value).splitlines()) == 1
        assert await journal.store.head(log) == before  # no reset on the ended line
        top = await journal.store.read(branch_stream(SID, "alt"))
        assert top[-1].type == ev.BRANCH_DELETED
        await _verifies(journal.store, allow_uncovered=True)


async def test_a_reset_on_a_live_branch_guards_its_head_and_verifies(uri: str) -> None:
    """Without a race the reset lands with its guard at the line's head, each naming the
    other; main's reset stays as it was (main is never ended: no guard, no history read)."""
    async with _journals(uri, 1, signing_key=KEY) as (journal,):
        main = journal.session(SID, policy=str(POLICY))
        await main.add_items([_user("q1"), _assistant("a1")])
        await main.fork(name="alt")
        alt = journal.session(SID, branch="alt", policy=str(POLICY))
        await alt.reset_authority("triage", reason="a fresh start on alt")
        await main.reset_authority("triage", reason="a fresh start on main")
        (reset,) = [
            e
            for e in await journal.store.read(branch_authority_stream(SID, "alt"))
            if e.type == ev.AUTHORITY_RESET
        ]
        guard = (await journal.store.read(branch_stream(SID, "alt")))[-1]
        assert guard.type == GUARDED
        assert (reset.metadata[ev.TWIN_KEY], guard.metadata[ev.TWIN_KEY]) == (
            str(guard.id),
            str(reset.id),
        )
        assert GUARDED not in [e.type for e in await journal.store.read(MAIN)]
        await alt.add_items([_user("alt goes on")])
        assert [_text(i) for i in await alt.get_items()][-1] == "alt goes on"
        await _verifies(journal.store, allow_uncovered=True)


# -- the verifier and the guards --------------------------------------------------------------


async def _guarded_bundle(uri: str) -> dict[str, Any]:
    """A signed session with both guards: a reset on ``alt``, then a clear with billing open
    on main (which ends ``alt``); exported, through JSON."""
    async with _journals(uri, 1, signing_key=KEY) as (journal,):
        main = journal.session(SID, policy=str(POLICY))
        await main.add_items([_user("q1"), _assistant("a1")])
        await main.fork(name="alt")
        alt = journal.session(SID, branch="alt", policy=str(POLICY))
        await alt.reset_authority("triage", reason="fresh")
        await _pause_inside_billing(main, "run")
        await main.clear_session()
        await main.checkpoint()
        parsed: dict[str, Any] = json.loads(json.dumps(await export_bundle(journal.store, SID)))
    return parsed


def _events(bundle: dict[str, Any], name: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = next(s for s in bundle["streams"] if s["name"] == name)["events"]
    return found


def _guards(bundle: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(s["name"], e) for s in bundle["streams"] for e in s["events"] if e["type"] == GUARDED]


async def test_a_bundle_with_guards_verifies_and_each_forgery_fails_with_one_line(
    uri: str,
) -> None:
    """Both guards verify offline; a guard removed (re-chained), its body pointed elsewhere
    or garbled, or the twin link dropped from what it guards each fail the guards check
    with one line, never a crash."""
    bundle = await _guarded_bundle(uri)
    report = verify_bundle(bundle, TRUSTED)
    assert report.ok, report.text()
    guards = _guards(bundle)
    assert sorted(name for name, _ in guards) == sorted([MAIN, branch_stream(SID, "alt")])

    def removed(b: dict[str, Any], name: str, guard: dict[str, Any]) -> None:
        _events(b, name).remove(next(e for e in _events(b, name) if e["id"] == guard["id"]))
        rechain(b, name)

    def repointed(b: dict[str, Any], name: str, guard: dict[str, Any]) -> None:
        event = next(e for e in _events(b, name) if e["id"] == guard["id"])
        body = json.loads(event["data"])
        body["event"] = "0" * 32
        event["data"] = json.dumps(body)
        rechain(b, name)

    def unlinked(b: dict[str, Any], name: str, guard: dict[str, Any]) -> None:
        target = guard["metadata"][ev.TWIN_KEY]
        for stream in b["streams"]:
            for event in stream["events"]:
                if event["id"] == target:
                    del event["metadata"][ev.TWIN_KEY]
                    rechain(b, stream["name"])
                    return

    def garbled(b: dict[str, Any], name: str, guard: dict[str, Any]) -> None:
        event = next(e for e in _events(b, name) if e["id"] == guard["id"])
        event["data"] = json.dumps({"event": ["not", "an", "id"]})
        rechain(b, name)

    for name, guard in guards:
        for forge in (removed, repointed, unlinked, garbled):
            forged = copy.deepcopy(bundle)
            forge(forged, name, guard)
            failed = verify_bundle(forged, TRUSTED, allow_uncovered=True)
            assert not failed.ok, (forge.__name__, name)
            assert failed.text().splitlines()[-1].startswith("FAILED: ")
            guarding = [str(p) for p in failed.problems if p.check == "guards"]
            assert guarding, (forge.__name__, name, failed.text())
            assert all("\n" not in message for message in guarding)


@pytest.mark.parametrize("end", ["delete_branch", "clear_session"])
async def test_a_reset_on_a_branch_that_then_ends_is_signed_by_the_end(uri: str, end: str) -> None:
    """The checkpoint an end of a line writes at once covers that line's authority log too:
    nothing writes on an ended line again, so a reset on it (unsigned till then) would stay
    uncovered forever if the end signed the line's top stream alone."""
    async with _journals(uri, 1, signing_key=KEY) as (journal,):
        main = journal.session(SID, policy=str(POLICY))
        await main.add_items([_user("q1"), _assistant("a1")])
        await main.fork(name="alt")
        alt = journal.session(SID, branch="alt", policy=str(POLICY))
        await alt.reset_authority("triage", reason="fresh")
        if end == "delete_branch":
            await main.delete_branch("alt")
        else:
            await main.clear_session()
        bundle = json.loads(json.dumps(await export_bundle(journal.store, SID)))
        report = verify_bundle(bundle, TRUSTED)
        assert report.ok, report.text()


# -- a fork racing a delete, a clear racing a fork, a reset after a delete (SQLite file) ------


async def test_a_fork_racing_a_delete_of_its_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    base = SQLiteEventStore.connect(path)
    main = JournalSession(base, SID)
    await main.add_items([_user("q1"), _assistant("a1"), _user("q2"), _assistant("a2")])
    await main.fork(at=2, name="alt")
    await JournalSession(base, SID, branch="alt").add_items([_user("alt q")])
    other = JournalSession(SQLiteEventStore.connect(path), SID)

    async def delete() -> None:
        await other.delete_branch("alt")

    racing = Before(SQLiteEventStore.connect(path), "agentjournal.BranchForked", delete)
    mine = JournalSession(racing, SID, branch="alt")
    await mine.get_items()
    with pytest.raises(BranchDeleted):
        await mine.fork(name="child")
    assert racing.fired
    assert [b.name for b in await main.branches()] == ["alt"]  # no child of a deleted line


async def test_a_clear_racing_a_fork_ends_the_new_branch_too(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    base = SQLiteEventStore.connect(path)
    main = JournalSession(base, SID)
    await main.add_items([_user("q1"), _assistant("a1"), _user("q2"), _assistant("a2")])
    await main.fork(at=2, name="alt")
    other_store = SQLiteEventStore.connect(path)

    async def fork() -> None:
        await JournalSession(other_store, SID).fork(at=2, name="late")
        await JournalSession(other_store, SID, branch="late").add_items([_user("late q")])

    racing = Before(SQLiteEventStore.connect(path), "agentjournal.SessionCleared", fork)
    await JournalSession(racing, SID).clear_session()
    assert racing.fired
    fresh = JournalSession(SQLiteEventStore.connect(path), SID)
    assert [b["branch_id"] for b in await fresh.list_branches()] == []  # as the SDK's clear
    assert {(b.name, b.deleted) for b in await fresh.branches()} == {
        ("alt", "cleared"),
        ("late", "cleared"),
    }


async def test_a_deleted_line_s_authority_cannot_be_reset(tmp_path: Path) -> None:
    policy = Path(__file__).parents[1] / "samples" / "policy.yml"
    async with Journal.open(f"sqlite:///{tmp_path / 'c.db'}") as journal:
        main = journal.session(SID, policy=str(policy))
        await main.add_items([_user("q1"), _user("q2")])
        await main.fork(at=1, name="alt")
        stale = journal.session(SID, branch="alt", policy=str(policy))
        await stale.get_items()
        await main.delete_branch("alt")
        with pytest.raises(BranchDeleted):
            await stale.reset_authority("triage", reason="after the delete")
        assert await journal.store.head(f"{authority_stream(SID)}@alt") is None
