"""The catalog's lean checks give the answers of the full ones.

The fold checks a chain link with :func:`~agentjournal.read.catalog.ledger.linked` and
reads a ``ModelResponded`` with :func:`~agentjournal.read.catalog.responses.response_counts`,
and leaves what they do not pass to ``chain_problem`` and ``ModelResponse.decode``. A store
with branches, handoffs, signed checkpoints, an erased subject, eval scores, a tool call,
malformed model responses and broken chains folds to the same state and rows either way;
and on every event of it, and on damaged copies of each, the lean check passes only what
``chain_problem`` passes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal, tokens
from agentjournal.ledger import SigningKey
from agentjournal.ledger.chain import CHAIN_KEY, HASH_KEY, PREV_KEY, SEQ_KEY, seal
from agentjournal.read.catalog import fold as fold_module
from agentjournal.read.catalog import listing
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
