"""Carrying out guardrail decisions inside a run: the checks behind the hooks and the guard.

One :class:`Enforcer` belongs to one session object. The session's hooks call
it at the earliest point the SDK offers for each action:

- ``on_llm_start`` — ``AGENT_INPUT``, once per agent activation, before the
  model is called. BLOCK stops the run; MODIFY rewrites the model's input.
- ``on_llm_end`` — the response is parsed and nothing has executed yet:
  ``TOOL_CALL`` for each call the runner executes locally (function, custom,
  shell, computer and apply-patch calls), ``AGENT_HANDOFF`` for the handoff the
  SDK will take, ``AGENT_RESPONSE`` for a final message. The final message's
  BLOCK stops the run and its MODIFY rewrites it in place. A tool call or
  handoff that a ``session.guard(agent)`` wrapper covers is left to the
  wrapper; otherwise BLOCK stops the run, and MODIFY cannot be carried out
  by a hook, so it is recorded as BLOCK (``GUARDRAIL_UNENFORCEABLE``) and
  stops the run too.
- ``on_agent_end`` — ``AGENT_RESPONSE`` of a final output that was no
  message (a tool's result that ends the run): BLOCK, or a MODIFY that
  cannot be applied there, stops the run.

The wrappers (:mod:`agentjournal.sdk.guard`) take the decision made at
``on_llm_end`` for the same call, or ask themselves when there is none, and
enforce at invocation time: a blocked tool's body never runs and the model
gets an error output; a modified tool runs with the modified arguments; a
blocked handoff stops the run; a modified one proceeds with the modified
input.

Every decision is recorded (``agentjournal.GuardrailDecided``) before it is
acted on; if it cannot be recorded the action does not happen and the run
stops with :class:`~agentjournal.errors.GuardrailBlocked`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NoReturn

from agentjournal._calls import calls_of, tool_call_payload
from agentjournal.errors import GuardrailBlocked
from agentjournal.events import Enforcement, GuardrailDecided
from agentjournal.guardrails import actions
from agentjournal.guardrails.client import GuardrailClient, Verdict
from agentjournal.guardrails.protocol import ActionType, Decision, ReasonCode, TraceRef
from agentjournal.sdk import tracing
from agentjournal.sdk._raised import RunGuardrailBlocked
from agentjournal.sdk.port import Recorder

if TYPE_CHECKING:
    from agents.agent import Agent
    from agents.items import ModelResponse

logger = logging.getLogger("agentjournal.guardrails")

DECISION_NOT_RECORDED: Final = "DECISION_NOT_RECORDED"

Widens = Callable[[str, str], "str | None"]
"""(tool name, arguments) -> why they exceed the acting agent's authority, or None."""


@dataclass
class _Turn:
    """Decisions made at ``on_llm_end``, waiting for the guard wrappers of the same turn."""

    tools: dict[str, Verdict] = field(default_factory=dict)  # by call id
    handoffs: dict[str, Verdict] = field(default_factory=dict)  # by target agent


