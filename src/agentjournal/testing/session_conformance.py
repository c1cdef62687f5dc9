"""The conformance suite every OpenAI Agents SDK ``Session`` must pass.

It checks the generic ``agents.memory.Session`` contract, the one the SDK's
runner relies on, against any implementation: order across calls, ``limit``
windows, ``pop_item``, ``clear_session``, copies in and out, empty writes,
concurrent writers and poppers, a second object and a restart on the same
store, isolation of session ids, one object on several event loops, and an
exact round trip of every item shape the SDK writes. The SDK's own
``SQLiteSession`` passes it, and so does :class:`~agentjournal.JournalSession`.

Subclass :class:`SessionConformance` once per implementation in a ``Test*``
class and provide the ``open_session`` fixture, and ``restart`` if the store
can be reopened::

    class TestMySession(SessionConformance):
        @pytest.fixture
        def open_session(self, tmp_path) -> Iterator[OpenSession]:
            opened = []

            def open_session(session_id: str) -> Session:
                session = MySession(session_id, tmp_path / "sessions.db")
                opened.append(session)
                return session  # or an awaitable of one

            yield open_session
            for session in opened:
                session.close()

        @pytest.fixture
        def restart(self, ...) -> Restart:
            async def restart() -> None:
                ...  # drop every object, cache and connection; reopen the store

            return restart

``open_session(session_id)`` must return a NEW session object each call, all
on one store, so that two objects of one id share a history. Class flags say
what an implementation does not promise: ``shares_history = False`` when each
object holds its own history (the SDK's ``SQLiteSession(":memory:")``), and
``crosses_event_loops = False`` when an object belongs to the event loop that
first used it; the tests that need it then skip. Every test uses fresh session
ids, so the suite can run against a store that holds other data.

Requires pytest and pytest-asyncio (``asyncio_mode = "auto"``).
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, TypeAlias, cast

import pytest
from agents.items import TResponseInputItem
from agents.memory.session import Session
from agents.memory.session_settings import SessionSettings

__all__ = [
    "OpenSession",
    "Restart",
    "SessionConformance",
    "fingerprint",
    "sdk_items",
    "user_message",
]

OpenSession: TypeAlias = Callable[[str], "Session | Awaitable[Session]"]
"""``open_session(session_id)``: a new session object for ``session_id`` on the store under test."""

Restart: TypeAlias = Callable[[], Awaitable[None]]
"""``await restart()``: drop every object, cache and connection and reopen the store."""

Item: TypeAlias = dict[str, Any]


def user_message(text: str) -> Item:
    """A user message as the runner writes a string input: ``{"role": "user", "content": text}``."""
    return {"role": "user", "content": text}


def fingerprint(item: Any) -> str:
    """The item as the SDK's runner compares it (``json.dumps(sort_keys=True)``).

    ``==`` alone takes ``1`` for ``1.0`` and ``True`` for ``1``; the runner's
    fingerprint of a resumed run's tail does not, so the suite checks both.
    """
    return json.dumps(item, sort_keys=True)


def sdk_items() -> list[Item]:
    """Fresh copies of the item shapes the SDK's runner hands to ``add_items``.

    Each is what ``Runner.run`` wrote for a scripted model (``agents.testing``)
    with the tools of every family, including the handoff pair and the
    keys the SDK leaves as ``None``; every call returns new objects.
    """
    items: list[Item] = [
        {"role": "user", "content": "Why was I charged twice? — é ✓ 😀"},
        {"role": "user", "content": [{"type": "input_text", "text": "Order 42, please."}]},
        {"role": "developer", "content": "Answer briefly."},
        {"role": "system", "content": "You are the triage agent."},
        {"role": "assistant", "content": "Hi there!"},
        {
            "id": "rs_1",
            "summary": [{"text": "Look the order up first.", "type": "summary_text"}],
            "type": "reasoning",
            "content": [{"text": "raw thought", "type": "reasoning_text"}],
            "encrypted_content": "gAAAAB-opaque",
        },
        {"id": "rs_2", "summary": [], "type": "reasoning"},
        {
            "arguments": '{"order_id":"42","amount_cents":1250}',
            "call_id": "call_1",
            "name": "refund",
            "type": "function_call",
            "id": "call_1",
        },
        {"call_id": "call_1", "output": "refunded 1250 cents", "type": "function_call_output"},
        {
            "call_id": "call_2",
            "output": [{"type": "input_text", "text": "a picture:"}],
            "type": "function_call_output",
        },
        {
            "id": "ws_1",
            "action": {"type": "search", "query": "refund policy"},
            "status": "completed",
            "type": "web_search_call",
        },
        {
            "id": "fs_1",
            "queries": ["refund"],
            "status": "completed",
            "type": "file_search_call",
            "results": [
                {
                    "attributes": {"n": 1.0},
                    "file_id": "f1",
                    "filename": "p.txt",
                    "score": 0.5,
                    "text": "t",
                }
            ],
        },
        {
            "id": "ci_1",
            "code": "print(1)",
            "container_id": "c1",
            "outputs": [{"logs": "1\n", "type": "logs"}],
            "status": "completed",
            "type": "code_interpreter_call",
        },
        {"id": "ig_1", "result": "aGk=", "status": "completed", "type": "image_generation_call"},
        {
            "id": "ml_1",
            "server_label": "docs",
            "tools": [{"input_schema": {"type": "object"}, "name": "lookup"}],
            "type": "mcp_list_tools",
        },
        {
            "id": "mc_1",
            "arguments": '{"q":1}',
            "name": "lookup",
            "server_label": "docs",
            "type": "mcp_call",
            "output": "r",
        },
        {
            "id": "cu_1",
            "call_id": "call_cu",
            "pending_safety_checks": [],
            "status": "completed",
            "type": "computer_call",
            "action": {"button": "left", "type": "click", "x": 1, "y": 2},
        },
        {
            "call_id": "call_cu",
            "output": {
                "type": "computer_screenshot",
                "image_url": "data:image/png;base64,iVBORw0KGgo=",
            },
            "type": "computer_call_output",
            "acknowledged_safety_checks": None,
        },
        {
            "id": "ls_1",
            "action": {"command": ["echo", "hi"], "env": {}, "type": "exec"},
            "call_id": "call_ls",
            "status": "completed",
            "type": "local_shell_call",
        },
        {"type": "local_shell_call_output", "call_id": "call_ls", "output": "hi\n"},
        {
            "id": "sh_1",
            "action": {"commands": ["echo ok"], "max_output_length": 100, "timeout_ms": 1000},
            "call_id": "call_sh",
            "status": "completed",
            "type": "shell_call",
        },
        {
            "type": "shell_call_output",
            "call_id": "call_sh",
            "output": [
                {"stdout": "ok\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
            ],
            "max_output_length": 100,
        },
        {
            "id": "call_ap",
            "call_id": "call_ap",
            "operation": {"diff": "+hi\n", "path": "a.txt", "type": "create_file"},
            "status": "completed",
            "type": "apply_patch_call",
            "caller": None,
        },
        {
            "type": "apply_patch_call_output",
            "call_id": "call_ap",
            "status": "completed",
            "output": "created",
        },
        {
            "call_id": "call_ct",
            "input": "free",
            "name": "raw",
            "type": "custom_tool_call",
            "id": "ct_1",
        },
        {"type": "custom_tool_call_output", "call_id": "call_ct", "output": "got free"},
        {
            "id": "mcpr_1",
            "arguments": '{"id":7}',
            "name": "delete",
            "server_label": "docs",
            "type": "mcp_approval_request",
        },
        {
            "approval_request_id": "mcpr_1",
            "approve": False,
            "type": "mcp_approval_response",
            "reason": "no deletes",
        },
        {
            "arguments": "{}",
            "call_id": "call_ho",
            "name": "transfer_to_billing",
            "type": "function_call",
            "id": "call_ho",
        },
        {
            "call_id": "call_ho",
            "output": '{"assistant": "billing"}',
            "type": "function_call_output",
        },
        {
            "id": "msg_1",
            "content": [
                {
                    "annotations": [],
                    "text": "Refunded — é ✓ 😀",
                    "type": "output_text",
                    "logprobs": [],
                }
            ],
            "role": "assistant",
            "status": "completed",
            "type": "message",
        },
    ]
    return copy.deepcopy(items)


def _texts(items: Sequence[Any]) -> list[Any]:
    return [item.get("content") for item in items]


def _input(items: Sequence[Item]) -> list[TResponseInputItem]:
    return cast("list[TResponseInputItem]", list(items))


def _assert_same(got: Sequence[Any], want: Sequence[Any]) -> None:
    assert isinstance(got, list), f"get_items returned a {type(got).__name__}, not a list"
    assert list(got) == list(want)
    assert [fingerprint(item) for item in got] == [fingerprint(item) for item in want]


def _calls(items: Sequence[Any], writers: Sequence[str]) -> dict[str, list[list[str]]]:
    """Group contents ``{writer}-{call}-{n}`` into each writer's calls, in stored order.

    Asserts that each call's items are contiguous and in order.
    """
    texts = [str(item["content"]) for item in items]
    found: dict[str, list[list[str]]] = {writer: [] for writer in writers}
    run: list[str] = []
    for text in texts:
        writer, call, n = text.rsplit("-", 2)
        if n == "0":
            run = [text]
            found[writer].append(run)
        else:
            previous = f"{writer}-{call}-{int(n) - 1}"
            assert run[-1:] == [previous], f"call {writer}-{call} is not contiguous: {texts}"
            run.append(text)
    return found


class SessionConformance:
    """Abstract conformance tests; see the module docstring for how to use it."""

    shares_history: ClassVar[bool] = True
    """Whether two objects opened for one session id share one history."""

    crosses_event_loops: ClassVar[bool] = True
    """Whether one object may be used from several event loops, as ``SQLiteSession`` may.

    The SDK's ``Runner.run_sync`` and its own session tests use one session
    from several threads, each with its own loop (``asyncio.run``).
    """

    concurrent_calls: ClassVar[int] = 12
    """How many calls the concurrency tests run at once."""

    @pytest.fixture
    def open_session(self) -> OpenSession:
        """Opens new session objects on the store under test; subclasses must override it."""
        raise NotImplementedError("subclass SessionConformance and provide an open_session fixture")

    @pytest.fixture
    def restart(self) -> Restart | None:
        """Reopens the store as a new process would, or None when it cannot be reopened."""
        return None

    @pytest.fixture
    def session_id(self) -> str:
        """A session id no other test uses."""
        return f"conformance-{uuid.uuid4().hex}"

    @staticmethod
    async def opened(open_session: OpenSession, session_id: str) -> Session:
        """Call ``open_session`` and await its result if it is awaitable."""
        session = open_session(session_id)
        if inspect.isawaitable(session):
            session = await session
        return session

    async def _second(self, open_session: OpenSession, session_id: str) -> Session:
        if not self.shares_history:
            pytest.skip("objects of this session class do not share a history")
        return await self.opened(open_session, session_id)

    # -- the protocol -------------------------------------------------------------

    async def test_is_a_session(self, open_session: OpenSession, session_id: str) -> None:
        session = await self.opened(open_session, session_id)
        assert isinstance(session, Session)
        assert session.session_id == session_id
        settings = session.session_settings
        assert settings is None or isinstance(settings, SessionSettings)

    async def test_a_new_session_is_empty(self, open_session: OpenSession, session_id: str) -> None:
        session = await self.opened(open_session, session_id)
        _assert_same(await session.get_items(), [])
        _assert_same(await session.get_items(limit=3), [])
        assert await session.pop_item() is None
        await session.clear_session()
        _assert_same(await session.get_items(), [])

    # -- order and limits ---------------------------------------------------------

    async def test_add_items_appends_in_order_across_calls(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        first = [user_message("a"), user_message("b")]
        await session.add_items(_input(first))
        await session.add_items(_input([user_message("c")]))
        await session.add_items(_input([user_message("d"), user_message("e"), user_message("f")]))
        _assert_same(await session.get_items(), [user_message(t) for t in "abcdef"])
        _assert_same(await session.get_items(limit=None), [user_message(t) for t in "abcdef"])

    @pytest.mark.parametrize("limit", [1, 3, 9, 10, 11, 1000])
    async def test_limit_returns_the_latest_in_order(
        self, open_session: OpenSession, session_id: str, limit: int
    ) -> None:
        session = await self.opened(open_session, session_id)
        written = [user_message(f"m{n}") for n in range(10)]
        await session.add_items(_input(written[:4]))
        await session.add_items(_input(written[4:]))
        _assert_same(await session.get_items(limit=limit), written[-limit:])

    async def test_limit_zero_returns_nothing(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        await session.add_items(_input([user_message("a"), user_message("b")]))
        _assert_same(await session.get_items(limit=0), [])
        _assert_same(await session.get_items(), [user_message("a"), user_message("b")])

    async def test_session_settings_limit_is_the_default(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        written = [user_message(f"m{n}") for n in range(6)]
        await session.add_items(_input(written))
        session.session_settings = SessionSettings(limit=2)
        _assert_same(await session.get_items(), written[-2:])
        _assert_same(await session.get_items(limit=4), written[-4:])
        _assert_same(await session.get_items(limit=0), [])
        session.session_settings = SessionSettings(limit=None)
        _assert_same(await session.get_items(), written)

    # -- pop ------------------------------------------------------------------------

    async def test_pop_returns_the_newest_and_removes_it(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        await session.add_items(_input([user_message("a"), user_message("b")]))
        await session.add_items(_input([user_message("c")]))
        assert await session.pop_item() == user_message("c")
        _assert_same(await session.get_items(), [user_message("a"), user_message("b")])
        assert await session.pop_item() == user_message("b")  # across the calls' boundary
        _assert_same(await session.get_items(limit=5), [user_message("a")])
        assert await session.pop_item() == user_message("a")
        assert await session.pop_item() is None
        assert await session.pop_item() is None
        _assert_same(await session.get_items(), [])

    async def test_add_after_pop_continues_the_history(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        await session.add_items(_input([user_message(f"m{n}") for n in range(5)]))
        for _ in range(2):
            await session.pop_item()
        await session.add_items(_input([user_message("new")]))
        want = [user_message("m0"), user_message("m1"), user_message("m2"), user_message("new")]
        _assert_same(await session.get_items(), want)
        _assert_same(await session.get_items(limit=2), want[-2:])
        assert await session.pop_item() == user_message("new")
        assert await session.pop_item() == user_message("m2")

    # -- clear ------------------------------------------------------------------------

    async def test_clear_empties_and_adding_after_works(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        await session.add_items(_input([user_message("old-1"), user_message("old-2")]))
        await session.clear_session()
        _assert_same(await session.get_items(), [])
        _assert_same(await session.get_items(limit=1), [])
        assert await session.pop_item() is None
        await session.add_items(_input([user_message("new-1"), user_message("new-2")]))
        _assert_same(await session.get_items(), [user_message("new-1"), user_message("new-2")])
        _assert_same(
            await session.get_items(limit=5), [user_message("new-1"), user_message("new-2")]
        )
        assert await session.pop_item() == user_message("new-2")
        assert await session.pop_item() == user_message("new-1")
        assert await session.pop_item() is None  # nothing from before the clear comes back
        await session.clear_session()
        await session.clear_session()
        _assert_same(await session.get_items(), [])

    # -- empty writes -----------------------------------------------------------------

    async def test_empty_add_items_is_a_no_op(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        await session.add_items([])
        _assert_same(await session.get_items(), [])
        assert await session.pop_item() is None
        await session.add_items(_input([user_message("a")]))
        await session.add_items([])
        _assert_same(await session.get_items(), [user_message("a")])
        assert await session.pop_item() == user_message("a")
        assert await session.pop_item() is None

    # -- copies -----------------------------------------------------------------------

    async def test_returned_items_are_copies(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        written = [
            user_message("plain"),
            {"role": "user", "content": [{"type": "input_text", "text": "nested"}]},
        ]
        await session.add_items(_input(copy.deepcopy(written)))
        got: list[Any] = await session.get_items()
        got[0]["content"] = "changed"
        got[1]["content"][0]["text"] = "changed"
        got[1]["content"].append({"type": "input_text", "text": "added"})
        got.append(user_message("appended"))
        del got[0]
        _assert_same(await session.get_items(), written)
        tail: list[Any] = await session.get_items(limit=1)
        tail[0]["role"] = "assistant"
        _assert_same(await session.get_items(limit=1), written[-1:])
        _assert_same(await session.get_items(), written)

    async def test_given_items_are_copied(self, open_session: OpenSession, session_id: str) -> None:
        session = await self.opened(open_session, session_id)
        written = [
            user_message("plain"),
            {"role": "user", "content": [{"type": "input_text", "text": "nested"}]},
        ]
        given = copy.deepcopy(written)
        await session.add_items(_input(given))
        given[0]["content"] = "changed"
        given[1]["content"][0]["text"] = "changed"
        given.append(user_message("appended"))
        _assert_same(await session.get_items(), written)

    async def test_a_popped_item_is_a_copy(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        nested = {"role": "user", "content": [{"type": "input_text", "text": "nested"}]}
        await session.add_items(_input([user_message("keep"), copy.deepcopy(nested)]))
        before: list[Any] = await session.get_items()
        popped: Any = await session.pop_item()
        assert popped == nested
        popped["content"][0]["text"] = "changed"
        assert before[1] == nested
        _assert_same(await session.get_items(), [user_message("keep")])

    # -- concurrency --------------------------------------------------------------

    async def _write_concurrently(self, sessions: Sequence[Session]) -> list[str]:
        writers = [f"w{n}" for n in range(len(sessions))]
        calls = self.concurrent_calls

        async def call(session: Session, writer: str, n: int) -> None:
            items = [user_message(f"{writer}-{n}-{k}") for k in range(3)]
            await session.add_items(_input(items))

        await asyncio.gather(
            *(
                call(session, writer, n)
                for n in range(calls)
                for session, writer in zip(sessions, writers, strict=True)
            )
        )
        return writers

    def _check_concurrent(self, items: Sequence[Any], writers: Sequence[str]) -> None:
        calls = self.concurrent_calls
        assert len(items) == 3 * calls * len(writers), "items were lost or duplicated"
        assert len({fingerprint(item) for item in items}) == len(items), "items were duplicated"
        found = _calls(items, writers)
        for writer in writers:
            assert sorted(tuple(call) for call in found[writer]) == sorted(
                tuple(f"{writer}-{n}-{k}" for k in range(3)) for n in range(calls)
            )

    async def test_concurrent_add_items_on_one_object(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        writers = await self._write_concurrently([session])
        self._check_concurrent(await session.get_items(), writers)

    async def test_concurrent_add_items_on_two_objects(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        one = await self.opened(open_session, session_id)
        two = await self._second(open_session, session_id)
        writers = await self._write_concurrently([one, two])
        items = await one.get_items()
        self._check_concurrent(items, writers)
        _assert_same(await two.get_items(), items)

    async def test_a_reader_sees_whole_calls_only(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        seen: list[list[Any]] = []
        done = asyncio.Event()

        async def read() -> None:
            while not done.is_set():
                seen.append(await session.get_items())
                await asyncio.sleep(0)

        reader = asyncio.create_task(read())
        try:
            writers = await self._write_concurrently([session])
        finally:
            done.set()
            await reader
        self._check_concurrent(await session.get_items(), writers)
        final = [fingerprint(item) for item in await session.get_items()]
        for snapshot in seen:
            assert len(snapshot) % 3 == 0, f"a read saw part of a call: {_texts(snapshot)}"
            _calls(snapshot, writers)
            assert [fingerprint(item) for item in snapshot] == final[: len(snapshot)]

    async def test_concurrent_pops_take_each_item_once(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        one = await self.opened(open_session, session_id)
        sessions = (
            [one, await self.opened(open_session, session_id)] if self.shares_history else [one]
        )
        written = [user_message(f"m{n}") for n in range(10)]
        await one.add_items(_input(written))
        popped = await asyncio.gather(
            *(sessions[n % len(sessions)].pop_item() for n in range(len(written) + 4))
        )
        taken = [item for item in popped if item is not None]
        assert len(taken) == len(written), f"popped {_texts(taken)}"
        assert sorted(fingerprint(item) for item in taken) == sorted(
            fingerprint(item) for item in written
        )
        for session in sessions:
            _assert_same(await session.get_items(), [])

    async def test_racing_adds_and_pops_lose_and_duplicate_nothing(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        one = await self.opened(open_session, session_id)
        sessions = (
            [one, await self.opened(open_session, session_id)] if self.shares_history else [one]
        )
        seed = [user_message(f"s-0-{k}") for k in range(10)]
        await one.add_items(_input(seed))
        added: list[Item] = list(seed)
        calls: list[Awaitable[Any]] = []
        for n in range(self.concurrent_calls):
            session = sessions[n % len(sessions)]
            items = [user_message(f"w-{n}-{k}") for k in range(3)]
            added.extend(items)
            calls.append(session.add_items(_input(items)))
            calls.append(session.pop_item())
        outcomes = await asyncio.gather(*calls)
        popped = [item for item in outcomes if item is not None]
        left = await one.get_items()
        assert sorted(fingerprint(item) for item in [*left, *popped]) == sorted(
            fingerprint(item) for item in added
        ), "an item was lost, duplicated, or popped twice"
        _calls(left, ["s", "w"])  # what is left of each call is still contiguous and in order
        for session in sessions:
            _assert_same(await session.get_items(), left)

    # -- a second object, a restart, another id -------------------------------------

    async def test_a_second_object_shares_the_history(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        one = await self.opened(open_session, session_id)
        await one.add_items(_input([user_message("a"), user_message("b"), user_message("c")]))
        two = await self._second(open_session, session_id)
        _assert_same(await two.get_items(), [user_message(t) for t in "abc"])
        _assert_same(await two.get_items(limit=1), [user_message("c")])
        assert await two.pop_item() == user_message("c")
        _assert_same(await one.get_items(), [user_message("a"), user_message("b")])
        await one.add_items(_input([user_message("d")]))
        _assert_same(await two.get_items(limit=2), [user_message("b"), user_message("d")])
        await two.clear_session()
        _assert_same(await one.get_items(), [])
        assert await one.pop_item() is None
        await two.add_items(_input([user_message("e")]))
        _assert_same(await one.get_items(), [user_message("e")])

    async def test_the_history_survives_a_restart(
        self, open_session: OpenSession, restart: Restart | None, session_id: str
    ) -> None:
        if restart is None:
            pytest.skip("this store cannot be reopened (no restart fixture)")
        session = await self.opened(open_session, session_id)
        items = sdk_items()
        await session.add_items(_input(items[:10]))
        await session.add_items(_input([user_message("popped")]))
        await session.pop_item()
        await restart()
        after = await self.opened(open_session, session_id)
        _assert_same(await after.get_items(), items[:10])
        _assert_same(await after.get_items(limit=3), items[7:10])
        await after.add_items(_input(items[10:]))
        await restart()
        again = await self.opened(open_session, session_id)
        _assert_same(await again.get_items(), items)
        await again.clear_session()
        await restart()
        _assert_same(await (await self.opened(open_session, session_id)).get_items(), [])

    async def test_session_ids_are_isolated(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        one = await self.opened(open_session, session_id)
        two = await self.opened(open_session, session_id + "-other")
        await one.add_items(_input([user_message("one-a")]))
        await two.add_items(_input([user_message("two-a"), user_message("two-b")]))
        await one.add_items(_input([user_message("one-b")]))
        _assert_same(await one.get_items(), [user_message("one-a"), user_message("one-b")])
        _assert_same(await two.get_items(limit=1), [user_message("two-b")])
        assert await two.pop_item() == user_message("two-b")
        _assert_same(await one.get_items(), [user_message("one-a"), user_message("one-b")])
        await one.clear_session()
        _assert_same(await two.get_items(), [user_message("two-a")])
        assert await one.pop_item() is None
        assert await two.pop_item() == user_message("two-a")

    async def test_one_object_serves_several_event_loops(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        if not self.crosses_event_loops:
            pytest.skip("objects of this session class belong to one event loop")
        session = await self.opened(open_session, session_id)
        await session.add_items(_input([user_message("here-1")]))

        async def elsewhere() -> tuple[list[Any], Any]:
            await session.add_items(_input([user_message("there-1"), user_message("there-2")]))
            popped = await session.pop_item()
            return await session.get_items(), popped

        def in_a_thread() -> tuple[list[Any], Any]:
            return asyncio.run(elsewhere())  # a new loop in another thread, as run_sync does

        seen, popped = await asyncio.to_thread(in_a_thread)
        assert popped == user_message("there-2")
        _assert_same(seen, [user_message("here-1"), user_message("there-1")])
        await session.add_items(_input([user_message("here-2")]))
        want = [user_message("here-1"), user_message("there-1"), user_message("here-2")]
        _assert_same(await session.get_items(), want)
        again, _ = await asyncio.to_thread(in_a_thread)
        _assert_same(again, [*want, user_message("there-1")])

    # -- item shapes ----------------------------------------------------------------

    async def test_sdk_items_round_trip_in_one_call(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        items = sdk_items()
        await session.add_items(_input(sdk_items()))
        _assert_same(await session.get_items(), items)
        for limit in range(1, len(items) + 2):
            _assert_same(await session.get_items(limit=limit), items[-limit:])
        if self.shares_history:
            fresh = await self.opened(open_session, session_id)
            _assert_same(await fresh.get_items(), items)

    async def test_sdk_items_pop_back_exactly(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        items = sdk_items()
        await session.add_items(_input(sdk_items()[:12]))
        await session.add_items(_input(sdk_items()[12:]))
        for left in range(len(items) - 1, -1, -1):
            popped = await session.pop_item()
            assert popped == items[left]
            assert fingerprint(popped) == fingerprint(items[left])
            _assert_same(await session.get_items(limit=3), items[max(0, left - 3) : left])
            if left % 8 == 0 and self.shares_history:
                fresh = await self.opened(open_session, session_id)
                _assert_same(await fresh.get_items(), items[:left])
        assert await session.pop_item() is None
        await session.add_items(_input(sdk_items()))
        _assert_same(await session.get_items(), items)

    async def test_sdk_items_round_trip_one_per_call(
        self, open_session: OpenSession, session_id: str
    ) -> None:
        session = await self.opened(open_session, session_id)
        items = sdk_items()
        for item in sdk_items():
            await session.add_items(_input([item]))
        _assert_same(await session.get_items(), items)
        for limit in (1, 3, 10):
            _assert_same(await session.get_items(limit=limit), items[-limit:])
        if self.shares_history:
            fresh = await self.opened(open_session, session_id)
            _assert_same(await fresh.get_items(limit=4), items[-4:])
            _assert_same(await fresh.get_items(), items)
        await session.clear_session()
        await session.add_items(_input(sdk_items()))
        _assert_same(await session.get_items(), items)
