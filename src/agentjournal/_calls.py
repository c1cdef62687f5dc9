"""The calls the Agents SDK's runner executes locally, read from a model response or a
stored item (pure): what guardrails judge, gates check and a verifier recomputes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

CALL_KINDS: Final = {
    "function_call": "",
    "custom_tool_call": "",
    "computer_call": "computer",
    "local_shell_call": "local_shell",
    "shell_call": "shell",
    "apply_patch_call": "apply_patch",
}
"""Item types of calls the runner executes locally -> the tool name of those without one."""
_ENVELOPE: Final = frozenset({"type", "id", "call_id", "status", "caller", "created_by"})


@dataclass(frozen=True, slots=True)
class Call:
    """A locally executed call of a model response or of a stored item.

    Attributes:
        kind: The item type (``function_call``, ``custom_tool_call``, ...).
        call_id: Its call id.
        name: The tool's name (``computer``, ``shell``, ... for built-in kinds).
        arguments: JSON text: a function call's own arguments; for other kinds,
            the item's fields other than its envelope (custom tools: ``{"input"}``).
    """

    kind: str
    call_id: str
    name: str
    arguments: str


def call_of(item: Any) -> Call | None:
    """The call an output item or stored item is, if the runner executes it locally."""
    fields: Mapping[str, Any] | None
    if isinstance(item, Mapping):
        fields = item
    else:
        dump = getattr(item, "model_dump", None)
        fields = dump(mode="json", exclude_none=True) if callable(dump) else None
    if fields is None:
        return None
    kind = fields.get("type")
    call_id = fields.get("call_id")
    if not isinstance(kind, str) or kind not in CALL_KINDS or not isinstance(call_id, str):
        return None  # any JSON object may be an item: a type that is no string is no call
    if kind == "function_call":
        arguments = fields.get("arguments")
        return Call(kind, call_id, str(fields.get("name", "")), arguments or "{}")
    name = str(fields.get("name", "")) if kind == "custom_tool_call" else CALL_KINDS[kind]
    body = {k: v for k, v in fields.items() if k not in _ENVELOPE and k != "name"}
    return Call(kind, call_id, name, json.dumps(body, sort_keys=True, separators=(",", ":")))


def calls_of(output: Sequence[Any]) -> list[Call]:
    """Every locally executed call of a model response, in order."""
    return [call for call in (call_of(item) for item in output) if call is not None]


def tool_call_payload(
    call_id: str, name: str, arguments: str, kind: str = "function_call"
) -> dict[str, Any]:
    """The tool_call object of the OpenAI API (``type`` names the kind of other local calls)."""
    return {
        "id": call_id,
        "type": "function" if kind == "function_call" else kind,
        "function": {"name": name, "arguments": arguments},
    }
