"""SDK session items <-> canonical kurrent-agent-schema v2 events. Pure, no I/O.

Every Responses input item the runner hands ``Session.add_items`` becomes exactly
one event (:func:`encode_item`), and :func:`decode_event` gives the item back
exactly: the same keys in the same order, the same value types (``1`` stays
``int``, ``1.0`` stays ``float``), the same text.

Item -> event type:

=====================================================  ===============================
item                                                   event type
=====================================================  ===============================
message, role ``user`` (``type`` may be absent)        ``UserMessageReceived``
message, role ``assistant``                            ``AssistantTextGenerated``
``function_call``                                      ``AssistantToolCallsGenerated``
``function_call_output``                               ``ToolResultReceived``
``reasoning``                                          ``AssistantThinkingGenerated``
``mcp_approval_request``                               ``InterruptIssued``
``mcp_approval_response``                              ``InterruptResolved``
anything else, including ``system``/``developer``      ``OpenAIItemRecorded``
messages, every hosted or local tool item, and any
other JSON object (no ``type`` and no ``role``, e.g.
``EncryptedSession``'s envelopes)
=====================================================  ===============================

Any JSON object the SDK's ``SQLiteSession`` keeps is accepted, because the SDK's
own session wrappers store objects that are no Responses item in the session
beneath them (``EncryptedSession`` writes ``{"__enc__": 1, "v": 1, "kid": ...,
"payload": ...}``). What JSON cannot give back identical is still refused.

The canonical fields are filled for readers that know only the schema; the item
itself rides along as an exact JSON string in ``extensions["openai"]["item_json"]``
(extension values are protobuf ``Struct`` s, whose numbers are doubles: an object
there would turn ``1`` into ``1.0`` and round big integers). ``OpenAIItemRecorded``
is this library's extension event: a plain JSON object, not a protobuf message,
holding the item as a JSON object under ``"item"``; its ``item_type`` is left out
when the item names no kind (neither ``type`` nor ``role``, or a ``type`` that is
no string).

Canonical event data is what ``kurrent_agent_schema.to_json`` prints for the
message, byte for byte, and parses with ``kurrent_agent_schema.from_json``. It is
printed by one ``json.dumps`` of the fields in the schema's field order, because
building and printing a protobuf message costs several times more on this hot
path; tests hold the two to the same bytes. The one liberty is the key order in
a tool call's ``arguments`` ``Struct``: protobuf prints a map in hash-table order,
which depends on insertion history and does not even survive a
``from_json``/``to_json`` round trip, so the codec keeps the call's own order,
the same in every process (deterministic event ids and hash chains need that).
Every scalar field of the schema has explicit presence: a field is set, and
printed even when empty, zero or false, exactly when the item supplies it.

Events written by other integrations carry no ``item_json``: :func:`decode_items`
rebuilds valid SDK items from their canonical fields (an event with several tool
calls becomes several items), and reads the lossy ``extensions.openai.raw_item``
object the kurrent-openai-agents integration writes. Reasoning and interrupts
of another framework cannot be replayed to the Responses API and are refused
with :class:`~agentjournal.errors.CodecError`, like malformed events: the session
skips them with a warning.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Final

from kurrent_agent_schema import EVENT_TYPE_BY_NAME, from_json

from agentjournal._fastjson import loads as _fast_load
from agentjournal.errors import CodecError, InvalidInput
from agentjournal.events import EXTENSION_EVENT_TYPE, ITEM_EVENT_TYPES

OPENAI_EXTENSION_KEY = "openai"
"""Key in a canonical event's ``extensions`` under which the original item rides."""

_ITEM_JSON = "item_json"
_RAW_ITEM = "raw_item"  # the kurrent-openai-agents integration's lossy copy
_MAX_INT32 = 2**31 - 1
_MAX_SAFE_INT = 2**53
_MAX_ARGUMENT_DEPTH = 32  # from_json refuses messages nested deeper than 100


