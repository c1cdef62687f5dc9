"""Whether an eval run's scores still bind to the turns they judged (:func:`changed_bindings`).

Each ``TurnScored`` records the ``aj.hash`` of its line's last event of the turn it judged
(``extensions.agentjournal.head``). Read against the store, a score whose turn now ends at
another event, or is gone, judged a record the store no longer holds as it was: the session
re-recorded under the same id, a turn written to after it was scored, a score moved onto
another turn. ``agentjournal verify --eval`` reports them (they are no fault of the run's
own record, which verifies by itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentjournal import events
from agentjournal.errors import InvalidInput
from agentjournal.read.evals.turns import session_turns
from agentjournal.records import Record
from agentjournal.store.contract import EventStore


def _bound(record: Record) -> tuple[str, str, int, str, str] | None:
    """(session, line, turn, scorer, head) of a ``TurnScored`` that records its head."""
    body = record.body if record.type == events.TURN_SCORED else None
    extensions = body.get("extensions") if body is not None else None
    facts: Any = extensions.get("agentjournal") if isinstance(extensions, Mapping) else None
    if body is None or not isinstance(facts, Mapping):
        return None
    session, line, turn = body.get("session_id"), facts.get("line"), body.get("turn_index")
    head, scorer = facts.get("head"), facts.get("scorer")
    if not (isinstance(session, str) and isinstance(line, str) and isinstance(head, str)):
        return None
    if isinstance(turn, bool) or not isinstance(turn, int) or not head:
        return None
    return session, line, turn, str(scorer), head


async def changed_bindings(store: EventStore, records: Sequence[Record]) -> tuple[int, list[str]]:
    """How many of the run's ``records`` bind a score to a turn, and those whose turn the
    store now holds otherwise (``session@line turn N (scorer)``), in the run's order.

    Raises:
        StoreError: The store could not be read.
    """
    bound = [found for found in map(_bound, records) if found is not None]
    heads: dict[tuple[str, str], dict[int, str]] = {}
    for session, line, *_ in bound:
        if (session, line) in heads:
            continue
        try:
            read = await session_turns(store, session, line=line)
        except InvalidInput:  # the session or branch is gone
            heads[(session, line)] = {}
            continue
        heads[(session, line)] = {turn.index: turn.head for turn in read.turns}
    changed = [
        f"{session}@{line} turn {turn} ({scorer})"
        for session, line, turn, scorer, head in bound
        if heads[(session, line)].get(turn) != head
    ]
    return len(bound), changed
