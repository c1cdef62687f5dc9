"""Who runs an experiment's turn: a run takes each turn up before it runs it, and marks it
finished only while the take is its own (``agentjournal.ExperimentTurnTaken`` and
``agentjournal.ExperimentTurn`` on the branch's top stream, both written at its exact head
by :meth:`~agentjournal.sdk.session.JournalSession.append_event_at_head`), so that of two
runs of one experiment one runs each turn; whether the run holding a turn still runs is
asked of this host (:func:`_running`). See :mod:`agentjournal.evals.experiment`."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from agentjournal.errors import ExperimentTurnTaken, StreamNotFound

if TYPE_CHECKING:
    from agentjournal.sdk.session import JournalSession
    from agentjournal.store.contract import EventStore

EXPERIMENT_TURN: Final = "agentjournal.ExperimentTurn"
"""An application event on an experiment's branch: the candidate finished one turn."""

EXPERIMENT_TURN_TAKEN: Final = "agentjournal.ExperimentTurnTaken"
"""An application event on an experiment's branch: a run took a turn up (it alone runs it)."""


@dataclass(frozen=True, slots=True)
class Taker:
    """Who takes an experiment's turns up.

    Attributes:
        holder: This process, ``host:pid``.
        run: This run of it (another run in the same process is another taker).
        retake: Whether a turn another run holds may be taken all the same: that run has
            stopped, which this host cannot tell (on another host, in another process
            namespace, or a process that lives on after its run raised).
        machine: Where process ids name the same processes as here: the boot's id and
            the pid namespace (``""``: not known on this system).
        started: When this process started (clock ticks since boot; ``""``: not known),
            which tells a reused process id from the process that took the turn.
    """

    holder: str
    run: str
    retake: bool = False
    machine: str = ""
    started: str = ""

    @classmethod
    def now(cls, *, retake: bool = False) -> Taker:
        """This process, as a new run."""
        pid = os.getpid()
        return cls(
            f"{socket.gethostname()}:{pid}",
            uuid.uuid4().hex,
            retake,
            _machine(),
            _started(pid) or "",
        )


@dataclass(frozen=True, slots=True)
class _Held:
    """The last take on a branch after its last finished turn."""

    turn: int
    holder: str
    run: str
    machine: str
    started: str


class _NothingToTake(Exception):
    """No turn to take now: every turn is finished, or this run took the next already."""


async def take_turn(
    store: EventStore,
    line: JournalSession,
    stream: str,
    experiment: str,
    at_turn: int,
    turns: int,
    taker: Taker,
) -> int | None:
    """Take the branch's next unfinished turn (``agentjournal.ExperimentTurnTaken`` at the
    exact head of ``stream``): its number, or None when all ``turns`` from ``at_turn`` are
    finished.

    Raises:
        ExperimentTurnTaken: Another run holds that turn (nothing written).
    """
    taken: list[int] = []

    async def decide() -> bytes:
        taken.clear()
        finished, held = await _turn_state(store, stream)
        if finished >= turns:
            raise _NothingToTake
        turn = at_turn + finished
        retake = False
        if held is not None and held.turn == turn:
            if held.run == taker.run:  # this run's own take, landed on an earlier attempt
                taken.append(turn)
                raise _NothingToTake
            running = _running(held)
            if (running or running is None) and not taker.retake:
                raise ExperimentTurnTaken(line.session_id, turn, held.holder, running=running)
            retake = True
        taken.append(turn)
        body: dict[str, object] = {
            "experiment": experiment,
            "turn": turn,
            "holder": taker.holder,
            "run": taker.run,
            "retake": retake,
        }
        if taker.machine:
            body["machine"] = taker.machine
        if taker.started:
            body["started"] = taker.started
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    with contextlib.suppress(_NothingToTake):
        await line.append_event_at_head(EXPERIMENT_TURN_TAKEN, decide)
    return taken[0] if taken else None


async def _turn_state(store: EventStore, stream: str) -> tuple[int, _Held | None]:
    """How many turns the branch's top stream says are finished, and the last take after
    the last of them, if any."""
    try:
        recorded = await store.read(stream)
    except StreamNotFound:
        return 0, None
    finished = 0
    held: _Held | None = None
    for event in recorded:
        if event.type == EXPERIMENT_TURN:
            finished += 1
            held = None
        elif event.type == EXPERIMENT_TURN_TAKEN:
            body = json.loads(event.data)
            held = _Held(
                int(body["turn"]),
                str(body["holder"]),
                str(body["run"]),
                str(body.get("machine", "")),
                str(body.get("started", "")),
            )
    return finished, held


async def mark_turn(
    store: EventStore, line: JournalSession, stream: str, turn: int, data: bytes, taker: Taker
) -> None:
    """Write turn ``turn``'s ``agentjournal.ExperimentTurn`` (``data``) at the exact head of
    ``stream``, if the turn is still ``taker``'s (taken again meanwhile, by a run that judged
    this one stopped, it is not marked twice: the run stops).

    Raises:
        ExperimentTurnTaken: Another run took the turn since this one did.
    """

    async def decide() -> bytes:
        _, held = await _turn_state(store, stream)
        if held is None or held.run != taker.run or held.turn != turn:
            holder = held.holder if held is not None else "a run that finished it"
            raise ExperimentTurnTaken(line.session_id, turn, holder, running=False)
        return data

    await line.append_event_at_head(EXPERIMENT_TURN, decide)


_RUNNING: dict[str, int] = {}
"""The runs of this process that are running turns now (a run's id: how many calls)."""


@contextlib.contextmanager
def running_as(taker: Taker) -> Iterator[None]:
    """``taker``'s run counts as running in this process meanwhile (:func:`_running`)."""
    _RUNNING[taker.run] = _RUNNING.get(taker.run, 0) + 1
    try:
        yield
    finally:
        _RUNNING[taker.run] -= 1
        if not _RUNNING[taker.run]:
            del _RUNNING[taker.run]


def _running(held: _Held) -> bool | None:
    """Whether the run that took a turn still runs: known for a process of this host, of
    this boot and process namespace only (None elsewhere). A process that has ended, or
    ended as a zombie not yet reaped, or whose id a later process took (another start
    time), does not run; a run of this very process runs while it is in :data:`_RUNNING`."""
    host, _, pid_text = held.holder.rpartition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return None
    here = _machine()
    if held.machine and here and held.machine != here:
        return None
    pid = int(pid_text)
    if pid == os.getpid() and (not held.started or held.started == _started(pid)):
        return held.run in _RUNNING
    try:
        os.kill(pid, 0)  # asks the process table, with or without /proc
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, another user's
    status = _stat(pid)
    if status is None:
        return True  # no /proc here, or not readable: it exists
    state, started = status
    if state in ("Z", "X"):
        return False
    return not (held.started and started != held.started)


def _stat(pid: int) -> tuple[str, str] | None:
    """The state and start time (clock ticks since boot) of process ``pid`` from
    ``/proc/PID/stat``, or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold anything, so fields count from the last ")";
    # the start time is field 22, the 20th after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (fields[0], fields[19]) if len(fields) > 19 else None


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or None."""
    status = _stat(pid)
    return None if status is None else status[1]


_MACHINE: list[str] = []


def _machine() -> str:
    """Where process ids name the same processes as in this one: the boot's id and this
    process's pid namespace (``""`` where they cannot be read; read once when they can)."""
    if _MACHINE:
        return _MACHINE[0]
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return ""
    _MACHINE.append(f"{boot}/{namespace}")
    return _MACHINE[0]
