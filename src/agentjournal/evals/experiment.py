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

import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
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
from agentjournal.evals.turn_takes import (
    EXPERIMENT_TURN,
    Taker,
    mark_turn,
    running_as,
    take_turn,
)
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
    with running_as(taker):
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
            turn := await take_turn(
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
            await mark_turn(
                journal.store, line, branch.stream, outcome.turn, outcome.encode(experiment), taker
            )
            # The run signed its heads when it ended; the mark came after: sign again
            # (nothing happens without a signing key).
            await line.checkpoint()
            ran += 1
        done = await finished_turns(journal.store, branch.stream)
        return SessionRun(session_id, experiment, tuple(done), ran)


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
    name = (
        experiment_id
        if experiment_id is not None
        else derive_experiment_id(
            [p.session for p in planned],
            chosen.spec,
            at_turn,
            described,
            None if script is None else script.digest,
        )
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
