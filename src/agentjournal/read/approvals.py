"""Approvals that wait for a person, across a store's sessions and their lines.

A session's line knows its own questions (:func:`agentjournal.engine.approvals.approvals`:
those asked on its top stream and its open subagents', without an answer or an output).
Here the lines are found (the catalog's sessions, each session's live branches) and
their pending questions gathered, oldest first. Nothing here writes but the catalog's
saved fold, as ``agentjournal sessions`` does.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentjournal.engine.approvals import Approval
from agentjournal.engine.core import open_line
from agentjournal.engine.fork import read_branches
from agentjournal.streams import MAIN_BRANCH, validate_id

if TYPE_CHECKING:
    from agentjournal.store.contract import EventStore


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A question that waits for an answer, and where.

    Attributes:
        session_id: The session.
        line: ``main`` or the branch the run is on.
        approval: The question (its request id, tool, arguments, agent, stream, time).
    """

    session_id: str
    line: str
    approval: Approval


async def pending_approvals(
    store: EventStore,
    *,
    sessions: Collection[str] | None = None,
    app: str | None = None,
    user: str | None = None,
) -> list[PendingApproval]:
    """Every approval that waits for an answer in ``store``, oldest first.

    Args:
        store: The event store.
        sessions: Only these sessions (each must exist); default every session.
        app: Only sessions of this ``app_name``.
        user: Only sessions of this ``user_id``.

    Raises:
        InvalidInput: A session id is malformed.
        StoreUnavailable: The store could not be read.
    """
    from agentjournal.read.catalog.listing import sessions as catalog_sessions

    wanted = None if sessions is None else {validate_id(s, "session id") for s in sessions}
    found: list[PendingApproval] = []
    for row in await catalog_sessions(store):
        if wanted is not None and row.session_id not in wanted:
            continue
        if (app is not None and row.app != app) or (user is not None and row.user != user):
            continue
        found.extend(await _line_pending(store, row.session_id, MAIN_BRANCH, None))
        for branch in await read_branches(store, row.session_id):
            if branch.deleted is None:
                found.extend(await _line_pending(store, row.session_id, branch.name, branch.stream))
    found.sort(key=lambda p: (p.approval.issued_at, p.session_id, p.line))
    return found


async def _line_pending(
    store: EventStore, session_id: str, line: str, stream: str | None
) -> list[PendingApproval]:
    branch = None if line == MAIN_BRANCH else line
    core = open_line(store, session_id, branch=branch, stream=stream)
    return [PendingApproval(session_id, line, a) for a in await core.approvals() if a.pending]
