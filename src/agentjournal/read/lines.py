"""A session's lines as the read tools see them: the main line and its branches.

A branch is a line whose top stream, ``AgentBranch-{session}@{key}``, starts with the
``agentjournal.BranchStarted`` of its fork; its prefix is its parent line as of the cut,
never copied (:mod:`agentjournal.engine.fork`). The tools (``replay --branch``, ``show``,
the viewer) read a line through the functions here, which use the engine's own reads,
so what they print is what ``journal.session(id, branch=B).get_items()`` returns:

* :func:`find_branch` — a branch by name, or a one-line error listing the session's
  branches;
* :func:`line_replay` — the line's items now, or just before one of its items was
  written (``--at``): the line's events (its own tree, then each segment below it as of
  its fork) folded by the engine's timeline up to that item's position;
* :func:`line_records` — the line's own streams as records (its top stream and the
  subsessions opened on it; the prefix lives on the lines below).

Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentjournal import events
from agentjournal.engine.core import SessionCore, open_line
from agentjournal.engine.fork import Branch, cut_position, read_branches, visible_at
from agentjournal.errors import InvalidInput
from agentjournal.records import Record, opened_stream
from agentjournal.streams import MAIN_BRANCH, validate_id
from agentjournal.walk import walk_line

if TYPE_CHECKING:
    from agentjournal.store.contract import EventStore

__all__ = ["find_branch", "line_indexes", "line_path", "line_records", "line_replay"]


async def find_branch(store: EventStore, session_id: str, name: str) -> Branch:
    """The branch ``name`` of the session (deleted ones too: their past stays readable).

    Raises:
        InvalidInput: The session has no branch of that name (the message lists those
            it has).
        StoreUnavailable: The store could not be read.
    """
    branches = await read_branches(store, session_id)
    for branch in branches:
        if branch.name == name:
            return branch
    names = ", ".join(repr(b.name) for b in branches)
    has = f"its branches: {names}" if names else "it has none (agentjournal fork makes one)"
    raise InvalidInput(f"session {session_id} has no branch {name!r}: {has}")


def _core(store: EventStore, session_id: str, branch: Branch) -> SessionCore:
    """The engine's reads of a branch line, from the events (a tool shows the record)."""
    return open_line(store, session_id, branch=branch.name, stream=branch.stream, use_model=False)


async def line_replay(
    store: EventStore,
    session_id: str,
    branch: str,
    *,
    limit: int | None = None,
    at: int | None = None,
) -> list[dict[str, Any]]:
    """A line's items, oldest first: what ``get_items(limit)`` on that line returns now,
    or with ``at`` what it returned just before its item ``at`` was written.

    ``at`` counts as the line's ``get_items`` does: an index below the fork is an item of
    the prefix (the parent's, as of the fork), so right after a fork before #N the branch's
    ``line_replay`` equals the parent's history before #N, and ``line_replay(at=M)`` for
    an own item M of the branch is what an agent on the branch saw before M.

    Args:
        store: The store.
        session_id: The session.
        branch: The line's name (``"main"``: the session itself).
        limit: The newest ``limit`` items only (None: every one).
        at: An item's message index on the line.

    Raises:
        InvalidInput: The session or branch does not exist, ``limit`` is negative, the
            line has no item ``at``, or (without ``at``) the branch was deleted.
        StoreUnavailable: The store could not be read.
    """
    session_id = validate_id(session_id, "session id")
    if limit is not None and limit < 0:
        raise InvalidInput(f"limit must be 0 or more, got {limit}")
    if branch == MAIN_BRANCH:
        from agentjournal.read.replay import replay

        return await replay(store, session_id, limit=limit, at=at)
    found = await find_branch(store, session_id, branch)
    core = _core(store, session_id, found)
    if at is None:
        if found.deleted is not None:
            raise InvalidInput(
                f"branch {branch!r} of session {session_id} was {found.deleted}: it reads "
                "nothing now; --at INDEX replays it as it was before that item"
            )
        return [] if limit == 0 else await core.items(limit)
    # The line's events: its own tree, then each segment below it up to its fork.
    read = await core.reader.line_events()
    by_stream = dict(read)
    try:
        position = cut_position(by_stream, found.stream, "index", at)
    except InvalidInput:
        raise InvalidInput(f"branch {branch!r} of session {session_id} has no item #{at}") from None
    visible = visible_at(
        (event for _, recorded in read for event in recorded), found.stream, position
    )
    if limit is not None:
        visible = visible[max(len(visible) - limit, 0) :] if limit > 0 else []
    return [entry.item() for entry in visible]


async def line_indexes(store: EventStore, session_id: str, branch: Branch) -> list[int]:
    """The message indexes of every item a branch line holds or held, prefix included
    (what its ``--at`` accepts), ascending.

    Raises:
        StoreUnavailable: The store could not be read.
    """
    read = await _core(store, session_id, branch).reader.line_events()
    found: set[int] = set()
    for _, recorded in read:
        for event in recorded:
            index = event.metadata.get(events.INDEX_KEY)
            # An item: a subagent's close and the twin of its opening are none.
            if index is None or not index.isdigit() or event.type == events.SUBAGENT_COMPLETED:
                continue
            if event.type != events.SUBAGENT_STARTED or opened_stream(event) is not None:
                found.add(int(index))
    return sorted(found)


async def line_records(
    store: EventStore, session_id: str, branch: Branch
) -> dict[str, list[Record]]:
    """A branch's own streams as records, stream by stream: its top stream first, then
    the subsessions opened on it (level by level) and the continuations of the subagents
    open at its fork (:func:`~agentjournal.walk.walk_line`); the prefix is not repeated.

    Raises:
        DamagedEvent: The store holds an event of the line it cannot hand out.
        StoreUnavailable: The store could not be read.
    """
    streams: dict[str, Sequence[Record]] = {}
    await walk_line(store, session_id, branch.stream, streams)
    return {name: list(records) for name, records in streams.items()}


async def line_path(store: EventStore, session_id: str, branch: Branch | None) -> list[Record]:
    """Every event a line is made of, in commit order: its own streams, and for a branch
    each line below it up to where the line above leaves it (what its ``get_items``
    folds). ``branch`` None: the main line (its top stream and the subsessions opened on
    it).

    Raises:
        DamagedEvent: The store holds an event of the line it cannot hand out.
        StoreUnavailable: The store could not be read.
    """
    from agentjournal.streams import session_stream

    if branch is None:
        streams: dict[str, Sequence[Record]] = {}
        await walk_line(store, session_id, session_stream(session_id), streams)
        found = [record for records in streams.values() for record in records]
    else:
        read = await _core(store, session_id, branch).reader.line_events()
        found = [Record.of(event) for _, recorded in read for event in recorded]
    found.sort(key=lambda r: (r.position is None, r.position or 0))
    return found
