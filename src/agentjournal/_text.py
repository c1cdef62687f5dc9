"""Small text helpers for what agentjournal prints (pure)."""

from __future__ import annotations

import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Joiners are format characters too, but emoji and several scripts need them to read right,
# and they cannot move the cursor, end a line or reorder text.
_KEEP = frozenset("\u200c\u200d")


def plural(count: int, noun: str) -> str:
    """``1 event``, ``2 events``, ``3 policies``, ``2 keys``."""
    if count == 1:
        return f"{count} {noun}"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return f"{count} {noun[:-1]}ies"  # policy -> policies, but key -> keys
    return f"{count} {noun}s"


def cut(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters ending with "…" when it was longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def printable(text: str) -> str:
    """``text`` with every control character shown as an escape, safe for one line of output.

    Stored text is anyone's: a newline would let it forge a line of its own (an audit
    line that never happened), ESC, CR, NUL and the C1 controls drive the terminal, and
    bidi overrides (U+202E) reorder what is shown. Each such character (Unicode
    categories Cc, Cf, Zl, Zp, except the joiners U+200C/U+200D) is printed visibly
    instead: ``\\n``, ``\\r``, ``\\t``, ``\\x1b``, ``\\u202e``. Everything else is kept.
    """
    if text.isprintable():
        return text
    out: list[str] = []
    for char in text:
        if char in _KEEP or unicodedata.category(char) not in ("Cc", "Cf", "Zl", "Zp"):
            out.append(char)
        elif char in _NAMED:
            out.append(_NAMED[char])
        elif ord(char) < 0x100:
            out.append(f"\\x{ord(char):02x}")
        elif ord(char) < 0x10000:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\U{ord(char):08x}")
    return "".join(out)


def shown_uri(uri: str) -> str:
    """A store URI without its credentials, for messages."""
    scheme, sep, rest = uri.partition("://")
    if "@" in rest.split("/")[0]:
        rest = "***@" + rest.split("@", 1)[1]
    return scheme + sep + rest
