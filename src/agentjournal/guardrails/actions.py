"""What the guardrail is shown for each action, and how a MODIFY is checked and applied (pure).

Payloads follow seed 000:

=================  ===========================================================
``AGENT_INPUT``     ``{"role": "user", "content": "<text>"}`` — the latest user
                    message the agent is given
``TOOL_CALL``       ``{"id", "type": "function", "function": {"name", "arguments"}}``
                    (``arguments`` a JSON string, as the model wrote it)
``AGENT_HANDOFF``   ``{"target_agent_id", "input", "state"}`` — ``input`` is the
                    handoff call's arguments (a JSON string), ``state`` is ``{}``;
                    for the runner's ``system::handoff`` (wire name
                    ``system__handoff``) the call's arguments object itself
``AGENT_RESPONSE``  the final message's text (a string)
=================  ===========================================================

A MODIFY must keep the shape, and may change only what the action carries: a
tool call keeps its id and tool name and its arguments must fit the tool's
JSON schema; a handoff keeps its target; an input stays a user message.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import jsonschema

from agentjournal._digests import value_digest

Fits = Callable[[Any], bool]
digest = value_digest
"""``sha256:`` + hex digest of a payload as JSON with sorted keys and no whitespace."""


# -- AGENT_INPUT ------------------------------------------------------------------


def message_text(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = [
            part.get("text", "")
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        ]
        return "".join(parts)
    return ""


def _is_user_message(item: Any) -> bool:
    return (
        isinstance(item, Mapping)
        and item.get("role") == "user"
        and item.get("type", "message") == "message"
    )


def input_payload(items: Sequence[Any]) -> dict[str, str]:
    """The payload of the latest user message in ``items`` (empty content when there is none)."""
    for item in reversed(items):
        if _is_user_message(item):
            return {"role": "user", "content": message_text(item.get("content"))}
    return {"role": "user", "content": ""}


def input_fits(modified: Any) -> bool:
    """A modified input is still a user message with text content."""
    return (
        isinstance(modified, Mapping)
        and modified.get("role") == "user"
        and isinstance(modified.get("content"), str)
        and set(modified) <= {"role", "content"}
    )


def replace_input(items: list[Any], replacements: Mapping[str, str]) -> int:
    """Swap the content of user messages whose text was modified; return how many changed.

    Items are replaced, not mutated: the list is the model's input, the items
    may be shared with what the session stores. The new content is the
    modified text (other parts of a multi-part message go with the original).
    """
    changed = 0
    for position, item in enumerate(items):
        if not _is_user_message(item):
            continue
        text = message_text(item.get("content"))
        if text in replacements and replacements[text] != text:
            items[position] = {**item, "content": replacements[text]}
            changed += 1
    return changed


# -- TOOL_CALL --------------------------------------------------------------------


def tool_call_fits(call_id: str, name: str, schema: Mapping[str, Any] | None) -> Fits:
    """A check that a modified tool call keeps id and name and its arguments fit ``schema``."""

    def fits(modified: Any) -> bool:
        if not isinstance(modified, Mapping) or modified.get("id") != call_id:
            return False
        function = modified.get("function")
        if modified.get("type") != "function" or not isinstance(function, Mapping):
            return False
        if function.get("name") != name or not isinstance(function.get("arguments"), str):
            return False
        return _json_fits(function["arguments"], schema)

    return fits


def modified_arguments(modified: Mapping[str, Any]) -> str:
    """The arguments of a modified tool call (checked by :func:`tool_call_fits`)."""
    arguments: str = modified["function"]["arguments"]
    return arguments


# -- AGENT_HANDOFF ----------------------------------------------------------------


SYSTEM_HANDOFF_TOOL: Final = "system__handoff"
"""The wire name of seed 000's ``system::handoff`` (OpenAI function names cannot hold ``::``).
Its arguments are already ``{"target_agent_id", "input", "state"}``: the guardrail is shown
that object, and the target is the one it names."""


def handoff_payload(target: str, arguments: str, *, tool_name: str = "") -> dict[str, Any]:
    """The ``system::handoff`` arguments for an SDK handoff call.

    A ``system__handoff`` call's payload is its arguments object as the model
    wrote it; any other handoff is shown as ``target``, its arguments as ``input``.
    """
    if tool_name == SYSTEM_HANDOFF_TOOL:
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"target_agent_id": target, "input": arguments, "state": {}}


def handoff_target(target: str, arguments: str, *, tool_name: str = "") -> str:
    """The agent a handoff call goes to: ``target``, or the one a ``system__handoff`` names."""
    named = handoff_payload(target, arguments, tool_name=tool_name).get("target_agent_id")
    return named if isinstance(named, str) else target


def handoff_arguments(modified: Mapping[str, Any], *, tool_name: str = "") -> str:
    """The handoff's arguments after a MODIFY (checked by :func:`handoff_fits`)."""
    if tool_name == SYSTEM_HANDOFF_TOOL:
        return json.dumps(dict(modified), ensure_ascii=False, separators=(",", ":"))
    arguments: str = modified["input"]
    return arguments


def handoff_fits(target: str, schema: Mapping[str, Any] | None, *, tool_name: str = "") -> Fits:
    """A check that a modified handoff keeps its target and its input fits ``schema``.

    For ``system__handoff`` the whole modified object must fit the tool's schema.
    """

    def fits(modified: Any) -> bool:
        shaped = (
            isinstance(modified, Mapping)
            and modified.get("target_agent_id") == target
            and isinstance(modified.get("input"), str)
            and isinstance(modified.get("state", {}), Mapping)
        )
        if not shaped:
            return False
        if tool_name == SYSTEM_HANDOFF_TOOL:
            return _json_fits(json.dumps(dict(modified)), schema)
        return _json_fits(modified["input"], schema)

    return fits


# -- AGENT_RESPONSE ---------------------------------------------------------------


def _is_message(item: Any) -> bool:
    return getattr(item, "type", None) == "message" and getattr(item, "role", None) == "assistant"


def response_text(output: Sequence[Any]) -> str | None:
    """The final message's text when ``output`` ends the run (messages, no calls), else None."""
    if any(getattr(item, "type", "").endswith("_call") for item in output):
        return None
    messages = [item for item in output if _is_message(item)]
    if not messages:
        return None
    return "".join(
        getattr(part, "text", "")
        for part in messages[-1].content
        if getattr(part, "type", None) == "output_text"
    )


def apply_response(output: Sequence[Any], text: str) -> None:
    """Make ``text`` the final message: its first text part holds it, other text parts go."""
    message = [item for item in output if _is_message(item)][-1]
    parts = [part for part in message.content if getattr(part, "type", None) == "output_text"]
    if not parts:
        raise ValueError("the final message has no text part to modify")
    first = parts[0]
    first.text = text
    first.annotations = []
    message.content = [
        part
        for part in message.content
        if part is first or getattr(part, "type", None) != "output_text"
    ]


def _json_fits(arguments: str, schema: Mapping[str, Any] | None) -> bool:
    try:
        value = json.loads(arguments)
    except ValueError:
        return False
    if schema is None:
        return isinstance(value, dict)
    try:
        validator = jsonschema.validators.validator_for(schema)
        validator(schema).validate(value)
    except jsonschema.exceptions.ValidationError:
        return False
    except jsonschema.exceptions.SchemaError:
        return False  # a schema we cannot check against lets nothing through
    return True
