"""The fast paths on the write path decide exactly as the paths they skip.

``redaction.item_view`` builds a tool call's view from the object
``codec.encode_item`` printed and the item itself, instead of parsing the data just
encoded. Its answer must be the parse path's (``redaction.view``) exactly — every value of
the same type, floats marked alike, the same call marker and the same ``aj.redacted``
digest — or None (the caller then parses). Checked on random function calls: random
arguments (nested values, floats, integers beyond 64 bits, text beyond the BMP, lone
surrogates, malformed text), random extra fields, subclasses of JSON's types, and tool
rules with ceilings.
"""

from __future__ import annotations

import enum
import json
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agentjournal import Journal, events
from agentjournal.engine import codec
from agentjournal.engine.sealing import seal_event
from agentjournal.errors import CodecError, InvalidInput
from agentjournal.ledger import redaction

NOW = datetime(2026, 12, 1, 11, 0, 0, 123456, tzinfo=UTC)


class Level(enum.IntEnum):
    HIGH = 3


class Tag(str):
    pass


def _text() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=8),
        st.sampled_from(["", "order", "é", "\U0001f600", "\ud800", "a\x00b", '"\\']),
    )


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1.0, 1e16, 1e-7, 5e-324, 1.7976931348623157e308, 2**53 + 1]),
    _text(),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(_text(), inner, max_size=3)
    ),
    max_leaves=10,
)
_odd = st.sampled_from([Level.HIGH, Tag("tag"), float("nan"), (1, 2)])


def _arguments() -> st.SearchStrategy[Any]:
    as_text = st.dictionaries(_text(), _values, max_size=4).map(
        lambda value: json.dumps(value, ensure_ascii=False)
    )
    return st.one_of(
        as_text,
        st.sampled_from(["", "{", "[1]", '{"a": NaN}', '{"a": 1e999}', '{"a":1,"a":2}', "{}"]),
        st.none(),
        st.integers(),
    )


@st.composite
def _items(draw: st.DrawFn) -> dict[str, Any]:
    item: dict[str, Any] = {
        "arguments": draw(_arguments()),
        "call_id": draw(st.one_of(st.just("call_1"), _text())),
        "name": draw(st.one_of(st.just("lookup_order"), _text())),
        "type": "function_call",
    }
    if draw(st.booleans()):
        item["id"] = draw(_text())
    for key in draw(st.lists(_text(), max_size=2)):
        item.setdefault(key, draw(st.one_of(_values, _odd)))
    return item


@st.composite
def _metadata(draw: st.DrawFn) -> dict[str, str]:
    metadata: dict[str, str] = {}
    rule = draw(
        st.one_of(
            st.none(),
            st.just("null"),
            st.just("{"),
            st.dictionaries(
                _text(), st.sampled_from(["$.order_id", "$.note", "$.x[0]", "$"]), max_size=2
            ).map(lambda ceilings: json.dumps({"scope": "any", "ceilings": ceilings})),
        )
    )
    if rule is not None:
        metadata[events.TOOL_RULE_KEY] = rule
    return metadata


def _typed(value: Any) -> Any:
    """``value`` with every node's exact type beside it (``==`` alone takes 1 for 1.0)."""
    if isinstance(value, dict):
        return ("dict", [(key, _typed(item)) for key, item in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(item) for item in value])
    return (type(value).__name__, repr(value))


def _encoded(item: dict[str, Any]) -> codec.EncodedEvent | None:
    try:
        return codec.encode_item(item, message_index=7, author="billing", timestamp=NOW)
    except CodecError:
        return None


_CALL = {"call_id": "call_1", "name": "lookup_order", "type": "function_call"}
_RULE = {events.TOOL_RULE_KEY: json.dumps({"scope": "x", "ceilings": {"n": "$.n"}})}


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(_items(), _metadata())
# Floats that orjson and json print differently (1e-7 / 1e-07), in the arguments and beside.
@example({**_CALL, "arguments": '{"n": 1e-7, "m": [0.5, -0.0]}', "x": 1e-7}, _RULE)
@example({**_CALL, "arguments": '{"n": 123456789012345678901}', "x": [2**64, 1.5]}, _RULE)
def test_a_view_built_from_the_item_is_the_parsed_view(
    item: dict[str, Any], metadata: dict[str, str]
) -> None:
    encoded = _encoded(item)
    if encoded is None:
        return  # the codec refuses it: nothing is written, nothing is viewed
    assert encoded.body is not None
    assert json.dumps(encoded.body).encode() == encoded.data
    built = redaction.item_view(encoded.type, encoded.body, item, metadata)
    try:
        parsed = redaction.view(encoded.type, encoded.data, metadata)
    except ValueError:
        # The parse path refuses it (arguments that are not text, say): so must sealing,
        # with the same error, which only the parse path gives.
        assert built is None
        return
    plain = all(type(value) in (str, int, bool, float, dict, list) for value in item.values())
    if plain and all(value is not None for value in item.values()):
        assert built is not None, "a plain call must take the fast path"
    if built is None:
        return
    assert parsed is not None
    assert _typed(built) == _typed(parsed)
    assert _typed(redaction.shown_call(built)) == _typed(redaction.shown_call(parsed))
    assert redaction.view_digest(built) == redaction.view_digest(parsed)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(_items(), _metadata())
