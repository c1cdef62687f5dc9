"""Ledger benchmark: verification throughput beside raw hashlib.sha256 over the same bytes.

Run: ``python bench/ledger.py`` (``--quick`` for a smoke run). A session of
support turns (a user message, a tool call, its result and an answer per
turn, realistic sizes) is written through ``JournalSession`` with a signing
key, exported as a bundle and read back from the bytes ``bundle export`` writes by
``parse_bundle``, as ``agentjournal verify`` reads a bundle file, and then, round by round:

- **raw**: ``hashlib.sha256`` of every event's data and of its chain record
  (``ledger.chain.record_bytes``: the exact bytes the verifier hashes, format 2
  for events written now; precomputed, so only hashing is timed);
- **chain**: the verifier's reading of the bundle into records (their forms checked)
  and its integrity check (places, digests, chain records, chain links, view
  commitments);
- **verify**: the whole offline verification (structure, integrity,
  checkpoints, twins, delegation, containment), of the parsed bundle, in this
  process only (``workers=1``);
- **verify, of the exporter's objects**: the same, of the bundle as the exporter built
  it, not parsed from its file: its text is not vouched for as exactly ``str`` (what
  ``parse_bundle`` gives), so every metadata key and value is looked at for a subclass;
- **verify, 2 workers**: the same with ``workers=2``: a forked child checks the views
  and runs the checks after integrity but the checkpoints' on the second core while this
  process checks the rest of the chains and runs the checkpoints' check (by default
  the verifier forks so only when a core is free);
- **seal**: the write side, ``engine.sealing.seal_event`` (view commitment and
  chain keys) of every event again, from its metadata without the chain keys;
- **floor: least chain**: the least any Python verifier of these events does per
  event whatever else it checks: check its place (revision and ``aj.seq``), build the
  event's chain record from its fields (one ``orjson`` call for format 2), hash it and
  the data (their bytes ready, as for raw), compare both digests and the link to the
  previous hash (the genesis hash first); nothing else;
- **floor: + signatures**: that, plus checking the Ed25519 signature of every
  checkpoint in the bundle (their signed bytes ready) — the least a verifier that
  checks the ledger's signatures pays, one after the other on one thread;
- **floor: least verifier**: that, from the parsed bundle: every event's fields read, none
  missing or unknown, each exactly of its type, its metadata text (found by joining it, which
  fails on anything else: a parsed bundle holds no subclass of ``str``) and all of its text
  Unicode (``least_read``, the data encoded for hashing), and every tool call's view
  recomputed from its data and compared with its commitment (``least_view``: the shape the
  Agents SDK writes, with the checks that make orjson's digests the exact ones). The least
  views are checked equal to the verifier's own (untimed). The signatures are checked over
  their signed bytes, decoded beforehand; the checks after integrity (containment, the tree's
  twins, approvals, the checkpoints' decoding and coverage) are not in it: it is the least of
  what verify does;
- **floor: least integrity + our checks after it**: the least verifier's reading, chains and
  views, then the verifier's own checks after integrity as they are (the checkpoints'
  signatures among them; their report checked to be the verifier's), given the records they
  read and the call markers the verifier's views made (both beforehand, untimed): a lower
  bound of any verifier that keeps those checks as they are, which would also have to build
  the records;
- **floor: least verifier + least checks after it**: the least verifier, its checkpoints
  decoded from their data rather than given, then the least the checks after integrity do
  on this tree (``least_after``): one look at every event (a type and metadata none of those
  checks needs more of), each tool call's ids its item's, each checkpoint's place, fields,
  signature and heads, and the last one covering every event. It is checked to fail where it
  should (untimed). A lower bound of any verifier that keeps every check.

Then a second table: one process's verify in its parts, each timed alone
(``parts_table``: reading, chains, views, the checks after integrity and the whole, ours
beside the least's), and beside the reading, the closest design's in Python
(``closest_read``: a record only for the events the checks after integrity read): where
ours spends more than the least, and what the closest design would take back.

Throughput is events per second; the ratio is ours / raw (higher is better). The CPU
ratio counts the CPU of every process a case ran, the forked child's included (so on two
cores the 2-worker case's wall clock ratio can beat its CPU ratio). Rounds alternate
between the cases, but the 2-worker case's come last: a fork leaves this process a page
fault to take at its first write to each page it shared, which would slow the others.
Goal: verify >= 25% of raw; the floor rows say how much of that any Python verifier
has left for the checks beyond them, and the last, where a Python verifier that keeps every
check could meet it (bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import hashlib
import json
import resource
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature

from _common import run_publishing, table
from agentjournal import Journal, _forked
from agentjournal._calls import CALL_KINDS
from agentjournal._forked import forking_safe
from agentjournal._gc import no_collection
from agentjournal.audit.bundle import BUNDLE_FORMAT, BUNDLE_VERSION, BUNDLE_VERSIONS, has_branches
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Report, _after_integrity, verify_bundle
from agentjournal.audit.verify._integrity import (
    Markers,
    check_chain,
    first_problem,
    first_view_problem,
)
from agentjournal.audit.verify._parallel import check_integrity
from agentjournal.audit.verify._parse import (
    Parsed,
    _checked_id,
    bundle_records,
    parse_bundle,
    read_bundle,
)
from agentjournal.audit.verify._tree import MARKED, NOTED
from agentjournal.engine.sealing import seal_event
from agentjournal.errors import InvalidInput
from agentjournal.events import (
    BRANCH_DELETED,
    BRANCH_STARTED,
    CALL_ID_KEY,
    CLOSES_KEY,
    GUARDED_KEY,
    INTERRUPT_KEY,
    ITEM_TYPE_KEY,
    LINE_END_KEY,
    OPAQUE_KEY,
    POLICY_KEY,
    REDACTED_KEY,
    SUBAGENT_CONTINUED,
    TOOL_RULE_KEY,
    TWIN_KEY,
    VIEWED_KEY,
)
from agentjournal.ledger import SigningKey
from agentjournal.ledger.chain import (
    CHAIN_KEY,
    CHAIN_KEYS,
    GENESIS,
    HASH_KEY,
    PREV_KEY,
    SEQ_KEY,
    record_bytes,
    signed_stream,
)
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import signed_event_id
from agentjournal.ledger.redaction import view_commitment
from agentjournal.records import Record
from agentjournal.shred.fields import KEY_ID_KEY
from agentjournal.streams import KEYS_STREAM, authority_stream, ledger_stream, session_stream

ANSWER = "Your order shipped on Monday and should arrive by Thursday. " * 5


def turn(n: int) -> list[Any]:
    return [
        {"role": "user", "content": f"Where is order {n}? I ordered it last week and paid twice."},
        {
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "lookup_order",
            "arguments": json.dumps({"order_id": str(n), "include_history": True}),
        },
        {
            "type": "function_call_output",
            "call_id": f"call_{n}",
            "output": json.dumps({"order": n, "status": "shipped", "events": ["paid"] * 20}),
        },
        {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{n}",
            "status": "completed",
            "content": [{"type": "output_text", "text": ANSWER, "annotations": []}],
        },
    ]


async def recorded(turns: int, key: SigningKey) -> dict[str, Any]:
    async with Journal.open("sqlite://:memory:", signing_key=key) as journal:
        session = journal.session("bench")
        for n in range(turns):
            await session.add_items(turn(n))
        await session.checkpoint()
        return await export_bundle(journal.store, "bench")


def raw_inputs(bundle: dict[str, Any]) -> list[tuple[bytes, bytes]]:
    """Each event's data bytes and its chain record's bytes, as the verifier hashes them."""
    pairs = []
    for stream in bundle["streams"]:
        for event in stream["events"]:
            record = record_bytes(
                stream["name"],
                event["revision"],
                event["id"],
                event["type"],
                event["data_sha256"],
                event["metadata"],
            )
            pairs.append((event["data"].encode(), record))
    return pairs


def least_chain(inputs: list[tuple[Any, ...]]) -> None:
    """The least a Python verifier does per event: its place (its revision and ``aj.seq``
    the next of its stream), the chain record from the fields, its digest and the data's,
    both compared, and the link to the stream's previous hash (the genesis hash first)."""
    sha256, dumps, sort = hashlib.sha256, orjson.dumps, orjson.OPT_SORT_KEYS
    last: dict[str, tuple[str, int, bool]] = {}
    for name, revision, id_, type_, data, data_sha256, metadata in inputs:
        prev, position, signed = last.get(name) or (GENESIS, 0, signed_stream(name))
        covered = dict(metadata)
        digest = covered.pop(HASH_KEY)
        if revision != position or covered[SEQ_KEY] != str(position):
            raise AssertionError(f"{name}@{revision}: place")
        if covered[PREV_KEY] != prev:
            raise AssertionError(f"{name}@{revision}: link")
        if covered.get(CHAIN_KEY) == "2" and not signed:
            record = dumps([2, name, revision, id_, type_, data_sha256, covered], option=sort)
        elif CHAIN_KEY not in covered:  # format 1, the signed streams': the real builder
            record = record_bytes(name, revision, id_, type_, data_sha256, covered)
        else:
            raise AssertionError(f"{name}@{revision}: chain format")
        if sha256(record).hexdigest() != digest or sha256(data).hexdigest() != data_sha256:
            raise AssertionError(f"{name}@{revision}: digest")
        last[name] = (digest, position + 1, signed)


