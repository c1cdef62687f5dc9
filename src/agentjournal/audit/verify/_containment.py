"""The containment stage: every executed tool call had the decision its guardrail needed and
stayed within its agent's authority, every decision is consistent with itself and every
refusal is one the policy makes (:func:`check_containment`)."""

from __future__ import annotations

import json
import operator
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from typing import Any, Final

from agentjournal import events
from agentjournal._calls import CALL_KINDS
from agentjournal._digests import value_digest
from agentjournal._text import plural
from agentjournal.audit.verify._erasure import is_sealed
from agentjournal.audit.verify._integrity import Markers
from agentjournal.audit.verify._interrupts import answer_of, question_of
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Tree, agent_of, authority_at, grant_at
from agentjournal.authority import Authority, Gate, Policy, ToolRule, ceiling_inputs
from agentjournal.errors import InvalidInput
from agentjournal.events import Enforcement
from agentjournal.ledger import redaction
from agentjournal.records import Record


def check_containment(report: Report, tree: Tree, anchor: Policy | None) -> None:
    executed = guarded = bounded = 0
    sealed_calls = sealed_decisions = 0  # their arguments or payloads need the subject's key
    judged = tree.noted_on(*_JUDGED)  # each stream's decisions and refusals, in order
    opaque_on = {
        name: sum(e.metadata[events.OPAQUE_KEY] == "1" for e in found)
        for name, found in tree.marked_on(events.OPAQUE_KEY).items()
    }
    indexes = [  # one pass over each stream's items
        _CallIndex(stream, judged.get(name, []), opaque_on.get(name, 0))
        for name, stream in tree.streams.items()
    ]
    for name, index in zip(tree.streams, indexes, strict=True):
        decisions, refusals = index.decisions, index.refusals
        for event in index.calls:
            meta = event.metadata
            kind = meta[events.ITEM_TYPE_KEY]
            call_id = meta.get(events.CALL_ID_KEY, "")
            # No decision or refusal on the stream (nearly always): none of this call either.
            decided = index.latest(decisions, call_id, event.revision) if decisions else None
            refused = (
                (
                    index.latest(refusals, call_id, event.revision)
                    or index.refused_in_place(call_id, event.revision, kind)
                )
                if refusals
                else None
            )
            where = ("containment", name, event.revision)
            if is_sealed(event):
                sealed_calls += 1
                ran = _check_sealed_call(report, where, call_id, meta, decided, refused, index)
                executed += ran
                guarded += ran and meta.get(events.GUARDED_KEY) == "1"
                bounded += ran and events.TOOL_RULE_KEY in meta  # ceilings: not checked
                continue
            marker = call_marker(event, tree.markers)
            if (marker.get("call_id"), marker.get("kind")) != (call_id, kind):
                report.fail(*where, "the call's aj.call_id or aj.item_type is not the call's own")
                continue
            stopped = (
                None  # neither (nearly always): no generator to find neither stops it
                if decided is None and refused is None
                else next(
                    (
                        r
                        for r in (decided, refused)
                        if r is not None and _stops(r.get("enforcement"))
                    ),
                    None,
                )
            )
            if stopped is not None:
                # Refused before it ran: a refusal as its output, or the run ended there.
                if stopped.get("enforcement") != "tool_refused" and index.ran(
                    call_id, event.revision, kind
                ):
                    report.fail(*where, f"tool call {call_id} ran although its run was stopped")
                continue
            executed += 1  # it ran, or may have: an output is no proof either way
            if meta.get(events.GUARDED_KEY) == "1":
                guarded += 1
                if decided is None or decided.get("decision") not in ("ALLOW", "MODIFY"):
                    report.fail(
                        *where, f"tool call {call_id} ran without an ALLOW or MODIFY decision"
                    )
                elif decided.get("payload_digest") != marker.get("payload_digest"):
                    report.fail(*where, f"the decision on {call_id} was about another call")
            if anchor is not None and meta.get(events.POLICY_KEY) != anchor.digest:
                report.fail(*where, f"tool call {call_id} ran without the policy given")
            elif events.TOOL_RULE_KEY in meta:
                bounded += 1
                _check_within(report, tree, event, marker, decided, index)
    for index in indexes:
        for event in index.judged:
            if event.type == events.AUTHORITY_REFUSED:
                try:
                    _check_refusal(report, tree, event, index)
                except InvalidInput as error:
                    report.fail("containment", event.stream, event.revision, str(error))
            elif event.type == events.GUARDRAIL_DECIDED:
                sealed_decisions += is_sealed(event)
                problem = _decision_problem(event.body or {}, sealed=is_sealed(event))
                if problem is not None:
                    report.fail("containment", event.stream, event.revision, problem)
    opaque = sum(index.opaque for index in indexes)
    if opaque:
        report.lines.append(
            f"  note: {plural(opaque, 'opaque item')} (encrypted, or naming no kind) could not "
            "be inspected: calls or handoffs inside them are not checked"
        )
    if not report.failed("containment"):
        report.lines.append(_containment_line(executed, guarded, bounded))
    if sealed_calls or sealed_decisions:
        report.lines.append(
            f"  not checked: {plural(sealed_calls, 'tool call')} and "
            f"{plural(sealed_decisions, 'guardrail decision')} sealed under a subject's key "
            "(or erased): whether each decision judged exactly its call's arguments, each "
            "payload matches its digest, and each call's arguments were within its agent's "
            "ceilings needs the plaintext (only the tool and its scope were checked)"
        )


