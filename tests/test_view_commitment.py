"""``redaction.view_commitment``: the verifier's one-pass view check (a tool call's data
parsed by ``orjson`` and digested as its view is built) gives exactly what the exact path
(``view`` then ``view_digest`` and ``shown_call``) gives, on every input: the same digest,
the same call marker, the same error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal import events
from agentjournal._digests import value_digest
from agentjournal.audit.verify._containment import call_marker
from agentjournal.audit.verify._integrity import Markers, _view_problem
from agentjournal.ledger import redaction
from agentjournal.ledger.redaction import (
    shown_call,
    strict_view_commitment,
    view,
    view_commitment,
    view_digest,
)
from agentjournal.records import Record

TOOL_CALLS = "AssistantToolCallsGenerated"
RULE = {events.TOOL_RULE_KEY: json.dumps({"ceilings": {"spend": "amount", "to": "who.name"}})}


def _exact(type_: str, data: bytes, metadata: dict[str, str]) -> Any:
    try:
        shown = view(type_, data, metadata)
    except ValueError as error:
        return ("error", str(error))
    return None if shown is None else (view_digest(shown), shown_call(shown))


def _fast(type_: str, data: bytes, metadata: dict[str, str]) -> Any:
    try:
        return view_commitment(type_, data, metadata)
    except ValueError as error:
        return ("error", str(error))


def _data(arguments: Any, item: Any, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"call_id": "c1", "tool_name": "t", "arguments": arguments, "tool_kind": "function"}
        ],
        "message_index": 1,
        "timestamp": "2026-12-06T00:08:34.065342Z",
        "extensions": {
            "openai": {"item_json": item if isinstance(item, str) else json.dumps(item)}
        },
        **(extra or {}),
    }


def _call(arguments: Any = '{"amount": 5, "who": {"name": "x"}}', **fields: Any) -> dict[str, Any]:
    return {"type": "function_call", "call_id": "c1", "name": "t", "arguments": arguments, **fields}


def _assert_same(data: bytes, metadata: dict[str, str] | None = None) -> None:
    for meta in ({} if metadata is None else metadata, RULE):
        exact = _exact(TOOL_CALLS, data, meta)
        assert _fast(TOOL_CALLS, data, meta) == exact
        _assert_strict(data, meta, exact)
        _assert_shared_marker_is_containments(data, meta)


def _strict_json(data: bytes) -> bool:
    try:
        json.loads(data, parse_constant=_refused)
    except ValueError:
        return False
    return True


def _refused(name: str) -> Any:
    raise ValueError(name)


def _assert_strict(data: bytes, metadata: dict[str, str], exact: Any) -> None:
    """``strict_view_commitment`` gives the exact answer, and only for strict JSON data."""
    strict = strict_view_commitment(TOOL_CALLS, data, metadata)
    if strict is not None:
        assert strict == exact
        assert _strict_json(data)


def _assert_shared_marker_is_containments(data: bytes, metadata: dict[str, str]) -> bool:
    """A call marker the integrity check leaves for containment is, in every field
    containment reads, the one containment computes from the record itself, which does not
    raise."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return False  # not UTF-8 text: the integrity check fails it before its view
    record = Record(
        "AgentSession-x",
        0,
        "00000000-0000-0000-0000-000000000000",
        TOOL_CALLS,
        text,
        "0" * 64,
        {**metadata, events.REDACTED_KEY: "x"},  # any commitment: the marker comes first
    )
    markers = Markers()
    _view_problem(record, markers)
    if id(record) in markers:
        computed, shared = call_marker(record, {}), markers[id(record)]
        assert {key: computed.get(key) for key in READ} == {key: shared.get(key) for key in READ}
    return id(record) in markers


READ = ("call_id", "kind", "name", "payload_digest", "ceilings")
"""What containment reads of a call's marker."""


