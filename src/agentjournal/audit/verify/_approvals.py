"""The approvals stage: every call that waited for a person ran only on an answer that counts
(:func:`check_approvals`).

Per stream, in revision order:

- each question (``InterruptIssued`` with ``aj.interrupt``) follows its call's item on the
  same stream, and shows that call's arguments (the payload digest of the question's
  tool and arguments is the call item's);
- each answer (``InterruptResolved`` with ``aj.interrupt``) names a question before it on
  the same stream (``issued``), with its call id, and is the only answer to it; its
  arguments digest is the question's; a signed answer's signature verifies against the
  approver of its key id, and a tool the recorded policy names approvers for
  (:meth:`~agentjournal.authority.Policy.approvers_for`) is answered only by one of them
  (:func:`~agentjournal.ledger.approvals.check_answer`);
- each output of an asked call comes after an answer to its question (or after a refusal
  of the call, an authority refusal or a guardrail BLOCK: that output is the refusal):
  ``approved`` and counting, or ``rejected`` — and then the output records no tool start
  (``aj.started_at``, written when the tool's body began) and, where the bundle shows it,
  is the SDK's rejection message (:data:`REJECTED_OUTPUT`): the SDK gives the model that
  message without starting the tool.

Sealed questions and answers (content sealed under a data subject's key, or erased: DESIGN
"Erasure that keeps the proof") carry in the clear the keyed digests of the arguments (both)
and of the reason (the answer), under the subject's key; the answer's signature covers them
(:data:`~agentjournal.events.SIGNED_KEYED_APPROVAL`). So every check above runs on them
without the key, before and after erasure — the answer's digest is its question's, the
signature verifies, the approvers are the policy's —, except what needs the plaintext: a
sealed question is not compared with its call's arguments, and a rejected call's sealed
output is checked by its tool start alone; the summary says so. A sealed answer that names
no keyed digests (the clear form) cannot be checked against its question nor its signature
verified (it covers the sealed reason): it counts only where no approver is required. A
sealed question's answer must name keyed digests.

Redacted bundles carry both interrupt events as views (:mod:`agentjournal.ledger.redaction`)
holding the arguments digest and the payload digest in place of the arguments, and the
reason's digest in place of the reason: every check runs on them, signatures included,
but a rejected call's withheld output is checked by its tool start alone (said in the
summary). Questions and answers withheld whole (written before their views existed) are
counted and said to be unchecked, never passed as checked.
"""

from __future__ import annotations

import heapq
import json
from bisect import bisect_right
from collections.abc import Mapping, Set
from dataclasses import dataclass, field, replace
from typing import Any, Final

from agentjournal import events
from agentjournal._calls import tool_call_payload
from agentjournal._digests import value_digest
from agentjournal._text import plural
from agentjournal.audit.verify._containment import call_marker
from agentjournal.audit.verify._erasure import is_sealed
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Tree
from agentjournal.authority import Policy
from agentjournal.errors import CodecError
from agentjournal.ledger import redaction
from agentjournal.ledger.approvals import check_answer
from agentjournal.records import Record

_CHECK: Final = "approvals"

REJECTED_OUTPUT: Final = "Tool execution was not approved."
"""The output the SDK gives the model for a rejected call (``agents.tool``'s
``DEFAULT_APPROVAL_REJECTION_MESSAGE``, which ``session.resume`` uses): any other output
after a rejection is the tool's own — or a ``tool_error_formatter``'s (DESIGN §18)."""


@dataclass
class _Question:
    record: Record
    asked: events.ApprovalAsked
    asked_digest: str
    payload_digest: str
    call: Record | None
    answer: events.ApprovalDecided | None = None
    answered_at: Record | None = None
    counts: bool = False
    ran: bool = False
    sealed: bool = False
    policies: tuple[Policy, ...] = field(default=())


@dataclass
class _Counts:
    asked: int = 0
    approved: int = 0
    rejected: int = 0
    signed: int = 0
    run_state: int = 0  # answers the SDK's RunState gave, no person through the journal
    unchecked: int = 0  # questions and answers withheld whole
    unverified: int = 0  # signed by a key no policy names: the signature not checked
    paused_withheld: int = 0  # paused runs a redacted bundle withholds: not cross-checked
    rejected_withheld: int = 0  # rejected calls whose output the bundle withholds
    sealed: int = 0  # questions or answers whose arguments or reason are sealed
    sealed_clear: int = 0  # sealed answers naming no keyed digests: not checked
    uncompared: int = 0  # keyed answers to questions with no keyed digest