def _containment_line(executed: int, guarded: int, bounded: int) -> str:
    """What containment found, saying only what was checked."""
    if not executed:
        return "containment: no tool call ran"
    if guarded == executed:
        decided = "each had an ALLOW or MODIFY decision"
    elif guarded:
        decided = f"{guarded} guarded, each with an ALLOW or MODIFY decision"
    else:
        decided = "no guardrail: no decisions were expected"
    if bounded == executed:
        within = "each within its agent's authority"
    elif bounded:
        within = f"{bounded} under the policy, each within its agent's authority"
    else:
        within = "no policy: no authority to check"
    return f"containment: {plural(executed, 'executed tool call')}; {decided}; {within}"


_ENFORCED: Final = {
    "ALLOW": {Enforcement.PROCEEDED},
    "MODIFY": {Enforcement.MODIFIED},
    "BLOCK": {Enforcement.TOOL_REFUSED, Enforcement.RUN_STOPPED, Enforcement.UNENFORCEABLE},
}


def _decision_problem(body: Mapping[str, Any], *, sealed: bool = False) -> str | None:
    """Why a ``GuardrailDecided`` contradicts itself, if it does: an enforcement that does
    not follow from the decision, a payload (or its view's digest) other than its digest
    (not checked when ``sealed``: the payload is ciphertext, the digest keyed)."""
    decision, enforcement = body.get("decision"), body.get("enforcement")
    if enforcement not in _ENFORCED.get(str(decision), ()):
        return f"a {decision} decision carried out as {enforcement!r}"
    if sealed:
        return None
    for name in ("payload", "modified_payload"):
        value: Any = body.get(name)
        recorded = body.get(f"{name}_digest")
        if value is None and name == "modified_payload":
            found = None
        elif redaction.is_withheld(value):
            found = value.get("withheld")
        else:
            found = value_digest(value)
        if found != recorded:
            return f"the {name} is not the one its digest names"
    return None


def _check_sealed_call(
    report: Report,
    where: tuple[str, str, int],
    call_id: str,
    meta: Mapping[str, str],
    decided: dict[str, Any] | None,
    refused: dict[str, Any] | None,
    index: _CallIndex,
) -> bool:
    """What containment can check of a call whose item is sealed: a call stopped before it
    ran did not run, and a guarded call that ran had an ALLOW or MODIFY decision; whether
    it ran (or may have)."""
    kind = meta.get(events.ITEM_TYPE_KEY, "")
    stopped = next(
        (r for r in (decided, refused) if r is not None and _stops(r.get("enforcement"))), None
    )
    if stopped is not None:
        if stopped.get("enforcement") != "tool_refused" and index.ran(call_id, where[2], kind):
            report.fail(*where, f"tool call {call_id} ran although its run was stopped")
        return False
    if meta.get(events.GUARDED_KEY) == "1" and (
        decided is None or decided.get("decision") not in ("ALLOW", "MODIFY")
    ):
        report.fail(*where, f"tool call {call_id} ran without an ALLOW or MODIFY decision")
    return True


