"""Scored sessions for the readers' tests: real runs, and eval runs written on them.

:func:`run_session` runs turns of :data:`scenarios.TURNS` through the SDK's real
``Runner`` into a journal session. :func:`write_run` writes one eval run's stream in the
shared event format with the one writer of eval runs (``EvalRunStarted``, a ``TurnScored`` per
score, a ``SessionScored`` per session line, ``EvalRunCompleted``); :func:`write_rating`
records a person's rating on the session's feedback run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentjournal import Journal
from agentjournal.engine.eval_events import RunStart, RunTotals, SessionScore, TurnScore
from agentjournal.engine.evals import EvalWriter, record_rating
from agentjournal.errors import StreamNotFound
from agentjournal.ledger.chain import HASH_KEY
from agentjournal.shred.sealing import SubjectSealer
from agentjournal.store.contract import EventStore
from agentjournal.streams import session_stream
from scenarios import run_turn


async def run_session(uri: str, session_id: str, turns: int = 2) -> None:
    """Run the first ``turns`` turns of the billing scenario into ``session_id``."""
    async with Journal.open(uri) as journal:
        session = journal.session(session_id, app_name="evals", user_id="u1")
        for turn in range(turns):
            await run_turn("run", turn, session)


async def run_branched(uri: str, session_id: str) -> None:
    """Two turns on main, then branch ``alt`` forked before turn 2 with its own turn 2."""
    async with Journal.open(uri) as journal:
        session = journal.session(session_id, app_name="evals", user_id="u1")
        await run_turn("run", 0, session)
        await run_turn("run", 1, session)
        await session.create_branch_from_turn(2, "alt")
        await run_turn("run", 2, session)


@dataclass(frozen=True)
class Given:
    """One score to write: a scorer's score of one turn of one session line."""

    session: str
    turn: int
    scorer: str
    score: float
    label: str
    reason: str = ""
    line: str = "main"
    input: str = ""
    output: str = ""


async def _head(store: EventStore, session: str) -> str:
    try:
        tail = await store.read(session_stream(session), backwards=True, limit=1)
    except StreamNotFound:
        return ""
    return tail[0].metadata.get(HASH_KEY, "") if tail else ""


async def write_run(
    store: EventStore,
    run_id: str,
    given: Sequence[Given],
    *,
    complete: bool = True,
    by_session: dict[tuple[str, str], tuple[float, str]] | None = None,
    sealers: Mapping[str, SubjectSealer] | None = None,
) -> None:
    """Write eval run ``run_id`` scoring ``given`` with the one writer of eval runs (see
    the module docs); with ``complete`` False it stops before the sessions' scores and
    the completion. ``by_session`` overrides a line's (score, label); ``sealers`` seal a
    session's scores' content."""
    lines = tuple(dict.fromkeys((g.session, g.line) for g in given))
    scorers = tuple(
        {"name": name, "version": "1", "kind": "rule"}
        for name in dict.fromkeys(g.scorer for g in given)
    )
    writer = await EvalWriter.open(store, run_id, sealers=sealers)
    await writer.start(RunStart(run_id, "eval", lines, scorers, "sha256:" + "0" * 64))
    await writer.add(
        [
            TurnScore(
                session=g.session,
                line=g.line,
                turn=g.turn,
                scorer=g.scorer,
                version="1",
                value=g.score,
                label=g.label,
                reason=g.reason,
                input=g.input,
                output=g.output,
                head=await _head(store, g.session),
            )
            for g in given
        ]
    )
    if not complete:
        return
    means: dict[str, float] = {}
    for session, line in lines:
        mine = [g for g in given if (g.session, g.line) == (session, line)]
        mean = sum(g.score for g in mine) / len(mine)
        score, label = (by_session or {}).get(
            (session, line), (mean, "pass" if mean >= 0.5 else "fail")
        )
        means[line] = score
        await writer.add(
            [
                SessionScore(
                    session=session,
                    line=line,
                    value=score,
                    label=label,
                    reason=f"{len(mine)} scores",
                    by_scorer=dict.fromkeys({g.scorer for g in mine}, score),
                    turns=len({g.turn for g in mine}),
                )
            ]
        )
    await writer.complete(
        RunTotals(
            session_id=RunStart(run_id, "eval", lines, scorers).session_id,
            turns_scored=len(given),
            average=sum(g.score for g in given) / len(given),
            total_cost=0.0,
            by_scorer={},
            by_line=means,
            judge={},
            sessions=len(lines),
        )
    )


async def write_rating(
    store: EventStore,
    session: str,
    turn: int,
    score: float,
    *,
    by: str,
    label: str = "",
    reason: str = "",
    rating_id: str = "r1",
    sealer: SubjectSealer | None = None,
) -> None:
    """A person's rating of a turn, on the session's feedback run."""
    rating = TurnScore(
        session=session,
        line="main",
        turn=turn,
        scorer="human",
        version="1",
        value=score,
        label=label,
        reason=reason,
        head=await _head(store, session),
        human=True,
        by=by,
        rating=rating_id,
    )
    await record_rating(store, rating, sealer=sealer)


def body_of(data: bytes) -> dict[str, Any]:
    """An event's JSON body."""
    found: dict[str, Any] = json.loads(data)
    return found
