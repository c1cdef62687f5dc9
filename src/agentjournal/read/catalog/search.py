"""Content search over the catalog: which sessions' items hold a word (pure, in memory).

:class:`ContentIndex` is folded from the same global order as the catalog, one item
event at a time: the readable text of user messages, assistant text and thinking,
tool calls (names and arguments) and tool results (:func:`readable_text`) is cut into
lower-case words, and each word maps to the sessions that hold it (an inverted index).
A query word matches every indexed word it begins (``refun`` finds ``refund`` and
``refunded``).

The index holds only what the store holds readable, is built from the store alone and
is never saved: it can always be thrown away and folded again. It counts what was ever
written, so a session still matches words of items it popped or cleared since.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from agentjournal._fastjson import loads as fast_loads
from agentjournal._fastjson import loads_bytes
from agentjournal.events import EXTENSION_EVENT_TYPE

if TYPE_CHECKING:
    from agentjournal.store.contract import RecordedEvent

TEXT_EVENT_TYPES: Final = frozenset(
    {
        "UserMessageReceived",
        "AssistantTextGenerated",
        "AssistantThinkingGenerated",
        "AssistantToolCallsGenerated",
        "ToolResultReceived",
        EXTENSION_EVENT_TYPE,
    }
)
"""The item event types whose text is indexed."""

MAX_TEXT: Final = 65_536
"""Characters of one event's text indexed (a pasted file is not a search engine's job)."""
MAX_WORD: Final = 64
"""Longer runs of word characters (digests, base64) are not words anyone searches for."""

_WORD: Final = re.compile(r"\w+")


def words(text: str) -> Iterator[str]:
    """The words of ``text`` as the index keeps them: lower-case runs of word characters."""
    for match in _WORD.finditer(text.lower()):
        word = match.group()
        if len(word) <= MAX_WORD:
            yield word


def readable_text(event_type: str, data: bytes) -> str:
    """What an item event says, as text to index ("" when it says nothing readable).

    A message's or thought's content, a tool call's names and arguments, a tool's
    result; an item the codec stored as raw JSON (``OpenAIItemRecorded``): its string
    values.
    """
    if event_type not in TEXT_EVENT_TYPES:
        return ""
    try:
        body = loads_bytes(data)
    except ValueError:
        return ""
    if not isinstance(body, dict):
        return ""
    parts: list[str] = []
    if event_type == "AssistantToolCallsGenerated":
        for call in body.get("tool_calls") or []:
            if isinstance(call, dict):
                parts.append(str(call.get("tool_name", "")))
                _strings(call.get("arguments"), parts)
    elif event_type == "ToolResultReceived":
        _strings(body.get("result"), parts)
    elif event_type == EXTENSION_EVENT_TYPE:
        _strings({k: v for k, v in body.items() if k not in ("id", "call_id")}, parts)
    else:
        _strings(body.get("content"), parts)
    return " ".join(parts)[:MAX_TEXT]


def _strings(value: Any, out: list[str]) -> None:
    """Every string (and number) inside ``value``; a string holding JSON is opened up."""
    if isinstance(value, str):
        if value[:1] in ("{", "["):
            try:
                _strings(fast_loads(value), out)
                return
            except ValueError:
                pass
        out.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            out.append(str(key))
            _strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        out.append(str(value))


class ContentIndex:
    """Words of item events -> the sessions holding them, folded event by event."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._names: list[str] = []
        self._postings: dict[str, set[int]] = {}
        self._vocabulary: list[str] | None = []  # sorted words; None: to sort again
        self.indexed = 0
        """Item events indexed so far."""

    def fold(self, session_id: str, event: RecordedEvent) -> None:
        """Index ``event`` (an item event of ``session_id``'s tree; others are skipped)."""
        text = readable_text(event.type, event.data)
        if not text:
            return
        number = self._ids.get(session_id)
        if number is None:
            number = self._ids[session_id] = len(self._names)
            self._names.append(session_id)
        self.indexed += 1
        postings = self._postings
        for word in set(words(text)):
            holders = postings.get(word)
            if holders is None:
                postings[word] = {number}
                self._vocabulary = None
            else:
                holders.add(number)

    def matching(self, word: str) -> set[str]:
        """The sessions holding a word that begins with ``word`` (lower-cased)."""
        word = word.lower()
        if not word:
            return set()
        if self._vocabulary is None:
            self._vocabulary = sorted(self._postings)
        vocabulary = self._vocabulary
        found: set[int] = set()
        at = bisect.bisect_left(vocabulary, word)
        while at < len(vocabulary) and vocabulary[at].startswith(word):
            found |= self._postings[vocabulary[at]]
            at += 1
        names = self._names
        return {names[number] for number in found}

    def __len__(self) -> int:
        """How many distinct words are indexed."""
        return len(self._postings)
