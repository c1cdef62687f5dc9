"""Scored sessions for the readers' tests: real runs, and eval runs written on them.

:func:`run_session` runs turns of :data:`scenarios.TURNS` through the SDK's real
``Runner`` into a journal session. :func:`write_run` writes one eval run's stream in the
shared event format (``EvalRunStarted``, a ``TurnScored`` per score, a ``SessionScored``
per session line, ``EvalRunCompleted``), chained like every stream, with deterministic
event ids; :func:`write_rating` records a person's rating on the session's feedback run.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.struct_pb2 import Struct
from kurrent_agent_schema import (
    EvalRunCompleted,
    EvalRunStarted,
    SessionScored,
    TurnScored,
    to_json,
)

from agentjournal import Journal, events
from agentjournal.engine.writer import append_chained
from agentjournal.errors import StreamNotFound
from agentjournal.ledger.chain import HASH_KEY
from agentjournal.store.contract import EventStore
from agentjournal.streams import eval_run_stream, feedback_run_id
from scenarios import run_turn

_NAMESPACE = uuid.UUID("8a1f4c52-0d7e-4f4b-9c61-2b0d0f7c1e11")


async def run_session(uri: str, session_id: str, turns: int = 2) -> None:
    """Run the first ``turns`` turns of the billing scenario into ``session_id``."""
    async with Journal.open(uri) as journal:
        session = journal.session(session_id, app_name="evals", user_id="u1")
        for turn in range(turns):
            await run_turn("run", turn, session)


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


def _ext(data: dict[str, Any]) -> dict[str, Struct]:
    struct = Struct()
    struct.update(data)
    return {"agentjournal": struct}


async def _append(store: EventStore, run_id: str, type_: str, body: str, what: str) -> None:
    stream = eval_run_stream(run_id)
    event_id = uuid.uuid5(_NAMESPACE, f"{run_id}\n{what}")
    await append_chained(store, stream, type_, body.encode(), event_id)


async def _head(store: EventStore, session: str) -> str:
    try:
        tail = await store.read(f"AgentSession-{session}", backwards=True, limit=1)
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
) -> None:
    """Write eval run ``run_id`` scoring ``given`` (see the module docs); with
    ``complete`` False it stops before the sessions' scores and the completion."""
    lines = list(dict.fromkeys((g.session, g.line) for g in given))
    scorers = list(dict.fromkeys(g.scorer for g in given))
    sessions = {s for s, _ in lines}
    started = EvalRunStarted(
        session_id=next(iter(sessions)) if len(sessions) == 1 else "",
        scorer=",".join(scorers),
        criteria="sha256:" + "0" * 64,
        extensions=_ext(
            {
                "run_id": run_id,
                "kind": "eval",
                "sessions": [{"session": s, "line": line} for s, line in lines],
                "scorers": [{"name": name, "version": "1", "kind": "rule"} for name in scorers],
            }
        ),
    )
    await _append(store, run_id, events.EVAL_RUN_STARTED, to_json(started), "started")
    for g in given:
        scored = TurnScored(
            session_id=g.session,
            turn_index=g.turn,
            input=g.input,
            output=g.output,
            score=g.score,
            score_label=g.label,
            reason=g.reason,
            extensions=_ext(
                {
                    "scorer": g.scorer,
                    "version": "1",
                    "line": g.line,
                    "head": await _head(store, g.session),
                    "human": False,
                }
            ),
        )
        what = f"turn\n{g.session}\n{g.line}\n{g.turn}\n{g.scorer}"
        await _append(store, run_id, events.TURN_SCORED, to_json(scored), what)
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
        body = SessionScored(
            session_id=session,
            score=score,
            score_label=label,
            reason=f"{len(mine)} scores",
            extensions=_ext(
                {
                    "line": line,
                    "by_scorer": dict.fromkeys({g.scorer for g in mine}, score),
                    "turns": len({g.turn for g in mine}),
                }
            ),
        )
        await _append(
            store, run_id, events.SESSION_SCORED, to_json(body), f"session\n{session}\n{line}"
        )
    average = sum(g.score for g in given) / len(given)
    completed = EvalRunCompleted(
        session_id=started.session_id,
        turns_scored=len(given),
        average_score=average,
        total_cost=0.0,
        extensions=_ext(
            {"by_scorer": {}, "by_line": means, "judge": {}, "sessions": len(sessions)}
        ),
    )
    await _append(store, run_id, events.EVAL_RUN_COMPLETED, to_json(completed), "completed")


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
) -> None:
    """A person's rating of a turn, on the session's feedback run."""
    run_id = feedback_run_id(session)
    stream = eval_run_stream(run_id)
    if await store.head(stream) is None:
        started = EvalRunStarted(
            session_id=session,
            scorer="human",
            extensions=_ext(
                {
                    "run_id": run_id,
                    "kind": "feedback",
                    "sessions": [{"session": session, "line": "main"}],
                    "scorers": [{"name": "human", "version": "1", "kind": "human"}],
                }
            ),
        )
        await _append(store, run_id, events.EVAL_RUN_STARTED, to_json(started), "started")
    rated = TurnScored(
        session_id=session,
        turn_index=turn,
        score=score,
        score_label=label,
        reason=reason,
        extensions=_ext(
            {
                "scorer": "human",
                "version": "1",
                "line": "main",
                "head": await _head(store, session),
                "human": True,
                "by": by,
            }
        ),
    )
    await _append(store, run_id, events.TURN_SCORED, to_json(rated), f"rating\n{rating_id}")


def body_of(data: bytes) -> dict[str, Any]:
    """An event's JSON body."""
    found: dict[str, Any] = json.loads(data)
    return found
