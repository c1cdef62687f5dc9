"""The SDK's own session wrappers on top of a journal session.

``EncryptedSession`` stores envelopes (``{"__enc__": 1, "v": 1, "kid": ..., "payload":
...}``) in the session beneath it, and ``OpenAIResponsesCompactionSession`` replaces a
suffix of the stored history with the output of the Responses compact API. Both must
work over ``JournalSession`` exactly as they do over the SDK's ``SQLiteSession``: every
run here is a real ``Runner.run`` / ``Runner.run_streamed`` driven by ``ScriptedModel``,
and the compact API is a real HTTP server on loopback (``http_stub``) reached through
the real ``AsyncOpenAI`` client given to the compaction session (its ``client=``
argument): no network, no mock library. What the wrapped journal holds is compared
with what the same wrapper holds over ``SQLiteSession`` after the same script.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import pytest
from agents import Agent, SQLiteSession, function_tool
from agents.extensions.memory.encrypt_session import EncryptedSession
from agents.items import TResponseInputItem
from agents.memory import OpenAIResponsesCompactionSession
from agents.memory.session import Session, SessionABC
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from cryptography.fernet import Fernet
from openai import AsyncOpenAI

from agentjournal import Journal, JournalSession
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle
from agentjournal.authority import Authority, Policy
from agentjournal.errors import InvalidInput, StoreUnavailable
from agentjournal.store import RecordedEvent
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.testing.kurrentdb_double import KurrentDBDouble, ThreadedKurrentDBDouble
from drive import METHODS, Method, drive
from http_stub import HttpStub, Received, Reply
from scenarios import TURNS, agent_for
from scripted_guardrail import ScriptedGuardrail

T = TypeVar("T")
KEY = Fernet.generate_key().decode()
ENVELOPE_KEYS = {"__enc__", "v", "kid", "payload"}
Layering = Literal["plain", "encrypted-outer", "encrypted-inner"]
LAYERINGS: tuple[Layering, ...] = ("plain", "encrypted-outer", "encrypted-inner")


def dumps(items: list[Any]) -> list[str]:
    """Items as the SDK fingerprints them: exact JSON, key order included."""
    return [json.dumps(item) for item in items]


def user(text: str) -> TResponseInputItem:
    return cast(TResponseInputItem, {"role": "user", "content": text})


def said(text: str) -> TResponseInputItem:
    """A run's input as the runner stores it."""
    return cast(TResponseInputItem, {"content": text, "role": "user"})


def is_envelope(item: Any) -> bool:
    return isinstance(item, dict) and set(item) == ENVELOPE_KEYS and item["__enc__"] == 1


GRANTING = Policy(agents={"a": Authority.of("orders.read")})  # grants: events that are no item

SID = "wrapped"
# EncryptedSession derives one key per session id from the master key; every session here is SID.
CIPHER = EncryptedSession(SID, SQLiteSession(SID), KEY).cipher


def opened(items: list[Any]) -> list[Any]:
    """Stored items with each envelope decrypted (whatever its age), the rest as they are."""
    return [
        json.loads(CIPHER.decrypt(item["payload"].encode())) if is_envelope(item) else item
        for item in items
    ]


def encrypted(backend: Session, *, ttl: int = 600) -> EncryptedSession:
    # EncryptedSession is annotated with SessionABC, but takes any Session (the SDK asks
    # third-party stores to implement the protocol, not to subclass SessionABC).
    return EncryptedSession(SID, cast(SessionABC, backend), KEY, ttl=ttl)


class Clock:
    """The clock Fernet and EncryptedSession read (``time.time``), moved by hand for TTLs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = float(int(time.time()))
        monkeypatch.setattr("cryptography.fernet.time.time", lambda: self.now)

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


class Compactor:
    """``POST /v1/responses/compact`` on loopback, answered like the Responses API does.

    The reply is every user message of the request's input followed by one
    ``compaction`` item (what the API documents). ``during`` runs while a request
    is in flight (another writer appends then); ``summary_size`` pads the
    compaction item.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.during: Callable[[], Awaitable[None]] | None = None
        self.summary_size = 0
        self.client: AsyncOpenAI

    async def handle(self, request: Received) -> Reply:
        if request.path != "/v1/responses/compact":
            return Reply(status=404, body=b'{"error": {"message": "not here"}}')
        body = request.json()
        self.requests.append(body)
        if self.during is not None:
            await self.during()
        users = [
            item
            for item in body.get("input", [])
            if item.get("role") == "user" and item.get("type", "message") == "message"
        ]
        summary = {
            "type": "compaction",
            "id": f"cmp_{len(self.requests)}",
            "encrypted_content": f"summary-{len(self.requests)}" + "x" * self.summary_size,
        }
        reply = {
            "id": f"resp_cmp_{len(self.requests)}",
            "object": "response.compaction",
            "created_at": 1_700_000_000,
            "output": [*users, summary],
            "usage": {
                "input_tokens": 40,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 8,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 48,
            },
        }
        return Reply(body=json.dumps(reply).encode())