def check_approvals(report: Report, tree: Tree) -> None:
    """Every question, answer and asked call's output on every stream of the tree (see the
    module docs); one line of totals when nothing failed."""
    counts = _Counts()
    ids = tree.by_id.keys()  # every event's id
    # A stream with no event that names an interrupt has no question, answer or asked call.
    asking = {name for name, _ in tree.marked[events.INTERRUPT_KEY]}
    paused = tree.noted_on(events.RUN_PAUSED)
    for name, stream in tree.streams.items():
        if tree.is_tree_stream(name):
            if name in asking:
                _check_stream(report, tree, name, stream, counts, ids)
            _check_paused(report, tree, name, paused.get(name, []), counts)
    if (counts.asked or counts.unchecked) and not report.failed(_CHECK):
        line = (
            f"approvals: {counts.asked} asked, {counts.approved} approved, "
            f"{counts.rejected} rejected, {counts.signed} signed; each call ran only on "
            "an answer that counts"
        )
        if counts.unverified:
            line += (
                f"; {plural(counts.unverified, 'answer')} signed by a key no policy names: "
                "the signature not checked"
            )
        if counts.run_state:
            line += (
                f"; {plural(counts.run_state, 'answer')} by the run's RunState, "
                "not a person through the journal"
            )
        if counts.rejected_withheld:
            line += (
                f"; {plural(counts.rejected_withheld, 'rejected call')} with a withheld "
                "output checked by its tool start only"
            )
        if counts.unchecked:
            line += f"; {plural(counts.unchecked, 'withheld event')} not checked"
        if counts.paused_withheld:
            line += (
                f"; {plural(counts.paused_withheld, 'withheld paused run')} not "
                "matched with its questions"
            )
        if counts.sealed:
            line += (
                f"; {plural(counts.sealed, 'sealed approval event')} (a subject's content, or"
                " erased): answers checked by their keyed digests and signatures, questions'"
                " arguments not checked against their calls"
            )
        if counts.sealed_clear:
            line += (
                f"; {plural(counts.sealed_clear, 'sealed answer')} without keyed digests: "
                "arguments and signatures not checked"
            )
        if counts.uncompared:
            line += (
                f"; {plural(counts.uncompared, 'keyed answer')} to a question without a keyed "
                "digest: arguments not compared"
            )
        report.lines.append(line)


def _check_stream(
    report: Report,
    tree: Tree,
    name: str,
    stream: list[Record],
    counts: _Counts,
    ids: Set[str],
) -> None:
    questions: dict[str, _Question] = {}  # by event id
    pending = _Pending()  # of those, the ones whose call has no output yet, by call id
    calls: dict[str, Record] = {}  # call id -> its newest call item on this stream
    refusals: _Refusals | None = None  # made when an asked call's output is first met
    for event in stream:
        # What most events need (none of them is a question or an answer) read first.
        metadata = event.metadata
        kind = metadata.get(events.ITEM_TYPE_KEY)
        if kind == "function_call":
            calls[metadata.get(events.CALL_ID_KEY, "")] = event
            continue
        if kind != "function_call_output" and events.INTERRUPT_KEY not in metadata:
            continue  # an MCP approval item (the codec's), or no interrupt at all
        where = (_CHECK, name, event.revision)
        call_id = metadata.get(events.CALL_ID_KEY, "")
        if kind == "function_call_output":
            # No question on the stream yet (nearly always): none about this call either.
            asked = pending.newest(questions, call_id) if questions else None
            if asked is not None:
                if refusals is None:
                    refusals = _Refusals(stream)
                refused = refusals.between(asked, event)
                problem = _output_problem(asked, event, refused, counts)
                if problem is not None:
                    report.fail(*where, problem)
                asked.ran = True
        elif event.data is None and event.view is None:
            counts.unchecked += 1  # withheld whole: its call's output is not checked either
        elif event.type == events.INTERRUPT_ISSUED:
            counts.asked += 1
            counts.sealed += is_sealed(event)
            question = _question(event, calls.get(call_id))
            if isinstance(question, str):
                report.fail(*where, question)
                continue
            question.policies = _policies(tree, event, question.call)
            questions[event.id] = question
            pending.add(event.id, question)
        elif event.type == events.INTERRUPT_RESOLVED:
            problem = _answer(tree, name, event, questions, ids, counts)
            if problem is not None:
                report.fail(*where, problem)


