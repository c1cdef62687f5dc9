"""The journal session: the SDK's ``Session`` and ``RunHooks`` in one object.

Use it as both (``Runner.run(agent, input, session=s, hooks=s)``). As a
session it writes every item as one canonical event on ``AgentSession-{id}``
and gives them back exactly; as hooks it learns what only the run knows —
which agent spoke, the token usage of each model response — and stamps it on
the events.

Write path: one ``add_items`` call is one atomic append at the exact revision
the session last saw, with event ids derived from a per-call nonce, so a retry
after an unknown outcome is recognised by the store and never duplicates. If
another writer got there first the session catches up on what it wrote and
tries again (bounded); message indices stay unique and gapless.

Read path: a :class:`~agentjournal.replay.Timeline` caches the newest visible
items. ``get_items`` asks the store only for the stream's head (one cheap call)
and reads the events it has not seen — forwards what others appended,
backwards as far as ``limit`` needs — so a call costs O(limit), not
O(history).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from agents.lifecycle import RunHooksBase
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)
from kurrent_agent_schema import TokenUsage, to_json

from agentjournal import codec, events
from agentjournal._locks import CrossLoopLock
from agentjournal.errors import CodecError, ConcurrencyError, StoreUnavailable, StreamNotFound
from agentjournal.replay import Clear, Entry, Pop, Timeline, TimelineEvent
from agentjournal.store.base import EventStore, NewEvent, RecordedEvent, StreamState, event_id
from agentjournal.streams import session_stream, validate_id

if TYPE_CHECKING:
    from agents.agent import Agent
    from agents.items import ModelResponse, TResponseInputItem
    from agents.run_context import RunContextWrapper

__all__ = ["JournalSession"]

logger = logging.getLogger("agentjournal.session")

_CONFLICT_RETRIES: Final = 16
_UNAVAILABLE_RETRIES: Final = 3
_PAGE: Final = 64
_FULL_PAGE: Final = 1000
_REMEMBERED_RESPONSES: Final = 256
_ASSISTANT_TYPES: Final = frozenset(
    {"AssistantTextGenerated", "AssistantToolCallsGenerated", "AssistantThinkingGenerated"}
)


@dataclass(frozen=True, slots=True)
class _Produced:
    """What the hooks learned about a model output item."""

    response_id: str | None
    usage_json: str | None
    agent: str


class JournalSession(RunHooksBase[Any, "Agent[Any]"]):
    """A Session and RunHooks backed by an event store.

    Create it with :meth:`agentjournal.Journal.session`. One object may serve
    many runs one after another; concurrent calls on it are serialised.

    Attributes:
        session_id: The session's id (kurrent-agent-schema §2.4 rules).
        session_settings: Defaults for ``get_items`` (``limit``).
        stream: The session's stream, ``AgentSession-{session_id}``.
    """

    def __init__(
        self,
        store: EventStore,
        session_id: str,
        *,
        app_name: str | None = None,
        user_id: str | None = None,
        agent_name: str | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        self.session_id = validate_id(session_id, "session id")
        self.stream = session_stream(self.session_id)
        self.session_settings: SessionSettings | None = _settings(session_settings)
        self._store = store
        self._app_name = app_name
        self._user_id = user_id
        self._agent_name = agent_name
        self._lock = CrossLoopLock()  # callers may come from several event loops
        self._timeline = Timeline()
        self._loaded = False
        self._head = -1  # revision of the last event seen; -1: no stream
        self._oldest_read = 0  # the timeline holds what lies at and after this revision
        self._next_index: int | None = 0  # None: not known yet
        self._current_agent: str | None = agent_name
        self._produced: OrderedDict[str, _Produced] = OrderedDict()

    def __repr__(self) -> str:
        return f"JournalSession({self.session_id!r}, stream={self.stream!r})"

    # -- Session protocol -------------------------------------------------------

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items in chronological order.

        ``None`` falls back to ``session_settings.limit``, then to every item;
        ``0`` returns ``[]``. Items are fresh copies, exactly as written.
        """
        resolved = resolve_session_limit(limit, self.session_settings)
        if resolved is not None and resolved <= 0:
            return []
        async with self._lock:
            await self._refresh(resolved)
            await self._fill(resolved)
            entries = self._timeline.latest(resolved)
        return [entry.item() for entry in entries]  # type: ignore[misc]

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Append ``items`` as one atomic write; all of them land or none.

        Raises:
            CodecError: An item cannot be stored exactly; nothing was written.
            ConcurrencyError: Other writers kept winning for every retry.
            StoreUnavailable: The store failed and the outcome could not be settled.
        """
        items = list(items)
        if not items:
            return
        nonce = uuid.uuid4().hex
        async with self._lock:
            for _ in range(_CONFLICT_RETRIES):
                first = await self._writable()
                new, entries_json = self._item_events(items, nonce, first)
                if await self._append(new):
                    for offset, item_json in enumerate(entries_json):
                        revision = self._head - len(entries_json) + 1 + offset
                        self._timeline.apply(
                            Entry(self.stream, revision, 0, first + offset, item_json)
                        )
                    self._next_index = first + len(items)
                    return
                if await self._catch_up(until_id=new[-1].id):
                    return  # an earlier attempt with these ids did land
            raise ConcurrencyError(self.stream, "exact", self._head)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """Hide the latest item and return it; ``None`` when there is none.

        The item stays on the stream; an ``agentjournal.ItemPopped`` event
        records that it was removed from the history.
        """
        async with self._lock:
            for _ in range(_CONFLICT_RETRIES):
                await self._refresh(1)
                await self._fill(1)
                latest = self._timeline.latest(1)
                if not latest:
                    return None
                entry = latest[0]
                popped = events.ItemPopped(entry.stream, entry.revision, entry.part, entry.index)
                event = self._control_event(
                    events.ITEM_POPPED, popped.encode(), await self._writable()
                )
                if await self._append([event]):
                    self._timeline.apply(Pop(entry.key))
                    return entry.item()  # type: ignore[return-value]
            raise ConcurrencyError(self.stream, "exact", self._head)

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Hide every item; ``get_items`` returns ``[]`` until new items come.

        History is kept: an ``agentjournal.SessionCleared`` event marks the cut.
        """
        async with self._lock:
            for _ in range(_CONFLICT_RETRIES):
                await self._refresh(0)
                if self._head < 0:
                    return
                next_index = await self._writable()
                cleared = events.SessionCleared(next_index - 1)
                event = self._control_event(events.SESSION_CLEARED, cleared.encode(), next_index)
                if await self._append([event]):
                    self._timeline.apply(Clear())
                    return
            raise ConcurrencyError(self.stream, "exact", self._head)

    # -- RunHooks ---------------------------------------------------------------

    async def on_agent_start(self, context: RunContextWrapper[Any], agent: Agent[Any]) -> None:
        """Remember which agent is speaking: it authors the items that follow."""
        self._current_agent = agent.name

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        """Remember the response's usage and id for the items it produced."""
        usage_json = _usage_json(response, agent)
        produced = _Produced(response.response_id, usage_json, agent.name)
        for output in response.output:
            for key in _identities(output):
                self._produced[key] = produced
        while len(self._produced) > _REMEMBERED_RESPONSES:
            self._produced.popitem(last=False)

    # -- internals: writing -------------------------------------------------------

    def _item_events(
        self, items: Sequence[TResponseInputItem], nonce: str, first: int
    ) -> tuple[list[NewEvent], list[str]]:
        """Encode ``items`` from message index ``first`` (raises before any I/O)."""
        now = datetime.now(UTC)
        trace_id = _trace_id()
        new: list[NewEvent] = []
        if self._head < 0:
            data = events.encode_session_started(
                app_name=self._app_name,
                agent_name=self._agent_name or self._current_agent,
                user_id=self._user_id,
                timestamp=now,
            )
            new.append(self._new(events.SESSION_STARTED, data, nonce, "started", first, {}))
        items_json: list[str] = []
        for offset, item in enumerate(items):
            index = first + offset
            produced = self._produced_by(item)
            author = produced.agent if produced else self._author_of(item)
            encoded = codec.encode_item(item, message_index=index, author=author, timestamp=now)
            metadata = {events.INDEX_KEY: str(index)}
            if produced and encoded.type in _ASSISTANT_TYPES:
                if produced.usage_json:
                    metadata[events.USAGE_KEY] = produced.usage_json
                if produced.response_id:
                    metadata[events.RESPONSE_ID_KEY] = produced.response_id
            if trace_id:
                metadata[events.TRACE_ID_KEY] = trace_id
            new.append(self._new(encoded.type, encoded.data, nonce, offset, index + 1, metadata))
            items_json.append(json.dumps(item))
        return new, items_json

    def _control_event(self, type_: str, data: bytes, next_index: int) -> NewEvent:
        return self._new(type_, data, uuid.uuid4().hex, 0, next_index, {})

    def _new(
        self,
        type_: str,
        data: bytes,
        nonce: str,
        part: int | str,
        next_index: int,
        metadata: dict[str, str],
    ) -> NewEvent:
        metadata[events.NEXT_INDEX_KEY] = str(next_index)
        metadata[events.SCHEMA_VERSION_KEY] = events.SCHEMA_VERSION_VALUE
        return NewEvent(
            type=type_, data=data, metadata=metadata, id=event_id(self.stream, nonce, part)
        )

    async def _append(self, new: list[NewEvent]) -> bool:
        """Append at the exact head; False on a conflict (nothing written)."""
        expected = StreamState.NO_STREAM if self._head < 0 else self._head
        for attempt in range(_UNAVAILABLE_RETRIES + 1):
            try:
                result = await self._store.append(self.stream, new, expected=expected)
            except ConcurrencyError:
                return False
            except StoreUnavailable:
                # Unknown outcome: the same ids at the same revision are recognised
                # by the store if the first attempt did land.
                if attempt == _UNAVAILABLE_RETRIES:
                    raise
                await asyncio.sleep(0.05 * 4**attempt)
                continue
            self._head = result.revision
            return True
        raise AssertionError("unreachable")  # pragma: no cover

    def _author_of(self, item: Mapping[str, Any]) -> str | None:
        if item.get("role") == "user":
            return None
        return self._current_agent

    def _produced_by(self, item: Mapping[str, Any]) -> _Produced | None:
        for key in _identities(item):
            found = self._produced.get(key)
            if found is not None:
                return found
        return None

    # -- internals: reading -------------------------------------------------------

    async def _refresh(self, limit: int | None) -> None:
        """Bring the timeline up to the stream's head: one store call when nothing changed."""
        if self._loaded:
            await self._catch_up()
        else:
            await self._load(limit)

    async def _load(self, limit: int | None) -> None:
        """First use: read the newest events straight from the end of the stream."""
        self._timeline.reset()
        self._next_index = None
        try:
            page = await self._store.read(
                self.stream, backwards=True, limit=_FULL_PAGE if limit is None else limit + 8
            )
        except StreamNotFound:
            page = []
        self._head = page[0].revision if page else -1
        self._oldest_read = self._head + 1
        self._loaded = True
        if page:
            self._take_older(page)
        else:
            self._next_index = 0
            self._timeline.extend_backwards([], reached_start=True)

    async def _catch_up(self, *, until_id: uuid.UUID | None = None) -> bool:
        """Apply events other writers appended; True if ``until_id`` was among them.

        One forward read from the last revision seen: when nothing changed it
        returns nothing, so a warm ``get_items`` costs one small store call.
        """
        found = False
        while True:
            try:
                page = await self._store.read(
                    self.stream, from_revision=self._head + 1, limit=_PAGE
                )
            except StreamNotFound:
                if self._head >= 0:
                    logger.warning("stream %s disappeared; rereading", self.stream)
                    await self._load(None)
                return False
            for event in page:
                found = found or event.id == until_id
                for timeline_event in self._interpret(event):
                    self._timeline.apply(timeline_event)
                self._next_index = _next_index_after(event) or self._next_index
                self._head = event.revision
            if len(page) < _PAGE:
                return found

    async def _fill(self, limit: int | None) -> None:
        """Read older events until the timeline can answer ``limit``."""
        while not self._timeline.covers(limit) and self._oldest_read > 0:
            missing = None if limit is None else limit - len(self._timeline.entries)
            wanted = _FULL_PAGE if missing is None else max(missing, 1) + 8
            page = await self._store.read(
                self.stream, from_revision=self._oldest_read - 1, backwards=True, limit=wanted
            )
            if not page:
                break
            self._take_older(page)

    def _take_older(self, newest_first: list[RecordedEvent]) -> None:
        """Put a backwards page in front of the timeline."""
        older: list[TimelineEvent] = []
        for event in newest_first:
            older.extend(reversed(self._interpret(event)))
            if self._next_index is None:
                self._next_index = _next_index_after(event)
        self._oldest_read = newest_first[-1].revision
        self._timeline.extend_backwards(older, reached_start=self._oldest_read == 0)

    async def _writable(self) -> int:
        """Make sure head and next index are known; return the next index."""
        if not self._loaded:
            await self._load(0)
        if self._next_index is None:
            self._next_index = await self._find_next_index()
        return self._next_index

    async def _find_next_index(self) -> int:
        """Return the next free message index, reading back from the oldest event read.

        Every event this library writes carries it, so this runs only for a
        stream whose tail another framework wrote.
        """
        revision = self._oldest_read - 1
        while revision >= 0:
            page = await self._store.read(
                self.stream, from_revision=revision, backwards=True, limit=_PAGE
            )
            for event in page:
                found = _next_index_after(event)
                if found is not None:
                    return found
            revision = page[-1].revision - 1 if page else -1
        return 0

    def _interpret(self, event: RecordedEvent) -> list[TimelineEvent]:
        """Turn one stored event into timeline events; skip what cannot be read."""
        try:
            if event.type == events.ITEM_POPPED:
                popped = events.ItemPopped.decode(event.data)
                return [Pop((popped.stream, popped.revision, popped.part))]
            if event.type == events.SESSION_CLEARED:
                events.SessionCleared.decode(event.data)
                return [Clear()]
            if event.type not in codec.ITEM_EVENT_TYPES:
                return []
            texts = codec.decode_item_texts(event.type, event.data)
        except CodecError as error:
            logger.warning(
                "skipping unreadable event %s at %s@%d: %s",
                event.type,
                event.stream,
                event.revision,
                error,
            )
            return []
        index = _index_of(event)
        return [
            Entry(event.stream, event.revision, part, index, text)
            for part, text in enumerate(texts)
        ]


