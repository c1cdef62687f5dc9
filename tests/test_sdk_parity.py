"""The same programs on the SDK's ``AdvancedSQLiteSession`` and on JournalSession, side by side.

Each program drives one class through its public API and returns what it saw; the
two lists must be equal. These are the public assertions of the SDK suite's cases that
``tests/test_sdk_advanced_suite.py`` deselects because they also count its rows or pause
its private workers: pops into a branch's shared prefix, a branch of a deleted branch,
usage after a pop empties a turn, numbering after a clear, and call orders (a call keeps
the branch current when it was made). Beyond them: closing a session, negative limits,
and an object left on a branch another object deleted.

Where the journal differs on purpose (a write onto a deleted branch is refused), the
program stops short of it and a test of ours shows the refusal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunContextWrapper, Runner
from agents.extensions.memory import AdvancedSQLiteSession
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message

from agentjournal import Journal, JournalSession
from agentjournal import events as ev
from agentjournal.errors import BranchDeleted, StoreUnavailable
from agentjournal.streams import branch_stream, session_stream
from branch_items import run_result

SID = "parity"
MAIN: list[Any] = [
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "u2"},
    {"role": "assistant", "content": "a2"},
]

Program = Callable[[Callable[[], Any]], Awaitable[list[Any]]]
"""A program: given a factory of session objects (all on one session), what it saw."""


def _user(text: str) -> Any:
    return {"role": "user", "content": text}


async def _outcome(call: Awaitable[Any]) -> Any:
    """What a call returned, or the kind of error it raised (``closed`` for the
    closed-session error, whose text names each class)."""
    try:
        found = await call
    except RuntimeError as error:
        return "closed" if str(error).endswith("Session is closed") else f"RuntimeError: {error}"
    except Exception as error:
        # Ours raise subclasses of the SDK's built-in errors (InvalidInput is a ValueError).
        return next(k for k in type(error).__mro__ if k.__module__ == "builtins").__name__
    if isinstance(found, list) and found and isinstance(found[0], dict):
        # A branch's created_at and a turn's timestamp are times of the run.
        rows = [
            {k: v for k, v in row.items() if k not in ("created_at", "timestamp")} for row in found
        ]
        if "branch_id" in rows[0]:
            # The SDK orders branches by creation second, so within one second by its
            # grouping (by name); ours: main, then fork order. Compared by name.
            rows.sort(key=lambda row: str(row["branch_id"]))
        return rows
    return found


async def _sides(tmp_path: Path, program: Program, *, journal: Journal | None = None) -> None:
    """Run ``program`` on the SDK's class and on ours; assert they saw the same."""
    sdk_sessions: list[AdvancedSQLiteSession] = []

    def sdk(settings: SessionSettings | None = None) -> AdvancedSQLiteSession:
        made = AdvancedSQLiteSession(
            session_id=SID,
            db_path=tmp_path / "sdk.db",
            create_tables=True,
            session_settings=settings,
        )
        sdk_sessions.append(made)
        return made

    try:
        expected = await program(sdk)
    finally:
        for made in sdk_sessions:
            made.close()
    owned = journal is None
    if journal is None:
        journal = await Journal.open(f"sqlite:///{tmp_path / 'journal.db'}")
    try:
        opened = journal

        def ours(settings: SessionSettings | None = None) -> JournalSession:
            # Separate objects, as separate processes would hold (no shared tree).
            return JournalSession(opened.store, SID, session_settings=settings)

        seen = await program(ours)
    finally:
        if owned:
            await journal.close()
    assert seen == expected


# -- closing -----------------------------------------------------------------------------


