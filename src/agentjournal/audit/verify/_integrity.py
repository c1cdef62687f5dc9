"""The integrity stage: each stream's revisions, data digests, hash chain and redacted
views (:func:`check_chain`), leaving the call markers it computed for containment."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agentjournal import events
from agentjournal._text import cut
from agentjournal.audit.verify._report import Report
from agentjournal.ledger import redaction
from agentjournal.ledger.chain import (
    CHAIN_FORMAT,
    CHAIN_KEY,
    GENESIS,
    HASH_KEY,
    PREV_KEY,
    SEQ_KEY,
    chain_format,
    chain_hash,
    signed_stream,
)
from agentjournal.records import Record

# The call markers the integrity check computed with each tool call's view, by record
# (``id``: the records outlive the verification), for containment to use instead of
# computing each again (``_call_marker`` in :mod:`._containment`).
Markers = dict[int, dict[str, Any]]


def check_chain(
    report: Report, name: str, stream: Sequence[Record], markers: Markers | None = None
) -> None:
    signed = signed_stream(name)
    prev = GENESIS
    for position, event in enumerate(stream):
        if event.revision != position:
            report.fail(
                "integrity",
                name,
                event.revision,
                f"expected revision {position}: an event was removed, added or moved",
            )
            return
        problem = _data_problem(event)
        if problem is not None:
            report.fail("integrity", name, position, problem)
            return
        metadata = event.metadata
        stored = metadata.get(HASH_KEY)
        if stored is None:
            report.fail("integrity", name, position, "the event is not chained (no aj.hash)")
            return
        if metadata.get(SEQ_KEY) != str(position):
            report.fail("integrity", name, position, "aj.seq does not match the revision")
            return
        if metadata.get(PREV_KEY) != prev:
            report.fail("integrity", name, position, "aj.prev is not the previous event's hash")
            return
        found = chain_format(metadata)
        if found == 2 and signed:
            report.fail(
                "integrity",
                name,
                position,
                "a checkpoint or key rotation is sealed in chain format 1 only (aj.chain)",
            )
            return
        if found is None:
            report.fail(
                "integrity",
                name,
                position,
                f"the event names chain format {cut(repr(metadata[CHAIN_KEY]), 40)}; "
                f"this version knows 1 and {CHAIN_FORMAT}",
            )
            return
        expected = chain_hash(name, position, event.id, event.type, event.data_sha256, metadata)
        if expected != stored:
            report.fail("integrity", name, position, "the hash does not match the event")
            return
        problem = _view_problem(event, markers)
        if problem is not None:
            report.fail("integrity", name, position, problem)
            return
        prev = stored


def _data_problem(event: Record) -> str | None:
    """Why the event's data (or its absence) is not what it may be, if it is not."""
    if event.data is None:
        if not redaction.withholds(event.type, event.metadata):
            return f"the data of {event.type} is withheld; it holds no conversation"
        if events.REDACTED_KEY in event.metadata and event.view is None:
            return f"the data of {event.type} is withheld without its committed view"
        return None
    if event.view is not None:
        return "an event with both its data and a view"
    try:
        actual = hashlib.sha256(event.data.encode()).hexdigest()
    except UnicodeEncodeError:
        return "the data is not valid UTF-8 text"
    return None if actual == event.data_sha256 else "the data does not match its digest"


def _view_problem(event: Record, markers: Markers | None = None) -> str | None:
    """Why the event's view does not match its commitment ``aj.redacted``, if it does not.

    A view computed from the data leaves its call marker in ``markers`` where it is the
    one containment would compute (see :func:`_shared_marker`)."""
    committed = event.metadata.get(events.REDACTED_KEY)
    if committed is None:
        return None if event.view is None else "a view without a commitment (aj.redacted)"
    if event.view is not None:
        shown: Any = event.view
    else:
        assert event.data is not None
        try:
            shown = redaction.view(event.type, event.data.encode(), event.metadata)
        except ValueError as error:
            return str(error)
        if shown is None:
            return f"{event.type} carries a view commitment but has no view"
        if markers is not None:
            marker = _shared_marker(event, shown)
            if marker is not None:
                markers[id(event)] = marker
    if redaction.view_digest(shown) != committed:
        return "the redacted view does not match its commitment (aj.redacted)"
    return None


def _shared_marker(event: Record, shown: Mapping[str, Any]) -> dict[str, Any] | None:
    """The call marker in a view computed from the event's data, when it is what
    containment's ``_call_marker`` computes from the same data (the fields containment
    reads: call id, kind, name, payload digest, ceilings); None where the two could differ,
    so that containment computes it, and fails it, exactly as without a shared marker: an
    item that looks withheld (``redaction.shown_call``), data ``Record.body`` refuses
    (``NaN``, ``Infinity``), a rule that is not JSON."""
    marker = redaction.shown_call(shown)
    if marker is None or event.data is None or "NaN" in event.data or "Infinity" in event.data:
        return None
    rule = event.metadata.get(events.TOOL_RULE_KEY)
    return marker if rule is None or _json_text(rule) else None


def _json_text(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
