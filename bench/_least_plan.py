"""The least Python planning we could write for the runner's tool turn (a function call and
its output): straight-line code for exactly that shape and nothing else, with no check, no
read-model entry and no commit for the tree, for the floors of ``bench/planning.py`` and
``bench/session.py``. It prints and digests with what ``plan_items`` uses (the codec's
encoders, its extension template, the store's id series), so it differs only in what it
leaves out. Where it is used, its events are checked identical to ``plan_items``'s."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from json.encoder import encode_basestring_ascii
from typing import Any

import orjson

from agentjournal.engine.codec import _ENVELOPE, _EXTENSION_OPEN, _ITEM, _timestamp_json
from agentjournal.store.contract import NewEvent, event_id_series

_sha256, _dumps, _SORT = hashlib.sha256, orjson.dumps, orjson.OPT_SORT_KEYS

# An event as the least planning makes it: id, type, data, metadata (in order).
Planned = tuple[uuid.UUID, str, bytes, dict[str, str]]


def _with_item(envelope: dict[str, Any], item_text: str) -> bytes:
    """An event's data: its canonical fields, then the raw item, as the codec prints them."""
    return (
        _ENVELOPE(envelope)[:-1] + _EXTENSION_OPEN + encode_basestring_ascii(item_text) + "}}}"
    ).encode()


def least(
    stream: str,
    head: int,
    prev: str,
    first_index: int,
    nonce: str,
    stamp: str,
    trace: dict[str, str],
    items: Sequence[Mapping[str, str]],
) -> list[Planned]:
    """The turn's two events (id, type, data, metadata), from the stream's head and last
    hash, the write's first index, nonce, timestamp (printed) and trace ids."""
    nth = event_id_series(stream, nonce)
    next_index = str(first_index + 2)
    call, output = items
    call_id, name = call["call_id"], call["name"]
    arguments = orjson.loads(call["arguments"])
    call_text = _ITEM(call)
    shown_call = {
        "call_id": call_id,
        "tool_name": name,
        "arguments": arguments,
        "tool_kind": "function",
    }
    data = _with_item(
        {
            "tool_calls": [shown_call],
            "message_id": call["id"],
            "message_index": first_index,
            "timestamp": stamp,
        },
        call_text,
    )
    payload = {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": call["arguments"]},
    }
    marker = {
        "withheld": "sha256:" + _sha256(_dumps(call_text)).hexdigest(),
        "call_id": call_id,
        "kind": "function_call",
        "name": name,
        "payload_digest": "sha256:" + _sha256(_dumps(payload, option=_SORT)).hexdigest(),
        "ceilings": {},
    }
    shown_call["arguments"] = {
        "withheld": "sha256:" + _sha256(_dumps(arguments, option=_SORT)).hexdigest()
    }
    view = {
        "tool_calls": [shown_call],
        "message_id": call["id"],
        "message_index": first_index,
        "timestamp": stamp,
        "extensions": {"openai": {"item_json": marker}},
    }
    first_id = nth(0)
    metadata = {
        "aj.index": str(first_index),
        "aj.call_id": call_id,
        "aj.item_type": "function_call",
        "aj.next_index": next_index,
        "$schema_version": "2",
        **trace,
        "aj.redacted": _sha256(_dumps(view, option=_SORT)).hexdigest(),
        "aj.seq": str(head + 1),
        "aj.prev": prev,
        "aj.chain": "2",
    }
    record = [2, stream, head + 1, str(first_id), "AssistantToolCallsGenerated"]
    record += [_sha256(data).hexdigest(), metadata]
    first_hash = _sha256(_dumps(record, option=_SORT)).hexdigest()
    metadata["aj.hash"] = first_hash
    planned = [(first_id, "AssistantToolCallsGenerated", data, metadata)]

    data = _with_item(
        {
            "call_id": output["call_id"],
            "result": output["output"],
            "message_index": first_index + 1,
            "timestamp": stamp,
        },
        _ITEM(output),
    )
    second_id = nth(1)
    metadata = {
        "aj.index": str(first_index + 1),
        "aj.call_id": output["call_id"],
        "aj.item_type": "function_call_output",
        "aj.next_index": next_index,
        "$schema_version": "2",
        **trace,
        "aj.seq": str(head + 2),
        "aj.prev": first_hash,
        "aj.chain": "2",
    }
    record = [2, stream, head + 2, str(second_id), "ToolResultReceived"]
    record += [_sha256(data).hexdigest(), metadata]
    metadata["aj.hash"] = _sha256(_dumps(record, option=_SORT)).hexdigest()
    planned.append((second_id, "ToolResultReceived", data, metadata))
    return planned


def least_of(
    tree: Any,
    stream: str,
    items: Sequence[Mapping[str, str]],
    first_index: int,
    nonce: str,
    now: datetime,
    trace: dict[str, str],
) -> list[Planned]:
    """:func:`least` of the write ``plan_items`` plans on ``tree`` for ``stream`` (the
    facts' stream), from its arguments of the same names."""
    head, prev = tree.heads.get(stream, -1), tree.hashes.get(stream, "")
    return least(stream, head, prev, first_index, nonce, _timestamp_json(now), trace, items)


def same_events(made: Sequence[NewEvent], planned: Sequence[Planned]) -> bool:
    """Whether ``plan_items``'s events are the least planner's: ids, types, data bytes, and
    metadata keys and values in order."""
    return [(e.id, e.type, e.data, list(e.metadata.items())) for e in made] == [
        (i, t, d, list(m.items())) for i, t, d, m in planned
    ]