async def _closed_program(make: Callable[[], Any]) -> list[Any]:
    session = make()
    other = make()
    await session.add_items(MAIN)
    await session.create_branch_from_turn(2, "alt")
    await session.switch_to_branch("main")
    session.close()
    session.close()  # idempotent
    seen = [
        await _outcome(call)
        for call in (
            session.add_items([]),
            session.add_items([_user("late")]),
            session.get_items(),
            session.get_items(2, "main"),
            session.pop_item(),
            session.clear_session(),
            session.create_branch_from_turn(1, "again"),
            session.create_branch_from_content("u1", "again"),
            session.switch_to_branch("alt"),
            session.delete_branch("alt"),
            session.list_branches(),
            session.get_conversation_turns(),
            session.find_turns_by_content("u"),
            session.get_conversation_by_turns(),
            session.get_tool_usage(),
            session.get_session_usage(),
            session.get_turn_usage(),
            session.store_run_usage(run_result(1, 50)),  # logged, not raised: analytics after a run
        )
    ]
    # Another object on the same session (and store) goes on.
    seen.append(await other.get_items())
    await other.add_items([_user("u3")])
    seen.append(len(await other.get_items(branch_id="main")))
    return seen


async def test_a_closed_session_refuses_every_call_as_the_sdk_class_does(tmp_path: Path) -> None:
    await _sides(tmp_path, _closed_program)


async def test_a_closed_journal_session_refuses_its_own_calls_too(journal: Journal) -> None:
    session = journal.session(SID)
    await session.add_items(MAIN)
    session.close()
    for call in (
        session.fork(at=1),
        session.branches(),
        session.open_subagents(),
        session.close_subagents(),
        session.append_event("app.Note", b"{}"),
        session.checkpoint(),
        session.reset_authority("a", reason="r"),
    ):
        with pytest.raises(RuntimeError, match=r"^JournalSession is closed$"):
            await call
    with pytest.raises(RuntimeError, match="is closed"):
        session.guard(Agent(name="a"))
    with pytest.raises(RuntimeError, match="is closed"):
        async with session.run_scope():
            pass
    with pytest.raises(RuntimeError, match="is closed"):
        async with session:
            pass
    # The journal, its store and the shared cache of the session stay open.
    assert await journal.session(SID).get_items() == MAIN


async def test_a_run_on_a_closed_session_fails_and_writes_nothing(journal: Journal) -> None:
    session = journal.session(SID)
    session.close()
    agent = Agent(name="a", model=ScriptedModel([[assistant_message("hi")]]))
    with pytest.raises(RuntimeError, match="JournalSession is closed"):
        await Runner.run(agent, "hello", session=session, hooks=session)
    with pytest.raises(RuntimeError, match="JournalSession is closed"):
        await session.on_agent_start(RunContextWrapper(context=None), agent)
    assert await journal.store.head(session_stream(SID)) is None


async def test_async_with_closes_the_session_and_not_the_journal(journal: Journal) -> None:
    async with journal.session(SID) as session:
        await session.add_items(MAIN[:2])
    with pytest.raises(RuntimeError, match="JournalSession is closed"):
        await session.get_items()
    async with journal.session(SID) as again:
        assert await again.get_items() == MAIN[:2]


# -- negative limits ---------------------------------------------------------------------


async def _limits_program(make: Callable[..., Any]) -> list[Any]:
    session = make()
    await session.add_items(MAIN)
    await session.create_branch_from_turn(2, "alt")
    await session.add_items([_user("b2")])
    seen = []
    for limit in (-1, -3, 0, 1, 3, None):
        seen.append(await session.get_items(limit))
        seen.append(await session.get_items(limit, "main"))
        seen.append(await session.get_items(limit, "alt"))
    for settings_limit in (-1, 0, 2):
        configured = make(SessionSettings(limit=settings_limit))
        await configured.switch_to_branch("alt")
        seen.append(await configured.get_items())
        seen.append(await configured.get_items(branch_id="main"))
        seen.append(await configured.get_items(-2))
    return seen


async def test_negative_limits_return_every_item_as_the_sdk_class_does(tmp_path: Path) -> None:
    await _sides(tmp_path, _limits_program)


