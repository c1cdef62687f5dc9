"""What a redacted bundle shows of each event, and why a verifier can trust it (pure).

A redacted bundle must hold no user text, assistant text, tool argument or
tool output, yet verify completely. Every event type falls in one of three
classes:

* **kept** — its data holds no conversation (lifecycle of the session,
  authority, policies, checkpoints, pops and clears, model responses' usage,
  branches, an eval run's start and totals): shown whole;
* **viewed** — its data mixes conversation with what a verifier needs (tool
  calls, handoffs, subagent completions, guardrail decisions, authority
  refusals, approvals' questions and answers, scores of turns and sessions): shown
  as its *view*, the data with every conversation value replaced by a marker
  ``{"withheld": "sha256:..."}`` holding the digest of that value
  (:func:`agentjournal.guardrails.actions.digest`);
* **withheld** — everything else, including types this version does not
  know: no data at all, only its digest.

A view is committed when the event is written: ``aj.redacted`` in its
metadata is the SHA-256 of the view's RFC 8785 bytes, and the metadata is in
the hash chain. So a redacted bundle's view is bound to the chain exactly as
the data is, and on an unredacted bundle the verifier recomputes each view
from the data and checks the commitment, so a view can never say something
the data does not.

The arguments of a tool call are a marker that also carries what the
authority checks need: the tool's name, the digest of the payload a guardrail
was shown for the call (``payload_digest``, compared with the decision's),
and the value of each argument a ceiling of the tool's rule reads —
integers as they are (a cap compares numbers), strings only as digests (an
allow, deny or ranked ceiling compares them with the digests of the policy's
own values), anything else by its JSON type. See SCHEMA.md, "Redacted
bundles".
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson
import rfc8785

from agentjournal import events
from agentjournal._calls import call_of, tool_call_payload
from agentjournal._digests import value_digest
from agentjournal.authority import ceiling_inputs
from agentjournal.ledger.checkpoints import CHECKPOINT
from agentjournal.ledger.keys import KEY_ROTATED

__all__ = [
    "KEPT",
    "VIEWED",
    "call_marker",
    "exact_view_commitment",
    "is_withheld",
    "item_view",
    "shown_call",
    "strict_view_commitment",
    "view",
    "view_commitment",
    "view_digest",
    "withheld",
    "withholds",
]

KEPT: Final = frozenset(
    {
        events.SESSION_STARTED,
        events.ITEM_POPPED,
        events.SESSION_CLEARED,
        events.AUTHORITY_GRANTED,
        events.POLICY_RECORDED,
        events.AUTHORITY_HELD,
        events.AUTHORITY_RESET,
        events.MODEL_RESPONDED,
        events.RUN_RESUMED,
        events.SUBJECT_ERASED,
        CHECKPOINT,
        KEY_ROTATED,
        events.EVAL_RUN_STARTED,
        events.EVAL_RUN_COMPLETED,
    }
    | events.BRANCH_EVENTS
)
"""Event types whose data a redacted bundle shows whole: they carry no conversation."""

VIEWED: Final = frozenset(
    {
        "AssistantToolCallsGenerated",
        "OpenAIItemRecorded",
        events.SUBAGENT_STARTED,
        events.SUBAGENT_COMPLETED,
        events.GUARDRAIL_DECIDED,
        events.AUTHORITY_REFUSED,
        events.INTERRUPT_ISSUED,
        events.INTERRUPT_RESOLVED,
        events.TURN_SCORED,
        events.SESSION_SCORED,
    }
)
"""Event types that get a view (``OpenAIItemRecorded`` only for locally executed calls, the
interrupt types only for approvals of function tools: with ``aj.interrupt``)."""


_CODE: Final = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
"""A machine-readable reason code (``GUARDRAIL_UNAVAILABLE``): kept in a view; other text not."""


def withheld(value: Any) -> dict[str, str]:
    """The marker that stands for a withheld value."""
    return {"withheld": value_digest(value)}


def is_withheld(value: Any) -> bool:
    """Whether ``value`` is a marker rather than the value itself."""
    return isinstance(value, Mapping) and "withheld" in value


class _Float(float):
    """A number with a fraction or exponent in data a view is made from. orjson refuses to
    print it, so a view holding one is printed by the exact path of :func:`view_digest`."""

    __slots__ = ()


class _View(dict[str, Any]):
    """A view :func:`view` made: every float in it is a :class:`_Float` (its data was parsed
    so), which lets :func:`view_digest` try orjson without first walking the view for floats.
    Code that puts a plain float into one would get a wrong digest: nothing does.

    Attributes:
        call: The marker of the call the view shows (a tool call's), when it is the one
            :func:`call_marker` makes of the same item (not an item that looks withheld):
            a verifier then need not parse the data again for it.
    """

    __slots__ = ("call",)

    call: dict[str, Any] | None


def shown_call(shown: Mapping[str, Any]) -> dict[str, Any] | None:
    """The call marker :func:`view` found making ``shown`` (see ``_View.call``), else None."""
    return shown.call if type(shown) is _View else None


def _constant(name: str) -> _Float:
    return _Float(name)  # NaN, Infinity, -Infinity: json.loads takes them, so views do


_DECODER: Final = json.JSONDecoder(parse_float=_Float, parse_constant=_constant)
_ASTRAL: Final = re.compile(b"[\xf0-\xf4]")  # the first byte of a character beyond U+FFFF


def _astral(encoded: bytes) -> bool:
    """Whether UTF-8 bytes hold a character beyond U+FFFF (ASCII, nearly always, holds none:
    that test is twenty times faster than the search)."""
    return not encoded.isascii() and _ASTRAL.search(encoded) is not None


def _loads(data: bytes) -> Any:
    """``json.loads(data)`` (the same encoding detection, values and errors) with every float
    a :class:`_Float`.

    Not orjson, though it parses four times faster: it reads an integer beyond 64 bits as a
    float and does not say whether it met a float, and looking for either in the text
    (a regular expression) costs more than the parse saves.
    """
    return _DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))


def _loads_text(text: str) -> Any:
    """``json.loads(text)`` (the same values and errors) with every float a :class:`_Float`."""
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


def _marked_digest(value: Any) -> str:
    """:func:`agentjournal._digests.value_digest` of a value whose floats are all
    :class:`_Float` (parsed from a view's data): orjson prints what it accepts of such a
    value (no float, no integer beyond 64 bits, no lone surrogate, string keys) exactly as
    ``value_digest``'s sorted compact JSON does; the rest goes through ``value_digest``."""
    try:
        encoded = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return value_digest(value)
    return "sha256:" + hashlib.sha256(encoded).hexdigest()


def _withheld(value: Any) -> dict[str, str]:
    """:func:`withheld` of a value parsed from a view's data (see :func:`_marked_digest`)."""
    return {"withheld": _marked_digest(value)}


def view_digest(body: Any) -> str:
    """Hex SHA-256 of the RFC 8785 bytes of a view (the ``aj.redacted`` value).

    A view RFC 8785 cannot print (an integer beyond 2**53, a non-finite number) is
    hashed as Python's sorted compact JSON instead: every reader computes the same.
    """
    if type(body) is _View:
        # A view made from data: no plain float in it. orjson prints it as Python's sorted
        # compact JSON (strings, integers, objects, arrays, true, false, null alike), which
        # is RFC 8785's bytes unless a key holds a character beyond U+FFFF (UTF-16 order):
        # no byte of the output starts one. What orjson refuses (a float, an integer beyond
        # 64 bits, a lone surrogate, nesting beyond 255) takes the paths below.
        try:
            encoded = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            pass
        else:
            if not _astral(encoded):
                return hashlib.sha256(encoded).hexdigest()
    if _plain(body):
        # No float and no key beyond the Basic Multilingual Plane: RFC 8785 prints
        # such a value as Python's sorted compact JSON does (strings escaped alike,
        # integers alike, keys in the same order, as UTF-16 and code-point order agree
        # within the BMP); the cases it refuses (a lone surrogate, an integer beyond
        # 2**53) fall back to exactly these bytes. Ten times faster than ``rfc8785``.
        encoded = _sorted_json(body).encode("utf-8", "surrogatepass")
        return hashlib.sha256(encoded).hexdigest()
    try:
        # Floats RFC 8785 prints as Python's shortest repr (see _jcs_ready): as fast.
        encoded = _sorted_json(_jcs_ready(body)).encode("utf-8")
    except (_Unsure, UnicodeEncodeError):
        pass
    else:
        return hashlib.sha256(encoded).hexdigest()
    try:
        encoded = rfc8785.dumps(body)
    except (rfc8785.CanonicalizationError, UnicodeError):
        encoded = _sorted_json(body).encode("utf-8", "surrogatepass")
    return hashlib.sha256(encoded).hexdigest()


_JCS_INT: Final = 2**53 - 1


def _jcs_ready(value: Any) -> Any:
    """A copy of ``value`` (parsed JSON) that Python's sorted compact JSON prints as
    RFC 8785 does, or :class:`_Unsure`.

    RFC 8785 prints a float as ECMAScript does: for 0 and ``1e-4 <= |x| < 1e16`` that is
    Python's ``str`` (the shortest digits that read back, in fixed notation) without a
    trailing ``.0`` — an integral float becomes its integer. Other floats, integers RFC
    8785 refuses (beyond 2**53 - 1, where it falls back to this very JSON with the float
    as it was) and keys beyond the Basic Multilingual Plane (UTF-16 order) are unsure.
    ``tests/test_redaction.py`` compares the digests with ``rfc8785``'s on random values.
    """
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return value
    if kind is int or isinstance(value, int):
        if not -_JCS_INT <= value <= _JCS_INT:
            raise _Unsure
        return value
    if isinstance(value, float):
        size = abs(value)
        if size != 0.0 and not 1e-4 <= size < 1e16:
            raise _Unsure  # NaN and the infinities too
        return int(value) if value.is_integer() else float(value)
    if isinstance(value, dict):
        ready = {}
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and max(key) > "\uffff"):
                raise _Unsure
            ready[key] = _jcs_ready(item)
        return ready
    if isinstance(value, list):
        return [_jcs_ready(item) for item in value]
    raise _Unsure


_sorted_json: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True
).encode


