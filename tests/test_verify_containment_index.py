"""A stream's call index (containment) answers as its plain search does: the refusal in
place of a call, found without the search where no refusal names the call; the newest
decision before a call and whether an output follows it; the first call, question and answer
after a place — each a binary search, however many entries name one call id."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal import events
from agentjournal.audit.verify._containment import _CallIndex
from agentjournal.audit.verify._interrupts import answer_of
from agentjournal.events import Enforcement
from agentjournal.records import Record


def _searched(index: _CallIndex, call_id: str, revision: int, kind: str) -> dict[str, Any] | None:
    """The refusal in place, as the index searched for it without a shortcut."""
    after = [r for r in index.outputs.get((kind, call_id), ()) if r > revision]
    if not after:
        return None
    found = None
    for at, body in index.refusals.get(call_id, ()):
        if revision < at < min(after) and body.get("enforcement") == Enforcement.TOOL_REFUSED:
            found = body
    return found


_ids = st.sampled_from(["a", "b", "c"])
_kinds = st.sampled_from(["function_call", "custom_tool_call"])
_enforcements = st.sampled_from([Enforcement.TOOL_REFUSED, Enforcement.RUN_STOPPED, "other"])


@settings(max_examples=300, deadline=None)
@given(
    outputs=st.dictionaries(
        st.tuples(_kinds, _ids), st.lists(st.integers(0, 12), max_size=4), max_size=4
    ),
    refusals=st.dictionaries(
        _ids,
        st.lists(st.tuples(st.integers(0, 12), _enforcements), max_size=4),
        max_size=3,
    ),
    call_id=_ids,
    revision=st.integers(0, 12),
    kind=_kinds,
)
def test_a_refusal_in_place_is_the_one_the_plain_search_finds(
    outputs: dict[tuple[str, str], list[int]],
    refusals: dict[str, list[tuple[int, str]]],
    call_id: str,
    revision: int,
    kind: str,
) -> None:
    index = _CallIndex([], [], 0)
    index.outputs = {key: sorted(found) for key, found in outputs.items()}
    index.refusals = {
        key: [(at, {"enforcement": how, "at": at}) for at, how in sorted(found)]
        for key, found in refusals.items()
    }
    assert index.refused_in_place(call_id, revision, kind) == _searched(
        index, call_id, revision, kind
    )


def _latest(entries: list[tuple[int, dict[str, Any]]], revision: int) -> dict[str, Any] | None:
    """The newest entry before ``revision``, as a walk over every entry finds it."""
    found = None
    for at, body in entries:
        if at >= revision:
            break
        found = body
    return found


@settings(max_examples=300, deadline=None)
@given(
    outputs=st.lists(st.integers(0, 12), max_size=6),
    decisions=st.lists(st.integers(0, 12), max_size=6),
    revision=st.integers(0, 13),
)
def test_the_newest_decision_and_a_later_output_are_the_ones_a_walk_finds(
    outputs: list[int], decisions: list[int], revision: int
) -> None:
    index = _CallIndex([], [], 0)
    index.outputs = {("function_call", "a"): sorted(outputs)}
    entries = [(at, {"at": at, "n": n}) for n, at in enumerate(sorted(decisions))]
    assert _CallIndex.latest({"a": entries}, "a", revision) == _latest(entries, revision)
    assert _CallIndex.latest({"a": entries}, "b", revision) is None
    assert index.ran("a", revision, "function_call") == any(r > revision for r in outputs)
    assert not index.ran("a", revision, "custom_tool_call")


_named = st.sampled_from(["a", "b", ""])  # an aj.call_id, the empty one among them


def _event(revision: int, shape: tuple[str, str | None, str]) -> Record:
    """An event of the stream: a call, a question, an answer (to the question ``issued``
    names, as its body's extension), or neither; ``call_id`` in its metadata, or none."""
    kind, call_id, issued = shape
    metadata = {} if call_id is None else {events.CALL_ID_KEY: call_id}
    data: dict[str, Any] = {}
    type_ = "UserMessageReceived"
    if kind == "call":
        type_, metadata[events.ITEM_TYPE_KEY] = "AssistantToolCallsGenerated", "function_call"
    elif kind in ("question", "answer"):
        metadata[events.INTERRUPT_KEY] = events.TOOL_APPROVAL
        type_ = events.INTERRUPT_ISSUED if kind == "question" else events.INTERRUPT_RESOLVED
        data = {
            "request_id": call_id or "",
            "outcome": "approved",
            "extensions": {"agentjournal": {"issued": issued}},
        }
    return Record(
        stream="s",
        revision=revision,
        id=f"e{revision}",
        type=type_,
        data=json.dumps(data),
        data_sha256="",
        metadata=metadata,
    )


def _first(stream: list[Record], after: int, holds: Any) -> Record | None:
    return next((e for e in stream[after + 1 :] if holds(e)), None)


@settings(max_examples=300, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(
            st.sampled_from(["call", "question", "answer", "other"]),
            st.one_of(st.none(), _named),
            st.sampled_from(["e0", "e1", "e2", "e3", "e4"]),
        ),
        max_size=12,
    ),
    call_id=st.one_of(st.none(), _named),
    revision=st.integers(-1, 12),
)
def test_the_first_call_question_and_answer_after_a_place_are_the_ones_a_walk_finds(
    shapes: list[tuple[str, str | None, str]], call_id: str | None, revision: int
) -> None:
    stream = [_event(n, shape) for n, shape in enumerate(shapes)]
    index = _CallIndex(stream, [], 0)
    assert index.call_after(call_id, revision) == _first(
        stream,
        revision,
        lambda e: (
            e.metadata.get(events.CALL_ID_KEY) == call_id
            and e.metadata.get(events.ITEM_TYPE_KEY) == "function_call"
        ),
    )
    if call_id is not None:
        assert index.question_after(call_id, revision) == _first(
            stream,
            revision,
            lambda e: (
                e.type == events.INTERRUPT_ISSUED and e.metadata.get(events.CALL_ID_KEY) == call_id
            ),
        )
    for question in stream:
        answered = _first(
            stream,
            question.revision,
            lambda e, q=question: (
                e.type == events.INTERRUPT_RESOLVED
                and (answer := answer_of(e)) is not None
                and answer.issued == q.id
            ),
        )
        assert index.answer_after(question) == answered