# -- an object on a branch another object deleted -----------------------------------------


async def _deleted_under_program(make: Callable[[], Any]) -> list[Any]:
    one, two = make(), make()
    await one.add_items(MAIN)
    await two.create_branch_from_turn(2, "x")
    await two.add_items([_user("x2")])
    await one.delete_branch("x", force=True)
    seen = [
        await _outcome(two.list_branches()),
        await _outcome(two.get_items()),
        await _outcome(two.get_items(-1)),
        await _outcome(two.get_conversation_turns()),
        await _outcome(two.find_turns_by_content("u")),
        await _outcome(two.get_conversation_by_turns()),
        await _outcome(two.get_tool_usage()),
        await _outcome(two.get_session_usage()),
        await _outcome(two.get_turn_usage()),
        await _outcome(two.get_items(branch_id="main")),
    ]
    await one.clear_session()
    seen.append(await _outcome(two.get_items()))  # moved to main at the clear
    await one.add_items([_user("m1")])
    seen.append(await _outcome(two.get_items()))
    seen.append(await _outcome(two.list_branches()))
    await two.add_items([_user("m2")])  # on main now
    seen.append(await _outcome(one.get_items()))
    return seen


async def test_an_object_on_a_deleted_branch_reads_as_the_sdk_class_reads(
    tmp_path: Path, journal: Journal
) -> None:
    await _sides(tmp_path, _deleted_under_program, journal=journal)


async def test_an_object_whose_first_call_after_a_delete_reads_everything_cannot_write(
    journal: Journal,
) -> None:
    one = JournalSession(journal.store, SID)
    await one.add_items(MAIN)
    await one.create_branch_from_turn(2, "x")
    await one.add_items([_user("x2")])
    await one.switch_to_branch("main")
    await one.delete_branch("x")
    # Its first read is a full one, which a store with a read model answers from it.
    late = JournalSession(journal.store, SID, branch="x")
    assert await late.get_items() == []
    with pytest.raises(BranchDeleted):
        await late.add_items([_user("late")])
    events = await journal.store.read(branch_stream(SID, "x"))
    assert events[-1].type == ev.BRANCH_DELETED


async def test_writes_onto_a_branch_another_object_deleted_are_refused(journal: Journal) -> None:
    one, two = JournalSession(journal.store, SID), JournalSession(journal.store, SID)
    await one.add_items(MAIN)
    await one.clear_session()  # a clear before the delete does not count
    await one.add_items(MAIN)
    await two.create_branch_from_turn(2, "x")
    await one.delete_branch("x", force=True)
    top = await journal.store.read(branch_stream(SID, "x"))
    for write in (two.add_items([_user("late")]), two.pop_item(), two.fork()):
        with pytest.raises(BranchDeleted, match="'x' of session parity was deleted"):
            await write
    await one.add_items([_user("u3")])  # main goes on: still no clear since the delete
    with pytest.raises(BranchDeleted):
        await two.add_items([_user("late")])
    assert await journal.store.read(branch_stream(SID, "x")) == top  # nothing after the end
    # A clear of the session since the delete moves the object to main (as the SDK's).
    await one.clear_session()
    await two.add_items([_user("m1")])
    assert two.branch == "main"
    main = await journal.store.read(session_stream(SID))
    assert [e.type for e in main][-2:] == [ev.SESSION_CLEARED, "UserMessageReceived"]


# -- the public assertions of the SDK's row-counting cases --------------------------------


async def _prefix_pops_program(make: Callable[[], Any]) -> list[Any]:
    """Pops into a branch's shared prefix leave the parent as it was; draining works."""
    session = make()
    await session.add_items(MAIN)
    await session.create_branch_from_turn(2, "branch_a")
    await session.add_items([_user("branch-only")])
    seen = [await session.pop_item(), await session.pop_item(), await session.pop_item()]
    seen += [await session.get_items(branch_id="main"), await session.get_items()]
    seen.append(await _outcome(session.list_branches()))
    await session.switch_to_branch("main")
    seen += [await session.pop_item() for _ in range(5)]
    seen += [await session.get_items(), await _outcome(session.list_branches())]
    return seen


