"""The events of branch lines: forks, continuations, ends, the branch registry, line guards,
and usage booked on a turn."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from agentjournal.errors import CodecError
from agentjournal.events._codec import (
    COUNT,
    EVENT_ID,
    OPTIONAL_TEXT,
    TEXT,
    TEXT_OR_EMPTY,
    Event,
    at_least,
    mapping,
    one_of,
    present,
    wire,
)
from agentjournal.events._names import (
    BRANCH_ADDED,
    BRANCH_DELETED,
    BRANCH_FORKED,
    BRANCH_REMOVED,
    BRANCH_STARTED,
    LINE_GUARDED,
    SUBAGENT_CONTINUED,
    TURN_USAGE,
)
from agentjournal.events._places import (
    CUT,
    ITEM_PLACE,
    OPTIONAL_PLACE,
    PLACE,
    PLACES,
    Cut,
    ItemPlace,
    StreamPlace,
)

DELETE_REASONS: Final = ("deleted", "cleared")


def _stream_map(body: Mapping[str, Any], key: str, type_: str) -> dict[str, str]:
    value = mapping(body, key, type_)
    if not all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in value.items()):
        raise CodecError(f"{type_}: {key} must map streams to streams")
    return dict(value)


@dataclass(frozen=True, slots=True)
class BranchForked(Event):
    """``agentjournal.BranchForked``: a branch left this line (on the parent line's top stream).

    Attributes:
        session_id: The session.
        branch: The branch's name (any non-blank text).
        branch_stream: Its top stream (``BranchStarted`` at revision 0).
        parent: The parent line's name (``"main"`` or a branch's).
        cut: Where it leaves the parent line.
        base: The parent line's last event before the cut on its top stream, then on each
            subagent open there (the ``aj.open`` chain, outermost first).
        authority: The parent line's authority log's last event before the cut, or None.
        next_index: The next free message index at the cut (the branch's first own item's).
        prefix_items: How many items were visible on the parent line at the cut.
    """

    session_id: str = field(metadata=TEXT)
    branch: str = field(metadata=TEXT)
    branch_stream: str = field(metadata=TEXT)
    parent: str = field(metadata=TEXT)
    cut: Cut = field(metadata=CUT)
    base: tuple[StreamPlace, ...] = field(metadata=PLACES)
    authority: StreamPlace | None = field(metadata=OPTIONAL_PLACE)
    next_index: int = field(metadata=COUNT)
    prefix_items: int = field(metadata=COUNT)

    EVENT_TYPE = BRANCH_FORKED
    READ_FIRST: ClassVar[tuple[str, ...]] = ("base", "authority")


@dataclass(frozen=True, slots=True)
class BranchStarted(BranchForked):
    """``agentjournal.BranchStarted``: revision 0 of a branch's top stream, the twin of its
    ``BranchForked``, with the same fields and ``continuations``.

    A reader meeting it going backwards carries on in the parent line below the base
    revisions, as if the prefix were the older part of this stream.

    Attributes:
        continuations: Each subagent open at the cut (its subsession stream) -> the
            stream that continues it on the branch (``SubagentContinued`` at revision 0).
    """

    continuations: Mapping[str, str] = field(
        default_factory=dict, metadata=wire(_stream_map, write=dict)
    )

    EVENT_TYPE = BRANCH_STARTED
    READ_FIRST = ("continuations", *BranchForked.READ_FIRST)


@dataclass(frozen=True, slots=True)
class SubagentContinued(Event):
    """``agentjournal.SubagentContinued``: revision 0 of a continuation stream, which carries a
    subagent open at a fork on the branch (its readers go on in ``continues`` below it).

    Attributes:
        agent_id: The continuation's agent id (:func:`agentjournal.streams.continuation_id`).
        agent_type: The agent's name (as on the original ``SubagentStarted``).
        source_agent: The agent that handed off (as on the original).
        call_id: The handoff's call id (as on the original).
        subsession_stream: This stream.
        parent_stream: The stream of the agent that handed off, on the branch's side.
        continues: The original subsession's last event before the cut.
        granted_authority: The original's granted authority (JSON form), or None.
    """

    agent_id: str = field(metadata=TEXT)
    agent_type: str = field(metadata=TEXT_OR_EMPTY)
    source_agent: str = field(metadata=TEXT_OR_EMPTY)
    call_id: str = field(metadata=TEXT_OR_EMPTY)
    subsession_stream: str = field(metadata=TEXT)
    parent_stream: str = field(metadata=TEXT)
    continues: StreamPlace = field(metadata=PLACE)
    granted_authority: Any = field(metadata=wire(present))

    EVENT_TYPE = SUBAGENT_CONTINUED
    READ_FIRST = ("granted_authority",)


@dataclass(frozen=True, slots=True)
class BranchDeleted(Event):
    """``agentjournal.BranchDeleted``: the branch was deleted or cleared (on its top stream).

    It folds as a clear of everything on the line; nothing is written to it afterwards.

    Attributes:
        branch: The branch's name.
        reason: ``deleted`` (``delete_branch``) or ``cleared`` (``clear_session``).
        through_index: The highest message index it hides (-1: none existed).
    """

    branch: str = field(metadata=TEXT)
    reason: str = field(metadata=wire(one_of(DELETE_REASONS)))
    through_index: int = field(metadata=wire(at_least(-1)))

    EVENT_TYPE = BRANCH_DELETED
    READ_FIRST = ("reason",)


@dataclass(frozen=True, slots=True)
class BranchAdded(Event):
    """``agentjournal.BranchAdded``: an entry of the session's branch registry
    (``AgentBranches-{session_id}``): a branch was forked.

    Attributes:
        branch: Its name.
        stream: Its top stream.
        parent: Its parent line's name.
        event: The id of its ``BranchStarted`` (``BranchRemoved``: of its ``BranchDeleted``).
    """

    branch: str = field(metadata=TEXT)
    stream: str = field(metadata=TEXT)
    parent: str = field(metadata=TEXT)
    event: str = field(metadata=EVENT_ID)

    EVENT_TYPE = BRANCH_ADDED
    READ_FIRST = ("event",)


@dataclass(frozen=True, slots=True)
class BranchRemoved(BranchAdded):
    """``agentjournal.BranchRemoved``: a registry entry saying a branch was deleted or cleared
    (``event`` is its ``BranchDeleted``'s id)."""

    EVENT_TYPE = BRANCH_REMOVED


@dataclass(frozen=True, slots=True)
class LineGuarded(Event):
    """``agentjournal.LineGuarded``: holds nothing; it makes a write expect the exact head of
    a line's top stream it has nothing else to append to.

    KurrentDB's multi-stream append refuses a stream without events, so an expected
    revision alone cannot join a transaction: this event is that expectation. Written at
    the line's head in the same transaction as the event it guards, each naming the other
    (``aj.twin``): by ``clear_session`` when its ``SessionCleared`` lands on a subagent's
    stream (on main's top stream, where every fork of main writes its ``BranchForked``),
    and by ``reset_authority`` on a branch (on the branch's top stream, where its end
    writes ``BranchDeleted``). A racing fork or end conflicts, and the write plans again.

    Attributes:
        event: The id of the event it guards.
        stream: That event's stream.
    """

    event: str = field(metadata=EVENT_ID)
    stream: str = field(metadata=TEXT)

    EVENT_TYPE = LINE_GUARDED


@dataclass(frozen=True, slots=True)
class TurnUsage(Event):
    """``agentjournal.TurnUsage``: a run's usage booked on a turn (``store_run_usage``), on the
    line's top stream.

    Attributes:
        branch: The line's name.
        turn: The turn it is booked on (0: items before the line's first user message,
            as the SDK books them).
        anchor: The turn's first item when it was booked (the booking counts only while
            that item is still visible on the line).
        requests: Model requests.
        input_tokens: Input tokens.
        output_tokens: Output tokens.
        total_tokens: Total tokens.
        input_tokens_details: The SDK's JSON text of the input details, or None.
        output_tokens_details: The same for output, or None.
    """

    branch: str = field(metadata=TEXT)
    turn: int = field(metadata=COUNT)
    anchor: ItemPlace = field(metadata=ITEM_PLACE)
    requests: int = field(metadata=COUNT)
    input_tokens: int = field(metadata=COUNT)
    output_tokens: int = field(metadata=COUNT)
    total_tokens: int = field(metadata=COUNT)
    input_tokens_details: str | None = field(metadata=OPTIONAL_TEXT)
    output_tokens_details: str | None = field(metadata=OPTIONAL_TEXT)

    EVENT_TYPE = TURN_USAGE
    READ_FIRST = ("anchor",)
