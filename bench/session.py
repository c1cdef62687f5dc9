"""Session benchmark: JournalSession side by side with the SDK's SQLiteSession, both on files.

Run: ``python bench/session.py`` (``--quick`` for a smoke run). Ratios are
ours / SDK in time (lower is better); machines here are noisy, so each case
alternates rounds between the two and reports medians.

Both sides are durable: our store commits with ``synchronous=FULL`` (WAL), and
the SDK's sessions here set ``PRAGMA synchronous=FULL`` on every connection they
open (:class:`DurableSQLiteSession`), so each side pays one fsync per write.

Cases:
  (a) runner turns: ``get_items(limit=20)`` then ``add_items`` of a function call
      and its output, as the runner does per tool turn, durable on both sides;
  (b) the same turn on a session of ~10k items vs one of ~100 items, and
      ``get_items(limit=20)`` from a fresh session object (cold cache) at both sizes;
  (c) a full ``get_items`` of 10k items from a fresh session object;
  (d) full replay of a handoff-heavy session: 100 runs in which triage hands off
      to billing (4 tool calls and a final message: 10 items per subsession),
      written by ``Runner.run`` with ``session=s, hooks=s`` so every handoff is a
      subagent with its own stream; ``get_items()`` of all 1,200 items from a fresh
      ``JournalSession`` (its own cache: reads and merges 101 streams) and from
      ``journal.session(id)`` (the journal's shared cache), against a
      ``SQLiteSession`` that ran the same scripts. Both histories are checked
      identical before timing. Goal: replay <= 2x ``SQLiteSession``;
  (e) the memory the journal's shared cache keeps for the 10k-item session after a
      full read (``tracemalloc``);
  (f) 50 sessions in one process, each doing turns concurrently (one asyncio task
      per session, all on one file): turns per second; on this row the ratio is
      ours / theirs in turns/s (higher is better). The SDK's sessions of one file
      share one lock, so each of its writes commits alone; ours share commits
      (group commit).

Beside (a), ``(a) floor`` times what no design that keeps the event loop free can
avoid: per turn, one lean hop to a worker thread (a ``SimpleQueue`` there,
``call_soon_threadsafe`` back) around a raw ``INSERT`` + ``COMMIT`` of the two
events our turn stores (their stored bytes: data and metadata), on its own file with
our pragmas (WAL, ``synchronous=FULL``); its ratio is floor / SDK, the least (a)'s
ratio can be on this machine in this run.

``(a) floor: our store alone`` and ``(f) floor: our store alone`` time what our own
store costs with nothing of the session around it: the very ``append_many``
requests a session's turns made (recorded beforehand on a scratch file: events
planned, sealed and encoded, read-model changes included) sent again, in order,
to a fresh store on its own file — no planning, no ``get_items``. What is left
between such a row and its target is all the session may spend on reading and
planning a turn (bench/RESULTS.md, "Floors").

``(a) floor: our turn, its plans made beforehand`` and ``(f) floor: our turns, their
plans made beforehand`` run our turns whole — ``get_items``, the write's reads, the
store, the tree, the read model — on a fresh file, except that ``plan_items`` hands
back the plan it made for the same turn on a scratch file beforehand (each plan checked
to be for the turn's items and stream, from the tree's heads): what the row saves against
(a) or (f) is what planning costs, what it leaves is everything else a turn of ours does.
``... only its (their) least Python planning`` runs the same turns, each also running the
least Python planning we could write for its two events (``bench/_least_plan.py``, which
checks nothing; its events checked identical to the plan's in the first, untimed, round):
about what a planner written in Python adds at the least, not a proven lower bound.

``--reads`` runs only (c), (d) and (e); ``--writes`` only (a) and (f). The "cpu ratio"
column is the ratio of CPU times (all threads of the process), steadier than the wall
clock on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import gc
import json
import os
import queue
import sqlite3
import sys
import tempfile
import threading
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.memory import Session
from agents.testing import ScriptedModel, assistant_message, function_call

from _common import ROUNDS, Timing, measure_cpu, run_publishing, table
from _least_plan import least_of, same_events
from agentjournal import Journal, JournalSession
from agentjournal.engine import items as items_module
from agentjournal.engine.plan_items import plan_items
from agentjournal.store.contract import AppendRequest, StreamState, encode_metadata
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.streams import session_stream

Turn = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Sizes:
    turns: int
    small: int
    large: int
    probe_turns: int
    handoffs: int


FULL = Sizes(turns=1000, small=100, large=10_000, probe_turns=100, handoffs=100)
QUICK = Sizes(turns=20, small=20, large=400, probe_turns=10, handoffs=5)
CONCURRENT_SESSIONS = 50
CONCURRENT_TURNS = {FULL: 20, QUICK: 2}  # turns per session per round
TOOL_CALLS = 4  # per subagent: with the handoff acknowledgement and the reply, 10 items
REPLAY_ROUNDS = 15
CONFIG = RunConfig(tracing_disabled=True)


def call_pair(n: int) -> list[Any]:
    """One tool turn as the runner stores it: a function call and its output."""
    call_id = f"call_{n:06d}"
    return [
        {
            "arguments": f'{{"order_id":"{n}","note":"lorem ipsum dolor sit amet"}}',
            "call_id": call_id,
            "name": "lookup_order",
            "type": "function_call",
            "id": f"fc_{n:06d}",
        },
        {
            "call_id": call_id,
            "output": f"order {n}: two charges of 12.50 EUR on 2026-11-02, one refunded",
            "type": "function_call_output",
        },
    ]


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: two charges of 12.50 EUR on 2026-11-02, one refunded"


def handoff_run(n: int) -> Agent[Any]:
    """Fresh agents for run ``n``: triage hands off to billing, which calls tools and answers."""
    billing: Agent[Any] = Agent(
        name="billing",
        model=ScriptedModel(
            [
                *(
                    [function_call("lookup_order", {"order_id": f"{n}-{k}"}, call_id=f"t{n}_{k}")]
                    for k in range(TOOL_CALLS)
                ),
                [assistant_message(f"Order {n}: one charge was refunded.", item_id=f"m{n}")],
            ]
        ),
        tools=[lookup_order],
    )
    return Agent(
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id=f"h{n}")]]),
        handoffs=[billing],
    )


class DurableSQLiteSession(SQLiteSession):
    """The SDK's ``SQLiteSession`` with ``synchronous=FULL`` on every connection it opens.

    Python's sqlite3 usually defaults to FULL already; stating it makes the
    comparison independent of how SQLite was built.
    """

    @staticmethod
    def _configure_connection(conn: sqlite3.Connection) -> None:
        SQLiteSession._configure_connection(conn)
        conn.execute("PRAGMA synchronous = FULL")


class Side:
    """One contestant: makes sessions on its own file."""

    def __init__(self, name: str, directory: str) -> None:
        self.name = name
        self.directory = directory
        self.journal: Journal | None = None
        self.counter = 0

    async def start(self) -> None:
        if self.name == "agentjournal":
            self.journal = await Journal.open(f"sqlite:///{os.path.join(self.directory, 'aj.db')}")

    async def stop(self) -> None:
        if self.journal is not None:
            await self.journal.close()

    def session(self, session_id: str) -> Session:
        if self.journal is not None:
            return self.journal.session(session_id)
        return DurableSQLiteSession(session_id, os.path.join(self.directory, "sdk.db"))

    def fresh(self, session_id: str) -> Session:
        """A new session object that shares no cache (``journal.session`` shares one per id)."""
        if self.journal is not None:
            return JournalSession(self.journal.store, session_id)
        return self.session(session_id)

    async def filled(self, session_id: str, items: int) -> Session:
        session = self.session(session_id)
        for start in range(0, items, 500):
            batch = [
                item for n in range(start, min(start + 500, items), 2) for item in call_pair(n)
            ]
            await session.add_items(batch)
        return session


class Floor:
    """The floor of a durable turn (see the module docs): one lean hop around a raw
    ``INSERT`` of two rows and ``COMMIT``, in WAL with ``synchronous=FULL``."""

    def __init__(self, directory: str, rows: list[tuple[bytes, bytes]]) -> None:
        self.rows = rows
        self.db = sqlite3.connect(
            os.path.join(directory, "floor.db"), isolation_level=None, check_same_thread=False
        )
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = FULL")
        self.db.execute(
            "CREATE TABLE events (position INTEGER PRIMARY KEY, data BLOB, metadata BLOB)"
        )
        self.jobs: queue.SimpleQueue[
            tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None
        ] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def _work(self) -> None:
        (a_data, a_meta), (b_data, b_meta) = self.rows
        while (job := self.jobs.get()) is not None:
            loop, future = job
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute(
                "INSERT INTO events (data, metadata) VALUES (?, ?), (?, ?)",
                (a_data, a_meta, b_data, b_meta),
            )
            self.db.execute("COMMIT")
            loop.call_soon_threadsafe(future.set_result, None)

    async def turn(self) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self.jobs.put((loop, future))
        await future

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join()
        self.db.close()


class StoreFloor:
    """Our store alone: a session's recorded writes, sent again to a fresh store. Use it as
    an ``async with`` block: leaving it checks that every write was sent and taken whole
    (unless an error is on its way up), and closes the store."""

    def __init__(self, directory: str, name: str) -> None:
        self.path = f"sqlite:///{os.path.join(directory, name)}"
        self.writes: dict[str, list[list[AppendRequest]]] = {}
        self.sent: dict[str, int] = {}
        self.journal: Journal | None = None
        self.items: dict[str, int] = {}  # session id -> items its turns wrote

    async def record(self, session_ids: list[str], rounds: int, per_round: int) -> None:
        """Record what ``rounds + 1`` rounds of ``per_round`` turns of each session write
        (on a scratch file), then replay the first round's (untimed) into the fresh store."""
        async with await Journal.open(self.path + ".scratch") as scratch:
            store = scratch.store
            append_many = store.append_many

            async def recording(requests: Any) -> Any:
                requests = list(requests)
                self.writes.setdefault(requests[0].stream, []).append(requests)
                return await append_many(requests)

            store.append_many = recording  # type: ignore[method-assign]
            sessions = [scratch.session(name) for name in session_ids]
            for n in range(rounds + 1):
                await asyncio.gather(*(turns(s, per_round, n * per_round) for s in sessions))
            self.items = dict.fromkeys(session_ids, 2 * (rounds + 1) * per_round)
        self.journal = await Journal.open(self.path)
        warm = {stream: len(writes) - rounds * per_round for stream, writes in self.writes.items()}
        await asyncio.gather(*(self.send(stream, count) for stream, count in warm.items()))

    async def send(self, stream: str, count: int) -> None:
        """Send ``stream``'s next ``count`` recorded writes, one after the other."""
        assert self.journal is not None
        store, start = self.journal.store, self.sent.get(stream, 0)
        self.sent[stream] = start + count
        for requests in self.writes[stream][start : start + count]:
            await store.append_many(requests)

    async def round(self, per_round: int) -> None:
        """Every recorded session's next ``per_round`` turns' writes, concurrently."""
        await asyncio.gather(*(self.send(stream, per_round) for stream in self.writes))

    async def __aenter__(self) -> StoreFloor:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> None:
        """Check that every write was sent and taken whole (each stream at the head its last
        write leaves, each session's read model holding every item its turns wrote), then
        close the store."""
        if self.journal is None:
            return
        try:
            if kind is not None:
                return  # the error on its way up is the one to see
            unsent = sum(len(w) - self.sent.get(stream, 0) for stream, w in self.writes.items())
            assert not unsent, f"{unsent} recorded writes were not sent"
            store = self.journal.store
            assert isinstance(store, SQLiteEventStore)
            for stream, writes in self.writes.items():
                last = next(r for r in writes[-1] if r.stream == stream)
                assert isinstance(last.expected, int)
                head = await store.head(stream)
                assert head == last.expected + len(last.events), f"{stream}: head {head}"
            for session_id, count in self.items.items():
                snapshot = await store.read_model(session_stream(session_id))
                assert snapshot is not None, f"{session_id}: no read model"
                held = len(await JournalSession(store, session_id).get_items())
                assert held == count, f"{session_id}: {held} items, not {count}"
        finally:
            await self.journal.close()


