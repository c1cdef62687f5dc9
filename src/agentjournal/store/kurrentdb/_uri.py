"""KurrentDB connection strings: the client's URI and options, credentials kept out of messages."""

from __future__ import annotations

import math
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

KEEPALIVE_MS: Final = 10_000
"""gRPC keepalive interval and timeout the store asks for (the server's defaults)."""


def redact_uri(uri: str) -> str:
    """Return ``uri`` without the ``user:password@`` part, safe to log or show."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return "<unparseable KurrentDB URI>"
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def _client_uri(uri: str) -> tuple[str, float | None]:
    """The URI for the client, and the deadline its ``DefaultDeadline`` asks for.

    ``DefaultDeadline`` is taken out (the client takes whole seconds only and
    applies it to writes alone; the store applies it to every call) and
    keepalive is switched on when the URI does not set it.
    """
    parts = urlsplit(uri)
    query = parse_qsl(parts.query, keep_blank_values=True)
    deadline: float | None = None
    kept: list[tuple[str, str]] = []
    for key, value in query:
        if key.lower() == "defaultdeadline":
            try:
                deadline = float(value)
            except ValueError:
                raise ValueError(
                    f"DefaultDeadline must be a number of seconds, got {value!r}"
                ) from None
            if not math.isfinite(deadline) or deadline <= 0:
                raise ValueError(f"DefaultDeadline must be > 0 seconds, got {value!r}")
            continue
        kept.append((key, value))
    keys = {key.lower() for key, _ in kept}
    for option in ("KeepAliveInterval", "KeepAliveTimeout"):
        if option.lower() not in keys:
            kept.append((option, str(KEEPALIVE_MS)))
    return urlunsplit(parts._replace(query=urlencode(kept, safe=",:/"))), deadline


def _userinfo(uri: str) -> str | None:
    try:
        netloc = urlsplit(uri).netloc
    except ValueError:
        return None
    return netloc.rsplit("@", 1)[0] if "@" in netloc else None


def _scrub(text: str, secret: str | None) -> str:
    if not secret:
        return text
    text = text.replace(secret + "@", "").replace(secret, "***")
    _, _, password = secret.partition(":")
    return text.replace(password, "***") if password else text
