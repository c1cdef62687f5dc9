"""A branch that ends with a subagent open closes it, and the verifier checks the ends.

``delete_branch`` and ``clear_session`` end a branch line with ``agentjournal.BranchDeleted``
on its top stream; nothing reads or writes the line again. A subagent open on it — its own,
or a continuation of one open at its fork — is closed ``cancelled`` in that same atomic
write: ``SubagentCompleted`` on its parent stream and on its own, innermost first, each at
its exact revision, each carrying ``aj.line_end`` (the ``BranchDeleted``'s id), exactly as
``close_subagents`` closes a run's subagents. The offline verifier checks that an ended line
has nothing open and that what its end closed it closed ``cancelled``.

Every scenario runs the SDK's real ``Runner`` (``ScriptedModel``) to a pause for an approval
inside the subagent, on a SQLite file and on the KurrentDB double, and ends with the offline
verifier OK and ``show``/``sessions`` listing nothing open on the ended line. A key holder
who edits a line's end (drops its closes or its registry entry, writes after it) and
re-signs is caught by the verifier with one line.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, JournalSession
from agentjournal import events as ev
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Report, verify_bundle, verify_records
from agentjournal.ledger import SigningKey
from agentjournal.store.contract import AppendRequest, EventStore, RecordedEvent
from agentjournal.streams import branch_stream, branches_stream, session_stream
from agentjournal.testing.kurrentdb_double import ThreadedKurrentDBDouble
from agentjournal.walk import read_tree
from branch_items import assistant, user
from cli_run import run
from drive import drive
from ledger_sessions import rechain, sign_heads
from paused_graph import paused_graph

SID = "line-ends"
MAIN = session_stream(SID)
TOP = branch_stream(SID, "b")
KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}
LINE_END = "aj.line_end"  # events.LINE_END_KEY, spelled as the stored bytes spell it


@pytest.fixture(params=["sqlite", "kurrentdb"])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URI: a SQLite file, or the KurrentDB double (each test on an empty store)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    double: ThreadedKurrentDBDouble = request.getfixturevalue("kurrentdb_double")
    return double.uri


# -- the runs: a refund waiting for approval inside a subagent (one or two deep) -------------


async def _paused(session: JournalSession, depth: int = 1) -> list[str]:
    """Run until the refund waits for approval; the open subsessions, outermost first."""
    result: Any = await drive(
        paused_graph(depth), "Refund order 42", session=session, hooks=session
    )
    assert result.interruptions
    opened = [subagent.stream for subagent in await session.open_subagents()]
    assert len(opened) == depth
    return opened


async def _branch_with_open(journal: Journal, depth: int = 1) -> tuple[JournalSession, list[str]]:
    """Main holds a turn; branch ``b`` forks its head and runs until the refund waits inside
    its own subagent(s). Returns main's session object and the branch's open streams."""
    main = journal.session(SID)
    await main.add_items([user("hello"), assistant("hi")])
    await main.fork(name="b")
    opened = await _paused(journal.session(SID, branch="b"), depth)
    return main, opened


# -- what an ended line must look like ------------------------------------------------------


def _completed(event: RecordedEvent) -> tuple[str, str]:
    """(closed subsession, outcome) of a ``SubagentCompleted``."""
    _, closed, outcome = ev.decode_subagent_completed(event.data)
    return closed, outcome


async def _everything(store: EventStore) -> list[RecordedEvent]:
    return list(await store.read_all())


async def _closed_by_the_end(
    store: EventStore, top: str, opened: Sequence[str], reason: str
) -> RecordedEvent:
    """The line's top stream ends with its ``BranchDeleted`` (``reason``), right after the
    parent copy closing the outermost of ``opened``; every one of ``opened`` ends with its
    own ``SubagentCompleted`` (``cancelled``), twins naming each other, each copy carrying
    ``aj.line_end`` = the ``BranchDeleted``'s id; the closes innermost first. Returns the
    ``BranchDeleted``."""
    line = await store.read(top)
    deleted = line[-1]
    assert deleted.type == ev.BRANCH_DELETED
    assert ev.BranchDeleted.decode(deleted.data).reason == reason
    # It hides every item of the line, the open subagents' newest included (their items
    # are on their own streams: the top stream's last event does not know their indexes).
    indexes = [
        int(e.metadata[ev.INDEX_KEY])
        for stream in (top, *opened)
        for e in await store.read(stream)
        if ev.INDEX_KEY in e.metadata
    ]
    below = ev.BranchStarted.decode(line[0].data).next_index - 1  # the prefix's last
    assert ev.BranchDeleted.decode(deleted.data).through_index == max(indexes, default=below)
    end = str(deleted.id)
    outer = line[-2]
    assert outer.type == ev.SUBAGENT_COMPLETED
    assert outer.metadata[ev.CLOSES_KEY] == opened[0]
    assert _completed(outer) == (opened[0], "cancelled")
    assert outer.metadata[LINE_END] == end
    for stream in opened:
        last = (await store.read(stream))[-1]
        assert last.type == ev.SUBAGENT_COMPLETED, stream
        assert ev.CLOSES_KEY not in last.metadata  # the subsession's own copy
        assert _completed(last) == (stream, "cancelled")
        assert last.metadata[LINE_END] == end
        body = json.loads(last.data)
        assert reason in body["extensions"]["openai"]["reason"]
    closes = [
        (event.stream, *_completed(event))
        for event in await _everything(store)
        if event.type == ev.SUBAGENT_COMPLETED
        and ev.CLOSES_KEY in event.metadata
        and event.metadata.get(LINE_END) == end
    ]
    parents = [top, *opened[:-1]]
    assert closes == [
        (parent, stream, "cancelled")
        for parent, stream in reversed(list(zip(parents, opened, strict=True)))
    ]
    return deleted


async def _verifies(store: EventStore, trusted: Any = None) -> Report:
    signed = trusted is not None
    report = verify_records(await read_tree(store, SID), trusted or {}, allow_uncovered=not signed)
    assert report.ok, report.text()
    return report


def _nothing_open_on(uri: str, top: str, *, open_elsewhere: int = 0) -> None:
    """``show --json``: every stream of the ended line but its top stream ends with the
    subsession's own ``SubagentCompleted``; ``sessions --json``: the session's open
    subagents are only those of other lines (``open_elsewhere``)."""
    shown = run("show", SID, "--json", "--uri", uri)
    assert shown.returncode == 0, shown.stderr
    (branch,) = [b for b in json.loads(shown.stdout)["branches"] if b["stream"] == top]
    assert branch["deleted"] is not None
    for name, records in branch["streams"].items():
        if name == top:
            assert records[-1]["type"] == ev.BRANCH_DELETED
            continue
        assert records[-1]["type"] == ev.SUBAGENT_COMPLETED, name
    listed = run("sessions", "--json", "--fresh", "--uri", uri)
    assert listed.returncode == 0, listed.stderr
    (row,) = [r for r in json.loads(listed.stdout) if r["session_id"] == SID]
    assert row["subagents"]["open"] == open_elsewhere


# -- the scenarios ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_deleted_branch_closes_its_own_open_subagent(uri: str) -> None:
    async def scenario() -> None:
        async with Journal.open(uri) as journal:
            main, opened = await _branch_with_open(journal)
            await main.delete_branch("b")
            await _closed_by_the_end(journal.store, TOP, opened, "deleted")
            assert await JournalSession(journal.store, SID).open_subagents() == []
            await _verifies(journal.store)

    asyncio.run(scenario())
    _nothing_open_on(uri, TOP)


def test_a_clear_closes_the_open_subagent_of_every_branch(uri: str) -> None:
    async def scenario() -> None:
        async with Journal.open(uri) as journal:
            main, opened = await _branch_with_open(journal)
            await main.fork(at=0, name="quiet")  # a live branch with nothing open
            await main.clear_session()
            await _closed_by_the_end(journal.store, TOP, opened, "cleared")
            quiet = await journal.store.read(branch_stream(SID, "quiet"))
            assert [e.type for e in quiet] == [ev.BRANCH_STARTED, ev.BRANCH_DELETED]
            assert {b.name: b.deleted for b in await main.branches()} == {
                "b": "cleared",
                "quiet": "cleared",
            }
            await _verifies(journal.store)

    asyncio.run(scenario())
    _nothing_open_on(uri, TOP)


def test_a_deleted_branch_closes_a_continuation_open_at_its_cut(uri: str) -> None:
    """Main pauses inside billing; the fork continues billing on the branch; deleting the
    branch closes the continuation on the branch and leaves main's billing open (its run
    resumes there)."""

    async def scenario() -> None:
        async with Journal.open(uri) as journal:
            store = journal.store
            main = journal.session(SID)
            (billing,) = await _paused(main)
            await main.fork(name="b")
            (first,) = await store.read(TOP, limit=1)
            (continuation,) = ev.BranchStarted.decode(first.data).continuations.values()
            billing_head = await store.head(billing)
            await main.delete_branch("b")
            await _closed_by_the_end(store, TOP, [continuation], "deleted")
            assert await store.head(billing) == billing_head
            assert [s.stream for s in await main.open_subagents()] == [billing]
            await _verifies(store)

    asyncio.run(scenario())
    _nothing_open_on(uri, TOP, open_elsewhere=1)


def test_a_deleted_branch_closes_a_nested_chain_innermost_first(uri: str) -> None:
    async def scenario() -> None:
        async with Journal.open(uri) as journal:
            main, opened = await _branch_with_open(journal, depth=2)
            await main.delete_branch("b")
            await _closed_by_the_end(journal.store, TOP, opened, "deleted")
            await _verifies(journal.store)

    asyncio.run(scenario())
    _nothing_open_on(uri, TOP)


# -- one write: the closes, the end and the registry entry land together ---------------------


class Counting:
    """A real store that records every ``append_many`` it is asked for."""

    def __init__(self, inner: EventStore) -> None:
        self._inner = inner
        self.appends: list[list[AppendRequest]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append_many(self, requests: Sequence[AppendRequest]) -> Any:
        self.appends.append(list(requests))
        return await self._inner.append_many(requests)


@pytest.mark.slow
@pytest.mark.parametrize("end", ["delete_branch", "clear_session"])
async def test_the_end_of_a_line_and_its_closes_are_one_append(uri: str, end: str) -> None:
    """Nothing half: one ``append_many`` carries every close, the ``BranchDeleted`` and the
    registry entry, each stream once, at the exact revision read (a kill lands all or none)."""
    async with Journal.open(uri) as journal:
        _, opened = await _branch_with_open(journal, depth=2)
        counting = Counting(journal.store)
        session = JournalSession(counting, SID)
        heads = {s: await journal.store.head(s) for s in (TOP, *opened, branches_stream(SID))}
        if end == "delete_branch":
            await session.delete_branch("b")
        else:
            await session.clear_session()
        (requests,) = counting.appends
        by_stream = {r.stream: r for r in requests}
        assert len(by_stream) == len(requests)  # each stream once (KurrentDB refuses more)
        for stream, head in heads.items():
            assert by_stream[stream].expected == head, stream
        assert [e.type for e in by_stream[TOP].events] == [
            ev.SUBAGENT_COMPLETED,
            ev.BRANCH_DELETED,
        ]
        for stream in opened:
            assert by_stream[stream].events[-1].type == ev.SUBAGENT_COMPLETED
        # Read back: every stream holds exactly what the one append carried.
        for stream, head in heads.items():
            written = (await journal.store.read(stream))[(head or 0) + 1 :]
            assert [e.id for e in written] == [e.id for e in by_stream[stream].events]
        await _closed_by_the_end(
            journal.store, TOP, opened, "deleted" if end == "delete_branch" else "cleared"
        )


# -- signed: the checkpoint of the end covers the closed subsessions; bundles verify ----------


@pytest.mark.slow
@pytest.mark.parametrize("end", ["delete_branch", "clear_session"])
def test_a_signed_end_covers_the_closed_subsessions(uri: str, end: str, tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    assert run("keygen", "-o", str(key)).returncode == 0

    async def scenario() -> None:
        async with Journal.open(uri, signing_key=str(key)) as journal:
            main, opened = await _branch_with_open(journal, depth=2)
            if end == "delete_branch":
                await main.delete_branch("b")
            else:
                await main.clear_session()
            reason = "deleted" if end == "delete_branch" else "cleared"
            await _closed_by_the_end(journal.store, TOP, opened, reason)
            signing = SigningKey.from_file(str(key))
            report = await _verifies(journal.store, {signing.key_id: signing.public_key})
            assert "uncovered" not in report.text()

    asyncio.run(scenario())
    bundle = tmp_path / "bundle.json"
    exported = run("bundle", "export", SID, "-o", str(bundle), "--uri", uri, "--no-checkpoint")
    assert exported.returncode == 0, exported.stderr
    verified = run("bundle", "verify", str(bundle), "--pubkey", f"{key}.pub")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.splitlines()[-1].startswith("VERIFIED: ")


# -- forgeries the verifier rejects with one line ------------------------------------------------


@pytest.fixture(scope="module")
def ended_bundle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A bundle whose branch ``b`` was deleted with billing -> refunds open (SQLite, signed)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('ended') / 'journal.db'}"

    async def write() -> dict[str, Any]:
        async with Journal.open(uri, signing_key=KEY) as journal:
            main, _ = await _branch_with_open(journal, depth=2)
            await main.delete_branch("b")
            # Redacted, the closes' reasons are withheld; their outcome and aj.line_end not.
            redacted = json.loads(json.dumps(await export_bundle(journal.store, SID, redact=True)))
            report = verify_bundle(redacted, TRUSTED)
            assert report.ok, report.text()
            return await export_bundle(journal.store, SID)

    parsed: dict[str, Any] = json.loads(json.dumps(asyncio.run(write())))
    report = verify_bundle(parsed, TRUSTED)
    assert report.ok, report.text()
    return parsed


def _streams(bundle: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {s["name"]: s["events"] for s in bundle["streams"]}


def _opened_on_the_branch(bundle: dict[str, Any]) -> list[str]:
    """The branch's subsessions, outermost first (the ones its end closed)."""
    streams = _streams(bundle)
    found: list[str] = []
    stream = TOP
    while True:
        child = next(
            (
                e["metadata"]["aj.closes"]
                for e in streams[stream]
                if e["type"] == ev.SUBAGENT_COMPLETED
                and LINE_END in e["metadata"]
                and "aj.closes" in e["metadata"]
            ),
            None,
        )
        if child is None:
            return found
        found.append(child)
        stream = child


