"""The shipped Session conformance suite: honest against the SDK's SQLiteSession, kept by ours.

The suite runs against the SDK's own ``SQLiteSession`` (on a file, and in memory,
where every object is its own database) to prove that it asks only what the SDK's
reference keeps, and against :class:`JournalSession` on every backend, opened the
way users open it (``journal.session(id)``, objects of one id sharing a cache) and
as bare objects that each read the store themselves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest
from agents import SQLiteSession
from agents.memory.session import Session
from openai.types.responses import ResponseInputItemParam

from agentjournal import Journal, JournalSession
from agentjournal.testing.kurrentdb_double import KurrentDBDouble, ThreadedKurrentDBDouble
from agentjournal.testing.session_conformance import (
    OpenSession,
    Restart,
    SessionConformance,
    fingerprint,
    sdk_items,
)
from session_mutants import MUTANTS, ListSession, Shelf
from test_codec import stored_items


@pytest.fixture(scope="module")
def kurrentdb_double() -> Iterator[ThreadedKurrentDBDouble]:
    """One double for the module (every test uses fresh session ids), like a shared server."""
    with KurrentDBDouble.in_thread() as double:
        yield double


# -- the SDK's reference ---------------------------------------------------------------


class TestSQLiteSessionOnAFile(SessionConformance):
    @pytest.fixture
    def opened_sessions(self) -> Iterator[list[SQLiteSession]]:
        opened: list[SQLiteSession] = []
        yield opened
        for session in opened:
            session.close()

    @pytest.fixture
    def open_session(self, tmp_path: Path, opened_sessions: list[SQLiteSession]) -> OpenSession:
        def open_session(session_id: str) -> Session:
            session = SQLiteSession(session_id, tmp_path / "sessions.db")
            opened_sessions.append(session)
            return session

        return open_session

    @pytest.fixture
    def restart(self, opened_sessions: list[SQLiteSession]) -> Restart:
        async def restart() -> None:
            for session in opened_sessions:
                session.close()
            opened_sessions.clear()

        return restart


class TestSQLiteSessionInMemory(SessionConformance):
    shares_history = False  # SQLiteSession(":memory:") is a database per object

    @pytest.fixture
    def open_session(self) -> Iterator[OpenSession]:
        opened: list[SQLiteSession] = []

        def open_session(session_id: str) -> Session:
            session = SQLiteSession(session_id)
            opened.append(session)
            return session

        yield open_session
        for session in opened:
            session.close()


# -- ours, on every backend ----------------------------------------------------------------


class Journals:
    """The journal a test's sessions come from; ``restart`` replaces it as a new process would."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.journal: Journal | None = None

    async def open(self) -> Journal:
        self.journal = await Journal.open(self.uri)
        return self.journal

    async def restart(self) -> None:
        assert self.journal is not None
        if self.uri == "sqlite://:memory:":
            # Closing would drop the store: a new Journal on it has no cache and reads it all.
            self.journal = Journal(self.journal.store, self.uri)
        else:
            await self.journal.close()
            await self.open()

    async def close(self) -> None:
        if self.journal is not None:
            await self.journal.close()


@pytest.fixture
async def journals(journal_uri: str) -> AsyncIterator[Journals]:
    journals = Journals(journal_uri)
    await journals.open()
    yield journals
    await journals.close()


class TestJournalSession(SessionConformance):
    """``journal.session(id)``: objects of one id share what was read of the streams."""

    @pytest.fixture
    def open_session(self, journals: Journals) -> OpenSession:
        def open_session(session_id: str) -> Session:
            assert journals.journal is not None
            return journals.journal.session(session_id)

        return open_session

    @pytest.fixture
    def restart(self, journals: Journals) -> Restart:
        return journals.restart


class TestJournalSessionUncached(SessionConformance):
    """``JournalSession(store, id)``: each object has its own cache and must notice the others."""

    @pytest.fixture
    def open_session(self, journals: Journals) -> OpenSession:
        def open_session(session_id: str) -> Session:
            assert journals.journal is not None
            return JournalSession(journals.journal.store, session_id)

        return open_session

    @pytest.fixture
    def restart(self, journals: Journals) -> Restart:
        return journals.restart


