"""Approvals on a line: the questions a paused run asked, the answers, and the paused run.

A run that stops on a function tool's approval has written ``InterruptIssued`` beside
the call's item, on the acting agent's stream (:mod:`agentjournal.engine.plan_interrupts`).
Here the rest is read and written:

- :func:`hold`: ``agentjournal.RunPaused`` (the SDK's ``RunState`` as text) on the
  line's top stream, naming the requests it waits for;
- :func:`approvals`: every approval asked on the line's streams now followed (the top
  stream and the open subagents'), each with its answer and whether its call has an
  output yet (:func:`fold_approvals`, pure);
- :func:`unanswered`: the questions an ``add_items`` write of calls' outputs finds
  waiting (it records the run's own decision on them with the outputs);
- :func:`policies_in_force`: the policies an answer must satisfy (the one the line was
  opened with and every one the session recorded on its authority log), so no reader or
  writer can lift an approver the record names by opening the session without its policy;
- :func:`resolve`: ``InterruptResolved`` on the question's stream, at its exact head,
  so of two racing answers one lands and the other is planned again, sees it, and is
  refused with :class:`~agentjournal.errors.AlreadyResolved`;
- :func:`paused`: the newest ``RunPaused`` of the line, and who took it up;
- :func:`take`: ``agentjournal.RunResumed``, the claim a resume writes first, at the
  top stream's exact head, so of two processes resuming one paused run one goes on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentjournal import events
from agentjournal.authority import Policy
from agentjournal.engine.fork import read_types
from agentjournal.engine.line import Line
from agentjournal.engine.plan import WritePlan
from agentjournal.engine.plan_control import plan_control
from agentjournal.errors import (
    AlreadyResolved,
    AlreadyResumed,
    ApproverNotAllowed,
    CodecError,
    InvalidInput,
    JournalError,
)
from agentjournal.ledger.approvals import check_answer, sign_answer
from agentjournal.ledger.keys import SigningKey
from agentjournal.shred.sealing import SubjectSealer
from agentjournal.store.contract import EventStore, RecordedEvent
from agentjournal.streams import authority_stream

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
        arguments_hmac: In a sealed session, the keyed digest of the arguments that the
            question carries in the clear
            (:attr:`~agentjournal.events.ApprovalAsked.arguments_hmac`).
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
    arguments_hmac: str = ""

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
                        arguments_hmac=asked.arguments_hmac,
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


def answer_to(
    question: Approval,
    *,
    approve: bool,
    reason: str,
    by: str,
    at: datetime,
    sealer: SubjectSealer | None,
    source: str | None = None,
) -> events.ApprovalDecided:
    """The (unsigned) answer to ``question``: naming the digest of its arguments, and in a
    sealed session (``sealer``) the keyed digests of its arguments and of ``reason`` under
    the subject's key instead, which a verifier without the key can hold a signature to and
    which confirm no guess once the key is destroyed."""
    if sealer is None:
        digest, reason_hmac = events.arguments_digest(question.arguments), ""
    else:
        digest, reason_hmac = sealer.digest(question.arguments), sealer.digest(reason)
    return events.ApprovalDecided(
        question.request_id,
        "approved" if approve else "rejected",
        reason,
        by,
        question.event_id,
        at,
        arguments_digest=digest,
        source=source,
        reason_hmac=reason_hmac,
    )


def recomputed_digests(
    sealer: SubjectSealer | None, question: Approval, decided: events.ApprovalDecided
) -> tuple[str | None, str | None]:
    """The digests of ``question``'s arguments and of ``decided``'s reason as a reader
    holding the session's keys computes them, in the form the answer names them (for
    :func:`~agentjournal.ledger.approvals.check_answer`'s ``asked_digest`` and
    ``reason_digest``); None where they cannot be computed (a keyed answer read without
    the key) or need not be (a plain answer's reason)."""
    if not decided.keyed:
        return events.arguments_digest(question.arguments), None
    if sealer is None:
        return None, None
    return sealer.digest(question.arguments), sealer.digest(decided.reason)


def approves(
    found: Sequence[Approval],
    *,
    agent: str,
    call_id: str,
    tool: str,
    arguments: str,
    policies: Sequence[Policy],
    session_id: str,
) -> bool:
    """Whether a person's answer on the record lets this call run now (pure): the newest
    question for ``call_id`` among ``found`` was asked by ``agent``, of ``tool``, with
    exactly ``arguments``, it was approved by an answer that counts under ``policies``
    (:func:`~agentjournal.ledger.approvals.check_answer`: for these arguments, and signed
    by an approver where a policy names approvers for the tool), and its call has not run
    yet."""
    asked = [a for a in found if a.request_id == call_id]
    if not asked:
        return False
    question = asked[-1]
    decision = question.decision
    if not (
        question.agent == agent
        and question.tool_name == tool
        and question.arguments == arguments
        and decision is not None
        and decision.outcome == "approved"
        and not question.ran
    ):
        return False
    checked = check_answer(
        tuple(policies),
        decision,
        session_id=session_id,
        stream=question.stream,
        tool_name=question.tool_name,
        asked_digest=events.arguments_digest(question.arguments),
    )
    return checked.problem is None


_POLICY: Final = frozenset({events.POLICY_RECORDED})


async def recorded_policies(store: EventStore, session_id: str) -> tuple[Policy, ...]:
    """Every policy session ``session_id`` recorded (``PolicyRecorded`` on its authority
    log), oldest first, each once.

    Raises:
        InvalidInput: A recorded policy does not read (fail closed: no answer is written
            or counted under a policy nobody can check).
    """
    found: dict[str, Policy] = {}
    for event in await read_types(store, authority_stream(session_id), -1, _POLICY):
        try:
            policy = Policy.from_json(events.PolicyRecorded.decode(event.data).policy)
        except (JournalError, ValueError, TypeError, KeyError, AttributeError) as error:
            raise InvalidInput(
                f"session {session_id}'s recorded policy at {event.stream}@{event.revision} "
                f"does not read, so no answer can be checked: {error}"
            ) from None
        found.setdefault(policy.digest, policy)
    return tuple(found.values())


async def policies_in_force(
    store: EventStore, session_id: str, policy: Policy | None
) -> tuple[Policy, ...]:
    """The policies an answer to an approval of the session must satisfy: ``policy`` (the
    one the line was opened with, if any) and every policy the session recorded.

    Raises:
        InvalidInput: A recorded policy does not read (as :func:`recorded_policies`).
    """
    recorded = await recorded_policies(store, session_id)
    if policy is None:
        return recorded
    return (policy, *(p for p in recorded if p.digest != policy.digest))


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


async def unanswered(line: Line, calls: Mapping[str, str]) -> dict[str, Approval]:
    """The questions still waiting among ``calls`` (call id -> the stream its output goes
    to): for each, the newest question for it on that stream, when it has neither an answer
    nor an output yet. One typed read per stream; call it inside the write's plan, so an
    answer that lands meanwhile is seen when the write plans again."""
    streams = sorted(set(calls.values()))
    read = {stream: await read_types(line.store, stream, -1, _READ) for stream in streams}
    newest = {a.request_id: a for a in fold_approvals(read) if calls.get(a.request_id) == a.stream}
    return {call_id: a for call_id, a in newest.items() if a.pending}


@dataclass(frozen=True, slots=True)
class Held:
    """A paused run on the record, and whether it was taken up to be resumed.

    Attributes:
        run: The ``agentjournal.RunPaused``.
        event_id: Its event id.
        taken: The ``agentjournal.RunResumed`` events that took it up, oldest first, each
            with its commit time.
    """

    run: events.RunPaused
    event_id: str
    taken: tuple[tuple[events.RunResumed, datetime], ...] = ()


_HELD: Final = frozenset({events.RUN_PAUSED, events.RUN_RESUMED})


def fold_held(recorded: Sequence[RecordedEvent]) -> Held | None:
    """The newest readable ``RunPaused`` of ``recorded`` (a top stream's paused and resumed
    events, oldest first) with the resumes that name it (pure; None: no run was held)."""
    newest: Held | None = None
    for event in recorded:
        try:
            if event.type == events.RUN_PAUSED:
                newest = Held(events.RunPaused.decode(event.data), str(event.id))
            elif newest is not None:
                taken = events.RunResumed.decode(event.data)
                if taken.paused == newest.event_id:
                    at = (taken, event.recorded_at)
                    newest = replace(newest, taken=(*newest.taken, at))
        except CodecError:
            continue
    return newest


async def paused(line: Line) -> Held | None:
    """The line's newest ``agentjournal.RunPaused`` and who took it up (None: no run
    was held)."""
    return fold_held(await read_types(line.store, line.facts.stream, -1, _HELD))


async def take(
    line: Line, held: Held, *, retake: bool, holder: str, trace: Mapping[str, str]
) -> None:
    """Take the paused run ``held`` up to resume it: ``agentjournal.RunResumed`` on the
    line's top stream, at its exact head. The paused run, its takers and whether its
    calls have run are looked up again in every plan, so of two processes resuming it
    exactly one goes on, and a run whose calls have run is never taken again.

    Raises:
        InvalidInput: A newer run was held since ``held`` was read.
        AlreadyResumed: Its calls have run, or it was taken up already and ``retake``
            is False.
    """

    async def checked() -> bytes:
        now = fold_held(await read_types(line.store, line.facts.stream, -1, _HELD))
        if now is None or now.event_id != held.event_id:
            raise InvalidInput(f"a newer run was held on {line.facts.stream}: read it again")
        ran = all_ran(now, await approvals(line, now.run.streams))
        if ran or (now.taken and not retake):
            raise already_resumed(line.facts.stream, now, ran=ran)
        return events.RunResumed(held.event_id, holder, retake=bool(now.taken)).encode()

    await line.write_on_top(events.RUN_RESUMED, checked, trace)


def waits_of(held: Held, asked: Sequence[Approval]) -> list[Approval | None]:
    """The questions the held run waits for, in its order (None: not found on the record)."""
    by_place = {(a.stream, a.revision): a for a in asked}
    return [by_place.get((str(r["stream"]), int(r["revision"]))) for r in held.run.requests]


def all_ran(held: Held, asked: Sequence[Approval]) -> bool:
    """Whether every call the held run waits for has run (its resume got past them)."""
    return all(a is not None and a.ran for a in waits_of(held, asked))


def already_resumed(stream: str, held: Held, *, ran: bool) -> AlreadyResumed:
    """The refusal to take ``held`` up again."""
    if not held.taken:
        return AlreadyResumed(stream, None, None, ran=ran)
    last, at = held.taken[-1]
    return AlreadyResumed(stream, last.holder, at.isoformat(), ran=ran)


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

    async def unchecked() -> bytes:
        return body

    await line.write_on_top(events.RUN_PAUSED, unchecked, trace)
    return waits


async def resolve(
    line: Line,
    request_id: str,
    *,
    approve: bool,
    by: str,
    reason: str,
    trace: Mapping[str, str],
    key: Ed25519PrivateKey | SigningKey | None = None,
) -> events.ApprovalDecided:
    """Answer a pending approval: ``InterruptResolved`` on the question's stream.

    The answer names the digest of the question's arguments (in a sealed session, the keyed
    digests of the arguments and the reason: :func:`answer_to`); with ``key`` it is signed
    (:func:`~agentjournal.ledger.approvals.sign_answer`) in the plan, so what is signed is
    exactly what is written. The write expects that stream's exact head and the question
    is looked up again in every plan, so of two answers racing in any processes exactly
    one lands.

    Raises:
        InvalidInput: No pending approval ``request_id`` on the line, ``by`` is empty, or
            the question's sealed arguments were erased.
        AlreadyResolved: It was answered already (naming who answered).
        ApproverNotAllowed: The line's policy or a policy the session recorded names
            approvers for the tool, and ``key`` is none of theirs (or there is no key).
            A recorded policy that does not read refuses too (``InvalidInput``).
    """
    if not isinstance(by, str) or not by.strip():
        raise InvalidInput("an approval needs the name of who decides (by=...)")
    if not isinstance(reason, str):
        raise InvalidInput(f"reason must be text, got {reason!r}")
    if key is not None and not isinstance(key, SigningKey | Ed25519PrivateKey):
        raise InvalidInput(f"key must be an Ed25519 private key, got {type(key).__name__}")
    facts = line.facts
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
                f"no approval request {request_id!r} waits on {line.facts.stream} (nor on "
                "a subagent open there)"
            )
        question = asked[-1]
        if question.decision is not None:
            raise AlreadyResolved(request_id, question.decision.outcome, question.decision.by)
        if question.ran:
            raise InvalidInput(f"approval request {request_id!r} is settled: its call has run")
        if question.arguments_hmac and facts.sealer is None:
            # Its answer's reason would be stored in the clear beside sealed content.
            raise InvalidInput(
                f"approval request {request_id!r} is sealed under a data subject's key: "
                "answer it where the session is opened with its key store"
            )
        answer = answer_to(
            question,
            approve=approve,
            reason=reason,
            by=by,
            at=datetime.now(UTC),
            sealer=facts.sealer,
        )
        if question.arguments_hmac and answer.arguments_digest != question.arguments_hmac:
            raise InvalidInput(
                f"approval request {request_id!r} cannot be answered: its arguments were "
                "erased (the key of the subject they were sealed under was destroyed)"
            )
        if key is not None:
            answer = sign_answer(answer, key, session_id=facts.session_id, stream=question.stream)
        found = check_answer(
            await policies_in_force(line.store, facts.session_id, facts.policy),
            answer,
            session_id=facts.session_id,
            stream=question.stream,
            tool_name=question.tool_name,
            asked_digest=answer.arguments_digest,
        )
        if found.problem is not None:
            raise ApproverNotAllowed(request_id, question.tool_name, found.problem)
        decided[:] = [answer]
        metadata = {
            **trace,
            **facts.policy_metadata(),
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
