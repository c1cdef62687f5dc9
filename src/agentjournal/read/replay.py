"""What the SDK got back, then and now: a stored session's flat history (no writes).

:func:`replay` is the session's own ``get_items(limit)``: the read path a
``journal.session(id)`` uses (:class:`~agentjournal.engine.core.SessionCore`, which
``JournalSession.get_items`` calls after resolving the limit), without the Agents SDK.
Reading writes nothing (``SessionStarted`` is written with a session's first items).

:func:`history_before` is the history as it was just before one item was written:
the session tree's events committed before that item, folded by the engine's own
timeline (the same code ``get_items`` folds with), so pops and clears written
before it are honoured and nothing after it counts.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from agentjournal import events
from agentjournal.engine.core import open_line
from agentjournal.engine.fork import read_branches, visible_at
from agentjournal.errors import InvalidInput
from agentjournal.records import Record, TreeRecords
from agentjournal.store.abilities import abilities_of
from agentjournal.store.contract import RecordedEvent
from agentjournal.streams import (
    KEYS_STREAM,
    authority_stream,
    ledger_stream,
    session_stream,
    validate_id,
)
from agentjournal.walk import read_tree

if TYPE_CHECKING:
    from agentjournal.store.contract import EventStore

__all__ = ["history_before", "check_read_model", "replay"]


async def replay(
    store: EventStore, session_id: str, *, limit: int | None = None, at: int | None = None
) -> list[dict[str, Any]]:
    """The session's items, oldest first: what ``get_items(limit)`` returns now, or with
    ``at`` what it returned just before the item with message index ``at`` was written.

    Raises:
        InvalidInput: The session does not exist, ``limit`` is negative, or it has no
            item ``at``.
        StoreUnavailable: The store could not be read.
    """
    session_id = validate_id(session_id, "session id")
    if limit is not None and limit < 0:
        raise InvalidInput(f"limit must be 0 or more, got {limit}")
    if at is not None:
        return history_before(await read_tree(store, session_id), at, limit=limit)
    if limit == 0:
        return []  # as get_items(limit=0), which reads nothing
    # The session's own read path without the SDK adapter (JournalSession.get_items
    # resolves the limit and calls exactly this): no SDK import, nothing written. From
    # the events, never a store's read model: a tool shows what was recorded.
    return await open_line(store, session_id, use_model=False).items(limit)


async def check_read_model(store: EventStore, session_id: str) -> tuple[str, str | None] | None:
    """Whether the store's read model of the session's items holds exactly its events'
    items, on the main line and on every branch (DESIGN, "Branches").

    ``get_items`` answers a cold read of everything from a store's read model (SQLite,
    DESIGN, "SQLite store") when the model is current; the events are the record. A model edited
    behind the engine's back would hand an agent items that are not on the record, so
    ``agentjournal verify`` reads both and compares them item by item (exact JSON text:
    key order, ``1`` against ``1.0``), line by line: a branch's model starts as a copy of
    its parent's rows, so a copy that was wrong would show here too.

    Returns:
        None when the store keeps no read model; else a line for the report and the
        problem found (None: none). A model that is not current is never read.

    Raises:
        StoreUnavailable: The store could not be read.
    """
    if abilities_of(store).read_model is None:
        return None
    branches = await read_branches(store, session_id)
    lines: list[tuple[str | None, str]] = [(None, session_stream(session_id))]
    lines.extend((branch.name, branch.stream) for branch in branches if branch.deleted is None)
    counted: list[str] = []
    behind: list[str] = []
    for branch in branches:
        if branch.deleted is None:
            continue
        # A deleted (or cleared) line reads nothing: its model, if current, holds no item.
        snapshot = await store.read_model(branch.stream)  # type: ignore[attr-defined]
        if snapshot is not None and len(snapshot.items):
            return (
                "read model: FAILED",
                f"the store's read model of branch {branch.name!r}, {branch.deleted}, holds "
                f"{len(snapshot.items)} items: get_items would give an agent what is not on "
                "the record",
            )
    for name, stream in lines:
        label = "main" if name is None else f"branch {name!r}"
        if await store.read_model(stream) is None:  # type: ignore[attr-defined]
            behind.append(label)
            continue
        try:
            from_model = await open_line(store, session_id, branch=name, stream=stream).items(None)
        except ValueError:  # an item's text is no JSON: edited by hand
            where = "" if name is None else f" of {label}"
            return (
                "read model: FAILED",
                f"the store's read model{where} holds an item that is not JSON: get_items "
                "would give an agent what is not on the record",
            )
        from_events = await open_line(
            store, session_id, branch=name, stream=stream, use_model=False
        ).items(None)
        told = [json.dumps(item) for item in from_model]
        recorded = [json.dumps(item) for item in from_events]
        if told != recorded:
            where = "" if name is None else f" of {label}"
            index = next(
                (
                    n
                    for n, (one, other) in enumerate(zip(told, recorded, strict=False))
                    if one != other
                ),
                None,
            )
            if index is not None:
                problem = f"the store's read model{where} differs from the events at item {index}"
            else:
                problem = (
                    f"the store's read model{where} holds {len(told)} items, "
                    f"the events {len(recorded)}"
                )
            return (
                "read model: FAILED",
                f"{problem}: get_items would give an agent what is not on the record",
            )
        counted.append(f"{len(told)} items" if len(lines) == 1 else f"{len(told)} on {label}")
    if not counted:
        return "read model: not current for this session (get_items reads the events)", None
    text = f"read model: {', '.join(counted)}, exactly the events' items"
    if behind:
        text += f"; not current (read from the events): {', '.join(behind)}"
    return text, None


def history_before(
    tree: TreeRecords, index: int, *, limit: int | None = None
) -> list[dict[str, Any]]:
    """The items ``get_items(limit)`` returned just before item ``index`` was written (pure).

    The cut is the item's event: the items written before it by the same ``add_items``
    are included (the store does not say which events one append wrote).

    Raises:
        InvalidInput: The tree has no item with message index ``index``.
    """
    # The main line only: branches share its message indexes below their forks.
    tree = tree.main_line()
    logs = {authority_stream(tree.session_id), ledger_stream(tree.session_id), KEYS_STREAM}
    streams = {name: records for name, records in tree.streams.items() if name not in logs}
    target = next(
        (
            record
            for records in streams.values()
            for record in records
            if record.metadata.get(events.INDEX_KEY) == str(index) and _is_item(record)
        ),
        None,
    )
    if target is None or target.position is None:
        raise InvalidInput(f"session {tree.session_id} has no item #{index}")
    before = [
        _recorded(record)
        for records in streams.values()
        for record in records
        if record.position is not None and record.position < target.position
    ]
    visible = visible_at(before, tree.session_stream, target.position)
    if limit is not None:
        visible = visible[max(len(visible) - limit, 0) :] if limit > 0 else []
    return [entry.item() for entry in visible]


def _is_item(record: Record) -> bool:
    if record.type == events.SUBAGENT_STARTED:
        return record.opens is not None
    return record.type != events.SUBAGENT_COMPLETED


def _recorded(record: Record) -> RecordedEvent:
    """A record as the engine reads events (the records come from the store)."""
    assert record.data is not None
    assert record.position is not None
    assert record.recorded_at is not None
    return RecordedEvent(
        id=uuid.UUID(record.id),
        type=record.type,
        data=record.data.encode(),
        metadata=record.metadata,
        stream=record.stream,
        revision=record.revision,
        position=record.position,
        recorded_at=record.recorded_at,
    )