_EVENT_KEYS = frozenset({"revision", "id", "type", "data", "data_sha256", "metadata", "view"})
_STREAM_KEYS = frozenset({"name", "events"})
_BUNDLE_KEYS = frozenset({"format", "version", "session_id", "exported_at", "redacted", "streams"})


def least_read(bundle: Parsed) -> list[tuple[Any, ...]]:
    """Each event's fields read from the parsed bundle as the least verifier reads them: no
    field missing or unknown, each exactly of its type, the metadata strings to strings (a
    join fails on anything else: ``parse_bundle`` gives no subclass of ``str``), all of it
    Unicode text (ASCII, the fast answer for these events), the data encoded for hashing:
    what ``least_chain`` reads."""
    assert type(bundle) is Parsed, "the least reading is of a bundle parse_bundle read"
    read = []
    for stream in bundle["streams"]:
        name = stream["name"]
        for event in stream["events"]:
            revision, id_, type_, data = (
                event["revision"],
                event["id"],
                event["type"],
                event["data"],
            )
            data_sha256, metadata = event["data_sha256"], event["metadata"]
            if (
                event.keys() != _EVENT_KEYS
                or type(revision) is not int
                or type(id_) is not str
                or type(type_) is not str
                or type(data) is not str
                or type(data_sha256) is not str
                or type(metadata) is not dict
                or event["view"] is not None
            ):
                raise AssertionError(f"{name}@{revision}: form")
            try:
                text = "".join((*metadata, *metadata.values(), id_, type_, data_sha256))
            except TypeError:
                raise AssertionError(f"{name}@{revision}: metadata") from None
            if not text.isascii():
                raise AssertionError(f"{name}@{revision}: text")
            read.append((name, revision, id_, type_, data.encode(), data_sha256, metadata))
    return read