class TestJournalSessionOnABranch(SessionConformance):
    """``journal.session(id, branch=...)``: a line forked before item #0 of a populated
    session behaves as a session of its own; its parent's items never show."""

    @pytest.fixture
    def open_session(self, journals: Journals) -> OpenSession:
        forked: set[str] = set()

        async def open_session(session_id: str) -> Session:
            assert journals.journal is not None
            if session_id not in forked:
                forked.add(session_id)
                main = journals.journal.session(session_id)
                await main.add_items([{"role": "user", "content": "on main"}])
                await main.add_items([{"role": "user", "content": "on main, later"}])
                await main.fork(0, name="line")
            return journals.journal.session(session_id, branch="line")

        return open_session

    @pytest.fixture
    def restart(self, journals: Journals) -> Restart:
        return journals.restart


class TestJournalSessionOnABranchUncached(TestJournalSessionOnABranch):
    """Bare objects on a branch: each reads the store itself."""

    @pytest.fixture
    def open_session(self, journals: Journals) -> OpenSession:
        forked: set[str] = set()

        async def open_session(session_id: str) -> Session:
            assert journals.journal is not None
            if session_id not in forked:
                forked.add(session_id)
                main = JournalSession(journals.journal.store, session_id)
                await main.add_items([{"role": "user", "content": "on main"}])
                await main.fork(0, name="line")
            return JournalSession(journals.journal.store, session_id, branch="line")

        return open_session


# -- the suite's own items -------------------------------------------------------------------


INPUT_ITEM: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseInputItemParam)


def shape(item: Any) -> tuple[str, tuple[str, ...]]:
    """An item's kind and keys."""
    return (str(item.get("type", item.get("role"))), tuple(sorted(item)))


def test_the_suites_items_are_valid_input_items() -> None:
    items = sdk_items()
    assert len({fingerprint(item) for item in items}) == len(items)
    invalid = []
    for item in items:
        try:
            INPUT_ITEM.validate_python(item)
        except pydantic.ValidationError:
            invalid.append(shape(item)[0])
    # The runner writes a local shell call's output without the ``id`` its TypedDict requires.
    assert invalid == ["local_shell_call_output"]
    assert sdk_items() == items
    assert sdk_items()[0] is not items[0]


def test_the_suites_items_are_what_the_runner_writes() -> None:
    """A scripted run touching every tool family writes items of the suite's shapes."""
    written = stored_items("run")
    ours = {shape(item) for item in sdk_items()}
    assert {shape(item) for item in written} <= ours
    # What the suite adds: the SDK tests' string messages, a reasoning item with a summary only.
    assert sorted(ours - {shape(item) for item in written}) == [
        ("assistant", ("content", "role")),
        ("reasoning", ("id", "summary", "type")),
        ("system", ("content", "role")),
    ]


# -- the suite bites ---------------------------------------------------------------------------


class TestListSession(SessionConformance):
    """A minimal correct session (tests/session_mutants.py): the mutants below break it."""

    @pytest.fixture
    def shelf(self) -> list[Shelf]:
        return [Shelf()]

    @pytest.fixture
    def open_session(self, shelf: list[Shelf]) -> OpenSession:
        return lambda session_id: ListSession(session_id, shelf[0])

    @pytest.fixture
    def restart(self, shelf: list[Shelf]) -> Restart:
        async def restart() -> None:
            shelf[0] = shelf[0].reopen()

        return restart


async def run_suite_test(kind: type[ListSession], name: str) -> None:
    """Run the suite's test ``name`` (``test[limit]`` for a parameter) against ``kind``."""
    shelves = [Shelf()]

    def open_session(session_id: str) -> Session:
        return kind(session_id, shelves[0])

    async def restart() -> None:
        shelves[0] = shelves[0].reopen()

    method, _, parameter = name.partition("[")
    arguments: dict[str, Any] = {"open_session": open_session, "session_id": "mutant-1"}
    if parameter:
        arguments["limit"] = int(parameter.rstrip("]"))
    if method == "test_the_history_survives_a_restart":
        arguments["restart"] = restart
    await getattr(SessionConformance(), method)(**arguments)


@pytest.mark.parametrize(
    ("mutant", "name"),
    [(mutant, name) for mutant, names in MUTANTS.items() for name in names],
    ids=lambda value: value.__name__ if isinstance(value, type) else str(value),
)
async def test_the_suite_catches_a_broken_session(mutant: type[ListSession], name: str) -> None:
    await run_suite_test(ListSession, name)  # the same call passes against the correct session
    # A failed check, or the mutant's own error (a ValueError, an IndexError).
    with pytest.raises(Exception):  # noqa: B017, PT011
        await run_suite_test(mutant, name)


def test_every_check_of_the_suite_catches_a_mutant() -> None:
    checks = {name for name in dir(SessionConformance) if name.startswith("test_")}
    caught = {name.partition("[")[0] for names in MUTANTS.values() for name in names}
    assert caught == checks
