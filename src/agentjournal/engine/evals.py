"""The one writer of eval runs: ``EvalRun-{run_id}`` streams of canonical eval events.

An eval run's stream holds, in order, one ``EvalRunStarted``, a ``TurnScored`` per
(session, line, turn, scorer), a ``SessionScored`` per (session, line) and one
``EvalRunCompleted`` (kurrent-agent-schema v2 messages printed by its ``to_json``; our
own facts in ``extensions.agentjournal``; SCHEMA.md, "Eval runs"). Every event is sealed
into the stream's hash chain like any other (:func:`agentjournal.engine.sealing.seal_event`),
and has a deterministic id (:func:`event_id`: uuid5 over the run and what it is about),
so a write retried after an unknown outcome, or a run started again after a crash, is
recognised and never lands twice: :class:`EvalWriter` reads what the stream holds when it
opens and appends only what is missing, in batches at the exact revision it read.

A scored session whose content is sealed under a data subject's key has the content of
its scores (``TurnScored`` input, output and reason; ``SessionScored`` reason) sealed under
the same key (:func:`session_sealer`), so erasing the subject erases them too; the scores
stay. With a signing key, :meth:`EvalWriter.checkpoint` signs the run's head on
``AgentLedger-EvalRun-{run_id}``. People's ratings of a session go to
``EvalRun-feedback-{session}`` (:func:`record_rating`).

The events' records and encoders are :mod:`agentjournal.engine.eval_events` (pure).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from agentjournal import events
from agentjournal.engine import stamps
from agentjournal.engine.eval_events import (
    BATCH,
    KINDS,
    RunStart,
    RunTotals,
    SessionScore,
    TurnScore,
    checked_score,
    completed_data,
    event_id,
    session_data,
    started_data,
    turn_data,
)
from agentjournal.engine.sealing import seal_event
from agentjournal.engine.writer import _retrying, append
from agentjournal.errors import ConcurrencyError, InvalidInput, StreamNotFound
from agentjournal.ledger.chain import GENESIS, HASH_KEY
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import SigningKey, signed_event_id
from agentjournal.shred.fields import KEY_ID_KEY
from agentjournal.shred.keys import SubjectKeyStore
from agentjournal.shred.sealing import SubjectSealer
from agentjournal.store.contract import (
    AppendRequest,
    EventStore,
    NewEvent,
    RecordedEvent,
    StreamState,
)
from agentjournal.streams import (
    eval_run_stream,
    feedback_run_id,
    ledger_stream,
    session_stream,
    validate_id,
)

# -- the writer -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Planned:
    """One event to append: its id, type, data, and the session whose sealer seals it."""

    id: uuid.UUID
    type: str
    data: bytes
    session: str | None = None


class EvalWriter:
    """Appends the events of one eval run, each once (see the module docs).

    Open it with :meth:`open`, which reads what the stream holds; then :meth:`start`,
    :meth:`add` and :meth:`complete` append what is missing. One writer per run and
    process; a second writer of the same run (another process) is caught up with on a
    conflict, and its events are never written twice.

    Args:
        store: The event store.
        run_id: The run (an id component: :func:`agentjournal.streams.validate_id`).
        sealers: Per scored session, what seals its scores' content (a session whose
            content is sealed under a data subject's key; :func:`session_sealer`).
    """

    def __init__(
        self,
        store: EventStore,
        run_id: str,
        *,
        sealers: Mapping[str, SubjectSealer] | None = None,
    ) -> None:
        self.run_id = validate_id(run_id, "eval run id")
        self.stream = eval_run_stream(self.run_id)
        self._store = store
        self._sealers = dict(sealers or {})
        self._ids: set[str] = set()
        self._head = -1
        self._hash = GENESIS
        self._started = False
        self._completed = False

    @classmethod
    async def open(
        cls,
        store: EventStore,
        run_id: str,
        *,
        sealers: Mapping[str, SubjectSealer] | None = None,
    ) -> EvalWriter:
        """A writer of ``run_id`` that knows what its stream holds.

        Raises:
            InvalidInput: ``run_id`` breaks an id rule.
            StoreError: The stream could not be read.
        """
        writer = cls(store, run_id, sealers=sealers)
        await writer._catch_up()
        return writer

    @property
    def started(self) -> bool:
        """Whether the stream holds its ``EvalRunStarted``."""
        return self._started

    @property
    def completed(self) -> bool:
        """Whether the stream holds its ``EvalRunCompleted``."""
        return self._completed

    @property
    def head(self) -> tuple[int, str]:
        """The revision and ``aj.hash`` of the stream's last event ((-1, genesis): none)."""
        return self._head, self._hash

    def seal_with(self, session: str, sealer: SubjectSealer) -> None:
        """Seal the content of ``session``'s scores with ``sealer`` from now on."""
        self._sealers[session] = sealer

    def turn_id(self, score: TurnScore) -> uuid.UUID:
        """The event id of ``score``'s ``TurnScored``."""
        if score.rating is not None:
            return event_id(self.run_id, "rating", score.rating)
        return event_id(self.run_id, "turn", score.session, score.line, score.turn, score.scorer)

    def session_id_of(self, session: str, line: str) -> uuid.UUID:
        """The event id of the ``SessionScored`` of ``session``'s ``line``."""
        return event_id(self.run_id, "session", session, line)

    def holds(self, id_: uuid.UUID) -> bool:
        """Whether the stream holds the event ``id_``."""
        return str(id_) in self._ids

    def scored(self, session: str, line: str, turn: int, scorer: str) -> bool:
        """Whether ``scorer``'s score of that turn is on the stream."""
        return self.holds(event_id(self.run_id, "turn", session, line, turn, scorer))

    def session_scored(self, session: str, line: str) -> bool:
        """Whether the line's ``SessionScored`` is on the stream."""
        return self.holds(self.session_id_of(session, line))

    async def start(self, start: RunStart) -> bool:
        """Append ``EvalRunStarted`` unless the stream holds it; whether this call wrote it.

        Raises:
            InvalidInput: ``start`` is not of this run, or its kind is unknown.
            StoreError: It did not land.
        """
        if start.run_id != self.run_id:
            raise InvalidInput(f"the start of run {start.run_id!r} given to run {self.run_id!r}")
        if start.kind not in KINDS:
            raise InvalidInput(f"eval run kind must be one of {', '.join(KINDS)}")
        planned = _Planned(
            event_id(self.run_id, "started"),
            events.EVAL_RUN_STARTED,
            started_data(start, stamps.now()),
        )
        return await self._append([planned]) == 1

    async def add(self, scores: Sequence[TurnScore | SessionScore]) -> int:
        """Append the ``TurnScored`` and ``SessionScored`` of ``scores`` the stream does not
        hold yet (after ``EvalRunStarted``), in order; how many landed (a twin writer's
        attempt at the same events may be what landed: :func:`engine.writer.append`).

        Raises:
            InvalidInput: The run was not started, is completed, or a score is not in [0, 1].
            StoreError: They did not land (those of earlier batches may have).
        """
        if not self._started:
            raise InvalidInput(f"eval run {self.run_id} is not started: start it first")
        if self._completed:
            raise InvalidInput(f"eval run {self.run_id} is completed: it takes no more scores")
        now = stamps.now()
        planned: list[_Planned] = []
        for score in scores:
            checked_score(score.value)
            if isinstance(score, TurnScore):
                id_ = self.turn_id(score)
                if not self.holds(id_):
                    data = turn_data(score, now)
                    planned.append(_Planned(id_, events.TURN_SCORED, data, score.session))
            else:
                id_ = self.session_id_of(score.session, score.line)
                if not self.holds(id_):
                    data = session_data(score, now)
                    planned.append(_Planned(id_, events.SESSION_SCORED, data, score.session))
        written = 0
        for start in range(0, len(planned), BATCH):
            written += await self._append(planned[start : start + BATCH])
        return written

    async def complete(self, totals: RunTotals) -> bool:
        """Append ``EvalRunCompleted`` unless the stream holds it; whether this call wrote it.

        Raises:
            InvalidInput: The run was not started.
            StoreError: It did not land.
        """
        if not self._started:
            raise InvalidInput(f"eval run {self.run_id} is not started: start it first")
        planned = _Planned(
            event_id(self.run_id, "completed"),
            events.EVAL_RUN_COMPLETED,
            completed_data(totals, stamps.now()),
        )
        return await self._append([planned]) == 1

    async def checkpoint(self, key: SigningKey) -> Checkpoint | None:
        """Sign the run's head on ``AgentLedger-EvalRun-{run_id}`` unless the newest
        checkpoint there signs it already; the checkpoint written (None: none needed).

        Raises:
            StoreError: It did not land.
        """
        await self._catch_up()
        if self._head < 0:
            return None
        return await sign_head(self._store, self.stream, (self._head, self._hash), key)

    async def _catch_up(self) -> None:
        """Read what the stream holds after what this writer knows of it."""
        while True:
            try:
                found = await self._store.read(
                    self.stream, from_revision=self._head + 1, limit=BATCH
                )
            except StreamNotFound:
                return
            for event in found:
                self._know(event.id, event.type, event.revision, event.metadata.get(HASH_KEY, ""))
            if len(found) < BATCH:
                return

    def _know(self, id_: uuid.UUID | str, type_: str, revision: int, hash_: str) -> None:
        self._ids.add(str(id_))
        self._head, self._hash = revision, hash_
        if type_ == events.EVAL_RUN_STARTED:
            self._started = True
        elif type_ == events.EVAL_RUN_COMPLETED:
            self._completed = True

    async def _append(self, planned: Sequence[_Planned]) -> int:
        """Append what of ``planned`` the stream does not hold, at its head; how many."""

        async def attempt() -> int | ConcurrencyError:
            missing = [p for p in planned if str(p.id) not in self._ids]
            if not missing:
                return 0
            if self._completed:  # another writer completed it since this one looked
                raise InvalidInput(f"eval run {self.run_id} is completed: it takes no more")
            new, revision, prev = [], self._head, self._hash
            for one in missing:
                revision += 1
                metadata = {events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE}
                data = one.data
                sealer = self._sealers.get(one.session) if one.session is not None else None
                if sealer is not None:
                    data = sealer.seal(self.stream, str(one.id), one.type, data, metadata)
                prev = seal_event(self.stream, revision, one.id, one.type, data, metadata, prev)
                new.append(NewEvent(type=one.type, data=data, metadata=metadata, id=one.id))
            expected = StreamState.NO_STREAM if self._head < 0 else self._head
            landed = await append(self._store, [AppendRequest(self.stream, new, expected)])
            if isinstance(landed, ConcurrencyError):
                await self._catch_up()
                return landed
            for event in new:
                self._know(event.id, event.type, int(event.metadata[events.SEQ_KEY]), "")
            # The head's hash as stored: a twin writer's attempt at the same events (the
            # same ids, another timestamp or nonce) may be what landed (writer.append).
            (last,) = await self._store.read(self.stream, from_revision=self._head, limit=1)
            self._hash = last.metadata.get(HASH_KEY, "")
            return len(new)

        written: int = await _retrying(attempt)
        return written