def _rejected(bundle: dict[str, Any]) -> str:
    """The verifier's one-line verdict on a forged bundle (it must fail, not crash)."""
    report = verify_bundle(bundle, TRUSTED, allow_uncovered=True)
    assert not report.ok, report.text()
    last = report.text().splitlines()[-1]
    assert last.startswith("FAILED: ")
    return last


def test_the_ended_bundle_closes_both_subsessions(ended_bundle: dict[str, Any]) -> None:
    assert len(_opened_on_the_branch(ended_bundle)) == 2


def test_a_close_dropped_from_the_subsession_stream_fails(ended_bundle: dict[str, Any]) -> None:
    bundle = copy.deepcopy(ended_bundle)
    inner = _opened_on_the_branch(bundle)[-1]
    _streams(bundle)[inner].pop()  # its own SubagentCompleted
    assert "SubagentCompleted has no twin" in _rejected(bundle)


def test_both_copies_of_a_close_dropped_and_rechained_fail(ended_bundle: dict[str, Any]) -> None:
    """The attacker removes the innermost close from both streams and re-chains them: the
    line ended with refunds open, which its end must have closed."""
    bundle = copy.deepcopy(ended_bundle)
    billing, refunds = _opened_on_the_branch(bundle)
    streams = _streams(bundle)
    streams[refunds].pop()
    streams[billing][:] = [e for e in streams[billing] if e["metadata"].get("aj.closes") != refunds]
    for name in (refunds, billing):
        rechain(bundle, name)
    # billing's own close now names a hash its parent copy no longer matches: re-chain the
    # parent copy's aj.closes_hash too, then the top stream.
    top = streams[TOP]
    outer = next(e for e in top if e["metadata"].get("aj.closes") == billing)
    outer["metadata"]["aj.closes_hash"] = streams[billing][-1]["metadata"]["aj.hash"]
    rechain(bundle, TOP)
    verdict = _rejected(bundle)
    assert "left open" in verdict
    assert refunds in verdict


