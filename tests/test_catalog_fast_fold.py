"""The catalog's lean checks give the answers of the full ones, and its fold in two parts
the answer of one fold.

The fold checks a chain link with :func:`~agentjournal.read.catalog.ledger.linked` and
reads a ``ModelResponded`` with :func:`~agentjournal.read.catalog.responses.response_counts`,
and leaves what they do not pass to ``chain_problem`` and ``ModelResponse.decode``. A store
with branches, handoffs, signed checkpoints, an erased subject, eval scores, a tool call,
malformed model responses and broken chains folds to the same state and rows either way;
and on every event of it, and on damaged copies of each, the lean check passes only what
``chain_problem`` passes. Folded in two parts (each session tree on one of them, every
way the store's sessions can be shared out), merged, it is the one fold; so is a listing
whose other part came from a forked child, from a part read before or after a writer
appended, or from none (a child that failed).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import Journal, _forked, tokens
from agentjournal.cli import sessions as sessions_cli
from agentjournal.errors import StoreUnavailable
from agentjournal.ledger import SigningKey
from agentjournal.ledger.chain import CHAIN_KEY, HASH_KEY, PREV_KEY, SEQ_KEY, seal
from agentjournal.read import projections
from agentjournal.read.catalog import fold as fold_module
from agentjournal.read.catalog import listing, parts
from agentjournal.read.catalog.fold import Catalog
from agentjournal.read.catalog.ledger import chain_problem, linked
from agentjournal.read.catalog.responses import response_counts
from agentjournal.shred import MemoryKeyStore
from agentjournal.store import open_store
from agentjournal.store.contract import NewEvent, RecordedEvent, StreamState
from agentjournal.streams import session_stream
from agentjournal.tokens import ModelResponse
from drive import drive
from eval_runs import Given, run_session, write_run
from handoff_scenarios import nested, single

KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}
RESPONDED = "agentjournal.ModelResponded"


@function_tool
def lookup(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}: fine"


def _asking() -> Agent[Any]:
    return Agent(
        name="asker",
        model=ScriptedModel(
            [
                [function_call("lookup", {"order_id": "7"}, call_id="c1")],
                [assistant_message("done")],
            ]
        ),
        tools=[lookup],
    )


def _responded(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _response(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "session_id": "odd",
        "agent": "triage",
        "model": None,
        "system": None,
        "response_id": "r1",
        "usage": {"input_tokens": "3", "output_tokens": "4", "total_tokens": "7"},
        "started_at": None,
        "ended_at": "2026-12-05T00:00:00Z",
        "outputs": {"message": 1},
    }
    body.update(changes)
    return body


ODD_RESPONSES = [
    _response(),
    _response(usage={"total_tokens": 9}),
    _response(usage={"total_tokens": True}),
    _response(usage={"total_tokens": -1}),
    _response(usage={"total_tokens": "\u00b2"}),
    _response(usage={"total_tokens": "\u0663"}),
    _response(usage={"total_tokens": "1.5"}),
    _response(usage={"total_tokens": 1.5}),
    _response(usage={"total_tokens": 10**20}),
    _response(usage={"total_tokens": str(10**20)}),
    _response(outputs={"message": float("nan")}),
    _response(agent="\ud800"),
    _response(usage={}),
    _response(usage=[]),
    _response(outputs={"message": "2"}),
    _response(outputs={"message": False}),
    _response(outputs=None),
    _response(agent=None),
    _response(agent=3),
    _response(model=3),
    _response(started_at="now"),
    _response(ended_at=None),
    {k: v for k, v in _response().items() if k != "outputs"},
    {k: v for k, v in _response().items() if k != "session_id"},
    {k: v for k, v in _response().items() if k != "model"},
]


async def _write_rich_store(uri: str) -> None:
    """Branches (a fork of a fork), handoffs on two lines, checkpoints, an erased subject,
    a tool call, eval scores, odd model responses and broken chains."""
    async with Journal.open(uri, keys=MemoryKeyStore(), signing_key=KEY) as journal:
        main = journal.session("tree", user_id="alice", subject="alice")
        await drive(nested(), "refund please", session=main, hooks=main)
        await main.fork(name="draft")
        draft = journal.session("tree", branch="draft", subject="alice")
        await drive(single(), "why twice?", session=draft, hooks=draft)
        await draft.fork(name="deeper")
        await main.checkpoint()
        bob = journal.session("bob-own", user_id="bob", subject="bob")
        await drive(_asking(), "look it up", session=bob, hooks=bob)
        await journal.erase(subject="alice", reason="request 1", by="dpo")
    await run_session(uri, "scored", turns=2)
    store = await open_store(uri)
    try:
        await write_run(store, "run1", [Given("scored", 1, "exact", 1.0, "pass")])
        await _append_odd(store)
    finally:
        await store.close()


async def _append_odd(store: Any) -> None:
    """A session of odd model responses, a break in its chain and one in bob's."""
    stream = session_stream("odd")
    prev, batch = "0" * 64, []
    for revision, body in enumerate(ODD_RESPONSES):
        event_id, data, metadata = uuid.uuid4(), _responded(body), {"trace": "t"}
        prev = seal(stream, revision, str(event_id), RESPONDED, data, metadata, prev)
        batch.append(NewEvent(RESPONDED, data, metadata, event_id))
    changed = batch[5]  # its data changed after sealing
    batch[5] = NewEvent(RESPONDED, changed.data + b" ", changed.metadata, changed.id)
    await store.append(stream, batch, expected=StreamState.NO_STREAM)
    bob = session_stream("bob-own")
    head = (await store.read(bob))[-1]
    metadata = dict(head.metadata, **{SEQ_KEY: str(head.revision + 1)})
    await store.append(
        bob, [NewEvent("UserMessageReceived", b"{}", metadata)], expected=head.revision
    )


