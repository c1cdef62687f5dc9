"""A forked child's result: what it sent, or None whatever went wrong, never a hang."""

from __future__ import annotations

import _thread
import os
import signal
import threading
import time

import pytest

from agentjournal import _forked

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is Linux's here")


def _reaped() -> None:
    deadline = time.monotonic() + 10
    while _forked._ended and time.monotonic() < deadline:
        time.sleep(0.05)
        _forked.reap()
    assert not _forked._ended


def test_a_child_sends_back_what_its_work_returns() -> None:
    child = _forked.forked(lambda: {"spans": [1, 2, 3]})
    assert child is not None
    try:
        assert child.result() == {"spans": [1, 2, 3]}
    finally:
        child.close()
    _reaped()


def test_a_child_that_fails_reads_as_no_result() -> None:
    child = _forked.forked(lambda: 1 / 0)
    assert child is not None
    try:
        assert child.result() is None
    finally:
        child.close()
    _reaped()


@pytest.mark.parametrize("how", ["sleeps", "is stopped"])
def test_a_child_that_hangs_reads_as_no_result_and_is_killed(
    monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    monkeypatch.setattr(_forked, "PATIENCE", 0.5)
    child = _forked.forked(lambda: time.sleep(600))
    assert child is not None
    if how == "is stopped":
        os.kill(child.pid, signal.SIGSTOP)
    started = time.monotonic()
    try:
        assert child.result() is None
    finally:
        child.close()
    assert time.monotonic() - started < 5
    _reaped()


def test_the_wait_grows_with_the_work_done_before_asking() -> None:
    assert _forked.patience(0.0) == _forked.PATIENCE
    assert _forked.patience(100.0) == 300.0


def test_the_threads_ready_to_run_now_count_this_one() -> None:
    """The kernel's count of runnable threads, read as the test runs: this thread is one."""
    count = _forked.runnable()
    assert count >= 1
    assert count == int(count)


def test_without_the_kernels_count_the_load_average_stands_in(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unreadable(*args: object, **kwargs: object) -> None:
        raise OSError("no /proc here")

    monkeypatch.setattr(_forked, "open", unreadable, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.25, 0.0, 0.0))
    assert _forked.runnable() == 1.25


def test_forking_is_unsafe_while_a_thread_outside_threading_runs() -> None:
    """A library's thread (gRPC's, shutting down after its last channel closed) is not one of
    Python's ``threading`` threads, yet a fork waits in its fork handler; the kernel counts it."""
    before, known = set(os.listdir("/proc/self/task")), threading.active_count()
    stop = _thread.allocate_lock()
    stop.acquire()
    _thread.start_new_thread(stop.acquire, ())  # an OS thread threading does not know of
    try:
        new = set(os.listdir("/proc/self/task")) - before
        assert len(new) == 1
        assert threading.active_count() == known
        assert _forked.threads() >= 2
        assert not _forked.forking_safe()
        assert not _forked.wait_alone(0.01)
    finally:
        stop.release()
    deadline = time.monotonic() + 5
    while new & set(os.listdir("/proc/self/task")) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not new & set(os.listdir("/proc/self/task"))