@contextlib.contextmanager
def planning(plan: Callable[..., Any]) -> Iterator[None]:
    """Every ``add_items`` write planned by ``plan`` instead of ``plan_items`` meanwhile."""
    items_module.plan_items = plan  # type: ignore[attr-defined]
    try:
        yield
    finally:
        items_module.plan_items = plan_items  # type: ignore[attr-defined]


class PlannedFloor:
    """Our turns with their plans made beforehand: every turn runs as it does (``get_items``,
    the write's reads, the store, the tree and the read model), except that ``plan_items``
    hands back the plan it made for the same turn on a scratch file, so what this row saves
    against (a) or (f) is the planning, and what it leaves is everything else. Use it as an
    ``async with`` block: leaving it checks that every plan was taken and every item held
    (unless an error is on its way up), and closes the store.

    ``with_least``: each turn also runs the least Python planning of its two events
    (``bench/_least_plan.py``) before its plan is handed back, checked identical to the
    plan's events in the first, untimed, round: a turn whose planning costs only that."""

    def __init__(self, directory: str, name: str, *, with_least: bool = False) -> None:
        self.with_least = with_least
        self.compared = 0  # turns whose least planning was checked against their plan
        self.checking = False
        self.path = f"sqlite:///{os.path.join(directory, name)}"
        # Per stream, in order: each plan, the nonce and time it was made with, and its items.
        self.plans: dict[str, collections.deque[tuple[Any, str, Any, list[Any]]]] = {}
        self.journal: Journal | None = None
        self.sessions: list[Session] = []
        self.done = 0  # turns each session has taken

    async def __aenter__(self) -> PlannedFloor:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if self.journal is None:
            return
        try:
            if kind is None:
                left = sum(len(plans) for plans in self.plans.values())
                assert not left, f"{left} plans made beforehand were not taken"
                for session in self.sessions:
                    store = self.journal.store
                    held = await JournalSession(store, session.session_id).get_items()
                    assert len(held) == 2 * self.done, f"{session.session_id}: {len(held)} items"
        finally:
            await self.journal.close()

    async def record(self, session_ids: list[str], rounds: int, per_round: int) -> None:
        """Plan ``rounds + 1`` rounds of ``per_round`` turns of each session on a scratch
        file, keeping each stream's plans in order; take the first round (untimed) here."""

        def recording(tree: Any, facts: Any, run: Any, items: Any, **kwargs: Any) -> Any:
            plan = plan_items(tree, facts, run, items, **kwargs)
            made = (plan, kwargs["nonce"], kwargs["now"], list(items))
            self.plans.setdefault(facts.stream, collections.deque()).append(made)
            return plan

        with planning(recording):
            async with await Journal.open(self.path + ".scratch") as scratch:
                sessions = [scratch.session(name) for name in session_ids]
                for n in range(rounds + 1):
                    await asyncio.gather(*(turns(s, per_round, n * per_round) for s in sessions))
        self.journal = await Journal.open(self.path)
        self.sessions = [self.journal.session(name) for name in session_ids]
        self.checking = True
        await self.round(per_round)
        self.checking = False
        if self.with_least:
            # Every turn but each session's first, which starts its stream too.
            expected = len(session_ids) * (per_round - 1)
            assert expected > 0, "the least planning is compared in rounds of two turns or more"
            assert self.compared == expected, f"{self.compared} of {expected} turns compared"

    def _planned(self, tree: Any, facts: Any, run: Any, items: Any, **kwargs: Any) -> Any:
        stream = facts.stream
        plan, nonce, now, recorded = self.plans[stream].popleft()
        # The same turn on the same history: its items, its stream, writes from the heads.
        assert items == recorded, "a turn handed a plan made for other items"
        assert plan.requests[0].stream == stream, "a turn handed a plan for another stream"
        for request in plan.requests:
            head = tree.heads.get(request.stream, -1)
            expected = head if head >= 0 else StreamState.NO_STREAM
            assert request.expected == expected, f"a plan made at {request.expected}, not {head}"
        if self.with_least:
            first, trace = kwargs["first_index"], kwargs["trace"]
            made = least_of(tree, stream, items, first, nonce, now, trace)
            events = plan.requests[0].events
            if self.checking and len(events) == 2:
                assert same_events(events, made), "the least planning's events differ"
                self.compared += 1
        return plan

    async def round(self, per_round: int) -> None:
        """Every session's next ``per_round`` turns, concurrently, with plans made before."""
        with planning(self._planned):
            start, self.done = self.done, self.done + per_round
            await asyncio.gather(*(turns(s, per_round, start) for s in self.sessions))