def _stops(enforcement: Any) -> bool:
    """Whether a decision or refusal carried out this way kept its call from running."""
    return enforcement in (
        Enforcement.TOOL_REFUSED,
        Enforcement.RUN_STOPPED,
        Enforcement.UNENFORCEABLE,
    )


def call_marker(event: Record, markers: Markers) -> dict[str, Any]:
    """The call's marker (name, payload digest, ceiling inputs): from its view, or computed
    from its data exactly as the view was (by the integrity check, when it did)."""
    shared = markers.get(id(event))
    if shared is not None:
        return shared
    body = event.body or {}
    if event.type == "OpenAIItemRecorded":
        item: Any = body.get("item")
    else:
        item = body.get("extensions", {}).get("openai", {}).get("item_json")
    if redaction.is_withheld(item):
        return dict(item)
    if isinstance(item, str):
        item = json.loads(item)
    rule = json.loads(event.metadata.get(events.TOOL_RULE_KEY, "null"))
    return redaction.call_marker(item, rule if isinstance(rule, Mapping) else None)


_JUDGED: Final = (events.GUARDRAIL_DECIDED, events.AUTHORITY_REFUSED)
"""The event types a stream's index keeps as judgements (``_CallIndex.judged``)."""

# An output's item type -> the kind of call it is the output of: ``{kind}_output``.
_OUTPUT_OF: Final = {f"{kind}_output": kind for kind in CALL_KINDS}


class _CallIndex:
    """One stream's tool outputs, guardrail decisions and refusals, by call id; its
    calls, its refusals and decisions (``judged``: its events of those types, in order), and
    how many of its items are opaque (``opaque``, counted by the caller)."""

    def __init__(self, stream: Sequence[Record], judged: list[Record], opaque: int) -> None:
        self.outputs: dict[tuple[str, str], list[int]] = {}  # (call kind, call id)
        self.decisions: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.refusals: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.calls: list[Record] = []  # the events holding a call the runner executes
        self.judged = judged  # its AuthorityRefused and GuardrailDecided events
        self.opaque = opaque
        # One pass over every event of the stream: what it reads, bound once.
        calls, outputs, output_of_kind = self.calls, self.outputs, _OUTPUT_OF.get
        for event in stream:
            meta = event.metadata
            kind = meta.get(events.ITEM_TYPE_KEY)
            if kind is None:
                continue  # no item: neither a call nor an output
            if kind in CALL_KINDS:
                calls.append(event)
                continue
            output_of = output_of_kind(kind)  # the call kind of an output's item type
            if output_of is not None:
                key = (output_of, meta.get(events.CALL_ID_KEY, ""))
                revisions = outputs.get(key)
                if revisions is None:
                    outputs[key] = [event.revision]
                else:
                    revisions.append(event.revision)
        for event in self.judged:
            if output_of_kind(event.metadata.get(events.ITEM_TYPE_KEY, "")) is not None:
                continue  # an output's item type: its body is not indexed (as before)
            body = event.body
            if body is not None and isinstance(body.get("call_id"), str):
                table = self.decisions if event.type == events.GUARDRAIL_DECIDED else self.refusals
                table.setdefault(body["call_id"], []).append((event.revision, body))
        # Each list in revision order (as a stream that chains is read already), so that
        # every look-up below is a binary search: a stream of many calls sharing one call id
        # costs no more than one of distinct ids.
        for revisions in outputs.values():
            revisions.sort()
        for table in (self.decisions, self.refusals):
            for entries in table.values():
                entries.sort(key=_AT)
        self._stream = stream
        self._tool_refused: dict[str, list[tuple[int, dict[str, Any]]]] | None = None
        self._questions: dict[str, list[Record]] | None = None
        self._calls_by_id: dict[str | None, list[Record]] | None = None
        self._answers: dict[str, list[Record]] | None = None

    def ran(self, call_id: str, revision: int, kind: str) -> bool:
        """Whether an output of the call follows ``revision``."""
        revisions = self.outputs.get((kind, call_id))
        return revisions is not None and len(revisions) > 0 and revisions[-1] > revision

    def refused_in_place(self, call_id: str, revision: int, kind: str) -> dict[str, Any] | None:
        """A refusal of the call written after it (at ``revision``) and before its first
        output: a call stored before it could run (a run stopped for approval), refused when
        the resumed run reached it; that output is the refusal."""
        if call_id not in self.refusals:
            return None  # no refusal of the call at all (nearly always): none found below
        revisions = self.outputs.get((kind, call_id), [])
        first = bisect_right(revisions, revision)
        if first == len(revisions):
            return None  # no output after the call
        if self._tool_refused is None:
            self._tool_refused = {
                refused: [e for e in entries if e[1].get("enforcement") == Enforcement.TOOL_REFUSED]
                for refused, entries in self.refusals.items()
            }
        entries = self._tool_refused.get(call_id, [])
        before = bisect_left(entries, revisions[first], key=_AT)  # the newest before the output
        return entries[before - 1][1] if before and entries[before - 1][0] > revision else None

    @staticmethod
    def latest(
        table: dict[str, list[tuple[int, dict[str, Any]]]], call_id: str, revision: int
    ) -> dict[str, Any] | None:
        """The newest entry for the call before ``revision``."""
        entries = table.get(call_id, [])
        before = bisect_left(entries, revision, key=_AT)
        return entries[before - 1][1] if before else None

    def call_after(self, call_id: str | None, revision: int) -> Record | None:
        """The first call after ``revision`` whose ``aj.call_id`` is ``call_id`` (None: it
        has none)."""
        if self._calls_by_id is None:
            self._calls_by_id = {}
            for call in self.calls:
                self._calls_by_id.setdefault(call.metadata.get(events.CALL_ID_KEY), []).append(call)
        return _first_after(self._calls_by_id.get(call_id, []), revision)

    def question_after(self, call_id: str, revision: int) -> Record | None:
        """The first ``InterruptIssued`` after ``revision`` whose ``aj.call_id`` is the call's."""
        if self._questions is None:
            self._questions = {}
            for event in self._stream:
                if event.type == events.INTERRUPT_ISSUED:
                    named = event.metadata.get(events.CALL_ID_KEY)
                    if named is not None:
                        self._questions.setdefault(named, []).append(event)
        return _first_after(self._questions.get(call_id, []), revision)

    def answer_after(self, question: Record) -> Record | None:
        """The first ``InterruptResolved`` after ``question`` that answers it."""
        if self._answers is None:
            self._answers = {}
            for event in self._stream:
                if event.type == events.INTERRUPT_RESOLVED:
                    answer = answer_of(event)
                    if answer is not None:
                        self._answers.setdefault(answer.issued, []).append(event)
        return _first_after(self._answers.get(question.id, []), question.revision)


