"""The two history-editing events: they *hide* items from ``get_items`` without removing
anything from the stream."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentjournal.events._codec import PLAIN_INT, PLAIN_STR, Event
from agentjournal.events._names import ITEM_POPPED, SESSION_CLEARED


@dataclass(frozen=True, slots=True)
class ItemPopped(Event):
    """``agentjournal.ItemPopped``: ``pop_item`` hid one item.

    Attributes:
        stream: The stream of the popped item's event.
        revision: That event's revision.
        part: Which item of that event (0 unless a foreign event holds several).
        message_index: The popped item's ``message_index``.
    """

    stream: str = field(metadata=PLAIN_STR)
    revision: int = field(metadata=PLAIN_INT)
    part: int = field(metadata=PLAIN_INT)
    message_index: int = field(metadata=PLAIN_INT)

    EVENT_TYPE = ITEM_POPPED
    # Both history events have always been written this way; their bytes are in the chain.
    SPACED = True


@dataclass(frozen=True, slots=True)
class SessionCleared(Event):
    """``agentjournal.SessionCleared``: ``clear_session`` hid every earlier item.

    Attributes:
        through_index: The highest ``message_index`` hidden (-1 if none existed).
    """

    through_index: int = field(metadata=PLAIN_INT)

    EVENT_TYPE = SESSION_CLEARED
    SPACED = True
