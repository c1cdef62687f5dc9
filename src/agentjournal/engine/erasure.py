"""Erasing a data subject: destroy its keys, record the erasure on every session that held
its content, and purge the store's plaintext copies.

The order makes an interrupted erasure safe and a retried one finish it: the keys are
destroyed first (from then on the content reads ``[erased]`` everywhere), then each
affected session gets its ``agentjournal.SubjectErased`` (a deterministic id; a session
that has one naming its keys already is skipped), then the store purges what it keeps
beside the events. A crash leaves either the keys and no erasure recorded, or the keys
gone with some sessions not yet told: never an erasure recorded with the content
readable. The key store keeps a destroyed key's id and subject, so a retry finds every
session again, and signs an erasure recorded by a run that died before its checkpoint.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from agentjournal import events
from agentjournal.engine import stamps
from agentjournal.engine.checkpoints import DEFAULT_CHECKPOINT_EVERY, Checkpoints
from agentjournal.engine.line import Line
from agentjournal.engine.plan import SessionFacts, WritePlan
from agentjournal.engine.plan_control import plan_control
from agentjournal.engine.tree import SessionTree
from agentjournal.errors import CodecError, InvalidInput
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import SigningKey
from agentjournal.shred.fields import KEY_ID_KEY
from agentjournal.shred.keys import SubjectKeyStore
from agentjournal.shred.sealing import OpeningStore
from agentjournal.store.abilities import abilities_of
from agentjournal.store.contract import EventStore, RecordedEvent
from agentjournal.streams import ledger_stream, session_of, session_stream

_PAGE: Final = 1000
_IDS: Final = uuid.UUID("5d0c2a3e-7b1f-4f7e-9a57-2a6c0e1b9d40")
_LEDGER: Final = ledger_stream("")


@dataclass(frozen=True)
class Erasure:
    """What an erasure did.

    Attributes:
        subject: The data subject.
        key_ids: Its destroyed keys.
        sessions: The sessions whose content was sealed under them (each has its
            ``agentjournal.SubjectErased``).
        erased_at: When (RFC 3339).
        written: The sessions this call wrote a ``SubjectErased`` to (empty: each was
            recorded already, by an earlier erasure of the subject).
    """

    subject: str
    key_ids: tuple[str, ...]
    sessions: tuple[str, ...]
    erased_at: str
    written: tuple[str, ...] = ()


def _checked(value: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{what} must be non-blank text")
    if len(value) > 1000:
        raise InvalidInput(f"{what} must be at most 1,000 characters")
    return value


async def erase(
    store: EventStore,
    keys: SubjectKeyStore,
    *,
    subject: str,
    reason: str,
    by: str,
    signing_key: SigningKey | None = None,
) -> Erasure:
    """Erase ``subject`` (see the module docs); with ``signing_key``, each affected session
    also gets a signed checkpoint after its ``SubjectErased``, so a verifier that trusts
    the key notices the erasure event dropped.

    Raises:
        InvalidInput: ``subject``, ``reason`` or ``by`` is blank or too long; nothing was
            written and no key destroyed.
        StoreError: An erasure event could not be written (run it again to finish).
    """
    _checked(subject, "subject")
    _checked(reason, "reason")
    _checked(by, "by")
    key_ids = keys.destroy(subject)
    erased_at = stamps.now().isoformat(timespec="microseconds").replace("+00:00", "Z")
    if not key_ids:
        return Erasure(subject, (), (), erased_at)
    found = await _affected(store, frozenset(key_ids))
    opened = OpeningStore(store, keys)
    sessions = sorted(found.streams)
    written: list[str] = []
    for session in sessions:
        kids = sorted(found.kids[session] - found.recorded.get(session, set()))
        if not kids:
            # An earlier (interrupted) run of this erasure recorded it; it may have died
            # before the checkpoint that follows, which would leave the erasure unsigned.
            if signing_key is not None and found.unsigned(session):
                await _checkpoint(opened, session, signing_key)
            continue
        body = events.SubjectErased(
            subject=subject,
            key_ids=kids,
            streams=sorted(found.streams[session]),
            sessions=sessions,
            reason=reason,
            by=by,
            erased_at=erased_at,
        )
        id_ = uuid.uuid5(_IDS, json.dumps([subject, session, kids]))
        await _record(opened, session, body.encode(), id_, signing_key)
        written.append(session)
    purge = abilities_of(store).purge
    if purge is not None:
        await purge.purge(sorted({s for streams in found.streams.values() for s in streams}))
    return Erasure(subject, tuple(key_ids), tuple(sessions), erased_at, tuple(written))


@dataclass
class _Found:
    streams: dict[str, set[str]]  # session -> its streams holding sealed content of the keys
    kids: dict[str, set[str]]  # session -> the keys its content is sealed under
    recorded: dict[str, set[str]]  # session -> keys a SubjectErased on it names already
    erased: dict[str, int]  # session -> its stream's revision of its last SubjectErased
    signed: dict[str, int]  # session -> its stream's revision its last checkpoint signs

    def unsigned(self, session: str) -> bool:
        """Whether ``session``'s last ``SubjectErased`` is after its last checkpoint."""
        return self.erased.get(session, -1) > self.signed.get(session, -1)