def _plain(value: Any) -> bool:
    """Whether ``value`` (parsed JSON) holds no float and no key beyond U+FFFF."""
    if isinstance(value, dict):
        return all(
            isinstance(key, str)
            and (key.isascii() or max(key, default=" ") <= "\uffff")
            and _plain(item)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    return isinstance(value, (str, int)) or value is None  # bool is an int


def withholds(type_: str, metadata: Mapping[str, str]) -> bool:
    """Whether a redacted bundle withholds the event's data: all but the kept types and the
    events whose data is already their view (``aj.viewed``)."""
    return type_ not in KEPT and metadata.get(events.VIEWED_KEY) != "1"


def view(type_: str, data: bytes, metadata: Mapping[str, str]) -> dict[str, Any] | None:
    """The redacted view of an event; None when the type has none (kept or withheld whole).

    Raises:
        ValueError: The data of a viewed type is not a JSON object of its shape, or nests
            deeper than Python's parser goes (a forged or damaged event: a verifier reports it).
    """
    if type_ not in VIEWED or metadata.get(events.VIEWED_KEY) == "1":
        return None
    try:
        made = _view(type_, data, metadata)
        if made is None:
            return None
        result = _View(made[0])
        result.call = made[1]
        return result
    except RecursionError:
        raise ValueError(f"{type_} data is nested too deeply") from None
    except (TypeError, AttributeError, LookupError) as error:  # a field of the wrong shape
        raise ValueError(f"{type_} data is malformed: {error}") from None


def view_commitment(
    type_: str, data: bytes, metadata: Mapping[str, str]
) -> tuple[str, dict[str, Any] | None] | None:
    """``(view_digest(shown), shown_call(shown))`` of ``shown = view(type_, data, metadata)``
    (what a verifier compares with ``aj.redacted``, and the call marker it may share), or
    None when ``view`` is None.

    A tool call's data is first parsed by ``orjson`` and digested as its view is built
    (:func:`_plain_bytes`): a third less work, and the same digests wherever no float appears
    (``orjson`` and ``json`` then parse the same values, and ``orjson`` prints them as
    ``value_digest`` does). Anything unusual — a float, a number ``orjson`` reads as one, text
    it refuses (``NaN``, a lone surrogate, a byte order mark), a call that is no function
    call, a key beyond U+FFFF, a field of the wrong shape — takes :func:`view` instead, which
    gives the answer, or raises the error, exactly (``tests/test_view_commitment.py`` compares
    them on random, odd and damaged data).

    Raises:
        ValueError: As :func:`view`.
    """
    made = strict_view_commitment(type_, data, metadata)
    return made if made is not None else exact_view_commitment(type_, data, metadata)


def exact_view_commitment(
    type_: str, data: bytes, metadata: Mapping[str, str]
) -> tuple[str, dict[str, Any] | None] | None:
    """:func:`view_commitment` through :func:`view` itself: the exact answer for any data
    (what :func:`strict_view_commitment` leaves).

    Raises:
        ValueError: As :func:`view`.
    """
    shown = view(type_, data, metadata)
    return None if shown is None else (view_digest(shown), shown_call(shown))


def strict_view_commitment(
    type_: str, data: bytes, metadata: Mapping[str, str]
) -> tuple[str, dict[str, Any] | None] | None:
    """:func:`view_commitment` of a tool call whose data ``orjson`` parses (strict JSON: no
    ``NaN`` or ``Infinity``, no lone surrogate) and whose view it can vouch for; None for
    anything else, where :func:`view_commitment` decides. What it gives, its call marker
    too, is then the answer of a strict parse of the data (``Record.body`` parses it)."""
    if type_ != "AssistantToolCallsGenerated" or metadata.get(events.VIEWED_KEY) == "1":
        return None
    try:
        return _sdk_tool_call(data, metadata)
    except (_Unsure, ValueError, TypeError, AttributeError, LookupError, RecursionError):
        pass  # the general fast path decides
    try:
        return _fast_tool_calls(data, metadata)
    except (_Unsure, ValueError, TypeError, AttributeError, LookupError, RecursionError):
        return None  # view() decides


_OPENAI: Final = frozenset({"openai"})
_ITEM_JSON: Final = frozenset({"item_json"})
_SCALARS: Final = frozenset({str, int, bool, type(None)})
"""What ``orjson`` and ``value_digest`` print alike, as parsed by ``orjson``: no float (an
integer beyond 64 bits it reads as one)."""


def _sdk_tool_call(data: bytes, metadata: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """:func:`view_commitment` of a tool call in the shape the Agents SDK's items are written:
    no rule; beside its tool calls (dicts of text and numbers but their arguments) and its
    extensions (exactly the OpenAI item's text), only text and whole numbers; its item a
    function call of text fields. The same steps as :func:`_fast_tool_calls` with
    :func:`_parsed_marker`, straight through, with the values' types checked where those
    look for floats in each value printed. Raises :class:`_Unsure` (or any error) for
    anything else: the general paths decide."""
    if events.TOOL_RULE_KEY in metadata:
        raise _Unsure
    dumps, sha256, sort = orjson.dumps, hashlib.sha256, orjson.OPT_SORT_KEYS
    body = orjson.loads(data)
    if type(body) is not dict:
        raise _Unsure
    for key, value in body.items():
        if type(value) not in _SCALARS and key != "tool_calls" and key != "extensions":
            raise _Unsure
    calls, extensions = body["tool_calls"], body["extensions"]
    if type(calls) is not list or type(extensions) is not dict or extensions.keys() != _OPENAI:
        raise _Unsure
    for call in calls:
        if type(call) is not dict:
            raise _Unsure
        for key, value in call.items():
            if type(value) not in _SCALARS and key != "arguments":
                raise _Unsure
        if "arguments" in call:
            withheld = "sha256:" + sha256(_plain_bytes(call["arguments"])).hexdigest()
            call["arguments"] = {"withheld": withheld}
    openai = extensions["openai"]
    if type(openai) is not dict or openai.keys() != _ITEM_JSON:
        raise _Unsure
    text = openai["item_json"]
    if type(text) is not str:
        raise _Unsure
    item = orjson.loads(text)
    if type(item) is not dict or item.get("type") != "function_call":
        raise _Unsure
    for value in item.values():
        if type(value) is not str:
            raise _Unsure
    call_id = item["call_id"]
    name = item.get("name", "")
    payload = tool_call_payload(call_id, name, item.get("arguments") or "{}")
    marker = openai["item_json"] = {
        "withheld": "sha256:" + sha256(dumps(text)).hexdigest(),
        "call_id": call_id,
        "kind": "function_call",
        "name": name,
        "payload_digest": "sha256:" + sha256(dumps(payload, option=sort)).hexdigest(),
        "ceilings": {},
    }
    encoded = dumps(body, option=sort)
    if _astral(encoded):
        raise _Unsure  # a key beyond U+FFFF sorts otherwise in RFC 8785
    return sha256(encoded).hexdigest(), marker


def _fast_tool_calls(data: bytes, metadata: Mapping[str, str]) -> tuple[str, dict[str, Any] | None]:
    """:func:`view_commitment` of a tool call, through ``orjson``; raises :class:`_Unsure` (or
    any error) where it cannot vouch for the same answer."""
    body = orjson.loads(data)
    if type(body) is not dict:
        raise _Unsure
    shown, found = _tool_calls(
        body, _rule(metadata), digest=_plain_digest, loads=_plain_loads, mark=_parsed_marker
    )
    encoded = _plain_bytes(shown)
    if _astral(encoded):
        raise _Unsure  # a key beyond U+FFFF sorts otherwise in RFC 8785
    return hashlib.sha256(encoded).hexdigest(), found


_NUMBER_MARKS: Final = bytes.maketrans(b"123456789+-[E", b"00000000000,e")
_AFTER_KEY: Final = re.compile(b'":0+[.e]')
_AFTER_ITEM: Final = re.compile(b",0+[.e]")


def _plain_bytes(value: Any) -> bytes:
    """``orjson``'s sorted compact JSON of a value ``orjson`` parsed, when it holds no float:
    then the bytes of ``value_digest`` (and of RFC 8785 but for keys beyond U+FFFF); else
    :class:`_Unsure`.

    A float in ``orjson``'s output is a number with a fraction or an exponent (``-1.5``,
    ``1e+16``), alone or right after ``":``, ``,`` or ``[``: with every digit and sign read
    as ``0``, ``[`` as ``,`` and ``E`` as ``e``, a match of ``":0+[.e]`` or ``,0+[.e]``, which
    text may show too (then the exact path runs for nothing). Parsed by ``orjson``, no value is
    ``NaN`` or infinite (which it would print as ``null``): it refuses them.
    """
    try:
        encoded = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        raise _Unsure from None  # nesting beyond 255
    if type(value) is float:
        raise _Unsure  # printed alone: nothing before it
    if type(value) is not str:
        marks = encoded.translate(_NUMBER_MARKS)
        if (b"0." in marks or b"0e" in marks) and (  # a float has a digit before . or e
            _AFTER_KEY.search(marks) is not None or _AFTER_ITEM.search(marks) is not None
        ):
            raise _Unsure
    return encoded


def _plain_digest(value: Any) -> str:
    """:func:`agentjournal._digests.value_digest` of a value ``orjson`` parsed, or
    :class:`_Unsure` (see :func:`_plain_bytes`)."""
    return "sha256:" + hashlib.sha256(_plain_bytes(value)).hexdigest()


def _plain_marker(
    item: dict[str, Any],
    rule: Mapping[str, Any] | None,
    digest: Callable[[Any], str],
    *,
    whole: bool = True,
) -> dict[str, Any]:
    """:func:`_call_marker` of an item ``orjson`` parsed or :func:`_marked` copied (``digest``
    fits it): of a function call whose every field is text (as the Agents SDK writes them)
    without :func:`agentjournal._calls.call_of`'s generality and without looking for floats
    (text has none: :func:`_marked_digest` is exact); of any other item, :func:`_call_marker`.
    Without ``whole``, such a call's ``withheld`` is left empty (see :func:`_parsed_marker`)."""
    call_id = item.get("call_id")
    if item.get("type") != "function_call" or type(call_id) is not str:
        return _call_marker(item, rule, digest)
    for value in item.values():
        if type(value) is not str:
            return _call_marker(item, rule, digest)
    name = item.get("name", "")
    arguments = item.get("arguments") or "{}"  # as call_of reads a function call
    ceilings = _ceilings(rule)
    return {
        "withheld": _marked_digest(item) if whole else "",
        "call_id": call_id,
        "kind": "function_call",
        "name": name,
        "payload_digest": _marked_digest(tool_call_payload(call_id, name, arguments)),
        # No ceiling (no rule, nearly always): ceiling_inputs' own answer, without its call.
        "ceilings": ceiling_inputs(arguments, ceilings.values()) if ceilings else {},
    }


def _parsed_marker(
    item: dict[str, Any], rule: Mapping[str, Any] | None, digest: Callable[[Any], str]
) -> dict[str, Any]:
    """:func:`_plain_marker` of an item ``orjson`` parsed (the fast path of
    :func:`view_commitment`) or :func:`item_view` was given, but a function call's
    ``withheld`` left empty: :func:`_tool_calls`, which makes every marker this gives,
    replaces it with the digest of the item's text, in its place. Its digest of the item
    could not fail either (an item of text fields only: ``orjson`` prints what it parsed,
    and ``value_digest`` keeps a lone surrogate), so leaving it out changes no answer and
    no error."""
    return _plain_marker(item, rule, digest, whole=False)


def _plain_loads(text: str) -> Any:
    """``json.loads(text)`` through ``orjson``, or :class:`_Unsure` where it refuses the text
    (``json`` may take it, or refuse it otherwise). Floats come back plain: the digests of
    :func:`_plain_digest` refuse them."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        raise _Unsure from None


class _Unsure(Exception):
    """A value :func:`_marked` or the fast path of :func:`view_commitment` cannot vouch for:
    the caller takes the exact path instead."""


def _marked(value: Any) -> Any:
    """What :func:`_loads` gives back for ``json.dumps(value)``, without printing or parsing:
    a copy in which every float is a :class:`_Float`. Only for values of exactly the types
    JSON gives back (dict with str keys, list, str, int, bool, None, a finite float), whose
    text parses to an identical copy (float ``repr`` round-trips); anything else — a
    subclass, a tuple, a non-finite float — raises :class:`_Unsure`."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is float:
        if value - value != 0.0:  # NaN or an infinity: parsed through parse_constant
            raise _Unsure
        return _Float(value)
    if kind is dict:
        marked = {}
        for key, item in value.items():
            if type(key) is not str:
                raise _Unsure
            # Text and integers first, without a call: most of an item is text.
            inner = type(item)
            marked[key] = item if inner is str or inner is int else _marked(item)
        return marked
    if kind is list:
        return [item if type(item) is str else _marked(item) for item in value]
    raise _Unsure


def _all_text(value: Any) -> bool:
    """Whether ``value`` is a ``dict`` whose every key and value is a ``str``."""
    return type(value) is dict and all(
        type(key) is str and type(item) is str for key, item in value.items()
    )


def item_view(
    type_: str, body: Mapping[str, Any], item: Any, metadata: Mapping[str, str]
) -> dict[str, Any] | None:
    """:func:`view` of an item event from what encoded it, without parsing its data; None
    when this cannot vouch for the same view (the caller then calls :func:`view`).

    ``body`` must be the object whose ``json.dumps`` (default options) is the event's data,
    and the data's ``extensions.openai.item_json`` the exact JSON text of ``item`` (as
    :func:`agentjournal.engine.codec.encode_item` makes both). Their parse is then
    :func:`_marked` of each, so the view is the same, field by field and float by float
    (``tests/test_redaction.py`` compares the two on random items). Only tool calls
    (``AssistantToolCallsGenerated``), the one viewed type a turn writes as a rule.
    """
    if type_ != "AssistantToolCallsGenerated" or metadata.get(events.VIEWED_KEY) == "1":
        return None
    try:
        shown = _marked(body)
        # An item of text fields only is its own parse; the marker only reads it.
        parsed = item if _all_text(item) else _marked(item)
        # _tool_calls replaces the marker's ``withheld`` with the digest of the item's text:
        # the marker leaves it empty (its digest of the item, text only, cannot fail).
        made = _tool_calls(shown, _rule(metadata), parsed, mark=_parsed_marker)
    except (_Unsure, RecursionError, TypeError, AttributeError, LookupError, ValueError):
        return None  # view() gives the answer, or the error, exactly
    result = _View(made[0])
    result.call = made[1]
    return result


def _view(
    type_: str, data: bytes, metadata: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """The view and the call marker it holds (``_View.call``), or None."""
    body = _loads(data)
    if not isinstance(body, dict):
        raise ValueError(f"{type_} data is not a JSON object")
    rule = _rule(metadata)
    if type_ == "AssistantToolCallsGenerated":
        return _tool_calls(body, rule)
    if type_ == "OpenAIItemRecorded":
        item = body.get("item")
        if call_of(item) is None:
            return None  # a message or an output: withheld whole
        marker = _call_marker(item, rule, _marked_digest)
        return {**body, "item": marker}, (None if is_withheld(item) else marker)
    if type_ in (events.INTERRUPT_ISSUED, events.INTERRUPT_RESOLVED):
        if events.INTERRUPT_KEY not in metadata:
            return None  # an MCP approval item: withheld whole, as every item
        if type_ == events.INTERRUPT_RESOLVED:
            return _replace(body, [("response",)]), None
        return _question(body), None
    if type_ == events.SUBAGENT_STARTED:
        return _replace(body, [("prompt",), ("extensions", "openai", "item_json")]), None
    if type_ == events.TURN_SCORED:  # the score, its label and facts stay; what was judged not
        return _replace(body, [("input",), ("output",), ("reason",)]), None
    if type_ == events.SESSION_SCORED:
        return _replace(body, [("reason",)]), None
    if type_ == events.SUBAGENT_COMPLETED:
        return _replace(body, [("summary",), ("extensions", "openai", "reason")]), None
    if type_ == events.GUARDRAIL_DECIDED:
        shown = _replace(body, [("payload",), ("reason_message",)])
        code = shown.get("reason_code")
        if isinstance(code, str) and not _CODE.fullmatch(code):
            shown["reason_code"] = _withheld(code)  # a service may put any text there
        modified = body.get("modified_payload")
        if modified is not None:
            shown["modified_payload"] = _modified_marker(body, modified, rule)
        return shown, None
    return _replace(body, [("reason",), ("value",)]), None  # AuthorityRefused


def _question(body: dict[str, Any]) -> dict[str, Any]:
    """An approval's question with its arguments (``prompt``) withheld; the marker keeps
    their :func:`~agentjournal.events.arguments_digest` (what an answer names) and the
    ``payload_digest`` of the call they are (what the call item's marker names)."""
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str):
        raise TypeError("prompt is no text")
    shown: dict[str, Any] = _copy(body)
    shown["prompt"] = {
        "withheld": _marked_digest(prompt),
        "arguments_sha256": events.arguments_digest(prompt),
        "payload_digest": _marked_digest(
            tool_call_payload(str(body["request_id"]), str(body.get("tool_name", "")), prompt)
        ),
    }
    return shown


def call_marker(item: Any, rule: Mapping[str, Any] | None) -> dict[str, Any]:
    """The marker of a call item: withheld, with what containment needs (see the module)."""
    return _call_marker(item, rule, value_digest)


def _call_marker(
    item: Any, rule: Mapping[str, Any] | None, digest: Callable[[Any], str]
) -> dict[str, Any]:
    marker: dict[str, Any] = {"withheld": digest(item)}
    call = call_of(item)
    if call is not None:
        marker["call_id"] = call.call_id
        marker["kind"] = call.kind
        marker["name"] = call.name
        marker["payload_digest"] = digest(
            tool_call_payload(call.call_id, call.name, call.arguments, call.kind)
        )
        marker["ceilings"] = ceiling_inputs(call.arguments, _ceilings(rule).values())
    return marker


# -- helpers --------------------------------------------------------------------------


def _rule(metadata: Mapping[str, str]) -> Mapping[str, Any] | None:
    text = metadata.get(events.TOOL_RULE_KEY)
    if text is None:
        return None
    try:
        rule = json.loads(text)
    except ValueError:
        return None
    return rule if isinstance(rule, Mapping) else None


def _ceilings(rule: Mapping[str, Any] | None) -> Mapping[str, str]:
    if rule is None:
        return {}  # nearly always: no rule, and no isinstance check against an ABC
    ceilings = rule.get("ceilings")
    if not isinstance(ceilings, Mapping):
        return {}
    return {str(name): path for name, path in ceilings.items() if isinstance(path, str)}


def _replace(body: dict[str, Any], paths: list[tuple[str, ...]]) -> dict[str, Any]:
    """A copy of ``body`` with the value at each path (where present) withheld."""
    shown: dict[str, Any] = _copy(body)
    for path in paths:
        parent: Any = shown
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and parent.get(path[-1]) is not None:
            parent[path[-1]] = _withheld(parent[path[-1]])
    return shown


def _copy(value: Any) -> Any:
    """A deep copy of parsed JSON (dicts, lists and immutable scalars): ``copy.deepcopy``
    without its memo, which parsed JSON (a tree, no shared parts) does not need."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value


_UNPARSED: Final = object()


def _tool_calls(
    body: dict[str, Any],
    rule: Mapping[str, Any] | None,
    parsed: Any = _UNPARSED,
    digest: Callable[[Any], str] = _marked_digest,
    loads: Callable[[str], Any] = _loads_text,
    mark: Callable[[Any, Mapping[str, Any] | None, Callable[[Any], str]], dict[str, Any]] = (
        _call_marker
    ),
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The view of a tool call's data and its call marker; ``parsed``: the item its
    ``item_json`` holds, when the caller has it already (:func:`item_view`); ``digest`` and
    ``loads``, ``mark``: how withheld values are digested, the item's text parsed and its
    marker made (the fast path of :func:`view_commitment` passes its own)."""
    # ``body`` is _view's own fresh parse of the data, so it becomes the view in place: a
    # deep copy of it was a sixth of the cost of writing a tool call.
    shown = body
    found = None
    for call in shown.get("tool_calls") or ():
        if isinstance(call, dict) and "arguments" in call:
            call["arguments"] = {"withheld": digest(call["arguments"])}
    openai = shown.get("extensions", {}).get("openai")
    if isinstance(openai, dict) and isinstance(openai.get("item_json"), str):
        if parsed is not _UNPARSED:
            item = parsed
        else:
            try:
                item = loads(openai["item_json"])
            except ValueError:
                item = None
        marker = mark(item, rule, digest) if isinstance(item, dict) else {}
        openai["item_json"] = {**marker, "withheld": digest(openai["item_json"])}
        if "call_id" in marker:  # the item's text parsed to a call
            found = openai["item_json"]
    return shown, found


def _modified_marker(
    body: Mapping[str, Any], modified: Any, rule: Mapping[str, Any] | None
) -> dict[str, Any]:
    """A guardrail's replacement, withheld; for a tool call, with its ceiling inputs."""
    marker: dict[str, Any] = _withheld(modified)
    if body.get("action_type") == "TOOL_CALL" and isinstance(modified, Mapping):
        function = modified.get("function")
        arguments = function.get("arguments") if isinstance(function, Mapping) else None
        if isinstance(arguments, str):
            marker["ceilings"] = ceiling_inputs(arguments, _ceilings(rule).values())
    return marker
