"""Signing a line's heads: checkpoints at the end of a run, after enough events, or asked
for, and the plan of one (:func:`plan_checkpoint`, pure).

:class:`Checkpoints` owns the signing key and how many events may go unsigned; what it
signs is read from the :class:`~agentjournal.engine.line.Line` it is given.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Final

from agentjournal import events
from agentjournal.engine import stamps
from agentjournal.engine.line import Line
from agentjournal.engine.plan import WritePlan
from agentjournal.engine.sealing import seal_event
from agentjournal.engine.tree import Commit
from agentjournal.errors import InvalidInput
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import SigningKey, signed_event_id
from agentjournal.store.contract import AppendRequest, NewEvent, StreamState
from agentjournal.streams import branches_stream, ledger_stream

logger = logging.getLogger("agentjournal.engine")

DEFAULT_CHECKPOINT_EVERY: Final = 100


class Checkpoints:
    """The checkpoints of one line.

    Args:
        line: The line whose heads are signed.
        key: Signs checkpoints; without one none are written.
        every: Events written between two checkpoints (at least 1).

    Raises:
        InvalidInput: ``every`` is below 1.
    """

    def __init__(self, line: Line, key: SigningKey | None, every: int) -> None:
        if every < 1:
            raise InvalidInput(f"checkpoint_every must be at least 1, got {every}")
        self._line = line
        self._key = key
        self._every = every

    @property
    def key(self) -> SigningKey | None:
        """The signing key (None: no checkpoint is written)."""
        return self._key

    async def checkpoint(
        self, trace: Mapping[str, str], *, extra: Mapping[str, tuple[int, str]] | None = None
    ) -> Checkpoint | None:
        """Sign the heads of the session tree now, and ``extra`` (heads of streams this
        object does not follow, e.g. every other line's as ``bundle export`` read them);
        None without a key.

        Raises:
            StoreError: The checkpoint could not be written.
        """
        if self._key is None:
            return None
        async with self._line.tree.lock:
            await self._line.reader.refresh(0)
            return await self._write(trace, extra=extra)

    async def maybe(
        self,
        *,
        force: bool,
        trace: Mapping[str, str],
        extra: Mapping[str, tuple[int, str]] | None = None,
    ) -> None:
        """Checkpoint at the end of a run or after enough events (under the tree lock)."""
        if self._key is None or not (force or self._line.tree.unsigned >= self._every):
            return
        try:
            await self._write(trace, extra=extra)
        except Exception:  # the write it follows has landed; the next checkpoint covers it
            logger.exception("could not write a checkpoint of %s", self._line.tree.stream)

    async def _write(
        self, trace: Mapping[str, str], *, extra: Mapping[str, tuple[int, str]] | None = None
    ) -> Checkpoint | None:
        """Sign the heads this object knows: its line's followed streams, the line's
        authority log, the session's branch registry (when there is one) and ``extra``
        (a fork's new branch stream; every line's heads as ``bundle export`` read them),
        the newer head of a stream in both."""
        line = self._line
        tree = line.tree
        key = self._key
        assert key is not None
        await line.reader.catch_up()  # sign the heads as they are now, not as last seen
        signed: list[Checkpoint] = []

        async def build() -> WritePlan | None:
            heads = {
                stream: (revision, tree.hashes.get(stream, ""))
                for stream, revision in tree.heads.items()
                if revision >= 0
            }
            log = await line.reader.authority_log(fresh=True)
            if log.revision >= 0:
                heads[line.facts.authority_stream] = (log.revision, log.hash)
            registry = await line.registry_head()
            if registry[0] >= 0:
                heads[branches_stream(line.facts.session_id)] = registry
            for stream, head in (extra or {}).items():
                # An older read of a stream this object follows must not lower its head.
                if head[0] > heads.get(stream, (-1, ""))[0]:
                    heads[stream] = head
            if not heads:
                return None
            plan, checkpoint = plan_checkpoint(
                line.facts.session_id,
                key,
                heads,
                await line.reader.ledger_head(),
                now=stamps.now(),
                trace={
                    k: v for k, v in trace.items() if k in (events.TRACE_ID_KEY, events.SPAN_ID_KEY)
                },
            )
            signed[:] = [checkpoint]
            return plan

        landed = await line.writer.write(build)
        return signed[0] if landed is not None else None


def plan_checkpoint(
    session_id: str,
    key: SigningKey,
    heads: Mapping[str, tuple[int, str]],
    ledger: tuple[int, str],
    *,
    now: datetime,
    trace: Mapping[str, str],
) -> tuple[WritePlan, Checkpoint]:
    """A checkpoint of ``heads`` signed with ``key``, after the checkpoint stream's head."""
    stream = ledger_stream(session_id)
    head, prev = ledger
    metadata = {events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE, **trace}
    checkpoint = Checkpoint.sign(
        key, session_id, heads, now, sequence=head + 1, previous=prev, metadata=metadata
    )
    data = checkpoint.encode()
    id_ = signed_event_id(stream, checkpoint.signature)
    sealed = seal_event(stream, head + 1, id_, CHECKPOINT, data, metadata, prev)
    event = NewEvent(type=CHECKPOINT, data=data, metadata=metadata, id=id_)
    expected = StreamState.NO_STREAM if head < 0 else head
    commit = Commit(heads={}, hashes={}, ledger=(head + 1, sealed), signed=True)
    return WritePlan([AppendRequest(stream, [event], expected)], commit), checkpoint