async def _global_order(uri: str) -> list[list[RecordedEvent]]:
    store = await open_store(uri, create=False)
    try:
        return await listing.read_pages(store, None, 10**9)
    finally:
        await store.close()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> list[list[RecordedEvent]]:
    import asyncio

    uri = f"sqlite:///{tmp_path_factory.mktemp('fast-fold') / 'journal.db'}"
    asyncio.run(_write_rich_store(uri))
    return asyncio.run(_global_order(uri))


def _folded(pages: list[list[RecordedEvent]]) -> Catalog:
    catalog = Catalog()
    catalog.now = 1
    listing.fold_pages(catalog, pages)
    return catalog


def _decoded(data: bytes) -> tuple[str, int]:
    answer = ModelResponse.decode(data)
    return answer.agent, answer.usage.total_tokens


def test_the_lean_fold_folds_a_rich_store_as_the_full_checks_do(
    pages: list[list[RecordedEvent]], monkeypatch: pytest.MonkeyPatch
) -> None:
    lean = _folded(pages)
    monkeypatch.setattr(fold_module, "linked", lambda *_: False)
    monkeypatch.setattr(fold_module, "response_counts", _decoded)
    monkeypatch.setattr(tokens, "plain_body", lambda _: None)  # decode's full reading
    full = _folded(pages)
    assert lean.dump() == full.dump()
    assert lean.rows(TRUSTED) == full.rows(TRUSTED)
    rows = {row.session_id: row for row in lean.rows(TRUSTED)}
    # The store holds what the test claims: each kind of row it compares.
    assert [b.name for b in rows["tree"].branches] == ["draft", "deeper"]
    assert rows["tree"].subagents_closed >= 2
    assert rows["scored"].score is not None
    assert rows["odd"].integrity.state == "failed"
    assert rows["odd"].tokens > 0
    assert rows["bob-own"].integrity.state == "failed"
    assert "aj.prev" in str(rows["bob-own"].integrity.problem)


