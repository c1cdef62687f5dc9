"""``agentjournal._fastjson.loads`` gives exactly what ``json.loads`` gives.

It parses with ``orjson`` where that is known to agree and with ``json``
elsewhere; equal is not enough (``1 == 1.0``), so values are compared with
their types, key order and float bits.
"""

from __future__ import annotations

import json
import math
import re
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal._fastjson import loads, loads_bytes, loads_utf8


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=20,
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(_values, st.booleans())
def test_random_documents_parse_alike(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))
    assert _same(loads(text), json.loads(text))


@pytest.mark.parametrize(
    "text",
    [
        "18446744073709551616",  # orjson would give a float
        "-9223372036854775809",
        "[9223372036854775807,-9223372036854775808,1234567890123456789]",
        '{"id":"call_1234567890123456789012","n":123456789012345678}',
        "1e400",
        "-1e400",
        "NaN",
        "[Infinity,-Infinity]",
        '"\\ud800"',
        '"\\udc00\\ud83d\\ude00"',
        "-0.0",
        "0.1e-400",
        "123456789012345678901234567890.5",
        "1.7976931348623157e308",
        "5e-324",
        '{"a":1,"a":2,"b":3,"a":4}',
        '"\\u0000\\u001f\\"\\\\\\/"',
        "\ufeff[]",
        '"lone \ud800 raw"',
        " [1, 2.50, 1E5, 1e-7] ",
    ],
)
def test_edge_cases_parse_alike(text: str) -> None:
    try:
        expected = json.loads(text)
    except ValueError as error:
        with pytest.raises(type(error)):
            loads(text)
        return
    assert _same(loads(text), expected)


@pytest.mark.parametrize("text", ["", "[1,]", "{'a':1}", '{"a":1} x', "[1", "01"])
def test_what_json_refuses_is_refused(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        loads(text)


_EDGE_BYTES = [
    b'{"usage":{"total_tokens":"12"},"n":123456789012345678901}',
    b"\xef\xbb\xbf{}",  # a byte order mark: json reads it, orjson refuses it
    '{"a":"\u00e9"}'.encode("utf-16"),  # another encoding json detects
    b'{"a":"\\ud800"}',
    b'{"a":NaN}',
    b"\xff\xfe\x00",
    b'{"a":1} x',
    b"",
]


@pytest.mark.parametrize("data", _EDGE_BYTES)
def test_bytes_parse_alike(data: bytes) -> None:
    try:
        expected = json.loads(data)
    except ValueError as error:
        with pytest.raises(type(error)):
            loads_bytes(data)
        return
    assert _same(loads_bytes(data), expected)


@pytest.mark.parametrize("data", _EDGE_BYTES)
def test_utf8_bytes_parse_as_their_decoded_text_does(data: bytes) -> None:
    try:
        expected = json.loads(data.decode())
    except ValueError as error:  # UnicodeDecodeError included
        with pytest.raises(type(error)):
            loads_utf8(data)
        return
    assert _same(loads_utf8(data), expected)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(_values)
def test_random_byte_documents_parse_alike(value: Any) -> None:
    data = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    try:
        expected = json.loads(data)
    except ValueError as error:
        with pytest.raises(type(error)):
            loads_bytes(data)
        return
    assert _same(loads_bytes(data), expected)
    try:
        text = data.decode()
    except UnicodeDecodeError:  # a lone surrogate: not UTF-8, as the store's metadata must be
        with pytest.raises(UnicodeDecodeError):
            loads_utf8(data)
        return
    assert _same(loads_utf8(data), json.loads(text))


def _strict(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("text", ["NaN", "[Infinity]", '{"a":-Infinity}', '{"a":1}', "1e400"])
def test_a_strict_fallback_refuses_what_it_refuses(text: str) -> None:
    try:
        expected = _strict(text)
    except ValueError as error:
        with pytest.raises(type(error), match=re.escape(str(error))):
            loads(text, _strict)
        return
    assert _same(loads(text, _strict), expected)
