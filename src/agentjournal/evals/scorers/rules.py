"""Rule scorers: checks of what a turn or a session line did, each passing (1.0) or failing
(0.0) with a label and a reason (pure).

One rule per entry of a scorers file (``rule: NAME`` and its keys, see docs/scorers.md):

* ``tool_called`` / ``tool_not_called`` — ``tool``, with optional ``arguments`` (a
  subset the call's arguments must hold, nested mappings too) and ``arguments_match``
  (a regular expression per argument, searched in its text);
* ``answer_matches`` — ``pattern``, searched in the answer;
* ``answer_schema`` — ``schema``, a JSON Schema the answer, parsed as JSON, must meet;
* ``no_guardrail_block`` — no guardrail decision was BLOCK (optionally of ``kinds`` only);
* ``cost_under`` / ``tokens_under`` — the model calls cost at most ``max`` US dollars /
  ``max`` tokens (``count``: total, input or output);
* ``handoff_reached`` — ``agent`` spoke or was handed to.

With ``scope: turn`` (the default) a rule judges each turn its filter lets through; with
``scope: session`` it judges a session line once, over those turns together: a call, a
block or an agent in any of them; the answer of the last of them; the usage of all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agentjournal._text import cut
from agentjournal.errors import InvalidInput
from agentjournal.evals.scorers.base import Score
from agentjournal.evals.scorers.entry import (
    Common,
    Scope,
    TurnFilter,
    bound,
    check_keys,
    compiled,
    regex,
    text,
)
from agentjournal.read.evals.turns import ScoredSession, ScoredTurn, ToolCall

Check = Callable[[Sequence[ScoredTurn]], Score]
"""A rule's check over the turns it judges (one for ``scope: turn``), oldest first."""

PASS: Final = "pass"
FAIL: Final = "fail"


@dataclass(slots=True)
class RuleScorer:
    """A rule of a scorers file (see the module docs).

    Attributes:
        name: The entry's name.
        version: The entry's version.
        rule: The rule's name (``tool_called`` ...).
        scope: ``turn`` or ``session``.
        filter: Which turns it judges.
        check: The rule's check.
    """

    name: str
    version: str
    rule: str
    scope: Scope
    filter: TurnFilter
    check: Check = field(repr=False)
    kind: str = "rule"

    def describe(self) -> dict[str, Any]:
        """Its record in ``EvalRunStarted``."""
        return {
            "name": self.name,
            "version": self.version,
            "kind": self.kind,
            "rule": self.rule,
            "scope": self.scope,
        }

    async def score_turn(self, turn: ScoredTurn) -> Score | None:
        """The rule over one turn (None: a session rule, or a turn its filter skips)."""
        if self.scope != "turn" or not self.filter.applies(turn):
            return None
        return self.check([turn])

    async def score_session(self, session: ScoredSession) -> Score | None:
        """The rule over a session line's turns (None: a turn rule, or no turn to judge)."""
        if self.scope != "session":
            return None
        turns = self.filter.select(session)
        return self.check(turns) if turns else None


def rule_scorer(common: Common, entry: Mapping[str, Any]) -> RuleScorer:
    """The rule an entry names (``rule: NAME``), its keys checked.

    Raises:
        InvalidInput: An unknown rule, an unknown or malformed key.
    """
    name = entry.get("rule")
    parse = RULES.get(name) if isinstance(name, str) else None
    if parse is None:
        raise InvalidInput(f"unknown rule {name!r} (rules: {', '.join(sorted(RULES))})")
    keys, build = parse
    check_keys(entry, ("rule", *keys), f"rule {name}")
    return RuleScorer(
        common.name, common.version, str(name), common.scope, common.filter, build(entry)
    )


# -- tool calls ---------------------------------------------------------------------------


