"""The integrity stage: each stream's revisions, data digests, hash chain and redacted
views (:func:`check_chain`), leaving the call markers it computed for containment; any
range of a stream on its own (:func:`first_problem`), and its views apart
(:func:`first_view_problem`), for :mod:`._parallel`."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from types import MappingProxyType
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
    v2_record,
)
from agentjournal.records import Record

# The call markers the integrity check computed with each tool call's view, by record
# (``id``: the records outlive the verification), for containment to use instead of
# computing each again (``_call_marker`` in :mod:`._containment`).
Markers = dict[int, dict[str, Any]]


def check_chain(
    report: Report, name: str, stream: Sequence[Record], markers: Markers | None = None
) -> None:
    """Check one stream's chain, reporting its first bad event (nothing after it counts)."""
    found = first_problem(name, stream, 0, len(stream), markers)
    if found is not None:
        report.fail("integrity", name, found[1], found[2])


# The first bad event of a range: its position, the revision to report (the event's own
# where it is out of place) and what is wrong.
Problem = tuple[int, int, str]


def first_problem(
    name: str,
    stream: Sequence[Record],
    start: int,
    stop: int,
    markers: Markers | None = None,
    *,
    views: bool = True,
) -> Problem | None:
    """The first bad event among ``stream[start:stop]``, or None; without ``views``, every
    check but the views' (:func:`first_view_problem` has those).

    Each event is checked on its own against its predecessor's stored hash, so a stream's
    first problem is the first of its ranges' (a range after a bad event may report a
    problem of its own: the earlier range's is the one that counts); what one event's check
    finds does not depend on the checks of the events before it. An event's view is its
    last check: where both find a problem at one event, the other checks' is the one.
    """
    signed = signed_stream(name)
    prev = GENESIS if start == 0 else stream[start - 1].metadata.get(HASH_KEY)
    sha256 = hashlib.sha256
    for position in range(start, stop):
        event = stream[position]
        if event.revision != position:
            return (
                position,
                event.revision,
                f"expected revision {position}: an event was removed, added or moved",
            )
        data = event.data
        if data is None or event.view is not None or not data.isascii():
            problem = _data_problem(event)
            if problem is not None:
                return position, position, problem
        elif sha256(data.encode()).hexdigest() != event.data_sha256:  # _data_problem's own
            return position, position, "the data does not match its digest"
        metadata = event.metadata
        # The chain keys read from the metadata's own copy (a proxy's ``get`` is a method
        # call through the proxy), which is also the record's metadata without aj.hash.
        covered = metadata.copy() if type(metadata) is MappingProxyType else dict(metadata)
        stored = covered.pop(HASH_KEY, None)
        if stored is None:
            return position, position, "the event is not chained (no aj.hash)"
        if covered.get(SEQ_KEY) != str(position):
            return position, position, "aj.seq does not match the revision"
        if covered.get(PREV_KEY) != prev:
            return position, position, "aj.prev is not the previous event's hash"
        if covered.get(CHAIN_KEY) == CHAIN_FORMAT and not signed:
            # Format 2 (nearly every event): the record ``chain.record_bytes`` builds, in one
            # orjson call; what orjson refuses takes the reference path below.
            record = v2_record(name, position, event.id, event.type, event.data_sha256, covered)
            if record is None:
                expected = _reference_hash(name, position, event)
            else:
                expected = sha256(record).hexdigest()
        else:
            found = chain_format(metadata)
            if found == 2 and signed:
                return (
                    position,
                    position,
                    "a checkpoint or key rotation is sealed in chain format 1 only (aj.chain)",
                )
            if found is None:
                return (
                    position,
                    position,
                    f"the event names chain format {cut(repr(metadata[CHAIN_KEY]), 40)}; "
                    f"this version knows 1 and {CHAIN_FORMAT}",
                )
            expected = _reference_hash(name, position, event)
        if expected != stored:
            return position, position, "the hash does not match the event"
        if views and (events.REDACTED_KEY in covered or event.view is not None):
            problem = _view_problem(event, markers)
            if problem is not None:
                return position, position, problem
        prev = stored
    return None


def first_view_problem(
    stream: Sequence[Record], start: int, stop: int, markers: Markers | None = None
) -> Problem | None:
    """The first event among ``stream[start:stop]`` whose view does not match its
    commitment, of those in place with their data as it may be (the others fail the checks
    before the view's, which :func:`first_problem` without ``views`` makes), or None."""
    for position in range(start, stop):
        event = stream[position]
        if events.REDACTED_KEY not in event.metadata and event.view is None:
            continue
        if event.revision != position or _data_problem(event) is not None:
            continue
        problem = _view_problem(event, markers)
        if problem is not None:
            return position, position, problem
    return None


def _reference_hash(name: str, position: int, event: Record) -> str:
    """The event's hash as :func:`agentjournal.ledger.chain.chain_hash` computes it."""
    return chain_hash(name, position, event.id, event.type, event.data_sha256, event.metadata)


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
    one containment would compute (see :func:`_shares_marker`)."""
    committed = event.metadata.get(events.REDACTED_KEY)
    if committed is None:
        return None if event.view is None else "a view without a commitment (aj.redacted)"
    if event.view is not None:
        digest = redaction.view_digest(event.view)
    else:
        assert event.data is not None
        data = event.data.encode()
        made = redaction.strict_view_commitment(event.type, data, event.metadata)
        strict = made is not None
        if made is None:
            try:
                made = redaction.exact_view_commitment(event.type, data, event.metadata)
            except ValueError as error:
                return str(error)
            if made is None:
                return f"{event.type} carries a view commitment but has no view"
        digest, marker = made
        if markers is not None and marker is not None and _shares_marker(event, data, strict):
            markers[id(event)] = marker
    if digest != committed:
        return "the redacted view does not match its commitment (aj.redacted)"
    return None


def _shares_marker(event: Record, data: bytes, strict: bool) -> bool:
    """Whether the call marker of the event's view (``strict``: made by
    ``redaction.strict_view_commitment``; ``data``: the event's data as the view read it) is
    the one containment's ``call_marker`` computes from the record (the fields it reads:
    call id, kind, name, payload digest, ceilings), so that it is shared. Only where
    ``Record.body``, which containment reads, parses the data as the view did, and the rule
    is none or JSON; elsewhere containment computes the marker, and fails it, exactly as
    without a shared one. An item that looks withheld gives no marker.

    The strict path parsed the data as strict JSON, as ``Record.body`` does. Where the
    general path made the view (``json`` with a float, an integer too long for orjson),
    ``Record.body`` parses what it parsed but for a text read as another encoding than
    UTF-8 (a byte order mark, zero bytes at the start) and ``NaN`` and ``Infinity``, which it
    refuses (looked for as text: one in a string only costs the sharing)."""
    if not strict and (
        json.detect_encoding(data) != "utf-8" or b"NaN" in data or b"Infinity" in data
    ):
        return False
    rule = event.metadata.get(events.TOOL_RULE_KEY)
    return rule is None or _json_text(rule)


def _json_text(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
