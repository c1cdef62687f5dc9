"""Experiments: a candidate agent replays recorded sessions on branches, then both lines are scored.

For each session, :func:`run_experiment` forks the main line before turn ``at_turn``
(the branch is named after the experiment, and holds the turns before it), feeds the
candidate each recorded user message from that turn on (``Runner.run(agent, message,
session=branch, hooks=branch)``, with the guardrail service and the session's recorded
policy, so a candidate that would be blocked is blocked and it shows), then scores the
main line from that turn and the branch in one eval run whose id is the experiment's
(:func:`agentjournal.evals.run.run_eval`; ``kind`` ``experiment``).

**Resumable and idempotent.** The experiment id is derived from what it runs (sessions,
candidate, turn, scorers, model script) unless given. After each turn the branch gets an
``agentjournal.ExperimentTurn`` event (the turn, how it ended: ``answered``, ``blocked``,
``failed``, ``interrupted``), so a rerun finds the branch, skips the turns it holds, and
takes up the next; a turn cut short (the process killed after its user message was
written, before its ``ExperimentTurn``) is popped (``pop_item``: its items stay on the
record as events) and run again. Scores are written once per (session, line, turn,
scorer) by the eval run itself.

**One run per turn.** Before a turn, the run takes it: ``agentjournal.ExperimentTurnTaken``
(who: ``host:pid``, where and since when) at the exact head of the branch's top stream,
after reading there that the turn is not finished and not held by a run that may still
run; its ``ExperimentTurn`` is written the same way, only while that take is its own. Of
two runs of one experiment at once, one takes each turn, and one that finds the next turn
held stops with :class:`~agentjournal.errors.ExperimentTurnTaken`. A turn whose taker has
ended (this host, boot and process namespace) is taken again, and what it left popped; any
other holder is passed over only with ``retake=True``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from agents import RunConfig, Runner
from agents.exceptions import AgentsException, MaxTurnsExceeded

from agentjournal import events
from agentjournal._text import plural
from agentjournal.engine.approvals import recorded_policies
from agentjournal.engine.turns import is_user
from agentjournal.errors import (
    AuthorityDenied,
    ExperimentTurnTaken,
    GuardrailBlocked,
    InvalidInput,
    JournalError,
    StreamNotFound,
)
from agentjournal.evals.candidate import Candidate
from agentjournal.evals.report import (
    ExperimentReport,
    LineScore,
    Outcome,
    ScoreRow,
    build_report,
    compare_session,
)
from agentjournal.evals.turn_script import TurnScript
from agentjournal.guardrails.actions import message_text
from agentjournal.journal import GUARDRAIL_URL_ENV
from agentjournal.read.evals.turns import session_turns
from agentjournal.streams import MAIN_BRANCH, branch_stream, session_stream, validate_id

if TYPE_CHECKING:
    from agentjournal.engine.fork import Branch
    from agentjournal.evals.scorers.base import Scorer
    from agentjournal.guardrails.client import GuardrailClient
    from agentjournal.journal import Journal
    from agentjournal.read.evals.runs import EvalRunResult
    from agentjournal.sdk.session import JournalSession
    from agentjournal.store.contract import EventStore

logger = logging.getLogger("agentjournal.evals")

EXPERIMENT_TURN: Final = "agentjournal.ExperimentTurn"
"""An application event on an experiment's branch: the candidate finished one turn."""

EXPERIMENT_TURN_TAKEN: Final = "agentjournal.ExperimentTurnTaken"
"""An application event on an experiment's branch: a run took a turn up (it alone runs it)."""

MAX_TURNS: Final = 10
"""Model calls a candidate may make in one turn (the manifest runner's limit)."""