async def turns(session: Session, count: int, start: int) -> None:
    for n in range(start, start + count):
        await session.get_items(limit=20)
        await session.add_items(call_pair(n))


async def run(sizes: Sizes, reads_only: bool = False, writes_only: bool = False) -> list[list[str]]:
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory() as directory:
        ours, sdk = Side("agentjournal", directory), Side("SQLiteSession", directory)
        await ours.start()
        try:
            if writes_only:
                rows.extend(await turn_cases(ours, sdk, sizes, windows=False))
                rows.extend(await concurrent_turns(ours, sdk, sizes))
            else:
                rows.extend(await run_cases(ours, sdk, sizes, reads_only))
        finally:
            await ours.stop()
    return rows


def row(case: str, timing: Timing, per: int, unit: str) -> list[str]:
    """A table row: wall-clock times per call, their ratio, and the ratio of CPU times."""
    return [
        case,
        f"{1000 * timing.baseline / per:.3f}",
        f"{1000 * timing.ours / per:.3f}",
        f"{timing.ours / timing.baseline:.2f}",
        f"{timing.ours_cpu / timing.baseline_cpu:.2f}" if timing.baseline_cpu else "-",
        unit,
    ]


async def run_cases(ours: Side, sdk: Side, sizes: Sizes, reads_only: bool) -> list[list[str]]:
    rows: list[list[str]] = []
    if not reads_only:
        rows.extend(await turn_cases(ours, sdk, sizes))
    else:
        for side in (ours, sdk):
            await side.filled(f"size-{sizes.large}", sizes.large)

    # (c) the whole history from a fresh session object.
    async def full(side: Side) -> None:
        await side.fresh(f"size-{sizes.large}").get_items()

    timing = await measure_cpu(lambda: full(sdk), lambda: full(ours))
    rows.append(row(f"(c) full get_items of ~{sizes.large:,}, cold", timing, 1, "ms/call"))
    rows.extend(await handoff_replay(ours, sdk, sizes))
    rows.append(await cache_held(ours, sizes))
    if not reads_only:
        rows.extend(await concurrent_turns(ours, sdk, sizes))
    return rows