# The event types the checks after integrity read beyond the tree's gathered ones (NOTED):
# a line's start, a continuation and a deletion (the tree's ``started``, ``continued`` and
# ``ends``). A branch's message indexes are read on its lines, which are read whole.
_ALSO_READ_TYPES = frozenset({BRANCH_STARTED, SUBAGENT_CONTINUED, BRANCH_DELETED})


def closest_read(bundle: Parsed, session_id: str) -> list[tuple[Any, ...]]:
    """The reading of the closest design in Python, its part alone: the bundle's and each
    stream's fields checked as the verifier's reading checks them, each event checked as it
    checks an event of a parsed bundle (``_parse._event``: its fields, their exact types,
    its revision's range, its metadata text, Unicode where it is not ASCII, no data withheld
    in an unredacted bundle) into a tuple, as the least reads it; and a record built as the
    verifier builds one (its metadata its own copy, read-only) only for an event the checks
    after integrity read as they are: one of a type the tree gathers or the branches read,
    or with a metadata key the tree gathers, one holding a call containment checks, every
    event of the ledger, the keys, the authority log and the branch lines, and of a stream
    an interrupt names, and each head a checkpoint names (the checkpoints read its hash); on
    a tree with branches, every event (the branches' checks read every line's top stream and
    each fork's prefix). Returns the tuples, each with its record or None."""
    assert type(bundle) is Parsed, "the closest reading is of a bundle parse_bundle read"
    version = bundle["version"] if bundle.keys() == _BUNDLE_KEYS else None
    if (
        bundle["format"] != BUNDLE_FORMAT
        or type(version) is not int
        or version not in BUNDLE_VERSIONS
    ):
        raise AssertionError("bundle: form")
    _checked_id(bundle["session_id"], "session_id")  # raises InvalidInput, as ours
    redacted, raw_streams = bundle["redacted"], bundle["streams"]
    if (
        type(redacted) is not bool
        or type(bundle["exported_at"]) is not str
        or type(raw_streams) is not list
        or not raw_streams
    ):
        raise AssertionError("bundle: form")
    branches = version >= BUNDLE_VERSION
    noted, marked, kinds, also = (
        NOTED,
        frozenset(MARKED),
        CALL_KINDS,
        _ALSO_READ_TYPES,
    )
    whole = {ledger_stream(session_id), KEYS_STREAM, authority_stream(session_id)}
    new, put, proxy = object.__new__, object.__setattr__, MappingProxyType
    read: list[tuple[Any, ...]] = []
    first: dict[str, int] = {}  # each stream's place in ``read``
    asked: list[str] = []  # the streams an interrupt names
    checkpoints: list[int] = []

    def record_of(place: int) -> None:
        name, revision, id_, type_, data, data_sha256, metadata, record, view = read[place]
        if record is not None:
            return
        record = new(Record)
        put(
            record,
            "__dict__",
            {
                "stream": name,
                "revision": revision,
                "id": id_,
                "type": type_,
                "data": data,
                "data_sha256": data_sha256,
                "metadata": proxy(dict(metadata)),
                "view": view,
                "position": None,
                "recorded_at": None,
            },
        )
        read[place] = (name, revision, id_, type_, data, data_sha256, metadata, record, view)

    for stream in raw_streams:
        if type(stream) is not dict or stream.keys() != _STREAM_KEYS:
            raise AssertionError("stream: form")
        name, events = stream["name"], stream["events"]
        if type(name) is not str or name in first or type(events) is not list:
            raise AssertionError(f"stream {name!r}: form")
        if not name.isascii():
            name.encode()  # raises where it is not Unicode text
        lined = has_branches([name])
        if lined and not branches:
            raise AssertionError(f"stream {name}: a branch in a bundle of version {version}")
        first[name] = len(read)
        every = name in whole or lined
        for event in events:
            if type(event) is not dict or event.keys() != _EVENT_KEYS:
                raise AssertionError(f"{name}: form")
            revision, metadata = event["revision"], event["metadata"]
            id_, type_, data_sha256, data, view = (
                event["id"],
                event["type"],
                event["data_sha256"],
                event["data"],
                event["view"],
            )
            if (
                type(revision) is not int
                or not 0 <= revision <= 2**63 - 1
                or type(metadata) is not dict
                or type(id_) is not str
                or type(type_) is not str
                or type(data_sha256) is not str
                or (data is not None and type(data) is not str)
                or (data is None and not redacted)
                or (view is not None and type(view) is not dict)
            ):
                raise AssertionError(f"{name}@{revision}: form")
            try:
                text = "".join((*metadata, *metadata.values(), id_, type_, data_sha256))
            except TypeError:
                raise AssertionError(f"{name}@{revision}: metadata") from None
            if not text.isascii():
                text.encode()  # raises where it is not Unicode text
            place = len(read)
            read.append((name, revision, id_, type_, data, data_sha256, metadata, None, view))
            if type_ == CHECKPOINT:
                checkpoints.append(place)
            if INTERRUPT_KEY in metadata:
                asked.append(name)
            if (
                every
                or type_ in noted
                or type_ in also
                or metadata.get(ITEM_TYPE_KEY) in kinds
                or not marked.isdisjoint(metadata)
            ):
                record_of(place)
    if any(map(has_branches, ([name] for name in first))):
        # The branches' checks read every line's top stream, the main line's among them, and
        # the parent line's prefix up to each fork: on such a tree, every record (as ours).
        for place in range(len(read)):
            record_of(place)
    for name in asked:  # the approvals check reads every event of such a stream
        for place in range(first[name], len(read)):
            if read[place][0] != name:
                break
            record_of(place)
    for place in checkpoints:  # each head it names: the checkpoints read its hash
        for name, head in orjson.loads(read[place][4])["heads"].items():
            at = first[name] + head["revision"]
            if at < len(read) and read[at][0] == name:
                record_of(at)
    return read


