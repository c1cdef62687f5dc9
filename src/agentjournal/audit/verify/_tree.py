"""The indexes the stages after integrity share (:class:`Tree`: openers, line tops, logs,
grants, closers, line ends), the policies the authority stage records in it, and small
readers of events (a decoded body, a metadata number, the grant an agent spoke under)."""

from __future__ import annotations

import bisect
from typing import Any, Final

from agentjournal import events
from agentjournal.audit.verify._integrity import Markers
from agentjournal.authority import Authority, Policy
from agentjournal.errors import CodecError, InvalidInput
from agentjournal.records import Record
from agentjournal.shred.fields import KEY_ID_KEY
from agentjournal.streams import (
    KEYS_STREAM,
    MAIN_BRANCH,
    authority_stream,
    branch_authority_stream,
    branch_stream,
    branches_stream,
    ledger_stream,
)


def decoded(kind: Any, record: Record) -> Any:
    """``kind.decode`` of a record's data, or None when it is not such an event."""
    try:
        return kind.decode((record.data or "").encode())
    except (CodecError, UnicodeEncodeError, RecursionError):
        return None


def metadata_int(raw: str | None) -> int | None:
    """A metadata value as a non-negative int (ASCII digits only), else None."""
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() else None


class Policies:
    """The policies an authority log recorded, by digest."""

    def __init__(self) -> None:
        self.by_digest: dict[str, Policy] = {}

    def get(self, digest: str | None) -> Policy:
        if digest is None or digest not in self.by_digest:
            raise InvalidInput(f"policy {digest} is not on the authority log")
        return self.by_digest[digest]

    def add(self, digest: str, policy: Policy) -> None:
        self.by_digest[digest] = policy

    def copy(self) -> Policies:
        found = Policies()
        found.by_digest = dict(self.by_digest)
        return found


NOTED: Final = frozenset(
    {
        events.SUBAGENT_STARTED,
        events.SUBAGENT_COMPLETED,
        events.AUTHORITY_GRANTED,
        events.MODEL_RESPONDED,
        events.LINE_GUARDED,
        events.SESSION_CLEARED,
        events.AUTHORITY_RESET,
        events.BRANCH_FORKED,
        events.SUBJECT_ERASED,
        events.RUN_PAUSED,
        events.GUARDRAIL_DECIDED,
        events.AUTHORITY_REFUSED,
    }
)
"""The event types :attr:`Tree.noted` gathers: what the twins and branches checks read of
closings and forks, the authority check of grants, the usage check of model responses, the
guards check of guards and what they guard, the erasure check of erasures, the approvals
check of paused runs and the containment check of decisions and refusals."""

MARKED: Final = (
    events.CLOSES_KEY,
    events.LINE_END_KEY,
    KEY_ID_KEY,
    events.INTERRUPT_KEY,
    events.OPAQUE_KEY,
)
"""The metadata keys :attr:`Tree.marked` gathers the events of (with their streams' names),
whatever their type: a closing (the checkpoints' coverage), a line's end (the branches
check), content sealed under a subject's key (the erasure check), a question or an answer
(the approvals check), an opaque item (the containment check)."""


