"""The ``RunHooks`` half of a journal session: what only a run knows, learned from its hooks.

Part of :class:`~agentjournal.sdk.session.JournalSession` (one object: it inherits this
class): which agent speaks, each model response's usage and outputs, which call is a
handoff, and the guardrail and authority checks that run at each hook.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel
from agents.handoffs import Handoff, handoff
from agents.lifecycle import RunHooksBase
from kurrent_agent_schema import TokenUsage, to_json

from agentjournal import events
from agentjournal.engine.plan import Produced, Responded
from agentjournal.sdk import guard as guarding
from agentjournal.sdk.approvals import asks_of
from agentjournal.tokens import ModelResponse as ResponseRecord
from agentjournal.tokens import Usage

if TYPE_CHECKING:
    from agents.agent import Agent
    from agents.items import ModelResponse, TResponseInputItem
    from agents.run_context import RunContextWrapper
    from agents.tool import Tool

    from agentjournal.sdk.enforce import Enforcer
    from agentjournal.sdk.gates import Gatekeeper
    from agentjournal.sdk.recorder import SessionRecorder
    from agentjournal.sdk.run import RunState


logger = logging.getLogger("agentjournal.session")


class _Session(Protocol):
    """What the hooks use of the session they are part of."""

    session_id: str
    _run: RunState
    _enforcer: Enforcer | None
    _gates: Gatekeeper | None
    _wiring: guarding.Wiring
    _recorder: SessionRecorder

    def _check_open(self) -> None: ...
    def _enter_run(self, context: RunContextWrapper[Any], *, main: bool = False) -> None: ...
    def _responded(self, agent: Agent[Any], response: ModelResponse) -> Responded: ...


class SessionHooks(RunHooksBase[Any, "Agent[Any]"]):
    """The SDK's ``RunHooks`` of a journal session (mixed into
    :class:`~agentjournal.sdk.session.JournalSession`)."""

    async def on_agent_start(
        self: _Session, context: RunContextWrapper[Any], agent: Agent[Any]
    ) -> None:
        """Remember which agent is speaking: it authors the items that follow."""
        self._check_open()
        self._enter_run(context)
        self._run.agent_started(agent.name)
        if self._gates is not None:
            await self._gates.agent_started(agent.name)
        if self._enforcer is not None:
            self._enforcer.agent_started()

    async def on_agent_end(
        self: _Session, context: RunContextWrapper[Any], agent: Agent[Any], output: Any
    ) -> None:
        """The run's last agent finished: its subagents close with its final message.

        A final output that was no message (a tool's result) is checked here.
        """
        self._check_open()
        if self._enforcer is not None:
            await self._enforcer.check_final_output(agent, output)
        self._run.agent_finished(output)

    async def on_llm_start(
        self: _Session,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        """Note when the call started; check a newly started agent's input with the
        guardrail (AGENT_INPUT)."""
        self._check_open()
        self._enter_run(context, main=True)
        self._run.model_called(agent.name, _now())
        if self._enforcer is not None:
            await self._enforcer.check_input(agent, input_items)

    async def on_tool_start(
        self: _Session, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        """Note when the tool call started (for its output's event); open its span.

        A resumed run runs its approved calls before any other hook fires: this may be
        the first hook of a run, and the times belong to it, not to the paused run.
        """
        self._check_open()
        self._enter_run(context)
        call_id = getattr(context, "tool_call_id", None)
        if isinstance(call_id, str) and call_id:
            self._run.tool_started(call_id, _now())
        if self._run.trace is not None:
            self._run.trace.tool_started(_tool_key(context, tool), tool.name)

    async def on_tool_end(
        self: _Session,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        tool: Tool,
        result: Any,
    ) -> None:
        """Note when the tool call ended; close its span."""
        self._check_open()
        call_id = getattr(context, "tool_call_id", None)
        if isinstance(call_id, str) and call_id:
            self._run.tool_ended(call_id, _now())
        if self._run.trace is not None:
            self._run.trace.tool_ended(_tool_key(context, tool))

    async def on_llm_end(
        self: _Session,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        response: ModelResponse,
    ) -> None:
        """Record the response (``agentjournal.ModelResponded``, written with the next write);
        remember usage, response id and handoff calls; check every action with the guardrail."""
        self._check_open()
        self._enter_run(context, main=True)
        targets = _handoff_targets(agent)
        produced = Produced(response.response_id, _usage_json(response, agent), agent.name)
        self._run.response(agent.name, response.output, produced, targets)
        self._run.responded(self._responded(agent, response))
        self._run.asked(await asks_of(context, agent, response, self._gates))
        wiring = self._wiring
        refused: set[str] = set()
        if self._gates is not None:
            refused = await self._gates.check_response(
                agent,
                response,
                handoff_targets=targets,
                guarded=lambda name: guarding.covers(agent, name, wiring),
            )
        if self._enforcer is not None:
            await self._enforcer.check_response(
                agent,
                response,
                handoff_targets=targets,
                guarded=lambda name: guarding.covers(agent, name, wiring),
                schema_of=lambda name: guarding.schema_of(agent, name),
                skip=refused,
                widens=wiring.widens(agent.name),
            )

    async def on_handoff(
        self: _Session,
        context: RunContextWrapper[Any],
        from_agent: Agent[Any],
        to_agent: Agent[Any],
    ) -> None:
        """Match the handoff to its exact call; grant the receiver its authority."""
        self._check_open()
        if self._gates is not None:
            await self._gates.handed_off(from_agent.name, to_agent.name)
        if not self._run.handed_off(from_agent.name, to_agent.name):
            logger.warning(
                "handoff %s -> %s has no matching call from on_llm_end; it is stored as a "
                "tool call",
                from_agent.name,
                to_agent.name,
            )

    def _responded(self: _Session, agent: Agent[Any], response: ModelResponse) -> Responded:
        """The ``ModelResponded`` event of a response that just arrived (not yet written)."""
        usage = response.usage
        model, system = _model_of(agent)
        kinds = Counter(str(getattr(item, "type", None) or "unknown") for item in response.output)
        record = ResponseRecord(
            session_id=self.session_id,
            agent=agent.name,
            model=model,
            system=system,
            response_id=response.response_id,
            usage=Usage(
                requests=1,
                input_tokens=usage.input_tokens,
                cached_input_tokens=getattr(usage.input_tokens_details, "cached_tokens", 0) or 0,
                output_tokens=usage.output_tokens,
                reasoning_tokens=getattr(usage.output_tokens_details, "reasoning_tokens", 0) or 0,
                total_tokens=usage.total_tokens,
            ),
            started_at=self._run.model_responded(agent.name),
            ended_at=_now(),
            outputs=dict(sorted(kinds.items())),
        )
        metadata = self._recorder.trace_now()
        if response.response_id:
            metadata[events.RESPONSE_ID_KEY] = response.response_id
        # The id is fixed now: every attempt of whichever write carries it sends the same event.
        return Responded(uuid.uuid4(), agent.name, record.encode(), metadata)


def _handoff_targets(agent: Agent[Any]) -> dict[str, str]:
    """The agent's handoff tool names -> receiving agent names."""
    targets: dict[str, str] = {}
    for entry in getattr(agent, "handoffs", ()) or ():
        try:
            resolved = entry if isinstance(entry, Handoff) else handoff(entry)
        except Exception:  # not something the SDK can hand off to
            continue
        targets[resolved.tool_name] = resolved.agent_name
    return targets


def _usage_json(response: ModelResponse, agent: Agent[Any]) -> str | None:
    """The response's usage as canonical ``TokenUsage`` JSON (the ``$usage`` value)."""
    usage = response.usage
    if usage is None:
        return None
    message = TokenUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        cached_input_tokens=getattr(usage.input_tokens_details, "cached_tokens", 0) or 0,
        reasoning_tokens=getattr(usage.output_tokens_details, "reasoning_tokens", 0) or 0,
    )
    if isinstance(agent.model, str):
        message.model = agent.model
    text: str = to_json(message)
    return text


def _model_of(agent: Agent[Any]) -> tuple[str | None, str | None]:
    """The model an agent names and its GenAI system, as far as the agent shows them.

    A name is routed by the run's model provider, which hooks cannot see: a bare name
    or ``openai/...`` is OpenAI's under the SDK's default provider, anything else (or a
    ``RunConfig(model=...)`` override) is unknown to us. An SDK OpenAI model object is
    OpenAI's; another model object gives its ``model`` attribute when that is a name.
    """
    model = agent.model
    if isinstance(model, str):
        return model, "openai" if "/" not in model or model.startswith("openai/") else None
    name = getattr(model, "model", None)
    system = (
        "openai" if isinstance(model, OpenAIResponsesModel | OpenAIChatCompletionsModel) else None
    )
    return (name if isinstance(name, str) else None), system


def _tool_key(context: Any, tool: Any) -> str:
    """One tool call's key for its span: the call id when the context has it."""
    return str(getattr(context, "tool_call_id", None) or getattr(tool, "name", ""))


def _now() -> str:
    """Now, RFC 3339 UTC with microseconds."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