async def sign_head(
    store: EventStore, stream: str, head: tuple[int, str], key: SigningKey
) -> Checkpoint | None:
    """A signed checkpoint of ``stream``'s ``head`` on ``AgentLedger-{stream}``, unless the
    newest checkpoint there signs that head already (None then).

    Raises:
        StoreError: It did not land.
    """
    ledger = ledger_stream(stream)
    signed: list[Checkpoint] = []

    async def attempt() -> int | ConcurrencyError:
        try:
            tail = await store.read(ledger, backwards=True, limit=1)
        except StreamNotFound:
            tail = []
        if tail and _signs(tail[0], stream, head):
            return 0
        at = tail[0].revision if tail else -1
        prev = tail[0].metadata.get(HASH_KEY, "") if tail else GENESIS
        metadata = {events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE}
        checkpoint = Checkpoint.sign(
            key,
            stream,
            {stream: head},
            stamps.now(),
            sequence=at + 1,
            previous=prev,
            metadata=metadata,
        )
        data = checkpoint.encode()
        id_ = signed_event_id(ledger, checkpoint.signature)
        seal_event(ledger, at + 1, id_, CHECKPOINT, data, metadata, prev)
        event = NewEvent(type=CHECKPOINT, data=data, metadata=metadata, id=id_)
        expected = StreamState.NO_STREAM if at < 0 else at
        landed = await append(store, [AppendRequest(ledger, [event], expected)])
        if isinstance(landed, ConcurrencyError):
            return landed
        signed[:] = [checkpoint]
        return 1

    await _retrying(attempt)
    return signed[0] if signed else None