def _first_after(found: list[Record], revision: int) -> Record | None:
    """The first of ``found`` (in revision order) after ``revision``."""
    at = bisect_right(found, revision, key=_REVISION)
    return found[at] if at < len(found) else None


_AT: Final = operator.itemgetter(0)
_REVISION: Final = operator.attrgetter("revision")


def _check_within(
    report: Report,
    tree: Tree,
    event: Record,
    marker: Mapping[str, Any],
    decided: dict[str, Any] | None,
    index: _CallIndex,
) -> None:
    where = ("containment", event.stream, event.revision)
    call_id = event.metadata.get(events.CALL_ID_KEY)
    name = str(marker.get("name", ""))
    try:
        policy = tree.policies.get(event.metadata.get(events.POLICY_KEY))
        authority = authority_at(tree, event.stream, event.revision)
    except InvalidInput as error:
        report.fail(*where, f"tool call {call_id}: {error}")
        return
    rule = policy.tools.get(name)
    recorded = json.loads(event.metadata[events.TOOL_RULE_KEY])
    if rule is None:
        report.fail(*where, f"tool call {call_id} ran with no rule in the policy")
        return
    if recorded != rule.to_json():
        report.fail(*where, f"tool call {call_id} carries another rule than its policy's")
        return
    if authority is None:
        report.fail(*where, f"tool call {call_id} ran with no recorded authority")
        return
    inputs = marker.get("ceilings", {})
    modified = decided is not None and decided.get("decision") == "MODIFY"
    if decided is not None and modified:
        inputs = _modified_inputs(decided, rule)
    refusal = policy.check_inputs(authority, name, inputs)
    # A call its rule asks a person about (beyond a ceiling it names only when its own
    # arguments ran: a guardrail's modification beyond a ceiling is blocked live).
    if policy.asks_inputs(authority, name, inputs) and (refusal is None or not modified):
        problem = _unapproved(event, marker, index)
        if problem is not None:
            why = refusal.reason if refusal is not None else "its tool needs a person's approval"
            report.fail(*where, f"tool call {call_id} ran beyond authority: {why}, {problem}")
    elif refusal is not None:
        report.fail(*where, f"tool call {call_id} ran beyond authority: {refusal.reason}")


