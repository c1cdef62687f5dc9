"""Small text helpers for what agentjournal prints (pure)."""

from __future__ import annotations

__all__ = ["cut", "plural", "shown_uri"]


def plural(count: int, noun: str) -> str:
    """``1 event``, ``2 events``, ``3 policies``."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun[:-1]}ies" if noun.endswith("y") else f"{count} {noun}s"


def cut(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters ending with "…" when it was longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def shown_uri(uri: str) -> str:
    """A store URI without its credentials, for messages."""
    scheme, sep, rest = uri.partition("://")
    if "@" in rest.split("/")[0]:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest
