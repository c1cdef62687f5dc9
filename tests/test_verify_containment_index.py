"""A stream's call index (containment) answers as its plain search does: the refusal in
place of a call, found without the search where no refusal names the call; the newest
decision before a call and whether an output follows it, each a binary search, however many
entries name one call id."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal.audit.verify._containment import _CallIndex
from agentjournal.events import Enforcement


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
