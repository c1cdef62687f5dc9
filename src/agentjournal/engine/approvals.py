"""Approvals on a line: the questions a paused run asked, the answers, and the paused run.

A run that stops on a function tool's approval has written ``InterruptIssued`` beside
the call's item, on the acting agent's stream (:mod:`agentjournal.engine.plan_interrupts`).
Here the rest is read and written:

- :func:`hold`: ``agentjournal.RunPaused`` (the SDK's ``RunState`` as text) on the
  line's top stream, naming the requests it waits for;
- :func:`approvals`: every approval asked on the line's streams now followed (the top
  stream and the open subagents'), each with its answer and whether its call has an
  output yet (:func:`fold_approvals`, pure);
- :func:`resolve`: ``InterruptResolved`` on the question's stream, at its exact head,
  so of two racing answers one lands and the other is planned again, sees it, and is
  refused with :class:`~agentjournal.errors.AlreadyResolved`;
- :func:`paused`: the newest ``RunPaused`` of the line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final

from agentjournal import events
from agentjournal.engine.fork import read_types
from agentjournal.engine.line import Line
from agentjournal.engine.plan import WritePlan
from agentjournal.engine.plan_control import plan_control
from agentjournal.errors import AlreadyResolved, CodecError, InvalidInput
from agentjournal.store.contract import EventStore, RecordedEvent

_READ: Final = frozenset({events.INTERRUPT_ISSUED, events.INTERRUPT_RESOLVED, "ToolResultReceived"})


@dataclass(frozen=True, slots=True)
class Approval:
    """A function tool call that waited (or waits) for a person's approval.

    Attributes:
        request_id: The call's id.
        tool_name: The tool.
        arguments: The call's arguments as the model gave them.
        agent: The agent that made the call.
        stream: Where the question is (the acting agent's stream).
        revision: Its revision there.
        event_id: Its event id.
        issued_at: When the run stopped for it.
        authority: What the agent held then (JSON form), when the session has a policy.
        decision: The answer, once given.
        ran: Whether the call has an output on the record (the run went on past it).
    """

    request_id: str
    tool_name: str
    arguments: str
    agent: str
    stream: str
    revision: int
    event_id: str
    issued_at: datetime
    authority: Mapping[str, object] | None = None
    decision: events.ApprovalDecided | None = None
    ran: bool = False

    @property
    def pending(self) -> bool:
        """Whether it waits for an answer."""
        return self.decision is None and not self.ran


def fold_approvals(read: Mapping[str, Sequence[RecordedEvent]]) -> list[Approval]:
    """The approvals asked on ``read`` (stream -> its interrupt and tool output events,
    oldest first), oldest first, each with its answer and whether its call ran (pure).

    An answer belongs to the question it names (``issued``); a question asked again
    with the same call id (a model that reuses ids) is a question of its own.
    Unreadable events are skipped: they neither ask nor answer.
    """
    found: dict[str, Approval] = {}  # by the question's event id
    for stream, recorded in read.items():
        for event in recorded:
            if events.INTERRUPT_KEY not in event.metadata and event.type != "ToolResultReceived":
                continue  # an MCP approval item: the codec's, not an approval of ours
            try:
                if event.type == events.INTERRUPT_ISSUED:
                    asked = events.ApprovalAsked.decode(event.data)
                    found[str(event.id)] = Approval(
                        asked.request_id,
                        asked.tool_name,
                        asked.arguments,
                        asked.agent,
                        stream,
                        event.revision,
                        str(event.id),
                        asked.timestamp,
                        asked.authority,
                    )
                elif event.type == events.INTERRUPT_RESOLVED:
                    decided = events.ApprovalDecided.decode(event.data)
                    question = found.get(decided.issued)
                    if question is not None and question.decision is None:
                        found[decided.issued] = _with(question, decision=decided)
                else:
                    call_id = event.metadata.get(events.CALL_ID_KEY)
                    for key, question in found.items():
                        if question.request_id == call_id and question.stream == stream:
                            found[key] = _with(question, ran=True)
            except CodecError:
                continue
    return sorted(found.values(), key=lambda a: (a.issued_at, a.stream, a.revision))


def _with(approval: Approval, **changes: object) -> Approval:
    return replace(approval, **changes)  # type: ignore[arg-type]


async def approvals(line: Line, streams: Sequence[str] | None = None) -> list[Approval]:
    """Every approval asked on ``streams`` (default: the line's followed streams, its top
    stream's and its open subagents'), oldest first.

    Reads each stream's interrupt and tool output events (one range scan each on a store
    with typed reads; the whole stream on any other).
    """
    if streams is None:
        async with line.tree.lock:
            await line.reader.refresh(0)
            line.check_live()
            streams = list(line.tree.followed)
    return await approvals_on(line.store, streams)


async def approvals_on(store: EventStore, streams: Sequence[str]) -> list[Approval]:
    """Every approval asked on ``streams`` of ``store``, oldest first (a reader that holds
    no line: the viewer)."""
    return fold_approvals(
        {stream: await read_types(store, stream, -1, _READ) for stream in streams}
    )


async def paused(line: Line) -> events.RunPaused | None:
    """The line's newest ``agentjournal.RunPaused`` (None: no run was held)."""
    found = await read_types(line.store, line.facts.stream, -1, frozenset({events.RUN_PAUSED}))
    for event in reversed(found):
        try:
            return events.RunPaused.decode(event.data)
        except CodecError:
            continue
    return None