class _Pending:
    """A stream's questions by call id, each call's newest first in the order the stream's
    ``questions`` hold them (a question that replaces another by event id takes its place):
    the newest question about a call whose call has no output yet is found without a pass
    over every question, however many name one call."""

    def __init__(self) -> None:
        self._places: dict[str, int] = {}  # event id -> its place among the questions
        self._newest: dict[str, list[tuple[int, int, _Question]]] = {}  # heaps, by call id
        self._added = 0

    def add(self, event_id: str, question: _Question) -> None:
        place = self._places.setdefault(event_id, len(self._places))
        self._added += 1
        heapq.heappush(
            self._newest.setdefault(question.asked.request_id, []),
            (-place, self._added, question),
        )

    def newest(self, questions: Mapping[str, _Question], call_id: str) -> _Question | None:
        """The newest question about ``call_id`` whose call has no output yet."""
        heap = self._newest.get(call_id, [])
        while heap:
            question = heap[0][2]
            if not question.ran and questions.get(question.record.id) is question:
                return question
            heapq.heappop(heap)  # its call ran, or another question took its place: for good
        return None


def _output_problem(
    question: _Question, output: Record, refused: bool, counts: _Counts
) -> str | None:
    call_id = question.asked.request_id
    answer = question.answer
    if answer is None:
        if refused and events.STARTED_AT_KEY not in output.metadata:
            return None  # the gate or the guardrail refused it: the output is the refusal
        return f"call {call_id} has an output, but its question has no answer before it"
    if answer.outcome == "rejected":
        if events.STARTED_AT_KEY in output.metadata:
            return f"call {call_id} was rejected, yet its tool started"
        if output.data is None or is_sealed(output):
            counts.rejected_withheld += 1
        elif (output.body or {}).get("result") != REJECTED_OUTPUT:
            return (
                f"call {call_id} was rejected, but its output is not the SDK's rejection: "
                "the tool ran"
            )
        return None
    if not question.counts:
        return f"call {call_id} ran on an answer that does not count"
    return None


def _question(event: Record, item: Record | None) -> _Question | str:
    """The question an ``InterruptIssued`` asks, or why it does not read as one."""
    read = _read(events.ApprovalAsked, event, "prompt")
    if read is None:
        return "a question (InterruptIssued) that does not read as one"
    asked, marker = read
    if is_sealed(event) or (item is not None and is_sealed(item)):
        if item is None:
            return f"a question about call {asked.request_id} that is not before it on the stream"
        # The arguments are ciphertext: the keyed digest is what the answer names.
        return _Question(event, asked, asked.arguments_hmac, "", item, sealed=True)
    if marker is None:
        asked_digest = events.arguments_digest(asked.arguments)
        payload = value_digest(
            tool_call_payload(asked.request_id, asked.tool_name, asked.arguments)
        )
    else:
        shown_digest, shown_payload = marker.get("arguments_sha256"), marker.get("payload_digest")
        if not isinstance(shown_digest, str) or not isinstance(shown_payload, str):
            return "a withheld question without the digests of its arguments"
        asked_digest, payload = shown_digest, shown_payload
    if item is None:
        return f"a question about call {asked.request_id} that is not before it on the stream"
    if _marker(item).get("payload_digest") != payload:
        return f"the question about call {asked.request_id} shows other arguments than the call"
    return _Question(event, asked, asked_digest, payload, item)


