"""The reference guardrail's rules and the decision they make (pure, no I/O).

Rules are data (a YAML file or a dict)::

    rules:
      - kind: deny_tools          # BLOCK calls of these tools
        tools: [delete_account]
      - kind: deny_phrases        # BLOCK any payload containing one of these (case-insensitive)
        phrases: ["drop table"]
      - kind: ceiling             # BLOCK a tool call whose numeric argument is above max
        tool: issue_refund
        argument: amount_cents
        max: 5000
      - kind: redact_pii          # MODIFY: e-mail addresses, US SSNs and card numbers -> [REDACTED]

Rules run in order; the first BLOCK wins, otherwise redactions accumulate into
one MODIFY. :func:`decide` is what the service runs for each request.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentjournal._yaml import parse_yaml
from agentjournal.errors import InvalidInput
from agentjournal.guardrails.protocol import (
    ActionType,
    Decision,
    ValidateRequest,
    ValidateResponse,
)

SCHEMA_FILE = Path(__file__).with_name("rules.schema.json")
"""The rules file format as JSON Schema, shipped with the package (``rules_schema()``)."""

REDACTED = "[REDACTED]"
_PII = re.compile(
    r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"  # e-mail
    r"|\b\d{3}-\d{2}-\d{4}\b"  # US SSN
    r"|\b(?:\d[ -]?){13,16}\b"  # card number
)


class _Rule(BaseModel):
    # Strict, as the JSON Schema the models generate (rules.schema.json) is: "5000" is no
    # number there, so it is none here either; one verdict for the file, whoever checks it.
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class DenyTools(_Rule):
    kind: Literal["deny_tools"]
    tools: list[str]


class DenyPhrases(_Rule):
    kind: Literal["deny_phrases"]
    phrases: list[str]


class Ceiling(_Rule):
    kind: Literal["ceiling"]
    tool: str
    argument: str
    max: Annotated[float, Field(allow_inf_nan=False)]  # .nan would never fire: refused


class RedactPii(_Rule):
    kind: Literal["redact_pii"]


Rule = Annotated[DenyTools | DenyPhrases | Ceiling | RedactPii, Field(discriminator="kind")]


class RuleSet(BaseModel):
    """The service's rules, in order."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    rules: list[Rule] = Field(default_factory=list)


def rules_schema() -> dict[str, Any]:
    """The JSON Schema of a rules file, generated from the models (``SCHEMA_FILE`` holds it)."""
    schema = RuleSet.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "agentjournal guardrail rules"
    return schema


def load_rules(text: str) -> RuleSet:
    """Parse rules from YAML (or JSON) text.

    Raises:
        InvalidInput: The text is not YAML or not rules; one line naming the line,
            the field and the problem (``line 3: rules.0.max: Field required``).
    """
    data = parse_yaml(text)
    if data is None or data == {}:  # nothing, or only comments: never taken for no rules
        raise InvalidInput(
            "the file holds no rules: write `rules: []` for a service that checks nothing"
        )
    try:
        return RuleSet.model_validate(data)
    except ValidationError as error:
        # pydantic's own message spans several lines; the first problem is enough to act on.
        first = error.errors()[0]
        line, loc = _locate(text, first["loc"])
        where = ".".join(str(part) for part in loc) or "the file"
        at = f"line {line}: " if line is not None else ""
        more = error.error_count() - 1
        extra = f" (and {more} more)" if more else ""
        raise InvalidInput(f"{at}{where}: {first['msg']}{extra}") from None


def _locate(text: str, loc: tuple[int | str, ...]) -> tuple[int | None, list[int | str]]:
    """The 1-based line of the YAML node at ``loc``, and ``loc`` without union tags.

    pydantic puts the discriminator's value (``ceiling``) into the location of a
    rule's field; it is no key of the file, so it is dropped, and the line is that
    of the deepest node the location reaches (a missing field: its rule's line).
    """
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None, list(loc)
    if node is None:
        return None, list(loc)
    line = node.start_mark.line
    kept: list[int | str] = []
    for part in loc:
        child = None
        if isinstance(node, yaml.MappingNode):
            values = {k.value: v for k, v in node.value}
            child = values.get(str(part))
            tag = values.get("kind")
            if child is None and isinstance(tag, yaml.ScalarNode) and tag.value == part:
                continue  # the union tag, not a key of the file
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            child = node.value[part] if 0 <= part < len(node.value) else None
        kept.append(part)
        if child is None:
            node = None
            continue
        node = child
        line = node.start_mark.line
    return line + 1, kept