def check_closest_read(bundle: Parsed, streams: Mapping[str, list[Record]]) -> None:
    """That :func:`closest_read` builds the verifier's records (``streams``, read from the
    unredacted ``bundle``), field for field, for the events this tree's checks after
    integrity read (its tool calls, its checkpoints and the heads they name) and no other;
    and that it refuses what the verifier's reading refuses and reads what it reads."""
    session_id = bundle["session_id"]
    read = closest_read(bundle, session_id)
    at = {(row[0], row[1]): row[7] for row in read if row[7] is not None}
    for (name, revision), record in at.items():
        ours = streams[name][revision]
        if {**vars(record), "metadata": dict(record.metadata)} != {
            **vars(ours),
            "metadata": dict(ours.metadata),
        }:
            raise AssertionError(f"{name}@{revision}: the closest reading's record is not ours")
    expected = {
        (record.stream, record.revision)
        for stream in streams.values()
        for record in stream
        if record.type in (CHECKPOINT, "AssistantToolCallsGenerated")
    }
    for stream in streams.values():
        for record in stream:
            if record.type == CHECKPOINT:
                heads = orjson.loads(record.data or "")["heads"]
                expected |= {(name, head["revision"]) for name, head in heads.items()}
    if set(at) != expected:
        raise AssertionError(f"the closest reading's records: {len(at)}, not {len(expected)}")
    top, *rest = bundle["streams"]
    head, second, *tail = top["events"]

    def with_first(stream: dict[str, Any]) -> Parsed:
        return Parsed({**bundle, "streams": [stream, *rest]})

    def with_second(**fields: Any) -> Parsed:
        return with_first({**top, "events": [head, {**second, **fields}, *tail]})

    refused = {
        "data withheld": with_second(data=None),
        "a revision out of range": with_second(revision=2**63),
        "a view not an object": with_second(view=5),
        "a stream repeated": Parsed({**bundle, "streams": [top, top, *rest]}),
        "a stream named by a number": with_first({**top, "name": 7}),
        "metadata not Unicode": with_second(metadata={**second["metadata"], "x": "\ud800"}),
        "a version unknown": Parsed({**bundle, "version": 99}),
        "an empty session id": Parsed({**bundle, "session_id": ""}),
        "exported_at a number": Parsed({**bundle, "exported_at": 5}),
        "a branch in a version 2 bundle": Parsed(
            {
                **bundle,
                "version": 2,
                "streams": [*bundle["streams"], {**top, "name": "AgentBranch-x"}],
            }
        ),
    }
    for case, changed in refused.items():
        try:
            ours_refuses = bool(read_bundle(changed)[1])  # a record of the wrong form
        except InvalidInput:
            ours_refuses = True
        try:
            closest_read(changed, session_id)
        except (AssertionError, InvalidInput, UnicodeError):
            pass
        else:
            raise AssertionError(f"the closest reading reads {case}")
        if not ours_refuses:
            raise AssertionError(f"the verifier's reading reads {case}")
    beyond = with_second(metadata={**second["metadata"], "x": "café"})
    assert not read_bundle(beyond)[1], "the verifier refuses metadata beyond ASCII"
    closest_read(beyond, session_id)  # and so must not the closest reading


def _digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()


_SCALARS = frozenset({str, int, bool, type(None)})
_DIGITS = bytes.maketrans(b"123456789E", b"000000000e")


def least_view(data: bytes) -> tuple[str, str]:
    """The view commitment of a tool call in the shape the Agents SDK writes, with exactly
    the checks ``redaction._sdk_tool_call`` makes so that orjson's digests are the exact ones:
    the shape, every value but the arguments text or a whole number, arguments that are not
    text printed with no float, the view's text ASCII (then no key beyond U+FFFF); its
    arguments and its item's text withheld as digests, the item's call marker beside them,
    the view hashed, and its item's call id (what containment compares with the event's
    ``aj.call_id``). Anything else fails it (the bench's calls are all so)."""
    body = orjson.loads(data)
    calls, openai = body["tool_calls"], body["extensions"]["openai"]
    if body["extensions"].keys() != {"openai"} or openai.keys() != {"item_json"}:
        raise AssertionError("not the SDK's shape")
    for key, value in body.items():
        if type(value) not in _SCALARS and key != "tool_calls" and key != "extensions":
            raise AssertionError("not the SDK's shape")
    for call in calls:
        for key, value in call.items():
            if type(value) not in _SCALARS and key != "arguments":
                raise AssertionError("not the SDK's shape")
        arguments = call["arguments"]
        printed = orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)
        if type(arguments) is not str:
            marks = printed.translate(_DIGITS)
            if b"0." in marks or b"0e" in marks:
                raise AssertionError("a float, perhaps")
        call["arguments"] = {"withheld": "sha256:" + hashlib.sha256(printed).hexdigest()}
    text = openai["item_json"]
    item = orjson.loads(text)
    if item["type"] != "function_call":
        raise AssertionError("not a function call")
    for value in item.values():
        if type(value) is not str:
            raise AssertionError("not a function call of text")
    call_id, name = item["call_id"], item.get("name", "")
    payload = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": item.get("arguments") or "{}"},
    }
    openai["item_json"] = {
        "withheld": _digest(text),
        "call_id": call_id,
        "kind": "function_call",
        "name": name,
        "payload_digest": _digest(payload),
        "ceilings": {},
    }
    encoded = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    if not encoded.isascii():
        raise AssertionError("not ASCII: perhaps a key beyond U+FFFF")
    return hashlib.sha256(encoded).hexdigest(), call_id