def test_an_outcome_changed_on_a_close_fails(ended_bundle: dict[str, Any]) -> None:
    bundle = copy.deepcopy(ended_bundle)
    inner = _opened_on_the_branch(bundle)[-1]
    own = _streams(bundle)[inner][-1]
    own["data"] = own["data"].replace('"cancelled"', '"success"')
    assert "(integrity)" in _rejected(bundle)  # not re-chained: its chain breaks


def test_an_outcome_changed_and_rechained_fails(ended_bundle: dict[str, Any]) -> None:
    """Both copies say ``success`` and both streams are re-chained (the top's copy records
    the new hash): only the line-end check can tell."""
    bundle = copy.deepcopy(ended_bundle)
    billing, refunds = _opened_on_the_branch(bundle)
    streams = _streams(bundle)
    parent = next(e for e in streams[billing] if e["metadata"].get("aj.closes") == refunds)
    for event in (streams[refunds][-1], parent):
        event["data"] = event["data"].replace('"cancelled"', '"success"')
    rechain(bundle, refunds)
    parent["metadata"]["aj.closes_hash"] = streams[refunds][-1]["metadata"]["aj.hash"]
    rechain(bundle, billing)
    outer = next(e for e in streams[TOP] if e["metadata"].get("aj.closes") == billing)
    outer["metadata"]["aj.closes_hash"] = streams[billing][-1]["metadata"]["aj.hash"]
    rechain(bundle, TOP)
    verdict = _rejected(bundle)
    assert "cancelled" in verdict, verdict