@dataclass(frozen=True, slots=True)
class EncodedEvent:
    """One event ready to append: its type, its JSON data, and the item's exact JSON text.

    ``body`` is the object ``data`` is the JSON of (``json.dumps`` defaults), for the
    canonical types; the writer builds the event's redacted view from it instead of
    parsing ``data`` again (:func:`agentjournal.ledger.redaction.item_view`). Not for
    changing: ``data`` is what is stored.
    """

    type: str
    data: bytes
    item_json: str
    body: Mapping[str, Any] | None = None


# --------------------------------------------------------------------------------------
# encoding


def _no_default(value: Any) -> Any:
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def json_encoder(*, separators: tuple[str, str], allow_nan: bool) -> Callable[[Any], str]:
    """``json.JSONEncoder(separators=..., allow_nan=...).encode`` of a dict or list (ASCII
    escapes, keys unsorted), with ``json``'s C encoder made once instead of per call: the
    same text, about 1 µs less a call (``tests/test_fast_paths.py`` compares them).

    One difference, in what is refused only: no check for circular references (a cycle
    runs into ``RecursionError``, which every caller refuses alike).
    """
    if c_make_encoder is None:  # pragma: no cover - a Python without _json
        return json.JSONEncoder(separators=separators, allow_nan=allow_nan).encode
    item_separator, key_separator = separators
    chunks = c_make_encoder(
        None,  # markers: none kept, so nothing stale after an error and no sharing between threads
        _no_default,
        encode_basestring_ascii,
        None,  # indent
        key_separator,
        item_separator,
        False,  # sort_keys
        False,  # skipkeys
        allow_nan,
    )

    def encode(value: Any) -> str:
        return "".join(chunks(value, 0))

    return encode


# to_json prints with json.dumps defaults: ASCII only, ", " and ": " separators.
_ENVELOPE: Final = json_encoder(separators=(", ", ": "), allow_nan=True)
_ITEM: Final = json_encoder(separators=(",", ":"), allow_nan=False)
_EXTENSION_OPEN: Final = f', "extensions": {{"{OPENAI_EXTENSION_KEY}": {{"{_ITEM_JSON}": '
_load = json.JSONDecoder().decode


def encode_item(
    item: Mapping[str, Any],
    *,
    message_index: int,
    author: str | None,
    timestamp: datetime,
) -> EncodedEvent:
    """Translate one SDK session item into one event.

    Args:
        item: A Responses input item as the runner gives it to ``add_items``.
        message_index: The item's position in the flat session history (int32).
        author: The name of the agent that produced the item, if known.
        timestamp: When the item was recorded; must be timezone-aware.

    Raises:
        CodecError: the item cannot be stored so that it comes back identical: it
            is not a ``dict``, or holds a value JSON does not keep (tuple, set,
            bytes, non-string key, NaN, infinity, a circular or too deep
            structure). Nothing is written.
        InvalidInput: ``message_index``, ``author`` or ``timestamp`` is malformed.
    """
    if not isinstance(item, dict):
        raise CodecError(
            f"a session item must be a dict, got {type(item).__name__}: "
            "pass Responses input items as plain dicts"
        )
    if type(message_index) is not int or not 0 <= message_index <= _MAX_INT32:
        raise InvalidInput(
            f"message_index must be an int in 0..{_MAX_INT32}, got {message_index!r}"
        )
    if author is not None and not isinstance(author, str):
        raise InvalidInput(f"author must be a string or None, got {type(author).__name__}")
    stamp = _timestamp_json(timestamp)
    kind = item.get("type")
    fill: _Filler | None = None
    if kind is None or kind == "message":
        role = item.get("role")
        if kind is None and role is None:
            # No kind at all, e.g. EncryptedSession's envelope: opaque, kept as it is.
            kind = None
        else:
            fill = _MESSAGE_ROLES.get(role) if isinstance(role, str) else None
            kind = "message"
    elif isinstance(kind, str):
        fill = _CANONICAL.get(kind)
    else:
        kind = None  # SQLiteSession keeps such an object too; it names no kind we know
    if fill is None:
        return _encode_extension(item, kind, message_index, author, stamp)

    item_json = _exact_json(item)
    data: dict[str, Any] = {}
    event_type = fill(item, data)
    if event_type not in _NO_AUTHOR_OR_INDEX:
        if author:
            data["author_name"] = _clean_text(author)
        data["message_index"] = message_index
    data["timestamp"] = stamp
    # The fields, then the extension printed as a template: what _ENVELOPE prints for the
    # whole object (tests/test_fast_paths.py compares them), a few µs less an item.
    text = _ENVELOPE(data)[:-1] + _EXTENSION_OPEN + encode_basestring_ascii(item_json) + "}}}"
    data["extensions"] = {OPENAI_EXTENSION_KEY: {_ITEM_JSON: item_json}}
    return EncodedEvent(event_type, text.encode("ascii"), item_json, data)


