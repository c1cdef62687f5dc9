"""The reference scorer: each turn's answer against the answer expected of it (pure).

An entry's ``reference`` gives the expected answers: by session and turn
(``{support-1: {1: "...", 2: {pattern: "..."}}}``), as a list by turn for every session
(``["...", null, "..."]``: turn 1, none for turn 2, turn 3), or as the path of a YAML or
JSON file holding either (relative to the scorers file). An expectation is text, matched
as the entry's ``match`` says (default ``normalized``), or a mapping naming its own way:
``{exact: ...}``, ``{normalized: ...}``, ``{contains: ...}``, ``{pattern: REGEX}`` or
``{similar: ..., threshold: 0.8}``.

* ``exact`` — the answer is the text;
* ``normalized`` — equal once both are put in one form (Unicode NFKC, case folded,
  punctuation dropped, whitespace collapsed);
* ``contains`` — the normalized answer holds the normalized text;
* ``pattern`` (``regex``) — the regular expression is found in the answer;
* ``similar`` — partial credit: the score is :class:`difflib.SequenceMatcher`'s ratio of
  the normalized texts, a pass from ``threshold`` (default 0.8) on.

Every way but ``similar`` scores 1.0 or 0.0; a miss says how similar the answer was. A
turn without an expectation is not scored. With ``scope: session`` the score is the
mean over the turns that have one, a pass when every one passes.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agentjournal._text import cut
from agentjournal._yaml import read_yaml
from agentjournal.errors import InvalidInput
from agentjournal.evals.scorers.base import Score
from agentjournal.evals.scorers.entry import Common, Scope, TurnFilter, check_keys, compiled
from agentjournal.read.evals.turns import ScoredSession, ScoredTurn

MATCHES: Final = ("exact", "normalized", "contains", "regex", "similar")
"""The ways an expected text is matched (``pattern`` is ``regex``'s key in a mapping)."""

_WAYS: Final = {"exact", "normalized", "contains", "pattern", "similar"}

DEFAULT_THRESHOLD: Final = 0.8


@dataclass(frozen=True, slots=True)
class Expected:
    """What one turn's answer is expected to be: the text or pattern, and how it is
    matched."""

    how: str
    value: str
    threshold: float = DEFAULT_THRESHOLD
    pattern: re.Pattern[str] | None = None

    def judge(self, answer: str) -> Score:
        """The answer against this expectation."""
        if self.how == "regex":
            assert self.pattern is not None
            if self.pattern.search(answer) is not None:
                return Score(1.0, "pass", f"the answer matches /{self.value}/")
            return Score(
                0.0, "fail", f"the answer {cut(answer, 80)!r} does not match /{self.value}/"
            )
        ratio = similarity(answer, self.value)
        if self.how == "similar":
            label = "pass" if ratio >= self.threshold else "fail"
            return Score(
                ratio,
                label,
                f"similarity {ratio:.2f} to the expected answer (pass from {self.threshold:g})",
            )
        if self.how == "exact":
            hit = answer == self.value
        elif self.how == "normalized":
            hit = normalized(answer) == normalized(self.value)
        else:
            hit = normalized(self.value) in normalized(answer)
        verb = "contains" if self.how == "contains" else "is"
        if hit:
            return Score(1.0, "pass", f"the answer {verb} the expected one ({self.how})")
        return Score(
            0.0,
            "fail",
            f"the answer {cut(answer, 60)!r} is not {self.how}ly {cut(self.value, 60)!r} "
            f"(similarity {ratio:.2f})"
            if self.how != "contains"
            else f"the answer {cut(answer, 60)!r} does not contain {cut(self.value, 60)!r}",
        )


def normalized(text: str) -> str:
    """``text`` in one form: NFKC, case folded, punctuation dropped, whitespace collapsed."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    kept = "".join(" " if unicodedata.category(c).startswith("P") else c for c in folded)
    return " ".join(kept.split())


def similarity(answer: str, expected: str) -> float:
    """How alike two texts are once normalized, from 0 to 1 (difflib's ratio)."""
    return difflib.SequenceMatcher(None, normalized(answer), normalized(expected)).ratio()


@dataclass(slots=True)
class ReferenceScorer:
    """Expected answers per turn (see the module docs).

    Attributes:
        by_session: Session id -> turn -> expectation.
        every_session: Turn -> expectation, for sessions ``by_session`` does not name.
    """

    name: str
    version: str
    scope: Scope
    filter: TurnFilter
    by_session: Mapping[str, Mapping[int, Expected]] = field(repr=False)
    every_session: Mapping[int, Expected] = field(repr=False)
    match: str = "normalized"
    kind: str = "reference"

    def describe(self) -> dict[str, Any]:
        """Its record in ``EvalRunStarted``."""
        return {
            "name": self.name,
            "version": self.version,
            "kind": self.kind,
            "match": self.match,
            "scope": self.scope,
        }

    def expected(self, turn: ScoredTurn) -> Expected | None:
        """What ``turn``'s answer is expected to be (None: nothing)."""
        table = self.by_session.get(turn.session, self.every_session)
        return table.get(turn.index)

    async def score_turn(self, turn: ScoredTurn) -> Score | None:
        """The turn's answer against its expectation (None: none, or not this scope)."""
        if self.scope != "turn" or not self.filter.applies(turn):
            return None
        expected = self.expected(turn)
        return None if expected is None else expected.judge(turn.output)

    async def score_session(self, session: ScoredSession) -> Score | None:
        """The mean over the line's turns that have an expectation (None: none has)."""
        if self.scope != "session":
            return None
        scores = [
            (turn.index, expected.judge(turn.output))
            for turn in self.filter.select(session)
            if (expected := self.expected(turn)) is not None
        ]
        if not scores:
            return None
        passed = [index for index, score in scores if score.label == "pass"]
        missed = [index for index, score in scores if score.label != "pass"]
        mean = sum(score.value for _, score in scores) / len(scores)
        reason = f"{len(passed)} of {len(scores)} turns as expected"
        if missed:
            reason += f" (not turn {', '.join(map(str, missed))})"
        return Score(mean, "pass" if not missed else "fail", reason)


def reference_scorer(common: Common, entry: Mapping[str, Any], base: Path) -> ReferenceScorer:
    """The reference scorer of an entry (``reference:`` and its keys).

    Raises:
        InvalidInput: Its expectations or keys are malformed.
    """
    check_keys(entry, ("reference", "match", "threshold"), "reference")
    match = entry.get("match", "normalized")
    if match not in MATCHES:
        raise InvalidInput(f"match must be one of {', '.join(MATCHES)}, not {match!r}")
    threshold = _threshold(entry.get("threshold", DEFAULT_THRESHOLD))
    given = entry.get("reference")
    if isinstance(given, str):
        given = read_yaml(base / given, "reference answers")
    if isinstance(given, list):
        every = _turns(dict(enumerate(given, start=1)), match, threshold, "reference")
        return ReferenceScorer(
            common.name, common.version, common.scope, common.filter, {}, every, match
        )
    if not isinstance(given, Mapping) or not given:
        raise InvalidInput(
            "reference must map session ids to {turn: expected answer}, list the expected "
            "answers by turn, or name a file holding either"
        )
    by_session = {}
    for session, turns in given.items():
        if not isinstance(turns, Mapping):
            raise InvalidInput(f"reference.{session}: expected a mapping of turn to answer")
        by_session[str(session)] = _turns(turns, match, threshold, f"reference.{session}")
    return ReferenceScorer(
        common.name, common.version, common.scope, common.filter, by_session, {}, match
    )


def _threshold(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise InvalidInput("threshold must be a number from 0 to 1")
    return float(value)


def _turns(
    turns: Mapping[Any, Any], match: str, threshold: float, where: str
) -> dict[int, Expected]:
    found: dict[int, Expected] = {}
    for key, value in turns.items():
        number = _turn_number(key)
        if number is None:
            raise InvalidInput(f"{where}: {key!r} is not a turn number (1 or more)")
        if value is None:
            continue
        found[number] = _expectation(value, match, threshold, f"{where}.{number}")
    return found


def _turn_number(key: Any) -> int | None:
    if isinstance(key, bool):
        return None
    if isinstance(key, str) and key.isascii() and key.isdigit():
        key = int(key)
    return key if isinstance(key, int) and key >= 1 else None


def _expectation(value: Any, match: str, threshold: float, where: str) -> Expected:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        text = str(value)
        if match == "regex":
            return Expected("regex", text, threshold, compiled(text, where))
        return Expected(match, text, threshold)
    if isinstance(value, Mapping):
        ways = set(value) & _WAYS
        extra = set(value) - _WAYS - {"threshold"}
        if len(ways) != 1 or extra or ("threshold" in value and ways != {"similar"}):
            raise InvalidInput(
                f"{where}: give one of exact, normalized, contains, pattern or similar "
                "(threshold goes with similar only)"
            )
        (how,) = ways
        text = value[how]
        if not isinstance(text, str):
            raise InvalidInput(f"{where}.{how} must be text")
        if how == "pattern":
            return Expected("regex", text, threshold, compiled(text, f"{where}.pattern"))
        return Expected(how, text, _threshold(value.get("threshold", threshold)))
    raise InvalidInput(f"{where}: an expected answer is text or a mapping such as {{pattern: ...}}")