async def _branch_of_deleted_program(make: Callable[[], Any]) -> list[Any]:
    """A branch of a branch keeps what it shares when its parent is deleted."""
    session = make()
    await session.add_items(MAIN)
    await session.create_branch_from_turn(2, "branch_a")
    await session.add_items([_user("a shared"), _user("a only")])
    await session.create_branch_from_turn(3, "branch_b")
    await session.delete_branch("branch_a")
    return [
        await session.get_items(branch_id="branch_b"),
        await session.get_items(branch_id="branch_a"),
        await session.get_items(branch_id="main"),
        await _outcome(session.list_branches()),
        await _outcome(session.get_conversation_turns()),
    ]


async def _delete_branch_only_program(make: Callable[[], Any]) -> list[Any]:
    session = make()
    await session.add_items(MAIN)
    await session.create_branch_from_turn(2, "cleanup")
    await session.add_items([_user("b-q"), {"role": "assistant", "content": "b-a"}])
    await session.delete_branch("cleanup", force=True)
    return [
        session._current_branch_id,
        await session.get_items(branch_id="main"),
        await session.get_items(),
        await _outcome(session.list_branches()),
    ]


async def _usage_after_pops_program(make: Callable[[], Any]) -> list[Any]:
    """Usage stays while a turn keeps an item, goes when a pop empties it, is skipped on
    a line without a turn, and does not come back when a new turn reuses the number."""
    session = make()
    await session.store_run_usage(run_result(1, 50))  # no turn yet: skipped
    seen = [await session.get_session_usage(), await session.get_turn_usage()]
    await session.add_items([_user("q"), {"role": "assistant", "content": "a"}])
    await session.store_run_usage(run_result(2, 50))
    await session.pop_item()
    seen += [await session.get_turn_usage(1), await session.get_session_usage()]
    await session.pop_item()
    seen += [await session.get_turn_usage(1), await session.get_session_usage()]
    await session.store_run_usage(run_result(3, 50))  # the line has no turn again: skipped
    await session.add_items([_user("q again")])  # turn 1 reused
    seen += [await session.get_turn_usage(1), await session.get_turn_usage()]
    await session.store_run_usage(run_result(4, 50))
    seen += [await session.get_turn_usage(), await session.get_session_usage()]
    return seen


async def _clear_numbering_program(make: Callable[[], Any]) -> list[Any]:
    """A clear resets turns and usage, and moves the object to main."""
    session = make()
    await session.add_items(MAIN)
    await session.store_run_usage(run_result(2, 50))
    await session.create_branch_from_turn(2, "branch_a")
    seen = [session._current_branch_id]
    await session.clear_session()
    seen += [session._current_branch_id, await session.get_items()]
    seen += [await session.get_session_usage(), await session.get_turn_usage()]
    await session.add_items([_user("fresh start")])
    seen += [await _outcome(session.get_conversation_turns())]
    seen += [await session.get_conversation_by_turns(), await _outcome(session.list_branches())]
    seen.append(await _outcome(session.create_branch_from_turn(1, "branch_a")))  # names stay used
    return seen


@pytest.mark.parametrize(
    "program",
    [
        _prefix_pops_program,
        _branch_of_deleted_program,
        _delete_branch_only_program,
        _usage_after_pops_program,
        _clear_numbering_program,
    ],
    ids=lambda p: p.__name__.strip("_").removesuffix("_program"),
)
async def test_branch_pop_clear_and_usage_programs_read_as_the_sdk_class(
    tmp_path: Path, program: Program
) -> None:
    await _sides(tmp_path, program)