def _encode_extension(
    item: dict[str, Any], kind: str | None, message_index: int, author: str | None, stamp: str
) -> EncodedEvent:
    data: dict[str, Any] = {} if kind is None else {"item_type": kind}
    for source, key in (("role", "role"), ("call_id", "call_id"), ("id", "message_id")):
        value = item.get(source)
        if isinstance(value, str):
            data[key] = value
    if author:
        data["author_name"] = author
    data["message_index"] = message_index
    data["timestamp"] = stamp
    data["item"] = item
    try:
        text = _ITEM(data)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _not_exact(item) from exc
    if _load(text)["item"] != item:
        raise _not_exact(item)
    return EncodedEvent(EXTENSION_EVENT_TYPE, text.encode("ascii"), _ITEM(item))


def exact_json(item: Mapping[str, Any]) -> str:
    """Return ``item`` as the compact JSON text :func:`encode_item` stores for it.

    Raises:
        CodecError: the item is not a dict or would not load back identical.
    """
    if not isinstance(item, dict):
        raise CodecError(f"a session item must be a dict, got {type(item).__name__}")
    return _exact_json(item)


def _exact_json(item: dict[str, Any]) -> str:
    """Return the item as JSON text that loads back equal, or refuse it."""
    try:
        text = _ITEM(item)
    except (TypeError, ValueError, RecursionError) as exc:
        raise _not_exact(item) from exc
    # json.dumps quietly turns tuples into lists and 1/True/None keys into strings. A dict
    # of str keys and str values only (most items a turn writes) loads back equal, lone
    # surrogates too (escaped as \udXXXX, read back as themselves): no parse to check it.
    if not _flat_text(item) and _fast_load(text) != item:
        raise _not_exact(item)
    return text


def _flat_text(item: dict[str, Any]) -> bool:
    """Whether every key and value of ``item`` is exactly a ``str`` (no subclass)."""
    return {*map(type, item), *map(type, item.values())} <= _STR_ONLY


_STR_ONLY: Final = frozenset({str})


def _not_exact(item: dict[str, Any]) -> CodecError:
    try:
        where, what = _first_inexact(item, "item", set())
    except RecursionError:
        where, what = "item", "nested too deeply"
    if not where:
        where, what = "item", "not plain JSON"
    return CodecError(
        f"{where} is {what}: session items must be plain JSON (dicts with str keys, "
        "lists, str, int, finite float, bool, None) to come back identical"
    )