def _damaged(event: RecordedEvent) -> Iterator[RecordedEvent]:
    """``event`` and copies of it with one thing changed."""

    def copy(**changes: Any) -> RecordedEvent:
        return _changed(event, **changes)

    metadata = dict(event.metadata)
    yield event
    yield copy(data=event.data + b" ")
    yield copy(id=uuid.uuid4())
    yield copy(type=event.type + "x")
    yield copy(stream=event.stream + "x")
    for key in (SEQ_KEY, PREV_KEY, HASH_KEY, CHAIN_KEY):
        yield copy(metadata={k: v for k, v in metadata.items() if k != key})
        yield copy(metadata={**metadata, key: "1"})
    yield copy(metadata={**metadata, "extra": "\u00e9"})
    yield copy(metadata={**metadata, "\u00e9": "x"})
    yield copy(metadata={**metadata, "lone": "\ud800"})


def test_the_lean_chain_check_passes_only_what_chain_problem_passes(
    pages: list[list[RecordedEvent]],
) -> None:
    heads: dict[str, list[Any]] = {}
    passed = 0
    for page in pages:
        for event in page:
            head = heads.get(event.stream)
            for candidate in _damaged(event):
                metadata = candidate.metadata
                fast = linked(head, candidate, metadata, metadata.get(HASH_KEY, ""))
                if fast:
                    passed += 1
                    assert chain_problem(head, candidate, metadata) is None
                elif metadata.get(CHAIN_KEY) == "2" and candidate is event:
                    assert chain_problem(head, candidate, metadata) is not None
            heads[event.stream] = ["s", event.revision, event.metadata.get(HASH_KEY, "")]
    assert passed > 50


def test_the_lean_check_takes_a_plain_dict_of_metadata_too() -> None:
    event_id, metadata = uuid.uuid4(), dict[str, str]()
    seal("AgentSession-x", 0, str(event_id), "T", b"{}", metadata, "0" * 64)
    event = RecordedEvent(
        id=event_id,
        type="T",
        data=b"{}",
        metadata=metadata,
        stream="AgentSession-x",
        revision=0,
        position=1,
        recorded_at=datetime.now(UTC),
    )
    assert linked(None, event, MappingProxyType(metadata), metadata[HASH_KEY])
    assert linked(None, event, metadata, metadata[HASH_KEY])
    assert not linked(None, event, metadata, "0" * 64)


