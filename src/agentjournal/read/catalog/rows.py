"""The catalog's rows: a session tree, and each of its branches, as ``agentjournal sessions``
lists them (frozen records, with their JSON form)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentjournal.ledger.integrity import Integrity


@dataclass(frozen=True)
class BranchRow:
    """One branch of a session in the catalog.

    Attributes:
        name: The branch's name.
        stream: Its top stream, ``AgentBranch-{session}@{key}``.
        parent: Its parent line's name (``main`` or a branch's).
        at: Its cut as ``BranchForked`` recorded it: ``kind`` (``index``, ``turn`` or
            ``revision``), ``value`` and ``position``.
        items: How many items ``get_items()`` on the branch returns: the items it shares
            with its parent (``prefix_items``), plus its own item events, less its pops,
            reset by its clears.
        last: When its line was last written (UTC; the fork's time until it is).
        deleted: ``deleted`` or ``cleared`` once it was, else None.
    """

    name: str
    stream: str
    parent: str
    at: Mapping[str, Any]
    items: int
    last: datetime
    deleted: str | None

    def as_dict(self) -> dict[str, Any]:
        """The branch as JSON-ready data (times in RFC 3339)."""
        return {
            "name": self.name,
            "stream": self.stream,
            "parent": self.parent,
            "at": dict(self.at),
            "items": self.items,
            "last": self.last.isoformat(),
            "deleted": self.deleted,
        }


@dataclass(frozen=True)
class ScoreMark:
    """A score of a session the catalog keeps: its latest ``SessionScored``, or the newest
    ``TurnScored`` a person gave (a rating).

    Attributes:
        run: The eval run that holds it (``EvalRun-{run}``).
        score: The score, from 0 to 1.
        label: Its label (``pass``/``fail`` for a session's score; a rating's own).
        line: The line scored: ``main`` or a branch's name.
        at: When it was recorded (UTC).
        turn: A rating's turn (None: a session's score).
        scorer: A rating's scorer (``human`` unless it says otherwise).
        by: Who gave a rating, when recorded.
    """

    run: str
    score: float
    label: str
    line: str
    at: datetime
    turn: int | None = None
    scorer: str = ""
    by: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The mark as JSON-ready data (its time in RFC 3339); a session's score has no
        turn, scorer or author."""
        out: dict[str, Any] = {
            "run": self.run,
            "score": self.score,
            "label": self.label,
            "line": self.line,
            "at": self.at.isoformat(),
        }
        if self.turn is not None:
            out.update(turn=self.turn, scorer=self.scorer, by=self.by)
        return out


@dataclass(frozen=True)
class SessionRow:
    """One session tree in the catalog.

    Attributes:
        session_id: The session.
        app: ``SessionStarted.app_name`` (empty when none was given).
        user: ``SessionStarted.user_id``.
        agent: The first agent: ``SessionStarted.agent_name``, else the first agent that
            handed off, was granted authority, was judged by a guardrail or called a model.
        items: How many items ``get_items()`` returns: item events, less pops, reset by clears.
        subagents_open: Subagents started and not completed, on every line. A subagent
            open at a fork goes on on the branch in a continuation: the same subagent,
            counted once where it started (its close on the branch counts for none).
        subagents_closed: Subagents completed with outcome ``success``.
        subagents_failed: Subagents completed with outcome ``error`` or ``cancelled``.
        guardrail_blocks: ``GuardrailDecided`` events with decision ``BLOCK``.
        refusals: ``AuthorityRefused`` events.
        tokens: Total tokens: the sum of ``ModelResponded`` usage; for a session written
            before that event existed, the ``$usage`` of assistant events, once per
            ``aj.response_id``.
        first_activity: When its first event was recorded (UTC).
        last_activity: When its last event was recorded (UTC).
        integrity: What the cheap ledger check found, in one of the four states
            (:class:`~agentjournal.ledger.integrity.Integrity`): every event's chain link
            and hash, and the newest checkpoint's place, heads and signature. ``verify``
            is the full check.
        checked_at: When the catalog last folded (and so checked) an event of the
            session: an event changed in place after it is seen only by a fold from the
            start (``sessions --fresh``) or by ``verify``.
        branches: The session's branches, in the order they were forked (deleted ones
            too). Every other count is the whole session's, every line together, except
            ``items``, which is the main line's.
        pending_approvals: Function tool calls that wait for a person's approval, on
            every line: asked (``InterruptIssued``), not answered (``InterruptResolved``)
            and not run (no output of the call on the question's stream).
        score: Its latest score: the newest ``SessionScored`` of any eval run, any line
            (None: never scored).
        rating: The newest score a person gave one of its turns (None: none).
        eval_runs: The eval runs that scored it, oldest first.
    """

    session_id: str
    app: str
    user: str
    agent: str
    items: int
    subagents_open: int
    subagents_closed: int
    subagents_failed: int
    guardrail_blocks: int
    refusals: int
    tokens: int
    first_activity: datetime
    last_activity: datetime
    integrity: Integrity
    checked_at: datetime
    branches: tuple[BranchRow, ...] = ()
    pending_approvals: int = 0
    score: ScoreMark | None = None
    rating: ScoreMark | None = None
    eval_runs: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data (times in RFC 3339)."""
        return {
            "session_id": self.session_id,
            "app": self.app,
            "user": self.user,
            "agent": self.agent,
            "items": self.items,
            "subagents": {
                "open": self.subagents_open,
                "closed": self.subagents_closed,
                "failed": self.subagents_failed,
            },
            "guardrail_blocks": self.guardrail_blocks,
            "refusals": self.refusals,
            "tokens": self.tokens,
            "first_activity": self.first_activity.isoformat(),
            "last_activity": self.last_activity.isoformat(),
            "integrity": {**self.integrity.as_dict(), "checked_at": self.checked_at.isoformat()},
            "branches": [branch.as_dict() for branch in self.branches],
            "pending_approvals": self.pending_approvals,
            "score": self.score.as_dict() if self.score is not None else None,
            "rating": self.rating.as_dict() if self.rating is not None else None,
            "eval_runs": list(self.eval_runs),
        }
