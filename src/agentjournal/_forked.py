"""Work on a second core: a child forked to run a function and send back its result (the
verifier's integrity stage, the trace export of every tree).

Python runs one thread of Python code at a time, so the second core is a second process:
a child forked (copy-on-write: nothing is sent to it) runs the work and sends back its
pickled result through a pipe. Only where forking is safe (:func:`forking_safe`: on
Linux, where fork without exec is what ``multiprocessing`` avoids on macOS, with no other
thread running) and pays (:func:`core_to_spare`); whatever goes wrong in the child (it
dies, is killed, sends nothing, hangs) reads as no result, and the caller does the work itself.
Nothing here imports ``multiprocessing`` (its import is heavier than the callers').
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final


def core_to_spare() -> bool:
    """Whether a second process would run beside this one: this process may run on two
    cores, more than half a core of them is idle now (:func:`idle_cores`), and forking is
    safe. On a busy machine two processes share one core and only add the cost of forking."""
    return idle_cores() > 0.5 and forking_safe()


def forking_safe() -> bool:
    """Whether this process may fork a child that runs Python: on Linux, with no other
    thread running, Python's or any library's (a lock another thread holds would stay held
    in the child, and a library's fork handler may wait for its threads: gRPC's, while they
    shut down after a channel closed, for ever)."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and threading.active_count() == 1
        and threads() == 1
    )


def threads() -> int:
    """How many threads this process runs, Python's and any library's (the kernel's count;
    1 where it cannot be read, as Python's own count then decides)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def wait_alone(within: float) -> bool:
    """Wait up to ``within`` seconds for every thread but this one to end (the ones a
    library left shutting down, such as gRPC's after a channel closed); whether they did."""
    deadline = time.monotonic() + within
    while threading.active_count() > 1 or threads() > 1:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.0005)
    return True


def idle_cores() -> float:
    """How many of the cores this process may run on are idle now: those cores, less the
    threads ready to run at this moment, this one included (:func:`runnable`)."""
    cores = len(os.sched_getaffinity(0))
    return cores - runnable() if cores >= 2 else 0.0


def runnable() -> float:
    """The threads ready to run now, this one included: the least of three looks a
    millisecond apart at the kernel's count in ``/proc/loadavg`` (one look may catch a
    thread that runs for an instant, such as the kernel writing back a file just copied);
    where that cannot be read, the last minute's load average. That average trails the
    load: a command run just after another still counts it for a minute (which kept a
    cold listing or export from forking right after a busy one)."""
    try:
        counts = []
        for look in range(3):
            if look:
                time.sleep(0.001)
            with open("/proc/loadavg", "rb") as handle:
                counts.append(float(handle.read().split()[3].split(b"/")[0]))
        return min(counts)
    except (OSError, ValueError, IndexError):
        return os.getloadavg()[0]


class Child:
    """A forked child's pid and the pipe its result comes through: its pickle, after its
    length in 8 bytes (anything shorter is a child that failed)."""

    def __init__(self, pid: int, pipe: int) -> None:
        self.pid, self.pipe = pid, pipe
        self.forked_at = time.monotonic()
        self.finished = False  # the pipe reached its end: the child is done, or dead

    def result(self) -> Any:
        """What the child sent, or None if it failed (died, sent nothing whole, or is still
        at it :func:`patience` after being asked: a child stopped or hung costs time, never
        the answer, as :meth:`close` then kills it and the caller does its part). Does not
        wait for the child to end: it closes the pipe before its exit, whose unmapping of a
        large process's memory takes milliseconds."""
        deadline = time.monotonic() + patience(time.monotonic() - self.forked_at)
        chunks = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.pipe], [], [], left)[0]:
                if time.monotonic() >= deadline:
                    return None
                continue
            chunk = os.read(self.pipe, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        self.finished = True
        payload = b"".join(chunks)
        size = int.from_bytes(payload[:_LENGTH], "big")
        if len(payload) < _LENGTH or size != len(payload) - _LENGTH:
            return None
        try:
            return pickle.loads(memoryview(payload)[_LENGTH:])  # our own child's bytes
        except Exception:  # cannot happen to a whole payload: then check its parts here
            return None

    def close(self) -> None:
        """Close the pipe; stop the child if its result was not read to the end (an error
        here), and leave it to be reaped once it has ended (:func:`reap`)."""
        os.close(self.pipe)
        if not self.finished:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        _ended.append(self.pid)
        reap()


_LENGTH: Final = 8

PATIENCE: Final = 30.0
"""The least time (seconds) a caller waits for a child's result once it asks for it."""


def patience(worked: float) -> float:
    """How long a caller that worked ``worked`` seconds since the fork waits for the child:
    thrice that (the child's part may be larger than the caller's), and never less than
    :data:`PATIENCE`."""
    return max(PATIENCE, 3 * worked)


_ended: list[int] = []  # children stopped or done, not yet reaped


def reap() -> None:
    """Reap the children that have ended, without waiting for the others (the next call,
    or the end of the verification, reaps them)."""
    for pid in list(_ended):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped already: the caller ignores SIGCHLD, or waited
            done = pid
        if done:
            _ended.remove(pid)


def forked(work: Callable[[], Any]) -> Child | None:
    """Run ``work`` in a forked child; None if the system would not fork."""
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        return None
    if pid == 0:  # the child: never returns into the caller, never runs its exit handlers
        status = 1
        try:
            os.close(read)
            payload = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(len(payload).to_bytes(_LENGTH, "big") + payload)
            while view:
                view = view[os.write(write, view) :]
            os.close(write)  # the result is whole: the parent need not wait for the exit
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    return Child(pid, read)
