"""Application events on a journal session (mixed into
:class:`~agentjournal.sdk.session.JournalSession`): events of an application built on the
session, sealed into its chain, not items: appended (:meth:`ApplicationEventsAPI.append_event`)
or appended only at the head its ``decide`` saw (a compare-and-set,
:meth:`ApplicationEventsAPI.append_event_at_head`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Protocol

from agentjournal import events
from agentjournal.engine.core import SessionCore
from agentjournal.engine.tree import SessionTree
from agentjournal.errors import InvalidInput
from agentjournal.events import EXTENSION_EVENT_TYPE, ITEM_EVENT_TYPES
from agentjournal.ledger.checkpoints import CHECKPOINT
from agentjournal.sdk.recorder import SessionRecorder

_DECIDING: ContextVar[list[SessionTree] | None] = ContextVar("agentjournal_deciding", default=None)
"""While an :meth:`ApplicationEventsAPI.append_event_at_head` decides: the tree it holds locked
(emptied when it is done, so a task started meanwhile, which keeps this context, is free
again afterwards)."""

_OWN_EVENT_TYPES = frozenset(
    {
        *ITEM_EVENT_TYPES,
        EXTENSION_EVENT_TYPE,
        events.SESSION_STARTED,
        events.SUBAGENT_STARTED,
        events.SUBAGENT_COMPLETED,
        events.ITEM_POPPED,
        events.SESSION_CLEARED,
        events.MODEL_RESPONDED,
        events.GUARDRAIL_DECIDED,
        events.AUTHORITY_REFUSED,
        events.AUTHORITY_GRANTED,
        events.RUN_PAUSED,
        events.RUN_RESUMED,
        *events.BRANCH_EVENTS,
        CHECKPOINT,
    }
)
"""What :meth:`ApplicationEventsAPI.append_event` refuses: the types the session writes itself."""


def check_not_deciding(tree: SessionTree) -> None:
    """Refuse to use a session of ``tree`` while an ``append_event_at_head`` of it decides
    (its line is locked: the call would wait forever).

    Raises:
        InvalidInput: It does.
    """
    deciding = _DECIDING.get()
    if deciding and deciding[0] is tree:
        raise InvalidInput(
            "a session cannot be used inside append_event_at_head's decide, which runs "
            "while the line is locked: read the store (journal.store) there"
        )


class _Session(Protocol):
    """What these methods use of the session they are part of."""

    _recorder: SessionRecorder
    _core: SessionCore

    @property
    def session_id(self) -> str: ...
    def _check_open(self) -> None: ...
    def _check_application_event(self, event_type: str) -> None: ...


class ApplicationEventsAPI:
    """Application events on a journal session; see the module docs."""

    async def append_event(self: _Session, event_type: str, data: bytes) -> None:
        """Append an event of an application built on the session (not an item).

        It goes to the session's stream (``AgentSession-{id}``), sealed into its
        chain, written like a guardrail decision (retried on conflicts; all or
        nothing). The manifest runner keeps a thread's state this way
        (``agentjournal.ThreadState``). Call it between runs: during a run the
        event would land on the acting subagent's stream.

        A session that seals its content under a data subject's key refuses it: the
        journal cannot tell which of an application's fields hold content, and what it
        stored in the clear no erasure could reach.

        Raises:
            InvalidInput: ``event_type`` is empty or one of the session's own types, or
                the session seals its content.
            StoreError: It did not land.
        """
        self._check_application_event(event_type)
        await self._core.record(
            event_type,
            data,
            agent="",
            run=self._recorder.current_run(),
            metadata=self._recorder.trace_now(),
        )

    async def append_event_at_head(
        self: _Session, event_type: str, decide: Callable[[], Awaitable[bytes]]
    ) -> None:
        """Append an application event at the exact head of the line's top stream (the
        session's stream, or the branch's), with the data ``decide`` gives: a compare-and-set
        on what the application records there.

        ``decide`` reads what it needs from the store (``journal.store``), never from this
        session: it runs while the line is locked (this session, or another object of the
        same session and line, used there raises :class:`InvalidInput`; one awaited there
        through a task started before would wait forever), after the line is read again,
        in every attempt, so what it saw still holds where the event lands. Another
        write meanwhile (by any process) makes the attempt conflict, and ``decide`` runs
        again on what is there now. Whatever it raises is raised, with nothing written. Of
        several callers deciding on one state, one lands first and the others decide again.
        Call it between runs, like :meth:`append_event`.

        Raises:
            InvalidInput: As :meth:`append_event`.
            StoreError: It did not land.
        """
        self._check_application_event(event_type)

        async def deciding() -> bytes:
            locked = [self._core.tree]
            entered = _DECIDING.set(locked)
            try:
                return await decide()
            finally:
                locked.clear()
                _DECIDING.reset(entered)

        await self._core.record_at_head(event_type, deciding, self._recorder.trace_now())

    def _check_application_event(self: _Session, event_type: str) -> None:
        self._check_open()
        if not event_type or event_type in _OWN_EVENT_TYPES:
            raise InvalidInput(f"{event_type!r} cannot be appended as an application event")
        if self._core.facts.sealer is not None:
            raise InvalidInput(
                f"session {self.session_id} seals its content under a data subject's key: "
                f"an application event ({event_type[:80]!r}) would be stored in the clear, "
                "out of an erasure's reach"
            )
