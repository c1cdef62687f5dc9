"""CrossLoopLock (_locks.py): one FIFO mutex for the tasks of one loop and of loops in
other threads; released on errors and cancellation, whenever a cancellation lands."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from agentjournal._locks import CrossLoopLock

WAIT = 10.0
"""Seconds to wait for what must happen before calling it a deadlock (never a speed limit)."""


async def take_and_note(lock: CrossLoopLock, got: list[int], n: int) -> None:
    async with lock:
        got.append(n)


async def queue_up(
    lock: CrossLoopLock, *tasks: Coroutine[Any, Any, Any]
) -> list[asyncio.Task[Any]]:
    """Start ``tasks`` in order and let each run up to its wait for the held ``lock``."""
    assert lock.locked()
    started = [asyncio.create_task(task) for task in tasks]
    await asyncio.sleep(0)  # each task's first step runs, in creation order: it queues
    assert not any(task.done() for task in started)
    return started


def in_thread(target: Callable[[], None]) -> threading.Thread:
    # Daemon: a deadlocked thread must fail its test, not hang the test run.
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


# -- one loop -----------------------------------------------------------------------------


async def test_tasks_of_one_loop_take_turns() -> None:
    lock = CrossLoopLock()
    inside = most = done = 0

    async def worker() -> None:
        nonlocal inside, most, done
        for _ in range(20):
            async with lock:
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0)  # another task runs now, and must not get in
                inside -= 1
                done += 1

    await asyncio.gather(*(worker() for _ in range(5)))
    assert (most, done) == (1, 100)
    assert not lock.locked()


async def test_locked_says_whether_someone_holds_it() -> None:
    lock = CrossLoopLock()
    assert not lock.locked()
    async with lock:
        assert lock.locked()
    assert not lock.locked()


async def test_waiters_get_the_lock_in_arrival_order() -> None:
    lock = CrossLoopLock()
    got: list[int] = []
    await lock.acquire()
    tasks = await queue_up(lock, *(take_and_note(lock, got, n) for n in range(5)))
    assert got == []
    lock.release()
    await asyncio.wait_for(asyncio.gather(*tasks), WAIT)
    assert got == [0, 1, 2, 3, 4]
    assert not lock.locked()


async def test_an_error_inside_releases_the_lock() -> None:
    lock = CrossLoopLock()
    with pytest.raises(ValueError, match="boom"):
        async with lock:
            raise ValueError("boom")
    assert not lock.locked()
    got: list[int] = []
    await asyncio.wait_for(take_and_note(lock, got, 1), WAIT)
    assert got == [1]


async def test_a_holder_cancelled_inside_releases_the_lock_to_the_next_waiter() -> None:
    lock = CrossLoopLock()
    entered = asyncio.Event()

    async def hold_forever() -> None:
        async with lock:
            entered.set()
            await asyncio.Event().wait()

    holder = asyncio.create_task(hold_forever())
    await entered.wait()
    got: list[int] = []
    (waiter,) = await queue_up(lock, take_and_note(lock, got, 1))
    holder.cancel()
    with pytest.raises(asyncio.CancelledError):
        await holder
    await asyncio.wait_for(waiter, WAIT)
    assert got == [1]
    assert not lock.locked()


async def test_a_waiter_cancelled_in_the_queue_leaves_it() -> None:
    lock = CrossLoopLock()
    got: list[int] = []
    await lock.acquire()
    gone, waiter = await queue_up(lock, lock.acquire(), take_and_note(lock, got, 2))
    gone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert lock.locked()  # still the first holder's
    lock.release()
    await asyncio.wait_for(waiter, WAIT)
    assert got == [2]
    assert not lock.locked()
    await lock.acquire()
    (alone,) = await queue_up(lock, lock.acquire())
    alone.cancel()
    with pytest.raises(asyncio.CancelledError):
        await alone
    lock.release()
    assert not lock.locked()  # nobody waits any more: free at once, nothing handed over


@pytest.mark.parametrize("next_waiter", [True, False])
async def test_a_waiter_cancelled_while_the_lock_is_on_its_way_passes_it_on(
    next_waiter: bool,
) -> None:
    lock = CrossLoopLock()
    got: list[int] = []
    await lock.acquire()
    more = [take_and_note(lock, got, 2)] if next_waiter else []
    chosen, *rest = await queue_up(lock, lock.acquire(), *more)
    lock.release()  # hands the lock to `chosen`: the hand-over is scheduled on its loop
    chosen.cancel()  # and `chosen` is cancelled before the hand-over runs
    with pytest.raises(asyncio.CancelledError):
        await chosen
    await asyncio.wait_for(asyncio.gather(*rest), WAIT)
    assert got == ([2] if next_waiter else [])
    assert not lock.locked()


@pytest.mark.parametrize("next_waiter", [True, False])
async def test_a_waiter_cancelled_just_after_the_lock_arrived_passes_it_on(
    next_waiter: bool,
) -> None:
    lock = CrossLoopLock()
    got: list[int] = []
    await lock.acquire()
    more = [take_and_note(lock, got, 2)] if next_waiter else []
    chosen, *rest = await queue_up(lock, lock.acquire(), *more)
    lock.release()
    # Runs after the hand-over gave `chosen` the lock, before `chosen` resumes: it wakes
    # up cancelled, owning a lock it will never release itself.
    asyncio.get_running_loop().call_soon(chosen.cancel)
    with pytest.raises(asyncio.CancelledError):
        await chosen
    await asyncio.wait_for(asyncio.gather(*rest), WAIT)
    assert got == ([2] if next_waiter else [])
    assert not lock.locked()


async def test_it_is_not_reentrant_but_can_be_taken_again_after_release() -> None:
    lock = CrossLoopLock()
    for _ in range(3):  # the same task, again and again: nothing left behind
        await asyncio.wait_for(lock.acquire(), WAIT)
        lock.release()
    await lock.acquire()
    (again,) = await queue_up(lock, lock.acquire())  # the holder asks again: it waits
    for _ in range(10):
        await asyncio.sleep(0)
    assert not again.done()
    again.cancel()
    with pytest.raises(asyncio.CancelledError):
        await again
    lock.release()
    assert not lock.locked()  # the cancelled second acquire left nothing behind


def test_releasing_a_free_lock_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="released while not locked"):
        CrossLoopLock().release()


# -- loops in other threads ----------------------------------------------------------------


def test_loops_in_two_threads_take_turns() -> None:
    lock = CrossLoopLock()
    guard = threading.Lock()
    inside = overlaps = done = 0

    async def worker() -> None:
        nonlocal inside, overlaps, done
        for _ in range(50):
            async with lock:
                with guard:
                    inside += 1
                    overlaps += inside > 1
                # Wait in a thread, as the stores do under a session's lock: this loop's
                # other task and the other thread's loop run meanwhile.
                await asyncio.to_thread(time.sleep, 0.0002)
                with guard:
                    inside -= 1
                    done += 1

    async def two_workers() -> None:
        await asyncio.gather(worker(), worker())

    threads = [in_thread(lambda: asyncio.run(two_workers())) for _ in range(2)]
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads), "deadlocked"
    assert (overlaps, done) == (0, 200)
    assert not lock.locked()


def test_a_waiter_on_another_loop_is_woken_on_its_own_loop() -> None:
    lock = CrossLoopLock()
    asyncio.run(lock.acquire())  # held, by a loop that is gone: the lock belongs to none
    queued = threading.Event()
    woke: list[int] = []

    async def wait_for_it() -> None:
        task = asyncio.create_task(lock.acquire())
        await asyncio.sleep(0)  # the task has queued for the lock
        queued.set()
        await task  # this loop sleeps until the release wakes it from the other thread
        woke.append(threading.get_ident())
        lock.release()

    thread = in_thread(lambda: asyncio.run(wait_for_it()))
    assert queued.wait(WAIT)
    assert woke == []
    lock.release()  # from this thread, outside any loop
    thread.join(WAIT)
    assert not thread.is_alive(), "the waiter was never woken"
    assert woke == [thread.ident]
    assert not lock.locked()


def test_a_lock_taken_on_one_loop_is_released_on_another() -> None:
    lock = CrossLoopLock()

    async def release() -> None:
        lock.release()

    asyncio.run(lock.acquire())
    asyncio.run(release())
    assert not lock.locked()
    asyncio.run(asyncio.wait_for(lock.acquire(), WAIT))
    assert lock.locked()


def test_a_waiter_whose_loop_has_closed_is_skipped() -> None:
    lock = CrossLoopLock()
    asyncio.run(lock.acquire())
    gone = asyncio.new_event_loop()
    abandoned = gone.create_task(lock.acquire())
    gone.run_until_complete(asyncio.sleep(0))  # the task queues for the lock...
    assert not abandoned.done()
    gone.close()  # ...and its loop closes with it still waiting
    got: list[int] = []

    async def after() -> None:
        await asyncio.wait_for(take_and_note(lock, got, 1), WAIT)

    lock.release()  # the hand-over to the closed loop fails: the lock is free again
    assert not lock.locked()
    asyncio.run(after())
    assert got == [1]
