"""``ModelResponse.decode`` reads a body of the plain shape (``tokens.plain_body``) without
its field-by-field checks: the same record as the full reading on random valid bodies, and
the same refusal (type and message) on malformed ones."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from agentjournal import tokens
from agentjournal.tokens import ModelResponse, plain_body

_COUNTS = ("input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens")


def _full(data: bytes) -> Any:
    """What ``decode`` gives without its plain reading: the record, or (type, message)."""
    with pytest.MonkeyPatch.context() as full:
        full.setattr(tokens, "plain_body", lambda _: None)
        return _outcome(data)


def _outcome(data: bytes) -> Any:
    try:
        return ModelResponse.decode(data)
    except ValueError as error:
        return type(error), str(error)


def _random_body(rng: random.Random) -> dict[str, Any]:
    def count() -> int | str:
        value = rng.choice([0, 1, 7, 2**31, 2**63 - 1, rng.randrange(10**6)])
        return str(value) if rng.random() < 0.5 else value

    def text() -> str:
        return "".join(rng.choice('ab é🙂"\\\n\u2028') for _ in range(rng.randrange(6)))

    body: dict[str, Any] = {"session_id": text(), "agent": text(), "ended_at": text()}
    for key in ("model", "system", "response_id", "started_at"):
        if rng.random() < 0.7:
            body[key] = text() if rng.random() < 0.7 else None
    body["usage"] = {k: count() for k in (*_COUNTS, "total_tokens") if rng.random() < 0.8}
    if rng.random() < 0.3:
        body["usage"]["model"] = text()
    if rng.random() < 0.8:
        body["outputs"] = {text(): count() for _ in range(rng.randrange(4))}
    keys = list(body)
    rng.shuffle(keys)
    return {k: body[k] for k in keys}


def test_a_random_plain_body_is_read_as_the_full_reading_reads_it() -> None:
    rng = random.Random(33)
    for _ in range(500):
        data = json.dumps(_random_body(rng), ensure_ascii=rng.random() < 0.5).encode()
        assert plain_body(data) is not None
        assert _outcome(data) == _full(data)
    written = ModelResponse.decode(data)
    assert ModelResponse.decode(written.encode()) == written


def _with(**changes: Any) -> bytes:
    body: dict[str, Any] = {
        "session_id": "s",
        "agent": "a",
        "model": "m",
        "system": None,
        "response_id": "r",
        "usage": {"input_tokens": "3", "output_tokens": 4, "total_tokens": "7"},
        "started_at": None,
        "ended_at": "t",
        "outputs": {"message": 1},
    }
    body.update(changes)
    return json.dumps({k: v for k, v in body.items() if v is not _GONE}).encode()


_GONE = object()

MALFORMED = [
    _with(usage={"total_tokens": 10**20}),
    _with(usage={"total_tokens": 2**64}),
    _with(usage={"total_tokens": str(10**20)}),
    _with(usage={"total_tokens": True}),
    _with(usage={"total_tokens": -1}),
    _with(usage={"total_tokens": 1.5}),
    _with(usage={"total_tokens": "1.5"}),
    _with(usage={"total_tokens": "\u00b2"}),
    _with(usage={"total_tokens": "\u0663"}),
    _with(usage={"total_tokens": None}),
    _with(usage=[]),
    _with(usage=_GONE),
    _with(outputs={"message": False}),
    _with(outputs={"message": float("nan")}),
    _with(outputs={"message": float("inf")}),
    _with(outputs=None),
    _with(outputs=[1]),
    _with(outputs=_GONE),
    _with(agent="\ud800"),
    _with(agent=None),
    _with(agent=3),
    _with(agent=_GONE),
    _with(session_id=_GONE),
    _with(ended_at=None),
    _with(model=3),
    _with(model=_GONE),
    _with(started_at=["x"]),
    b"\xef\xbb\xbf" + _with(),
    _with().replace(b'"agent"', b'"agent":"x","agent"'),
    b"[]",
    b"nul",
    b'"x"',
    b"{}",
    b'{"usage":{}}',
    b"\xff{}",
    b"",
]


@pytest.mark.parametrize("data", MALFORMED, ids=range(len(MALFORMED)))
def test_an_odd_body_is_read_or_refused_as_the_full_reading_does(data: bytes) -> None:
    assert _outcome(data) == _full(data)