def _signs(event: RecordedEvent, stream: str, head: tuple[int, str]) -> bool:
    """Whether the checkpoint ``event`` signs ``stream`` at ``head``."""
    if event.type != CHECKPOINT:
        return False
    try:
        checkpoint = Checkpoint.decode(json.loads(event.data))
    except (InvalidInput, ValueError):
        return False
    return tuple(checkpoint.heads.get(stream, (-1, ""))) == head


# -- sealing and people's ratings -----------------------------------------------------

_SUBJECT_PAGE: Final = 100


async def session_sealer(
    store: EventStore, session_id: str, keys: SubjectKeyStore | None
) -> SubjectSealer | None:
    """What seals the scores of ``session_id``: a sealer under its data subject's key when
    its content is sealed under a live key ``keys`` holds (read from its newest sealed
    event back); None when it is not sealed, its keys were destroyed (its content reads
    ``[erased]``, so scores can hold none of it) or ``keys`` never held them.

    Raises:
        StoreError: The session could not be read.
    """
    if keys is None:
        return None
    async for kid in sealing_keys(store, session_id):
        try:
            key = keys.find(kid)
        except KeyError:
            continue
        if key is not None:
            return SubjectSealer(key.subject, keys)
    return None


async def sealing_keys(store: EventStore, session_id: str) -> AsyncIterator[str]:
    """The subject key id of each sealed event of the session's stream, newest first.

    Raises:
        StoreError: The session could not be read.
    """
    stream = session_stream(session_id)
    before: int | None = None
    while before is None or before >= 0:
        try:
            page = await store.read(
                stream,
                from_revision=before,
                backwards=True,
                limit=_SUBJECT_PAGE,
            )
        except StreamNotFound:
            return
        for event in page:
            kid = event.metadata.get(KEY_ID_KEY)
            if kid is not None:
                yield kid
        if len(page) < _SUBJECT_PAGE:
            return
        before = page[-1].revision - 1


