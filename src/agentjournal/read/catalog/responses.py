"""What the catalog counts of a ``ModelResponded`` event: its agent and its total tokens,
read with the least work (pure).

:func:`response_counts` gives what :meth:`agentjournal.tokens.ModelResponse.decode` gives
for them: it checks the shape ``decode`` accepts on the parsed body without building the
record, and hands whatever it is not sure of to ``decode`` itself, which then reads it or
refuses it.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from agentjournal.tokens import ModelResponse

_REQUIRED: Final = ("session_id", "agent", "ended_at")
_OPTIONAL: Final = ("model", "system", "response_id", "started_at")
_COUNTS: Final = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "total_tokens",
)


def response_counts(data: bytes) -> tuple[str, int]:
    """A ``ModelResponded`` event's agent and total tokens.

    Raises:
        ValueError: It is not what ``ModelResponse.encode`` writes (``decode`` refuses it).
    """
    try:
        # orjson alone: where it reads a value otherwise than json (an integer past 64
        # bits becomes a float), the value is no plain count, and decode reads it below.
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        body = None
    if type(body) is dict and _plain(body):
        return body["agent"], int(body["usage"].get("total_tokens", 0))
    answer = ModelResponse.decode(data)
    return answer.agent, answer.usage.total_tokens


def _plain(body: dict[str, Any]) -> bool:
    """Whether ``body`` is what ``decode`` reads: its texts are texts, its counts plain
    counts (a non-negative int, not a bool, or ASCII digits)."""
    usage = body.get("usage")
    outputs = body.get("outputs", {})
    if type(usage) is not dict or type(outputs) is not dict:
        return False
    for key in _REQUIRED:
        if type(body.get(key)) is not str:
            return False
    for key in _OPTIONAL:
        value = body.get(key)
        if value is not None and type(value) is not str:
            return False
    counts = [usage.get(key, 0) for key in _COUNTS]
    counts.extend(outputs.values())
    for value in counts:
        if type(value) is str:
            if not (value.isascii() and value.isdigit()):
                return False
        elif type(value) is not int or value < 0:
            return False
    return True