def _first_inexact(value: Any, path: str, seen: set[int]) -> tuple[str, str]:
    """Find the first value that would not survive a JSON round trip (slow path)."""
    if value is None or isinstance(value, str | bool | int):
        return "", ""
    if isinstance(value, float):
        return ("", "") if math.isfinite(value) else (path, f"the float {value!r}")
    if not isinstance(value, dict | list):
        return path, f"a {type(value).__name__}"
    if id(value) in seen:
        return path, "a circular reference"
    seen.add(id(value))
    pairs = value.items() if isinstance(value, dict) else enumerate(value)
    for key, sub in pairs:
        where = f"{path}[{key!r}]"
        if isinstance(value, dict) and not isinstance(key, str):
            return where, f"keyed by a {type(key).__name__}, not a str"
        found = _first_inexact(sub, where, seen)
        if found[0]:
            return found
    seen.discard(id(value))
    return "", ""


def _timestamp_json(timestamp: datetime) -> str:
    """Format like protobuf's ``Timestamp.ToJsonString``: UTC, 0, 3 or 6 digits, ``Z``."""
    if not isinstance(timestamp, datetime) or timestamp.utcoffset() is None:
        raise InvalidInput(f"timestamp must be a timezone-aware datetime, got {timestamp!r}")
    return _format_utc(timestamp)


@functools.lru_cache(maxsize=64)  # one add_items call stamps all its items alike
def _format_utc(timestamp: datetime) -> str:
    try:
        utc = timestamp.astimezone(UTC)
    except OverflowError as exc:
        raise InvalidInput(f"timestamp {timestamp!r} is out of range in UTC") from exc
    micros = utc.microsecond
    text = utc.replace(tzinfo=None, microsecond=0).isoformat()
    if micros == 0:
        return text + "Z"
    if micros % 1000 == 0:
        return f"{text}.{micros // 1000:03d}Z"
    return f"{text}.{micros:06d}Z"


def _clean_text(text: str) -> str:
    """Replace lone surrogates, which protobuf strings cannot hold, with U+FFFD."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(ch) <= 0xDFFF else ch for ch in text)
    return text


def _put(data: dict[str, Any], key: str, value: Any) -> None:
    """Set a string field when the item has a string for it.

    Every scalar field of the schema has explicit presence: a field that is set
    is printed even when empty, one that is not set means "not known".
    """
    if isinstance(value, str):
        data[key] = _clean_text(value)


def _joined_text(parts: Any, keys: tuple[str, ...], separator: str) -> str:
    """Concatenate the text of content parts; anything unexpected is skipped."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    texts = []
    for part in parts:
        if isinstance(part, dict):
            for key in keys:
                text = part.get(key)
                if isinstance(text, str):
                    texts.append(text)
                    break
    return separator.join(texts)


# Each filler writes an event's own fields, in the schema's field order, up to and
# including message_id, and returns the event type; encode_item adds the rest.


def _user_message(item: dict[str, Any], data: dict[str, Any]) -> str:
    _put(data, "content", _joined_text(item.get("content"), ("text",), ""))
    _put(data, "message_id", item.get("id"))
    return "UserMessageReceived"


def _assistant_message(item: dict[str, Any], data: dict[str, Any]) -> str:
    # The SDK's ItemHelpers concatenate output_text parts; a refusal is what the
    # agent said too, so it stays in the audit text.
    _put(data, "content", _joined_text(item.get("content"), ("text", "refusal"), ""))
    _put(data, "message_id", item.get("id"))
    return "AssistantTextGenerated"


def _function_call(item: dict[str, Any], data: dict[str, Any]) -> str:
    call: dict[str, Any] = {}
    _put(call, "call_id", item.get("call_id"))
    _put(call, "tool_name", item.get("name"))
    arguments = _arguments_struct_json(item.get("arguments"))
    if arguments is not None:
        call["arguments"] = arguments
    call["tool_kind"] = "function"
    data["tool_calls"] = [call]
    _put(data, "message_id", item.get("id"))
    return "AssistantToolCallsGenerated"


def _function_call_output(item: dict[str, Any], data: dict[str, Any]) -> str:
    _put(data, "call_id", item.get("call_id"))
    _put(data, "tool_name", item.get("name"))
    output = item.get("output")
    if output is not None and not isinstance(output, str):
        # A list of input_text / input_image / input_file parts: keep it all.
        output = json.dumps(output, ensure_ascii=False, separators=(",", ":"))
    _put(data, "result", output)
    _put(data, "message_id", item.get("id"))
    return "ToolResultReceived"