class Tree:
    """Indexes over the bundle's streams."""

    def __init__(
        self,
        session_id: str,
        session_stream: str,
        streams: dict[str, list[Record]],
        markers: Markers | None = None,
    ):
        self.session_id = session_id
        self.markers = markers if markers is not None else {}
        self.session_stream = session_stream
        self.ledger_stream = ledger_stream(session_id)
        self.authority_stream = authority_stream(session_id)
        self.streams = streams
        self._grants: list[Record] | None = None
        self._closers: dict[str, list[tuple[int, str, int]]] | None = None
        self._authorities: dict[str, Authority | None] = {}
        self._line_logs: dict[str, str] | None = None
        self._ends: dict[str, Record] | None = None
        self.policies = Policies()  # filled by the authority check
        # Subsession stream -> the parent copy of the SubagentStarted that opened it.
        self.opened_by: dict[str, Record] = {}
        # The events of the types the checks after integrity look for (NOTED), with their
        # streams' names, and those of the metadata keys they look for on any event (MARKED),
        # by key, each in the order of the streams and of each stream's events: those checks
        # read these lists, not every event again.
        self.noted: list[tuple[str, Record]] = []
        self.marked: dict[str, list[tuple[str, Record]]] = {key: [] for key in MARKED}
        # One pass over every event for these indexes.
        by_id: dict[str, Record] = {}
        noted, opened_by, marked = self.noted, self.opened_by, self.marked
        closing, ending, sealed, asking, opaque = MARKED
        for name, stream in streams.items():
            for event in stream:
                by_id[event.id] = event
                kind = event.type
                if kind in NOTED:
                    noted.append((name, event))
                    # ``opens`` is None but for SubagentStarted: its type first, no call.
                    if kind == events.SUBAGENT_STARTED and event.opens is not None:
                        opened_by[event.opens] = event
                metadata = event.metadata
                # A lookup of each (none of the keys is there, nearly always), not a loop.
                if (
                    closing in metadata
                    or ending in metadata
                    or sealed in metadata
                    or asking in metadata
                    or opaque in metadata
                ):
                    for key in MARKED:
                        if key in metadata:
                            marked[key].append((name, event))
        self.by_id = by_id
        # Branches: the registry, the branches' own authority logs, and each
        # stream that begins with a BranchStarted (a line's top stream) or a
        # SubagentContinued (a continuation), its first event decoded (None: malformed,
        # which the branches check reports).
        self.registry_stream = branches_stream(session_id)
        self.line_log_prefix = f"{self.authority_stream}@"
        self.branch_prefix = branch_stream(session_id, "x")[:-1]
        self.started: dict[str, tuple[Record, events.BranchStarted | None]] = {}
        self.continued: dict[str, tuple[Record, events.SubagentContinued | None]] = {}
        for name, stream in streams.items():
            first = stream[0] if stream else None
            if first is not None and first.type == events.BRANCH_STARTED:
                self.started[name] = (first, decoded(events.BranchStarted, first))
            elif first is not None and first.type == events.SUBAGENT_CONTINUED:
                self.continued[name] = (first, decoded(events.SubagentContinued, first))
        # Each line's top stream by name (main's is the session stream).
        self.tops: dict[str, str] = {MAIN_BRANCH: session_stream}
        for name, (_, started) in self.started.items():
            if started is not None and started.branch_stream == name:
                self.tops.setdefault(started.branch, name)

    def is_tree_stream(self, name: str) -> bool:
        """Whether ``name`` is a stream of a line (the session stream, a branch's top
        stream, a subsession or continuation), not a log, the registry or the keys."""
        return name not in (
            self.ledger_stream,
            self.authority_stream,
            self.registry_stream,
            KEYS_STREAM,
        ) and not name.startswith(self.line_log_prefix)

    def is_top(self, name: str) -> bool:
        """Whether ``name`` is a line's top stream (where a run's first agent speaks)."""
        return name == self.session_stream or name in self.started

    def line_streams(self) -> dict[str, str]:
        """Each stream of a line -> its line's top stream: the top, the subsessions opened
        from it (any depth) and, on a branch, its continuations and what they opened."""
        owner: dict[str, str] = {}
        opened = self.noted_on(events.SUBAGENT_STARTED)
        for top in (self.session_stream, *self.started):
            pending = [top]
            first = self.started.get(top)
            if first is not None and first[1] is not None:
                pending.extend(first[1].continuations.values())
            while pending:
                name = pending.pop()
                if name in owner or name not in self.streams:
                    continue
                owner[name] = top
                pending.extend(r.opens for r in opened.get(name, ()) if r.opens is not None)
        return owner

    def opener(self, stream: str) -> Record | None:
        """The event that opened ``stream`` for the agent speaking there: the parent copy of
        its ``SubagentStarted``, or its ``SubagentContinued`` (a continuation holds the grant
        it copied from the subagent it continues); None for a line's top stream."""
        found = self.opened_by.get(stream)
        if found is None and self.continued.get(stream, (None, None))[1] is not None:
            found = self.continued[stream][0]
        return found

    def line_logs(self) -> dict[str, str]:
        """Each line's top stream -> its own authority log's stream (main's is the
        session's log; a branch's ``AgentAuthority-{id}@{key}``)."""
        if self._line_logs is None:
            self._line_logs = {self.session_stream: self.authority_stream}
            for name, (_, started) in self.started.items():
                if started is None or started.branch_stream != name:
                    continue
                try:
                    self._line_logs[name] = branch_authority_stream(self.session_id, started.branch)
                except InvalidInput:
                    continue  # a name no branch can have: its fork fails the branches check
        return self._line_logs

    def grants_on(self, stream: str) -> list[Record]:
        """The ``AuthorityGranted`` events on ``stream`` (runs started there, handoffs that
        opened no subsession), in order."""
        if self._grants is None:
            self._grants = [e for _, e in self.noted if e.type == events.AUTHORITY_GRANTED]
        return [grant for grant in self._grants if grant.stream == stream]

    def noted_on(self, *kinds: str) -> dict[str, list[Record]]:
        """Each stream's events of ``kinds`` (types in :data:`NOTED`), in order, by the
        stream's name."""
        found: dict[str, list[Record]] = {}
        for name, event in self.noted:
            if event.type in kinds:
                found.setdefault(name, []).append(event)
        return found

    def marked_on(self, key: str) -> dict[str, list[Record]]:
        """Each stream's events with the metadata ``key`` (one of :data:`MARKED`), in order,
        by the stream's name."""
        found: dict[str, list[Record]] = {}
        for name, event in self.marked[key]:
            found.setdefault(name, []).append(event)
        return found

    def authority(self, event: Record) -> Authority | None:
        """The authority an ``AuthorityGranted``, ``SubagentStarted`` or
        ``SubagentContinued`` records (parsed once)."""
        if event.id not in self._authorities:
            body = event.body or {}
            if event.type == events.AUTHORITY_GRANTED:
                raw = body.get("authority")
            elif event.type == events.SUBAGENT_CONTINUED:
                continued = self.continued.get(event.stream, (None, None))[1]
                raw = continued.granted_authority if continued is not None else None
            else:
                raw = events.granted_authority(body)
            self._authorities[event.id] = None if raw is None else Authority.from_json(raw)
        return self._authorities[event.id]

    def closers(self) -> dict[str, list[tuple[int, str, int]]]:
        """Per stream, its events that cover another stream's events, in order: the
        revision, the other stream, and the last revision of it covered. A closing
        ``SubagentCompleted`` covers the subsession it closed through its twin; a
        ``BranchStarted`` (revision 0 of a branch) covers each parent-line place it binds
        (its base and authority log), a ``SubagentContinued`` the original it continues:
        the verifier checks those places hold the hashes recorded."""
        if self._closers is None:
            self._closers = {}
            closings = self.marked_on(events.CLOSES_KEY)
            for name in self.streams:
                found: list[tuple[int, str, int]] = []
                places: list[events.StreamPlace] = []
                started = self.started.get(name, (None, None))[1]
                if started is not None:
                    places.extend(started.base)
                    if started.authority is not None:
                        places.append(started.authority)
                continued = self.continued.get(name, (None, None))[1]
                if continued is not None:
                    places.append(continued.continues)
                found.extend(
                    (0, place.stream, place.revision)
                    for place in places
                    if place.stream in self.streams and place.stream != name
                )
                for event in closings.get(name, ()):
                    child = event.metadata[events.CLOSES_KEY]
                    if child and child in self.streams:
                        twin = self.twin_of(event)
                        if twin is not None and twin.stream == child:
                            found.append((event.revision, child, twin.revision))
                if found:
                    self._closers[name] = found
        return self._closers

    def twin_of(self, event: Record) -> Record | None:
        return self.by_id.get(event.metadata.get(events.TWIN_KEY, ""))

    def head(self, stream: str) -> Record | None:
        found = self.streams.get(stream)
        return found[-1] if found else None

    def ends(self) -> dict[str, Record]:
        """Each ended branch line's top stream -> its end, the first ``BranchDeleted`` on
        it. Anywhere on the stream, not only last: an event a key holder put after it must
        not make the line read as live."""
        if self._ends is None:
            self._ends = {}
            for name in self.started:
                end = next((e for e in self.streams[name] if e.type == events.BRANCH_DELETED), None)
                if end is not None:
                    self._ends[name] = end
        return self._ends


def grant_at(tree: Tree, stream: str, revision: int) -> Record | None:
    """The grant of the agent speaking on ``stream`` at ``revision``: the newest
    ``AuthorityGranted`` before it on that stream (a run's root, a run resumed there, a handoff
    that opened no subsession), else the ``SubagentStarted`` that opened the stream (or, on a
    continuation, its ``SubagentContinued``, which carries the grant it copied)."""
    grants = tree.grants_on(stream)
    position = bisect.bisect_left(grants, revision, key=lambda grant: grant.revision)
    if position:
        return grants[position - 1]
    return tree.opener(stream)


def authority_at(tree: Tree, stream: str, revision: int) -> Authority | None:
    """The effective authority of the agent speaking on ``stream`` at ``revision``."""
    grant = grant_at(tree, stream, revision)
    return tree.authority(grant) if grant is not None else None


def agent_of(grant: Record) -> Any:
    """The agent a grant is for (``AuthorityGranted.agent``, ``SubagentStarted.agent_type``)."""
    body = grant.body or {}
    return body.get("agent" if grant.type == events.AUTHORITY_GRANTED else "agent_type")