Progress = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class TurnRun:
    """How the candidate's run of one turn ended.

    Attributes:
        turn: The turn's number.
        status: ``answered``, ``blocked`` (a guardrail or the authority policy stopped
            it), ``failed`` (the model or a tool raised, too many model calls) or
            ``interrupted`` (a tool call waits for a person's approval).
        error: What stopped it (``""`` when answered).
    """

    turn: int
    status: str
    error: str = ""

    def encode(self, experiment: str) -> bytes:
        """The data of the turn's ``agentjournal.ExperimentTurn`` event."""
        body = {"experiment": experiment, "turn": self.turn, "status": self.status}
        if self.error:
            body["error"] = self.error
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class SessionRun:
    """One session of an experiment, after the candidate ran.

    Attributes:
        session: The session id.
        branch: The branch the candidate ran on (the experiment's id).
        turns: How each of the candidate's turns ended, in order.
        ran: How many of them this call ran (0 on a rerun of a finished experiment).
    """

    session: str
    branch: str
    turns: tuple[TurnRun, ...]
    ran: int


def derive_experiment_id(
    sessions: Sequence[str],
    candidate: str,
    at_turn: int,
    scorers: Sequence[dict[str, Any]],
    script_digest: str | None,
) -> str:
    """The id an experiment gets when none is given: ``exp-`` and 16 hex digits of a
    digest of what it runs, so running it again resumes it (pure)."""
    body = json.dumps(
        {
            "sessions": list(sessions),
            "candidate": candidate,
            "at_turn": at_turn,
            "scorers": list(scorers),
            "script": script_digest,
        },
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return "exp-" + hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class _Planned:
    """What is known of a session before anything is written: its turns' user messages."""

    session: str
    messages: tuple[Any, ...]  # the user items of turns at_turn.., in order


async def plan_sessions(journal: Journal, sessions: Sequence[str], at_turn: int) -> list[_Planned]:
    """Check every session before anything is written; their user messages from ``at_turn``.

    Raises:
        InvalidInput: No sessions, a session twice, a malformed or missing session, or one
            without a user message at ``at_turn``.
    """
    if not sessions:
        raise InvalidInput("name at least one session")
    if type(at_turn) is not int or at_turn < 1:
        raise InvalidInput(f"--at-turn must be a turn number (1, 2, ...), got {at_turn!r}")
    seen: set[str] = set()
    planned: list[_Planned] = []
    for name in sessions:
        session_id = validate_id(name, "session id")
        if session_id in seen:
            raise InvalidInput(f"session {session_id} is named twice")
        seen.add(session_id)
        items = await journal.session(session_id).get_items()
        users = [item for item in items if is_user(item)]
        if not users:
            raise InvalidInput(f"session {session_id} has no user message (is it recorded here?)")
        if len(users) < at_turn:
            raise InvalidInput(
                f"session {session_id} has {plural(len(users), 'turn')}: it has no turn {at_turn}"
            )
        planned.append(_Planned(session_id, tuple(users[at_turn - 1 :])))
    return planned


async def run_candidate(
    journal: Journal,
    planned: _Planned,
    candidate: Candidate,
    *,
    experiment: str,
    at_turn: int,
    script: TurnScript | None,
    guardrails: str | GuardrailClient | None = None,
    progress: Progress | None = None,
    taker: Taker | None = None,
) -> SessionRun:
    """Fork ``planned.session`` before ``at_turn`` (once) and run the candidate on the branch
    for every turn it does not hold yet, taking each up as ``taker`` (default: this
    process, a new run); see the module's docstring.

    Raises:
        InvalidInput: The experiment's branch was deleted, or is not the experiment's.
        ExperimentTurnTaken: Another run of the experiment holds the next turn.
        StoreError: A write did not land (run the experiment again: it resumes).
    """
    taker = taker or Taker.now()
    with _running_as(taker):
        session_id = planned.session
        branch = await _branch(journal, session_id, experiment, at_turn)
        policies = await recorded_policies(journal.store, session_id)
        line = journal.session(
            session_id,
            branch=experiment,
            guardrails=guardrails,
            policy=policies[-1] if policies else None,
        )
        ran = 0
        while (
            turn := await _take_turn(
                journal.store,
                line,
                branch.stream,
                experiment,
                at_turn,
                len(planned.messages),
                taker,
            )
        ) is not None:
            await _drop_cut_turn(line, branch, turn - at_turn)
            if progress is not None:
                progress(f"{session_id}: turn {turn}")
            model = None if script is None else script.for_turn(session_id, turn)
            message = planned.messages[turn - at_turn]
            outcome = await _run_turn(line, candidate, model, message, turn)
            await _mark_turn(journal.store, line, branch.stream, outcome, experiment, taker)
            # The run signed its heads when it ended; the mark came after: sign again
            # (nothing happens without a signing key).
            await line.checkpoint()
            ran += 1
        done = await finished_turns(journal.store, branch.stream)
        return SessionRun(session_id, experiment, tuple(done), ran)


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


async def _take_turn(
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


async def _mark_turn(
    store: EventStore,
    line: JournalSession,
    stream: str,
    outcome: TurnRun,
    experiment: str,
    taker: Taker,
) -> None:
    """Write the turn's ``agentjournal.ExperimentTurn`` at the exact head of ``stream``, if
    the turn is still this run's (taken again meanwhile, by a run that judged this one
    stopped, it is not marked twice: the run stops).

    Raises:
        ExperimentTurnTaken: Another run took the turn since this one did.
    """

    async def decide() -> bytes:
        _, held = await _turn_state(store, stream)
        if held is None or held.run != taker.run or held.turn != outcome.turn:
            holder = held.holder if held is not None else "a run that finished it"
            raise ExperimentTurnTaken(line.session_id, outcome.turn, holder, running=False)
        return outcome.encode(experiment)

    await line.append_event_at_head(EXPERIMENT_TURN, decide)


_RUNNING: dict[str, int] = {}
"""The runs of this process that are running turns now (a run's id: how many calls)."""


@contextlib.contextmanager
def _running_as(taker: Taker) -> Iterator[None]:
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


async def _branch(journal: Journal, session_id: str, name: str, at_turn: int) -> Branch:
    """The experiment's branch of the session: found, or forked before ``at_turn``."""
    found = await existing_branch(journal, session_id, name, at_turn)
    if found is not None:
        return found
    try:
        return await journal.session(session_id).fork(turn=at_turn, name=name)
    except InvalidInput:
        # Another run of the experiment forked it first (of two forks of one name, one
        # lands): its branch, if it is the experiment's.
        found = await existing_branch(journal, session_id, name, at_turn)
        if found is None:
            raise
        return found


async def existing_branch(
    journal: Journal, session_id: str, name: str, at_turn: int
) -> Branch | None:
    """The experiment's branch of the session when it was forked already (None: not yet).

    Raises:
        InvalidInput: A branch of that name was deleted, or was not forked by this
            experiment (from main, before turn ``at_turn``).
    """
    for branch in await journal.session(session_id).branches():
        if branch.name != name:
            continue
        if branch.deleted is not None:
            raise InvalidInput(
                f"experiment {name}'s branch of session {session_id} was {branch.deleted}: "
                "run it under another --id"
            )
        if branch.parent != MAIN_BRANCH or (branch.cut.kind, branch.cut.value) != (
            "turn",
            at_turn,
        ):
            raise InvalidInput(
                f"session {session_id} has a branch {name!r} that is not this "
                f"experiment's (forked from {branch.parent} {branch.cut.text()})"
            )
        return branch
    return None


async def finished_turns(store: EventStore, stream: str) -> list[TurnRun]:
    """The turns an experiment's branch says are finished (its ``ExperimentTurn`` events
    on ``stream``, the branch's top stream), in order."""
    try:
        recorded = await store.read(stream)
    except StreamNotFound:
        return []
    done: list[TurnRun] = []
    for event in recorded:
        if event.type != EXPERIMENT_TURN:
            continue
        body = json.loads(event.data)
        done.append(TurnRun(int(body["turn"]), str(body["status"]), str(body.get("error", ""))))
    return done


async def _drop_cut_turn(line: JournalSession, branch: Branch, finished: int) -> None:
    """Pop a turn cut short (its user message on the branch, no ``ExperimentTurn``):
    close what it left open, then hide its items back to its user message."""
    items = await line.get_items()
    own = sum(1 for item in items[branch.prefix_items :] if is_user(item))
    if own <= finished:
        return
    logger.info("%s: turn %d was cut short: popped, run again", line.session_id, own)
    if await line.open_subagents():
        await line.close_subagents(outcome="cancelled", reason="experiment turn cut short")
    while True:
        popped = await line.pop_item()
        if popped is None or is_user(popped):
            return


async def _run_turn(
    line: JournalSession,
    candidate: Candidate,
    script: Any,
    message: Any,
    turn: int,
) -> TurnRun:
    """One turn of the candidate; how it ended (a run's failure is an outcome, not raised)."""
    agent = line.guard(candidate.agent(script))
    content = message.get("content") if isinstance(message, dict) else message
    text = content if isinstance(content, str) else message_text(content)
    try:
        async with line.run_scope():
            result = await Runner.run(
                agent,
                text,
                session=line,
                hooks=line,
                run_config=RunConfig(tracing_disabled=True),
                max_turns=MAX_TURNS,
            )
            if result.interruptions:
                await line.hold(result)
                return TurnRun(turn, "interrupted", "a tool call waits for approval")
    except GuardrailBlocked as blocked:
        reason = blocked.reason_message or blocked.reason_code or "no reason given"
        return TurnRun(turn, "blocked", f"guardrail blocked {blocked.action_type}: {reason}")
    except AuthorityDenied as denied:
        return TurnRun(turn, "blocked", f"authority: {denied}")
    except MaxTurnsExceeded:
        return TurnRun(turn, "failed", f"no final answer within {MAX_TURNS} model calls")
    except JournalError:
        raise  # the record could not be written: the experiment stops (a rerun resumes)
    except (AgentsException, Exception) as error:
        return TurnRun(turn, "failed", f"{type(error).__name__}: {error}"[:500])
    return TurnRun(turn, "answered")


async def _ran_guarded(store: EventStore, session_id: str) -> bool:
    """Whether the session's main line records a guardrail decision."""
    try:
        found = await store.read(session_stream(session_id))
    except StreamNotFound:
        return False
    return any(event.type == events.GUARDRAIL_DECIDED for event in found)


def _environment_model_check(candidate: Candidate, script: TurnScript | None) -> None:
    """A manifest candidate without a script calls OpenAI: refuse early without a key."""
    if candidate.scripted_only and script is None and not os.environ.get("OPENAI_API_KEY"):
        raise InvalidInput(
            f"--candidate {candidate.spec}: no --model-script and no $OPENAI_API_KEY: "
            "the manifests' models cannot be called"
        )


async def run_experiment(
    journal: Journal,
    sessions: Sequence[str],
    candidate: Candidate | str,
    *,
    scorers: Sequence[Scorer],
    at_turn: int = 1,
    model_script: TurnScript | str | os.PathLike[str] | None = None,
    experiment_id: str | None = None,
    guardrails: str | GuardrailClient | None = None,
    criteria: str | None = None,
    progress: Progress | None = None,
    retake: bool = False,
) -> ExperimentReport:
    """Run ``candidate`` on a branch of each session from ``at_turn`` and score both lines.

    Everything is checked before anything is written (the candidate, the model script,
    the scorers, every session and its turn). Running it again with the same inputs
    (or the same ``experiment_id``) resumes it: no second branch, no turn run twice
    unless it was cut short, no score written twice. Two runs of it at once run each
    turn once: the one that finds the next turn taken by the other stops.

    Args:
        journal: The journal the sessions are recorded in.
        sessions: The session ids, in the report's order.
        candidate: A :class:`Candidate`, or how to name one (``MODULE:AGENT`` or a
            manifest directory; see :func:`~agentjournal.evals.candidate.load_candidate`).
        scorers: What scores both lines (``load_scorers(path)``).
        at_turn: The first turn the candidate answers (1: the session's start); the
            branch holds the turns before it.
        model_script: The candidate's scripted answers per session and turn
            (:mod:`agentjournal.evals.turn_script`), or its file.
        experiment_id: The experiment's id (its branch's name, its eval run's id);
            default ``exp-`` and a digest of the inputs.
        guardrails: The guardrail service the candidate's runs ask (a URL or a client;
            default ``$AGENTJOURNAL_GUARDRAIL_URL``): the one the sessions ran under.
        criteria: The scorers file's digest (``sha256:...``) for the run's record.
        progress: Called with a line of text as each session and turn runs.
        retake: Take again a turn that another run took and did not finish, only when
            that run has stopped: a run on another host (or in another process namespace),
            which this host cannot ask, or one whose process lives on after it raised.

    Raises:
        InvalidInput: Bad input (one line naming it); nothing was written.
        ExperimentTurnTaken: Another run of the experiment holds a turn this one would
            run next: it still runs (wait for it), or it ran where this host cannot tell
            (``retake``). Its own take is not written; the turns it ran before stay.
        StoreError: A write did not land: run it again, it resumes.
    """
    from agentjournal.evals.candidate import load_candidate
    from agentjournal.evals.turn_script import load_turn_script

    chosen = candidate if isinstance(candidate, Candidate) else load_candidate(candidate)
    script = (
        model_script
        if model_script is None or isinstance(model_script, TurnScript)
        else load_turn_script(
            model_script, sessions=sessions, first_agent=chosen.name, agents=chosen.agents
        )
    )
    _environment_model_check(chosen, script)
    if not scorers:
        raise InvalidInput("name at least one scorer")
    if journal.keys is not None:
        raise InvalidInput(
            "experiments run on journals that keep content in the clear (this one seals it "
            "under subject keys)"
        )
    planned = await plan_sessions(journal, sessions, at_turn)
    if guardrails is None and not os.environ.get(GUARDRAIL_URL_ENV):
        for one in planned:
            if await _ran_guarded(journal.store, one.session):
                raise InvalidInput(
                    f"session {one.session} ran under a guardrail service: name it "
                    f"(--guardrails URL or ${GUARDRAIL_URL_ENV}) so the candidate is checked too"
                )
    described = [scorer.describe() for scorer in scorers]
    name = experiment_id or derive_experiment_id(
        [p.session for p in planned],
        chosen.spec,
        at_turn,
        described,
        None if script is None else script.digest,
    )
    validate_id(name, "experiment id")
    await _same_experiment(journal.store, name, planned, chosen.spec, at_turn, described)
    for one in planned:  # a branch of that name that is not this experiment's: refused now
        await existing_branch(journal, one.session, name, at_turn)
    taker = Taker.now(retake=retake)
    runs = [
        await run_candidate(
            journal,
            one,
            chosen,
            experiment=name,
            at_turn=at_turn,
            script=script,
            guardrails=guardrails,
            progress=progress,
            taker=taker,
        )
        for one in planned
    ]
    if progress is not None:
        progress("scoring both lines")
    result = await score_lines(
        journal,
        scorers,
        runs,
        experiment=name,
        candidate=chosen.spec,
        at_turn=at_turn,
        criteria=criteria,
        progress=progress,
    )
    return await experiment_report(journal.store, result, runs)


async def score_lines(
    journal: Journal,
    scorers: Sequence[Scorer],
    runs: Sequence[SessionRun],
    *,
    experiment: str,
    candidate: str,
    at_turn: int,
    criteria: str | None = None,
    progress: Progress | None = None,
) -> EvalRunResult:
    """Score each session's main line and branch from ``at_turn`` in one eval run whose id
    is the experiment's (``kind`` ``experiment``; scores already there are not written
    again)."""
    from agentjournal.evals.run import run_eval

    targets = [(run.session, line) for run in runs for line in (MAIN_BRANCH, run.branch)]
    return await run_eval(
        journal.store,
        scorers,
        targets,
        run_id=experiment,
        kind="experiment",
        experiment={"candidate": candidate, "at_turn": at_turn, "branch": experiment},
        from_turn=at_turn,
        criteria=criteria or "",
        signing_key=journal.signing_key,
        progress=None if progress is None else lambda done: progress(done.text()),
    )


async def experiment_report(
    store: EventStore, result: EvalRunResult, runs: Sequence[SessionRun] | None = None
) -> ExperimentReport:
    """The report of an experiment's eval run (``kind`` ``experiment``): both lines of each
    of its sessions read back and compared; how the candidate's turns ended from ``runs``,
    else from its branches.

    Raises:
        InvalidInput: ``result`` is not an experiment's run.
    """
    facts = result.experiment
    if result.kind != "experiment" or not facts:
        raise InvalidInput(f"eval run {result.run_id} is not an experiment")
    branch = str(facts.get("branch") or result.run_id)
    at_turn = int(facts.get("at_turn") or 1)
    sessions = list(dict.fromkeys(session for session, _ in result.sessions))
    ended = {run.session: run.turns for run in runs or ()}
    compared = []
    for session in sessions:
        refusals = await _refusals(store, session, branch)
        turns = ended.get(session)
        if turns is None:
            turns = tuple(await finished_turns(store, branch_stream(session, branch)))
        main = await session_turns(store, session, line=MAIN_BRANCH, from_turn=at_turn)
        tried = await session_turns(store, session, line=branch, from_turn=at_turn)
        compared.append(
            compare_session(
                main,
                tried,
                [
                    ScoreRow(row.session, row.line, row.turn, row.scorer, row.score)
                    for row in result.turns
                    if row.session == session
                ],
                [Outcome(t.turn, t.status, t.error) for t in turns],
                [
                    LineScore(row.line, row.score, row.by_scorer)
                    for row in result.session_scores
                    if row.session == session
                ],
                refusals,
            )
        )
    return build_report(result.run_id, str(facts.get("candidate", "")), at_turn, compared)


async def _refusals(store: EventStore, session: str, name: str) -> dict[str, list[str]]:
    """Each line's authority refusals after the branch's cut (``subject: reason``), by
    line; what the policy hid from a model (``tool_visibility``) is no refusal of an act."""
    from agentjournal import events
    from agentjournal.engine.fork import read_branches
    from agentjournal.read.lines import line_path

    branch = next((b for b in await read_branches(store, session) if b.name == name), None)
    if branch is None:
        return {}
    found: dict[str, list[str]] = {}
    for line, at in ((MAIN_BRANCH, None), (name, branch)):
        for record in await line_path(store, session, at):
            if record.type != events.AUTHORITY_REFUSED:
                continue
            if record.position is None or record.position < branch.cut.position:
                continue
            body = record.body if isinstance(record.body, dict) else {}
            if body.get("gate") == "tool_visibility":
                continue
            found.setdefault(line, []).append(f"{body.get('subject')}: {body.get('reason')}")
    return found


async def _same_experiment(
    store: EventStore,
    name: str,
    planned: Sequence[_Planned],
    candidate: str,
    at_turn: int,
    scorers: Sequence[dict[str, Any]],
) -> None:
    """Refuse, before anything is written, an id whose eval run was started as another
    experiment (other sessions, candidate, turn or scorers) or is no experiment.

    Raises:
        InvalidInput: It differs (give another ``--id``).
    """
    from agentjournal.read.evals.runs import read_run

    try:
        run = await read_run(store, name)
    except InvalidInput:
        return  # not started yet
    facts = run.experiment or {}
    targets = tuple((p.session, line) for p in planned for line in (MAIN_BRANCH, name))
    had = [(s.get("name"), s.get("version")) for s in run.scorers]
    given = [(s.get("name"), s.get("version")) for s in scorers]
    if (
        run.kind != "experiment"
        or tuple(run.sessions) != targets
        or had != given
        or facts.get("candidate") != candidate
        or facts.get("at_turn") != at_turn
    ):
        raise InvalidInput(
            f"{name} was started as another run (its sessions, candidate, turn or scorers "
            "differ): give another --id"
        )