def test_a_line_end_mark_elsewhere_fails(ended_bundle: dict[str, Any]) -> None:
    """``aj.line_end`` copied onto a close of the main line (re-chained): it names no end
    of that stream's line; onto an item event: only a line's end closes carry it."""
    end = _streams(ended_bundle)[TOP][-1]["id"]
    bundle = copy.deepcopy(ended_bundle)
    _streams(bundle)[MAIN][-1]["metadata"][LINE_END] = end
    rechain(bundle, MAIN)
    assert "only a line's end closes carry it" in _rejected(bundle)
    bundle = copy.deepcopy(ended_bundle)
    outer = _streams(bundle)[TOP][-2]  # the parent copy of billing's close
    outer["metadata"][LINE_END] = "0" * 8 + "-0000-0000-0000-" + "0" * 12
    rechain(bundle, TOP)
    verdict = _rejected(bundle)
    assert "aj.line_end names no end of this stream's line" in verdict


# -- the plan (pure) -------------------------------------------------------------------------


async def test_the_plan_puts_the_end_after_the_closes_in_one_request_per_stream() -> None:
    """``plan_line_ends(closes=)``: the close plan's requests join the end's; on the top
    stream its close and the ``BranchDeleted`` are one request at the close's expected
    revision, the ``BranchDeleted`` sealed after the close's hash."""
    # Imported here: the scenarios above run (and fail) on the base, which lacks these.
    from agentjournal.engine.fork import LineHead, line_end_id, plan_line_ends
    from agentjournal.engine.lines import plan_closes
    from agentjournal.ledger.chain import HASH_KEY, PREV_KEY

    async with Journal.open("sqlite://:memory:") as journal:
        _, opened = await _branch_with_open(journal, depth=2)
        line = journal.session(SID, branch="b")
        core = line._core  # the line's own tree, as delete_line plans on it
        async with core.tree.lock:
            await core.reader.refresh(0)
        close = plan_closes(
            core.tree,
            core.facts,
            next_index=await core.reader.next_index(),
            nonce="n1",
            end=line_end_id(SID, "n1", 0),
            reason="deleted",
            trace={},
        )
        assert close is not None
        head = LineHead(
            "b",
            TOP,
            "main",
            close.commit.heads[TOP],
            close.commit.hashes[TOP],
            await core.reader.next_index(),
        )
        requests, hashes = plan_line_ends(
            SID,
            [head],
            reason="deleted",
            registry=(0, "ab" * 32),
            nonce="n1",
            trace={},
            closes={TOP: close},
        )
        by_stream = {r.stream: r for r in requests}
        assert set(by_stream) == {TOP, *opened, branches_stream(SID)}
        assert len(requests) == len(by_stream)
        top = by_stream[TOP]
        assert top.expected == core.tree.heads[TOP]
        assert [e.type for e in top.events] == [ev.SUBAGENT_COMPLETED, ev.BRANCH_DELETED]
        closing, deleted = top.events
        assert deleted.id == line_end_id(SID, "n1", 0)
        assert deleted.metadata[PREV_KEY] == closing.metadata[HASH_KEY]
        assert hashes[TOP] == deleted.metadata[HASH_KEY]
        assert closing.metadata[LINE_END] == str(deleted.id)
        for stream in opened:
            assert by_stream[stream].expected == core.tree.heads[stream]