@pytest.mark.parametrize("body", ODD_RESPONSES, ids=range(len(ODD_RESPONSES)))
def test_a_model_response_is_read_as_decode_reads_it_or_refused_alike(
    body: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _responded(body)
    with monkeypatch.context() as full:
        full.setattr(tokens, "plain_body", lambda _: None)  # decode's full reading
        try:
            expected: Any = _decoded(data)
        except ValueError as error:
            expected = type(error)
    try:
        got: Any = response_counts(data)
    except ValueError as error:
        got = type(error)
    assert got == expected


@pytest.mark.parametrize("data", [b"[]", b"nul", b'"x"', b"{}", b'{"usage":{}}'])
def test_what_is_not_a_model_response_is_refused(data: bytes) -> None:
    refusals = []
    for read in (response_counts, ModelResponse.decode):
        try:
            read(data)
        except ValueError as error:
            refusals.append(type(error))
    assert len(refusals) == 2


@dataclass(frozen=True)
class _Chosen(parts.Share):
    """A part owning the sessions named (the first) or the others (the second)."""

    first: frozenset[str] = frozenset()

    def owns(self, session: str) -> bool:
        return (session in self.first) == (self.index == 0)


def test_a_checkpoint_kept_aside_is_dropped_once_its_signature_is_checked(
    pages: list[list[RecordedEvent]],
) -> None:
    """What a part sends holds no checkpoint it has checked: the merge's settle checks only
    those left open (their key trusted through a rotation), as one fold's does."""
    catalog = _folded(pages)
    open_ = catalog.needs_signature(TRUSTED)
    assert "tree" in open_
    assert set(open_) <= set(catalog.fresh)
    for session_id in open_:
        catalog.check_signature(session_id, catalog.fresh[session_id], KEY.public_key)
        assert session_id not in catalog.fresh
        assert catalog.sessions[session_id]["ck"]["sig"] is True
    assert catalog.needs_signature(TRUSTED) == []


def _sessions_of(catalog: Catalog) -> list[str]:
    return sorted(catalog.sessions)


def test_two_parts_merged_fold_every_way_of_sharing_the_trees_as_one_fold_does(
    pages: list[list[RecordedEvent]],
) -> None:
    whole = Catalog()
    whole.now = 1
    counted = sum(whole.fold_page(page, None) for page in pages)
    names = _sessions_of(whole)
    assert {"tree", "bob-own", "scored", "odd"} <= set(names)
    for size in range(len(names) + 1):
        for first in itertools.combinations(names, size):
            halves = [Catalog(part=_Chosen(i, 50, frozenset(first))) for i in range(2)]
            folded = 0
            for half in halves:
                half.now = 1
                folded += sum(half.fold_page(page, None) for page in pages)
            halves[0].merge(halves[1])
            assert halves[0].dump() == whole.dump(), first
            assert halves[0].rows(TRUSTED) == whole.rows(TRUSTED)
            assert halves[0].fresh == whole.fresh
            assert folded == counted


async def _listing(uri: str, other: parts.OtherPart | None, **options: Any) -> Any:
    store = await open_store(uri, create=False)
    try:
        return await listing.refresh(store, keys=TRUSTED, other=other, **options)
    finally:
        await store.close()


async def _saved(uri: str) -> bytes:
    store = await open_store(uri, create=False)
    try:
        saved = await projections.load(store, listing.NAME)
        assert saved is not None
        return saved.state
    finally:
        await store.close()


async def _second(uri: str, now: int, *, fresh: bool = False) -> parts.Sent | None:
    store = await open_store(uri, create=False)
    try:
        return await parts.second_part(store, now, TRUSTED, fresh=fresh)
    finally:
        await store.close()


def _elsewhere(work: Callable[[], Any]) -> Any:
    """``work`` run on a thread of its own (its own event loop), as another process would."""
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(work()))
    thread.start()
    thread.join()
    return done[0]


NOW = 1_700_000_000_000_000


