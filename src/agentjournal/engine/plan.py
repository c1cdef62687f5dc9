"""Write plans: the exact appends of one write, decided before anything is written (pure).

A :class:`WritePlan` is the store requests of a write — every event id,
message index, twin link and chain hash decided — and the :class:`Commit` the
tree takes on when the store accepts them. The writer
(:mod:`agentjournal.engine.writer`) appends a plan; everything here is a
function of what it is given, so each plan is unit-tested directly.

- :func:`plan_items` — an ``add_items`` (and closing subagents, and a
  compaction's hiding): routing (:mod:`agentjournal.engine.routing`), then the
  canonical events (:mod:`agentjournal.engine.codec`), the twins of every
  subagent opened or closed, and the authority log's entries for its grants.
- :func:`plan_control` — one event that is no item (a decision, a refusal, a
  run's grant, a pop, a clear), with the authority log's entry when it grants.
- :func:`plan_log` — entries of the authority log alone (a reset).
- :func:`plan_checkpoint` — a signed checkpoint of the heads.
- :func:`seal_event` — the chain keys and view commitment every event gets.

:func:`plan_items` and :func:`plan_control` first write the run's model
responses not yet written (:class:`Responded`: one ``agentjournal.ModelResponded``
each, on the stream of the agent that called the model), so a response rides on
the next write the session makes and lands with it or not at all.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from agentjournal import events
from agentjournal._calls import call_of
from agentjournal.authority import Authority, Policy
from agentjournal.engine import codec, stamps
from agentjournal.engine.routing import Plan, plan_write, starts_a_run
from agentjournal.engine.timeline import Clear, Entry, Key, Pop, TimelineEvent, plain_text
from agentjournal.engine.tree import AuthorityLog, Commit, SessionTree
from agentjournal.engine.turns import is_user
from agentjournal.errors import CodecError
from agentjournal.ledger import redaction
from agentjournal.ledger.chain import GENESIS, seal
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import SigningKey, signed_event_id
from agentjournal.store.contract import AppendRequest, NewEvent, StreamState, event_id_series
from agentjournal.streams import authority_stream, branch_authority_stream, ledger_stream

__all__ = [
    "Grant",
    "ItemsPlan",
    "Produced",
    "Responded",
    "RunView",
    "SessionFacts",
    "WritePlan",
    "plan_checkpoint",
    "plan_control",
    "plan_items",
    "plan_log",
    "run_grant",
    "seal_event",
]

_ASSISTANT_TYPES: Final = frozenset(
    {"AssistantTextGenerated", "AssistantToolCallsGenerated", "AssistantThinkingGenerated"}
)


@dataclass(frozen=True, slots=True)
class Produced:
    """What the hooks learned about a model output item: its response and speaker.

    Attributes:
        response_id: The model response's id.
        usage_json: Its token usage as canonical ``TokenUsage`` JSON.
        agent: The agent whose response it was.
    """

    response_id: str | None
    usage_json: str | None
    agent: str


@dataclass(frozen=True, slots=True)
class Responded:
    """A model response whose ``agentjournal.ModelResponded`` event is not written yet.

    It is written with the next write the session makes (:func:`plan_items`,
    :func:`plan_control`), before that write's own events, and its id is fixed
    when the response arrives: every attempt of every write carries the same
    event, and a write that landed is recognised by it
    (the ``responded`` ids of its :class:`~agentjournal.engine.tree.SessionTree`).

    Attributes:
        id: Its event id.
        agent: The agent that called the model (it picks the stream).
        data: The event's data (:meth:`agentjournal.tokens.ModelResponse.encode`).
        metadata: Its own metadata: the agent's ``trace_id``/``span_id`` when the
            response arrived, ``aj.response_id`` when the model gave one.
    """

    id: uuid.UUID
    agent: str
    data: bytes
    metadata: Mapping[str, str]


@dataclass(slots=True)
class Grant:
    """A handoff's grant not yet written: on its ``SubagentStarted`` when the write carries
    the handoff's call (``call_id``), else as an ``AuthorityGranted`` of its own.

    Attributes:
        sender: The agent that handed off.
        receiver: The agent that received the handoff.
        authority: What the receiver holds.
        call_id: The handoff's call, once the hooks matched it.
    """

    sender: str
    receiver: str
    authority: Authority
    call_id: str | None = None


class RunView(Protocol):
    """What a write needs to know of the run it belongs to (the adapter's run state)."""

    @property
    def identity(self) -> Any:
        """The run, as a weak reference to what identifies it (None outside a run)."""

    @property
    def speaker(self) -> str | None:
        """The agent speaking now."""

    @property
    def handoffs(self) -> Mapping[str, tuple[str, str]]:
        """Handoff call id -> (sender, receiver), matched and not yet written."""

    @property
    def grants(self) -> Sequence[Grant]:
        """The handoffs' grants not yet written."""

    @property
    def finished(self) -> str | None:
        """The last agent's final output, once it finished."""

    @property
    def responses(self) -> Sequence[Responded]:
        """The run's model responses not yet written, oldest first."""

    def produced_by(self, item: Mapping[str, Any]) -> Produced | None:
        """What the hooks learned about the model output item ``item`` came from."""

    def same_run(self, run: Any) -> bool:
        """Whether ``run`` (a tree's ``chain_run``) is this run."""


@dataclass(frozen=True)
class SessionFacts:
    """What a session object adds to every write, beyond its tree and its run.

    Attributes:
        session_id: The session.
        stream: Its stream, ``AgentSession-{id}``.
        app_name: Recorded on ``SessionStarted``.
        user_id: Recorded on ``SessionStarted``.
        agent_name: Recorded on ``SessionStarted``.
        policy: The authority policy, if any.
        guarded: Whether a guardrail checks the session's calls.
        record_payloads: Whether decisions and refusals keep what they judged.
        branch: The branch the session is on (None: the main line, ``stream`` is then
            ``AgentSession-{id}``; else ``stream`` is the branch's top stream).
    """

    session_id: str
    stream: str
    app_name: str | None = None
    user_id: str | None = None
    agent_name: str | None = None
    policy: Policy | None = None
    guarded: bool = False
    record_payloads: bool = True
    branch: str | None = None

    @property
    def authority_stream(self) -> str:
        """The line's authority log: the session's, or the branch's own (DESIGN §17.3)."""
        if self.branch is None:
            return authority_stream(self.session_id)
        return branch_authority_stream(self.session_id, self.branch)

    def policy_metadata(self) -> dict[str, str]:
        """``aj.policy``: the digest of the session's policy (nothing without one)."""
        return {events.POLICY_KEY: self.policy.digest} if self.policy is not None else {}

    def rule_metadata(self, tool: str) -> dict[str, str]:
        """``aj.policy`` and ``aj.tool_rule`` of a tool, under the session's policy."""
        if self.policy is None:
            return {}
        rule = self.policy.tools.get(tool)
        text = (
            json.dumps(
                {"scope": rule.scope, "ceilings": dict(rule.ceilings)},
                sort_keys=True,
                separators=(",", ":"),
            )
            if rule is not None
            else "null"
        )
        return {**self.policy_metadata(), events.TOOL_RULE_KEY: text}

    def call_metadata(self, item: Mapping[str, Any]) -> dict[str, str]:
        """What a verifier needs to check a tool call without its payload (``aj.call_id``, ...),
        or to say that it cannot look into an item (``aj.opaque``)."""
        if not isinstance(item.get("type"), str) and not isinstance(item.get("role"), str):
            return {events.OPAQUE_KEY: "1"}
        call_id = item.get("call_id")
        kind = item.get("type", "")
        if not isinstance(call_id, str) or not call_id or not isinstance(kind, str):
            return {}
        metadata = {events.CALL_ID_KEY: call_id, events.ITEM_TYPE_KEY: kind}
        call = call_of(item)
        if call is not None:
            if self.guarded:
                metadata[events.GUARDED_KEY] = "1"
            metadata.update(self.rule_metadata(call.name))
        return metadata


def _chainable(metadata: Mapping[str, str]) -> None:
    """Refuse an item whose fields copied into metadata (``aj.call_id``, ``aj.item_type``,
    a tool rule) are not valid Unicode — a lone surrogate: JSON data keeps one, the chain's
    UTF-8 cannot — as an item that cannot be stored, before anything is written."""
    for key, value in metadata.items():
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise CodecError(
                    f"the item's {key} is not valid Unicode text (a lone surrogate): "
                    "it cannot be recorded"
                ) from None


@dataclass(frozen=True)
class WritePlan:
    """The store requests of one write and what the tree takes on when they land.

    Attributes:
        requests: One per stream, at the exact revision the tree last saw.
        commit: The tree's change once they land (heads as planned).
        foreign: Streams of the write that are not the tree's (a fork writes the
            branch's first event and the branch registry): they carry no read model
            change of the tree (the tree keeps the heads of the streams it follows only).
    """

    requests: list[AppendRequest]
    commit: Commit
    foreign: frozenset[str] = frozenset()

    @property
    def streams(self) -> list[str]:
        return [request.stream for request in self.requests]


@dataclass(frozen=True)
class ItemsPlan(WritePlan):
    """The plan of an ``add_items`` write, with its routing.

    Attributes:
        routed: Where each item went, which subagents opened and closed.
        shown: The run's grants this write shows on a ``SubagentStarted``.
        turns: Each user message it writes (its key) with its ``aj.turn``.
    """

    routed: Plan = None  # type: ignore[assignment]
    shown: tuple[Grant, ...] = ()
    turns: tuple[tuple[Key, int], ...] = ()

    @property
    def closed(self) -> int:
        """How many subagents this write closes."""
        return sum(1 for op in self.routed.ops if op.kind == "close")

    @property
    def opened(self) -> set[str]:
        """The subsession streams this write opens."""
        return {op.subagent.stream for op in self.routed.ops if op.kind == "start" and op.subagent}


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


class _Events:
    """The events of one write, per stream, sealed in order as they are added."""

    def __init__(self, tree: SessionTree, next_index: int, trace: Mapping[str, str]) -> None:
        self.by_stream: dict[str, list[NewEvent]] = {}
        self.heads = dict(tree.heads)
        self.hashes = dict(tree.hashes)
        self.next_index = next_index
        self.trace = trace
        self.open_child = {s.parent_stream: s.stream for s in tree.chain}

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
        self.hashes[stream] = seal_event(
            stream, revision, id_, type_, data, metadata, prev, encoded=encoded
        )
        event = NewEvent(type=type_, data=data, metadata=metadata, id=id_)
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
        """The authority log's entries of this write (planned by :func:`_log_request`)."""
        self.by_stream[request.stream] = list(request.events)
        self.heads[request.stream] = log.revision
        self.hashes[request.stream] = after.hash

    def written(self) -> tuple[dict[str, int], dict[str, str]]:
        """The heads and hashes of the streams written, after this write."""
        heads = {stream: self.revision_of(stream) for stream in self.by_stream}
        return heads, {stream: self.hashes[stream] for stream in self.by_stream}


def _add_responses(
    out: _Events, tree: SessionTree, facts: SessionFacts, run: RunView
) -> tuple[uuid.UUID, ...]:
    """Add the run's responses not yet written, each to its agent's stream; their ids."""
    added: list[uuid.UUID] = []
    for response in run.responses:
        if response.id in tree.responded or response.id in added:
            continue  # it landed already (with an earlier write, or one whose answer was lost)
        stream = _response_stream(tree, facts.stream, response.agent, run)
        out.add(
            stream,
            events.MODEL_RESPONDED,
            response.data,
            dict(response.metadata),
            response.id,
            own_trace=True,
        )
        added.append(response.id)
    return tuple(added)


def _response_stream(tree: SessionTree, session_stream: str, agent: str, run: RunView) -> str:
    """The stream of the agent that called the model: the innermost open subagent it is,
    else (it speaks inside the chain this run wrote in) the innermost, else the session's."""
    for subagent in reversed(tree.chain):
        if subagent.agent_name == agent:
            return subagent.stream
    if tree.chain and run.same_run(tree.chain_run):
        return tree.chain[-1].stream
    return session_stream


def plan_items(
    tree: SessionTree,
    facts: SessionFacts,
    run: RunView,
    items: Sequence[Mapping[str, Any]],
    *,
    first_index: int,
    nonce: str,
    now: datetime,
    trace: Mapping[str, str],
    closing: tuple[str, str] | None = None,
    hides: Sequence[Entry | Clear] = (),
    taken: frozenset[str] | set[str] = frozenset(),
    log: AuthorityLog | None = None,
    last_turn: int | None = None,
) -> ItemsPlan | None:
    """Plan one ``add_items`` write (None when it writes nothing).

    ``last_turn``: the turn of the newest user message visible once ``hides`` are
    hidden (0: none); each user message of ``items`` gets the next number as its
    ``aj.turn`` (DESIGN §17.2). None numbers nothing (readers then count, as for a
    session written before ``aj.turn``): :class:`~agentjournal.engine.core.SessionCore`
    always gives it.

    ``hides`` go first, to the innermost open stream, as ``ItemPopped`` per entry
    and ``SessionCleared`` per clear. Event ids are ``uuid5(stream, nonce, n)``,
    so the same nonce plans the same ids: a retry after an unknown outcome is
    recognised by the store. ``log`` must be given when the run has grants to write.
    """
    routed = plan_write(
        items,
        session_id=facts.session_id,
        session_stream=facts.stream,
        chain=tree.chain,
        call_owner=tree.call_owner,
        first_index=first_index,
        handoffs=run.handoffs,
        taken=taken,
        closing=closing,
        finished=run.finished,
        new_run=bool(items) and starts_a_run(items[0]) and not run.same_run(tree.chain_run),
    )
    pending = [r for r in run.responses if r.id not in tree.responded]
    if not routed.ops and not hides and not pending:
        return None
    counter = 0
    nth_id = event_id_series(facts.stream, nonce)  # event_id(facts.stream, nonce, n)

    def next_id() -> uuid.UUID:
        nonlocal counter
        counter += 1
        return nth_id(counter - 1)

    out = _Events(tree, first_index + routed.indexed, trace)
    entries: list[TimelineEvent] = []
    grants: list[tuple[str, Any, str, str, str]] = []  # for the authority log
    shown: list[Grant] = []
    granted_to: dict[str, Any] = {}
    if out.heads.get(facts.stream, -1) < 0:
        started = events.encode_session_started(
            app_name=facts.app_name,
            agent_name=facts.agent_name or run.speaker,
            user_id=facts.user_id,
            timestamp=now,
        )
        out.add(facts.stream, events.SESSION_STARTED, started, {}, next_id())
    innermost = tree.chain[-1].stream if tree.chain else facts.stream
    turn = last_turn
    turned: list[tuple[Key, int]] = []

    def next_turn(item: Mapping[str, Any], metadata: dict[str, str], stream: str) -> None:
        nonlocal turn
        if turn is None or not is_user(item):
            return
        turn += 1
        metadata[events.TURN_KEY] = str(turn)
        # The key its event will have: the next revision of its stream.
        turned.append(((stream, out.revision_of(stream) + 1, 0), turn))

    for hidden in hides:
        if isinstance(hidden, Clear):
            cleared = events.SessionCleared(hidden.through_index)
            out.add(innermost, events.SESSION_CLEARED, cleared.encode(), {}, next_id())
            entries.append(hidden)
        else:
            popped = events.ItemPopped(hidden.stream, hidden.revision, hidden.part, hidden.index)
            out.add(innermost, events.ITEM_POPPED, popped.encode(), {}, next_id())
            entries.append(Pop(hidden.key, hidden.index))
    # The responses before the items they produced, and before any close of their streams.
    responded = _add_responses(out, tree, facts, run)
    for op in routed.ops:
        if op.kind == "item":
            assert op.item is not None
            assert op.index is not None
            produced = run.produced_by(op.item)
            author = produced.agent if produced else _author_of(op.item, run.speaker)
            encoded = codec.encode_item(
                op.item, message_index=op.index, author=author, timestamp=now
            )
            metadata = {events.INDEX_KEY: str(op.index)}
            if produced and encoded.type in _ASSISTANT_TYPES:
                if produced.usage_json:
                    metadata[events.USAGE_KEY] = produced.usage_json
                if produced.response_id:
                    metadata[events.RESPONSE_ID_KEY] = produced.response_id
            metadata.update(facts.call_metadata(op.item))
            next_turn(op.item, metadata, op.stream)
            _chainable(metadata)
            out.add(
                op.stream,
                encoded.type,
                encoded.data,
                metadata,
                next_id(),
                encoded=None if encoded.body is None else (encoded.body, op.item),
            )
            entries.append(
                Entry(
                    op.stream,
                    out.revision_of(op.stream),
                    0,
                    op.index,
                    encoded.item_json,
                    # Checked once here, not at each warm read that hands the item out.
                    plain=plain_text(encoded.item_json),
                )
            )
        elif op.kind == "start":
            assert op.subagent is not None
            assert op.item is not None
            assert op.index is not None
            sub = op.subagent
            item_json = codec.exact_json(op.item)
            grant = next((g for g in run.grants if g.call_id == sub.call_id), None)
            authority = grant.authority.to_json() if grant is not None else None
            owner_id, twin_id = next_id(), next_id()
            started_metadata = {events.INDEX_KEY: str(op.index), events.TWIN_KEY: str(twin_id)}
            next_turn(op.item, started_metadata, sub.parent_stream)
            if grant is not None:
                shown.append(grant)
                grants.append(
                    (sub.agent_name, authority, "handoff", str(owner_id), sub.parent_stream)
                )
            granted_to[sub.stream] = authority
            out.open_child[sub.parent_stream] = sub.stream
            out.add(
                sub.parent_stream,
                events.SUBAGENT_STARTED,
                events.encode_subagent_started(
                    sub, item_json=item_json, twin=twin_id, timestamp=now, authority=authority
                ),
                started_metadata,
                owner_id,
            )
            entries.append(
                Entry(
                    sub.parent_stream,
                    out.revision_of(sub.parent_stream),
                    0,
                    op.index,
                    item_json,
                    plain=plain_text(item_json),
                )
            )
            out.add(
                sub.stream,
                events.SUBAGENT_STARTED,
                events.encode_subagent_started(
                    sub, item_json=None, twin=owner_id, timestamp=now, authority=authority
                ),
                {events.TWIN_KEY: str(owner_id)},
                twin_id,
            )
        else:
            assert op.subagent is not None
            sub = op.subagent
            # The twin first: the parent's copy carries the subsession's final hash,
            # so the parent's chain covers the whole closed subtree.
            sub_id, parent_id = next_id(), next_id()
            out.open_child.pop(sub.parent_stream, None)
            for stream, twin, own in (
                (sub.stream, parent_id, sub_id),
                (sub.parent_stream, sub_id, parent_id),
            ):
                data = events.encode_subagent_completed(
                    sub,
                    outcome=op.outcome,
                    summary=op.summary,
                    reason=op.reason,
                    twin=twin,
                    timestamp=now,
                )
                metadata = {events.TWIN_KEY: str(twin)}
                if stream == sub.parent_stream:
                    metadata[events.CLOSES_KEY] = sub.stream
                    metadata[events.CLOSES_HASH_KEY] = out.hashes[sub.stream]
                out.add(stream, events.SUBAGENT_COMPLETED, data, metadata, own)
    # A grant whose handoff this write does not show as a subagent is recorded on its own,
    # after the write's items: what follows on that stream is the receiver's.
    owner = routed.chain[-1].stream if routed.chain else facts.stream
    for grant in run.grants:
        if any(grant is other for other in shown):
            continue
        event = out.add(owner, events.AUTHORITY_GRANTED, _handoff_grant(grant), {}, next_id())
        grants.append((grant.receiver, grant.authority.to_json(), "handoff", str(event.id), owner))
    after: AuthorityLog | None = None
    if grants:
        assert log is not None, "a write with grants needs the authority log's head"
        log_request, after = _log_request(facts, log, _held_entries(facts, log, grants), trace)
        out.add_log(log_request, log, after)
    requests = out.requests(fresh=set(_opened(routed)))
    heads, hashes = out.written()
    commit = Commit(
        heads=heads,
        hashes=hashes,
        entries=entries,
        written=sum(len(request.events) for request in requests),
        chain=routed.chain,
        next_index=first_index + routed.indexed,
        call_owner=routed.call_owner,
        run=run.identity,
        grants=granted_to,
        authority=after,
        responded=responded,
    )
    return ItemsPlan(requests, commit, routed=routed, shown=tuple(shown), turns=tuple(turned))


def plan_control(
    tree: SessionTree,
    facts: SessionFacts,
    stream: str,
    type_: str,
    data: bytes,
    *,
    next_index: int,
    metadata: Mapping[str, str],
    entries: Sequence[TimelineEvent] = (),
    held: tuple[str, Any] | None = None,
    log: AuthorityLog | None = None,
    run: RunView | None = None,
    id_: uuid.UUID | None = None,
    guard: uuid.UUID | None = None,
) -> WritePlan:
    """One event that is no item, after ``stream``'s head (and ``run``'s responses not yet
    written, first); with ``held`` (agent, authority JSON: a run's grant) its authority
    log entry in the same transaction. ``id_``: the event's id (default a random one); a
    caller that derives it makes a retry after an unknown outcome recognisable.
    ``guard``: the id of an ``agentjournal.LineGuarded`` to write at the head of the
    line's top stream (``stream`` is then another one: a subagent's), the two naming
    each other, so the write also expects that head."""
    out = _Events(tree, next_index, metadata)
    responded = _add_responses(out, tree, facts, run) if run is not None else ()
    # The control event's own metadata has no open child of another stream than its own.
    own: dict[str, str] = {} if guard is None else {events.TWIN_KEY: str(guard)}
    event = out.add(stream, type_, data, own, id_ if id_ is not None else stamps.random_id())
    if guard is not None:
        assert stream != facts.stream, "a guard is for a head the write has nothing else for"
        _add_guard(out, facts.stream, guard, event.id, stream)
    authority: AuthorityLog | None = None
    if held is not None:
        assert log is not None, "a grant needs the authority log's head"
        entry = (held[0], held[1], "run", str(event.id), stream)
        log_request, authority = _log_request(
            facts, log, _held_entries(facts, log, [entry]), metadata
        )
        out.add_log(log_request, log, authority)
    requests = out.requests()
    heads, hashes = out.written()
    commit = Commit(
        heads=heads,
        hashes=hashes,
        entries=entries,
        written=sum(len(request.events) for request in requests),
        authority=authority,
        responded=responded,
    )
    return WritePlan(requests, commit)


def plan_log(
    facts: SessionFacts,
    log: AuthorityLog,
    entries: list[tuple[str, bytes]],
    held: Mapping[str, Any],
    trace: Mapping[str, str],
    *,
    guard: tuple[SessionTree, int, uuid.UUID] | None = None,
) -> WritePlan:
    """Entries of the authority log alone (after the policy when it changed).

    ``guard``: (the line's tree, its next free index, an id): the write also puts an
    ``agentjournal.LineGuarded`` at the head of the line's top stream, naming the last
    entry (which names it back), so it expects that head: a reset on a branch, which a
    racing end of the line must conflict with."""
    twin = None if guard is None else guard[2]
    request, after = _log_request(
        facts, log, [*_policy_entries(facts, log), *entries], trace, twin=twin
    )
    after = AuthorityLog(after.revision, after.hash, after.policy, dict(sorted(held.items())))
    if guard is None:
        commit = Commit(heads={}, hashes={}, written=len(request.events), authority=after)
        return WritePlan([request], commit)
    tree, next_index, guard_id = guard
    traced = {k: v for k, v in trace.items() if k in (events.TRACE_ID_KEY, events.SPAN_ID_KEY)}
    out = _Events(tree, next_index, traced)
    _add_guard(out, facts.stream, guard_id, request.events[-1].id, request.stream)
    heads, hashes = out.written()
    commit = Commit(heads=heads, hashes=hashes, written=len(request.events) + 1, authority=after)
    return WritePlan([request, *out.requests()], commit)


def _add_guard(
    out: _Events, top: str, guard: uuid.UUID, guarded: uuid.UUID, guarded_stream: str
) -> None:
    """``agentjournal.LineGuarded`` at ``top``'s head, naming the event it guards (which
    the caller made name it back): the write then expects ``top``'s exact head, which
    KurrentDB's multi-stream append cannot do for a stream without events."""
    body = events.LineGuarded(str(guarded), guarded_stream).encode()
    out.add(top, events.LINE_GUARDED, body, {events.TWIN_KEY: str(guarded)}, guard)


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


# -- the authority log ------------------------------------------------------------------


def _policy_entries(facts: SessionFacts, log: AuthorityLog) -> list[tuple[str, bytes]]:
    """``PolicyRecorded`` when the log's policy in force is not the session's."""
    policy = facts.policy
    assert policy is not None, "only a session with a policy writes the authority log"
    if log.policy == policy.digest:
        return []
    recorded = events.PolicyRecorded(policy.digest, policy.to_json())
    return [(events.POLICY_RECORDED, recorded.encode())]


def _held_entries(
    facts: SessionFacts, log: AuthorityLog, grants: Sequence[tuple[str, Any, str, str, str]]
) -> list[tuple[str, bytes]]:
    """The policy when it changed, then an ``AuthorityHeld`` per grant (agent, authority
    JSON, cause, event id, event stream), each with what every agent holds after it."""
    assert facts.policy is not None
    held = dict(log.held)
    entries = _policy_entries(facts, log)
    for agent, authority, cause, event, stream in grants:
        held[agent] = authority
        entry = events.AuthorityHeld(
            agent, authority, cause, event, stream, facts.policy.digest, dict(sorted(held.items()))
        )
        entries.append((events.AUTHORITY_HELD, entry.encode()))
    return entries


def _log_request(
    facts: SessionFacts,
    log: AuthorityLog,
    entries: Sequence[tuple[str, bytes]],
    trace: Mapping[str, str],
    *,
    twin: uuid.UUID | None = None,
) -> tuple[AppendRequest, AuthorityLog]:
    """Seal ``entries`` after the log's head: the request and the log after it lands.
    ``twin``: the last entry's ``aj.twin`` (the guard written with it)."""
    assert facts.policy is not None
    stream = facts.authority_stream
    prev = log.hash
    new: list[NewEvent] = []
    held: Mapping[str, Any] = log.held
    for offset, (type_, data) in enumerate(entries):
        metadata = {
            events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE,
            **{k: v for k, v in trace.items() if k in (events.TRACE_ID_KEY, events.SPAN_ID_KEY)},
        }
        if twin is not None and offset == len(entries) - 1:
            metadata[events.TWIN_KEY] = str(twin)
        id_ = stamps.random_id()
        prev = seal_event(stream, log.revision + 1 + offset, id_, type_, data, metadata, prev)
        new.append(NewEvent(type=type_, data=data, metadata=metadata, id=id_))
        body = json.loads(data)
        if isinstance(body.get("held"), dict):
            held = body["held"]
    expected = StreamState.NO_STREAM if log.revision < 0 else log.revision
    after = AuthorityLog(log.revision + len(new), prev, facts.policy.digest, held)
    return AppendRequest(stream, new, expected), after


def _handoff_grant(grant: Grant) -> bytes:
    """``AuthorityGranted`` of a handoff that opened no subagent."""
    body = {
        "agent": grant.receiver,
        "authority": grant.authority.to_json(),
        "cause": "handoff",
        "sender": grant.sender,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def run_grant(agent: str, authority: Authority) -> bytes:
    """``AuthorityGranted`` of a run's first agent."""
    body = {"agent": agent, "authority": authority.to_json(), "cause": "run"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _author_of(item: Mapping[str, Any], speaker: str | None) -> str | None:
    """Who wrote an item the hooks did not see: nobody for user input and opaque objects."""
    role = item.get("role")
    if role == "user" or (role is None and not isinstance(item.get("type"), str)):
        return None  # the user's; or opaque (an EncryptedSession envelope): nobody knows
    return speaker


def _opened(routed: Plan) -> list[str]:
    return [op.subagent.stream for op in routed.ops if op.kind == "start" and op.subagent]
