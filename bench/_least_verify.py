"""The least a Python verifier of the ledger benchmark's tree does, part by part, and the
closest design's reading (``bench/ledger.py`` times them beside the verifier): each part
checked to give what the verifier gives, and to fail where it fails."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature

from agentjournal._calls import CALL_KINDS
from agentjournal.audit.bundle import BUNDLE_FORMAT, BUNDLE_VERSION, BUNDLE_VERSIONS, has_branches
from agentjournal.audit.verify._parse import (
    Parsed,
    _checked_id,
    read_bundle,
)
from agentjournal.audit.verify._tree import MARKED, NOTED
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
from agentjournal.records import Record
from agentjournal.shred.fields import KEY_ID_KEY
from agentjournal.streams import KEYS_STREAM, authority_stream, ledger_stream, session_stream


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


def least_verify(bundle: Parsed, trusted: dict[str, Any]) -> None:
    """The least verifier of the bench's tree, whole: its reading, chains and views, then the
    least checks after integrity (each raises where the tree is not as it should be)."""
    read = least_read(bundle)
    least_chain(read)
    calls: dict[int, str] = {}
    least_views(read, calls)
    least_after(read, calls, bundle["session_id"], trusted)
