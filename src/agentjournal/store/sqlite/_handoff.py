"""A write waiting for the SQLite store's thread, and handing its outcome to the caller's loop."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from agentjournal.store.contract import (
    AppendRequest,
    AppendResult,
)


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
