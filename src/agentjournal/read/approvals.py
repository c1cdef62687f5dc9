"""The approvals that wait for a person, across the sessions of a store.

Each session's own ``pending_approvals()`` reads the questions on its line's followed
streams (:func:`agentjournal.engine.approvals.approvals`); here that read runs on every
live line (main and each branch not deleted) of every session that may have one. Which
may is the catalog's to say (:mod:`agentjournal.read.catalog`: its rows count each
session's questions neither answered nor run, folded incrementally from the global
order), so a store of thousands of sessions is read once for what is new and only
sessions with such a question are opened. Nothing here writes but the catalog's own save
and :func:`answer`, the one route by which the command line and the viewer record an
answer (through the engine's write, as ``session.approve`` does).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentjournal import events
from agentjournal.engine.approvals import Approval
from agentjournal.engine.core import open_line
from agentjournal.engine.fork import read_branches
from agentjournal.errors import AlreadyResolved, InvalidInput
from agentjournal.streams import MAIN_BRANCH, session_stream, validate_id

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from agentjournal.ledger.keys import SigningKey
    from agentjournal.store.contract import EventStore

__all__ = ["PendingApproval", "UnknownRequest", "answer", "find_request", "pending_approvals"]


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """An approval that waits for an answer, and where.

    Attributes:
        session_id: The session.
        approval: The question (:class:`~agentjournal.engine.approvals.Approval`).
        branch: The line it waits on: ``"main"`` or a branch's name (answer it on a
            session opened with that ``branch=``).
    """

    session_id: str
    approval: Approval
    branch: str = MAIN_BRANCH

    @property
    def arguments(self) -> str:
        """The call's arguments as a reader without the subject's key sees them: ``[sealed]``
        where they are sealed (never the envelope)."""
        from agentjournal.shred.fields import ENVELOPE_PREFIX, SEALED

        shown = self.approval.arguments
        return SEALED if shown.startswith(ENVELOPE_PREFIX) else shown

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready data: where it waits and the question in full."""
        found = self.approval
        return {
            "session_id": self.session_id,
            "branch": self.branch,
            "request_id": found.request_id,
            "agent": found.agent,
            "tool": found.tool_name,
            "arguments": self.arguments,
            "asked_at": found.issued_at.isoformat(),
            "stream": found.stream,
            "revision": found.revision,
            "event_id": found.event_id,
            "authority": dict(found.authority) if found.authority is not None else None,
        }


async def pending_approvals(
    store: EventStore,
    *,
    sessions: Iterable[str] | None = None,
    app: str | None = None,
    user: str | None = None,
) -> list[PendingApproval]:
    """Every approval that waits for an answer, oldest first, across sessions.

    Args:
        store: The store.
        sessions: Only these sessions (each must exist); default every session.
        app: Only sessions whose ``SessionStarted.app_name`` is this.
        user: Only sessions whose ``SessionStarted.user_id`` is this.

    Raises:
        InvalidInput: A session id in ``sessions`` is malformed or not in the store.
        StoreUnavailable: The store could not be read.
    """
    from agentjournal.read.catalog import refresh

    chosen: list[str] | None = None
    if sessions is not None:
        chosen = [validate_id(s, "session id") for s in sessions]
        for session_id in chosen:
            if await store.head(session_stream(session_id)) is None:
                raise InvalidInput(f"no session {session_id!r} in the store: check the id")
    rows = (await refresh(store)).rows
    wanted = set(chosen) if chosen is not None else None
    candidates = [
        row.session_id
        for row in rows
        if row.pending_approvals
        and (wanted is None or row.session_id in wanted)
        and (app is None or row.app == app)
        and (user is None or row.user == user)
    ]
    found: list[PendingApproval] = []
    for session_id in candidates:
        found.extend(await session_pending(store, session_id))
    return sorted(found, key=_order)


async def session_pending(store: EventStore, session_id: str) -> list[PendingApproval]:
    """The pending approvals of one session, on its main line and each live branch, as
    ``journal.session(id, branch=B).pending_approvals()`` sees them."""
    found: list[PendingApproval] = []
    for branch, stream in await _live_lines(store, session_id):
        name = branch if branch is not None else MAIN_BRANCH
        pending = await line_pending(store, session_id, branch=branch, stream=stream)
        found += [PendingApproval(session_id, a, name) for a in pending]
    return found


async def line_pending(
    store: EventStore, session_id: str, *, branch: str | None = None, stream: str | None = None
) -> list[Approval]:
    """The approvals that wait on one line (``branch`` None: main; ``stream``: its top
    stream, when known), oldest first: exactly ``session.pending_approvals()`` there
    (asked on the line's followed streams, neither answered nor run)."""
    core = open_line(store, session_id, branch=branch, stream=stream)
    return [a for a in await core.approvals() if a.pending]