async def concurrent_turns(ours: Side, sdk: Side, sizes: Sizes) -> list[list[str]]:
    """(f) ``CONCURRENT_SESSIONS`` sessions, each doing turns in its own task: turns/s."""
    per_session = CONCURRENT_TURNS[sizes]
    sessions = {
        side.name: [side.session(f"many-{n}") for n in range(CONCURRENT_SESSIONS)]
        for side in (ours, sdk)
    }
    offsets = {"agentjournal": 0, "SQLiteSession": 0}

    def many_round(side: Side) -> Turn:
        async def go() -> None:
            start = offsets[side.name]
            offsets[side.name] += per_session
            await asyncio.gather(
                *(turns(session, per_session, start) for session in sessions[side.name])
            )

        return go

    timing = await measure_cpu(many_round(sdk), many_round(ours))
    total = CONCURRENT_SESSIONS * per_session
    async with StoreFloor(ours.directory, "store-floor-many.db") as floor:
        await floor.record([f"floor-{n}" for n in range(CONCURRENT_SESSIONS)], ROUNDS, per_session)
        floor_timing = await measure_cpu(many_round(sdk), partial(floor.round, per_session))
    planned_timings = []
    for with_least in (False, True):
        name = f"planned-floor-many-{with_least}.db"
        async with PlannedFloor(ours.directory, name, with_least=with_least) as planned:
            await planned.record(
                [f"planned-{n}" for n in range(CONCURRENT_SESSIONS)], ROUNDS, per_session
            )
            planned_timings.append(
                await measure_cpu(many_round(sdk), partial(planned.round, per_session))
            )
    # Both sides hold exactly what they were given: no turn lost or doubled.
    for side in (ours, sdk):
        for session in sessions[side.name]:
            held = await session.get_items()
            assert len(held) == 2 * offsets[side.name], f"{side.name}: {len(held)} items"
    return [
        [
            case,
            f"{total / t.baseline:,.0f}",
            f"{total / t.ours:,.0f}",
            f"{t.baseline / t.ours:.2f}",
            f"{t.ours_cpu / t.baseline_cpu:.2f}" if t.baseline_cpu else "-",
            "turns/s (ratio: higher is better)",
        ]
        for case, t in (
            (f"(f) {CONCURRENT_SESSIONS} sessions x {per_session} turns, concurrent", timing),
            ("(f) floor: our store alone, the same turns' writes", floor_timing),
            ("(f) floor: our turns, their plans made beforehand", planned_timings[0]),
            ("(f) floor: our turns, only their least Python planning", planned_timings[1]),
        )
    ]