def decide(request: ValidateRequest, rules: RuleSet) -> ValidateResponse:
    """Apply ``rules`` to one request."""
    payload = request.payload
    tool, arguments = _tool_call(request)
    if tool is not None and _is_function(payload) and not isinstance(arguments, dict):
        # A function call's arguments are a JSON object; no rule can check anything else.
        return _block(request, "TOOL_CALL_UNREADABLE", "the call's arguments are no JSON object")
    modified = payload
    codes: list[str] = []
    for rule in rules.rules:
        if isinstance(rule, DenyTools) and tool in rule.tools:
            return _block(request, "TOOL_DENIED", f"tool {tool!r} is not allowed")
        if isinstance(rule, DenyPhrases):
            text = json.dumps(modified, ensure_ascii=False).lower()
            for phrase in rule.phrases:
                if phrase.lower() in text:
                    return _block(request, "PHRASE_DENIED", f"payload contains {phrase!r}")
        if isinstance(rule, Ceiling) and tool == rule.tool and isinstance(arguments, dict):
            if rule.argument not in arguments:
                continue
            value = _number(arguments[rule.argument])
            if value is None:  # "5000" is a number to a tool that converts it: so it is here
                return _block(
                    request,
                    "CEILING_UNREADABLE",
                    f"{rule.argument} of {tool} is no number: its ceiling cannot be checked",
                )
            if value > rule.max:
                return _block(
                    request,
                    "CEILING_EXCEEDED",
                    f"{rule.argument}={value:g} is above the ceiling {rule.max:g} for {tool}",
                )
        if isinstance(rule, RedactPii):
            redacted = _redact(modified, request.action_type)
            if redacted != modified:
                modified = redacted
                codes.append("PII_REDACTED")
    if codes:
        return ValidateResponse(
            action_id=request.action_id,
            decision=Decision.MODIFY,
            reason_code=codes[0],
            reason_message="personal data was redacted",
            modified_payload=modified,
        )
    return ValidateResponse(action_id=request.action_id, decision=Decision.ALLOW)


def _block(request: ValidateRequest, code: str, message: str) -> ValidateResponse:
    return ValidateResponse(
        action_id=request.action_id,
        decision=Decision.BLOCK,
        reason_code=code,
        reason_message=message,
    )


def _tool_call(request: ValidateRequest) -> tuple[str | None, Any]:
    """The tool name and parsed arguments of a TOOL_CALL payload."""
    if request.action_type is not ActionType.TOOL_CALL or not isinstance(request.payload, dict):
        return None, None
    function = request.payload.get("function")
    if not isinstance(function, dict):
        return None, None
    name = function.get("name")
    try:
        arguments = json.loads(function.get("arguments") or "{}", parse_constant=_no_constant)
    except (TypeError, ValueError, RecursionError):
        arguments = None
    return (name if isinstance(name, str) else None), arguments


def _is_function(payload: Any) -> bool:
    return isinstance(payload, dict) and payload.get("type") == "function"


def _no_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _number(value: Any) -> float | None:
    """A ceiling argument's value as a finite number (a numeric string too); else None."""
    if isinstance(value, bool):
        return None
    if not isinstance(value, int | float | str):
        return None
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):  # not a number, or an int past any float
        return None
    return number if math.isfinite(number) else None


def _redact(payload: Any, action_type: ActionType) -> Any:
    """Replace personal data in every string; tool arguments stay a JSON string."""
    if action_type is ActionType.TOOL_CALL and isinstance(payload, dict):
        function = payload.get("function")
        if isinstance(function, dict) and isinstance(function.get("arguments"), str):
            try:
                arguments = json.loads(function["arguments"])
            except ValueError:
                arguments = None
            if arguments is not None:
                cleaned = _redact_value(arguments)
                if cleaned != arguments:
                    text = json.dumps(cleaned, ensure_ascii=False, separators=(",", ":"))
                    return {**payload, "function": {**function, "arguments": text}}
                return payload
    return _redact_value(payload)


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return _PII.sub(REDACTED, value)
    if isinstance(value, list):
        return [_redact_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _redact_value(v) for k, v in value.items()}
    return value
