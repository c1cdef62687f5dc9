"""What makes each write unique and dated: its nonce, the clock and random event ids.

Every source of uniqueness or time a write uses is here, read at call time from this
module's globals, so a test can pin all of them in one place (``tests/test_write_bytes.py``).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from datetime import UTC, datetime
from typing import Final


class _Nonces:
    """The nonce of each write's event ids: unique to this process and this write.

    96 random bits drawn once per process (again in a forked child) and a counter.
    Not ``uuid4()`` per write: that reads ``os.urandom``, a system call that gives up
    the GIL, and with many sessions writing at once getting it back cost more than
    planning the write. Not the ``random`` module: a program that seeds it would
    repeat nonces, and two writers with the same ids at one revision would take each
    other's write for their own retry.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new prefix (a forked child must not share its parent's)."""
        self._prefix = os.urandom(12).hex()
        self._count = itertools.count()

    def next(self) -> str:
        """A nonce no other write of any process uses (a counter step is atomic)."""
        return f"{self._prefix}{next(self._count):08x}"


_NONCES: Final = _Nonces()
os.register_at_fork(after_in_child=_NONCES.reset)


def next_nonce() -> str:
    """The nonce of a new write (its event ids derive from it: a retry keeps it)."""
    return _NONCES.next()


def now() -> datetime:
    """Now, in UTC (what a write records as its time)."""
    return datetime.now(UTC)


def random_id() -> uuid.UUID:
    """A random event id (an event whose retry need not be recognised by its id)."""
    return uuid.uuid4()


def unix_seconds() -> int:
    """Now, in whole seconds since the epoch (a generated branch name's stamp)."""
    return int(time.time())
