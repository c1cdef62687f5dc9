"""Planning an approval's ``InterruptIssued`` beside the call it stops, and the run's own
answer beside an output that comes without a person's (pure).

The hooks learn at each model response which function calls will wait for a person
(:class:`~agentjournal.engine.plan.Ask`); the run then writes the call's item without
its output, and the same write records the question on the same stream, right after
the call.

A run resumed the SDK's way (``state.approve``/``state.reject``, then the runner) answers
no question through the journal: the write of such a call's output records, right before
it, an ``InterruptResolved`` with the run's own decision (``by`` ``RunState``, ``source``
``run_state``).

In a sealed session both carry keyed digests under the subject's key (the question its
arguments', the answer its arguments' and reason's:
:func:`~agentjournal.engine.approvals.answer_to`) in place of a plain digest that would
outlive an erasure.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime

from agentjournal import events
from agentjournal.engine.approvals import Approval, answer_to
from agentjournal.engine.plan import RunView
from agentjournal.engine.routing import Op, Plan
from agentjournal.engine.sealing import Events


def add_interrupt(
    out: Events,
    op: Op,
    run: RunView,
    routed: Plan,
    now: datetime,
    next_id: Callable[[], uuid.UUID],
) -> None:
    """After a ``function_call`` item's event: its ``InterruptIssued`` when the run waits
    for its approval and this write does not carry the call's output."""
    item = op.item
    if not run.asks or item is None or item.get("type") != "function_call":
        return
    ask = run.asks.get(item.get("call_id"))  # type: ignore[arg-type]
    if ask is None or _answered(routed, ask.call_id):
        return
    asked = events.ApprovalAsked(
        request_id=ask.call_id,
        tool_name=ask.tool_name,
        arguments=ask.arguments,
        agent=ask.agent,
        authority=ask.authority,
        timestamp=now,
        arguments_hmac="" if out.sealer is None else out.sealer.digest(ask.arguments),
    )
    metadata = {
        events.INTERRUPT_KEY: events.TOOL_APPROVAL,
        events.CALL_ID_KEY: ask.call_id,
    }
    out.add(op.stream, events.INTERRUPT_ISSUED, asked.encode(), metadata, next_id())


def add_run_answer(
    out: Events,
    op: Op,
    run: RunView,
    unanswered: Mapping[str, Approval],
    now: datetime,
    next_id: Callable[[], uuid.UUID],
) -> None:
    """Before a ``function_call_output`` item's event: the run's own answer to its call's
    question when it waits on the same stream with no answer (``unanswered``) and the run
    can tell what the SDK decided (see :meth:`RunView.decided
    <agentjournal.engine.plan.RunView.decided>`)."""
    item = op.item
    if not unanswered or item is None or item.get("type") != "function_call_output":
        return
    question = unanswered.get(item.get("call_id"))  # type: ignore[arg-type]
    if question is None or question.stream != op.stream:
        return
    approved = run.decided(question.request_id, question.tool_name)
    if approved is None:
        return
    answer = answer_to(
        question,
        approve=approved,
        reason="",
        by=events.RUN_STATE_BY,
        at=now,
        sealer=out.sealer,
        source=events.RUN_STATE,
    )
    metadata = {
        events.INTERRUPT_KEY: events.TOOL_APPROVAL,
        events.CALL_ID_KEY: question.request_id,
    }
    out.add(op.stream, events.INTERRUPT_RESOLVED, answer.encode(), metadata, next_id())


def _answered(routed: Plan, call_id: str) -> bool:
    """Whether the write carries the call's output (then nothing waits)."""
    return any(
        op.item is not None
        and op.item.get("call_id") == call_id
        and op.item.get("type") == "function_call_output"
        for op in routed.ops
    )
