"""Planning an ``add_items`` write: routing (:mod:`agentjournal.engine.routing`), then the
canonical events (:mod:`agentjournal.engine.codec`), the twins of every subagent opened or
closed, the questions and run's answers of approvals
(:mod:`agentjournal.engine.plan_interrupts`), and the authority log's entries for its
grants (pure).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from agentjournal import events
from agentjournal._fastjson import plain_text
from agentjournal.engine import codec
from agentjournal.engine.approvals import Approval
from agentjournal.engine.plan import Grant, ItemsPlan, RunView, SessionFacts
from agentjournal.engine.plan_control import add_responses
from agentjournal.engine.plan_interrupts import add_interrupt, add_run_answer
from agentjournal.engine.plan_log import handoff_grant, held_entries, log_request
from agentjournal.engine.routing import Op, Plan, plan_write, starts_a_run
from agentjournal.engine.sealing import Events
from agentjournal.engine.timeline import Clear, Entry, Key, Pop, TimelineEvent
from agentjournal.engine.tree import AuthorityLog, SessionTree, items_commit
from agentjournal.engine.turns import is_user
from agentjournal.errors import CodecError
from agentjournal.store.contract import event_id_series

_ASSISTANT_TYPES: Final = frozenset(
    {"AssistantTextGenerated", "AssistantToolCallsGenerated", "AssistantThinkingGenerated"}
)


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
    unanswered: Mapping[str, Approval] | None = None,
) -> ItemsPlan | None:
    """Plan one ``add_items`` write (None when it writes nothing).

    ``unanswered``: the questions waiting for the calls whose outputs ``items`` carry
    (:func:`~agentjournal.engine.approvals.unanswered`); each such output comes right
    after the run's own answer to its question, when the run can tell it.

    ``last_turn``: the turn of the newest user message visible once ``hides`` are
    hidden (0: none); each user message of ``items`` gets the next number as its
    ``aj.turn``. None numbers nothing (readers then count, as for a
    session written before ``aj.turn``): :class:`~agentjournal.engine.core.SessionCore`
    always gives it.

    ``hides`` go first, to the innermost open stream, as ``ItemPopped`` per entry
    and ``SessionCleared`` per clear. Event ids are ``uuid5(stream, nonce, n)``,
    so the same nonce plans the same ids: a retry after an unknown outcome is
    recognised by the store. ``log`` must be given when the run has grants to write.
    """
    routed = _route(tree, facts, run, items, first_index, taken=taken, closing=closing)
    pending = [r for r in run.responses if r.id not in tree.responded]
    if not routed.ops and not hides and not pending:
        return None
    write = _ItemsWrite(
        tree, facts, run, routed, first_index, nonce, now, trace, last_turn, unanswered or {}
    )
    write.start_session()
    write.hide(hides)
    # The responses before the items they produced, and before any close of their streams.
    responded = add_responses(write.out, tree, facts, run)
    for op in routed.ops:
        if op.kind == "item":
            write.item(op)
        elif op.kind == "start":
            write.open_subagent(op)
        else:
            write.close_subagent(op)
    write.grant_unshown()
    return write.plan(log, responded)


def _route(
    tree: SessionTree,
    facts: SessionFacts,
    run: RunView,
    items: Sequence[Mapping[str, Any]],
    first_index: int,
    *,
    taken: frozenset[str] | set[str],
    closing: tuple[str, str] | None,
) -> Plan:
    """Where each item goes, which subagents open and close
    (:func:`~agentjournal.engine.routing.plan_write`)."""
    return plan_write(
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


class _ItemsWrite:
    """One ``add_items`` write while it is planned: its events, in order, and what the
    tree and the authority log take on from them. Each step adds what one part of the
    write holds; the event ids are drawn in the order the events are added
    (``uuid5(stream, nonce, n)``)."""

    def __init__(
        self,
        tree: SessionTree,
        facts: SessionFacts,
        run: RunView,
        routed: Plan,
        first_index: int,
        nonce: str,
        now: datetime,
        trace: Mapping[str, str],
        last_turn: int | None,
        unanswered: Mapping[str, Approval],
    ) -> None:
        self._tree = tree
        self._unanswered = unanswered
        self._facts = facts
        self._run = run
        self._routed = routed
        self._first_index = first_index
        self._now = now
        self._trace = trace
        self._nth_id = event_id_series(facts.stream, nonce)  # event_id(stream, nonce, n)
        self._count = 0
        self.out = Events(tree, first_index + routed.indexed, trace, sealer=facts.sealer)
        self._entries: list[TimelineEvent] = []
        self._grants: list[tuple[str, Any, str, str, str]] = []  # for the authority log
        self._shown: list[Grant] = []
        self._granted_to: dict[str, Any] = {}
        self._turn = last_turn
        self._turned: list[tuple[Key, int]] = []

    def _next_id(self) -> uuid.UUID:
        self._count += 1
        return self._nth_id(self._count - 1)

    def _number_turn(self, item: Mapping[str, Any], metadata: dict[str, str], stream: str) -> None:
        """A user message's ``aj.turn``: the next number (none when no last turn is known)."""
        if self._turn is None or not is_user(item):
            return
        self._turn += 1
        metadata[events.TURN_KEY] = str(self._turn)
        # The key its event will have: the next revision of its stream.
        self._turned.append(((stream, self.out.revision_of(stream) + 1, 0), self._turn))

    def start_session(self) -> None:
        """``SessionStarted`` first, when the session's stream does not exist yet."""
        if self.out.heads.get(self._facts.stream, -1) >= 0:
            return
        facts = self._facts
        started = events.encode_session_started(
            app_name=facts.app_name,
            agent_name=facts.agent_name or self._run.speaker,
            user_id=facts.user_id,
            timestamp=self._now,
        )
        self.out.add(facts.stream, events.SESSION_STARTED, started, {}, self._next_id())

    def hide(self, hides: Sequence[Entry | Clear]) -> None:
        """What the write hides, first, on the innermost open stream: ``SessionCleared`` per
        clear, ``ItemPopped`` per entry."""
        tree = self._tree
        innermost = tree.chain[-1].stream if tree.chain else self._facts.stream
        for hidden in hides:
            if isinstance(hidden, Clear):
                cleared = events.SessionCleared(hidden.through_index)
                self.out.add(
                    innermost, events.SESSION_CLEARED, cleared.encode(), {}, self._next_id()
                )
                self._entries.append(hidden)
            else:
                popped = events.ItemPopped(
                    hidden.stream, hidden.revision, hidden.part, hidden.index
                )
                self.out.add(innermost, events.ITEM_POPPED, popped.encode(), {}, self._next_id())
                self._entries.append(Pop(hidden.key, hidden.index))

    def item(self, op: Op) -> None:
        """An item's canonical event on its stream."""
        assert op.item is not None
        assert op.index is not None
        run = self._run
        produced = run.produced_by(op.item)
        author = produced.agent if produced else _author_of(op.item, run.speaker)
        encoded = codec.encode_item(
            op.item, message_index=op.index, author=author, timestamp=self._now
        )
        metadata = {events.INDEX_KEY: str(op.index)}
        if produced and encoded.type in _ASSISTANT_TYPES:
            if produced.usage_json:
                metadata[events.USAGE_KEY] = produced.usage_json
            if produced.response_id:
                metadata[events.RESPONSE_ID_KEY] = produced.response_id
        metadata.update(self._facts.call_metadata(op.item))
        times = _output_times(op.item, run)
        if times is not None:
            metadata[events.STARTED_AT_KEY], metadata[events.ENDED_AT_KEY] = times
        _chainable(metadata)
        # Before the output's event and its turn's key: the answer comes first on its stream.
        add_run_answer(self.out, op, run, self._unanswered, self._now, self._next_id)
        self._number_turn(op.item, metadata, op.stream)
        self.out.add(
            op.stream,
            encoded.type,
            encoded.data,
            metadata,
            self._next_id(),
            encoded=None if encoded.body is None else (encoded.body, op.item),
        )
        self._entries.append(
            Entry(
                op.stream,
                self.out.revision_of(op.stream),
                0,
                op.index,
                encoded.item_json,
                # Checked once here, not at each warm read that hands the item out.
                plain=plain_text(encoded.item_json),
            )
        )
        add_interrupt(self.out, op, run, self._routed, self._now, self._next_id)

    def open_subagent(self, op: Op) -> None:
        """A handoff that opens a subagent: ``SubagentStarted`` on the parent stream (the
        item, with the handoff's grant when the run has one) and its twin on the new
        subsession."""
        assert op.subagent is not None
        assert op.item is not None
        assert op.index is not None
        sub = op.subagent
        now = self._now
        item_json = codec.exact_json(op.item)
        grant = next((g for g in self._run.grants if g.call_id == sub.call_id), None)
        authority = grant.authority.to_json() if grant is not None else None
        owner_id, twin_id = self._next_id(), self._next_id()
        started_metadata = {events.INDEX_KEY: str(op.index), events.TWIN_KEY: str(twin_id)}
        self._number_turn(op.item, started_metadata, sub.parent_stream)
        if grant is not None:
            self._shown.append(grant)
            self._grants.append(
                (sub.agent_name, authority, "handoff", str(owner_id), sub.parent_stream)
            )
        self._granted_to[sub.stream] = authority
        self.out.opened(sub.parent_stream, sub.stream)
        self.out.add(
            sub.parent_stream,
            events.SUBAGENT_STARTED,
            events.encode_subagent_started(
                sub, item_json=item_json, twin=twin_id, timestamp=now, authority=authority
            ),
            started_metadata,
            owner_id,
        )
        self._entries.append(
            Entry(
                sub.parent_stream,
                self.out.revision_of(sub.parent_stream),
                0,
                op.index,
                item_json,
                plain=plain_text(item_json),
            )
        )
        self.out.add(
            sub.stream,
            events.SUBAGENT_STARTED,
            events.encode_subagent_started(
                sub, item_json=None, twin=owner_id, timestamp=now, authority=authority
            ),
            {events.TWIN_KEY: str(owner_id)},
            twin_id,
        )

    def close_subagent(self, op: Op) -> None:
        """A subagent's close: ``SubagentCompleted`` on its subsession, then its twin on the
        parent stream."""
        assert op.subagent is not None
        sub = op.subagent
        # The twin first: the parent's copy carries the subsession's final hash,
        # so the parent's chain covers the whole closed subtree.
        sub_id, parent_id = self._next_id(), self._next_id()
        self.out.closed(sub.parent_stream)
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
                timestamp=self._now,
            )
            metadata = {events.TWIN_KEY: str(twin)}
            if stream == sub.parent_stream:
                metadata[events.CLOSES_KEY] = sub.stream
                metadata[events.CLOSES_HASH_KEY] = self.out.hashes[sub.stream]
            self.out.add(stream, events.SUBAGENT_COMPLETED, data, metadata, own)

    def grant_unshown(self) -> None:
        """A grant whose handoff this write does not show as a subagent is recorded on its
        own, after the write's items: what follows on that stream is the receiver's."""
        routed = self._routed
        owner = routed.chain[-1].stream if routed.chain else self._facts.stream
        for grant in self._run.grants:
            if any(grant is other for other in self._shown):
                continue
            event = self.out.add(
                owner, events.AUTHORITY_GRANTED, handoff_grant(grant), {}, self._next_id()
            )
            self._grants.append(
                (grant.receiver, grant.authority.to_json(), "handoff", str(event.id), owner)
            )

    def plan(self, log: AuthorityLog | None, responded: tuple[uuid.UUID, ...]) -> ItemsPlan:
        """The plan: the authority log's entries for the write's grants last, then the
        requests and the tree's commit."""
        facts, routed, out = self._facts, self._routed, self.out
        after: AuthorityLog | None = None
        if self._grants:
            assert log is not None, "a write with grants needs the authority log's head"
            entries = held_entries(facts, log, self._grants)
            appended, after = log_request(facts, log, entries, self._trace)
            out.add_log(appended, log, after)
        requests = out.requests(fresh=set(_opened(routed)))
        heads, hashes = out.written()
        commit = items_commit(
            heads,
            hashes,
            self._entries,
            sum(len(request.events) for request in requests),
            routed.chain,
            self._first_index + routed.indexed,
            routed.call_owner,
            self._run.identity,
            self._granted_to,
            after,
            responded,
        )
        return ItemsPlan.made(requests, commit, routed, tuple(self._shown), tuple(self._turned))


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


def _author_of(item: Mapping[str, Any], speaker: str | None) -> str | None:
    """Who wrote an item the hooks did not see: nobody for user input and opaque objects."""
    role = item.get("role")
    if role == "user" or (role is None and not isinstance(item.get("type"), str)):
        return None  # the user's; or opaque (an EncryptedSession envelope): nobody knows
    return speaker


def _opened(routed: Plan) -> list[str]:
    return [op.subagent.stream for op in routed.ops if op.kind == "start" and op.subagent]


def _output_times(item: Mapping[str, Any], run: RunView) -> tuple[str, str] | None:
    """When the tool call whose output ``item`` is ran, as the hooks saw it (None for any
    other item, or a call they did not see start and end)."""
    kind = item.get("type")
    call_id = item.get("call_id")
    if not isinstance(kind, str) or not kind.endswith("_output"):
        return None
    if not isinstance(call_id, str) or not call_id:
        return None
    return run.tool_call_times(call_id)
