"""The twins, branches, authority, guards and usage checks read the tree's ``noted`` events
(gathered in the one pass the tree's indexes make) instead of every event again, and the
approvals check the ids of its ``by_id``: each check still picks its own types out of them,
so what they report is what they reported reading every event, on recorded trees and on
trees whose events were retyped, dropped and moved."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import events
from agentjournal.audit.verify import Report
from agentjournal.audit.verify._approvals import check_approvals
from agentjournal.audit.verify._authority import check_authority
from agentjournal.audit.verify._branches import check_branches
from agentjournal.audit.verify._guards import check_guards
from agentjournal.audit.verify._parse import bundle_records
from agentjournal.audit.verify._tree import NOTED, Tree
from agentjournal.audit.verify._twins import check_twins
from agentjournal.audit.verify._usage import check_responses
from agentjournal.records import Record
from agentjournal.streams import session_stream
from ledger_sessions import POLICY, record

BUNDLES = record()
CHECKS: dict[str, Callable[[Report, Tree], None]] = {
    "twins": check_twins,
    "guards": check_guards,
    "usage": check_responses,
    "branches": check_branches,
    "authority": lambda report, tree: check_authority(report, tree, None),
    "authority anchored": lambda report, tree: check_authority(report, tree, POLICY),
    "approvals": check_approvals,
}
TYPES = sorted(NOTED | {events.SUBJECT_ERASED, "agentjournal.Other"})


def _streams(name: str) -> tuple[str, dict[str, list[Record]]]:
    tree = bundle_records(BUNDLES[name])
    return tree.session_id, {n: list(s) for n, s in tree.streams.items()}


def _outcome(check: Callable[[Report, Tree], None], tree: Tree) -> tuple[Any, ...]:
    report = Report()
    try:
        check(report, tree)
    except Exception as error:  # the same error either way counts as the same answer
        return ("raised", type(error).__name__, str(error), report.text())
    return ("report", report.text(), list(report.lines))


def _assert_as_reading_every_event(session_id: str, streams: dict[str, list[Record]]) -> None:
    root = session_stream(session_id)
    try:
        fast = Tree(session_id, root, streams, {})
    except Exception:
        return  # the tree's indexes refused the events: no check runs, either way
    every = [(name, event) for name, stream in streams.items() for event in stream]
    assert fast.noted == [(n, e) for n, e in every if e.type in NOTED]
    assert fast.by_id == {e.id: e for _, e in every}
    for name, check in CHECKS.items():
        slow = Tree(session_id, root, streams, {})
        slow.noted = every  # every event: each check picks its own types
        assert _outcome(check, fast) == _outcome(check, slow), name


def test_the_checks_report_as_reading_every_event_on_recorded_trees() -> None:
    for name in BUNDLES:
        _assert_as_reading_every_event(*_streams(name))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(BUNDLES)),
    edits=st.lists(
        st.tuples(
            st.sampled_from(("retype", "drop", "move")),
            st.integers(0, 10_000),
            st.integers(0, 10_000),
            st.sampled_from(TYPES),
        ),
        max_size=8,
    ),
)
def test_the_checks_report_as_reading_every_event_on_damaged_trees(
    name: str, edits: list[tuple[str, int, int, str]]
) -> None:
    session_id, streams = _streams(name)
    names = list(streams)
    for action, at, to, type_ in edits:
        stream = streams[names[at % len(names)]]
        if not stream:
            continue
        place = to % len(stream)
        if action == "retype":
            stream[place] = dataclasses.replace(stream[place], type=type_)
        elif action == "drop":
            del stream[place]
        else:  # moved to another stream's end, its record unchanged (its stream field too)
            streams[names[to % len(names)]].append(stream.pop(place))
    _assert_as_reading_every_event(session_id, streams)