async def _affected(store: EventStore, key_ids: frozenset[str]) -> _Found:
    """One pass over the global order: where content sealed under ``key_ids`` is, by session."""
    parent: dict[str, str] = {}  # a subsession or continuation -> the stream it hangs off
    line_session: dict[str, str] = {}  # a branch's top stream -> its session
    hits: dict[str, set[str]] = {}  # stream -> keys
    recorded: dict[str, set[str]] = {}
    erased: dict[str, int] = {}
    signed: dict[str, int] = {}
    last: int | None = None
    while True:
        # From the last position read, inclusive: a position the store gave out, which
        # KurrentDB finds without a scan (position + 1 may not be one).
        page = await store.read_all(from_position=last or 0, limit=_PAGE)
        fresh = [event for event in page if last is None or event.position > last]
        for event in fresh:
            _learn(event, parent, line_session)
            kid = event.metadata.get(KEY_ID_KEY)
            if kid in key_ids:
                hits.setdefault(event.stream, set()).add(kid)
            elif event.type == events.SUBJECT_ERASED:
                session = session_of(event.stream)
                try:
                    named = events.SubjectErased.decode(event.data).key_ids
                except CodecError:
                    continue
                if session is not None:
                    recorded.setdefault(session, set()).update(named)
                    erased[session] = event.revision
            elif event.type == CHECKPOINT and event.stream.startswith(_LEDGER):
                session = event.stream.removeprefix(_LEDGER)
                head = _signed_head(event, session_stream(session))
                if head is not None:
                    signed[session] = max(head, signed.get(session, -1))
        if len(page) < _PAGE or not fresh:
            break
        last = fresh[-1].position
    found = _Found({}, {}, recorded, erased, signed)
    for stream, kids in hits.items():
        session = _session(stream, parent, line_session)
        if session is None:
            continue
        found.streams.setdefault(session, set()).add(stream)
        found.kids.setdefault(session, set()).update(kids)
    return found


def _signed_head(event: RecordedEvent, stream: str) -> int | None:
    """The revision of ``stream`` the checkpoint ``event`` signs (None: it signs none)."""
    try:
        heads = Checkpoint.decode(json.loads(event.data)).heads
    except (InvalidInput, ValueError, TypeError, KeyError):
        return None
    head = heads.get(stream)
    return None if head is None else head[0]


def _learn(event: RecordedEvent, parent: dict[str, str], line_session: dict[str, str]) -> None:
    """Note which stream ``event`` says another one hangs off, or which session it is of."""
    try:
        if event.type == events.SUBAGENT_STARTED:
            subagent, _ = events.decode_subagent_started(event.data)
            parent.setdefault(subagent.stream, subagent.parent_stream)
        elif event.type == events.SUBAGENT_CONTINUED:
            continued = events.SubagentContinued.decode(event.data)
            parent.setdefault(continued.subsession_stream, continued.parent_stream)
        elif event.type == events.BRANCH_STARTED:
            started = events.BranchStarted.decode(event.data)
            line_session[started.branch_stream] = started.session_id
    except (CodecError, ValueError):
        pass


def _session(stream: str, parent: Mapping[str, str], line_session: Mapping[str, str]) -> str | None:
    seen: set[str] = set()
    while stream not in seen:
        seen.add(stream)
        found = session_of(stream) or line_session.get(stream)
        if found is not None:
            return found
        if stream not in parent:
            return None
        stream = parent[stream]
    return None


async def _record(
    store: Any, session: str, data: bytes, id_: uuid.UUID, signing_key: SigningKey | None
) -> None:
    """``SubjectErased`` at the head of ``session``'s stream (then a checkpoint, with a key)."""
    line = _line(store, session)
    tree, facts, stream = line.tree, line.facts, line.facts.stream

    async def build() -> WritePlan:
        return plan_control(
            tree,
            facts,
            stream,
            events.SUBJECT_ERASED,
            data,
            next_index=await line.reader.next_index(),
            metadata={},
            id_=id_,
        )

    async with tree.lock:
        if not tree.loaded:
            await line.reader.load(0)
        await line.writer.write(build)
    if signing_key is not None:
        await Checkpoints(line, signing_key, DEFAULT_CHECKPOINT_EVERY).checkpoint({})


async def _checkpoint(store: Any, session: str, signing_key: SigningKey) -> None:
    """A signed checkpoint of ``session``'s main line as it is now."""
    await Checkpoints(_line(store, session), signing_key, DEFAULT_CHECKPOINT_EVERY).checkpoint({})


def _line(store: Any, session: str) -> Line:
    """``session``'s main line, read from ``store`` (not its read model) when first used."""
    stream = session_stream(session)
    return Line.of(store, SessionFacts(session, stream), SessionTree(stream), use_model=False)
