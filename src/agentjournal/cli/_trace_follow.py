"""``trace export --follow``: the follower (:class:`_Follower`) folds the store's
subscription, sends the spans that end, and saves its position
(:mod:`agentjournal.read.projections`) only after the destination took every span before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Final

from agentjournal.cli._trace_all import _skipped
from agentjournal.cli._trace_sinks import BATCH
from agentjournal.errors import ConcurrencyError, InvalidInput, JournalError

if TYPE_CHECKING:
    from agentjournal.cli._trace_sinks import _Sink
    from agentjournal.read.traces import ProjectedSpan, Projector
    from agentjournal.store.contract import EventStore, RecordedEvent

SAVE_EVERY: Final = 1000
"""A follower saves its position at least every this many events it folded."""
TICK_SECONDS: Final = 0.5
"""A follower that got nothing for this long is caught up: it checks for quiet runs."""


async def _cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it is done, cancelling again while it goes on.

    One cancellation can be lost: Python 3.11's ``asyncio.wait_for`` returns its inner
    result when that completes in the same step as the cancellation. The SQLite
    subscription waited with it for a wake-up that the follower's own save had just sent,
    read on, and a single ``cancel`` and ``await`` hung the follower after SIGTERM (seen
    under load; the store now waits with ``asyncio.timeout``,
    ``tests/test_subscribe_cancel.py``). A subscription of another store, or code of a
    library's, can still do so: cancelling until done stops it whatever it awaits."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=TICK_SECONDS)
    if not task.cancelled():
        task.exception()  # retrieved: a failure here is not the command's result


class _Follower:
    """``--follow``: fold the subscription, send what ends, save the position after the
    destination took every span before it."""

    def __init__(
        self,
        store: EventStore,
        sink: _Sink,
        session: str | None,
        name: str,
        idle: float,
        branch: str | None = None,
    ) -> None:
        self._store, self._sink, self._session, self._name = store, sink, session, name
        self._branch = branch
        self._quiet = timedelta(seconds=idle)
        self._stop = asyncio.Event()
        self._warned: set[str] = set()

    async def run(self) -> int:
        from agentjournal.read import projections
        from agentjournal.read.traces import Projector

        saved = await projections.load(self._store, self._name)
        if saved is None:
            projector = Projector(self._session, line=self._branch)
        else:
            try:
                projector = Projector.load(saved.state)
            except (ValueError, KeyError, TypeError):
                raise InvalidInput(
                    f"AgentProjection-{self._name} is not a trace follower's: choose another --name"
                ) from None
            if projector.session_id != self._session:
                raise InvalidInput(
                    f"AgentProjection-{self._name} follows "
                    f"{projector.session_id or 'every session'}: choose another --name"
                )
            if projector.line != self._branch:
                followed = "every line" if projector.line is None else f"line {projector.line!r}"
                raise InvalidInput(
                    f"AgentProjection-{self._name} follows {followed} of session "
                    f"{self._session}: choose another --name"
                )
        where = "every session" if self._session is None else f"session {self._session}"
        if self._branch is not None:
            where = f"line {self._branch!r} of {where}"
        start = "the start" if saved is None or saved.position is None else saved.position
        print(
            f"following {where} into {self._sink.where} as AgentProjection-{self._name}, "
            f"from {start}; Ctrl-C stops",
            file=sys.stderr,
            flush=True,
        )
        loop = asyncio.get_running_loop()
        for number in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(number, self._stop.set)
        try:
            await self._loop(projector, saved)
        finally:
            for number in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(number)
        return 0

    async def _loop(self, projector: Projector, saved: Any) -> None:
        from agentjournal.read import projections
        from agentjournal.streams import projection_stream

        own = projection_stream(self._name)
        position = None if saved is None else saved.position
        queue: asyncio.Queue[RecordedEvent] = asyncio.Queue(maxsize=4 * BATCH)

        async def pump() -> None:
            async for event in self._store.subscribe(after_position=position):
                await queue.put(event)

        pumping = asyncio.create_task(pump())
        stopping = asyncio.create_task(self._stop.wait())
        spans: list[ProjectedSpan] = []
        folded = 0  # events folded since the last save that changed the state
        try:
            while not self._stop.is_set():
                getting = asyncio.create_task(queue.get())
                done, _ = await asyncio.wait(
                    {getting, pumping, stopping},
                    timeout=TICK_SECONDS,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if pumping in done:
                    getting.cancel()
                    pumping.result()  # the subscription failed: its error ends the command
                    return
                if getting not in done:
                    getting.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await getting
                    if self._stop.is_set():
                        break
                    # Caught up and nothing came: runs that went quiet are over.
                    spans.extend(projector.idle(datetime.now(UTC), self._quiet))
                    if spans or folded:
                        saved = await self._save(projector, spans, position, saved, projections)
                        spans, folded = [], 0
                    continue
                batch = [getting.result()]
                while len(batch) < BATCH and not queue.empty():
                    batch.append(queue.get_nowait())
                for event in batch:
                    position = event.position
                    if event.stream == own:
                        continue
                    if event.revision and projector.learns(event.stream):
                        await self._learn(projector, event.stream)
                    spans.extend(self._feed(projector, event))
                    if projector.knows(event.stream):
                        folded += 1
                if spans or folded >= SAVE_EVERY:
                    saved = await self._save(projector, spans, position, saved, projections)
                    spans, folded = [], 0
            if spans or folded:
                saved = await self._save(projector, spans, position, saved, projections)
        finally:
            for task in (pumping, stopping):
                await _cancelled(task)

    async def _learn(self, projector: Projector, stream: str) -> None:
        """A state saved before lines meets a branch forked before that save: feed the
        branch's ``BranchStarted`` (revision 0, the twin of its ``BranchForked``) first, so
        its runs name the branch and its fork as if the fork had been followed."""
        first = await self._store.read(stream, limit=1)
        if first and first[0].revision == 0:
            self._feed(projector, first[0])  # a BranchStarted ends no span

    def _feed(self, projector: Projector, event: RecordedEvent) -> list[ProjectedSpan]:
        from agentjournal.read.traces.stored import StoredEvent
        from agentjournal.records import DamagedEvent

        try:
            return projector.feed(StoredEvent.of(event))
        except DamagedEvent as bad:
            _skipped(bad.stream, str(bad), self._warned)
            return []

    async def _save(
        self,
        projector: Projector,
        spans: list[ProjectedSpan],
        position: int | None,
        saved: Any,
        projections: Any,
    ) -> Any:
        """Send, and only once the destination took them, save the position after them."""
        if spans:
            await asyncio.to_thread(self._sink.send, spans)
        try:
            return await projections.save(
                self._store, self._name, position=position, state=projector.dump(), after=saved
            )
        except ConcurrencyError:
            raise JournalError(
                f"another follower saved AgentProjection-{self._name} meanwhile: run one "
                "follower per name (its spans up to here were sent and may be sent again)"
            ) from None
