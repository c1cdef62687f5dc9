"""The least Python that plans the runner's tool turn (a function call and its output):
written out straight for exactly that shape and nothing else, for the floors of
``bench/planning.py`` and ``bench/session.py``. Its events are checked identical to
``plan_items``'s where it is used."""

from __future__ import annotations

import hashlib
import json
import uuid

import orjson

from agentjournal.store._events import _NAMESPACE_BYTES, _V5_CLEAR, _V5_SET

_sha256, _sha1, _dumps, _SORT = hashlib.sha256, hashlib.sha1, orjson.dumps, orjson.OPT_SORT_KEYS
_envelope = json.JSONEncoder(separators=(", ", ": ")).encode  # json.dumps's defaults
_item = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode  # an item's exact text


def _event_id(prefix: bytes, n: int) -> uuid.UUID:
    digest = _sha1(prefix + str(n).encode(), usedforsecurity=False).digest()
    return uuid.UUID(int=(int.from_bytes(digest[:16], "big") & _V5_CLEAR) | _V5_SET)


def least(
    stream: str,
    head: int,
    prev: str,
    first_index: int,
    nonce: str,
    stamp: str,
    trace: dict[str, str],
    items: list[dict[str, str]],
) -> list[tuple[uuid.UUID, str, bytes, dict[str, str]]]:
    """The turn's two events (id, type, data, metadata): the least work that gives them."""
    prefix = _NAMESPACE_BYTES + f"{stream}\x1f{nonce}\x1f".encode()
    next_index = str(first_index + 2)
    call, output = items
    call_id, name = call["call_id"], call["name"]
    arguments = orjson.loads(call["arguments"])
    call_text = _item(call)
    data = _envelope(
        {
            "tool_calls": [
                {
                    "call_id": call_id,
                    "tool_name": name,
                    "arguments": arguments,
                    "tool_kind": "function",
                }
            ],
            "message_id": call["id"],
            "message_index": first_index,
            "timestamp": stamp,
            "extensions": {"openai": {"item_json": call_text}},
        }
    ).encode()
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
    withheld = "sha256:" + _sha256(_dumps(arguments, option=_SORT)).hexdigest()
    view = {
        "tool_calls": [
            {
                "call_id": call_id,
                "tool_name": name,
                "arguments": {"withheld": withheld},
                "tool_kind": "function",
            }
        ],
        "message_id": call["id"],
        "message_index": first_index,
        "timestamp": stamp,
        "extensions": {"openai": {"item_json": marker}},
    }
    first_id = _event_id(prefix, 0)
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

    data = _envelope(
        {
            "call_id": output["call_id"],
            "result": output["output"],
            "message_index": first_index + 1,
            "timestamp": stamp,
            "extensions": {"openai": {"item_json": _item(output)}},
        }
    ).encode()
    second_id = _event_id(prefix, 1)
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