# -- call orders: a call keeps the line current when it was made --------------------------


async def _call_order_program(make: Callable[[], Any]) -> list[Any]:
    session = make()
    await session.add_items(MAIN)
    await session.create_branch_from_turn(2, "branch_a")
    await session.add_items([_user("branch-only")])
    # A pop made on branch_a, then a switch to main before the pop's work is done.
    pop = asyncio.ensure_future(session.pop_item())
    await asyncio.sleep(0)  # the pop has started (and resolved its line)
    await session.switch_to_branch("main")
    seen = [await pop, await session.get_items(branch_id="main")]
    # An add made on branch_a, then a switch away: the item lands on branch_a.
    await session.switch_to_branch("branch_a")
    add = asyncio.ensure_future(session.add_items([_user("queued")]))
    await asyncio.sleep(0)
    await session.switch_to_branch("main")
    await add
    seen += [await session.get_items(branch_id="branch_a"), await session.get_items()]
    # A usage booking made before a pop that empties its turn: the pop un-books it.
    await session.store_run_usage(run_result(1, 50))
    booked = asyncio.ensure_future(session.store_run_usage(run_result(5, 50)))
    await asyncio.sleep(0)
    await session.pop_item()
    await session.pop_item()
    await booked
    seen += [await session.get_turn_usage(), await session.get_items()]
    # A booking on branch_a survives a delete of an unrelated branch made meanwhile.
    await session.create_branch_from_turn(1, "unrelated")
    await session.add_items([_user("u-other")])
    await session.switch_to_branch("branch_a")
    booking = asyncio.ensure_future(session.store_run_usage(run_result(7, 50)))
    await asyncio.sleep(0)
    await session.delete_branch("unrelated")
    await booking
    seen += [await session.get_turn_usage(), await _outcome(session.list_branches())]
    return seen


async def test_calls_keep_the_line_current_when_made_as_the_sdk_class_does(
    tmp_path: Path,
) -> None:
    await _sides(tmp_path, _call_order_program)


# -- a run, and closing during one ------------------------------------------------------------


async def _run_after_clear_program(make: Callable[[], Any]) -> list[Any]:
    one, two = make(), make()
    await one.add_items(MAIN)
    await two.create_branch_from_turn(2, "x")
    await one.clear_session()
    agent = Agent(name="a", model=ScriptedModel([[assistant_message("hi", item_id="m1")]]))
    result = await Runner.run(agent, "hello", session=two)
    items = await two.get_items()
    return [result.final_output, two._current_branch_id, [item.get("role") for item in items]]


async def test_a_run_on_an_object_whose_branch_was_cleared_runs_on_main_as_the_sdk_s_does(
    tmp_path: Path,
) -> None:
    await _sides(tmp_path, _run_after_clear_program)


async def test_closing_during_a_run_scope_lets_the_error_through_with_one_line(
    journal: Journal, caplog: pytest.LogCaptureFixture
) -> None:
    session = journal.session(SID)

    async def closed_and_failed() -> None:
        async with session.run_scope():
            session.close()
            raise ValueError("the body failed")

    with pytest.raises(ValueError, match="the body failed"):
        await closed_and_failed()
    lines = [r for r in caplog.records if r.name == "agentjournal.session"]
    assert [r.getMessage() for r in lines] == [
        f"AgentSession-{SID} was closed during the run: its open subagents stay open until "
        "the session's next run closes them"
    ]
    assert lines[0].exc_info is None


async def test_sessions_of_a_closed_journal_fail_as_the_store_is_gone(tmp_path: Path) -> None:
    journal = await Journal.open(f"sqlite:///{tmp_path / 'j.db'}")
    session = journal.session(SID)
    await session.add_items(MAIN[:1])
    await journal.close()
    for call in (session.get_items(), session.add_items([_user("x")]), session.list_branches()):
        with pytest.raises(StoreUnavailable):
            await call