def least_views(read: list[tuple[Any, ...]], calls: dict[int, str] | None = None) -> int:
    """Check every committed view as the least verifier does; how many there were. With
    ``calls``, each view's call id is kept there by the event's place in ``read``."""
    views = 0
    for place, (name, revision, _, type_, data, _, metadata) in enumerate(read):
        committed = metadata.get(REDACTED_KEY)
        if committed is not None:
            views += 1
            tool_call = type_ == "AssistantToolCallsGenerated" and VIEWED_KEY not in metadata
            if not tool_call or TOOL_RULE_KEY in metadata:
                raise AssertionError(f"{name}@{revision}: not a tool call without a rule")
            digest, call_id = least_view(data)
            if digest != committed:
                raise AssertionError(f"{name}@{revision}: view")
            if calls is not None:
                calls[place] = call_id
    return views


# The event types of the bench's tree: whatever else a tree holds (a handoff's twins, a
# guardrail's decisions, a policy's grants, questions and answers, model responses, key
# rotations, erasures) is beyond the least checks below.
_PLAIN_TYPES = frozenset(
    {
        "SessionStarted",
        "UserMessageReceived",
        "AssistantToolCallsGenerated",
        "ToolResultReceived",
        "AssistantTextGenerated",
    }
)
# The metadata keys the checks after integrity look for on an event of any type (content
# sealed under a subject's key, an opaque item, a closing, a line's end, a twin, a question
# or an answer), and those they look for on a tool call (guarded, bounded, under a policy);
# the others are read only from events of the types above them.
_ANY_KEYS = frozenset({KEY_ID_KEY, OPAQUE_KEY, CLOSES_KEY, LINE_END_KEY, TWIN_KEY, INTERRUPT_KEY})
_CALL_KEYS = frozenset({GUARDED_KEY, TOOL_RULE_KEY, POLICY_KEY})


def least_after(
    read: list[tuple[Any, ...]],
    calls: dict[int, str],
    session_id: str,
    trusted: dict[str, Any],
) -> None:
    """The least the checks after integrity do on the bench's tree, whatever else they
    would do on another: one look at every event (its type one they need nothing more of,
    none of the metadata they look for), each tool call's ``aj.call_id`` and
    ``aj.item_type`` its item's (its view's call id, given), and each checkpoint decoded
    from its data, signed by a trusted key over the bytes its fields give, at its own ledger
    revision after its predecessor, its metadata and event id the signed ones, naming heads
    whose hashes the chains hold, the last covering every event; and no other event with a
    call's item type."""
    session, ledger = session_stream(session_id), ledger_stream(session_id)
    first: dict[str, int] = {}  # each stream's first place in ``read`` (its revision 0)
    checkpoints = []
    plain, any_keys, call_keys, call_kinds = _PLAIN_TYPES, _ANY_KEYS, _CALL_KEYS, CALL_KINDS
    for place, (name, revision, _, type_, _, _, metadata) in enumerate(read):
        if not revision:
            first[name] = place
        if name == ledger:
            if type_ != CHECKPOINT:
                raise AssertionError(
                    f"{name}@{revision}: beyond the least checks: not a checkpoint"
                )
            checkpoints.append(place)
        elif name != session or type_ not in plain:
            raise AssertionError(f"{name}@{revision}: beyond the least checks: its stream or type")
        elif not any_keys.isdisjoint(metadata):
            raise AssertionError(f"{name}@{revision}: beyond the least checks: its metadata")
        elif type_ == "AssistantToolCallsGenerated":
            if not call_keys.isdisjoint(metadata):
                raise AssertionError(
                    f"{name}@{revision}: beyond the least checks: a call's metadata"
                )
            if metadata[CALL_ID_KEY] != calls[place] or metadata[ITEM_TYPE_KEY] != "function_call":
                raise AssertionError(f"{name}@{revision}: the call is not its item's")
        elif metadata.get(ITEM_TYPE_KEY) in call_kinds:  # containment would take it for a call
            raise AssertionError(
                f"{name}@{revision}: a call's item type on an event that holds none"
            )
    bounds = [*sorted(first.values()), len(read)]  # the streams lie whole, one after another
    sizes = {name: bounds[bounds.index(at) + 1] - at for name, at in first.items()}
    heads: Mapping[str, tuple[int, str]] = {}
    for place in checkpoints:
        _, revision, id_, _, data, _, metadata = read[place]
        checkpoint = Checkpoint.decode(orjson.loads(data))
        public = trusted[checkpoint.key_id]
        if (
            checkpoint.session_id != session_id
            or checkpoint.sequence != revision
            or checkpoint.previous != metadata[PREV_KEY]
            or {k: v for k, v in metadata.items() if k not in CHAIN_KEYS} != checkpoint.metadata
            or id_ != str(signed_event_id(ledger, checkpoint.signature))
        ):
            raise AssertionError(f"{ledger}@{revision}: the checkpoint's place or fields")
        public.verify(base64.b64decode(checkpoint.signature), checkpoint.signed_bytes())
        for name, (head, digest) in checkpoint.heads.items():
            if not 0 <= head < sizes[name] or read[first[name] + head][6][HASH_KEY] != digest:
                raise AssertionError(f"{name}@{head}: not the hash the checkpoint signed")
        heads = checkpoint.heads
    if heads.get(session, (-1, ""))[0] != sizes[session] - 1:
        raise AssertionError(f"{session}: events after the last checkpoint")