def _reasoning(item: dict[str, Any], data: dict[str, Any]) -> str:
    # The raw reasoning text when the model returned it, else the summary. The
    # encrypted blob is opaque: only the flag says it is there (the item keeps it).
    text = _joined_text(item.get("content"), ("text",), "\n\n")
    _put(data, "content", text or _joined_text(item.get("summary"), ("text",), "\n\n"))
    encrypted = item.get("encrypted_content")
    data["encrypted"] = isinstance(encrypted, str) and bool(encrypted)
    _put(data, "message_id", item.get("id"))
    return "AssistantThinkingGenerated"


def _mcp_approval_request(item: dict[str, Any], data: dict[str, Any]) -> str:
    _put(data, "request_id", item.get("id"))
    data["kind"] = "mcp_approval"
    _put(data, "tool_name", item.get("name"))
    _put(data, "prompt", item.get("arguments"))
    _put(data, "message_id", item.get("id"))
    return "InterruptIssued"


def _mcp_approval_response(item: dict[str, Any], data: dict[str, Any]) -> str:
    _put(data, "request_id", item.get("approval_request_id"))
    approve = item.get("approve")
    if approve is True or approve is False:
        data["outcome"] = "approved" if approve else "rejected"
    _put(data, "response", item.get("reason"))
    _put(data, "message_id", item.get("id"))
    return "InterruptResolved"


_Filler = Callable[[dict[str, Any], dict[str, Any]], str]
_CANONICAL: dict[str, _Filler] = {
    "function_call": _function_call,
    "function_call_output": _function_call_output,
    "reasoning": _reasoning,
    "mcp_approval_request": _mcp_approval_request,
    "mcp_approval_response": _mcp_approval_response,
}
_MESSAGE_ROLES: dict[str, _Filler] = {
    "user": _user_message,
    "assistant": _assistant_message,
}
_NO_AUTHOR_OR_INDEX = frozenset({"InterruptIssued", "InterruptResolved"})


def _arguments_struct_json(arguments: Any) -> dict[str, Any] | None:
    """Return a call's JSON arguments as the ``Struct`` that ``to_json`` prints.

    A ``Struct`` holds numbers as doubles, so every number becomes a float
    (``to_json`` prints ``1`` as ``1.0``). Keys keep the call's own order: the
    order ``to_json`` gives a protobuf map is an artefact of its hash table,
    differs with insertion history and is not even stable across a
    ``from_json``/``to_json`` round trip, while this one is deterministic in
    every process. ``None`` when the arguments are not a JSON object a
    ``Struct`` can hold (malformed, an array, NaN, a number beyond a double, a
    lone surrogate, nested deeper than 32 levels): the canonical field then
    stays empty and the exact text lives on in the item.
    """
    if not isinstance(arguments, str) or not arguments.lstrip().startswith("{"):
        return None
    try:
        # ``json.loads``'s value (through orjson when that agrees). NaN and Infinity parse
        # to floats here, which _struct_value refuses as it refused them before.
        parsed = _fast_load(arguments)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict):
        return None
    struct = _struct_value(parsed, 1)
    return struct if isinstance(struct, dict) else None


_UNFIT = object()


def _struct_value(value: Any, depth: int) -> Any:
    """Return ``value`` as a ``Struct`` value prints, or ``_UNFIT``."""
    if isinstance(value, str):
        return value if _clean_text(value) is value else _UNFIT
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _UNFIT
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return _UNFIT
    if depth >= _MAX_ARGUMENT_DEPTH:
        return _UNFIT
    if isinstance(value, dict):
        fields = {}
        for key, sub in value.items():
            converted = _struct_value(sub, depth + 1)
            if converted is _UNFIT or _clean_text(key) is not key:
                return _UNFIT
            fields[key] = converted
        return fields
    if isinstance(value, list):
        values = []
        for sub in value:
            converted = _struct_value(sub, depth + 1)
            if converted is _UNFIT:
                return _UNFIT
            values.append(converted)
        return values
    return _UNFIT