@pytest.fixture
def rich(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Two copies of the rich store (one listed in one part, one in two), the clock fixed."""
    uri = f"sqlite:///{tmp_path / 'one.db'}"
    asyncio.run(_write_rich_store(uri))
    (tmp_path / "two.db").write_bytes((tmp_path / "one.db").read_bytes())
    monkeypatch.setattr(time, "time", lambda: NOW / 1_000_000)
    return uri, f"sqlite:///{tmp_path / 'two.db'}"


def _same(one: Any, two: Any) -> None:
    assert (two.rows, two.position, two.folded, two.saved) == (
        one.rows,
        one.position,
        one.folded,
        one.saved,
    )


@pytest.mark.parametrize("sent", ["the child's part", "nothing", "garbage", "a part, miscounted"])
def test_a_listing_in_two_parts_is_the_listing_in_one(
    rich: tuple[str, str], sent: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    one_uri, two_uri = rich
    merged = _merged(monkeypatch)
    part = asyncio.run(_second(two_uri, NOW))
    assert part is not None
    assert part[1] > 0
    given: Any = {
        "the child's part": part,
        "nothing": None,
        "garbage": (1, 2, 3),
        "a part, miscounted": (part[0], "2", part[2]),
    }[sent]
    one = asyncio.run(_listing(one_uri, None))
    two = asyncio.run(_listing(two_uri, parts.OtherPart(NOW, lambda: given)))
    _same(one, two)
    assert asyncio.run(_saved(two_uri)) == asyncio.run(_saved(one_uri))
    assert len(merged) == 1
    assert merged[0] is not None
    fresh = asyncio.run(_listing(two_uri, parts.OtherPart(NOW, lambda: given), fresh=True))
    _same(asyncio.run(_listing(one_uri, None, fresh=True)), fresh)


async def _append_more(uri: str) -> None:
    store = await open_store(uri, create=False)
    try:
        await write_run(store, "run2", [Given("scored", 1, "exact", 0.5, "late")])
        await _append_late(store)
    finally:
        await store.close()


async def _append_late(store: Any) -> None:
    stream = session_stream("late")
    event_id, data, metadata = uuid.uuid4(), _responded(_response()), {"trace": "t"}
    seal(stream, 0, str(event_id), RESPONDED, data, metadata, "0" * 64)
    await store.append(
        stream, [NewEvent(RESPONDED, data, metadata, event_id)], expected=StreamState.NO_STREAM
    )


def _merged(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each two-part fold returns (None: it failed, and one fold read everything)."""
    returned: list[Any] = []
    in_parts = parts.in_parts

    async def recorded(*args: Any) -> Any:
        returned.append(await in_parts(*args))
        return returned[-1]

    monkeypatch.setattr(parts, "in_parts", recorded)
    return returned


@pytest.mark.parametrize("who", ["the child", "this process"])
def test_a_listing_in_two_parts_is_of_one_end_when_a_writer_appends_in_between(
    rich: tuple[str, str], who: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The part that read less (a writer appended after it stopped) folds on to where the
    other stopped: the listing and its save are those of one fold to that end."""
    _, two_uri = rich
    if who == "the child":  # the child read first; this process reads the appended events
        early = asyncio.run(_second(two_uri, NOW))
        asyncio.run(_append_more(two_uri))
        result: Callable[[], Any] = lambda: early  # noqa: E731
    else:  # this process read first; the child, asked after the writer, reads further

        def result() -> Any:
            _elsewhere(lambda: asyncio.run(_append_more(two_uri)))
            return _elsewhere(lambda: asyncio.run(_second(two_uri, NOW)))

    merged = _merged(monkeypatch)
    two = asyncio.run(_listing(two_uri, parts.OtherPart(NOW, result)))
    assert len(merged) == 1
    assert merged[0] is not None
    assert asyncio.run(_one_fold(two_uri, two.position)) == (
        asyncio.run(_saved(two_uri)),
        two.rows,
        two.folded,
    )
    assert "late" in {row.session_id for row in two.rows}


async def _one_fold(uri: str, until: int) -> tuple[bytes, list[Any], int]:
    """The state, rows and count of one fold of the events of the store at ``uri`` through
    position ``until`` (the events the listing saw: its save comes after them)."""
    store = await open_store(uri, create=False)
    try:
        catalog = Catalog()
        position, folded = await listing.catch_up(store, catalog, None, until=until)
        assert position == until
        trusted = catalog.trusted(TRUSTED)
        await listing.settle(store, catalog, trusted)
        return catalog.dump(), catalog.rows(trusted), folded
    finally:
        await store.close()


def test_a_store_with_a_saved_catalog_sends_no_part_and_is_listed_alone(
    rich: tuple[str, str],
) -> None:
    _, two_uri = rich
    asyncio.run(_listing(two_uri, None))
    assert asyncio.run(_second(two_uri, NOW)) is None
    assert asyncio.run(_second(two_uri, NOW, fresh=True)) is not None


def test_the_sessions_command_forks_a_child_whose_part_is_the_listing_in_one(
    rich: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    one_uri, two_uri = rich
    monkeypatch.setattr(_forked, "core_to_spare", lambda: True)
    merged = _merged(monkeypatch)
    child = sessions_cli._second_part(two_uri, NOW, TRUSTED, fresh=False)
    assert child is not None
    asked: list[Any] = []

    def result() -> Any:
        asked.append(child.result())
        return asked[-1]

    try:
        two = asyncio.run(_listing(two_uri, parts.OtherPart(NOW, result)))
    finally:
        child.close()
    assert asked
    assert asked[0] is not None  # the child sent its part
    assert len(merged) == 1
    assert merged[0] is not None
    _same(asyncio.run(_listing(one_uri, None)), two)
    assert asyncio.run(_saved(two_uri)) == asyncio.run(_saved(one_uri))


@pytest.mark.parametrize("uri", ["sqlite://:memory:", "kurrentdb://localhost:2113?Tls=false"])
def test_no_child_is_forked_for_an_in_memory_store_or_on_kurrentdb(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process cannot open an in-memory store; on KurrentDB, whether the call folds
    from the start would take a gRPC call before the fork."""
    monkeypatch.setattr(_forked, "core_to_spare", lambda: True)
    assert sessions_cli._second_part(uri, NOW, TRUSTED, fresh=False) is None


def _damage(uri: str, where: str, column: str, value: bytes) -> None:
    """Set ``column`` of the first event of ``where``'s session stream to ``value``."""
    import sqlite3

    from agentjournal.store import sqlite_path

    db = sqlite3.connect(sqlite_path(uri))
    try:
        db.execute(
            f"UPDATE events SET {column} = ? WHERE position = ("
            "SELECT min(e.position) FROM events e JOIN streams s ON s.id = e.stream_id "
            "WHERE s.name = ?)",
            (value, session_stream(where)),
        )
        db.commit()
    finally:
        db.close()


def _outcome(uri: str, other: parts.OtherPart | None) -> Any:
    try:
        return asyncio.run(_listing(uri, other)).rows
    except Exception as error:
        return type(error), str(error)


_UNREADABLE_METADATA = "the metadata is not a UTF-8 JSON object"


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("metadata", b"{not json", _UNREADABLE_METADATA),
        ("metadata", b'"a string"', _UNREADABLE_METADATA),
        ("metadata", b"[1]", _UNREADABLE_METADATA),
        ("metadata", b'{"k": "\xff"}', _UNREADABLE_METADATA),
        ("id", b"\x00", "the event id is not 16 bytes"),
    ],
)
@pytest.mark.parametrize("where", ["tree", "bob-own", "odd"])
def test_an_event_whose_id_or_metadata_cannot_be_read_fails_its_session_in_parts_alike(
    rich: tuple[str, str], where: str, column: str, value: bytes, problem: str
) -> None:
    """The session is listed, its integrity failed at that event, in one fold and in two
    parts (this process's, or the child's); the other sessions as they were."""
    one_uri, two_uri = rich
    for uri in rich:
        _damage(uri, where, column, value)
    one = _outcome(one_uri, None)
    two = _outcome(two_uri, parts.OtherPart(NOW, lambda: _elsewhere(_child_of(two_uri))))
    assert two == one
    assert not isinstance(one, tuple)  # it did not stop
    (damaged,) = [row for row in one if row.session_id == where]
    assert damaged.integrity.state == "failed"
    assert damaged.integrity.problem == (f"{session_stream(where)}@0: {problem} (broken chain)")


