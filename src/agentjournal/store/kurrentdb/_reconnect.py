"""The backoff of a subscription that lost its server and reconnects."""

from __future__ import annotations

import random
import time
from collections.abc import (
    Callable,
)
from typing import Final

_BACKOFF_FIRST: Final = 0.1
_BACKOFF_CAP: Final = 5.0
_HEALTHY_AFTER: Final = 2 * _BACKOFF_CAP  # seconds a subscription must hold to count as working


class _Reconnect:
    """When a subscription tries again: capped exponential backoff with jitter.

    Only progress starts over (the exponent back to zero, the give-up clock
    stopped): an event delivered, or a connection that stayed up for
    ``_HEALTHY_AFTER`` seconds. A server that confirms each subscription and
    then fails it at once is still failing, and is given up on after
    ``give_up_after`` seconds like one that refuses outright.
    """

    def __init__(
        self, give_up_after: float | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._give_up_after = give_up_after
        self._clock = clock
        self.attempt = 0
        self._failing_since: float | None = None
        self._connected_at: float | None = None

    def connected(self) -> None:
        """A subscription was confirmed (not yet progress)."""
        self._connected_at = self._clock()

    def delivered(self) -> None:
        """An event arrived: progress."""
        self.attempt = 0
        self._failing_since = None

    def next_delay(self) -> float | None:
        """Seconds to wait before the next attempt, or None when it is time to give up."""
        now = self._clock()
        connected_at, self._connected_at = self._connected_at, None
        if connected_at is not None and now - connected_at >= _HEALTHY_AFTER:
            self.attempt = 0  # a connection that held that long was working
            self._failing_since = None
        if self._failing_since is None:
            self._failing_since = now
        elapsed = now - self._failing_since
        if self._give_up_after is not None and elapsed >= self._give_up_after:
            return None
        self.attempt += 1
        ceiling = min(_BACKOFF_CAP, _BACKOFF_FIRST * 2 ** (self.attempt - 1))
        delay = random.uniform(ceiling / 2, ceiling)  # jitter: no lockstep reconnects
        if self._give_up_after is not None:
            delay = min(delay, max(self._give_up_after - elapsed, 0.0))
        return delay
