"""The integrity check leaves a tool call's marker (computed with its view) for containment
only where containment, computing it from the record, would find the same: where the
call's data parsed as strict JSON. Elsewhere containment computes it, and judges it, as if
no marker were shared.

The bundles are the recorded sessions of ``ledger_sessions.py``; the edits are a key
holder's: each edited stream is chained again and every checkpoint signed again.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable
from typing import Any, Final

import pytest

from agentjournal import Journal
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle
from agentjournal.audit.verify._integrity import Markers, first_problem
from agentjournal.audit.verify._parse import bundle_records
from ledger_sessions import KEY, TRUSTED, rechain, record, sign_heads

BUNDLES = record()
TOOL_CALLS = "AssistantToolCallsGenerated"


def _markers(bundle: dict[str, Any]) -> dict[tuple[str, int], Any]:
    """The markers the integrity check leaves, by stream and revision."""
    streams = bundle_records(bundle).streams
    markers = Markers()
    for name, stream in streams.items():
        assert first_problem(name, stream, 0, len(stream), markers) is None
    return {
        (name, event.revision): markers[id(event)]
        for name, stream in streams.items()
        for event in stream
        if id(event) in markers
    }


def _calls(bundle: dict[str, Any], type_: str) -> list[tuple[str, dict[str, Any]]]:
    """The events of ``type_`` with a view commitment, each with its stream's name."""
    return [
        (stream["name"], event)
        for stream in bundle["streams"]
        for event in stream["events"]
        if event["type"] == type_ and "aj.redacted" in event["metadata"]
    ]


def _edited(bundle: dict[str, Any], type_: str, change: Callable[[str], str]) -> tuple[str, int]:
    """``change`` made to the data of the first call of ``type_`` by a key holder (its stream
    chained again, every checkpoint signed again): where it is."""
    name, event = _calls(bundle, type_)[0]
    event["data"] = change(event["data"])
    rechain(bundle, name)
    sign_heads(bundle, KEY)
    return name, event["revision"]


JUDGED_FROM_RECORD: Final = "the call's aj.call_id or aj.item_type is not the call's own"
"""What containment says of a call whose record's body it cannot read."""


def test_the_calls_of_a_recorded_session_share_their_markers() -> None:
    bundle = BUNDLES["guarded"]
    calls = {(name, event["revision"]) for name, event in _calls(bundle, TOOL_CALLS)}
    assert calls
    assert _markers(bundle).keys() == calls


EDITS: dict[str, Callable[[str], str]] = {
    "NaN beside the calls": lambda data: data.replace("{", '{"temperature":NaN,', 1),
    "a byte order mark before them": lambda data: "\ufeff" + data,
}


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("edit", EDITS)
def test_a_call_whose_data_is_not_strict_json_is_judged_from_its_record(
    workers: int, edit: str
) -> None:
    """The view's general path takes the data (the commitment is right); ``Record.body``
    refuses it, so containment finds no call in the record."""
    bundle = copy.deepcopy(BUNDLES["guarded"])
    name, revision = _edited(bundle, TOOL_CALLS, EDITS[edit])
    assert (name, revision) not in _markers(bundle)
    report = verify_bundle(bundle, TRUSTED, workers=workers)
    assert [(p.check, p.stream, p.revision, p.message) for p in report.problems] == [
        ("containment", name, revision, JUDGED_FROM_RECORD)
    ]


def test_a_call_with_a_float_beside_it_shares_its_marker() -> None:
    """A float takes the view's general path; the record's body parses as the view's data
    did, so the marker is shared (containment would compute the same) and the bundle
    verifies."""
    bundle = copy.deepcopy(BUNDLES["guarded"])
    edit = _edited(bundle, TOOL_CALLS, lambda data: data.replace("{", '{"temperature":0.5,', 1))
    assert edit in _markers(bundle)
    assert verify_bundle(bundle, TRUSTED, workers=1).ok


async def _item_session() -> dict[str, Any]:
    """A signed session holding a computer call (``OpenAIItemRecorded``, with a view)."""
    async with Journal.open("sqlite://:memory:", signing_key=KEY) as journal:
        session = journal.session("items")
        await session.add_items(
            [
                {"role": "user", "content": "click"},
                {
                    "type": "computer_call",
                    "call_id": "c1",
                    "id": "cc1",
                    "status": "completed",
                    "action": {"type": "click", "x": 1, "y": 2, "button": "left"},
                    "pending_safety_checks": [],
                },
            ]
        )
        await session.checkpoint()
        return await export_bundle(journal.store, "items")


ITEM_EDITS: dict[str, tuple[Callable[[str], str], bool]] = {
    "a float beside the item": (lambda data: data.replace("{", '{"temperature":0.5,', 1), True),
    "NaN beside the item": (lambda data: data.replace("{", '{"temperature":NaN,', 1), False),
    "a byte order mark before it": (lambda data: "\ufeff" + data, False),
    "its text read as UTF-16": (lambda data: data.encode("utf-16-le").decode(), False),
}


@pytest.mark.parametrize("edit", ITEM_EDITS)
def test_an_item_call_shares_its_marker_only_as_containment_computes_it(edit: str) -> None:
    """An ``OpenAIItemRecorded`` call whose view the general path made: its marker is shared
    where the record's body parses as the view's data did, and the bundle verifies; else
    containment finds no call in the record."""
    bundle = asyncio.run(_item_session())
    change, shared = ITEM_EDITS[edit]
    name, revision = _edited(bundle, "OpenAIItemRecorded", change)
    assert ((name, revision) in _markers(bundle)) is shared
    report = verify_bundle(bundle, TRUSTED, workers=1)
    if shared:
        assert report.ok, report.text()
    else:
        assert [(p.check, p.revision, p.message) for p in report.problems] == [
            ("containment", revision, JUDGED_FROM_RECORD)
        ]
