"""``JournalSession.append_event_at_head``: an application event lands only at the head its
``decide`` saw, so two writers deciding on one state (two processes: here two journals on
one store) land one after the other, the second deciding again on what the first wrote."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from agentjournal import Journal
from agentjournal.errors import InvalidInput
from agentjournal.streams import session_stream

CLAIM = "app.Claimed"


class Taken(Exception):
    """The slot was claimed already."""


async def test_two_writers_deciding_on_one_state_land_one_after_the_other(
    journal_uri: str,
) -> None:
    if journal_uri == "sqlite://:memory:":
        pytest.skip("two journals on one in-memory store see two databases")
    async with Journal.open(journal_uri) as first, Journal.open(journal_uri) as second:
        await first.session("s").add_items([{"role": "user", "content": "hi"}])
        both_read = asyncio.Barrier(2)
        decided: list[tuple[str, int]] = []

        def deciding(journal: Journal, who: str) -> Callable[[], Awaitable[bytes]]:
            async def decide() -> bytes:
                recorded = await journal.store.read(session_stream("s"))
                claims = [json.loads(e.data) for e in recorded if e.type == CLAIM]
                decided.append((who, len(claims)))
                if len(decided) <= 2:
                    await both_read.wait()  # both decide on the same state, no claim yet
                if claims:
                    raise Taken(claims[0]["by"])
                return json.dumps({"by": who}).encode()

            return decide

        outcomes = await asyncio.gather(
            first.session("s").append_event_at_head(CLAIM, deciding(first, "a")),
            second.session("s").append_event_at_head(CLAIM, deciding(second, "b")),
            return_exceptions=True,
        )

        claims = [e for e in await first.store.read(session_stream("s")) if e.type == CLAIM]
        assert len(claims) == 1
        winner = json.loads(claims[0].data)["by"]
        loser = "b" if winner == "a" else "a"
        assert sorted(o is None for o in outcomes) == [False, True]
        refusal = next(o for o in outcomes if o is not None)
        assert isinstance(refusal, Taken)
        assert str(refusal) == winner
        # The loser decided twice: on the state without the claim, then on the one with it.
        assert [n for who, n in decided if who == loser] == [0, 1]


async def test_the_session_s_own_event_types_are_refused(journal: Journal) -> None:
    async def decide() -> bytes:
        return b"{}"

    with pytest.raises(InvalidInput, match="cannot be appended as an application event"):
        await journal.session("s").append_event_at_head("SessionStarted", decide)


async def test_a_session_used_inside_decide_is_refused_not_waited_for(journal: Journal) -> None:
    session = journal.session("s")
    await session.add_items([{"role": "user", "content": "hi"}])

    async def decide() -> bytes:
        await journal.session("s").get_items()  # the line is locked: this would wait forever
        return b"{}"

    with pytest.raises(InvalidInput, match="inside append_event_at_head's decide"):
        await asyncio.wait_for(session.append_event_at_head("app.Noted", decide), 10)
    await session.append_event("app.Noted", b"{}")  # usable again afterwards


async def test_a_task_started_inside_decide_may_use_the_session_once_decide_returned(
    journal: Journal,
) -> None:
    # A task copies its creator's context: one started in decide (a notifier, a lazily
    # started worker) must not find itself "inside decide" for the rest of its life.
    session = journal.session("s")
    await session.add_items([{"role": "user", "content": "hi"}])
    started: list[asyncio.Task[int]] = []

    async def later() -> int:
        await asyncio.sleep(0.05)  # decide has returned and its event landed
        return len(await session.get_items())

    async def decide() -> bytes:
        started.append(asyncio.create_task(later()))
        return b"{}"

    await session.append_event_at_head("app.Noted", decide)
    assert await asyncio.wait_for(started[0], 10) == 1