def test_sealing_with_and_without_the_encoded_item_writes_the_same_metadata(
    item: dict[str, Any], metadata: dict[str, str]
) -> None:
    encoded = _encoded(item)
    if encoded is None or encoded.body is None:
        return
    id_ = uuid.UUID(int=7)
    slow, fast = dict(metadata), dict(metadata)
    try:
        a = seal_event("AgentSession-s", 3, id_, encoded.type, encoded.data, slow, "0" * 64)
    except ValueError as error:
        message = re.escape(str(error))
        with pytest.raises(ValueError, match=f"^{message}$"):
            seal_event(
                "AgentSession-s",
                3,
                id_,
                encoded.type,
                encoded.data,
                fast,
                "0" * 64,
                encoded=(encoded.body, item),
            )
        return
    b = seal_event(
        "AgentSession-s",
        3,
        id_,
        encoded.type,
        encoded.data,
        fast,
        "0" * 64,
        encoded=(encoded.body, item),
    )
    assert (a, slow) == (b, fast)


def test_what_the_fast_path_leaves_to_the_parse() -> None:
    """Subclasses, a non-finite float and other types than a tool call are not vouched for."""
    call = {"arguments": '{"a": 1}', "call_id": "c", "name": "t", "type": "function_call"}
    encoded = _encoded(call)
    assert encoded is not None
    assert encoded.body is not None
    assert redaction.item_view(encoded.type, encoded.body, call, {}) is not None
    for odd in (Level.HIGH, Tag("x"), float("inf")):
        assert redaction.item_view(encoded.type, encoded.body, {**call, "x": odd}, {}) is None
    viewed = {events.VIEWED_KEY: "1"}
    assert redaction.item_view(encoded.type, encoded.body, call, viewed) is None
    assert redaction.item_view("ToolResultReceived", encoded.body, call, {}) is None


_any_json = st.recursive(
    st.one_of(
        _scalars,
        st.sampled_from([float("nan"), float("inf"), -float("inf"), Level.HIGH, Tag("t")]),
        st.sampled_from([1.5, 2.0]).map(lambda value: type("F", (float,), {})(value)),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(
            st.one_of(_text(), st.integers(), st.none(), st.booleans()), inner, max_size=3
        ),
    ),
    max_leaves=12,
)


def _outcome(encode: Any, value: Any) -> tuple[str, str]:
    try:
        return "text", encode(value)
    except (TypeError, ValueError) as error:
        return "refused", type(error).__name__


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.one_of(st.dictionaries(_text(), _any_json, max_size=4), st.lists(_any_json, max_size=4)))
def test_the_prebuilt_encoders_print_what_json_prints(value: Any) -> None:
    for separators, allow_nan in (((", ", ": "), True), ((",", ":"), False)):
        reference = json.JSONEncoder(separators=separators, allow_nan=allow_nan).encode
        ours = codec.json_encoder(separators=separators, allow_nan=allow_nan)
        assert _outcome(ours, value) == _outcome(reference, value)


def test_a_circular_item_is_refused_as_before() -> None:
    item: dict[str, Any] = {"type": "message", "role": "user", "content": "hi"}
    item["self"] = item
    with pytest.raises(CodecError, match="circular reference"):
        codec.encode_item(item, message_index=0, author=None, timestamp=NOW)


_keys = st.one_of(
    _text(),
    st.sampled_from(
        ["", "$schema.x", "$record.y", "$schema_version", "a\x00$schema.x", "aj.index"]
    ),
    st.integers(),
)
_meta_values = st.one_of(
    _text(),
    st.integers(),
    st.none(),
    # Long enough to cross the size limit (made 2,048 bytes for the test) with escapes or not.
    st.tuples(st.sampled_from(["x", "\x01", "\u00e9", '"']), st.integers(0, 2100)).map(
        lambda pair: pair[0] * pair[1]
    ),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _meta_values, max_size=5), st.binary(max_size=64))
def test_the_quick_metadata_check_decides_as_the_exact_one(
    metadata: dict[Any, Any], data: bytes
) -> None:
    from agentjournal.store import NewEvent
    from agentjournal.store import _append as base  # the module whose checks read the limit

    event = NewEvent(type="T", data=data, metadata=metadata, id=uuid.UUID(int=1))

    def outcome() -> str:
        try:
            base._validate_event("s", event)
        except (InvalidInput, UnicodeError) as error:
            return f"{type(error).__name__}: {error}"
        return "valid"

    names = vars(base)
    limit, fits = names["MAX_EVENT_BYTES"], base._metadata_fits
    names["MAX_EVENT_BYTES"] = 2048
    try:
        quick = outcome()
        base._metadata_fits = lambda metadata, fixed: False
        exact = outcome()
    finally:
        names["MAX_EVENT_BYTES"], base._metadata_fits = limit, fits
    assert quick == exact


