"""The process's I/O event loop, where calls from loops other than a client's home loop run."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
)
from typing import Any, Final, TypeVar

_T = TypeVar("_T")
_BACKGROUND: Final[set[asyncio.Task[None]]] = set()  # closes and stops run on other loops


_io_lock = threading.Lock()
_io: tuple[int, asyncio.AbstractEventLoop] | None = None  # (pid, loop)


def _io_loop() -> asyncio.AbstractEventLoop:
    """The process's I/O loop: serves store calls made on loops other than a store's home.

    A daemon thread runs it for as long as the process lives; it is never
    closed, so a channel on it never sees its loop go away (gRPC would then
    deliver the channel's last events to a closed loop: an error logged on
    whichever loop handles them). Made on first use; a forked child makes its own.
    """
    global _io
    with _io_lock:
        if _io is None or _io[0] != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="agentjournal-kurrentdb-io", daemon=True
            )
            thread.start()
            _io = (os.getpid(), loop)
        return _io[1]


async def _run_there(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, _T]) -> _T:
    """Await ``coroutine`` run on ``loop`` (the I/O loop); cancelling the caller cancels it."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, loop))


async def _next(iterator: AsyncIterator[_T]) -> _T | None:
    """The iterator's next item, None at its end (a coroutine, to run on another loop)."""
    try:
        return await anext(iterator)
    except StopAsyncIteration:
        return None


def _end_on(loop: asyncio.AbstractEventLoop, generator: AsyncGenerator[Any, None]) -> None:
    """Close an async generator on the loop it runs on, without waiting."""
    with contextlib.suppress(RuntimeError):  # that loop has closed: nothing to end
        _run_on(loop, generator.aclose)


async def _quietly(action: Callable[[], Awaitable[object]]) -> None:
    # Closing and stopping: a failure leaves nothing for anyone to do.
    with contextlib.suppress(Exception):
        await action()


def _run_on(
    loop: asyncio.AbstractEventLoop, action: Callable[[], Awaitable[object]]
) -> concurrent.futures.Future[None]:
    """Run ``action()`` quietly on ``loop`` (another thread's); the future ends when it has.

    The coroutine is made only once the loop runs the callback, so a loop that
    never does leaves no coroutine unawaited; cancel the future to call it off.

    Raises:
        RuntimeError: ``loop`` is closed.
    """
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    def start() -> None:
        if done.set_running_or_notify_cancel():
            task = loop.create_task(_quietly(action))
            _BACKGROUND.add(task)  # the loop holds tasks weakly

            def finished(task: asyncio.Task[None]) -> None:
                _BACKGROUND.discard(task)
                done.set_result(None)

            task.add_done_callback(finished)

    loop.call_soon_threadsafe(start)
    return done


def _consume_outcome(task: asyncio.Future[Any]) -> None:
    # Mark an abandoned write's exception as retrieved: nobody is left to see it.
    if not task.cancelled():
        task.exception()