class Enforcer:
    """Asks the guardrail about the actions of a session's runs and enforces the answers.

    Args:
        client: The guardrail client.
        thread_id: The session id (``thread_id`` of every request).
        recorder: The session that records the decisions.
    """

    def __init__(self, client: GuardrailClient, *, thread_id: str, recorder: Recorder) -> None:
        self.client = client
        self.thread_id = thread_id
        self._recorder = recorder
        self._turn = _Turn()
        self._input_pending = False
        self._response_checked = False
        self._replacements: dict[str, str] = {}  # user input text -> its modification, this run

    # -- run lifecycle (called by the session's hooks) -----------------------------

    def new_run(self) -> None:
        """Forget everything decided for the previous run."""
        self._turn = _Turn()
        self._input_pending = False
        self._response_checked = False
        self._replacements = {}

    def agent_started(self) -> None:
        """An agent starts: its input is checked at its first model call."""
        self._input_pending = True
        self._response_checked = False

    # -- hooks --------------------------------------------------------------------

    async def check_input(self, agent: Agent[Any], input_items: list[Any]) -> None:
        """``on_llm_start``: carry earlier modifications over, then check a new agent's input."""
        if self._replacements:
            actions.replace_input(input_items, self._replacements)
        if not self._input_pending:
            return
        self._input_pending = False
        payload = actions.input_payload(input_items)
        verdict = await self._decide(
            ActionType.AGENT_INPUT,
            payload,
            agent=agent.name,
            subject=agent.name,
            call_id=None,
            fits=actions.input_fits,
            enforcement=_run_level,
        )
        if verdict.decision is Decision.BLOCK:
            await self.stop(verdict, agent.name)
        if verdict.decision is Decision.MODIFY:
            self._replacements[payload["content"]] = verdict.modified_payload["content"]
            actions.replace_input(input_items, self._replacements)

    async def check_response(
        self,
        agent: Agent[Any],
        response: ModelResponse,
        *,
        handoff_targets: dict[str, str],
        guarded: Callable[[str], bool],
        schema_of: Callable[[str], dict[str, Any] | None],
        skip: frozenset[str] | set[str] = frozenset(),
        widens: Widens | None = None,
    ) -> None:
        """``on_llm_end``: check every action of the response before any of it executes.

        Args:
            agent: The agent that answered.
            response: The parsed model response (a final message may be modified in place).
            handoff_targets: The agent's handoff tool names -> target agent names.
            guarded: Whether a guard wrapper covers a tool or handoff tool name.
            schema_of: The JSON schema of a tool's or handoff's arguments.
            skip: Call ids already refused (by the authority gate): not asked about.
            widens: Why a tool call's modified arguments would exceed the agent's authority.
        """
        self._turn = _Turn()
        output = list(response.output)
        pending: list[tuple[Awaitable[Verdict], bool, str]] = []  # check, wrapped, subject
        handoff_seen = False
        for call in calls_of(output):
            name, call_id, arguments = call.name, call.call_id, call.arguments
            if call_id in skip:
                continue
            function = call.kind == "function_call"
            target = handoff_targets.get(name) if function else None
            if target is not None and handoff_seen:
                continue  # the SDK takes the first handoff of a response only
            wrapped = function and guarded(name)  # other local calls have no wrapper
            if target is None:
                check = self._decide(
                    ActionType.TOOL_CALL,
                    tool_call_payload(call_id, name, arguments, call.kind),
                    agent=agent.name,
                    subject=name,
                    call_id=call_id,
                    fits=actions.tool_call_fits(call_id, name, schema_of(name)),
                    enforcement=_hook_level(wrapped, refusable=True),
                    widens=widens,
                )
            else:
                handoff_seen = True
                target = actions.handoff_target(target, arguments, tool_name=name)
                check = self._decide(
                    ActionType.AGENT_HANDOFF,
                    actions.handoff_payload(target, arguments, tool_name=name),
                    agent=agent.name,
                    subject=target,
                    call_id=call_id,
                    fits=actions.handoff_fits(target, schema_of(name), tool_name=name),
                    enforcement=_hook_level(wrapped, refusable=False),
                )
            pending.append((check, wrapped, target or name))
        final_text = actions.response_text(output)
        if final_text is not None:
            self._response_checked = True
            check = self._decide(
                ActionType.AGENT_RESPONSE,
                final_text,
                agent=agent.name,
                subject=agent.name,
                call_id=None,
                fits=lambda modified: isinstance(modified, str),
                enforcement=_run_level,
            )
            pending.append((check, False, agent.name))
        if not pending:
            return
        # Every check finishes (and is recorded) before the first failure is raised.
        outcomes = await asyncio.gather(*(check for check, _, _ in pending), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        verdicts = [outcome for outcome in outcomes if isinstance(outcome, Verdict)]
        for verdict, (_, wrapped, subject) in zip(verdicts, pending, strict=True):
            kind = verdict.action_type
            if verdict.decision is Decision.BLOCK and not (
                wrapped and kind is ActionType.TOOL_CALL
            ):
                await self.stop(verdict, subject)
            if kind is ActionType.AGENT_RESPONSE and verdict.decision is Decision.MODIFY:
                actions.apply_response(output, verdict.modified_payload)
            elif kind is ActionType.TOOL_CALL:
                self._turn.tools[verdict.payload["id"]] = verdict
            elif kind is ActionType.AGENT_HANDOFF:
                self._turn.handoffs[verdict.payload["target_agent_id"]] = verdict

    async def check_final_output(self, agent: Agent[Any], output: Any) -> None:
        """``on_agent_end``: a final output that was no message (e.g. a tool's result ends the run).

        ``AGENT_RESPONSE`` of such an output can only be stopped here, not
        rewritten: BLOCK stops the run, MODIFY is recorded as unenforceable
        and stops it too.
        """
        if self._response_checked:
            return
        self._response_checked = True
        payload = output if isinstance(output, str) else json.dumps(output, default=str)
        verdict = await self._decide(
            ActionType.AGENT_RESPONSE,
            payload,
            agent=agent.name,
            subject=agent.name,
            call_id=None,
            fits=lambda modified: isinstance(modified, str),
            enforcement=_hook_level(False, refusable=False),
        )
        if verdict.decision is not Decision.ALLOW:
            await self.stop(verdict, agent.name)

    # -- guard wrappers --------------------------------------------------------------

    async def tool_verdict(
        self,
        agent: str,
        call_id: str,
        name: str,
        arguments: str,
        schema: dict[str, Any] | None,
        *,
        widens: Widens | None = None,
    ) -> Verdict:
        """The decision for a tool call about to run: the one from ``on_llm_end``, or a new one."""
        earlier = self._turn.tools.pop(call_id, None)
        payload = tool_call_payload(call_id, name, arguments)
        if earlier is not None and earlier.payload == payload:
            return earlier
        return await self._decide(
            ActionType.TOOL_CALL,
            payload,
            agent=agent,
            subject=name,
            call_id=call_id,
            fits=actions.tool_call_fits(call_id, name, schema),
            enforcement=_guarded_tool,
            widens=widens,
        )

    async def handoff_verdict(
        self,
        agent: str,
        target: str,
        arguments: str,
        schema: dict[str, Any] | None,
        *,
        tool_name: str = "",
    ) -> Verdict:
        """The decision for a handoff about to happen: the one from ``on_llm_end``, or a new one."""
        target = actions.handoff_target(target, arguments, tool_name=tool_name)
        earlier = self._turn.handoffs.pop(target, None)
        payload = actions.handoff_payload(target, arguments, tool_name=tool_name)
        if earlier is not None and earlier.payload == payload:
            return earlier
        return await self._decide(
            ActionType.AGENT_HANDOFF,
            payload,
            agent=agent,
            subject=target,
            call_id=None,
            fits=actions.handoff_fits(target, schema, tool_name=tool_name),
            enforcement=_run_level,
        )

    async def stop(
        self, verdict: Verdict, subject: str, error: GuardrailBlocked | None = None
    ) -> NoReturn:
        """End the run because of ``verdict``: the session closes what is open, then raise."""
        error = error or blocked(verdict, subject)
        try:
            await self._recorder.run_stopped(error)
        except Exception:  # the block is what the caller must hear of
            logger.exception(
                "could not close the run stopped by guardrail action %s", verdict.action_id
            )
        raise error

    # -- deciding and recording ---------------------------------------------------

    async def _decide(
        self,
        action_type: ActionType,
        payload: Any,
        *,
        agent: str,
        subject: str,
        call_id: str | None,
        fits: actions.Fits,
        enforcement: Callable[[Verdict], str],
        widens: Widens | None = None,
    ) -> Verdict:
        """Ask, settle how the answer is carried out, record it; the verdict to act on.

        A MODIFY of a tool call that ``widens`` says exceeds the agent's
        authority becomes a BLOCK (``GUARDRAIL_WIDENS_AUTHORITY``).
        """
        span = tracing.start_span(
            f"agentjournal.guardrail {action_type.value}",
            parent=self._recorder.agent_span(),
            attributes={
                "agentjournal.action_type": action_type.value,
                "agentjournal.agent": agent,
                "agentjournal.subject": subject,
            },
        )
        ids = tracing.ids_of(span)
        verdict = await self.client.validate(
            action_type,
            payload,
            source_agent_id=agent,
            thread_id=self.thread_id,
            trace=TraceRef(trace_id=ids.trace_id, span_id=ids.span_id),
            tracestate=ids.tracestate,
            fits=fits,
        )
        answered = None if verdict.fault else verdict.decision.value
        if widens is not None and verdict.decision is Decision.MODIFY:
            function = verdict.modified_payload["function"]
            beyond = widens(function["name"], function["arguments"])
            if beyond is not None:
                verdict = dataclasses.replace(
                    verdict,
                    decision=Decision.BLOCK,
                    reason_code=ReasonCode.GUARDRAIL_WIDENS_AUTHORITY.value,
                    reason_message=f"the modified call exceeds the agent's authority: {beyond}",
                )
        how = enforcement(verdict)
        if how == Enforcement.UNENFORCEABLE:
            verdict = dataclasses.replace(
                verdict,
                decision=Decision.BLOCK,
                reason_code=ReasonCode.GUARDRAIL_UNENFORCEABLE.value,
                reason_message=(
                    f"MODIFY of {action_type.value} cannot be applied from the hooks; "
                    "install session.guard(agent) to carry it out"
                    + (f" (guardrail: {verdict.reason_code})" if verdict.reason_code else "")
                ),
            )
        span.set_attribute("agentjournal.decision", verdict.decision.value)
        if verdict.reason_code:
            span.set_attribute("agentjournal.reason_code", verdict.reason_code)
        decided = GuardrailDecided(
            action_id=verdict.action_id,
            action_type=action_type.value,
            decision=verdict.decision.value,
            guardrail_decision=answered,
            reason_code=verdict.reason_code,
            reason_message=verdict.reason_message,
            enforcement=how,
            agent=agent,
            subject=subject,
            call_id=call_id,
            payload=payload,
            modified_payload=verdict.modified_payload,
            payload_digest=actions.digest(payload),
            modified_payload_digest=(
                None
                if verdict.modified_payload is None
                else actions.digest(verdict.modified_payload)
            ),
            latency_ms=round(verdict.latency_ms, 3),
            trace_id=ids.trace_id,
            span_id=ids.span_id,
        )
        try:
            await self._recorder.record_decision(decided)
        except Exception as error:
            tracing.end_span(span, error)
            logger.error(
                "guardrail decision %s on %s %r could not be recorded (%s); the action is refused",
                verdict.decision.value,
                action_type.value,
                subject,
                error,
                extra=ids.log_extra(),
            )
            refused = RunGuardrailBlocked(
                action_type=action_type.value,
                action_id=verdict.action_id,
                reason_code=DECISION_NOT_RECORDED,
                reason_message=f"the decision could not be recorded: {error}",
                subject=subject,
                verdict=verdict,
            )
            refused.__cause__ = error
            await self.stop(verdict, subject, refused)
        tracing.end_span(span)
        logger.info(
            "guardrail %s %s on %s %r (%s) in %.1f ms",
            verdict.decision.value,
            how,
            action_type.value,
            subject,
            verdict.reason_code or "-",
            verdict.latency_ms,
            extra=ids.log_extra(),
        )
        return verdict


def _run_level(verdict: Verdict) -> str:
    """Input, response and handoff invocation: BLOCK stops the run, MODIFY is applied."""
    return {
        Decision.ALLOW: Enforcement.PROCEEDED,
        Decision.MODIFY: Enforcement.MODIFIED,
        Decision.BLOCK: Enforcement.RUN_STOPPED,
    }[verdict.decision]


def _guarded_tool(verdict: Verdict) -> str:
    """A guard wrapper about to run a tool: BLOCK refuses it, MODIFY is applied."""
    return {
        Decision.ALLOW: Enforcement.PROCEEDED,
        Decision.MODIFY: Enforcement.MODIFIED,
        Decision.BLOCK: Enforcement.TOOL_REFUSED,
    }[verdict.decision]


def _hook_level(covered: bool, *, refusable: bool) -> Callable[[Verdict], str]:
    """From a hook: what happens to a tool call or handoff, with or without a wrapper.

    A wrapper refuses a blocked tool (the model gets an error output) and
    applies a MODIFY; without one a hook can only stop the run, and a MODIFY
    it cannot apply is recorded as BLOCK (unenforceable). A blocked handoff
    stops the run either way.
    """

    def how(verdict: Verdict) -> str:
        if verdict.decision is Decision.ALLOW:
            return Enforcement.PROCEEDED
        if verdict.decision is Decision.MODIFY:
            return Enforcement.MODIFIED if covered else Enforcement.UNENFORCEABLE
        return Enforcement.TOOL_REFUSED if covered and refusable else Enforcement.RUN_STOPPED

    return how


def blocked(verdict: Verdict, subject: str) -> GuardrailBlocked:
    """The error that ends a run because of ``verdict``."""
    return RunGuardrailBlocked(
        action_type=verdict.action_type.value,
        action_id=verdict.action_id,
        reason_code=verdict.reason_code,
        reason_message=verdict.reason_message,
        subject=subject,
        verdict=verdict,
    )