class WriteAfterHeadRead:
    """A real store that, right after the first read of the branch's head (the clear's
    look at each line), lets another object write on the branch: the clear then reads
    the line's open subagents after that write."""

    def __init__(self, inner: EventStore) -> None:
        self._inner = inner
        self.armed = False
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def read(self, stream: str, **options: Any) -> Any:
        found = await self._inner.read(stream, **options)
        if self.armed and not self.fired and stream == TOP and options.get("backwards"):
            self.fired = True
            other = JournalSession(self._inner, SID, branch="b")
            await other.add_items([assistant("written meanwhile")])
        return found


async def test_a_clear_ends_a_line_as_its_open_subagents_read_it(uri: str) -> None:
    """A write on the branch between the clear's look at its head and its read of the
    branch's open subagents: the closes are at the newer revisions, and the
    ``BranchDeleted`` hides the item written meanwhile too (its next index is the one of
    that same read)."""
    async with Journal.open(uri) as journal:
        _, opened = await _branch_with_open(journal)
        racing = WriteAfterHeadRead(journal.store)
        session = JournalSession(racing, SID)
        racing.armed = True
        await session.clear_session()
        assert racing.fired
        deleted = await _closed_by_the_end(journal.store, TOP, opened, "cleared")
        billing = await journal.store.read(opened[0])
        meanwhile = next(e for e in billing if b"written meanwhile" in e.data)
        through = ev.BranchDeleted.decode(deleted.data).through_index
        assert through == int(meanwhile.metadata[ev.INDEX_KEY])
        await _verifies(journal.store)