def test_an_ordinary_tool_call_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    data = json.dumps(_data({"amount": 5}, _call())).encode()
    expected = _exact(TOOL_CALLS, data, RULE)
    assert expected[1] is not None
    assert expected[1]["ceilings"]["amount"] == {"int": 5}
    monkeypatch.setattr(redaction, "view", None)  # the exact path would fail
    assert view_commitment(TOOL_CALLS, data, RULE) == expected


@pytest.mark.parametrize(
    "data",
    [
        _data({"amount": 5, "who": {"name": "x", "tags": [1, None, True]}}, _call()),
        _data("text arguments", _call(), {"agent_name": "a", "n": -(2**63)}),
        _data([], _call(arguments="", id="fc_1", status="completed")),
        {**_data({"t": "12:30:00.5 ,1e5"}, _call(name="caf\u00e9")), "tool_calls": []},
        {
            **_data({}, _call()),
            "tool_calls": [{"call_id": "c1"}, {"call_id": "c2", "arguments": {"b": 2}}],
        },
    ],
    ids=["nested", "scalars", "empty", "no-calls", "two-calls"],
)
def test_a_tool_call_as_the_sdk_writes_it_takes_the_straight_path(
    data: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded = json.dumps(data).encode()
    expected = _exact(TOOL_CALLS, encoded, {})
    assert expected[0] != "error"
    monkeypatch.setattr(redaction, "view", None)  # neither other path may run
    monkeypatch.setattr(redaction, "_fast_tool_calls", None)
    assert view_commitment(TOOL_CALLS, encoded, {}) == expected


_PLAIN = _data({"amount": 5}, _call())


@pytest.mark.parametrize(
    ("data", "metadata"),
    [
        (_PLAIN, RULE),
        (_data({"amount": 1.5}, _call()), {}),
        (_data({"amount": 2**64}, _call()), {}),
        (_data({"amount": 5}, _call(), {"score": 0.5}), {}),
        (_data({"amount": 5}, _call(), {"nested": {"a": 1}}), {}),
        (_data({"amount": 5}, _call(extra=1)), {}),
        (_data({"amount": 5}, {"type": "custom_tool_call", "call_id": "c1", "input": "x"}), {}),
        (_data({"amount": 5}, "not json"), {}),
        ({**_PLAIN, "tool_calls": [{**_PLAIN["tool_calls"][0], "more": [1]}]}, {}),
        ({**_PLAIN, "extensions": {**_PLAIN["extensions"], "other": {}}}, {}),
        ({**_PLAIN, "extensions": {"openai": {**_PLAIN["extensions"]["openai"], "x": "y"}}}, {}),
    ],
    ids=[
        "rule",
        "float-argument",
        "huge-integer",
        "float-field",
        "nested-field",
        "item-number",
        "custom-call",
        "item-not-json",
        "call-list-field",
        "other-extension",
        "other-openai-field",
    ],
)
def test_anything_else_leaves_the_straight_path_and_gets_the_exact_answer(
    data: dict[str, Any], metadata: dict[str, str]
) -> None:
    encoded = json.dumps(data).encode()
    with pytest.raises((redaction._Unsure, ValueError)):
        redaction._sdk_tool_call(encoded, metadata)
    assert _fast(TOOL_CALLS, encoded, metadata) == _exact(TOOL_CALLS, encoded, metadata)


@pytest.mark.parametrize(
    "rule",
    [
        {},
        {"ceilings": {}},
        {"ceilings": {"spend": 5}},
        {"ceilings": None},
        {"ceilings": {"spend": "amount"}},
        ["not", "a", "rule"],
    ],
)
@pytest.mark.parametrize("arguments", ['{"amount": 5}', "not json", "", '{"amount": 1.5}'])
def test_a_rule_with_or_without_ceilings_gives_the_exact_marker(rule: Any, arguments: str) -> None:
    """A rule that names no ceiling (or names them wrongly) has no ceiling inputs, as the
    exact path computes them; one that names a ceiling has its input."""
    data = json.dumps(_data({"amount": 5}, _call(arguments))).encode()
    metadata = {events.TOOL_RULE_KEY: json.dumps(rule)}
    fast = _fast(TOOL_CALLS, data, metadata)
    assert fast == _exact(TOOL_CALLS, data, metadata)
    assert (fast[1]["ceilings"] != {}) is (rule == {"ceilings": {"spend": "amount"}})


_ODD = [
    '{"amount": 1.5}',  # floats in the nested arguments are the ceilings' business only
    1.5,
    -0.0,
    1e16,
    2**63,
    2**64 + 1,
    -(2**70),
    10**30,
    "a\ud800",
    "\U0001f600",
    {"\U0001f600": 1, "\uffff": 2},
    [[[[[]]]]],
    None,
    True,
]


@pytest.mark.parametrize("odd", _ODD, ids=repr)
def test_odd_values_anywhere_give_the_exact_answer(
    odd: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    shapes = [
        _data(odd, _call()),
        _data({"a": odd}, _call()),
        _data("x", _call(arguments=odd)),
        _data("x", _call(extra=odd)),
        _data("x", _call(), {"message_index": odd}),
        _data("x", _call(), {"\U0001f600": odd}),
        _data("x", {"type": "custom_tool_call", "call_id": "c1", "name": "t", "input": odd}),
        _data("x", {"type": "function_call", "call_id": odd, "name": odd}),
        _data("x", [odd]),
    ]
    for shape in shapes:
        for text in (
            json.dumps(shape),
            json.dumps(shape, ensure_ascii=False, indent=1),
            json.dumps(shape, separators=(",", ":")),
        ):
            _assert_same(text.encode("utf-8", "surrogatepass"))


_ADVERSARIAL = [
    b"[]",
    b"5",
    b'"text"',
    b"null",
    b"",
    b"{",
    b"\xef\xbb\xbf{}",
    '{"tool_calls": []}'.encode("utf-16"),
    b'{"tool_calls": 5}',
    b'{"tool_calls": "ab"}',
    b'{"tool_calls": [5, {"arguments": NaN}]}',
    b'{"tool_calls": [{"arguments": Infinity}]}',
    b'{"tool_calls": [{"arguments": -Infinity}]}',
    b'{"tool_calls": [{"arguments": 1e400}]}',
    b'{"tool_calls": [{"arguments": 1' + b"0" * 400 + b"}]}",
    b'{"tool_calls": [{"arguments": 12345678901234567890}]}',
    b'{"tool_calls": [{"arguments": 1E5}]}',
    b'{"tool_calls": [{"arguments": 1, "arguments": 2.5}], "tool_calls": []}',
    b'{"a": 1, "a": 2, "tool_calls": [{"arguments": {"k": 1, "k": "v"}}]}',
    b'{"tool_calls": [{"arguments": "\\ud800"}]}',
    b'{"tool_calls": [{"arguments": "\\udfff\\ud800"}]}',
    b'{"tool_calls": [{"arguments": "\xed\xa0\x80"}]}',
    b'{"tool_calls": [{"arguments": "\xff"}]}',
    b'{"extensions": 5}',
    b'{"extensions": {"openai": 5}}',
    b'{"extensions": {"openai": {"item_json": 5}}}',
    b'{"extensions": {"openai": {"item_json": "NaN"}}}',
    b'{"extensions": {"openai": {"item_json": "\\ufeff{}"}}}',
    b'{"extensions": {"openai": {"item_json": "{\\"type\\":\\"function_call\\",'
    b'\\"call_id\\":\\"c\\",\\"x\\":1.0}"}}}',
    b'{"extensions": {"openai": {"item_json": "{\\"type\\":\\"function_call\\",'
    b'\\"call_id\\":\\"c\\",\\"x\\":\\n1.0}"}}}',
    b'{"extensions": {"openai": {"item_json": "{\\"type\\":\\"function_call\\",'
    b'\\"call_id\\":\\"c\\",\\"x\\"\\u003a1\\u002e5}"}}}',
    b'{"extensions": {"openai": {"item_json": "{\\"type\\":\\"function_call\\",'
    b'\\"call_id\\":\\"c\\",\\"arguments\\":{\\"amount\\":2}}"}}}',
    b'{"extensions": {"openai": {"item_json": "{\\"type\\":\\"function_call\\",'
    b'\\"call_id\\":\\"c\\",\\"name\\":\\"\\ud800\\"}"}}}',
    b'{"extensions": {"openai": {"item_json": "{\\"type\\":\\"function_call\\",'
    b'\\"call_id\\":\\"c\\",\\"withheld\\":\\"x\\"}"}}}',
    b'{"extensions": {"openai": {"item_json": "{\\"type\\":\\"function_call\\",'
    b'\\"call_id\\":\\"c\\",\\"arguments\\":\\"\\"}"}}}',
    b'{"tool_calls": [{"arguments": ' + b"[" * 300 + b"]" * 300 + b"}]}",
    b'{"tool_calls": [{"arguments": ' + b"[" * 2000 + b"]" * 2000 + b"}]}",
    b'{"tool_calls": [{"arguments": 1}]}' + b" \n",
    b'{"tool_calls": [{"arguments": 1}]} x',
    b'{"t": "a,1.5 b\\":2e3 [3.0"}',
    b'{"tool_calls" : [ {"arguments" :\n 1.5 } ] }',
]


@pytest.mark.parametrize("data", _ADVERSARIAL, ids=repr)
def test_adversarial_data_gives_the_exact_answer(data: bytes) -> None:
    _assert_same(data)
    _assert_same(data, {events.TOOL_RULE_KEY: "not json"})


def test_other_types_and_viewed_data_give_the_exact_answer() -> None:
    data = json.dumps(_data({"amount": 5}, _call())).encode()
    for type_ in [*sorted(redaction.VIEWED), "Unknown", "SessionStarted"]:
        assert _fast(type_, data, {}) == _exact(type_, data, {})
    assert view_commitment(TOOL_CALLS, data, {events.VIEWED_KEY: "1"}) is None


_leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()  # NaN and the infinities too: json prints them as NaN, Infinity
    | st.text(max_size=8)
    | st.sampled_from(["a\ud800", "\U0001f600", '\x1f\u2028"\\', "1.5", ",1e5", '":2.0'])
)
_keys = st.text(max_size=6) | st.sampled_from(
    ["arguments", "call_id", "type", "name", "\U0001f600", "\ufb01", "function_call"]
)
_values = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
    max_leaves=16,
)
_items = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["function_call", "custom_tool_call", "message"]) | _values,
        "call_id": st.text(max_size=4) | _values,
        "name": st.text(max_size=4) | _values,
        "arguments": st.just('{"amount": 3}') | st.text(max_size=8) | _values,
        "id": st.text(max_size=4) | _values,
    },
)


