"""One entry of a scorers file: the keys every scorer shares, and reading typed values (pure).

Every entry has a ``name`` (unique in its file), a ``version`` (default ``"1"``), a
``scope`` (``turn``: one score per turn; ``session``: one per session line) and may
narrow the turns it looks at with ``turns: [1, 3]`` and ``when_input_matches: REGEX``
(:class:`TurnFilter`). The kind's own keys are read with the helpers here, each raising
:class:`~agentjournal.errors.InvalidInput` with a message the file loader prefixes with
the entry (``scorers.yaml: entry 3 (refund-called): ...``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from agentjournal.errors import InvalidInput
from agentjournal.read.evals.turns import ScoredSession, ScoredTurn

Scope = Literal["turn", "session"]

COMMON_KEYS: Final = frozenset(
    {"name", "version", "scope", "turns", "when_input_matches", "description"}
)
"""The keys any entry may have besides its kind's."""


@dataclass(frozen=True, slots=True)
class TurnFilter:
    """Which turns a scorer looks at: the numbers in ``turns`` (None: every one) whose
    input matches ``input_pattern`` (None: any input)."""

    turns: frozenset[int] | None = None
    input_pattern: re.Pattern[str] | None = None

    def applies(self, turn: ScoredTurn) -> bool:
        """Whether ``turn`` is one the scorer looks at."""
        if self.turns is not None and turn.index not in self.turns:
            return False
        return self.input_pattern is None or self.input_pattern.search(turn.input) is not None

    def select(self, session: ScoredSession) -> list[ScoredTurn]:
        """The session line's turns the scorer looks at, in order."""
        return [turn for turn in session.turns if self.applies(turn)]


@dataclass(frozen=True, slots=True)
class Common:
    """What every entry says: name, version, scope and turn filter."""

    name: str
    version: str
    scope: Scope
    filter: TurnFilter
    description: str = ""


def common(entry: Mapping[str, Any]) -> Common:
    """The shared keys of ``entry``.

    Raises:
        InvalidInput: One is missing or malformed.
    """
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput("name is missing (every scorer needs a name, unique in the file)")
    if name != name.strip() or "," in name:
        raise InvalidInput(f"name {name!r}: no commas and no spaces around it")
    version = entry.get("version", "1")
    if isinstance(version, bool) or not isinstance(version, str | int | float):
        raise InvalidInput("version must be text (e.g. '1' or '2.1')")
    scope = entry.get("scope", "turn")
    if scope not in ("turn", "session"):
        raise InvalidInput(f"scope must be turn or session, not {scope!r}")
    turns: frozenset[int] | None = None
    if "turns" in entry:
        given = entry["turns"]
        if (
            not isinstance(given, list)
            or not given
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in given)
        ):
            raise InvalidInput("turns must be a non-empty list of turn numbers (1 or more)")
        turns = frozenset(given)
    pattern = regex(entry, "when_input_matches") if "when_input_matches" in entry else None
    description = entry.get("description", "")
    if not isinstance(description, str):
        raise InvalidInput("description must be text")
    return Common(name, str(version), scope, TurnFilter(turns, pattern), description)


def check_keys(entry: Mapping[str, Any], allowed: Sequence[str], what: str) -> None:
    """Refuse a key neither common nor one of ``allowed`` (the kind's keys).

    Raises:
        InvalidInput: ``unknown key 'x' for WHAT (its keys: ...)``.
    """
    for key in entry:
        if key not in COMMON_KEYS and key not in allowed:
            listed = ", ".join(allowed) if allowed else "none"
            raise InvalidInput(f"unknown key {key!r} for {what} (its keys: {listed})")


def text(entry: Mapping[str, Any], key: str) -> str:
    """The non-empty text at ``key``.

    Raises:
        InvalidInput: It is missing or not non-empty text.
    """
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{key} must be non-empty text")
    return value


def regex(entry: Mapping[str, Any], key: str) -> re.Pattern[str]:
    """The regular expression at ``key``, compiled.

    Raises:
        InvalidInput: It is missing, not text, or not a regular expression.
    """
    return compiled(text(entry, key), key)


def compiled(pattern: str, where: str) -> re.Pattern[str]:
    """``pattern`` compiled (Python ``re`` syntax, searched anywhere in the text).

    Raises:
        InvalidInput: It is not a regular expression.
    """
    try:
        return re.compile(pattern)
    except re.error as error:
        raise InvalidInput(f"{where}: {pattern!r} is not a regular expression ({error})") from None


def bound(entry: Mapping[str, Any], key: str) -> float:
    """The non-negative number at ``key``.

    Raises:
        InvalidInput: It is missing or not a non-negative number.
    """
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise InvalidInput(f"{key} must be a number of 0 or more")
    return float(value)