def _child_of(uri: str) -> Callable[[], Any]:
    def fold() -> Any:
        try:
            return asyncio.run(_second(uri, NOW))
        except Exception:
            return None

    return fold


@pytest.mark.parametrize("form", [[], ["--json"], ["--fresh"]])
def test_the_sessions_command_prints_alike_with_a_child_or_without(
    rich: tuple[str, str],
    form: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The command as run: forked (a free core), then alone; the same lines, the same save."""
    from agentjournal.cli import main

    one_uri, two_uri = rich
    merged = _merged(monkeypatch)
    pubkey = ["--pubkey", KEY.public_pem()]
    monkeypatch.setattr(_forked, "core_to_spare", lambda: True)
    assert main(["sessions", "--uri", two_uri, *pubkey, *form]) == 0
    two = capsys.readouterr()
    monkeypatch.setattr(_forked, "core_to_spare", lambda: False)
    assert main(["sessions", "--uri", one_uri, *pubkey, *form]) == 0
    one = capsys.readouterr()
    assert (two.out, two.err) == (one.out, one.err)
    assert "tree" in one.out
    assert len(merged) == 1
    assert merged[0] is not None
    if "--fresh" not in form:
        assert asyncio.run(_saved(two_uri)) == asyncio.run(_saved(one_uri))


def test_the_sessions_command_lists_without_the_cyclic_collector_and_turns_it_back_on(
    rich: tuple[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command's one pass (and its child's, forked inside it) runs with the collector
    off; once it is done, collection is on again (a caller in the same process, the tests)."""
    from agentjournal.cli import main

    _, uri = rich
    listed = sessions_cli.list_sessions
    collecting: list[bool] = []

    async def list_sessions(*args: Any) -> int:
        collecting.append(gc.isenabled())
        return await listed(*args)

    monkeypatch.setattr(sessions_cli, "list_sessions", list_sessions)
    assert gc.isenabled()
    assert main(["sessions", "--uri", uri, "--pubkey", KEY.public_pem()]) == 0
    assert collecting == [False]
    assert gc.isenabled()
    assert "tree" in capsys.readouterr().out


def _changed(event: RecordedEvent, **changes: Any) -> RecordedEvent:
    """``event`` with ``changes`` (a tampered store)."""
    fields: dict[str, Any] = {
        "id": event.id,
        "type": event.type,
        "data": event.data,
        "metadata": dict(event.metadata),
        "stream": event.stream,
        "revision": event.revision,
        "position": event.position,
        "recorded_at": event.recorded_at,
    }
    fields.update(changes)
    return RecordedEvent(**fields)


_OPENING = fold_module._OPENS_STREAMS


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_two_parts_fold_a_damaged_global_order_as_one_fold_does(
    pages: list[list[RecordedEvent]], data: st.DataObject
) -> None:
    """Events dropped (broken chains, subsessions and branches never opened), moved onto
    other streams, and events that open streams made to open another's (a tree naming
    another tree's streams: claims that collide): shared out any way, the two parts
    merge to the one fold."""
    order = [event for page in pages for event in page]
    streams = sorted({event.stream for event in order})
    indices = st.integers(0, len(order) - 1)
    dropped = data.draw(st.sets(indices, max_size=len(order) // 4), label="dropped")
    moves = data.draw(st.dictionaries(indices, st.sampled_from(streams), max_size=8), label="moved")
    opening = [at for at, event in enumerate(order) if event.type in _OPENING]
    renamed: dict[int, tuple[str, str]] = {}
    for at in data.draw(st.lists(st.sampled_from(opening), max_size=6), label="renamed"):
        named = [name for name in streams if name.encode() in order[at].data]
        if named:
            renamed[at] = (data.draw(st.sampled_from(named)), data.draw(st.sampled_from(streams)))
    damaged = []
    for at, event in enumerate(order):
        if at in dropped:
            continue
        if at in renamed:
            old, new = renamed[at]
            event = _changed(event, data=event.data.replace(old.encode(), new.encode()))
        if at in moves:
            event = _changed(event, stream=moves[at])
        damaged.append(event)
    whole = Catalog()
    whole.now = 1
    counted = whole.fold_page(damaged, None)
    names = sorted({*whole.sessions, "tree", "bob-own", "scored", "odd"})
    first = data.draw(st.frozensets(st.sampled_from(names)), label="first part")
    halves = [Catalog(part=_Chosen(i, 50, first)) for i in range(2)]
    folded = 0
    for half in halves:
        half.now = 1
        folded += half.fold_page(damaged, None)
    halves[0].merge(halves[1])
    assert halves[0].dump() == whole.dump()
    assert halves[0].rows(TRUSTED) == whole.rows(TRUSTED)
    assert halves[0].fresh == whole.fresh
    assert folded == counted


def _in_two_parts_as_in_one(order: list[RecordedEvent], names: list[str]) -> None:
    """``order`` folded in two parts, every way of sharing ``names`` out (the first name
    on the first part: the other ways are these mirrored), is the one fold."""
    whole = Catalog()
    whole.now = 1
    counted = whole.fold_page(order, None)
    for size in range(len(names)):
        for first in itertools.combinations(names[1:], size):
            halves = [Catalog(part=_Chosen(i, 50, frozenset({names[0], *first}))) for i in range(2)]
            folded = 0
            for half in halves:
                half.now = 1
                folded += half.fold_page(order, None)
            halves[0].merge(halves[1])
            assert halves[0].dump() == whole.dump(), first
            assert halves[0].rows(TRUSTED) == whole.rows(TRUSTED)
            assert folded == counted


@pytest.mark.slow
def test_a_tree_that_opens_another_trees_stream_keeps_it_in_two_parts_as_in_one(
    pages: list[list[RecordedEvent]],
) -> None:
    """Each event that opens a stream (a subagent's, a branch's, a continuation's), made to
    open each stream of the store instead, where it was or last: the first tree to name a
    stream keeps it, and a part learns it of the other part's trees too."""
    order = [event for page in pages for event in page]
    streams = sorted({event.stream for event in order})
    names = ["tree", "bob-own", "scored", "odd"]
    tried = 0
    for at, event in enumerate(order):
        if event.type not in _OPENING:
            continue
        rest = [*order[:at], *order[at + 1 :]]
        for old in [name for name in streams if name.encode() in event.data]:
            for new in streams:
                if new == old:
                    continue
                changed = _changed(event, data=event.data.replace(old.encode(), new.encode()))
                _in_two_parts_as_in_one([*order[:at], changed, *order[at + 1 :]], names)
                # Right after the stream's first event: its later events follow the claim.
                first = next((i for i, e in enumerate(rest) if e.stream == new), None)
                if first is not None:
                    after = first + 1
                    _in_two_parts_as_in_one([*rest[:after], changed, *rest[after:]], names)
                tried += 1
    assert tried > 50


def test_a_child_is_forked_only_when_the_listing_folds_from_the_start(
    rich: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store with a saved catalog is listed warm by this process alone (no fork), unless
    the listing is asked to fold afresh; a file that cannot be asked forks nothing."""
    _, two_uri = rich
    monkeypatch.setattr(_forked, "core_to_spare", lambda: True)
    forks: list[Any] = []
    monkeypatch.setattr(_forked, "forked", lambda work: forks.append(work))
    sessions_cli._second_part(two_uri, NOW, TRUSTED, fresh=False)
    assert len(forks) == 1  # never catalogued
    asyncio.run(_listing(two_uri, None))
    sessions_cli._second_part(two_uri, NOW, TRUSTED, fresh=False)
    assert len(forks) == 1  # a saved catalog: warm, alone
    sessions_cli._second_part(two_uri, NOW, TRUSTED, fresh=True)
    assert len(forks) == 2
    missing = two_uri.replace("two.db", "missing.db")
    assert sessions_cli._second_part(missing, NOW, TRUSTED, fresh=True) is None
    assert len(forks) == 2


def test_a_part_that_fails_here_leaves_the_whole_fold_to_this_process(
    rich: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first part's fold fails (the store stops answering once): the two-part fold gives
    up, and this process folds every event alone, listing what one fold lists."""
    one_uri, two_uri = rich
    merged = _merged(monkeypatch)
    failing: list[bool] = []
    catch_up = listing.catch_up

    async def once_unavailable(*args: Any, **kwargs: Any) -> Any:
        if failing:
            failing.clear()
            raise StoreUnavailable("the store stopped answering")
        return await catch_up(*args, **kwargs)

    monkeypatch.setattr(parts, "catch_up", once_unavailable)
    part = asyncio.run(_second(two_uri, NOW))
    assert part is not None
    failing.append(True)  # this process's first page
    two = asyncio.run(_listing(two_uri, parts.OtherPart(NOW, lambda: part)))
    assert merged == [None]
    _same(asyncio.run(_listing(one_uri, None)), two)