@settings(max_examples=400, deadline=None)
@given(
    arguments=_values,
    item=_items | _values,
    extra=st.dictionaries(_keys, _values, max_size=2),
    spaced=st.booleans(),
)
def test_random_tool_calls_give_the_exact_answer(
    arguments: Any, item: Any, extra: dict[str, Any], spaced: bool
) -> None:
    body = _data(arguments, item, extra)
    text = json.dumps(body, ensure_ascii=spaced, indent=1 if spaced else None)
    _assert_same(text.encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None)
@given(
    base=_items,
    cut=st.integers(0, 400),
    insert=st.sampled_from(
        ["NaN", "1.5", "1e400", "9" * 20, "\\ud800", '"', "}", ",", "[", "\\u0031", "-0", " "]
    ),
)
def test_damaged_tool_call_data_gives_the_exact_answer(base: Any, cut: int, insert: str) -> None:
    text = json.dumps(_data({"amount": 1}, base))
    cut = min(cut, len(text))
    _assert_same((text[:cut] + insert + text[cut:]).encode("utf-8", "surrogatepass"))


@settings(max_examples=300, deadline=None)
@given(item=_items, rule=st.sampled_from([{}, RULE, {events.TOOL_RULE_KEY: "not json"}]))
def test_the_fast_paths_call_marker_is_the_exact_one_key_for_key_in_order(
    item: dict[str, Any], rule: dict[str, str]
) -> None:
    """The fast path leaves the item's own digest out of a function call's marker (the item
    text's digest replaces it): the marker it shares is still the exact path's, in the same
    order of keys, whatever the item holds (text fields or not, a call or not)."""
    data = json.dumps(_data({"amount": 1}, item)).encode("utf-8", "surrogatepass")
    fast, exact = _fast(TOOL_CALLS, data, rule), _exact(TOOL_CALLS, data, rule)
    assert fast == exact
    if exact[0] != "error" and exact[1] is not None:
        assert list(fast[1].items()) == list(exact[1].items())


