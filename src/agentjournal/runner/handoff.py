"""``system::handoff``: the one way an agent hands the thread to another agent.

**Wire name.** OpenAI function names cannot contain ``::``, so the tool is offered
as ``system__handoff``; a model may call it by either spelling (the model wrapper,
:class:`HandoffModel`, renames ``system::handoff`` before the SDK sees the call).
Its arguments are ``{"target_agent_id", "input", "state"}`` (``state`` optional,
default ``{}``); ``target_agent_id`` is an ``enum`` of the other agents' manifest
ids, and the tool's description lists each id with its display name, so routing
comes from the platform, not from ids written into prompts.

**Mechanics.** The tool is one SDK ``Handoff`` per agent whose
``on_invoke_handoff`` picks the target from the arguments: the SDK then ends the
sender's turn (the handoff's output, ``{"assistant": target}``, is the SDK's
acknowledgement and the first item of the receiver's transcript — it is never
given to the sender, whose run is over), the session records a subagent
(``SubagentStarted``/``SubagentCompleted`` naming the real target and the call
id), the guardrail sees ``AGENT_HANDOFF`` with the arguments object, and the
target's input filter appends ``input`` as the user message it starts from
(after the thread's history). The handoff's ``state`` is merged into the thread
state before the target runs. Every call in the history has its output, so the
next invocation replays it as it is.

**Refusals.** A call that names an unknown target (or the sender itself), is
not a JSON object, or has fields of the wrong type is not a handoff: the wrapper
renames it ``system__handoff_rejected``, a function tool every agent has whose
body answers with the reason — an error output the model sees, recorded like
any call and output; the sender goes on. Being a real tool, it is checked by the
guardrail like any tool call and wrapped by ``session.guard``, so a BLOCK or
MODIFY of it is carried out instead of stopping the run.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agents.handoffs import Handoff, HandoffInputData
from agents.items import HandoffOutputItem, ModelResponse
from agents.models.interface import Model
from agents.tool import FunctionTool
from agents.tool_context import ToolContext

from agentjournal.guardrails.actions import SYSTEM_HANDOFF_TOOL
from agentjournal.runner.manifest import Catalog

if TYPE_CHECKING:
    from agents.agent import Agent
    from agents.run_context import RunContextWrapper

SEED_NAME = "system::handoff"
WIRE_NAME = SYSTEM_HANDOFF_TOOL
REJECTED_NAME = "system__handoff_rejected"
_FIELDS = frozenset({"target_agent_id", "input", "state"})


@dataclass(frozen=True)
class HandoffTaken:
    """One handoff that happened."""

    sender: str
    target: str
    input: str
    call_id: str


@dataclass
class HandoffDesk:
    """Everything ``system::handoff`` does in one invocation.

    Attributes:
        catalog: The manifests (the known targets).
        resolve: The SDK agent of a manifest id.
        state: The thread state; a handoff's ``state`` is merged into it.
        taken: The handoffs that happened, in order.
        rejected: Error outputs of refused calls, by call id.
    """

    catalog: Catalog
    resolve: Callable[[str], Agent[Any]]
    state: dict[str, Any]
    taken: list[HandoffTaken] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)
    _accepted: dict[str, Any] | None = None

    # -- the tool ----------------------------------------------------------------------

    def schema(self, sender: str) -> dict[str, Any]:
        """The arguments' JSON schema offered to ``sender``: the other agents' ids as an enum."""
        return {
            "type": "object",
            "properties": {
                "target_agent_id": {
                    "type": "string",
                    "enum": [agent for agent in self.catalog.ids() if agent != sender],
                    "description": "The id of the agent to hand the thread to.",
                },
                "input": {
                    "type": "string",
                    "description": "The user's request, reformatted for the target agent.",
                },
                "state": {
                    "type": "object",
                    "description": "Structured data merged into the thread's state.",
                },
            },
            "required": ["target_agent_id", "input"],
            "additionalProperties": False,
        }

    def handoff_for(self, sender: str) -> Handoff[Any, Any] | None:
        """The ``system__handoff`` tool of ``sender`` (None when there is no other agent)."""
        targets = [agent for agent in self.catalog.ids() if agent != sender]
        if not targets:
            return None
        listed = "; ".join(f"{agent} ({self.catalog.resolve(agent).name})" for agent in targets)
        return Handoff(
            tool_name=WIRE_NAME,
            tool_description=(
                "Hand this thread to another agent and end your turn. Known agents: "
                f"{listed}. Give the request in `input`; put structured data for it in `state`."
            ),
            input_json_schema=self.schema(sender),
            on_invoke_handoff=self._invoke,
            agent_name=SEED_NAME,  # the real receiver is the one the arguments name
            input_filter=self._start_target,
            strict_json_schema=False,  # `state` is free-form
        )

    def check(self, sender: str, arguments: str) -> tuple[dict[str, Any] | None, str]:
        """The parsed arguments of a valid handoff, or None and why it is refused."""
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return None, "the arguments are not JSON"
        if not isinstance(parsed, dict):
            return None, "the arguments must be a JSON object"
        unknown = sorted(set(parsed) - _FIELDS)
        if unknown:
            return None, f"unknown fields {unknown} (expected target_agent_id, input, state)"
        target = parsed.get("target_agent_id")
        known = [agent for agent in self.catalog.ids() if agent != sender]
        if not isinstance(target, str) or target not in known:
            return None, f"target_agent_id {target!r} is not one of {known}"
        if not isinstance(parsed.get("input"), str):
            return None, "input must be a string"
        if not isinstance(parsed.get("state", {}), dict):
            return None, "state must be a JSON object"
        return parsed, ""

    async def _invoke(self, context: RunContextWrapper[Any], arguments: str) -> Agent[Any]:
        # Checked already by the model wrapper; checked again because a guardrail's
        # MODIFY may have replaced the arguments since.
        parsed, why = self.check("", arguments)
        if parsed is None:
            raise ValueError(f"system::handoff arguments: {why}")
        self.state.update(parsed.get("state", {}))
        self._accepted = parsed
        return self.resolve(parsed["target_agent_id"])

    def _start_target(self, data: HandoffInputData) -> HandoffInputData:
        """The receiver sees the thread so far, then ``input`` as the user's message."""
        accepted, self._accepted = self._accepted, None
        output = next(
            (item for item in reversed(data.new_items) if isinstance(item, HandoffOutputItem)),
            None,
        )
        if accepted is not None and output is not None:
            raw = output.raw_item
            call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", "")
            self.taken.append(
                HandoffTaken(
                    output.source_agent.name,
                    output.target_agent.name,
                    accepted["input"],
                    str(call_id or ""),
                )
            )
        history = (
            ({"role": "user", "content": data.input_history},)
            if isinstance(data.input_history, str)
            else tuple(data.input_history)
        )
        so_far = tuple(item.to_input_item() for item in (*data.pre_handoff_items, *data.new_items))
        message: tuple[Any, ...] = (
            ({"role": "user", "content": accepted["input"]},) if accepted is not None else ()
        )
        # new_items stay as they are: they are what the session stores; input_items=()
        # because the model's view is now all in input_history.
        return data.clone(
            input_history=(*history, *so_far, *message), pre_handoff_items=(), input_items=()
        )

    # -- refused calls ------------------------------------------------------------------

    def normalise(self, sender: str, output: list[Any]) -> list[Any]:
        """A response's output with handoff calls renamed: valid ones to the wire name,
        refused ones to ``system__handoff_rejected`` (their error output is remembered)."""
        renamed: list[Any] = []
        for item in output:
            name = getattr(item, "name", None)
            if getattr(item, "type", None) == "function_call" and name in (SEED_NAME, WIRE_NAME):
                parsed, why = self.check(sender, item.arguments)
                if parsed is None:
                    self.rejected[item.call_id] = (
                        f"Error: system::handoff refused: {why}. Nothing was handed off; "
                        "go on, or call system::handoff again with valid arguments."
                    )
                    item = item.model_copy(update={"name": REJECTED_NAME})
                elif name != WIRE_NAME:
                    item = item.model_copy(update={"name": WIRE_NAME})
            renamed.append(item)
        return renamed

    def rejected_tool(self) -> FunctionTool:
        """``system__handoff_rejected``: answers each refused handoff call with its reason."""

        async def answer(context: ToolContext[Any], arguments: str) -> str:
            call_id = getattr(context, "tool_call_id", "")
            return self.rejected.get(
                call_id,
                "Error: this is not a tool; hand off by calling system::handoff.",
            )

        return FunctionTool(
            name=REJECTED_NAME,
            description=(
                "Not for use: the runner answers refused system::handoff calls under this name."
            ),
            params_json_schema={"type": "object", "properties": {}},
            on_invoke_tool=answer,
            strict_json_schema=False,
        )


class HandoffModel(Model):
    """A model whose handoff calls are normalised by a :class:`HandoffDesk` before the SDK
    sees them (``system::handoff`` -> ``system__handoff``; invalid -> rejected)."""

    def __init__(self, inner: Model, desk: HandoffDesk, sender: str) -> None:
        self._inner = inner
        self._desk = desk
        self._sender = sender

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        """The inner model's response, handoff calls normalised."""
        response = await self._inner.get_response(*args, **kwargs)
        response.output = self._desk.normalise(self._sender, list(response.output))
        return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Not used: the runner does not stream (its output is one JSON object)."""
        raise NotImplementedError("the manifest runner does not stream model responses")