def _subset(expected: Any, actual: Any) -> bool:
    """Whether ``actual`` holds ``expected``: every key of a mapping (recursively), else
    equal (``1250 == 1250.0``)."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and _subset(value, actual[key]) for key, value in expected.items()
        )
    return bool(expected == actual)


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _call_check(entry: Mapping[str, Any]) -> Callable[[ToolCall], bool]:
    tool = text(entry, "tool")
    subset = entry.get("arguments", {})
    if not isinstance(subset, Mapping):
        raise InvalidInput("arguments must be a mapping (the arguments the call must hold)")
    given = entry.get("arguments_match", {})
    if not isinstance(given, Mapping) or not all(isinstance(v, str) for v in given.values()):
        raise InvalidInput("arguments_match must map argument names to regular expressions")
    patterns = {str(k): compiled(v, f"arguments_match.{k}") for k, v in given.items()}

    def matches(call: ToolCall) -> bool:
        if call.name != tool or not _subset(subset, call.arguments):
            return False
        arguments = call.arguments if isinstance(call.arguments, Mapping) else {}
        return all(
            name in arguments and pattern.search(_as_text(arguments[name])) is not None
            for name, pattern in patterns.items()
        )

    return matches


def _wanted(entry: Mapping[str, Any]) -> str:
    """The call a tool rule looks for, in words."""
    tool = str(entry["tool"])
    parts = [json.dumps(dict(entry["arguments"]))] if entry.get("arguments") else []
    parts += [f"{k}~/{v}/" for k, v in dict(entry.get("arguments_match", {})).items()]
    return f"{tool}({', '.join(parts)})" if parts else tool


def _found(turns: Sequence[ScoredTurn], matches: Callable[[ToolCall], bool]) -> list[str]:
    return [
        f"{call.name}({cut(_as_text(call.arguments), 60)}) in turn {turn.index}"
        for turn in turns
        for call in turn.tool_calls
        if matches(call)
    ]


def _calls_made(turns: Sequence[ScoredTurn]) -> str:
    names = [call.name for turn in turns for call in turn.tool_calls]
    return ", ".join(dict.fromkeys(names)) or "none"


def _tool_called(entry: Mapping[str, Any]) -> Check:
    matches = _call_check(entry)
    wanted = _wanted(entry)

    def check(turns: Sequence[ScoredTurn]) -> Score:
        found = _found(turns, matches)
        if found:
            return Score(1.0, PASS, f"called {found[0]}")
        return Score(0.0, FAIL, f"no call of {wanted} (calls: {_calls_made(turns)})")

    return check


def _tool_not_called(entry: Mapping[str, Any]) -> Check:
    matches = _call_check(entry)
    wanted = _wanted(entry)

    def check(turns: Sequence[ScoredTurn]) -> Score:
        found = _found(turns, matches)
        if found:
            return Score(0.0, FAIL, f"called {found[0]}")
        return Score(1.0, PASS, f"no call of {wanted} (calls: {_calls_made(turns)})")

    return check


# -- the answer ---------------------------------------------------------------------------


def _answer_matches(entry: Mapping[str, Any]) -> Check:
    pattern = regex(entry, "pattern")

    def check(turns: Sequence[ScoredTurn]) -> Score:
        turn = turns[-1]
        if pattern.search(turn.output) is not None:
            return Score(1.0, PASS, f"the answer of turn {turn.index} matches /{pattern.pattern}/")
        return Score(
            0.0,
            FAIL,
            f"the answer of turn {turn.index} does not match /{pattern.pattern}/: "
            f"{cut(turn.output, 80)!r}",
        )

    return check


def json_answer(answer: str) -> Any:
    """The answer parsed as JSON, a Markdown code fence around it allowed.

    Raises:
        ValueError: It is not JSON.
    """
    body = answer.strip()
    if body.startswith("```"):
        rest = body.partition("\n")[2]
        body = rest.rsplit("```", 1)[0] if rest.rstrip().endswith("```") else body
    return json.loads(body)


def _answer_schema(entry: Mapping[str, Any]) -> Check:
    import jsonschema

    schema = entry.get("schema")
    if not isinstance(schema, dict):
        raise InvalidInput("schema must be a JSON Schema (a mapping)")
    validator_class = jsonschema.validators.validator_for(schema)
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as error:
        raise InvalidInput(f"schema is not a valid JSON Schema: {error.message}") from None
    validator = validator_class(schema)

    def check(turns: Sequence[ScoredTurn]) -> Score:
        turn = turns[-1]
        try:
            parsed = json_answer(turn.output)
        except (ValueError, RecursionError):
            return Score(
                0.0, FAIL, f"the answer of turn {turn.index} is not JSON: {cut(turn.output, 80)!r}"
            )
        error = jsonschema.exceptions.best_match(validator.iter_errors(parsed))
        if error is None:
            return Score(1.0, PASS, f"the answer of turn {turn.index} meets the schema")
        where = "/".join(map(str, error.absolute_path)) or "the answer"
        return Score(
            0.0,
            FAIL,
            f"the answer of turn {turn.index} does not meet the schema at {where}: "
            f"{cut(error.message, 100)}",
        )

    return check


# -- guardrails, usage, handoffs ----------------------------------------------------------

GUARDRAIL_KINDS: Final = ("input", "output", "tool_call", "handoff")


def _no_guardrail_block(entry: Mapping[str, Any]) -> Check:
    kinds = entry.get("kinds", list(GUARDRAIL_KINDS))
    if not isinstance(kinds, list) or not kinds or not set(kinds) <= set(GUARDRAIL_KINDS):
        raise InvalidInput(f"kinds must be a list of {', '.join(GUARDRAIL_KINDS)}")

    def check(turns: Sequence[ScoredTurn]) -> Score:
        blocks = [
            f"{g.kind}{' ' + g.tool if g.tool else ''} by {g.agent or '?'} in turn {t.index}"
            + (f" ({cut(g.reason, 60)})" if g.reason else "")
            for t in turns
            for g in t.guardrails
            if g.action == "BLOCK" and g.kind in kinds
        ]
        if blocks:
            more = f" and {len(blocks) - 1} more" if len(blocks) > 1 else ""
            return Score(0.0, FAIL, f"a guardrail blocked {blocks[0]}{more}")
        decided = sum(len(t.guardrails) for t in turns)
        return Score(1.0, PASS, f"no guardrail block ({decided} decisions)")

    return check


def _cost_under(entry: Mapping[str, Any]) -> Check:
    limit = bound(entry, "max")

    def check(turns: Sequence[ScoredTurn]) -> Score:
        costs = [t.usage.cost for t in turns]
        where = _where(turns)
        if any(cost is None for cost in costs):
            return Score(0.0, "unknown", f"the cost of {where} is not known (a model has no price)")
        total = sum(c for c in costs if c is not None)
        if total <= limit:
            return Score(1.0, PASS, f"{where} cost {total:.6f} USD, at most {limit:g}")
        return Score(0.0, FAIL, f"{where} cost {total:.6f} USD, over {limit:g}")

    return check


_COUNTS: Final = ("total", "input", "output")


def _tokens_under(entry: Mapping[str, Any]) -> Check:
    limit = bound(entry, "max")
    count = entry.get("count", "total")
    if count not in _COUNTS:
        raise InvalidInput(f"count must be one of {', '.join(_COUNTS)}, not {count!r}")
    attribute = f"{count}_tokens"

    def check(turns: Sequence[ScoredTurn]) -> Score:
        total = sum(int(getattr(t.usage, attribute)) for t in turns)
        where = _where(turns)
        if total <= limit:
            return Score(1.0, PASS, f"{where} used {total} {count} tokens, at most {limit:g}")
        return Score(0.0, FAIL, f"{where} used {total} {count} tokens, over {limit:g}")

    return check


def _where(turns: Sequence[ScoredTurn]) -> str:
    return f"turn {turns[0].index}" if len(turns) == 1 else f"{len(turns)} turns"


def _handoff_reached(entry: Mapping[str, Any]) -> Check:
    agent = text(entry, "agent")

    def check(turns: Sequence[ScoredTurn]) -> Score:
        for turn in turns:
            if agent in turn.agents:
                return Score(1.0, PASS, f"{agent} was reached in turn {turn.index}")
        seen = ", ".join(dict.fromkeys(a for t in turns for a in t.agents)) or "none"
        return Score(0.0, FAIL, f"{agent} was never reached (agents: {seen})")

    return check


RULES: Final[Mapping[str, tuple[tuple[str, ...], Callable[[Mapping[str, Any]], Check]]]] = {
    "tool_called": (("tool", "arguments", "arguments_match"), _tool_called),
    "tool_not_called": (("tool", "arguments", "arguments_match"), _tool_not_called),
    "answer_matches": (("pattern",), _answer_matches),
    "answer_schema": (("schema",), _answer_schema),
    "no_guardrail_block": (("kinds",), _no_guardrail_block),
    "cost_under": (("max",), _cost_under),
    "tokens_under": (("max", "count"), _tokens_under),
    "handoff_reached": (("agent",), _handoff_reached),
}
"""Each rule: its own keys, and what builds its check from an entry."""