async def cache_held(ours: Side, sizes: Sizes) -> list[str]:
    """(e) The memory a journal's shared cache keeps for one session after a full read.

    Measured with ``tracemalloc`` on a new ``Journal`` over the same store: what is
    still allocated after ``journal.session(id).get_items()`` returned and its
    result was dropped (the SDK's session keeps nothing between calls).
    """
    assert ours.journal is not None
    journal = Journal(ours.journal.store, ours.journal.uri)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        items = await journal.session(f"size-{sizes.large}").get_items()
        count = len(items)
        del items
        for _ in range(3):  # let the loop drop its last references to the finished reads
            await asyncio.sleep(0)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    return [
        f"(e) shared cache held per {count:,}-item session",
        "-",
        f"{held / 1024:,.0f}",
        "-",
        "-",
        "KiB",
    ]


async def turn_cases(
    ours: Side, sdk: Side, sizes: Sizes, *, windows: bool = True
) -> list[list[str]]:
    """(a) and (b): turns, and (``windows``) windowed reads."""
    rows: list[list[str]] = []
    rounds = 5
    per_round = sizes.turns // rounds

    # (a) runner turns on a growing session.
    sessions = {side.name: side.session("turns") for side in (ours, sdk)}
    offsets = {"agentjournal": 0, "SQLiteSession": 0}

    def turn_round(side: Side) -> Turn:
        async def go() -> None:
            await turns(sessions[side.name], per_round, offsets[side.name])
            offsets[side.name] += per_round

        return go

    timing = await measure_cpu(turn_round(sdk), turn_round(ours), rounds=rounds)
    rows.append(
        row(
            f"(a) turn, durable: get_items(20)+add_items(2), x{sizes.turns}",
            timing,
            per_round,
            "ms/turn",
        )
    )
    rows.append(await turn_floor(ours, sdk, sessions["SQLiteSession"], offsets, per_round))
    rows.append(await store_floor(ours, sessions["SQLiteSession"], offsets, per_round, rounds))
    for with_least in (False, True):
        rows.append(
            await planned_floor(
                ours, sessions["SQLiteSession"], offsets, per_round, rounds, with_least=with_least
            )
        )
    if not windows:
        return rows

    # (b) per-turn cost on a small and a large session.
    probes: dict[tuple[str, int], Session] = {}
    for side in (ours, sdk):
        for size in (sizes.small, sizes.large):
            probes[side.name, size] = await side.filled(f"size-{size}", size)
    for size in (sizes.small, sizes.large):
        counters = {"agentjournal": size, "SQLiteSession": size}

        def probe_round(side: Side, size: int = size, counters: dict[str, int] = counters) -> Turn:
            async def go() -> None:
                await turns(probes[side.name, size], sizes.probe_turns, counters[side.name])
                counters[side.name] += sizes.probe_turns

            return go

        timing = await measure_cpu(probe_round(sdk), probe_round(ours))
        rows.append(row(f"(b) turn at ~{size:,} items", timing, sizes.probe_turns, "ms/turn"))

    for size in (sizes.small, sizes.large):

        def cold_round(side: Side, size: int = size) -> Turn:
            async def go() -> None:
                for _ in range(sizes.probe_turns):
                    await side.fresh(f"size-{size}").get_items(limit=20)

            return go

        timing = await measure_cpu(cold_round(sdk), cold_round(ours))
        rows.append(
            row(f"(b) get_items(20), cold, at ~{size:,}", timing, sizes.probe_turns, "ms/call")
        )

    return rows


