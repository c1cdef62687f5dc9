"""``session.guard(agent)``: guardrail and authority wrappers over a whole agent graph.

The hooks can stop a run but cannot refuse one tool call and go on, nor
change a call's arguments, nor hide a tool or a handoff. The guard installs
what the SDK offers for that, on a copy of the graph (the agents passed in are
not changed):

- every function tool's ``on_invoke_tool`` is wrapped: the authority gate
  refuses a call outside the running agent's authority, then the guardrail
  decides; a refused or blocked call returns an error output to the model and
  the body never runs; MODIFY runs the body with the modified arguments;
- every handoff's ``on_invoke_handoff`` is wrapped: a refused or blocked
  handoff stops the run, MODIFY hands off with the modified input, and the
  receiver is the guarded copy of the target agent, so the guard reaches every
  agent the run can reach, cycles included;
- with a policy whose ``visibility`` is on, every tool's and handoff's
  ``is_enabled`` also asks the policy (after the agent's own ``is_enabled``);
- a function tool whose policy rule has an ``approval`` gets a
  ``needs_approval`` that also asks the policy (either asks): the SDK stops the
  run for a person, and after the answer the authority gate lets the call run
  only with the arguments a person approved on the record.
"""

from __future__ import annotations

import copy
import inspect
import json
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from agents.handoffs import Handoff, handoff
from agents.tool import FunctionTool, _get_function_tool_invoke_context
from agents.tool_context import ToolContext
from agents.util._approvals import evaluate_needs_approval_setting

from agentjournal.guardrails import actions
from agentjournal.guardrails.protocol import Decision
from agentjournal.sdk.enforce import Enforcer
from agentjournal.sdk.gates import Gatekeeper

if TYPE_CHECKING:
    from agents.agent import Agent
    from agents.run_context import RunContextWrapper

_MARK: Final = "__agentjournal_wiring__"


@dataclass(frozen=True, eq=False)
class Wiring:
    """What a session's wrappers consult: its guardrail enforcer and its gatekeeper."""

    enforcer: Enforcer | None
    gates: Gatekeeper | None

    def widens(self, agent: str) -> Any:
        """For a guardrail MODIFY of ``agent``'s tool call: why it exceeds its authority."""
        gates = self.gates
        if gates is None:
            return None
        return lambda tool, arguments: gates.widens(agent, tool, arguments)


def guard_graph(agent: Agent[Any], wiring: Wiring) -> Agent[Any]:
    """Return a guarded copy of ``agent`` and of every agent its handoffs reach."""
    guarded: dict[int, Agent[Any]] = {}

    def visit(original: Agent[Any]) -> Agent[Any]:
        if getattr(original, _MARK, None) is wiring:
            return original
        found = guarded.get(id(original))
        if found is not None:
            return found
        clone = original.clone(tools=[], handoffs=[])
        setattr(clone, _MARK, wiring)
        guarded[id(original)] = clone
        clone.tools = [_wrap_tool(tool, wiring, clone.name) for tool in original.tools]
        clone.handoffs = [_wrap_handoff(entry, clone, wiring, visit) for entry in original.handoffs]
        return clone

    return visit(agent)


def covers(agent: Agent[Any], tool_name: str, wiring: Wiring) -> bool:
    """Whether a wrapper of ``wiring`` covers the agent's tool or handoff ``tool_name``."""
    entry = _entry(agent, tool_name)
    if isinstance(entry, FunctionTool):
        return getattr(entry.on_invoke_tool, _MARK, None) is wiring
    if isinstance(entry, Handoff):
        return getattr(entry.on_invoke_handoff, _MARK, None) is wiring
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


async def _enabled(setting: Any, ctx: Any, agent: Any) -> bool:
    """The SDK's own ``is_enabled`` rule: a bool, or a callable that may be async."""
    if isinstance(setting, bool):
        return setting
    result = setting(ctx, agent)
    if inspect.isawaitable(result):
        result = await result
    return bool(result)


def _gated(
    own: Any, policy_allows: Callable[[str], Awaitable[bool]]
) -> Callable[[RunContextWrapper[Any], Any], Awaitable[bool]]:
    """An ``is_enabled``: the tool's or handoff's own setting first, then the policy's gate."""

    async def is_enabled(ctx: RunContextWrapper[Any], agent: Any) -> bool:
        return await _enabled(own, ctx, agent) and await policy_allows(agent.name)

    return is_enabled