# --------------------------------------------------------------------------------------
# decoding


def decode_event(type: str, data: bytes) -> dict[str, Any]:
    """Return the one session item an event holds.

    The original item when the event carries it (every event :func:`encode_item`
    wrote), exactly as it was given; otherwise an item rebuilt from the canonical
    fields (see :func:`decode_items`).

    Raises:
        CodecError: the event is malformed, holds no session item, cannot be
            replayed, or rebuilds into more than one item (read events of other
            frameworks with :func:`decode_items`).
    """
    item = _original(type, data)
    if item is not None:
        return item
    items = _rebuild(type, data)
    if len(items) != 1:
        raise CodecError(
            f"{type} event holds {len(items)} session items, not one: read it with decode_items"
        )
    return items[0]


def decode_items(type: str, data: bytes) -> list[dict[str, Any]]:
    """Return the session items an event holds, in order.

    An event that carries its original item (every event :func:`encode_item`
    wrote, and any canonical event with ``extensions.openai.item_json``) holds
    exactly that item. Events of other integrations are rebuilt into valid SDK
    input items: a user message, an assistant message, one ``function_call`` per
    tool call (after an assistant message when the event also has text) or a
    ``function_call_output``.

    Raises:
        CodecError: the data is not a JSON object of the type's shape, the type
            holds no session item (lifecycle, subagent, memory and eval events),
            or the event is another framework's reasoning or interrupt, which the
            Responses API cannot take back.
    """
    item = _original(type, data)
    if item is not None:
        return [item]
    return _rebuild(type, data)


_ITEM_JSON_MARKER = f'"{_ITEM_JSON}": "'
_scan_string = json.decoder.scanstring  # type: ignore[attr-defined]


def decode_item_texts(type: str, data: bytes) -> list[str]:
    """Return the items an event holds as JSON texts (``decode_items``, serialised).

    Raises:
        CodecError: as :func:`decode_items`.
    """
    return [text for text, _ in decode_item_pairs(type, data)]