async def turn_floor(
    ours: Side, sdk: Side, theirs: Session, offsets: dict[str, int], per_round: int
) -> list[str]:
    """(a) floor: the SDK's turns again, beside a lean hop around a raw two-row commit."""
    assert ours.journal is not None
    # The two events a turn of ours stored last: the floor writes their very bytes.
    stored = await ours.journal.store.read(session_stream("turns"), backwards=True, limit=2)
    floor = Floor(ours.directory, [(e.data, encode_metadata(e.metadata)) for e in reversed(stored)])
    try:

        async def sdk_round() -> None:
            await turns(theirs, per_round, offsets["SQLiteSession"])
            offsets["SQLiteSession"] += per_round

        async def floor_round() -> None:
            for _ in range(per_round):
                await floor.turn()

        timing = await measure_cpu(sdk_round, floor_round, rounds=5)
    finally:
        floor.close()
    return row(
        "(a) floor: one hop + raw INSERT+COMMIT of the two rows", timing, per_round, "ms/turn"
    )


async def store_floor(
    ours: Side, theirs: Session, offsets: dict[str, int], per_round: int, rounds: int
) -> list[str]:
    """(a) floor, our store alone: the SDK's turns again, beside our store taking the
    writes of as many turns of ours, recorded beforehand."""
    async with StoreFloor(ours.directory, "store-floor.db") as floor:
        await floor.record(["floor"], rounds, per_round)

        async def sdk_round() -> None:
            await turns(theirs, per_round, offsets["SQLiteSession"])
            offsets["SQLiteSession"] += per_round

        timing = await measure_cpu(sdk_round, partial(floor.round, per_round), rounds=rounds)
    return row("(a) floor: our store alone, the turn's writes", timing, per_round, "ms/turn")


