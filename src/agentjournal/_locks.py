"""An async mutex that works across event loops and threads.

``asyncio.Lock`` belongs to one event loop. A session object, like the SDK's
own ``SQLiteSession``, may be used from several threads that each run their
own loop (``Runner.run_sync`` in a thread pool); its cache must still change
under one lock. :class:`CrossLoopLock` keeps its state under a
``threading.Lock`` and wakes each waiter on the waiter's own loop.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from types import TracebackType


class CrossLoopLock:
    """A FIFO async mutex usable from any event loop in any thread."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locked = False
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = (
            collections.deque()
        )

    def locked(self) -> bool:
        """Return True while some task holds the lock."""
        return self._locked

    async def acquire(self) -> None:
        """Wait until the lock is free, then take it."""
        with self._mutex:
            if not self._locked:
                self._locked = True
                return
            loop = asyncio.get_running_loop()
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            with self._mutex:
                if (loop, waiter) in self._waiters:
                    self._waiters.remove((loop, waiter))
                    raise
            if waiter.done() and not waiter.cancelled():
                self.release()  # ownership arrived just as we were cancelled: pass it on
            raise  # otherwise _hand_over sees the cancelled waiter and passes it on

    def release(self) -> None:
        """Release the lock, handing it to the next waiter if there is one."""
        with self._mutex:
            if not self._locked:
                raise RuntimeError("CrossLoopLock released while not locked")
            if not self._waiters:
                self._locked = False
                return
            loop, waiter = self._waiters.popleft()
        try:
            loop.call_soon_threadsafe(self._hand_over, waiter)
        except RuntimeError:  # the waiter's loop is closed: skip it
            self.release()

    def _hand_over(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # cancelled while the hand-over was on its way
            self.release()
        else:
            waiter.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()
