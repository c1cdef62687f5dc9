"""The approvals stage's indexes answer as the plain searches they replace: a stream's
refusals, whether one lies between a question and an output (an authority refusal that
refused the tool, or a guardrail BLOCK, of the question's call, showing its arguments or
payload, or nothing); and its questions, the newest about a call whose call has not run."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal import events
from agentjournal.audit.verify._approvals import _payload_digest, _Pending, _Question, _Refusals
from agentjournal.records import Record


def _searched(stream: list[Record], question: _Question, output: Record) -> bool:
    """Whether a refusal of the call lies between question and output, every event read."""
    call_id = question.asked.request_id
    for event in stream[question.record.revision + 1 : output.revision]:
        body = event.body or {}
        if body.get("call_id") != call_id:
            continue
        if event.type == events.AUTHORITY_REFUSED and body.get("enforcement") == "tool_refused":
            shown = body.get("arguments_digest")
            if not question.asked_digest or shown in (None, question.asked_digest):
                return True
        if (
            event.type == events.GUARDRAIL_DECIDED
            and body.get("decision") == "BLOCK"
            and (
                not question.payload_digest
                or _payload_digest(body) in (None, question.payload_digest)
            )
        ):
            return True
    return False


def _record(revision: int, type_: str, body: dict[str, Any], id_: str = "") -> Record:
    return Record(
        stream="s",
        revision=revision,
        id=id_ or f"00000000-0000-4000-8000-{revision:012d}",
        type=type_,
        data=json.dumps(body),
        data_sha256="",
        metadata={},
    )


_CALLS = st.sampled_from(["a", "b"])


def _question(record: Record, call_id: str, asked: str = "", payload: str = "") -> _Question:
    return _Question(
        record=record,
        asked=events.ApprovalAsked(
            request_id=call_id,
            tool_name="t",
            arguments="{}",
            agent="x",
            authority=None,
            timestamp=datetime.now(UTC),
        ),
        asked_digest=asked,
        payload_digest=payload,
        call=None,
    )


_DIGESTS = st.sampled_from(["", "d1", "d2"])
_SHOWN = st.one_of(st.none(), _DIGESTS, st.just(["not", "text"]), st.just(7))
_EVENT = st.one_of(
    st.builds(
        lambda call, how, shown: (
            events.AUTHORITY_REFUSED,
            {"call_id": call, "enforcement": how, "arguments_digest": shown},
        ),
        st.sampled_from(["a", "b", 3]),
        st.sampled_from(["tool_refused", "run_stopped"]),
        _SHOWN,
    ),
    st.builds(
        lambda call, decision, payload: (
            events.GUARDRAIL_DECIDED,
            {"call_id": call, "decision": decision, "payload": payload},
        ),
        st.sampled_from(["a", "b"]),
        st.sampled_from(["BLOCK", "ALLOW"]),
        st.one_of(
            st.builds(lambda d: {"withheld": d}, _DIGESTS),
            st.just({"arguments": "{}"}),
            st.none(),
        ),
    ),
    st.just(("UserMessageReceived", {"call_id": "a"})),
)


@settings(max_examples=300, deadline=None)
@given(
    kinds=st.lists(_EVENT, min_size=2, max_size=12),
    first=st.integers(0, 3),
    asked_digest=_DIGESTS,
    payload_digest=_DIGESTS,
    payload_withheld=st.booleans(),
)
def test_a_refusal_between_question_and_output_is_the_one_the_plain_search_finds(
    kinds: list[tuple[str, dict[str, Any]]],
    first: int,
    asked_digest: str,
    payload_digest: str,
    payload_withheld: bool,
) -> None:
    stream = [_record(n, type_, body) for n, (type_, body) in enumerate(kinds)]
    first, last = first % len(stream), len(stream) - 1  # the output: the stream's last event
    question = _question(
        stream[first], "a", asked_digest, payload_digest if payload_withheld else ""
    )
    assert _Refusals(stream).between(question, stream[last]) == _searched(
        stream, question, stream[last]
    )


def _asked(questions: dict[str, _Question], call_id: str) -> _Question | None:
    """The newest question about ``call_id`` whose call has no output yet, every one read."""
    every = dict.values(questions)
    found = [q for q in every if q.asked.request_id == call_id and not q.ran]
    return found[-1] if found else None


class _Unwalked(dict[str, _Question]):
    """The stream's questions, which the index may look up but never walk: a walk per output
    makes the check's cost grow with the square of the questions."""

    def values(self) -> Any:
        raise AssertionError("the index walked every question")

    def items(self) -> Any:
        raise AssertionError("the index walked every question")

    def __iter__(self) -> Any:
        raise AssertionError("the index walked every question")


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("ask"), st.sampled_from(["e0", "e1", "e2", "e3"]), _CALLS),
            st.tuples(st.just("output"), st.just(""), _CALLS),
        ),
        max_size=16,
    )
)
def test_the_newest_question_of_a_call_not_run_is_the_one_a_walk_finds(
    steps: list[tuple[str, str, str]],
) -> None:
    questions: dict[str, _Question] = _Unwalked()
    pending = _Pending()
    for revision, (step, event_id, call_id) in enumerate(steps):
        if step == "ask":  # an event id again replaces the question it names, in its place
            question = _question(_record(revision, events.INTERRUPT_ISSUED, {}, event_id), call_id)
            questions[event_id] = question
            pending.add(event_id, question)
        else:
            found = pending.newest(questions, call_id)
            assert found is _asked(questions, call_id)
            if found is not None:
                found.ran = True
