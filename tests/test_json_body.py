"""``json_body`` (an event's data as a JSON object) parses as ``json.loads`` does, through
``loads_bytes``: the same object, and the same refusal, message included."""

from __future__ import annotations

import json

import pytest

from agentjournal.errors import CodecError
from agentjournal.events._codec import json_body

BODIES = [
    b'{"a":1,"b":[1.5,"x"],"c":{"d":null}}',
    b'{"big":123456789012345678901234567890}',
    b'{"n":NaN,"i":Infinity}',
    b'{"s":"\\ud800"}',
    b'{"a":1,"a":2}',
    b'\xef\xbb\xbf{"bom":true}',
    '{"t":"caf\u00e9"}'.encode("utf-16"),
]
REFUSED = [b"[1]", b'"x"', b"nul", b"{", b"", b"\xff{}", b'{"a":1}x']


@pytest.mark.parametrize("data", BODIES, ids=range(len(BODIES)))
def test_a_body_is_what_json_reads(data: bytes) -> None:
    body = json_body(data, "T")
    expected = json.loads(data)
    assert json.dumps(body) == json.dumps(expected)
    assert [type(v) for v in body.values()] == [type(v) for v in expected.values()]


@pytest.mark.parametrize("data", REFUSED, ids=range(len(REFUSED)))
def test_what_is_no_object_is_refused_as_before(data: bytes) -> None:
    try:
        parsed = json.loads(data)
    except ValueError as error:
        message = f"T data is not JSON: {error}"
    else:
        assert not isinstance(parsed, dict)
        message = "T data is not a JSON object"
    with pytest.raises(CodecError) as refused:
        json_body(data, "T")
    assert str(refused.value) == message