def check_least_after(least: list[tuple[Any, ...]], sid: str, key: SigningKey) -> None:
    """That :func:`least_after` passes on the bench's tree (``least``, as read) and fails
    where it should: a call's id or item type not its item's; a key it looks for, on any
    event or on a call; a call's item type on an output; an event of another type, on the
    session or the ledger, or on another stream; a checkpoint's event id, predecessor,
    metadata, session or sequence not the signed ones; its signature under another key; a
    head whose hash is not the one signed, or past its stream's end; a tail no checkpoint
    covers (only the first kept)."""
    trusted = {key.key_id: key.public_key}
    calls: dict[int, str] = {}
    least_views(least, calls)
    least_after(least, calls, sid, trusted)
    place = next(iter(calls))  # a tool call: the event before it its user's message, after it
    session, ledger = session_stream(sid), ledger_stream(sid)  # its output
    last = max(at for at, fields in enumerate(least) if fields[0] == session)  # a head signed
    signed = min(at for at, fields in enumerate(least) if fields[0] == ledger)  # a checkpoint

    def changed(
        at: int,
        *,
        stream: str = "",
        type_: str = "",
        id_: str = "",
        data: bytes = b"",
        meta: dict[str, str] | None = None,
    ) -> list[tuple[Any, ...]]:
        name, revision, was_id, was_type, was_data, digest, metadata = least[at]
        event = (
            stream or name,
            revision,
            id_ or was_id,
            type_ or was_type,
            data or was_data,
            digest,
            metadata | (meta or {}),
        )
        return [*least[:at], event, *least[at + 1 :]]

    def checkpoint_with(**fields: Any) -> list[tuple[Any, ...]]:  # its data changed, unsigned
        return changed(signed, data=orjson.dumps(orjson.loads(least[signed][4]) | fields))

    def resigned_beyond() -> list[tuple[Any, ...]]:
        """The first checkpoint signed again, naming as the session's head the revision just
        past its end, with the hash the event there in ``least`` holds (the ledger's first)."""
        old = Checkpoint.decode(orjson.loads(least[signed][4]))
        heads = {session: (last + 1, least[last + 1][6][HASH_KEY])}
        unsigned = dataclasses.replace(old, heads=heads, signature="")
        signature = base64.b64encode(key.private.sign(unsigned.signed_bytes())).decode()
        new = dataclasses.replace(unsigned, signature=signature)
        return changed(signed, id_=str(signed_event_id(ledger, signature)), data=new.encode())

    other = {key.key_id: SigningKey.generate().public_key}
    for read, given, keys, why in (
        (least, {**calls, place: "call_other"}, trusted, "the call is not its item's"),
        (changed(place, meta={ITEM_TYPE_KEY: "custom_tool_call"}), calls, trusted, "its item's"),
        (changed(place - 1, meta={KEY_ID_KEY: "k"}), calls, trusted, "least checks: its metadata"),
        (
            changed(place, meta={GUARDED_KEY: "1"}),
            calls,
            trusted,
            "least checks: a call's metadata",
        ),
        (changed(place + 1, meta={ITEM_TYPE_KEY: "function_call"}), calls, trusted, "holds none"),
        (changed(place - 1, type_="SubagentStarted"), calls, trusted, "its stream or type"),
        (changed(place - 1, stream=f"{session}x"), calls, trusted, "its stream or type"),
        (changed(signed, type_="SessionStarted"), calls, trusted, "not a checkpoint"),
        (changed(signed, id_=str(uuid.uuid4())), calls, trusted, "place or fields"),
        (changed(signed, meta={PREV_KEY: "f" * 64}), calls, trusted, "place or fields"),
        (changed(signed, meta={"extra": "1"}), calls, trusted, "place or fields"),
        (checkpoint_with(session_id=f"{sid}x"), calls, trusted, "place or fields"),
        (checkpoint_with(sequence=1), calls, trusted, "place or fields"),
        (least, calls, other, "InvalidSignature"),
        (changed(last, meta={HASH_KEY: "0" * 64}), calls, trusted, "not the hash the checkpoint"),
        (resigned_beyond(), calls, trusted, "not the hash the checkpoint"),
        (
            [r for r in least if r[0] != ledger or r[1] == 0],
            calls,
            trusted,
            "events after the last checkpoint",
        ),
    ):
        try:
            least_after(read, given, sid, keys)
        except (AssertionError, InvalidSignature) as error:
            if why not in f"{type(error).__name__}: {error}":
                raise
        else:
            raise AssertionError(f"the least checks passed: {why}")


def signature_inputs(bundle: dict[str, Any], key: SigningKey) -> list[tuple[bytes, bytes]]:
    """Every checkpoint's signature and the bytes it covers, decoded beforehand."""
    found = []
    for stream in bundle["streams"]:
        for event in stream["events"]:
            if event["type"] == "agentjournal.Checkpoint":
                checkpoint = Checkpoint.decode(json.loads(event["data"]))
                found.append((base64.b64decode(checkpoint.signature), checkpoint.signed_bytes()))
    assert found, "no checkpoint in the bundle"
    for signature, signed in found:
        key.public_key.verify(signature, signed)  # raises InvalidSignature if wrong
    return found