@pytest.fixture
async def compactor() -> AsyncIterator[Compactor]:
    found = Compactor()
    async with HttpStub(found.handle) as stub:
        found.client = AsyncOpenAI(
            api_key="sk-offline-test", base_url=f"{stub.url}/v1", max_retries=0
        )
        yield found
        await found.client.close()


def compacting(
    backend: Session,
    compactor: Compactor,
    layering: Layering,
    *,
    ttl: int = 600,
    trigger: Callable[[dict[str, Any]], bool] = lambda _: True,
) -> SessionABC:
    """The compaction session over ``backend``, with encryption outside, inside or not at all."""

    def compaction(under: Session) -> OpenAIResponsesCompactionSession:
        return OpenAIResponsesCompactionSession(
            SID,
            under,
            client=compactor.client,
            compaction_mode="input",
            should_trigger_compaction=trigger,
        )

    if layering == "plain":
        return compaction(backend)
    if layering == "encrypted-outer":
        return encrypted(compaction(backend), ttl=ttl)
    return compaction(encrypted(backend, ttl=ttl))


@pytest.fixture(params=["sqlite-file", "kurrentdb"])
def shared_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store two journals (two writers) can open at once."""
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    double: ThreadedKurrentDBDouble = request.getfixturevalue("kurrentdb_double")
    return double.uri


class OtherWriter:
    """Another journal on the same store, on its own thread and event loop.

    It can write while this loop is inside a synchronous callback (``prune_prefix``),
    i.e. between a replacement's check and its append.
    """

    def __init__(self, uri: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.journal: Journal = self.call(self._open(uri))

    @staticmethod
    async def _open(uri: str) -> Journal:
        return await Journal.open(uri)

    def call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout=30)

    def close(self) -> None:
        self.call(self.journal.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def cold(journal: Journal) -> JournalSession:
    """A session object with nothing cached: it reads everything from the store."""
    return JournalSession(journal.store, SID)


async def event_types(journal: Journal) -> list[str]:
    return [event.type for event in await journal.store.read(f"AgentSession-{SID}")]


# -- EncryptedSession -------------------------------------------------------------


async def test_envelopes_are_stored_and_replayed_byte_for_byte(journal: Journal) -> None:
    backend = journal.session(SID)
    reference = SQLiteSession(SID)
    items = [user("my card is 4111 1111 1111 1111"), assistant_text("noted")]
    try:
        for store in (backend, reference):
            await encrypted(store).add_items(items)
        written = await reference.get_items()
        assert all(is_envelope(item) for item in written)
        stored = await backend.get_items()
        assert [set(item) for item in stored] == [ENVELOPE_KEYS, ENVELOPE_KEYS]
        assert opened(stored) == items
        assert dumps(await cold(journal).get_items()) == dumps(stored)
        # Other JSON objects SQLiteSession takes come back exactly too.
        odd: list[Any] = [{}, {"type": 7, "role": None, "n": [1, 1.0, True]}, {"id": "x"}]
        await backend.add_items(odd)
        await reference.add_items(odd)
        assert dumps(await cold(journal).get_items()) == dumps(stored + odd)
        assert dumps((await reference.get_items())[2:]) == dumps(odd)
    finally:
        reference.close()
    recorded = await journal.store.read(backend.stream)
    envelopes = [e for e in recorded if e.type == "OpenAIItemRecorded"][:2]
    for event, item in zip(envelopes, stored, strict=True):
        data = json.loads(event.data)
        assert "item_type" not in data  # it names no kind
        assert "author_name" not in data  # nobody can tell who wrote it
        assert json.dumps(data["item"]) == json.dumps(item)
    # The whole card number: "4111" alone turns up in a random digest or ciphertext now and then.
    assert not any(b"4111 1111 1111 1111" in e.data or b"noted" in e.data for e in recorded)


def assistant_text(text: str) -> TResponseInputItem:
    return cast(TResponseInputItem, {"role": "assistant", "content": text})


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
async def test_runner_over_an_encrypted_journal_matches_sqlite(
    journal: Journal, method: Method
) -> None:
    backend = journal.session(SID)
    reference = SQLiteSession(SID)
    try:
        for store, hooks in ((backend, backend), (reference, None)):
            session = encrypted(store)
            for turn in range(len(TURNS)):
                await drive(
                    agent_for(turn), TURNS[turn][0], method=method, session=session, hooks=hooks
                )
        expected = opened(await reference.get_items())
        assert dumps(opened(await backend.get_items())) == dumps(expected)
        assert dumps(await encrypted(cold(journal)).get_items()) == dumps(expected)
    finally:
        reference.close()


@pytest.mark.parametrize("method", METHODS)
async def test_encrypted_history_expires_and_rolls_back(
    journal: Journal, method: Method, clock: Clock
) -> None:
    backend = journal.session(SID)
    session = encrypted(backend, ttl=10)
    await session.add_items([user("old question"), assistant_text("old answer")])
    clock.advance(20)  # both have expired
    await session.add_items([user("fresh question")])
    model = ScriptedModel([ModelStep(output=[assistant_message("fresh answer", item_id="m1")])])
    await drive(
        Agent(name="a", model=model), "follow-up", method=method, session=session, hooks=backend
    )
    # The model saw only what has not expired; the store keeps everything.
    assert model.calls[0].input == [user("fresh question"), user("follow-up")]
    assert [item["content"] for item in opened(await backend.get_items())][:3] == [
        "old question",
        "old answer",
        "fresh question",
    ]
    assert len(await session.get_items()) == 3
    # Rolling the turn back pops its two items; the record keeps them, hidden.
    popped = await session.pop_item()
    assert popped is not None
    assert popped["id"] == "m1"  # type: ignore[typeddict-item]
    assert await session.pop_item() == user("follow-up")
    assert await session.get_items() == [user("fresh question")]
    assert (await event_types(journal)).count("agentjournal.ItemPopped") == 2
    assert len(await cold(journal).get_items()) == 3
    # Popping past the readable items drains the expired ones, as over SQLiteSession.
    assert await session.pop_item() == user("fresh question")
    assert await session.pop_item() is None
    assert await backend.get_items() == []


async def test_a_redacted_bundle_withholds_envelopes_and_verifies(journal: Journal) -> None:
    backend = journal.session(SID)
    session = encrypted(backend)
    model = ScriptedModel([ModelStep(output=[assistant_message("secret answer")])])
    await drive(Agent(name="a", model=model), "secret question", session=session, hooks=backend)
    for redact in (False, True):
        bundle = await export_bundle(journal.store, SID, redact=redact)
        report = verify_bundle(bundle, {}, allow_uncovered=True)
        assert report.ok, report.text()
        # The report says what it could not look into, redacted or not.
        assert "2 opaque items" in report.text()
        recorded = [e for s in bundle["streams"] for e in s["events"]]
        items = [e for e in recorded if e["type"] == "OpenAIItemRecorded"]
        assert len(items) == 2
        assert all((e["data"] is None) == redact for e in items)


@pytest.mark.parametrize("record_payloads", [True, False])
async def test_under_encryption_decisions_can_keep_digests_only(
    tmp_path: Path, record_payloads: bool
) -> None:
    """A guardrail judges plain text; with ``record_payloads=False`` none of it is stored."""
    marker = "MARKPLAIN4e1"

    @function_tool
    def lookup(query: str) -> str:
        """Look something up."""
        return "found"

    model = ScriptedModel(
        [
            ModelStep(output=[function_call("lookup", {"query": marker}, call_id="q1")]),
            ModelStep(output=[assistant_message("done")]),
        ]
    )
    agent = Agent(name="a", model=model, tools=[lookup])
    async with Journal.open(f"sqlite:///{tmp_path / 'enc.db'}") as journal:
        async with ScriptedGuardrail() as guardrail:
            backend = journal.session(
                SID, guardrails=guardrail.url, record_payloads=record_payloads
            )
            await drive(agent, f"find {marker}", session=encrypted(backend), hooks=backend)
            assert len(guardrail.asked()) == 3  # input, the tool call, the final answer
        stored = [e for e in await journal.store.read_all() if e.stream.startswith("Agent")]
        decisions = [e for e in stored if e.type == "agentjournal.GuardrailDecided"]
        assert len(decisions) == 3
        assert any(marker.encode() in e.data for e in stored) is record_payloads
        bundle = await export_bundle(journal.store, SID)
    report = verify_bundle(bundle, {}, allow_uncovered=True)
    assert report.ok, report.text()


# -- OpenAIResponsesCompactionSession -----------------------------------------------


async def three_turns(session: SessionABC, method: Method, hooks: Any) -> list[list[Any]]:
    """Run the scripted conversation; return what the model was given on each call."""
    seen: list[list[Any]] = []
    for turn in range(len(TURNS)):
        agent = agent_for(turn)
        await drive(agent, TURNS[turn][0], method=method, session=session, hooks=hooks)
        seen.extend(call.input for call in cast(ScriptedModel, agent.model).calls)
    return seen


@pytest.mark.slow
@pytest.mark.parametrize("layering", LAYERINGS)
@pytest.mark.parametrize("method", METHODS)
async def test_compaction_over_a_journal_matches_sqlite(
    journal: Journal, compactor: Compactor, layering: Layering, method: Method, tmp_path: Path
) -> None:
    reference = SQLiteSession(SID, tmp_path / "reference.db")
    try:
        expected_inputs = await three_turns(
            compacting(reference, compactor, layering), method, None
        )
        expected_requests = compactor.requests[:]
        expected = opened(await reference.get_items())
    finally:
        reference.close()
    assert expected_requests, "the script must trigger compaction"
    compactor.requests.clear()
    backend = journal.session(SID)
    inputs = await three_turns(compacting(backend, compactor, layering), method, backend)
    assert compactor.requests == expected_requests
    assert dumps(inputs) == dumps(expected_inputs)
    assert dumps(opened(await backend.get_items())) == dumps(expected)
    assert dumps(opened(await cold(journal).get_items())) == dumps(expected)
    # Nothing left the record: the compacted items are hidden, not deleted.
    types = await event_types(journal)
    assert "agentjournal.ItemPopped" in types or "agentjournal.SessionCleared" in types
    assert sum(1 for t in types if t not in {"SessionStarted"}) > len(expected)


async def test_compaction_keeps_what_another_writer_appends_meanwhile(
    shared_uri: str, compactor: Compactor
) -> None:
    async with Journal.open(shared_uri) as mine, Journal.open(shared_uri) as theirs:
        backend = mine.session(SID)
        original = [user(str(n)) for n in range(4)]
        await backend.add_items(original)
        newer = user("appended by another writer while compaction ran")

        async def append_elsewhere() -> None:
            await theirs.session(SID).add_items([newer])

        compactor.during = append_elsewhere
        session = compacting(backend, compactor, "plain")
        reply = assistant_message("done", item_id="m1")
        model = ScriptedModel([ModelStep(output=[reply])])
        await drive(Agent(name="a", model=model), "continue", session=session, hooks=backend)
        assert len(compactor.requests) == 1  # compaction ran, and found the history changed
        expected = [*original, said("continue"), reply.model_dump(exclude_unset=True), newer]
        assert dumps(await backend.get_items()) == dumps(expected)
        assert dumps(await theirs.session(SID).get_items()) == dumps(expected)


async def test_encrypted_compaction_keeps_what_another_writer_appends_meanwhile(
    shared_uri: str, compactor: Compactor
) -> None:
    async with Journal.open(shared_uri) as mine, Journal.open(shared_uri) as theirs:
        backend = mine.session(SID)
        session = compacting(backend, compactor, "encrypted-outer")
        await session.add_items([user("earlier")])
        newer = user("appended by another writer while compaction ran")

        async def append_elsewhere() -> None:
            await encrypted(theirs.session(SID)).add_items([newer])

        compactor.during = append_elsewhere
        reply = assistant_message("done", item_id="m1")
        model = ScriptedModel([ModelStep(output=[reply])])
        await drive(Agent(name="a", model=model), "continue", session=session, hooks=backend)
        assert len(compactor.requests) == 1
        expected = [user("earlier"), said("continue"), reply.model_dump(exclude_unset=True), newer]
        assert dumps(await session.get_items()) == dumps(expected)


async def test_a_snapshot_replaces_only_the_suffix_it_read(shared_uri: str) -> None:
    async with Journal.open(shared_uri) as mine, Journal.open(shared_uri) as theirs:
        backend = mine.session(SID)
        other = theirs.session(SID, policy=GRANTING)
        await backend.add_items([user(str(n)) for n in range(6)])
        summary: Any = {"type": "compaction", "id": "cmp", "encrypted_content": "s"}

        snapshot = await backend._get_compaction_snapshot(4)
        assert snapshot is not None
        assert (snapshot.items, snapshot.complete) == ([user(str(n)) for n in range(2, 6)], False)
        assert (await backend._get_compaction_snapshot(7)).complete  # type: ignore[union-attr]

        # Another writer's item changes the suffix: nothing is replaced.
        await other.add_items([user("6")])
        assert not await snapshot.replace_suffix(1, [summary])
        assert await backend.get_items() == [user(str(n)) for n in range(7)]

        # So does another writer's pop.
        snapshot = await backend._get_compaction_snapshot(3)
        assert snapshot is not None
        assert await other.pop_item() == user("6")
        assert not await snapshot.replace_suffix(0, [summary])

        # An event that is no item (here an authority grant) moves the stream but not the
        # suffix: the replacement retries past it and lands.
        snapshot = await backend._get_compaction_snapshot(3)
        assert snapshot is not None
        await other._recorder.record_grant("a", Authority.of("orders.read"))
        assert await snapshot.replace_suffix(1, [summary])
        expected = [user("0"), user("1"), user("2"), user("3"), summary]
        assert await backend.get_items() == expected
        assert await other.get_items() == expected
        assert await JournalSession(theirs.store, SID).get_items() == expected
        # A replaced suffix cannot be replaced again.
        assert not await snapshot.replace_suffix(1, [summary])
        assert not await snapshot.replace_suffix(len(snapshot.items), [summary])


async def test_a_write_between_the_check_and_the_append_is_never_lost(shared_uri: str) -> None:
    """Another writer lands after the replacement checked the suffix, before it appends.

    The append then conflicts; the replacement reads what landed and checks again:
    past an event that is no item it goes on, past a new item it gives up.
    """
    other = OtherWriter(shared_uri)
    try:
        async with Journal.open(shared_uri) as journal:
            backend = journal.session(SID)
            await backend.add_items([user(str(n)) for n in range(6)])
            theirs = other.journal.session(SID, policy=GRANTING)
            summary: Any = {"type": "compaction", "id": "cmp", "encrypted_content": "s"}

            def once(work: Callable[[], Coroutine[Any, Any, Any]]) -> Callable[[Any], bool]:
                done: list[bool] = []

                def prune(item: Any) -> bool:  # called after the check, before the append
                    if not done:
                        done.append(True)
                        other.call(work())
                    return False

                return prune

            grant = once(lambda: theirs._recorder.record_grant("a", Authority.of("orders.read")))
            snapshot = await backend._get_compaction_snapshot(3, prune_prefix=grant)
            assert snapshot is not None
            assert await snapshot.replace_suffix(1, [summary])
            expected = [user("0"), user("1"), user("2"), user("3"), summary]
            assert await backend.get_items() == expected
            types = [e.type for e in await journal.store.read(backend.stream)][-4:]
            assert types == [
                "agentjournal.AuthorityGranted",  # landed first: the append retried after it
                "agentjournal.ItemPopped",
                "agentjournal.ItemPopped",
                "OpenAIItemRecorded",
            ]

            late = once(lambda: theirs.add_items([user("late")]))
            snapshot = await backend._get_compaction_snapshot(2, prune_prefix=late)
            assert snapshot is not None
            assert not await snapshot.replace_suffix(0, [summary])
            assert await backend.get_items() == [*expected, user("late")]
            assert await JournalSession(journal.store, SID).get_items() == [*expected, user("late")]
    finally:
        other.close()


@pytest.mark.slow
async def test_pruning_reads_back_to_the_first_item_it_keeps(journal: Journal) -> None:
    """``prune_prefix`` walks the oldest visible items (read in growing windows when cold)."""
    await journal.session(SID).add_items([user(str(n)) for n in range(150)])
    summary: Any = {"type": "compaction", "id": "cmp", "encrypted_content": "s"}

    def old(item: Any) -> bool:
        return int(item["content"]) < 100

    snapshot = await cold(journal)._get_compaction_snapshot(3, prune_prefix=old)
    assert snapshot is not None
    assert await snapshot.replace_suffix(1, [summary])  # 148, 149, and the prefix 0-99
    kept = [user(str(n)) for n in range(100, 148)]
    assert await cold(journal).get_items() == [*kept, summary]
    assert (await event_types(journal)).count("agentjournal.ItemPopped") == 102

    snapshot = await cold(journal)._get_compaction_snapshot(2, prune_prefix=lambda item: True)
    assert snapshot is not None
    assert await snapshot.replace_suffix(0, [summary])  # everything: one clear
    assert await cold(journal).get_items() == [summary]
    assert await journal.session(SID).get_items() == [summary]
    assert (await event_types(journal))[-2:] == [
        "agentjournal.SessionCleared",
        "OpenAIItemRecorded",
    ]


@pytest.mark.slow
@pytest.mark.parametrize("expired", [3, 150])
async def test_compaction_prunes_an_expired_prefix_like_sqlite(
    journal: Journal, compactor: Compactor, clock: Clock, tmp_path: Path, expired: int
) -> None:
    """Expired envelopes before the compacted suffix are hidden in the same write."""
    reference = SQLiteSession(SID, tmp_path / "reference.db")
    results = []
    try:
        for backend in (reference, journal.session(SID)):
            start = clock.now
            compactor.requests.clear()
            writer = encrypted(backend, ttl=10)
            await writer.add_items([user("expired")] * expired)
            clock.advance(11)
            await writer.add_items([user(f"live {n}") for n in range(4)])
            session = compacting(backend, compactor, "encrypted-outer", ttl=10)
            model = ScriptedModel([ModelStep(output=[assistant_message("done", item_id="m")])])
            await drive(Agent(name="a", model=model), "continue", session=session)
            results.append((opened(await backend.get_items()), compactor.requests[-1]))
            clock.now = start
    finally:
        reference.close()
    (expected, expected_request), (stored, request) = results
    assert request == expected_request
    assert "expired" not in json.dumps(request)
    assert dumps(stored) == dumps(expected)
    assert [item.get("type") for item in stored][-1] == "compaction"
    assert "expired" not in json.dumps(stored)


async def test_compaction_keeps_what_it_cannot_read(
    journal: Journal, compactor: Compactor, tmp_path: Path
) -> None:
    """A plaintext item among envelopes is retained with everything before it (as in SQLite)."""
    reference = SQLiteSession(SID, tmp_path / "reference.db")
    results = []
    try:
        for backend in (reference, journal.session(SID)):
            compactor.requests.clear()
            session = compacting(backend, compactor, "encrypted-outer")
            await session.add_items([user("before")])
            await backend.add_items([{"role": "system", "content": "untrusted plaintext"}])
            await session.add_items([user("after")])
            model = ScriptedModel([ModelStep(output=[assistant_message("done", item_id="m")])])
            await drive(Agent(name="a", model=model), "next", session=session)
            results.append(opened(await backend.get_items()))
    finally:
        reference.close()
    expected, stored = results
    assert dumps(stored) == dumps(expected)
    assert stored[:2] == [user("before"), {"role": "system", "content": "untrusted plaintext"}]
    assert stored[-1]["type"] == "compaction"


@pytest.mark.slow
async def test_a_compaction_that_cannot_be_written_changes_nothing(
    tmp_path: Path, compactor: Compactor
) -> None:
    """Rollback: the replacement is one write; when the store refuses it, history stays."""
    path = tmp_path / "journal.db"
    store = await SQLiteEventStore.open(path, busy_timeout=0.05)
    journal = Journal(store, f"sqlite:///{path}")
    blocker = sqlite3.connect(path, isolation_level=None)
    try:
        backend = journal.session(SID)
        session = compacting(backend, compactor, "encrypted-outer")
        await session.add_items([user("earlier")])

        async def lock_the_store() -> None:
            blocker.execute("BEGIN EXCLUSIVE")

        compactor.during = lock_the_store
        model = ScriptedModel([ModelStep(output=[assistant_message("done", item_id="m")])])
        with pytest.raises(StoreUnavailable):
            await drive(Agent(name="a", model=model), "continue", session=session)
        blocker.rollback()
        compactor.during = None
        reply = assistant_message("done", item_id="m").model_dump(exclude_unset=True)
        assert dumps(await session.get_items()) == dumps([user("earlier"), said("continue"), reply])
        assert "agentjournal.ItemPopped" not in await event_types(journal)
        # The next compaction goes through.
        await session.run_compaction({"force": True})  # type: ignore[attr-defined]
        assert [item.get("type") for item in await session.get_items()][-1] == "compaction"
    finally:
        blocker.close()
        await journal.close()


async def test_a_manual_compaction_is_one_atomic_write(compactor: Compactor) -> None:
    """Rollback: a whole-history replacement the store refuses writes nothing at all.

    The store refuses an append over its size limit. Without an atomic replacement the
    SDK clears, fails to add, then restores by clearing and re-adding every item: the
    same history, but the record would hold a copy of the conversation.
    """
    with KurrentDBDouble.in_thread(max_append_size=32_000) as double:
        async with Journal.open(double.uri) as journal:
            backend = journal.session(SID)
            session = compacting(backend, compactor, "plain")
            await session.add_items([user("one"), user("two")])
            before = await journal.store.read(backend.stream)
            compactor.summary_size = 40_000
            with pytest.raises(InvalidInput):
                await session.run_compaction({"force": True})  # type: ignore[attr-defined]
            assert await journal.store.read(backend.stream) == before
            assert await session.get_items() == [user("one"), user("two")]
            compactor.summary_size = 0
            await session.run_compaction({"force": True})  # type: ignore[attr-defined]
            stored = await session.get_items()
            assert stored == [user("one"), user("two"), compacted(2)]  # the second request
            types = [e.type for e in await journal.store.read(backend.stream)]
            assert types[len(before) :] == [
                "agentjournal.SessionCleared",
                "UserMessageReceived",
                "UserMessageReceived",
                "OpenAIItemRecorded",
            ]


def compacted(n: int) -> Any:
    return {"type": "compaction", "id": f"cmp_{n}", "encrypted_content": f"summary-{n}"}


# -- compaction keeps the speaker ------------------------------------------------------------------


def body(event: RecordedEvent) -> Any:
    return json.loads(event.data)


def compaction_reply(request: Received) -> Reply:
    """``POST /v1/responses/compact`` answered as the Responses API does: the request's
    user messages, then one ``compaction`` item."""
    assert request.path == "/v1/responses/compact"
    users = [i for i in request.json().get("input", []) if i.get("role") == "user"]
    reply = {
        "id": "resp_cmp_1",
        "object": "response.compaction",
        "created_at": 1_700_000_000,
        "output": [*users, {"type": "compaction", "id": "cmp_1", "encrypted_content": "s"}],
        "usage": {
            "input_tokens": 40,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 8,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 48,
        },
    }
    return Reply(body=json.dumps(reply).encode())


async def test_compaction_keeps_the_speaker_as_author(tmp_path: Path) -> None:
    async with (
        HttpStub(compaction_reply) as stub,
        Journal.open(f"sqlite:///{tmp_path / 'journal.db'}") as journal,
    ):
        client = AsyncOpenAI(api_key="sk-offline-test", base_url=f"{stub.url}/v1", max_retries=0)
        try:
            session = journal.session(SID)
            compacting = OpenAIResponsesCompactionSession(
                SID,
                session,
                client=client,
                compaction_mode="input",
                should_trigger_compaction=lambda _: True,
            )
            solo = Agent(
                name="solo", model=ScriptedModel([[assistant_message("ok", item_id="m1")]])
            )
            # The SDK compacts at the end of the run: the whole history is replaced.
            await drive(solo, "hi", session=compacting, hooks=session)
        finally:
            await client.close()
        # A compaction that replaces only the suffix it read.
        snapshot = await session._get_compaction_snapshot(1)
        assert snapshot is not None
        summary: Any = {"type": "compaction", "id": "cmp_2", "encrypted_content": "t"}
        assert await snapshot.replace_suffix(0, [summary])
        recorded = await journal.store.read(session.stream)
    compactions = [body(e) for e in recorded if e.type == "OpenAIItemRecorded"]
    assert [(c["message_id"], c.get("author_name")) for c in compactions] == [
        ("cmp_1", "solo"),
        ("cmp_2", "solo"),
    ]