@pytest.mark.parametrize("end", ["delete_branch", "clear_session"])
async def test_a_signing_session_signs_the_end_of_a_line_at_once(tmp_path: Path, end: str) -> None:
    """``delete_branch`` and ``clear_session`` end branches with ``BranchDeleted`` on lines
    nothing will write again: a signing session covers them in the same call."""
    key = SigningKey.generate()
    async with Journal.open(f"sqlite:///{tmp_path / 'f.db'}", signing_key=key) as journal:
        main = journal.session(SID)
        await main.add_items([user("q1"), assistant("a1")])
        await main.fork(name="alt")
        await journal.session(SID, branch="alt").add_items([user("alt q")])
        if end == "delete_branch":
            await main.delete_branch("alt")
        else:
            await main.clear_session()
        report = verify_records(await read_tree(journal.store, SID), {key.key_id: key.public_key})
        assert report.ok, report.text()


# -- a key holder's edits of a line's end, re-chained and re-signed ---------------------------


def _resign(bundle: dict[str, Any]) -> None:
    """What a key holder does last: one checkpoint over every stream's head, signed."""
    sign_heads(bundle, KEY)


def _ended(tmp_path: Path) -> dict[str, Any]:
    """A signed bundle of a session whose branch ``b`` was deleted with a subagent open on it
    (its end closed it); it verifies."""

    async def build() -> dict[str, Any]:
        async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}", signing_key=KEY) as journal:
            main = journal.session(SID)
            await main.add_items([user("hello"), assistant("hi")])
            await main.fork(name="b")
            await _paused(journal.session(SID, branch="b"))
            await main.delete_branch("b")
            await main.checkpoint()
            found: dict[str, Any] = json.loads(json.dumps(await export_bundle(journal.store, SID)))
            return found

    bundle = asyncio.run(build())
    assert verify_bundle(copy.deepcopy(bundle), TRUSTED).ok
    return bundle


