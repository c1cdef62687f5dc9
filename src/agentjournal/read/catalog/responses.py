"""What the catalog counts of a ``ModelResponded`` event: its agent and its total tokens,
read with the least work (pure).

:func:`response_counts` gives what :meth:`agentjournal.tokens.ModelResponse.decode` gives
for them: it checks the shape ``decode`` accepts on the parsed body without building the
record, and hands whatever it is not sure of to ``decode`` itself, which then reads it or
refuses it.
"""

from __future__ import annotations

from typing import Any, Final

from agentjournal._fastjson import loads_bytes
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
    body = loads_bytes(data)
    if type(body) is dict:
        usage = body.get("usage")
        outputs = body.get("outputs", {})
        if (
            type(usage) is dict
            and type(outputs) is dict
            and all(type(body.get(key)) is str for key in _REQUIRED)
            and all(_text_or_none(body.get(key)) for key in _OPTIONAL)
            and all(_plain_count(usage.get(key, 0)) for key in _COUNTS)
            and all(_plain_count(value) for value in outputs.values())
        ):
            return body["agent"], int(usage.get("total_tokens", 0))
    answer = ModelResponse.decode(data)
    return answer.agent, answer.usage.total_tokens


def _text_or_none(value: Any) -> bool:
    return value is None or type(value) is str


def _plain_count(value: Any) -> bool:
    """A count ``decode`` reads: a non-negative int (not a bool), or ASCII digits."""
    if type(value) is int:
        return bool(value >= 0)
    return type(value) is str and value.isascii() and value.isdigit()
