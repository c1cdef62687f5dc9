"""Sealing events: the chain keys and view commitment every event gets, and the events of
one write, per stream, sealed in order as they are planned (pure).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from agentjournal import events
from agentjournal.engine.tree import AuthorityLog, SessionTree
from agentjournal.ledger import redaction
from agentjournal.ledger.chain import GENESIS, seal
from agentjournal.shred.sealing import SubjectSealer
from agentjournal.store.contract import AppendRequest, NewEvent, StreamState, new_event


def seal_event(
    stream: str,
    revision: int,
    id_: uuid.UUID,
    type_: str,
    data: bytes,
    metadata: dict[str, str],
    prev: str,
    *,
    encoded: tuple[Mapping[str, Any], Any] | None = None,
) -> str:
    """Commit the event's redacted view (``aj.redacted``, when its type has one), then add
    the chain keys (:func:`agentjournal.ledger.chain.seal`); return its hash. Every event
    agentjournal writes is sealed here.

    ``encoded``: for an item's event, the object its data is the JSON of and the item
    (:class:`agentjournal.engine.codec.EncodedEvent`), from which the view is built
    without parsing the data (:func:`agentjournal.ledger.redaction.item_view`: the same
    view, or it says it cannot tell).
    """
    shown = None if encoded is None else redaction.item_view(type_, *encoded, metadata)
    if shown is None:
        shown = redaction.view(type_, data, metadata)
    if shown is not None:
        metadata[events.REDACTED_KEY] = redaction.view_digest(shown)
    return seal(stream, revision, str(id_), type_, data, metadata, prev)


class Events:
    """The events of one write, per stream, sealed in order as they are added; with a
    ``sealer``, each event's content is sealed under its subject's key first, so the
    chain covers the ciphertext."""

    def __init__(
        self,
        tree: SessionTree,
        next_index: int,
        trace: Mapping[str, str],
        *,
        sealer: SubjectSealer | None = None,
    ) -> None:
        self.sealer = sealer
        self.by_stream: dict[str, list[NewEvent]] = {}
        self.heads = dict(tree.heads)
        self.hashes = dict(tree.hashes)
        self.next_index = next_index
        self.trace = trace
        self.open_child = {s.parent_stream: s.stream for s in tree.chain}

    def opened(self, parent: str, child: str) -> None:
        """``child`` is open on ``parent`` from now on (``parent``'s later events name it in
        ``aj.open``)."""
        self.open_child[parent] = child

    def closed(self, parent: str) -> None:
        """No subagent is open on ``parent`` from now on."""
        self.open_child.pop(parent, None)

    def revision_of(self, stream: str) -> int:
        """The revision of ``stream``'s last event, with this write's events so far."""
        return self.heads.get(stream, -1) + len(self.by_stream.get(stream, []))

    def add(
        self,
        stream: str,
        type_: str,
        data: bytes,
        metadata: dict[str, str],
        id_: uuid.UUID,
        *,
        own_trace: bool = False,
        encoded: tuple[Mapping[str, Any], Any] | None = None,
    ) -> NewEvent:
        """Seal an event after ``stream``'s last; ``own_trace``: its metadata carries its own
        trace ids (a model response's), not the write's."""
        metadata[events.NEXT_INDEX_KEY] = str(self.next_index)
        metadata[events.SCHEMA_VERSION_KEY] = events.SCHEMA_VERSION_VALUE
        child = self.open_child.get(stream)
        if child:
            metadata[events.OPEN_KEY] = child
        if not own_trace:
            metadata.update(self.trace)
        revision = self.revision_of(stream) + 1
        prev = self.hashes.get(stream, "") if revision > 0 else GENESIS
        if self.sealer is not None:
            sealed = self.sealer.seal(stream, str(id_), type_, data, metadata)
            if sealed is not data:
                data, encoded = sealed, None  # the view is of what is stored
        self.hashes[stream] = seal_event(
            stream, revision, id_, type_, data, metadata, prev, encoded=encoded
        )
        event = new_event(type_, data, metadata, id_)
        self.by_stream.setdefault(stream, []).append(event)
        return event

    def requests(self, fresh: frozenset[str] | set[str] = frozenset()) -> list[AppendRequest]:
        """One request per stream; ``fresh`` streams must not exist yet, whatever was read."""
        return [
            AppendRequest(
                stream,
                new,
                StreamState.NO_STREAM
                if stream in fresh or self.heads.get(stream, -1) < 0
                else self.heads[stream],
            )
            for stream, new in self.by_stream.items()
        ]

    def add_log(self, request: AppendRequest, log: AuthorityLog, after: AuthorityLog) -> None:
        """The authority log's entries of this write (planned by
        :func:`~agentjournal.engine.plan_log.log_request`)."""
        self.by_stream[request.stream] = list(request.events)
        self.heads[request.stream] = log.revision
        self.hashes[request.stream] = after.hash

    def written(self) -> tuple[dict[str, int], dict[str, str]]:
        """The heads and hashes of the streams written, after this write."""
        heads = {stream: self.revision_of(stream) for stream in self.by_stream}
        return heads, {stream: self.hashes[stream] for stream in self.by_stream}


def add_guard(
    out: Events, top: str, guard: uuid.UUID, guarded: uuid.UUID, guarded_stream: str
) -> None:
    """``agentjournal.LineGuarded`` at ``top``'s head, naming the event it guards (which
    the caller made name it back): the write then expects ``top``'s exact head, which
    KurrentDB's multi-stream append cannot do for a stream without events."""
    body = events.LineGuarded(str(guarded), guarded_stream).encode()
    out.add(top, events.LINE_GUARDED, body, {events.TWIN_KEY: str(guarded)}, guard)
