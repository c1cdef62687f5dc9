"""The double's in-memory log and the server's commit decisions.

One :class:`Database` per double, used only from the double's event loop. Its
write path follows KurrentDB 26.0.2 step by step (file references are to the
public ``kurrent-io/KurrentDB`` repository at tag v26.0.2):

* ``IndexWriter.CheckCommit`` (``src/KurrentDB.Core/Services/Storage/ReaderIndex/
  IndexWriter.cs``) decides per stream: write, idempotent retry, wrong expected
  version, corrupted idempotency (ids that only partly match) or deleted;
* ``StorageWriterService.VerifyCommitChecks`` (``src/KurrentDB.Core/Services/
  Storage/StorageWriterService.cs``) combines the per-stream decisions of one
  (multi-stream) write; this is where 26.0 and 26.1 differ (see
  :class:`WrongExpectedVersion` and :class:`StreamDeleted`);
* a soft delete writes ``{"$tb": long.MaxValue}`` to ``$$stream``; a later write
  to the stream "undeletes" it with ``$tb`` = its revision before that write
  (``SoftUndeleteStream``), so the old events stay hidden and revisions go on.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

# Expected-revision codes of the v2 protocol, used internally for both APIs.
NO_STREAM = -1
ANY = -2
EXISTS = -4
DELETED_STREAM = 2**63 - 1  # EventNumber.DeletedStream (long.MaxValue)
FIRST_POSITION = 1024  # a fresh server's log starts with system records
RECORD_OVERHEAD = 96  # bytes a log record adds besides its payload


@dataclass(slots=True)
class Record:
    """One record of the log."""

    id: str
    stream: str
    revision: int
    position: int
    type: str
    content_type: str
    data: bytes
    metadata: bytes
    created: int  # 100 ns ticks since the Unix epoch, as the server reports it


@dataclass(slots=True)
class Stream:
    """A stream's records (hidden ones included) and its deletion state."""

    name: str
    records: list[Record] = field(default_factory=list)
    truncate_before: int = 0  # $tb after an undelete: earlier revisions stay hidden
    soft_deleted: bool = False  # $tb == DeletedStream: reads find no stream
    tombstoned: bool = False

    @property
    def last_revision(self) -> int:
        """The last event number, hidden events included (-1: none)."""
        return len(self.records) - 1

    @property
    def readable(self) -> bool:
        """Whether a read finds the stream."""
        return not self.soft_deleted and not self.tombstoned and self.records != []


@dataclass(frozen=True, slots=True)
class Proposed:
    """An event of a write, as the servicer decoded it."""

    id: str
    type: str
    content_type: str
    data: bytes
    metadata: bytes  # as a read returns it


@dataclass(frozen=True, slots=True)
class Written:
    """Where a write (or the original of an idempotent retry) left one stream.

    ``position`` is None when there is none to report: an empty write, or a
    retry whose original events can no longer be read (the server's
    ``IdempotentLogPosition`` of -1).
    """

    stream: str
    revision: int
    position: int | None


@dataclass(frozen=True, slots=True)
class Failure:
    """One stream's share of a failed write: its index in the write and its last revision."""

    index: int
    current: int


class WrongExpectedVersion(Exception):
    """The write was refused: ``failures`` as the server reports them.

    KurrentDB 26.0 reports no failure at all (an empty list) for a
    multi-stream write that mixes idempotent and new or conflicting streams, or
    whose ids partly match; 26.1 lists every conflicting or idempotent stream.
    """

    def __init__(self, failures: Sequence[Failure]) -> None:
        super().__init__(failures)
        self.failures = list(failures)


class StreamDeleted(Exception):
    """A stream of the write is deleted (tombstoned, or soft-deleted for ``EXISTS``).

    ``index`` is the stream the server names. 26.0 names the first deleted
    stream. 26.1 collects every failed stream (conflicting, idempotent, deleted)
    in the write's order, answers "deleted" when any of them is, and names the
    first failure (``RequestManagerBase.Handle(ConsistencyChecksFailed)``, then
    ``StreamsService.MapToError`` with ``ConsistencyCheckFailures[0]``): that
    may be a stream that only conflicts.
    """

    def __init__(self, index: int, stream: str) -> None:
        super().__init__(stream)
        self.index = index
        self.stream = stream


class InvalidPosition(Exception):
    """A read of ``$all`` started inside a record."""


class _Decision(enum.Enum):
    OK = "ok"
    IDEMPOTENT = "idempotent"
    WRONG_EXPECTED_VERSION = "wrong expected version"
    CORRUPTED_IDEMPOTENCY = "corrupted idempotency"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class _Check:
    decision: _Decision
    current: int
    soft_deleted: bool = False
    last: Record | None = None  # the original's last event, for an idempotent retry


