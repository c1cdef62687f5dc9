"""The approvals stage: every question a paused run asked is about a call on its stream with
exactly that call's arguments, every answer answers one question asked before it, and a
call that waited ran only after its answer — a rejected one never (:func:`check_approvals`).

Offline and from what the bundle holds: a question or answer whose data a redacted bundle
withholds is counted and said to be unchecked, never passed as checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from agentjournal import events
from agentjournal._text import plural
from agentjournal.audit.verify._containment import call_marker
from agentjournal.audit.verify._erasure import is_sealed
from agentjournal.audit.verify._integrity import Markers
from agentjournal.audit.verify._interrupts import Answer, answer_of, question_of
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Tree
from agentjournal.records import Record

CHECK: Final = "approvals"

REJECTED_OUTPUT: Final = "Tool execution was not approved."
"""The output the SDK gives the model for a rejected call (``agents.tool``'s
``DEFAULT_APPROVAL_REJECTION_MESSAGE``, which ``session.resume`` uses): any other output
after a rejection is the tool's own."""


def check_approvals(report: Report, tree: Tree) -> None:
    """Check every function tool approval on the bundle's streams (see the module docs)."""
    asked = approved = rejected = waiting = unchecked = sealed = 0
    for name, stream in tree.streams.items():
        questions: dict[str, Record] = {}  # by event id
        answered: dict[str, tuple[Record, Answer]] = {}  # question id -> its answer
        for event in stream:
            if event.metadata.get(events.INTERRUPT_KEY) != events.TOOL_APPROVAL:
                continue
            where = (CHECK, name, event.revision)
            if event.body is None:  # withheld whole (written before views of approvals)
                unchecked += 1
                if event.type == events.INTERRUPT_ISSUED:
                    questions[event.id] = event
                continue
            if event.type == events.INTERRUPT_ISSUED:
                asked += 1
                sealed += is_sealed(event)
                problem = _question_problem(stream, event, tree.markers)
                if problem is not None:
                    report.fail(*where, problem)
                questions[event.id] = event
            elif event.type == events.INTERRUPT_RESOLVED:
                answer = answer_of(event)
                if answer is None:
                    report.fail(*where, "an answer that is no approval's InterruptResolved")
                    continue
                question = questions.get(answer.issued)
                if question is None:
                    report.fail(
                        *where,
                        f"the answer to request {answer.request_id} answers no question "
                        "asked before it on this stream",
                    )
                elif question.id in answered:
                    first, _ = answered[question.id]
                    report.fail(
                        *where,
                        f"a second answer to request {answer.request_id} (the first is at "
                        f"revision {first.revision})",
                    )
                elif question.metadata.get(events.CALL_ID_KEY) != answer.request_id:
                    report.fail(
                        *where,
                        f"the answer names request {answer.request_id}, not the one its "
                        "question asks",
                    )
                else:
                    answered[question.id] = (event, answer)
                    approved += answer.outcome == "approved"
                    rejected += answer.outcome == "rejected"
        for question in questions.values():
            found = answered.get(question.id)
            output = _output_after(stream, question)
            if output is None:
                waiting += found is None
                continue
            where = (CHECK, name, output.revision)
            call_id = question.metadata.get(events.CALL_ID_KEY)
            if _refused_between(stream, question, output):
                continue  # the gate or the guardrail refused it: that output is the refusal
            if found is None:
                if question.body is not None:
                    report.fail(*where, f"call {call_id} ran without a person's answer")
                continue
            answer_event, answer = found
            if answer_event.revision > output.revision:
                report.fail(*where, f"call {call_id} ran before a person's answer")
                continue
            result = (output.body or {}).get("result")
            if (
                answer.outcome == "rejected"
                and output.data is not None
                and not is_sealed(output)
                and result != (REJECTED_OUTPUT)
            ):
                report.fail(
                    *where,
                    f"call {call_id} was rejected, but its output is not the SDK's "
                    "rejection: the tool ran",
                )
    if not asked and not unchecked:
        return
    if not report.failed(CHECK):
        about = "each about exactly its call" if not sealed else "each on its call's id"
        line = (
            f"approvals: {plural(asked, 'question')}, {about}; "
            f"{approved} approved, {rejected} rejected, {waiting} waiting; "
            "each call ran only after its answer, no rejected call ran"
        )
        if not asked:
            line = "approvals: none could be checked"
        if unchecked:
            line += f"; {plural(unchecked, 'withheld event')} not checked"
        if sealed:
            line += (
                f"; {plural(sealed, 'question')} sealed under a subject's key (or erased): "
                "not compared with its call's arguments, nor a rejected call's output with "
                "the SDK's rejection"
            )
        report.lines.append(line)


def _question_problem(stream: Sequence[Record], question: Record, markers: Markers) -> str | None:
    """Why ``question`` is not about the call before it (None: it is)."""
    asked = question_of(question)
    if asked is None:
        return "a question that is no approval's InterruptIssued"
    if question.metadata.get(events.CALL_ID_KEY) != asked.request_id:
        return f"the question for request {asked.request_id} carries another call id"
    call = None
    for earlier in reversed(stream[: question.revision]):
        if (
            earlier.metadata.get(events.CALL_ID_KEY) == asked.request_id
            and earlier.metadata.get(events.ITEM_TYPE_KEY) == "function_call"
        ):
            call = earlier
            break
    if call is None:
        return f"request {asked.request_id} asks about a call not on its stream before it"
    if is_sealed(call) or is_sealed(question):
        return None  # the arguments are ciphertext: counted and said to be unchecked
    marker = _marker(call, markers)
    if marker is not None and marker.get("payload_digest") != asked.payload_digest:
        return (
            f"request {asked.request_id} asks about other arguments or another tool than "
            f"the call at revision {call.revision}"
        )
    return None


def _marker(call: Record, markers: Markers) -> dict[str, Any] | None:
    """The call's marker (its name and payload digest), as containment reads it."""
    try:
        return call_marker(call, markers)
    except ValueError:
        return None


def _output_after(stream: Sequence[Record], question: Record) -> Record | None:
    """The first output of the question's call after it on its stream, before the call id
    is asked about again (a model that reuses call ids asks a question of its own)."""
    call_id = question.metadata.get(events.CALL_ID_KEY)
    for later in stream[question.revision + 1 :]:
        if later.metadata.get(events.CALL_ID_KEY) != call_id:
            continue
        if later.metadata.get(events.ITEM_TYPE_KEY) == "function_call_output":
            return later
        if later.type == events.INTERRUPT_ISSUED:
            return None
    return None


def _refused_between(stream: Sequence[Record], question: Record, output: Record) -> bool:
    """Whether the call was refused when the resumed run reached it (an authority refusal
    or a guardrail BLOCK of it between its question and its output): the output is then the
    refusal the model got, not the tool's."""
    call_id = question.metadata.get(events.CALL_ID_KEY)
    for event in stream[question.revision + 1 : output.revision]:
        body = event.body or {}
        if body.get("call_id") != call_id:
            continue
        if event.type == events.AUTHORITY_REFUSED and body.get("enforcement") == "tool_refused":
            return True
        if event.type == events.GUARDRAIL_DECIDED and body.get("decision") == "BLOCK":
            return True
    return False