def decode_item_pairs(type: str, data: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Return the items an event holds, each as (exact JSON text, freshly parsed item).

    For events :func:`encode_item` wrote, the original item's text is cut out of
    ``extensions.openai.item_json`` without parsing the rest of the event (the
    item is the last thing in the event) and parsed once; everything else goes
    through :func:`decode_items`. Loading a text gives its item exactly.

    Raises:
        CodecError: as :func:`decode_items`.
    """
    if type != EXTENSION_EVENT_TYPE and data.endswith(b'"}}}'):
        text = data.decode("utf-8", errors="replace")
        at = text.rfind(_ITEM_JSON_MARKER)
        if at > 0:
            try:
                item_json, end = _scan_string(text, at + len(_ITEM_JSON_MARKER))
            except ValueError:
                end = -1
            if text[end:] == "}}}":
                return [(item_json, _load_item(type, item_json))]
    return [(_ITEM(item), item) for item in decode_items(type, data)]


def _load_item(type: str, item_json: str) -> dict[str, Any]:
    """Parse an event's original item, refusing anything but a JSON object."""
    try:
        item = _load(item_json)
    except (ValueError, RecursionError) as exc:
        raise CodecError(f"{type} event's original item is not JSON: {exc}") from exc
    if not isinstance(item, dict):
        raise CodecError(f"{type} event's original item is not a JSON object")
    return item


def _original(type: str, data: bytes) -> dict[str, Any] | None:
    """Return the item an event carries, ``None`` when it carries none."""
    try:
        doc = _load(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise CodecError(f"{type} event data is not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise CodecError(f"{type} event data must be a JSON object")
    if type == EXTENSION_EVENT_TYPE:
        item = doc.get("item")
        if not isinstance(item, dict):
            raise CodecError(f"{EXTENSION_EVENT_TYPE} event has no 'item' object")
        return item
    if type not in EVENT_TYPE_BY_NAME:
        raise CodecError(f"unknown event type {type!r}: it holds no session item")
    extensions = doc.get("extensions")
    openai = extensions.get(OPENAI_EXTENSION_KEY) if isinstance(extensions, dict) else None
    if not isinstance(openai, dict):
        return None
    item_json = openai.get(_ITEM_JSON)
    if isinstance(item_json, str):
        return _load_item(type, item_json)
    raw_item = openai.get(_RAW_ITEM)
    if isinstance(raw_item, dict):
        # kurrent-openai-agents keeps a Struct copy: its numbers came back as doubles.
        restored: dict[str, Any] = _whole_floats_to_ints(raw_item)
        return restored
    return None


def _rebuild(type: str, data: bytes) -> list[dict[str, Any]]:
    rebuild = _REBUILDERS.get(type)
    if rebuild is None:
        if type in ITEM_EVENT_TYPES:
            raise CodecError(
                f"{type} event of another framework has no OpenAI original and cannot be "
                "replayed to the Responses API"
            )
        raise CodecError(f"{type} events hold no session item")
    try:
        text = data.decode("utf-8")
        message = from_json(EVENT_TYPE_BY_NAME[type], text)
    except Exception as exc:  # json_format.ParseError, UnicodeDecodeError, ...
        raise CodecError(f"{type} event does not match the canonical schema: {exc}") from exc
    return rebuild(message, _load(text))


def _rebuild_user(message: Any, doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"content": message.content, "role": "user"}]


def _rebuild_assistant(message: Any, doc: dict[str, Any]) -> list[dict[str, Any]]:
    # The easy-message form: another framework's message id means nothing to OpenAI.
    return [{"content": message.content, "role": "assistant"}]


def _rebuild_tool_calls(message: Any, doc: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if message.content:
        items.append({"content": message.content, "role": "assistant"})
    for call, call_json in zip(message.tool_calls, doc.get("tool_calls", ()), strict=True):
        if not call.call_id or not call.tool_name:
            raise CodecError(
                "AssistantToolCallsGenerated tool call without call_id or tool_name "
                "cannot be replayed"
            )
        # from_json checked it is a Struct; the JSON keeps the writer's key order.
        arguments = _whole_floats_to_ints(call_json.get("arguments", {}))
        items.append(
            {
                "arguments": json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
                "call_id": call.call_id,
                "name": call.tool_name,
                "type": "function_call",
            }
        )
    if not items:
        raise CodecError("AssistantToolCallsGenerated event has neither tool calls nor text")
    return items


def _rebuild_tool_result(message: Any, doc: dict[str, Any]) -> list[dict[str, Any]]:
    if not message.call_id:
        raise CodecError("ToolResultReceived without call_id cannot be replayed")
    return [{"call_id": message.call_id, "output": message.result, "type": "function_call_output"}]


_REBUILDERS: dict[str, Callable[[Any, dict[str, Any]], list[dict[str, Any]]]] = {
    "UserMessageReceived": _rebuild_user,
    "AssistantTextGenerated": _rebuild_assistant,
    "AssistantToolCallsGenerated": _rebuild_tool_calls,
    "ToolResultReceived": _rebuild_tool_result,
}


def _whole_floats_to_ints(value: Any) -> Any:
    """Undo a ``Struct``'s doubles: whole numbers below 2**53 become ints again."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < _MAX_SAFE_INT:
            return int(value)
        return value
    if isinstance(value, dict):
        return {key: _whole_floats_to_ints(sub) for key, sub in value.items()}
    if isinstance(value, list):
        return [_whole_floats_to_ints(sub) for sub in value]
    return value