def _unapproved(call: Record, marker: Mapping[str, Any], index: _CallIndex) -> str | None:
    """Why a call its policy asks a person about is not contained by a person's answer
    (None: it is). The question (``InterruptIssued`` of the call, with exactly its
    arguments) must follow the call on its stream; the call may have an output only after
    the answer to that question (an approval, or a rejection: the SDK's rejection message is
    its output) and none without an answer (it still waits)."""
    call_id = str(call.metadata.get(events.CALL_ID_KEY, ""))
    question = index.question_after(call_id, call.revision)  # the question of this call
    asked = None if question is None else question_of(question)
    if (
        question is None
        or asked is None
        or asked.request_id != call_id
        or asked.payload_digest != marker.get("payload_digest")
    ):
        return "and no person was asked about exactly its arguments"
    answer = index.answer_after(question)
    kind = str(call.metadata.get(events.ITEM_TYPE_KEY, ""))
    if answer is None:
        return (
            "and it ran without a person's answer"
            if index.ran(call_id, call.revision, kind)
            else None
        )
    if index.ran(call_id, call.revision, kind) and not index.ran(call_id, answer.revision, kind):
        return "and it ran before a person's answer"
    return None


def _modified_inputs(decided: Mapping[str, Any], rule: ToolRule) -> Any:
    modified: Any = decided["modified_payload"]
    if redaction.is_withheld(modified):
        return modified.get("ceilings", {})
    return ceiling_inputs(modified["function"]["arguments"], rule.ceilings.values())


def _check_refusal(report: Report, tree: Tree, event: Record, index: _CallIndex) -> None:
    """An ``AuthorityRefused`` is a refusal its policy makes, of what the agent held."""
    where = ("containment", event.stream, event.revision)
    body = event.body or {}
    policy = tree.policies.get(event.metadata.get(events.POLICY_KEY))
    authority = Authority.from_json(body["authority"])
    grant = grant_at(tree, event.stream, event.revision)
    if (
        grant is not None
        and agent_of(grant) == body["agent"]
        and tree.authority(grant) != authority
    ):
        report.fail(*where, "the refusal records another authority than the agent held")
        return
    subject, gate = body["subject"], body["gate"]
    if body["kind"] == "handoff":
        wrong = policy.check_handoff(authority, subject, gate) is None
    elif gate in (Gate.TOOL_VISIBILITY, Gate.MCP_VISIBILITY):
        wrong = policy.visible(authority, subject) is None
    else:
        # A call not stored (the run stopped first) reads as absent arguments: a ceiling
        # that reads one then refuses, so only a refusal no argument explains fails.
        inputs = _refused_inputs(tree, event, body, index) or {}
        # A call its rule would ask a person about is refused when no person could be asked
        # (no guard) or none approved it.
        wrong = policy.check_inputs(authority, subject, inputs) is None and not (
            policy.asks_inputs(authority, subject, inputs)
        )
    if wrong:
        report.fail(*where, f"the policy allows what was refused: {subject} ({gate})")


def _refused_inputs(tree: Tree, event: Record, body: Mapping[str, Any], index: _CallIndex) -> Any:
    """The ceiling inputs of a refused call: from its item on the stream, when it was stored."""
    call_id = body.get("call_id")
    if call_id is not None and not isinstance(call_id, str):
        return None  # no call's aj.call_id (text, or absent) is this
    call = index.call_after(call_id, event.revision)
    if call is None:
        return None  # the run stopped before the call was stored: only its scope is known
    return call_marker(call, tree.markers).get("ceilings", {})