def _answer(
    tree: Tree,
    stream: str,
    event: Record,
    questions: dict[str, _Question],
    ids: Set[str],
    counts: _Counts,
) -> str | None:
    """Why an ``InterruptResolved`` is not a sound answer, if it is not."""
    read = _read(events.ApprovalDecided, event, "response")
    if read is None:
        return "an answer (InterruptResolved) that does not read as one"
    decided, marker = read
    reason_digest = None
    if marker is not None:  # the reason withheld: its digest is what the signature covers
        reason_digest = marker.get("withheld")
        if not isinstance(reason_digest, str):
            return "a withheld reason without its digest"
    question = questions.get(decided.issued)
    if question is None:
        if decided.issued in ids:
            return f"an answer to {decided.request_id} before its question, or on another stream"
        return f"an answer to a question that does not exist ({decided.request_id})"
    if question.asked.request_id != decided.request_id:
        return f"an answer to {decided.request_id} names the question about another call"
    if question.answer is not None:
        return f"a second answer to the question about {decided.request_id}"
    if question.ran:
        return f"an answer to {decided.request_id} after its call ran"
    question.answer, question.answered_at = decided, event
    counts.approved += decided.outcome == "approved"
    counts.rejected += decided.outcome == "rejected"
    counts.run_state += decided.source == events.RUN_STATE
    counts.sealed += is_sealed(event)
    if question.asked.arguments_hmac and not decided.keyed:
        return (
            f"the answer to {decided.request_id} names no keyed digest of its sealed "
            "question's arguments"
        )
    asked_digest: str | None = question.asked_digest
    if decided.keyed:  # the signature covers the keyed digests, not the reason's plain one
        counts.uncompared += not question.asked.arguments_hmac
        asked_digest, reason_digest = question.asked.arguments_hmac or None, None
    elif is_sealed(event) or question.sealed:
        counts.sealed_clear += 1
        return _sealed_answer(question, decided, tree.session_id, stream)
    found = check_answer(
        question.policies,
        decided,
        session_id=tree.session_id,
        stream=stream,
        tool_name=question.asked.tool_name,
        asked_digest=asked_digest,
        reason_digest=reason_digest,
    )
    question.counts = found.problem is None
    counts.signed += found.approver is not None
    counts.unverified += decided.signed and found.approver is None and found.problem is None
    if found.problem is not None:
        return f"the answer to {decided.request_id} does not count: {found.problem}"
    return None


def _sealed_answer(
    question: _Question, decided: events.ApprovalDecided, session_id: str, stream: str
) -> str | None:
    """What can be checked of a sealed answer that names no keyed digests: an unsigned
    answer counts unless the policy names approvers; a signed one cannot be verified (the
    signature covers the reason's plain digest), so it counts only where no approver is
    required."""
    unsigned = replace(decided, key_id="", signature="") if decided.signed else decided
    found = check_answer(
        question.policies,
        unsigned,
        session_id=session_id,
        stream=stream,
        tool_name=question.asked.tool_name,
        asked_digest=None,
    )
    question.counts = found.problem is None
    if found.problem is not None:
        sealed = "its signature covers sealed content and is not checked; "
        return (
            f"the answer to {decided.request_id} does not count: "
            f"{sealed if decided.signed else ''}{found.problem}"
        )
    return None


def _policies(tree: Tree, question: Record, call: Record | None) -> tuple[Policy, ...]:
    """The recorded policies in force for a question: those its call names (``aj.policy``),
    else every policy the tree records (a missing name never frees a call of approvers)."""
    named = {
        digest
        for digest in ((call.metadata.get(events.POLICY_KEY) if call is not None else None),)
        if digest
    }
    found = [tree.policies.by_digest[d] for d in sorted(named) if d in tree.policies.by_digest]
    if found and len(found) == len(named):
        return tuple(found)
    return tuple(tree.policies.by_digest[d] for d in sorted(tree.policies.by_digest))


def _read(kind: Any, event: Record, field_name: str) -> tuple[Any, dict[str, Any] | None] | None:
    """``kind.decode`` of an event's data, or of its view with the marker at ``field_name``
    put aside (returned beside the decoded event); None when it does not read."""
    if event.data is not None:
        try:
            return kind.decode(event.data.encode()), None
        except (CodecError, UnicodeEncodeError, RecursionError):
            return None
    view = event.view
    if view is None:
        return None
    shown = dict(view)
    marker = shown.pop(field_name, None)
    if marker is not None and not redaction.is_withheld(marker):
        return None
    try:
        decoded = kind.decode(json.dumps(shown).encode())
    except (CodecError, UnicodeEncodeError, RecursionError, ValueError, TypeError):
        return None
    return decoded, (dict(marker) if marker is not None else None)