async def planned_floor(
    ours: Side,
    theirs: Session,
    offsets: dict[str, int],
    per_round: int,
    rounds: int,
    *,
    with_least: bool = False,
) -> list[str]:
    """(a) without the planning (``with_least``: but the least Python planning): the SDK's
    turns again, beside our turns with their plans made beforehand."""
    name = "least-floor.db" if with_least else "planned-floor.db"
    async with PlannedFloor(ours.directory, name, with_least=with_least) as floor:
        await floor.record(["floor"], rounds, per_round)

        async def sdk_round() -> None:
            await turns(theirs, per_round, offsets["SQLiteSession"])
            offsets["SQLiteSession"] += per_round

        timing = await measure_cpu(sdk_round, partial(floor.round, per_round), rounds=rounds)
    case = "only its least Python planning" if with_least else "its plans made beforehand"
    return row(f"(a) floor: our turn, {case}", timing, per_round, "ms/turn")


async def handoff_replay(ours: Side, sdk: Side, sizes: Sizes) -> list[list[str]]:
    """(d) Full replay of a session of ``sizes.handoffs`` subagents, cold and warm."""
    journal = ours.journal
    assert journal is not None
    session_id = "handoffs"
    mine = journal.session(session_id, agent_name="triage")
    theirs = DurableSQLiteSession(session_id, os.path.join(sdk.directory, "sdk.db"))
    try:
        for n in range(sizes.handoffs):
            text = f"Why was order {n} charged twice?"
            await Runner.run(handoff_run(n), text, session=mine, hooks=mine, run_config=CONFIG)
            await Runner.run(handoff_run(n), text, session=theirs, run_config=CONFIG)

        # The shape is what is being measured: every handoff is a subagent with its stream.
        parent = await journal.store.read(mine.stream)
        started = sum(1 for event in parent if event.type == "SubagentStarted")
        assert started == sizes.handoffs, f"{started} subagents for {sizes.handoffs} handoffs"
        # A benchmark of wrong output is worthless: all three replays agree exactly.
        expected = json.dumps(await theirs.get_items())
        items = 1 + 1 + 1 + 2 * TOOL_CALLS + 1  # user, handoff call, ack, tools, reply
        assert len(json.loads(expected)) == sizes.handoffs * items
        cold = json.dumps(await JournalSession(journal.store, session_id).get_items())
        warm = json.dumps(await journal.session(session_id).get_items())
        assert cold == expected, "cold replay differs from SQLiteSession"
        assert warm == expected, "warm replay differs from SQLiteSession"

        async def cold_round() -> None:
            await JournalSession(journal.store, session_id).get_items()

        async def warm_round() -> None:
            await journal.session(session_id).get_items()

        label = f"(d) replay {sizes.handoffs} handoffs x {items - 2} items"
        rows = []
        for kind, ours_round in (("cold", cold_round), ("warm", warm_round)):
            timing = await measure_cpu(theirs.get_items, ours_round, rounds=REPLAY_ROUNDS)
            rows.append(row(f"{label}, {kind}", timing, 1, "ms/call"))
        return rows
    finally:
        theirs.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--reads", action="store_true", help="only the read cases (c), (d), (e)")
    parser.add_argument("--writes", action="store_true", help="only the write cases (a), (f)")
    args = parser.parse_args(argv)
    rows = asyncio.run(run(QUICK if args.quick else FULL, args.reads, args.writes))
    print(table(["case", "SQLiteSession", "agentjournal", "ratio", "cpu ratio", "unit"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("session", main, sys.argv[1:]))