# -- helpers ----------------------------------------------------------------------


def _settings(value: SessionSettings | Mapping[str, Any] | None) -> SessionSettings:
    if value is None:
        return SessionSettings()
    if isinstance(value, Mapping):
        value = dict(value)
    return coerce_session_settings(value)  # the SDK's own rules and errors


def _index_of(event: RecordedEvent) -> int:
    raw = event.metadata.get(events.INDEX_KEY)
    if raw is not None and raw.isdigit():
        return int(raw)
    return -1  # an event of another writer: its index is unknown


def _next_index_after(event: RecordedEvent) -> int | None:
    """The next free message index after ``event``; None if it does not say."""
    raw = event.metadata.get(events.NEXT_INDEX_KEY)
    if raw is not None and raw.isdigit():
        return int(raw)
    raw = event.metadata.get(events.INDEX_KEY)
    if raw is not None and raw.isdigit():
        return int(raw) + 1
    return None


def _identities(item: Any) -> list[str]:
    """Keys that match a model output item with the session item made from it."""
    keys = []
    for field in ("call_id", "id"):
        value = item.get(field) if isinstance(item, Mapping) else getattr(item, field, None)
        if isinstance(value, str) and value:
            keys.append(f"{field}:{value}")
    return keys


def _usage_json(response: ModelResponse, agent: Agent[Any]) -> str | None:
    """The response's usage as canonical ``TokenUsage`` JSON (the ``$usage`` value)."""
    usage = response.usage
    if usage is None:
        return None
    message = TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        cached_input_tokens=getattr(usage.input_tokens_details, "cached_tokens", 0) or 0,
        reasoning_tokens=getattr(usage.output_tokens_details, "reasoning_tokens", 0) or 0,
    )
    if isinstance(agent.model, str):
        message.model = agent.model
    text: str = to_json(message)
    return text


def _trace_id() -> str | None:
    """The W3C trace id of the current SDK trace, if any."""
    from agents.tracing import get_current_trace

    trace = get_current_trace()
    trace_id = getattr(trace, "trace_id", None) if trace is not None else None
    if isinstance(trace_id, str) and trace_id.startswith("trace_") and len(trace_id) == 38:
        return trace_id[6:]
    return None