def _marker(call: Record) -> dict[str, Any]:
    """The call's marker (its name and payload digest), as containment reads it."""
    try:
        return call_marker(call, {})
    except ValueError:
        return {}


class _Refusals:
    """A stream's refusals of calls, by call id, each as what it shows: authority refusals
    that refused the tool (by the arguments digest they show) and guardrail BLOCKs (by the
    payload digest they judged), each a list of revisions in order. Whether a refusal of a
    question's call lies between the question and an output is then a binary search, however
    many refusals, questions and outputs name one call."""

    def __init__(self, stream: list[Record]) -> None:
        self.refused: dict[str, dict[object, list[int]]] = {}
        self.blocked: dict[str, dict[object, list[int]]] = {}
        for event in stream:
            if event.type == events.AUTHORITY_REFUSED:
                body = event.body or {}
                if body.get("enforcement") != "tool_refused":
                    continue
                table, shown = self.refused, body.get("arguments_digest")
            elif event.type == events.GUARDRAIL_DECIDED:
                body = event.body or {}
                if body.get("decision") != "BLOCK":
                    continue
                table, shown = self.blocked, _payload_digest(body)
            else:
                continue
            call_id = body.get("call_id")
            if not isinstance(call_id, str):
                continue  # no question's call id: it refuses none of them
            by_shown = table.setdefault(call_id, {})
            by_shown.setdefault(_EVERY, []).append(event.revision)
            if shown is None or isinstance(shown, str):  # what a question's digest can be
                by_shown.setdefault(shown, []).append(event.revision)

    def between(self, question: _Question, output: Record) -> bool:
        """Whether this very call was refused when the resumed run reached it: an authority
        refusal or a guardrail BLOCK between its question and its output whose call id and
        arguments (or payload) are the question's, as far as the bundle shows them. The
        output is then the refusal the model got, not the tool's."""
        call_id = question.asked.request_id
        after, before = question.record.revision, output.revision
        for table, digest in (
            (self.refused, question.asked_digest),
            (self.blocked, question.payload_digest),
        ):
            by_shown = table.get(call_id)
            if by_shown is None:
                continue
            for shown in (None, digest) if digest else (_EVERY,):
                revisions = by_shown.get(shown, [])
                first = bisect_right(revisions, after)
                if first < len(revisions) and revisions[first] < before:
                    return True
        return False


_EVERY: Final = object()
"""The key of :class:`_Refusals`' list of every refusal of a call, whatever it shows."""


def _payload_digest(body: Mapping[str, Any]) -> str | None:
    """The digest of a guardrail decision's judged payload (from its withheld marker in a
    redacted view); None when it cannot be told."""
    payload = body.get("payload")
    if isinstance(payload, dict) and redaction.is_withheld(payload):
        shown = payload.get("withheld")
        return shown if isinstance(shown, str) else None
    try:
        return value_digest(payload)
    except (TypeError, ValueError):
        return None


def _check_paused(
    report: Report, tree: Tree, name: str, runs: list[Record], counts: _Counts
) -> None:
    """Each paused run (``RunPaused``: ``runs``, on ``name``) waits for questions that are
    where it says: an ``InterruptIssued`` of that request at that stream and revision — so a
    question dropped (with its answer) and the chain resealed still fails here."""
    for event in runs:
        if event.data is None:
            counts.paused_withheld += 1
            continue
        try:
            paused = events.RunPaused.decode(event.data.encode())
        except (CodecError, UnicodeEncodeError, RecursionError):
            report.fail(_CHECK, name, event.revision, "a paused run that does not read as one")
            continue
        for request in paused.requests:
            where, at = str(request["stream"]), int(request["revision"])
            found = tree.streams.get(where, [])
            asked = found[at] if 0 <= at < len(found) else None
            if (
                asked is None
                or asked.type != events.INTERRUPT_ISSUED
                or asked.metadata.get(events.CALL_ID_KEY) != request["request_id"]
            ):
                report.fail(
                    _CHECK,
                    name,
                    event.revision,
                    f"the paused run waits for request {request['request_id']}, whose "
                    f"question is not at {where}@{at}",
                )