def test_a_resigned_end_with_its_closes_dropped_and_an_event_after_it_fails(
    tmp_path: Path,
) -> None:
    bundle = _ended(tmp_path)
    streams = {s["name"]: s["events"] for s in bundle["streams"]}
    billing = next(e["metadata"]["aj.closes"] for e in streams[TOP] if "aj.closes" in e["metadata"])
    streams[billing].pop()  # the subsession's own close
    streams[TOP][:] = [e for e in streams[TOP] if "aj.line_end" not in e["metadata"]]
    registry = branches_stream(SID)
    streams[registry][:] = [
        e for e in streams[registry] if e["type"] != "agentjournal.BranchRemoved"
    ]
    after = copy.deepcopy(next(e for e in streams[TOP] if e["type"] == "UserMessageReceived"))
    after["id"] = str(uuid.uuid4())
    streams[TOP].append(after)  # the BranchDeleted is no longer the line's last event
    for name in (billing, TOP, registry):
        rechain(bundle, name)
    _resign(bundle)
    report = verify_bundle(bundle, TRUSTED)
    assert not report.ok, report.text()
    text = report.text()
    assert "written after its end" in text, text
    assert "left open on branch 'b'" in text, text
    assert f"no BranchRemoved in {registry} says so" in text, text


def test_a_resigned_end_without_its_registry_entry_fails(tmp_path: Path) -> None:
    """Only the registry's ``BranchRemoved`` dropped (re-chained, re-signed): the registry
    would say the branch is live while its line says it ended. One line says so."""
    bundle = _ended(tmp_path)
    registry = branches_stream(SID)
    streams = {s["name"]: s["events"] for s in bundle["streams"]}
    streams[registry][:] = [
        e for e in streams[registry] if e["type"] != "agentjournal.BranchRemoved"
    ]
    rechain(bundle, registry)
    _resign(bundle)
    report = verify_bundle(bundle, TRUSTED)
    assert [(p.stream, p.message) for p in report.problems] == [
        (TOP, f"branch 'b' ended here, but no BranchRemoved in {registry} says so")
    ], report.text()


def test_a_resigned_event_after_an_intact_end_fails_once(tmp_path: Path) -> None:
    """The end's closes and registry entry intact, one event appended after the
    ``BranchDeleted`` (re-chained, re-signed): one line, "written after its end"."""
    bundle = _ended(tmp_path)
    streams = {s["name"]: s["events"] for s in bundle["streams"]}
    end = len(streams[TOP]) - 1
    assert streams[TOP][end]["type"] == "agentjournal.BranchDeleted"
    after = copy.deepcopy(next(e for e in streams[TOP] if e["type"] == "UserMessageReceived"))
    after["id"] = str(uuid.uuid4())
    streams[TOP].append(after)
    rechain(bundle, TOP)
    _resign(bundle)
    report = verify_bundle(bundle, TRUSTED)
    assert [(p.stream, p.message) for p in report.problems] == [
        (TOP, f"1 event written after its end (its BranchDeleted at revision {end})")
    ], report.text()


def test_a_resigned_registry_entry_of_a_line_that_did_not_end_fails(tmp_path: Path) -> None:
    """The line's end dropped (its ``BranchDeleted`` and both copies of its close), its
    ``BranchRemoved`` kept, re-chained and re-signed: the registry says deleted, the line
    says live."""
    bundle = _ended(tmp_path)
    streams = {s["name"]: s["events"] for s in bundle["streams"]}
    billing = next(e["metadata"]["aj.closes"] for e in streams[TOP] if "aj.closes" in e["metadata"])
    streams[billing].pop()
    streams[TOP][:] = [
        e
        for e in streams[TOP]
        if "aj.line_end" not in e["metadata"] and e["type"] != "agentjournal.BranchDeleted"
    ]
    for name in (billing, TOP):
        rechain(bundle, name)
    _resign(bundle)
    report = verify_bundle(bundle, TRUSTED)
    assert [p.message for p in report.problems] == [
        "branch 'b' was not deleted as the entry says"
    ], report.text()


def test_a_resigned_second_registry_entry_of_one_end_fails(tmp_path: Path) -> None:
    """A copy of the ``BranchRemoved`` (another id) appended to the registry, re-chained and
    re-signed: one end, one entry."""
    bundle = _ended(tmp_path)
    registry = branches_stream(SID)
    streams = {s["name"]: s["events"] for s in bundle["streams"]}
    removed = next(e for e in streams[registry] if e["type"] == "agentjournal.BranchRemoved")
    twice = copy.deepcopy(removed)
    twice["id"] = str(uuid.uuid4())
    streams[registry].append(twice)
    rechain(bundle, registry)
    _resign(bundle)
    report = verify_bundle(bundle, TRUSTED)
    assert [p.message for p in report.problems] == ["branch 'b' is removed twice"], report.text()