def _asking(
    own: Any, policy_asks: Callable[[str], Awaitable[bool]]
) -> Callable[[RunContextWrapper[Any], dict[str, Any], str], Awaitable[bool]]:
    """A ``needs_approval``: the tool's own setting, or else the policy's (either asks)."""

    async def needs_approval(
        ctx: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        if await evaluate_needs_approval_setting(own, ctx, params, call_id):
            return True
        return await policy_asks(json.dumps(params))

    return needs_approval


def _wrap_tool(tool: Any, wiring: Wiring, agent_name: str) -> Any:
    """A copy of a function tool (of agent ``agent_name``) whose invocation passes the
    gates first."""
    if not isinstance(tool, FunctionTool) or getattr(tool.on_invoke_tool, _MARK, None) is wiring:
        return tool
    original = tool
    enforcer, gates = wiring.enforcer, wiring.gates

    async def invoke(ctx: ToolContext[Any], arguments: str) -> Any:
        agent = getattr(getattr(ctx, "agent", None), "name", "") or ""
        if gates is not None:
            refused = await gates.refuse_call(agent, ctx.tool_call_id, original.name, arguments)
            if refused is not None:
                return refused
        if enforcer is not None:
            verdict = await enforcer.tool_verdict(
                agent,
                ctx.tool_call_id,
                original.name,
                arguments,
                original.params_json_schema,
                widens=wiring.widens(agent),
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

    setattr(invoke, _MARK, wiring)
    wrapped = copy.copy(tool)
    wrapped.on_invoke_tool = invoke
    if gates is not None and gates.policy.visibility:
        wrapped.is_enabled = _gated(
            tool.is_enabled, lambda agent: gates.tool_visible(agent, original.name)
        )
    rule = gates.policy.tools.get(original.name) if gates is not None else None
    asks = rule is not None and rule.approval is not None and tool.needs_approval is not True
    if gates is not None and asks:
        wrapped.needs_approval = _asking(
            tool.needs_approval,
            lambda arguments: gates.asks(agent_name, original.name, arguments),
        )
    return wrapped


def _wrap_handoff(entry: Any, sender: Agent[Any], wiring: Wiring, visit: Any) -> Handoff[Any, Any]:
    """A copy of a handoff whose invocation passes the gates first and hands off guarded."""
    resolved: Handoff[Any, Any] = entry if isinstance(entry, Handoff) else handoff(entry)
    if getattr(resolved.on_invoke_handoff, _MARK, None) is wiring:
        return resolved
    original = resolved.on_invoke_handoff
    receiver = resolved.agent_name
    enforcer, gates = wiring.enforcer, wiring.gates

    async def invoke(ctx: RunContextWrapper[Any], input_json: str) -> Any:
        tool_name = resolved.tool_name
        # system__handoff names its receiver in its arguments (seed 000's system::handoff).
        named = actions.handoff_target(receiver, input_json, tool_name=tool_name)
        if gates is not None:
            await gates.check_handoff(sender.name, named, input_json)
        if enforcer is not None:
            verdict = await enforcer.handoff_verdict(
                sender.name, named, input_json, resolved.input_json_schema, tool_name=tool_name
            )
            if verdict.decision is Decision.BLOCK:
                await enforcer.stop(verdict, named)
            if verdict.decision is Decision.MODIFY:
                input_json = actions.handoff_arguments(
                    verdict.modified_payload, tool_name=tool_name
                )
        target = await original(ctx, input_json)
        if gates is not None:
            # A handoff may hand to another agent than it names (a router): the policy
            # applies to the agent that really receives it.
            actual = getattr(target, "name", named)
            if actual != named:
                await gates.check_handoff(sender.name, actual, input_json)
            await gates.handed_off(sender.name, actual)
        return visit(target)

    setattr(invoke, _MARK, wiring)
    wrapped = copy.copy(resolved)
    wrapped.on_invoke_handoff = invoke
    if gates is not None and gates.policy.visibility:
        wrapped.is_enabled = _gated(
            resolved.is_enabled, lambda agent: gates.handoff_visible(agent, receiver)
        )
    target = resolved._agent_ref() if resolved._agent_ref is not None else None
    if target is not None:
        wrapped._agent_ref = weakref.ref(visit(target))
    return wrapped
