"""Recorded support conversations to score, and small scorers, for the eval tests.

:func:`record_support` runs the three turns of :data:`scenarios.TURNS` (a billing question,
a refund with tool calls, thanks) through the SDK's real ``Runner`` with scripted models,
on a journal session: the conversation an eval scores. :class:`AnswerScorer` is a scorer
of the :class:`~agentjournal.evals.scorers.base.Scorer` protocol that checks a turn's answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import kurrent_agent_schema
from kurrent_agent_schema import EVENT_TYPE_BY_NAME

from agentjournal import Journal
from agentjournal.evals.scorers.base import Score
from agentjournal.read.evals.turns import ScoredSession, ScoredTurn
from agentjournal.store.contract import RecordedEvent
from scenarios import TURNS, run_turn


async def record_support(
    journal: Journal,
    session_id: str,
    *,
    app: str = "support",
    user_id: str | None = None,
    turns: int = len(TURNS),
) -> None:
    """Record the support conversation's first ``turns`` turns on ``session_id``."""
    session = journal.session(session_id, app_name=app, user_id=user_id)
    for turn in range(turns):
        await run_turn("run", turn, session)


class AnswerScorer:
    """Scores a turn 1 when its answer holds ``wanted`` (any answer without), else 0;
    with ``whole``, also the whole line: the share of its turns that answered."""

    kind = "rule"

    def __init__(
        self, name: str = "answered", wanted: str | None = None, *, whole: bool = False
    ) -> None:
        self.name = name
        self.version = "1"
        self.wanted = wanted
        self.whole = whole
        self.turns_scored = 0

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version, "kind": self.kind}

    async def score_turn(self, turn: ScoredTurn) -> Score | None:
        self.turns_scored += 1
        hit = bool(turn.output) if self.wanted is None else self.wanted in turn.output
        return Score(1.0 if hit else 0.0, "pass" if hit else "fail", f"answer: {turn.output!r}")

    async def score_session(self, session: ScoredSession) -> Score | None:
        if not self.whole or not session.turns:
            return None
        answered = sum(1 for t in session.turns if t.output)
        return Score(answered / len(session.turns), "", f"{answered} answered")


def assert_schema_events(stream: Sequence[RecordedEvent]) -> None:
    """Every event of an eval run's ``stream`` parses with the schema package's own
    ``from_json`` as the message its type names, with no field the message lacks."""
    for event in stream:
        message_type = EVENT_TYPE_BY_NAME[event.type]
        kurrent_agent_schema.from_json(message_type, event.data.decode())
        fields = {f.name for f in message_type.DESCRIPTOR.fields}
        assert set(json.loads(event.data)) <= fields, event.type