class Database:
    """The in-memory log. Used only from the server's event loop.

    Args:
        idempotency_cache_size: How many recent event ids are remembered to
            recognise retries with ``ANY``/``EXISTS`` (the server's
            ``_committedEvents`` cache; bounded, lost on restart).
        server_version: ``"26.0"`` or ``"26.1"``: how a multi-stream write that
            partly matches earlier writes or meets a deleted stream is refused
            (see :class:`WrongExpectedVersion`, :class:`StreamDeleted`).
            ``"25.0"`` decides as 26.0 (it has no multi-stream writes).
    """

    def __init__(self, *, idempotency_cache_size: int, server_version: str) -> None:
        if server_version not in ("25.0", "26.0", "26.1"):
            raise ValueError(
                f"server_version must be '25.0', '26.0' or '26.1', got {server_version!r}"
            )
        self.server_version = server_version
        self._lists_failures = server_version == "26.1"
        self.log: list[Record] = []
        self.log_positions: list[int] = []
        self.streams: dict[str, Stream] = {}
        self.next_position = FIRST_POSITION
        self._recent_ids: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._cache_size = idempotency_cache_size
        self._changed: asyncio.Event | None = None

    # -- notifications

    def changed(self) -> asyncio.Event:
        """Return an event that is set at the next commit."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def notify(self) -> None:
        """Wake every subscriber (after a commit, or when the server stops)."""
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    # -- positions

    def is_record_boundary(self, position: int) -> bool:
        """Whether ``position`` is where a record starts (or the very start of the log)."""
        if position == 0:
            return True
        index = bisect.bisect_left(self.log_positions, position)
        return index < len(self.log_positions) and self.log_positions[index] == position

    @property
    def last_position(self) -> int:
        """Where the last record starts (0 for an empty log)."""
        return self.log_positions[-1] if self.log_positions else 0

    # -- writes

    def write(self, requests: Sequence[tuple[str, int, Sequence[Proposed]]]) -> list[Written]:
        """Check every stream of one write, then write all of them or none.

        Raises:
            WrongExpectedVersion: Some stream is not in its expected state.
            StreamDeleted: A stream is tombstoned (or soft-deleted and ``EXISTS``
                was expected).
        """
        checks = [
            self._check_commit(name, expected, [event.id for event in events])
            for name, expected, events in requests
        ]
        self._verify(checks)
        if all(check.decision is _Decision.IDEMPOTENT for check in checks):
            # StorageMessage.AlreadyCommitted: the original's revisions and position.
            positions = [
                check.last.position
                for check in checks
                if check.last is not None and self._readable(check.last)
            ]
            position = max(positions) if positions else None
            return [
                Written(name, check.last.revision if check.last else check.current, position)
                for (name, _, _), check in zip(requests, checks, strict=True)
            ]
        results: list[Written] = []
        undelete: list[tuple[Stream, int]] = []
        for (name, _, events), check in zip(requests, checks, strict=True):
            stream = self.streams.get(name)
            if not events:
                results.append(Written(name, check.current, None))
                continue
            if stream is None:
                stream = self.streams[name] = Stream(name)
            if check.soft_deleted:
                undelete.append((stream, check.current + 1))
            for event in events:
                record = self._append_record(
                    name,
                    stream.last_revision + 1,
                    event.id,
                    event.type,
                    event.content_type,
                    event.data,
                    event.metadata,
                )
                stream.records.append(record)
                self._remember(record)
            results.append(Written(name, stream.last_revision, stream.records[-1].position))
        for stream, truncate_before in undelete:
            stream.soft_deleted = False
            stream.truncate_before = truncate_before
            self._write_metadata(stream.name, truncate_before)
        self.notify()
        return results

    def _verify(self, checks: Sequence[_Check]) -> None:
        """StorageWriterService.VerifyCommitChecks: raise unless the write may go on."""
        single = len(checks) == 1
        failures: list[Failure] = []
        idempotent = 0
        deleted = False
        for index, check in enumerate(checks):
            if check.decision is _Decision.DELETED:
                if not self._lists_failures:
                    raise StreamDeleted(index, "")
                # 26.1: a consistency-check failure like the others; "deleted" wins below.
                deleted = True
                failures.append(Failure(index, check.current))
            elif check.decision is _Decision.CORRUPTED_IDEMPOTENCY:
                if not self._lists_failures:
                    # "for backwards compatibility" only a single stream is named.
                    raise WrongExpectedVersion([Failure(0, check.current)] if single else [])
                failures.append(Failure(index, check.current))
            elif check.decision is _Decision.WRONG_EXPECTED_VERSION:
                failures.append(Failure(index, check.current))
            elif check.decision is _Decision.IDEMPOTENT:
                idempotent += 1
        if idempotent == len(checks) or (not failures and not idempotent):
            return
        if idempotent and not self._lists_failures:
            raise WrongExpectedVersion([])  # a retry mixed with new writes: nothing to name
        if idempotent:
            failures = [
                Failure(index, check.current)
                for index, check in enumerate(checks)
                if check.decision is not _Decision.OK
            ]
        if deleted:
            raise StreamDeleted(failures[0].index, "")
        raise WrongExpectedVersion(failures)

    def _check_commit(self, name: str, expected: int, ids: Sequence[str]) -> _Check:
        """IndexWriter.CheckCommit for one stream of a write."""
        stream = self.streams.get(name)
        if stream is None:  # a completely new stream
            ok = expected in (ANY, NO_STREAM)
            return _Check(_Decision.OK if ok else _Decision.WRONG_EXPECTED_VERSION, -1)
        if stream.tombstoned:
            return _Check(_Decision.DELETED, DELETED_STREAM)
        current = stream.last_revision
        soft = stream.soft_deleted
        if expected == EXISTS:
            if soft:
                return _Check(_Decision.DELETED, current, True)
            if current < 0:
                return _Check(_Decision.WRONG_EXPECTED_VERSION, current)
        if expected in (ANY, EXISTS):
            last_hit: Record | None = None
            for event_id in ids:
                hit = self._recent_ids.get(event_id)
                if hit is None or hit[0] != name:
                    if last_hit is None:
                        return _Check(_Decision.OK, current, soft)
                    return _Check(_Decision.CORRUPTED_IDEMPOTENCY, current)
                last_hit = stream.records[hit[1]]
            if last_hit is None:  # no events
                return _Check(_Decision.OK, current, soft)
            return _Check(_Decision.IDEMPOTENT, current, last=last_hit)
        if expected < current:
            for offset, event_id in enumerate(ids):
                number = expected + 1 + offset
                if number <= current and stream.records[number].id == event_id:
                    continue
                if offset > 0:
                    return _Check(_Decision.CORRUPTED_IDEMPOTENCY, current)
                if expected == NO_STREAM and soft:
                    return _Check(_Decision.OK, current, True)
                return _Check(_Decision.WRONG_EXPECTED_VERSION, current)
            if not ids:
                return _Check(_Decision.WRONG_EXPECTED_VERSION, current)
            return _Check(_Decision.IDEMPOTENT, current, last=stream.records[expected + len(ids)])
        if expected > current:
            return _Check(_Decision.WRONG_EXPECTED_VERSION, current)
        return _Check(_Decision.OK, current, soft)

    def _readable(self, record: Record) -> bool:
        """Whether a read by event number finds ``record`` (the server's IdempotentLogPosition)."""
        stream = self.streams[record.stream]
        return stream.readable and record.revision >= stream.truncate_before

    def delete(self, name: str, expected: int, *, tombstone: bool) -> int:
        """Soft-delete or tombstone a stream; return the position of the record written.

        Raises:
            WrongExpectedVersion: The stream is not in the expected state (or,
                for a soft delete, does not exist); the one failure holds the
                current revision (-1: no stream).
            StreamDeleted: The stream is tombstoned.
        """
        stream = self.streams.get(name)
        if stream is not None and stream.tombstoned:
            raise StreamDeleted(0, name)
        exists = stream is not None and stream.readable
        current = stream.last_revision if stream is not None and exists else -1
        if (
            (expected == EXISTS and not exists)
            or (expected == NO_STREAM and exists)
            or (expected >= 0 and expected != current)
            or (not tombstone and not exists)
        ):
            raise WrongExpectedVersion([Failure(0, current)])
        if stream is None:
            stream = self.streams[name] = Stream(name)
        if tombstone:
            stream.tombstoned = True
            record = self._append_record(
                name, DELETED_STREAM, str(uuid.uuid4()), "$streamDeleted", "application/json"
            )
        else:
            stream.soft_deleted = True
            record = self._write_metadata(name, DELETED_STREAM)
        self.notify()
        return record.position

    def _write_metadata(self, name: str, truncate_before: int) -> Record:
        meta_name = f"$${name}"
        meta = self.streams.setdefault(meta_name, Stream(meta_name))
        record = self._append_record(
            meta_name,
            meta.last_revision + 1,
            str(uuid.uuid4()),
            "$metadata",
            "application/json",
            json.dumps({"$tb": truncate_before}).encode(),
        )
        meta.records.append(record)
        return record

    def _append_record(
        self,
        stream: str,
        revision: int,
        event_id: str,
        event_type: str,
        content_type: str,
        data: bytes = b"",
        metadata: bytes = b"",
    ) -> Record:
        record = Record(
            id=event_id,
            stream=stream,
            revision=revision,
            position=self.next_position,
            type=event_type,
            content_type=content_type,
            data=data,
            metadata=metadata,
            created=time.time_ns() // 100,
        )
        self.next_position += RECORD_OVERHEAD + len(data) + len(metadata) + len(event_type)
        self.log.append(record)
        self.log_positions.append(record.position)
        return record

    def _remember(self, record: Record) -> None:
        self._recent_ids[record.id] = (record.stream, record.revision)
        while len(self._recent_ids) > self._cache_size:
            self._recent_ids.popitem(last=False)
