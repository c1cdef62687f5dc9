"""The one scrubber: no string value of an invocation's ``config`` leaves the runner.

``config`` holds API keys, tokens and URLs with secret paths. A tool that fails
with ``raise_for_status`` names the URL it called; an exception may quote a
token. So every text the runner emits or stores that it did not get from the
model or the caller — error messages of the output, tool outputs (and a tool's
error output), log lines — goes through :meth:`Scrubber.scrub` first, which
replaces each config string value (at any depth of ``config``) of at least
:data:`MIN_SECRET_LENGTH` characters with :data:`REDACTED`. Shorter values are
left alone: replacing ``"en"`` or ``"1"`` everywhere would mangle every text and
protect nothing.

Light on purpose (standard library only): the CLI's log formatter uses it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

MIN_SECRET_LENGTH: Final = 4
REDACTED: Final = "[config]"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from _strings(inner)


class Scrubber:
    """Replaces the string values of a ``config`` in any text.

    Args:
        config: The invocation's ``config`` (nested objects and arrays are searched).
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        found = {text for text in _strings(config) if len(text) >= MIN_SECRET_LENGTH}
        # Longest first: a value that contains another (a URL and its host) goes whole.
        self._secrets: tuple[str, ...] = tuple(sorted(found, key=lambda text: (-len(text), text)))

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def scrub(self, text: str) -> str:
        """``text`` with every config value replaced by :data:`REDACTED`."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def error_line(self, error: BaseException, limit: int = 500) -> str:
        """``Type: message`` of ``error``, scrubbed, on one line, at most ``limit`` characters.

        Scrubbed before the whitespace is folded (a value may hold a newline) and again
        after (folding may join one), and before it is cut (a cut must not keep half
        a value).
        """
        text = " ".join(self.scrub(str(error)).split()) or type(error).__name__
        return self.scrub(f"{type(error).__name__}: {text}")[:limit]
