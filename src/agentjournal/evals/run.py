"""Running an eval: scorers over recorded session lines, written as one ``EvalRun`` stream.

:func:`run_eval` reads each target line's turns (:func:`agentjournal.read.evals.turns.
session_turns`), has every scorer score every turn and the whole line, and writes the
scores through the one writer of eval runs (:class:`agentjournal.engine.evals.EvalWriter`):
``EvalRunStarted``, then per line its ``TurnScored`` events and its ``SessionScored`` in
one append, then ``EvalRunCompleted`` with the totals read back from the stream.

**Resumable.** A run is named by its id; run again with the same id (after a crash, a
``kill -9``, a lost connection), it scores only what its stream does not hold yet, never
writes an event twice (deterministic ids) and writes ``EvalRunCompleted`` once. A rerun
must name the same scorers (names and versions) and the same targets: anything else is a
different run, refused.

:func:`select_sessions` picks the sessions of ``--app A --since T`` and ``--all`` from the
store's catalog.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agentjournal._text import plural
from agentjournal.engine.eval_events import (
    KINDS,
    JudgeUsage,
    RunStart,
    RunTotals,
    SessionScore,
    TurnScore,
    checked_score,
    label_of,
    shown_label,
)
from agentjournal.engine.evals import EvalWriter, sealing_keys, session_sealer
from agentjournal.errors import InvalidInput
from agentjournal.evals.scorers.base import Score, Scorer
from agentjournal.events import EVAL_RUN_COMPLETED
from agentjournal.ledger.keys import SigningKey
from agentjournal.read.catalog import refresh
from agentjournal.read.evals.runs import (
    EvalRunResult,
    completed_with,
    fold_run,
    read_run,
    run_events,
)
from agentjournal.read.evals.turns import ScoredSession, session_turns
from agentjournal.read.usage import Prices
from agentjournal.shred.keys import SubjectKeyStore
from agentjournal.store.contract import EventStore
from agentjournal.streams import MAIN_BRANCH, session_stream, validate_id


@dataclass(frozen=True, slots=True)
class LineDone:
    """One session line scored (what :func:`run_eval` tells ``progress``).

    Attributes:
        session: The session.
        line: ``main`` or the branch's name.
        turns: Its turns scored (by any scorer).
        score: Its ``SessionScored`` score.
        label: Its label.
        written: Events this run wrote for it now (0: its scores were on the stream).
        done: Lines done so far, this one included.
        total: Lines in the run.
    """

    session: str
    line: str
    turns: int
    score: float
    label: str
    written: int
    done: int
    total: int

    def text(self) -> str:
        """The line as a progress line (``eval run`` prints one per line to stderr)."""
        where = self.session if self.line == MAIN_BRANCH else f"{self.session}@{self.line}"
        state = "scored" if self.written else "already scored"
        return (
            f"[{self.done}/{self.total}] {where}: {plural(self.turns, 'turn')} {state}, "
            f"{self.score:.2f} {self.label}"
        )


Progress = Callable[[LineDone], None]


def new_run_id(now: datetime | None = None) -> str:
    """A fresh run id: ``eval-{UTC time}-{6 random hex digits}``."""
    moment = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S")
    return f"eval-{moment}-{secrets.token_hex(3)}"


def checked_targets(targets: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    """``targets`` as (session id, line) pairs, ids normalised, repeats dropped.

    Raises:
        InvalidInput: None given, or an id or line name is malformed.
    """
    found: dict[tuple[str, str], None] = {}
    for target in targets:
        if not isinstance(target, tuple) or len(target) != 2:
            raise InvalidInput(f"an eval target is a (session, line) pair, got {target!r}")
        session, line = target
        session = validate_id(session, "session id")
        if not isinstance(line, str) or not line:
            raise InvalidInput(f"the line of session {session} must be 'main' or a branch name")
        found[(session, line)] = None
    if not found:
        raise InvalidInput("nothing to score: name sessions, or --app/--since, or --all")
    return tuple(found)


def checked_scorers(scorers: Sequence[Scorer]) -> tuple[Scorer, ...]:
    """``scorers``, each named once.

    Raises:
        InvalidInput: None given, or two share a name.
    """
    if not scorers:
        raise InvalidInput("the scorers file names no scorer")
    names = Counter(s.name for s in scorers)
    repeated = next((n for n, count in names.items() if count > 1), None)
    if repeated is not None:
        raise InvalidInput(f"two scorers are named {repeated!r}: scores are recorded by name")
    return tuple(scorers)


def _described(scorer: Scorer) -> dict[str, Any]:
    facts = {k: v for k, v in scorer.describe().items() if v is not None}
    facts.update(name=scorer.name, version=scorer.version, kind=scorer.kind)
    return facts


async def select_sessions(
    store: EventStore,
    *,
    app: str | None = None,
    since: datetime | None = None,
) -> list[str]:
    """The sessions of the store's catalog started by ``app`` (any without) and active
    since ``since`` (any without), oldest activity first.

    Raises:
        StoreError: The store could not be read.
    """
    rows = (await refresh(store)).rows
    chosen = [
        row
        for row in rows
        if (app is None or row.app == app) and (since is None or row.last_activity >= since)
    ]
    chosen.sort(key=lambda row: (row.last_activity, row.session_id))
    return [row.session_id for row in chosen]


async def check_sessions(store: EventStore, targets: Sequence[tuple[str, str]]) -> None:
    """Refuse targets whose session is not in the store (lines are checked when read).

    Raises:
        InvalidInput: A session does not exist.
    """
    for session, _ in targets:
        if await store.head(session_stream(session)) is None:
            raise InvalidInput(f"no session {session!r} in the store: check the id")


async def check_opened(
    store: EventStore, targets: Sequence[tuple[str, str]], keys: SubjectKeyStore | None
) -> None:
    """Refuse a session whose content is sealed under a subject key ``keys`` does not hold
    (or any, without ``keys``): its scorers would judge ``[sealed]`` and the run would
    record their verdicts on it as scores. A destroyed key (erased content) is no refusal.

    Raises:
        InvalidInput: Such a session.
    """
    for session in dict.fromkeys(session for session, _ in targets):
        kid = await anext(aiter(sealing_keys(store, session)), None)
        if kid is None:
            continue
        try:
            if keys is not None:
                keys.find(kid)
                continue
        except KeyError:
            pass
        raise InvalidInput(
            f"session {session} is sealed under a subject key "
            + ("and no keys were given" if keys is None else "the keys given do not hold")
            + ": its scorers would judge [sealed] (give the journal's keys: --keys FILE)"
        )


def _judge(score: Score) -> JudgeUsage | None:
    usage = score.usage
    if usage is None and score.model is None:
        return None
    return JudgeUsage(
        model=score.model or "",
        requests=usage.requests if usage else 0,
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        total_tokens=usage.total_tokens if usage else 0,
        cost=usage.cost if usage else None,
    )


def _checked(scorer: Scorer, score: Score | None, where: str) -> Score | None:
    """The scorer's score, its value checked.

    Raises:
        InvalidInput: The value is not in [0, 1].
    """
    if score is None:
        return None
    checked_score(score.value, f"scorer {scorer.name!r}'s score of {where}")
    return score


async def _score_line(
    scorers: Sequence[Scorer],
    read: ScoredSession,
    writer: EvalWriter,
    recorded: Mapping[tuple[int, str], float],
) -> tuple[list[TurnScore | SessionScore], SessionScore]:
    """Every scorer's scores of the line's turns the stream lacks, and the line's score
    (from those and the ``recorded`` ones: (turn, scorer) -> value)."""
    session, line = read.session, read.line
    new: list[TurnScore | SessionScore] = []
    values: dict[str, list[float]] = {}
    turns_scored: set[int] = set()
    for turn in read.turns:
        for scorer in scorers:
            if writer.scored(session, line, turn.index, scorer.name):
                value = recorded.get((turn.index, scorer.name))
                if value is not None:
                    values.setdefault(scorer.name, []).append(value)
                    turns_scored.add(turn.index)
                continue
            where = f"turn {turn.index} of {session}"
            score = _checked(scorer, await scorer.score_turn(turn), where)
            if score is None:
                continue
            values.setdefault(scorer.name, []).append(score.value)
            turns_scored.add(turn.index)
            new.append(
                TurnScore(
                    session=session,
                    line=line,
                    turn=turn.index,
                    scorer=scorer.name,
                    version=scorer.version,
                    value=score.value,
                    label=shown_label(score.label, score.value),
                    reason=score.reason,
                    input=turn.input,
                    output=turn.output,
                    head=turn.head,
                    judge=_judge(score),
                )
            )
    every = [v for found in values.values() for v in found]
    judged: list[JudgeUsage] = []
    reasons: list[str] = []
    for scorer in scorers:
        score = _checked(scorer, await scorer.score_session(read), f"session {session}")
        if score is None:
            continue
        values.setdefault(scorer.name, []).append(score.value)
        every.append(score.value)
        if score.reason:
            reasons.append(f"{scorer.name}: {score.reason}")
        usage = _judge(score)
        if usage is not None:
            judged.append(usage)
    by_scorer = {name: sum(found) / len(found) for name, found in values.items()}
    mean = sum(every) / len(every) if every else 0.0
    label = label_of(mean) if every else "unscored"
    summary = (
        f"{len(turns_scored)} of {len(read.turns)} turns scored by "
        f"{', '.join(s.name for s in scorers)}; mean {mean:.2f}"
    )
    if reasons:
        summary += "; " + "; ".join(reasons)
    line_score = SessionScore(
        session=session,
        line=line,
        value=mean,
        label=label,
        reason=summary,
        by_scorer=by_scorer,
        turns=len(turns_scored),
        judge=_summed(judged),
    )
    return new, line_score


def _summed(usages: Sequence[JudgeUsage]) -> JudgeUsage | None:
    if not usages:
        return None
    costs = [u.cost for u in usages if u.cost is not None]
    return JudgeUsage(
        model=",".join(sorted({u.model for u in usages})),
        requests=sum(u.requests for u in usages),
        input_tokens=sum(u.input_tokens for u in usages),
        output_tokens=sum(u.output_tokens for u in usages),
        total_tokens=sum(u.total_tokens for u in usages),
        cost=sum(costs) if costs else None,
    )


def totals_of(run: EvalRunResult) -> RunTotals:
    """What ``EvalRunCompleted`` records of ``run``'s scores, as its stream holds them
    (the verifier recomputes ``turns_scored`` and ``average`` the same way)."""
    turns = run.turns
    by_scorer: dict[str, list[float]] = {}
    by_line: dict[str, list[float]] = {}
    judge = {"requests": 0, "input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    cost = 0.0
    spent = [t.judge for t in turns] + [s.judge for s in run.session_scores]
    for turn in turns:
        by_scorer.setdefault(turn.scorer, []).append(turn.score)
        by_line.setdefault(turn.line, []).append(turn.score)
    for usage in spent:
        if usage is None:
            continue
        for name in judge:
            value = usage.get(name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                judge[name] += int(value)
        value = usage.get("cost")
        if isinstance(value, int | float) and not isinstance(value, bool):
            cost += float(value)
    return RunTotals(
        session_id=run.session_id,
        turns_scored=len(turns),
        average=sum(t.score for t in turns) / len(turns) if turns else 0.0,
        total_cost=cost,
        by_scorer={name: sum(v) / len(v) for name, v in by_scorer.items()},
        by_line={name: sum(v) / len(v) for name, v in by_line.items()},
        judge=judge,
        sessions=len(run.session_scores),
    )


def _same_run(run: EvalRunResult, start: RunStart) -> None:
    """Refuse to go on with a run its stream says was started otherwise.

    Raises:
        InvalidInput: The kind, the targets, the scorers or the scorers file differ.
    """
    had = [(s.get("name"), s.get("version")) for s in run.scorers]
    given = [(s.get("name"), s.get("version")) for s in start.scorers]
    if run.kind != start.kind or had != given or run.sessions != start.sessions:
        raise InvalidInput(
            f"eval run {run.run_id} was started with other scorers or sessions: "
            "give a new --id to score these"
        )
    if run.criteria and start.criteria and run.criteria != start.criteria:
        raise InvalidInput(
            f"eval run {run.run_id} was started with another scorers file "
            f"({run.criteria}): give a new --id to score with this one"
        )


async def run_eval(
    store: EventStore,
    scorers: Sequence[Scorer],
    targets: Sequence[tuple[str, str]],
    *,
    run_id: str | None = None,
    keys: SubjectKeyStore | None = None,
    signing_key: SigningKey | None = None,
    progress: Progress | None = None,
    criteria: str = "",
    kind: str = "eval",
    experiment: Mapping[str, Any] | None = None,
    from_turn: int = 1,
    prices: Prices | None = None,
) -> EvalRunResult:
    """Score ``targets`` with ``scorers`` as the eval run ``run_id`` (see the module docs).

    Args:
        store: The event store (the scored sessions' and the run's).
        scorers: What scores (:mod:`agentjournal.evals.scorers`), each named once.
        targets: (session id, line) pairs: ``main`` or a branch's name.
        run_id: The run (default: a fresh id, :func:`new_run_id`); an existing run's id
            finishes that run.
        keys: The subject key store sealed sessions were written with: their content is
            opened for the scorers, and their scores' content sealed under the same
            subject's key.
        signing_key: Signs the run's head on ``AgentLedger-EvalRun-{run_id}`` at the end.
        progress: Told each line scored.
        criteria: The scorers file's digest (``sha256:<hex>``), recorded.
        kind: ``eval`` or ``experiment``.
        experiment: An experiment's facts (``candidate``, ``at_turn``, ``branch``).
        from_turn: The first turn of each line scored (1: all).
        prices: What each model costs (for the turns' usage scorers see).

    Raises:
        InvalidInput: No scorer or target, a malformed id, a session or branch that does
            not exist, a run id started with other scorers or targets, a score outside
            [0, 1]; nothing is written for the first five.
        StoreError: The store failed; run it again with the same ``run_id`` to finish.
    """
    scorers = checked_scorers(scorers)
    wanted = checked_targets(targets)
    if kind not in KINDS or kind == "feedback":
        raise InvalidInput(f"an eval run's kind is 'eval' or 'experiment', got {kind!r}")
    run_id = validate_id(run_id if run_id is not None else new_run_id(), "eval run id")
    await check_sessions(store, wanted)
    start = RunStart(
        run_id,
        kind,
        wanted,
        tuple(_described(s) for s in scorers),
        criteria,
        experiment,
    )
    sealers = {}
    for session in dict.fromkeys(session for session, _ in wanted):
        sealer = await session_sealer(store, session, keys)
        if sealer is not None:
            sealers[session] = sealer
    writer = await EvalWriter.open(store, run_id, sealers=sealers)
    recorded: dict[tuple[str, str], dict[tuple[int, str], float]] = {}
    before = EvalRunResult(run_id, writer.stream)
    if writer.started:
        before = await read_run(store, run_id, keys=keys)
        _same_run(before, start)
        if writer.completed:
            if signing_key is not None:
                await writer.checkpoint(signing_key)
            return before
        await check_opened(store, wanted, keys)
        for turn in before.turns:
            at = recorded.setdefault((turn.session, turn.line), {})
            at[(turn.turn, turn.scorer)] = turn.score
    else:
        # Every branch is read before the run starts: a missing one is refused with
        # nothing written (each session's main line exists: check_sessions).
        for session, line in wanted:
            if line != MAIN_BRANCH:
                await session_turns(store, session, line=line, keys=keys, from_turn=from_turn)
        await check_opened(store, wanted, keys)
        await writer.start(start)
    earlier = {(s.session, s.line): s for s in before.session_scores}
    for done, (session, line) in enumerate(wanted, 1):
        if writer.session_scored(session, line):
            found = earlier.get((session, line))
            if progress is not None and found is not None:
                progress(
                    LineDone(
                        session, line, found.turns, found.score, found.label, 0, done, len(wanted)
                    )
                )
            continue
        read = await session_turns(
            store, session, line=line, keys=keys, from_turn=from_turn, prices=prices
        )
        new, line_score = await _score_line(
            scorers, read, writer, recorded.get((session, line), {})
        )
        written = await writer.add([*new, line_score])
        if progress is not None:
            progress(
                LineDone(
                    session,
                    line,
                    line_score.turns,
                    line_score.value,
                    line_score.label,
                    written,
                    done,
                    len(wanted),
                )
            )
    stored = await run_events(store, run_id, keys=keys)
    scored = fold_run(run_id, stored)
    if await writer.complete(totals_of(scored)):
        for event in await run_events(store, run_id, keys=keys, after=len(stored)):
            if event.type == EVAL_RUN_COMPLETED:
                scored = completed_with(scored, event)
    if signing_key is not None:
        await writer.checkpoint(signing_key)
    return scored