def seal_inputs(bundle: dict[str, Any]) -> list[tuple[Any, ...]]:
    """What ``seal_event`` is given for each event: its place, id, type, data, its metadata
    without the chain keys (copied again per round: sealing adds them) and the previous hash."""
    found = []
    for stream in bundle["streams"]:
        for event in stream["events"]:
            metadata = {k: v for k, v in event["metadata"].items() if k not in CHAIN_KEYS}
            found.append(
                (
                    stream["name"],
                    event["revision"],
                    uuid.UUID(event["id"]),
                    event["type"],
                    event["data"].encode(),
                    metadata,
                    event["metadata"][PREV_KEY],
                    event["metadata"][HASH_KEY],
                )
            )
    return found


def parts_table(
    bundle: Parsed, trusted: dict[str, Any], options: dict[str, Any], rounds: int
) -> str:
    """One process's verify in its parts, each timed alone (the collector off, as verify
    runs it), ours beside the least's, in alternating rounds: reading the bundle's events
    (ours into records, the least's into tuples, each event's data encoded for hashing there,
    which ours does in the chains; built and freed), the chains (every check
    of the integrity stage but the views), the views (ours with each event's data hashed
    again, as the one-process path does not), the checks after integrity (ours given the
    call markers our views made; the least's given the call ids its views found), and the
    whole of each; and beside the reading, the closest design's (:func:`closest_read`)."""
    session_id = bundle["session_id"]
    tree, unformed = read_bundle(bundle)
    assert not unformed, unformed
    streams = {name: list(events) for name, events in tree.streams.items()}
    markers: Markers = {}
    for stream in streams.values():
        assert first_view_problem(stream, 0, len(stream), markers) is None
    least = least_read(bundle)
    calls: dict[int, str] = {}
    least_views(least, calls)
    check_closest_read(bundle, streams)
    built = sum(row[7] is not None for row in closest_read(bundle, session_id))

    def our_chains() -> None:
        for name, stream in streams.items():
            assert first_problem(name, stream, 0, len(stream), views=False) is None

    def our_views() -> None:
        made: Markers = {}
        for stream in streams.values():
            assert first_view_problem(stream, 0, len(stream), made) is None

    def our_after() -> None:
        reports: dict[str, Report | None] = {}
        _after_integrity(
            Report(), session_id, streams, markers, trusted, **options, reports=reports
        )
        assert all(made is not None and made.ok for made in reports.values()), reports

    def least_whole() -> None:
        read = least_read(bundle)
        least_chain(read)
        found: dict[int, str] = {}
        least_views(read, found)
        least_after(read, found, session_id, trusted)

    def our_whole() -> None:
        assert verify_bundle(bundle, trusted, workers=1).ok

    def closest() -> None:
        closest_read(bundle, session_id)

    sides: dict[str, Callable[[], object]] = {
        "reading, ours": lambda: read_bundle(bundle),
        "reading, least": lambda: least_read(bundle),
        "reading, closest": closest,
        "chains, ours": our_chains,
        "chains, least": lambda: least_chain(least),
        "views, ours": our_views,
        "views, least": lambda: least_views(least),
        "after integrity, ours": our_after,
        "after integrity, least": lambda: least_after(least, calls, session_id, trusted),
        "whole, ours": our_whole,
        "whole, least": least_whole,
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    with no_collection():
        for _ in range(rounds):
            for name, side in sides.items():
                started = time.perf_counter()
                side()  # what it returns is freed before the clock is read
                times[name].append(time.perf_counter() - started)
    ms = {name: statistics.median(values) * 1000 for name, values in times.items()}
    rows = []
    for part in ("reading", "chains", "views", "after integrity", "whole"):
        ours, floor = ms[f"{part}, ours"], ms[f"{part}, least"]
        closest_ms = f"{ms['reading, closest']:.1f}" if part == "reading" else ""
        rows.append([part, f"{ours:.1f}", f"{floor:.1f}", f"{floor / ours:.2f}", closest_ms])
    events = sum(len(stream) for stream in streams.values())
    return (
        f"one process's verify in parts, each timed alone, ms (medians of {rounds}); the "
        f"closest design's reading builds records for {built:,} of {events:,} events\n"
        + table(["part", "ours", "least", "least / ours", "closest design"], rows)
    )


def _reaped() -> None:
    """Wait (untimed) until every child a verification forked has ended and been reaped."""
    while _forked._ended:
        time.sleep(0.001)
        _forked.reap()


def _cpu() -> float:
    """CPU seconds of this process and of its children it waited for (a forked verifier)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    turns, rounds = (50, 3) if args.quick else (2000, 9)
    key = SigningKey.generate()
    exported = asyncio.run(recorded(turns, key))
    # As `agentjournal verify` reads the file `bundle export` writes.
    bundle = parse_bundle(json.dumps(exported, ensure_ascii=False).encode())
    trusted = {key.key_id: key.public_key}
    pairs = raw_inputs(bundle)
    sealing = seal_inputs(bundle)
    least = least_read(bundle)  # for the least chain's rows: its fields ready, as for raw
    signatures = signature_inputs(bundle, key)
    count = len(pairs)
    size = sum(len(d) + len(r) for d, r in pairs) / count

    def raw() -> None:
        for data, record in pairs:
            hashlib.sha256(data).hexdigest()
            hashlib.sha256(record).hexdigest()

    def chain() -> None:
        tree = bundle_records(bundle)
        report = Report()
        for name, events in tree.streams.items():
            check_chain(report, name, events)
        assert report.ok

    def verify() -> None:
        report = verify_bundle(bundle, trusted, workers=1)
        assert report.ok, report.text()

    def verify_exported() -> None:
        report = verify_bundle(exported, trusted, workers=1)
        assert report.ok, report.text()

    forked = []

    def verify_two() -> None:
        forked.append(forking_safe())
        report = verify_bundle(bundle, trusted, workers=2)
        assert report.ok, report.text()

    def seal() -> None:
        for stream, revision, id_, type_, data, metadata, prev, _ in sealing:
            seal_event(stream, revision, id_, type_, data, dict(metadata), prev)

    def check_signatures() -> None:
        public = key.public_key
        for signature, signed in signatures:
            public.verify(signature, signed)

    def least_and_signatures() -> None:
        least_chain(least)
        check_signatures()

    views = least_views(least)
    for stream in bundle["streams"]:  # the least views are the verifier's own (untimed)
        for event in stream["events"]:
            if REDACTED_KEY in event["metadata"]:
                data = event["data"].encode()
                made = view_commitment(event["type"], data, event["metadata"])
                if made is None or least_view(data)[0] != made[0]:
                    raise AssertionError(f"{stream['name']}@{event['revision']}: least view")
    assert views, "no view in the bundle"

    def least_verifier() -> None:
        read = least_read(bundle)
        least_chain(read)
        least_views(read)
        check_signatures()

    check_least_after(least, bundle["session_id"], key)

    def least_whole() -> None:
        with no_collection():  # as verify runs
            read = least_read(bundle)
            least_chain(read)
            calls: dict[int, str] = {}
            least_views(read, calls)
            least_after(read, calls, bundle["session_id"], trusted)

    # Our checks after integrity as they are (the checkpoints' signatures among them), after
    # the least's integrity stage, given the records they read and the call markers our views
    # made (both made here, untimed): a lower bound of any verifier that keeps those checks.
    tree = bundle_records(bundle)
    streams = {name: list(events) for name, events in tree.streams.items()}
    options: dict[str, Any] = {"allow_uncovered": False, "not_before": None, "policy": None}
    markers: Markers = {}
    checked = Report()
    check_integrity(checked, streams, markers, workers=1)
    assert not checked.problems, checked.text()
    assert markers, "no tool call's marker"
    whole = verify_bundle(bundle, trusted, workers=1).lines  # what the round's checks must say
    expected = whole[next(i for i, line in enumerate(whole) if line.startswith("integrity:")) + 1 :]
    assert expected, "no check after integrity reported"

    def least_then_ours() -> None:
        with no_collection():  # as verify runs, the least's part too: the lower the bound
            read = least_read(bundle)
            least_chain(read)
            least_views(read)
            reports: dict[str, Report | None] = {}
            _after_integrity(
                Report(), tree.session_id, streams, markers, trusted, **options, reports=reports
            )
        # every check ran, passed, and said what the verifier says, each in its place
        assert all(made is not None and made.ok for made in reports.values()), reports
        lines = [line for made in reports.values() if made is not None for line in made.lines]
        assert lines == expected, lines

    stream, revision, id_, type_, data, metadata, prev, stored = sealing[-1]
    assert seal_event(stream, revision, id_, type_, data, dict(metadata), prev) == stored
    sides = {
        "raw sha256": raw,
        "chain check": chain,
        "full verify": verify,
        "full verify, of the exporter's objects": verify_exported,
        "full verify, 2 workers": verify_two,
        "seal": seal,
        "floor: least chain": lambda: least_chain(least),
        f"floor: + {len(signatures)} signatures": least_and_signatures,
        f"floor: least verifier, + read, + {views} views": least_verifier,
        "floor: least integrity + our checks after it": least_then_ours,
        "floor: least verifier + least checks after it": least_whole,
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    # The forking case's rounds come after all the others: after a fork, this process takes
    # a page fault at its first write to each page it shared with the child, even once the
    # child has ended, which would slow whatever ran next (raw hashing by a third).
    forking = {"full verify, 2 workers"}
    for cases in ([n for n in sides if n not in forking], [n for n in sides if n in forking]):
        for _ in range(rounds):
            for name in cases:
                started, cpu_started = time.perf_counter(), _cpu()
                sides[name]()
                times[name].append(time.perf_counter() - started)
                _reaped()  # the child's CPU counts once it is reaped: in its own round
                cpu[name].append(_cpu() - cpu_started)
    base = count / statistics.median(times["raw sha256"])
    base_cpu = count / statistics.median(cpu["raw sha256"])
    rows = []
    for name, values in times.items():
        rate = count / statistics.median(values)
        rate_cpu = count / statistics.median(cpu[name])
        rows.append([name, f"{rate:,.0f}", f"{rate / base:.3f}", f"{rate_cpu / base_cpu:.3f}"])
    print(f"{count} events ({size:.0f} bytes hashed per event on average), {rounds} rounds")
    if not all(forked):
        print(
            f"(2 workers: {sum(forked)} of {len(forked)} rounds forked; the others ran in one "
            "process: a thread was running, or this is not Linux)"
        )
    print(table(["case", "events/s", "ratio to raw", "cpu ratio"], rows))
    print()
    print(parts_table(bundle, trusted, options, 3 if args.quick else 21))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("ledger", main, sys.argv[1:]))