def test_a_text_only_calls_marker_digests_its_item_text() -> None:
    """The ``withheld`` of a function call's marker on the fast path is the digest of the
    item's text, never left empty."""
    data = json.dumps(_data({"amount": 5}, _call())).encode()
    made = view_commitment(TOOL_CALLS, data, {})
    assert made is not None
    assert made[1] is not None
    item_text = json.loads(data)["extensions"]["openai"]["item_json"]
    assert made[1]["withheld"] == value_digest(item_text)


def test_the_strict_answer_is_given_for_strict_json_only() -> None:
    plain = json.dumps(_data('{"amount": 5}', _call())).encode()
    assert strict_view_commitment(TOOL_CALLS, plain, {}) == view_commitment(TOOL_CALLS, plain, {})
    with_nan = plain.replace(b"{", b'{"temperature": NaN, ', 1)
    assert view_commitment(TOOL_CALLS, with_nan, {}) is not None  # the general path takes it
    assert strict_view_commitment(TOOL_CALLS, with_nan, {}) is None
    assert strict_view_commitment(TOOL_CALLS, plain, {events.VIEWED_KEY: "1"}) is None
    assert strict_view_commitment("UserMessageReceived", b'{"content": "hi"}', {}) is None


@pytest.mark.parametrize(
    ("change", "shared"),
    [
        (lambda data: b"\xef\xbb\xbf" + data, False),  # a byte order mark: body refuses it
        (lambda data: data.decode().encode("utf-16-le"), False),  # zero bytes: read as UTF-16
        (lambda data: data.replace(b"{", b'{"temperature": NaN, ', 1), False),
        (lambda data: data.replace(b"{", b'{"temperature": -Infinity, ', 1), False),
        (lambda data: data.replace(b"{", b'{"temperature": 0.5, ', 1), True),  # a float
        (lambda data: data.replace(b'"message_index": 1', b'"message_index": 1.0'), True),
    ],
)
def test_a_marker_made_by_the_general_path_is_shared_only_as_containment_computes_it(
    change: Any, shared: bool
) -> None:
    """Where the view's strict path stands aside (a float, ``NaN``, a byte order mark), the
    general path's marker is shared where the record's body parses, and not elsewhere."""
    data = change(json.dumps(_data('{"amount": 5}', _call())).encode())
    assert strict_view_commitment(TOOL_CALLS, data, {}) is None  # the general path decides
    for metadata in ({}, RULE):
        assert _assert_shared_marker_is_containments(data, metadata) is shared
    # a rule that is not JSON: containment reads no rule, the view read none either
    assert not _assert_shared_marker_is_containments(data, {events.TOOL_RULE_KEY: "not json"})
