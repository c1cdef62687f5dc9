"""Items the branch tests write: a user message and an assistant message as the SDK's
Runner stores them (one of each per turn)."""

from __future__ import annotations

from typing import Any


def user(text: str) -> Any:
    """A user message."""
    return {"role": "user", "content": text}


def assistant(text: str) -> Any:
    """An assistant message, its id derived from its text."""
    return {
        "id": f"msg_{text}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