async def test_items_written_here_are_marked_plain_only_when_orjson_reads_them_exactly(
    tmp_path: Path,
) -> None:
    """The writer marks each item it adds ``plain`` (no 19 digits in a row) once, so warm reads
    skip the check; an item with a big integer is not marked and still reads back exact."""
    big: Any = {
        "type": "message",
        "role": "user",
        "content": "n",
        "n": 2**70,
        "m": 12345678901234567890,
    }
    small: Any = {"type": "message", "role": "user", "content": "é", "x": [1.5, -0.0, 1e-7, None]}
    call: Any = {"arguments": '{"n": 99}', "call_id": "c1", "name": "t", "type": "function_call"}
    async with await Journal.open(f"sqlite:///{tmp_path / 'plain.db'}") as journal:
        session = journal.session("plain")
        await session.add_items([big, small, call])
        entries = session._core.tree.timeline.latest(None)
        assert [entry.plain for entry in entries] == [False, True, True]
        for _ in range(2):  # the first hand-out, then the warm path that parses again
            items = await session.get_items()
            assert json.dumps(items) == json.dumps([big, small, call])
            assert [type(value) for value in items[0].values()] == [str, str, str, int, int]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_text(), st.one_of(_text(), _meta_values), max_size=6))
def test_stored_metadata_bytes_are_what_the_json_encoder_printed(metadata: dict[str, Any]) -> None:
    """``encode_metadata`` (its C encoder made once) prints the bytes
    ``JSONEncoder(separators=(",", ":"), ensure_ascii=False)`` prints, and refuses what
    it refuses (a lone surrogate at the UTF-8 step, a value that is no text)."""
    from types import MappingProxyType

    from agentjournal.store.contract import encode_metadata

    reference = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

    def outcome(encode: Any) -> tuple[str, Any]:
        try:
            return "bytes", encode()
        except (TypeError, ValueError) as error:
            return "refused", type(error).__name__

    expected = outcome(lambda: reference(metadata).encode())
    assert outcome(lambda: encode_metadata(metadata)) == expected
    assert outcome(lambda: encode_metadata(MappingProxyType(metadata))) == expected


_CANONICAL_KINDS = [
    *("user", "assistant", "function_call", "function_call_output", "reasoning"),
    *("mcp_approval_request", "mcp_approval_response"),
]


@st.composite
def _canonical_items(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(_CANONICAL_KINDS))
    text = draw(_text())
    if kind in ("user", "assistant"):
        item: dict[str, Any] = {"type": "message", "role": kind, "content": text}
    elif kind == "function_call":
        item = {**_CALL, "arguments": draw(_arguments())}
    elif kind == "function_call_output":
        item = {"type": kind, "call_id": "call_1", "output": draw(st.one_of(_text(), _values))}
    elif kind == "reasoning":
        item = {"type": kind, "summary": [{"type": "summary_text", "text": text}]}
    elif kind == "mcp_approval_request":
        item = {"type": kind, "id": text, "name": "t", "arguments": text, "server_label": "s"}
    else:
        item = {"type": kind, "approval_request_id": text, "approve": draw(st.booleans())}
    if draw(st.booleans()):
        item["id"] = draw(_text())
    return item


@settings(max_examples=150, deadline=None)
@given(_canonical_items(), st.one_of(st.none(), _text()))
@example({"type": "message", "role": "user", "content": '"\\\ud800é\U0001f600'}, "é")
def test_a_canonical_event_is_what_json_prints_of_its_body(
    item: dict[str, Any], author: str | None
) -> None:
    try:
        encoded = codec.encode_item(item, message_index=3, author=author, timestamp=NOW)
    except CodecError:
        return
    assert encoded.body is not None
    assert json.dumps(encoded.body).encode() == encoded.data


def _exact_reference(item: dict[str, Any]) -> tuple[str, str]:
    """What ``exact_json`` gave before its flat-text fast path: print, then parse the text
    back and compare (``text`` and the text, or ``refused``)."""
    try:
        text = json.dumps(item, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return "refused", ""
    return ("text", text) if json.loads(text) == item else ("refused", "")


def _exact_outcome(item: dict[str, Any]) -> tuple[str, str]:
    try:
        return "text", codec.exact_json(item)
    except CodecError:
        return "refused", ""


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.dictionaries(_text(), _text(), max_size=6),  # the fast path's: text only
        st.dictionaries(st.one_of(_text(), st.sampled_from([Tag("k")])), _text(), max_size=4),
        st.dictionaries(_text(), st.one_of(_text(), _odd, _scalars), max_size=4),
        st.dictionaries(_text(), _values, max_size=4),
    )
)
@example({"type": "function_call_output", "call_id": "c\ud800", "output": "é\U0001f600"})
@example({"output": Tag("tag")})
@example({Tag("k"): "v"})
def test_an_item_of_text_only_is_printed_without_a_parse_as_the_parse_would_decide(
    item: dict[str, Any],
) -> None:
    """``exact_json`` skips the parse back for a dict of ``str`` keys and values only: the
    same text, and the same refusals, as printing then comparing the parse."""
    assert _exact_outcome(item) == _exact_reference(item)
