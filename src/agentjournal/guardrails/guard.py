"""``session.guard(agent)``: guardrail wrappers over a whole agent graph.

The hooks can stop a run but cannot refuse one tool call and go on, nor
change a call's arguments (see :mod:`agentjournal.guardrails.enforce`). The
guard installs what the SDK offers for that, on a copy of the graph (the
agents passed in are not changed):

- every function tool's ``on_invoke_tool`` is wrapped: BLOCK returns an error
  output to the model and the body never runs; MODIFY runs the body with the
  modified arguments;
- every handoff's ``on_invoke_handoff`` is wrapped: BLOCK stops the run,
  MODIFY hands off with the modified input, and the receiver is the guarded
  copy of the target agent, so the guard reaches every agent the run can
  reach, cycles included.
"""

from __future__ import annotations

import copy
import weakref
from typing import TYPE_CHECKING, Any, Final

from agents.handoffs import Handoff, handoff
from agents.tool import FunctionTool, _get_function_tool_invoke_context
from agents.tool_context import ToolContext

from agentjournal.guardrails import actions
from agentjournal.guardrails.enforce import Enforcer
from agentjournal.guardrails.protocol import Decision

if TYPE_CHECKING:
    from agents.agent import Agent
    from agents.run_context import RunContextWrapper

__all__ = ["covers", "guard_graph", "schema_of"]

_MARK: Final = "__agentjournal_enforcer__"


def guard_graph(agent: Agent[Any], enforcer: Enforcer) -> Agent[Any]:
    """Return a guarded copy of ``agent`` and of every agent its handoffs reach."""
    guarded: dict[int, Agent[Any]] = {}

    def visit(original: Agent[Any]) -> Agent[Any]:
        if _marked(original, enforcer):
            return original
        found = guarded.get(id(original))
        if found is not None:
            return found
        clone = original.clone(tools=[], handoffs=[])
        setattr(clone, _MARK, enforcer)
        guarded[id(original)] = clone
        clone.tools = [_wrap_tool(tool, enforcer) for tool in original.tools]
        clone.handoffs = [
            _wrap_handoff(entry, clone, enforcer, visit) for entry in original.handoffs
        ]
        return clone

    return visit(agent)


def covers(agent: Agent[Any], tool_name: str, enforcer: Enforcer) -> bool:
    """Whether a guard wrapper of ``enforcer`` covers the agent's tool or handoff ``tool_name``."""
    entry = _entry(agent, tool_name)
    if isinstance(entry, FunctionTool):
        return getattr(entry.on_invoke_tool, _MARK, None) is enforcer
    if isinstance(entry, Handoff):
        return getattr(entry.on_invoke_handoff, _MARK, None) is enforcer
    return False


def schema_of(agent: Agent[Any], tool_name: str) -> dict[str, Any] | None:
    """The JSON schema of the agent's tool or handoff ``tool_name``, None if unknown."""
    entry = _entry(agent, tool_name)
    if isinstance(entry, FunctionTool):
        return entry.params_json_schema
    if isinstance(entry, Handoff):
        return entry.input_json_schema
    return None


def _entry(agent: Agent[Any], tool_name: str) -> FunctionTool | Handoff[Any, Any] | None:
    for tool in getattr(agent, "tools", ()) or ():
        if isinstance(tool, FunctionTool) and tool.name == tool_name:
            return tool
    for entry in getattr(agent, "handoffs", ()) or ():
        if isinstance(entry, Handoff) and entry.tool_name == tool_name:
            return entry
        if not isinstance(entry, Handoff) and hasattr(entry, "name"):
            try:
                resolved = handoff(entry)
            except Exception:  # not something the SDK can hand off to
                continue
            if resolved.tool_name == tool_name:
                return resolved
    return None


def _marked(agent: Agent[Any], enforcer: Enforcer) -> bool:
    return getattr(agent, _MARK, None) is enforcer


def _wrap_tool(tool: Any, enforcer: Enforcer) -> Any:
    """A copy of a function tool whose invocation asks the guardrail first."""
    if not isinstance(tool, FunctionTool) or getattr(tool.on_invoke_tool, _MARK, None) is enforcer:
        return tool
    original = tool

    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        agent = getattr(ctx, "agent", None)
        verdict = await enforcer.tool_verdict(
            agent.name if agent is not None else "",
            ctx.tool_call_id,
            original.name,
            arguments,
            original.params_json_schema,
        )
        if verdict.decision is Decision.BLOCK:
            return (
                f"Error: the guardrail blocked this call to {original.name} "
                f"({verdict.reason_code or 'no reason code'})"
                + (f": {verdict.reason_message}" if verdict.reason_message else "")
            )
        if verdict.decision is Decision.MODIFY:
            arguments = actions.modified_arguments(verdict.modified_payload)
        # The original invoker may want a plain RunContextWrapper: the SDK's own choice.
        context: Any = _get_function_tool_invoke_context(original, ctx)
        return await original.on_invoke_tool(context, arguments)

    setattr(invoke, _MARK, enforcer)
    wrapped = copy.copy(tool)
    wrapped.on_invoke_tool = invoke
    return wrapped


def _wrap_handoff(
    entry: Any, sender: Agent[Any], enforcer: Enforcer, visit: Any
) -> Handoff[Any, Any]:
    """A copy of a handoff whose invocation asks the guardrail first and hands off guarded."""
    resolved: Handoff[Any, Any] = entry if isinstance(entry, Handoff) else handoff(entry)
    if getattr(resolved.on_invoke_handoff, _MARK, None) is enforcer:
        return resolved
    original = resolved.on_invoke_handoff

    async def invoke(ctx: RunContextWrapper[Any], input_json: str) -> Any:
        verdict = await enforcer.handoff_verdict(
            sender.name, resolved.agent_name, input_json, resolved.input_json_schema
        )
        if verdict.decision is Decision.BLOCK:
            await enforcer.stop(verdict, resolved.agent_name)
        if verdict.decision is Decision.MODIFY:
            input_json = verdict.modified_payload["input"]
        return visit(await original(ctx, input_json))

    setattr(invoke, _MARK, enforcer)
    wrapped = copy.copy(resolved)
    wrapped.on_invoke_handoff = invoke
    target = resolved._agent_ref() if resolved._agent_ref is not None else None
    if target is not None:
        wrapped._agent_ref = weakref.ref(visit(target))
    return wrapped