async def _live_lines(store: EventStore, session_id: str) -> list[tuple[str | None, str]]:
    """The session's main line (None) and each branch not deleted, with its top stream."""
    lines: list[tuple[str | None, str]] = [(None, session_stream(session_id))]
    lines += [(b.name, b.stream) for b in await read_branches(store, session_id) if not b.deleted]
    return lines


def _order(pending: PendingApproval) -> tuple[Any, ...]:
    found = pending.approval
    return (found.issued_at, pending.session_id, found.stream, found.revision)


async def find_request(
    store: EventStore, session_id: str, request_id: str, *, branch: str | None = None
) -> tuple[str | None, str, Approval, bool] | None:
    """Where ``request_id`` was asked in the session: the line (branch name, None for
    main), its top stream, the newest question with that id, and whether it waits there;
    one that still waits first (on the line's followed streams), else one answered, run,
    or asked by a subagent that has ended (on any stream of the line); None when no live
    line of the session asked it. ``branch`` looks on that line only (``"main"`` for the
    main line).

    Raises:
        InvalidInput: ``branch`` names no live branch of the session.
    """
    from agentjournal.walk import walk_tree

    lines = await _live_lines(store, session_id)
    if branch is not None:
        wanted = None if branch == MAIN_BRANCH else branch
        lines = [line for line in lines if line[0] == wanted]
        if not lines:
            raise InvalidInput(f"session {session_id} has no live branch {branch!r}")
    for branch, stream in lines:
        core = open_line(store, session_id, branch=branch, stream=stream)
        waiting = [a for a in await core.approvals() if a.request_id == request_id and a.pending]
        if waiting:
            return branch, stream, waiting[-1], True
    for branch, stream in lines:
        core = open_line(store, session_id, branch=branch, stream=stream)
        streams = [name async for name, _ in walk_tree(store, stream)]
        asked = [a for a in await core.approvals(streams) if a.request_id == request_id]
        if asked:
            return branch, stream, asked[-1], False
    return None


class UnknownRequest(InvalidInput):
    """No live line of the session asked the approval request (the viewer's 404)."""


async def answer(
    store: EventStore,
    session_id: str,
    request_id: str,
    *,
    branch: str | None,
    approve: bool,
    by: str,
    reason: str,
    key: Ed25519PrivateKey | SigningKey | None = None,
    signing_key: SigningKey | None = None,
) -> tuple[str | None, events.ApprovalDecided]:
    """Answer an approval from outside the application (the command line, the viewer):
    find the line that asked ``request_id`` (:func:`find_request`), refuse what no longer
    waits, and record the answer through the engine's own write
    (:func:`~agentjournal.engine.approvals.resolve`, as ``session.approve`` does), which
    checks it against every policy the session recorded.

    Args:
        store: The store.
        session_id: The session (it exists).
        request_id: The request (the call's id).
        branch: The line to look on (``"main"`` or a branch's name); None: the one where
            it waits.
        approve: Approve (True) or reject.
        by: Who decides.
        reason: Why.
        key: The approver's key: the answer is signed with it.
        signing_key: The store's signing key for the write's chain (None: unsigned).

    Returns:
        The line it was answered on (None: main) and the answer as written.

    Raises:
        UnknownRequest: No live line (of ``branch``) asked ``request_id``.
        AlreadyResolved: It was answered already (naming who answered).
        InvalidInput: Its call has run, it was asked by a subagent that has ended, the
            branch is unknown, ``by`` is empty, or a recorded policy does not read.
        ApproverNotAllowed: A policy of the session names approvers for the tool and
            ``key`` is none of theirs (or there is none).
    """
    found = await find_request(store, session_id, request_id, branch=branch)
    if found is None:
        on = "" if branch is None or branch == MAIN_BRANCH else f" on branch {branch!r}"
        raise UnknownRequest(f"no approval request {request_id[:80]!r} in session {session_id}{on}")
    line, stream, asked, waits = found
    if asked.decision is not None:
        raise AlreadyResolved(asked.request_id, asked.decision.outcome, asked.decision.by)
    if asked.ran:
        raise InvalidInput(f"approval request {request_id[:80]!r} is settled: its call has run")
    if not waits:  # neither answered nor run, on a stream the line no longer follows
        raise InvalidInput(
            f"approval request {request_id[:80]!r} was asked by a subagent that has ended: "
            "it no longer waits"
        )
    core = open_line(store, session_id, branch=line, stream=stream, signing_key=signing_key)
    decided = await core.resolve(
        request_id, approve=approve, by=by, reason=reason, trace={}, key=key
    )
    return line, decided
