"""Between callers' event loops and the SQLite store's thread: a write waiting for the
thread, its outcome handed back, SQLite's errors translated on the way, subscribers woken."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from agentjournal.errors import StoreUnavailable
from agentjournal.store.contract import (
    AppendRequest,
    AppendResult,
)

_T = TypeVar("_T")


class _Pending:
    """One write waiting for the store's thread, and where to hand its outcome."""

    __slots__ = ("future", "loop", "requests")

    def __init__(
        self,
        requests: list[AppendRequest],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[list[AppendResult]],
    ) -> None:
        self.requests = requests
        self.loop = loop
        self.future = future

    def settle(self, outcome: list[AppendResult] | BaseException) -> None:
        """Hand the outcome to the caller's loop (from any thread)."""
        with contextlib.suppress(RuntimeError):  # that loop has closed: nobody waits
            self.loop.call_soon_threadsafe(_settle, self.future, outcome)


def _settle_all(settled: list[tuple[asyncio.Future[Any], Any]]) -> None:
    """Settle a group's writes of one loop, in order; one that fails to settle is reported
    as its own callback's error would be, and the others are settled all the same."""
    for future, outcome in settled:
        try:
            _settle(future, outcome)
        except Exception as error:
            future.get_loop().call_exception_handler(
                {"message": "a write's outcome could not be handed over", "exception": error}
            )


def _settle(
    future: asyncio.Future[list[AppendResult]], outcome: list[AppendResult] | BaseException
) -> None:
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


class Listeners:
    """Subscribers waiting for appends, each woken on its own event loop (from any thread)."""

    __slots__ = ("_lock", "_waiting")

    def __init__(self) -> None:
        self._waiting: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._lock = threading.Lock()

    def add(self, listener: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        """Wake ``listener``'s event on its loop at each :meth:`notify`."""
        with self._lock:
            self._waiting.add(listener)

    def discard(self, listener: tuple[asyncio.AbstractEventLoop, asyncio.Event]) -> None:
        """Wake ``listener`` no more."""
        with self._lock:
            self._waiting.discard(listener)

    def notify(self) -> None:
        """Wake every listener (something was appended, or the store closed)."""
        with self._lock:
            listeners = list(self._waiting)
        for loop, event in listeners:
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(event.set)


def _translated(path: str, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)`` (on the store's thread), an SQLite error raised as
    :class:`StoreUnavailable`."""
    try:
        return fn(*args)
    except sqlite3.Error as error:
        raise StoreUnavailable(f"SQLite store {path} failed: {error}") from error