HUMAN: Final = {"name": "human", "version": "1", "kind": "human"}
"""The scorer a person's rating is recorded as."""


async def record_rating(
    store: EventStore,
    score: TurnScore,
    *,
    sealer: SubjectSealer | None = None,
    signing_key: SigningKey | None = None,
) -> bool:
    """Append a person's rating (``score``, ``human``) to ``EvalRun-feedback-{session}``:
    its ``EvalRunStarted`` first when the stream has none; with ``signing_key``, a signed
    checkpoint of the run's head after it. Whether this call wrote it (False: a rating of
    the same ``rating`` id is there already).

    Raises:
        InvalidInput: ``score`` is not a person's rating, or not in [0, 1].
        StoreError: It did not land.
    """
    if not score.human or not score.by:
        raise InvalidInput("a rating is a person's: human, with who gave it (by)")
    checked_score(score.value)
    run_id = feedback_run_id(score.session)
    sealers = {score.session: sealer} if sealer is not None else None
    writer = await EvalWriter.open(store, run_id, sealers=sealers)
    if not writer.started:
        start = RunStart(run_id, "feedback", ((score.session, score.line),), (HUMAN,))
        await writer.start(start)
    written = await writer.add([score]) == 1
    if signing_key is not None:
        await writer.checkpoint(signing_key)
    return written
