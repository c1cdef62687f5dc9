"""What the catalog counts of a ``ModelResponded`` event: its agent and its total tokens,
read with the least work (pure).

:func:`response_counts` gives what :meth:`agentjournal.tokens.ModelResponse.decode` gives
for them: a body of the plain shape (:func:`agentjournal.tokens.plain_body`) is read
without building the record; anything else goes to ``decode`` itself, which then reads it
or refuses it.
"""

from __future__ import annotations

from agentjournal.tokens import ModelResponse, plain_body


def response_counts(data: bytes) -> tuple[str, int]:
    """A ``ModelResponded`` event's agent and total tokens.

    Raises:
        ValueError: It is not what ``ModelResponse.encode`` writes (``decode`` refuses it).
    """
    body = plain_body(data)
    if body is not None:
        return body["agent"], int(body["usage"].get("total_tokens", 0))
    answer = ModelResponse.decode(data)
    return answer.agent, answer.usage.total_tokens
