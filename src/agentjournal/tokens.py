"""Token usage records (pure): what one model response cost, as agentjournal writes it.

:class:`ModelResponse` is the data of an ``agentjournal.ModelResponded`` event (one per
model response, on the stream of the agent that called the model); :class:`Usage` is
its counts, which add up. Totals, prices and reports are the read side's
(:mod:`agentjournal.read.usage`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

from agentjournal._fastjson import loads_bytes, orjson_loads

__all__ = ["ModelResponse", "Usage", "plain_body"]

# The counts of TokenUsage's canonical JSON (kurrent-agent-schema v2 ``to_json``), which
# Usage names alike.
_TOKEN_USAGE_FIELDS: Final = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "total_tokens",
)


def _count(value: object, what: str) -> int:
    """A token count from canonical JSON: int64 counts print as strings there."""
    if isinstance(value, bool):
        raise ValueError(f"{what} is not a count: {value!r}")
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and value >= 0:
        return value
    raise ValueError(f"{what} is not a count: {value!r}")


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts and the number of model requests they took.

    ``cached_input_tokens`` is part of ``input_tokens`` and ``reasoning_tokens``
    part of ``output_tokens``, as the model APIs report them.
    """

    requests: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @classmethod
    def from_token_usage(cls, body: Mapping[str, Any], *, requests: int = 1) -> Usage:
        """Counts from a canonical ``TokenUsage`` JSON object (missing counts are 0).

        Raises:
            ValueError: A count is not a non-negative integer.
        """
        counts = {name: _count(body.get(name, 0), name) for name in _TOKEN_USAGE_FIELDS}
        return cls(requests=requests, **counts)

    def as_dict(self) -> dict[str, int]:
        """The counts by name (for ``--json``)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """One model response, as its ``agentjournal.ModelResponded`` event records it.

    Attributes:
        session_id: The session tree it belongs to.
        agent: The agent that called the model.
        model: The model's name, when the agent named one.
        system: The GenAI system (``gen_ai.system``: ``openai``, ...), when known.
        response_id: The provider's response id, when it gave one.
        usage: Its token counts (``requests`` is 1).
        started_at: RFC 3339 UTC, when the call started (``on_llm_start``), if seen.
        ended_at: RFC 3339 UTC, when the response arrived (``on_llm_end``).
        outputs: How many output items of each type it produced (``message``,
            ``function_call``, ``reasoning``, ...; a handoff is a ``function_call``).
    """

    session_id: str
    agent: str
    model: str | None
    system: str | None
    response_id: str | None
    usage: Usage
    started_at: str | None
    ended_at: str
    outputs: Mapping[str, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        """The event's data: compact JSON, usage as a canonical ``TokenUsage`` object."""
        usage = {name: str(getattr(self.usage, name)) for name in _TOKEN_USAGE_FIELDS}
        if self.model is not None:
            usage["model"] = self.model
        body = {
            "session_id": self.session_id,
            "agent": self.agent,
            "model": self.model,
            "system": self.system,
            "response_id": self.response_id,
            "usage": usage,
            "started_at": self.started_at,
            "ended_at": self.ended_at,
            "outputs": dict(self.outputs),
        }
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def decode(cls, data: bytes) -> ModelResponse:
        """Read a ``ModelResponded`` event's data.

        Raises:
            ValueError: It is not what :meth:`encode` writes.
        """
        body = plain_body(data)
        if body is not None:  # the shape checked: what the reading below gives, made at once
            usage = body["usage"]
            return cls(
                body["session_id"],
                body["agent"],
                body.get("model"),
                body.get("system"),
                body.get("response_id"),
                Usage(1, *[int(usage.get(name, 0)) for name in _TOKEN_USAGE_FIELDS]),
                body.get("started_at"),
                body["ended_at"],
                {k: int(v) for k, v in body.get("outputs", {}).items()},
            )
        body = loads_bytes(data)
        if not isinstance(body, dict):
            raise ValueError("ModelResponded data is not an object")

        def text(key: str, *, optional: bool) -> str | None:
            value = body.get(key)
            if value is None and optional:
                return None
            if not isinstance(value, str):
                raise ValueError(f"ModelResponded.{key} is not a string")
            return value

        usage = body.get("usage")
        outputs = body.get("outputs", {})
        if not isinstance(usage, dict) or not isinstance(outputs, dict):
            raise ValueError("ModelResponded.usage and .outputs must be objects")
        return cls(
            session_id=text("session_id", optional=False) or "",
            agent=text("agent", optional=False) or "",
            model=text("model", optional=True),
            system=text("system", optional=True),
            response_id=text("response_id", optional=True),
            usage=Usage.from_token_usage(usage),
            started_at=text("started_at", optional=True),
            ended_at=text("ended_at", optional=False) or "",
            outputs={str(k): _count(v, f"outputs.{k}") for k, v in outputs.items()},
        )


_REQUIRED: Final = ("session_id", "agent", "ended_at")
_OPTIONAL: Final = ("model", "system", "response_id", "started_at")


def plain_body(data: bytes) -> dict[str, Any] | None:
    """A ``ModelResponded`` event's data as a JSON object when it has the plain shape
    :meth:`ModelResponse.decode` reads — its texts are texts, its counts plain counts (an
    ``int`` >= 0, not a bool, or ASCII digits) — else None: ``decode``'s own reading then
    reads it or refuses it. The one statement of the shape, for a reader that wants a field
    or two without the record (the catalog's).

    Parsed by ``orjson`` alone: where it reads a value otherwise than ``json`` (an integer
    past 64 bits becomes a float) that value is no plain count, and where it refuses
    (``NaN``, a lone surrogate, a byte order mark) the answer is None.
    """
    try:
        body = orjson_loads(data)
    except ValueError:
        return None
    if type(body) is not dict:
        return None
    usage = body.get("usage")
    outputs = body.get("outputs", {})
    if type(usage) is not dict or type(outputs) is not dict:
        return None
    for key in _REQUIRED:
        if type(body.get(key)) is not str:
            return None
    for key in _OPTIONAL:
        value = body.get(key)
        if value is not None and type(value) is not str:
            return None
    counts = [usage.get(key, 0) for key in _TOKEN_USAGE_FIELDS]
    counts.extend(outputs.values())
    for value in counts:
        if type(value) is str:
            if not (value.isascii() and value.isdigit()):
                return None
        elif type(value) is not int or value < 0:
            return None
    return body
