"""The one writer: every event agentjournal writes is appended here.

:class:`Writer` takes a function that plans a write from the tree as it is
(:mod:`agentjournal.engine.plan`: events sealed, ids, indices and twins
decided), appends the plan atomically at the exact revisions it names, and on
success has the tree take on the plan's commit. If another writer got there
first it catches up and plans again, after a short random wait that grows,
up to a bound (:class:`~agentjournal.errors.RetriesExhausted`): one retry loop,
:func:`_retrying`, for every write. An unknown
outcome (the store failed mid-write) is retried with the same ids, which the
store recognises; a conflict whose own ids are in place is the write landing
(:func:`append`). :func:`append_chained` writes one chained event at the head
of a stream outside any session tree (the journal's key rotations).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Final, TypeVar

from agentjournal import events
from agentjournal._fastjson import plain_text
from agentjournal.engine.plan import WritePlan
from agentjournal.engine.reader import Reader
from agentjournal.engine.sealing import seal_event
from agentjournal.engine.timeline import Entry, Pop
from agentjournal.engine.tree import Commit, SessionTree
from agentjournal.errors import (
    ConcurrencyError,
    InvalidInput,
    RetriesExhausted,
    StoreUnavailable,
    StreamNotFound,
)
from agentjournal.ledger.chain import GENESIS, HASH_KEY
from agentjournal.ledger.keys import KEY_ROTATED, KeyRotation, SigningKey, signed_event_id
from agentjournal.store.contract import (
    AppendRequest,
    EventStore,
    ModelAdd,
    ModelChange,
    ModelClear,
    ModelOp,
    ModelRemove,
    NewEvent,
    StreamState,
)
from agentjournal.streams import KEYS_STREAM

CONFLICT_RETRIES: Final = 32
_UNAVAILABLE_RETRIES: Final = 3

P = TypeVar("P", bound=WritePlan)
T = TypeVar("T")


class Writer:
    """Appends the writes of one session tree (call :meth:`write` under the tree's lock).

    Args:
        store: The event store.
        tree: The session tree; it takes on each write that lands.
        reader: Catches the tree up after a conflict.
    """

    def __init__(self, store: EventStore, tree: SessionTree, reader: Reader) -> None:
        self._store = store
        self._tree = tree
        self._reader = reader
        # A store that keeps a read model gets each write's change to it (store/base.py).
        self._models = reader.models
        self._side = reader.side_streams

    def write(
        self,
        build: Callable[[], Awaitable[P | None]],
        *,
        retry_now: Callable[[P, ConcurrencyError], bool] | None = None,
    ) -> Awaitable[P | None]:
        """Plan and append one write; the awaitable of the plan that landed (None: nothing
        to write): the retry loop itself, no coroutine of its own around it.

        ``build`` is asked before every attempt, with the tree as it is then.
        ``retry_now``, given the plan and a conflict, says whether to plan again
        without catching up first (the conflict changed the plan's inputs).

        Raises:
            RetriesExhausted: Other writers kept winning.
            StoreUnavailable: The store failed and the outcome could not be settled.
        """
        tree = self._tree

        async def attempt() -> P | ConcurrencyError | None:
            plan = await build()
            if plan is None:
                return None
            requests = plan.requests
            if self._models:
                side = self._side | plan.foreign if plan.foreign else self._side
                requests = with_model(requests, self._tree.stream, plan.commit, side)
            landed = await append(self._store, requests)
            if isinstance(landed, ConcurrencyError):
                tree.read_log(None)  # a grant may have moved the authority log: read it again
                tree.read_ledger(None)  # and a checkpoint the ledger
                # A lost race on the authority log or the ledger alone (both read again
                # above) needs no read of the session's history.
                if landed.stream not in self._reader.side_streams and (
                    retry_now is None or not retry_now(plan, landed)
                ):
                    await self._reader.catch_up()
                return landed
            heads = {
                request.stream: head for request, head in zip(plan.requests, landed, strict=True)
            }
            tree.apply(_landed_at(plan.commit, heads))
            return plan

        return _retrying(attempt)


def with_model(
    requests: list[AppendRequest], tree: str, commit: Commit, side: frozenset[str]
) -> list[AppendRequest]:
    """The requests, each of the tree's streams carrying its tree (``side`` streams — the
    authority log and the ledger — are not the tree's), the last of them also what the
    write does to the visible items: ``commit.entries``, the same changes the tree's
    timeline takes on, so the store's read model and the cache cannot disagree."""
    ops: list[ModelOp] = []
    for change in commit.entries:
        if isinstance(change, Entry):
            ops.append(
                ModelAdd(
                    change.index,
                    change.stream,
                    change.revision,
                    change.part,
                    change.item_json,
                    change.plain or plain_text(change.item_json),
                )
            )
        elif isinstance(change, Pop):
            stream, revision, part = change.key
            ops.append(ModelRemove(change.index, stream, revision, part))
        else:
            ops.append(ModelClear(change.through_index))
    last = max((n for n, r in enumerate(requests) if r.stream not in side), default=-1)
    bare = ModelChange(tree) if last > 0 else None  # a turn's write has one stream: none
    # The constructor, not dataclasses.replace: a few µs less a request, on every write.
    return [
        request
        if request.stream in side
        else AppendRequest(
            request.stream,
            request.events,
            request.expected,
            ModelChange(tree, ops) if n == last else bare,
        )
        for n, request in enumerate(requests)
    ]


def _landed_at(commit: Commit, heads: dict[str, int]) -> Commit:
    """The commit with the heads the store reported (the same as planned, as a rule)."""
    if all(commit.heads.get(stream) == head for stream, head in heads.items()):
        return commit
    return replace(commit, heads={**commit.heads, **heads})


async def append(store: EventStore, requests: list[AppendRequest]) -> list[int] | ConcurrencyError:
    """Append atomically; the new head of each stream, or the conflict (nothing written).

    After an unknown outcome the same ids are sent again at the same revisions, and
    the store recognises them if the first attempt landed; a conflict whose own ids
    are in place is that earlier attempt, never a reason to write again.

    Raises:
        StoreUnavailable: The store kept failing.
    """
    for attempt in range(_UNAVAILABLE_RETRIES + 1):
        try:
            # One stream takes the single append, unless it carries a read model change,
            # which only an AppendRequest can: append_many of one request is the same write
            # (to a store whose own append_many it is: store.abilities.abilities_of).
            if len(requests) == 1 and requests[0].model is None:
                (only,) = requests
                result = await store.append(only.stream, only.events, expected=only.expected)
                return [result.revision]
            return [result.revision for result in await store.append_many(requests)]
        except ConcurrencyError as conflict:
            landed = await _landed(store, requests)
            return conflict if landed is None else landed
        except StoreUnavailable:
            if attempt == _UNAVAILABLE_RETRIES:
                raise
            await asyncio.sleep(0.05 * 4**attempt)
    raise AssertionError("unreachable")  # pragma: no cover


async def _landed(store: EventStore, requests: list[AppendRequest]) -> list[int] | None:
    """The new heads if every stream holds these events right where the write expected them."""
    heads: list[int] = []
    for request in requests:
        expected = request.expected
        if isinstance(expected, StreamState) and expected is not StreamState.NO_STREAM:
            return None  # ANY/EXISTS say nothing about where a write went
        start = expected + 1 if isinstance(expected, int) else 0
        try:
            found = await store.read(request.stream, from_revision=start, limit=len(request.events))
        except StreamNotFound:
            return None
        if [event.id for event in found] != [event.id for event in request.events]:
            return None
        heads.append(found[-1].revision)
    return heads


async def append_chained(
    store: EventStore,
    stream: str,
    type_: str,
    data: bytes,
    event_id: uuid.UUID,
    *,
    metadata: dict[str, str] | None = None,
) -> int:
    """Append one event at the head of ``stream``, sealed into its chain; return its revision.

    For streams outside any session tree (the journal's ``AgentKeys``): the head is
    read, the event sealed after it and appended at that exact revision, again after
    another writer's event.

    Raises:
        RetriesExhausted: Other writers kept winning.
        StoreUnavailable: The store failed and the outcome could not be settled.
    """

    async def attempt() -> int | ConcurrencyError:
        try:
            tail = await store.read(stream, backwards=True, limit=1)
        except StreamNotFound:
            tail = []
        head = tail[0].revision if tail else -1
        prev = tail[0].metadata.get(HASH_KEY, "") if tail else GENESIS
        meta = {events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE, **(metadata or {})}
        seal_event(stream, head + 1, event_id, type_, data, meta, prev)
        event = NewEvent(type=type_, data=data, metadata=meta, id=event_id)
        expected = StreamState.NO_STREAM if head < 0 else head
        landed = await append(store, [AppendRequest(stream, [event], expected)])
        return landed if isinstance(landed, ConcurrencyError) else landed[0]

    return await _retrying(attempt)


async def rotate_key(store: EventStore, old: SigningKey, new: SigningKey) -> KeyRotation:
    """Record on ``AgentKeys`` that checkpoints may from now on be signed by ``new``, signed
    by ``old`` (``agentjournal.KeyRotated``; its id derived from its signature).

    Raises:
        InvalidInput: ``new`` is ``old``.
        StoreError: The rotation could not be written.
    """
    if old.key_id == new.key_id:
        raise InvalidInput(f"the new key is the old one ({old.key_id})")
    rotation = KeyRotation.sign(old, new.public_key, datetime.now(UTC))
    event_id = signed_event_id(KEYS_STREAM, rotation.signature)
    await append_chained(store, KEYS_STREAM, KEY_ROTATED, rotation.encode(), event_id)
    return rotation


async def _retrying(attempt: Callable[[], Awaitable[T | ConcurrencyError]]) -> T:
    """Run ``attempt`` until it does not lose to another writer, waiting a little after each
    loss, more each time, at random (no lockstep retries); at most :data:`CONFLICT_RETRIES`.

    Raises:
        RetriesExhausted: Every attempt lost.
    """
    lost: ConcurrencyError | None = None
    for number in range(CONFLICT_RETRIES):
        if number:
            await _backoff(number)
        outcome = await attempt()
        if not isinstance(outcome, ConcurrencyError):
            return outcome
        lost = outcome
    assert lost is not None
    raise RetriesExhausted(lost.stream, CONFLICT_RETRIES)


async def _backoff(attempt: int) -> None:
    """Wait a little after losing a race, more each time, at random (no lockstep retries)."""
    await asyncio.sleep(random.uniform(0, min(0.1, 0.002 * 2**attempt)))
