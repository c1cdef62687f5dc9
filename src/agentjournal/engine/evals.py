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

The encoders (:func:`started_data` ...) are pure.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import kurrent_agent_schema as schema
from google.protobuf.message import Message

from agentjournal import events
from agentjournal.engine import stamps
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

EXTENSION: Final = "agentjournal"
"""The key of our own facts in each eval event's ``extensions`` map."""

KINDS: Final = ("eval", "experiment", "feedback")
"""What an eval run is: scorers over recorded sessions, an experiment on forks, or the
ratings people gave a session."""

PASS_THRESHOLD: Final = 0.5
"""A session line's label is ``pass`` at or above this mean score, else ``fail``."""

BATCH: Final = 500
"""Events per append at most (a session's scores land together below this)."""

_IDS: Final = uuid.UUID("0b7c61f2-4d1e-5a8e-9c3b-6f2e1d4a7c90")


def event_id(run_id: str, *about: str | int) -> uuid.UUID:
    """The id of the eval run's event about ``about`` (``"started"``, ``"turn"`` with the
    session, line, turn and scorer, ...): the same for every attempt at the same event."""
    return uuid.uuid5(_IDS, _compact([run_id, *about]))


_compact: Final = json.JSONEncoder(separators=(",", ":")).encode


# -- the records a run writes ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JudgeUsage:
    """What a judge's model calls cost to score one turn or session.

    Attributes:
        model: The judge's model.
        requests: Model calls.
        input_tokens: Tokens in.
        output_tokens: Tokens out.
        total_tokens: Both.
        cost: US dollars, where the model's price is known.
    """

    model: str
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cost: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The usage as ``extensions.agentjournal.judge`` holds it."""
        found: dict[str, Any] = {
            "model": self.model,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cost is not None:
            found["cost"] = self.cost
        return found


@dataclass(frozen=True, slots=True)
class RunStart:
    """What ``EvalRunStarted`` records.

    Attributes:
        run_id: The run.
        kind: ``eval``, ``experiment`` or ``feedback``.
        sessions: The (session, line) pairs the run scores, in order.
        scorers: Each scorer's ``describe()``: ``name``, ``version``, ``kind`` and its
            other facts (``rubric_sha256``, ``model`` ...).
        criteria: The scorers file's digest, ``sha256:<hex>`` (empty: none).
        experiment: An experiment's facts (``candidate``, ``at_turn``, ``branch``).
    """

    run_id: str
    kind: str
    sessions: tuple[tuple[str, str], ...]
    scorers: tuple[Mapping[str, Any], ...]
    criteria: str = ""
    experiment: Mapping[str, Any] | None = None

    @property
    def session_id(self) -> str:
        """The one session the run covers, else ``""``."""
        found = {session for session, _ in self.sessions}
        return next(iter(found)) if len(found) == 1 else ""


@dataclass(frozen=True, slots=True)
class TurnScore:
    """What one ``TurnScored`` records: one scorer's score of one turn of a session line,
    or a person's rating (``human``).

    Attributes:
        session: The session.
        line: ``main`` or the branch's name.
        turn: The turn's number (the SDK's: 1 for the first user message).
        scorer: The scorer's name (``human`` for a person's rating).
        version: The scorer's version.
        value: The score, in [0, 1].
        label: A short word (``pass``, ``fail`` ...).
        reason: Why.
        input: The turn's user message.
        output: The turn's final answer.
        head: The ``aj.hash`` of the line's last event of the turn.
        human: A person's rating.
        by: Who rated it (a person's rating).
        judge: What judging it cost (an LLM judge).
        rating: A caller's id for a person's rating (its event id derives from it).
    """

    session: str
    line: str
    turn: int
    scorer: str
    version: str
    value: float
    label: str = ""
    reason: str = ""
    input: str = ""
    output: str = ""
    head: str = ""
    human: bool = False
    by: str | None = None
    judge: JudgeUsage | None = None
    rating: str | None = None


@dataclass(frozen=True, slots=True)
class SessionScore:
    """What one ``SessionScored`` records: a session line's score in the run.

    Attributes:
        session: The session.
        line: ``main`` or the branch's name.
        value: The mean of its turn scores and session-level scores.
        label: ``pass`` or ``fail`` (:data:`PASS_THRESHOLD`).
        reason: A short summary.
        by_scorer: Each scorer's mean over the line.
        turns: How many turns were scored.
        judge: What session-level judging cost.
    """

    session: str
    line: str
    value: float
    label: str
    reason: str = ""
    by_scorer: Mapping[str, float] = field(default_factory=dict)
    turns: int = 0
    judge: JudgeUsage | None = None


@dataclass(frozen=True, slots=True)
class RunTotals:
    """What ``EvalRunCompleted`` records.

    Attributes:
        session_id: As in ``EvalRunStarted``.
        turns_scored: ``TurnScored`` events of the run.
        average: Their mean score (0 without any).
        total_cost: What the judge cost, US dollars.
        by_scorer: Each scorer's mean.
        by_line: Each line's mean.
        judge: The judge's requests and tokens in all.
        sessions: Session lines scored.
    """

    session_id: str
    turns_scored: int
    average: float
    total_cost: float
    by_scorer: Mapping[str, float]
    by_line: Mapping[str, float]
    judge: Mapping[str, int]
    sessions: int


def checked_score(value: Any, what: str = "score") -> float:
    """``value`` as a score: a finite number in [0, 1].

    Raises:
        InvalidInput: It is not.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{what} must be a number in [0, 1], got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise InvalidInput(f"{what} must be a number in [0, 1], got {value!r}")
    return number


def label_of(value: float) -> str:
    """``pass`` at or above :data:`PASS_THRESHOLD`, else ``fail``."""
    return "pass" if value >= PASS_THRESHOLD else "fail"


LABEL: Final = re.compile(r"[\w.:+-]{1,40}")
"""A score's label: one short word. Labels stay in the clear — never sealed, withheld from a
redacted bundle nor erased — so a label may carry no sentence of what was judged."""


def shown_label(label: str, value: float) -> str:
    """``label`` when it is one short word (:data:`LABEL`), else :func:`label_of` ``value``
    (a scorer's longer label, a judge's sentence: its reason, sealed with the session's
    content, says it)."""
    label = label.strip()
    return label if LABEL.fullmatch(label) else label_of(value)


# -- encoding (pure) ------------------------------------------------------------------


def _encoded(message: Message, facts: Mapping[str, Any]) -> bytes:
    extensions = message.extensions
    extensions[EXTENSION].update(_struct_ready(facts))
    text: str = schema.to_json(message)
    return text.encode()


def _struct_ready(value: Any) -> Any:
    """``value`` with None dropped from mappings and tuples as lists (a Struct holds JSON)."""
    if isinstance(value, Mapping):
        return {str(k): _struct_ready(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_struct_ready(v) for v in value]
    return value


def started_data(start: RunStart, now: datetime) -> bytes:
    """``EvalRunStarted``'s data."""
    facts: dict[str, Any] = {
        "run_id": start.run_id,
        "kind": start.kind,
        "sessions": [{"session": s, "line": line} for s, line in start.sessions],
        "scorers": [dict(s) for s in start.scorers],
        "experiment": dict(start.experiment) if start.experiment is not None else None,
    }
    message = schema.EvalRunStarted(
        session_id=start.session_id,
        scorer=",".join(str(s.get("name", "")) for s in start.scorers),
        criteria=start.criteria,
        timestamp=now,
    )
    return _encoded(message, facts)


def turn_data(score: TurnScore, now: datetime) -> bytes:
    """``TurnScored``'s data."""
    facts: dict[str, Any] = {
        "scorer": score.scorer,
        "version": score.version,
        "line": score.line,
        "head": score.head,
        "human": score.human,
        "by": score.by,
        "judge": score.judge.as_dict() if score.judge is not None else None,
    }
    message = schema.TurnScored(
        session_id=score.session,
        turn_index=score.turn,
        input=score.input,
        output=score.output,
        score=score.value,
        score_label=score.label,
        reason=score.reason,
        timestamp=now,
    )
    return _encoded(message, facts)


def session_data(score: SessionScore, now: datetime) -> bytes:
    """``SessionScored``'s data."""
    facts: dict[str, Any] = {
        "line": score.line,
        "by_scorer": dict(score.by_scorer),
        "turns": score.turns,
        "judge": score.judge.as_dict() if score.judge is not None else None,
    }
    message = schema.SessionScored(
        session_id=score.session,
        score=score.value,
        score_label=score.label,
        reason=score.reason,
        timestamp=now,
    )
    return _encoded(message, facts)


def completed_data(totals: RunTotals, now: datetime) -> bytes:
    """``EvalRunCompleted``'s data."""
    facts: dict[str, Any] = {
        "by_scorer": dict(totals.by_scorer),
        "by_line": dict(totals.by_line),
        "judge": dict(totals.judge),
        "sessions": totals.sessions,
    }
    message = schema.EvalRunCompleted(
        session_id=totals.session_id,
        turns_scored=totals.turns_scored,
        average_score=totals.average,
        total_cost=totals.total_cost,
        timestamp=now,
    )
    return _encoded(message, facts)


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