async def hold(
    line: Line, state: str, requests: Sequence[str], trace: Mapping[str, str]
) -> list[Approval]:
    """Record a paused run: ``agentjournal.RunPaused`` on the line's top stream, naming
    the pending approvals among ``requests`` (the run's interruptions' call ids).

    Returns:
        The pending approvals it waits for.

    Raises:
        InvalidInput: None of ``requests`` was asked on the record (the run had no
            ``hooks=session``, or its approvals were answered already).
    """
    pending = {a.request_id: a for a in await approvals(line) if a.pending}
    waits = [pending[r] for r in requests if r in pending]
    if not waits:
        raise InvalidInput(
            f"none of the run's interruptions ({', '.join(requests) or 'none'}) is a pending "
            f"approval on {line.facts.stream}: run it with hooks=session"
        )
    asked = [
        {"request_id": a.request_id, "stream": a.stream, "revision": a.revision} for a in waits
    ]
    body = events.RunPaused(state, asked).encode()
    tree = line.tree

    async def build() -> WritePlan:
        await line.reader.refresh(0)
        line.check_live()
        return plan_control(
            tree,
            line.facts,
            line.facts.stream,
            events.RUN_PAUSED,
            body,
            next_index=await line.reader.next_index(),
            metadata=trace,
        )

    async with tree.lock:
        await line.writer.write(build)
    return waits


async def resolve(
    line: Line,
    request_id: str,
    *,
    approve: bool,
    by: str,
    reason: str,
    trace: Mapping[str, str],
) -> events.ApprovalDecided:
    """Answer a pending approval: ``InterruptResolved`` on the question's stream.

    The write expects that stream's exact head and the question is looked up again in
    every plan, so of two answers racing in any processes exactly one lands.

    Raises:
        InvalidInput: No pending approval ``request_id`` on the line, or ``by`` is empty.
        AlreadyResolved: It was answered already (naming who answered).
    """
    if not isinstance(by, str) or not by.strip():
        raise InvalidInput("an approval needs the name of who decides (by=...)")
    if not isinstance(reason, str):
        raise InvalidInput(f"reason must be text, got {reason!r}")
    tree = line.tree
    decided: list[events.ApprovalDecided] = []

    async def build() -> WritePlan:
        await line.reader.refresh(0)
        line.check_live()
        followed = list(tree.followed)
        read = {stream: await read_types(line.store, stream, -1, _READ) for stream in followed}
        asked = [a for a in fold_approvals(read) if a.request_id == request_id]
        if not asked:
            raise InvalidInput(
                f"no approval request {request_id!r} on {line.facts.stream} "
                "(see pending_approvals())"
            )
        question = asked[-1]
        if question.decision is not None:
            raise AlreadyResolved(request_id, question.decision.outcome, question.decision.by)
        if question.ran:
            raise InvalidInput(f"approval request {request_id!r} is settled: its call has run")
        answer = events.ApprovalDecided(
            request_id,
            "approved" if approve else "rejected",
            reason,
            by,
            question.event_id,
            datetime.now(UTC),
        )
        decided[:] = [answer]
        metadata = {
            **trace,
            events.INTERRUPT_KEY: events.TOOL_APPROVAL,
            events.CALL_ID_KEY: request_id,
        }
        return plan_control(
            tree,
            line.facts,
            question.stream,
            events.INTERRUPT_RESOLVED,
            answer.encode(),
            next_index=await line.reader.next_index(),
            metadata=metadata,
        )

    async with tree.lock:
        await line.writer.write(build)
    return decided[0]
