"""The four gates of one policy, carried through a session's runs.

One :class:`Gatekeeper` belongs to one session object. It keeps the
**effective authority** of each agent of the current run: a run's first
agent holds its own policy entry; a handoff's receiver is granted
``meet(sender's effective authority, receiver's entry)``, so authority along a
delegation chain is the meet along the chain and can only narrow.

1. Tool visibility — ``FunctionTool.is_enabled`` (installed by
   ``session.guard(agent)``): a tool is hidden when the running agent does
   not hold its scope.
2. MCP tool visibility — :meth:`Gatekeeper.mcp_tool_filter`, for an MCP
   server's ``tool_filter``: the same question for MCP tools.
3. Handoff visibility — ``Handoff.is_enabled``: a handoff is offered only
   when the receiver's request is narrower than the sender's authority.
4. Invocation — at ``on_llm_end`` (the hooks) and again in the guard's
   wrappers: the call's scope and arguments are checked against the running
   agent's effective authority before anything executes. It does not depend
   on the other three: with ``visibility: false`` exactly the same calls are
   refused.

A tool whose policy rule has an ``approval`` asks a person instead
(:meth:`Gatekeeper.asks`): the guard makes the wrapped tool's
``needs_approval`` say so, the SDK stops the run, and the invocation gate lets
the call run after a resume only when the record holds a person's approval of
exactly its arguments (:meth:`Gatekeeper.refuse_call`). The hooks alone cannot
make the SDK stop: a call the policy would ask about that no guard wrapper
covers is refused, and stops the run, as a call beyond authority is.

Every refusal is an ``agentjournal.AuthorityRefused`` event on the stream of
the agent it concerns (visibility refusals once per run, agent and subject).
A refused tool call with a guard wrapper becomes an error output the model
sees; without one, and for every refused handoff, the run stops with
:class:`~agentjournal.errors.AuthorityDenied`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from agentjournal._calls import calls_of
from agentjournal._digests import value_digest as digest
from agentjournal.authority import Authority, Gate, Policy, Refusal, meet
from agentjournal.errors import AuthorityDenied
from agentjournal.events import AuthorityRefused, Enforcement
from agentjournal.sdk._raised import RunAuthorityDenied
from agentjournal.sdk.port import RefusalRecorder

if TYPE_CHECKING:
    from agents.agent import Agent
    from agents.items import ModelResponse

logger = logging.getLogger("agentjournal.authority")


class Gatekeeper:
    """Applies a :class:`~agentjournal.authority.Policy` to a session's runs.

    Args:
        policy: The policy.
        recorder: The session that records refusals.
    """

    def __init__(self, policy: Policy, *, recorder: RefusalRecorder) -> None:
        self.policy = policy
        self._recorder = recorder
        self._effective: dict[str, Authority] = {}
        self._said: set[tuple[str, str, str]] = set()  # (gate, agent, subject) recorded this run
        self._refused_calls: set[str] = set()  # refused at on_llm_end; the wrapper only answers
        self._rooted = False  # the run's first agent has started (its grant is recorded)

    # -- the run --------------------------------------------------------------------

    def new_run(self) -> None:
        """Forget the previous run's authorities and refusals."""
        self._effective = {}
        self._said = set()
        self._refused_calls = set()
        self._rooted = False

    async def effective(self, agent: str) -> Authority:
        """The running agent's effective authority.

        The first agent of a run holds its own entry, but never more than it
        last held in this session: when the run resumes inside an open
        subagent, at most that subagent's grant; otherwise at most its last
        recorded grant (the authority log), so the next turn of a conversation
        never widens what a handoff chain narrowed. An agent reached in this
        run without a handoff the session saw holds nothing.
        """
        found = self._effective.get(agent)
        if found is None:
            found = await self._first(agent) if not self._effective else Authority()
            self._effective[agent] = found
        return found

    async def _first(self, agent: str) -> Authority:
        """What a run's first agent holds (see :meth:`effective`)."""
        own = self.policy.authority_of(agent)
        resumed, granted = await self._recorder.open_grant(agent)
        if resumed:
            return meet(own, granted) if granted is not None else Authority()
        held = await self._recorder.held_grant(agent)
        return meet(own, held) if held is not None else own

    async def agent_started(self, agent: str) -> None:
        """``on_agent_start``: settle the agent's effective authority.

        What a run's first agent holds is recorded (the root of the run's
        delegations, for a verifier), also when a resumed run's approved call, which the
        SDK runs before this hook, settled it first.
        """
        first, self._rooted = not self._rooted, True
        if agent in self._effective and not first:
            return
        authority = await self.effective(agent)
        if first:
            try:
                await self._recorder.record_grant(agent, authority)
            except Exception as failure:
                # Fail closed: with its grant unrecorded the agent holds nothing.
                self._effective[agent] = Authority()
                logger.error("the authority of %r could not be recorded: %s", agent, failure)

    async def handed_off(self, sender: str, receiver: str) -> Authority:
        """A handoff happened: the receiver is granted the meet; return it."""
        granted = meet(await self.effective(sender), self.policy.authority_of(receiver))
        self._effective[receiver] = granted
        await self._recorder.handoff_granted(sender, receiver, granted)
        return granted

    # -- gates 1-3: visibility ---------------------------------------------------------

    async def tool_visible(
        self, agent: str, tool: str, *, gate: str = Gate.TOOL_VISIBILITY
    ) -> bool:
        """Gates 1 and 2: whether ``agent`` may see ``tool``."""
        if not self.policy.visibility:
            return True
        refusal = self.policy.visible(await self.effective(agent), tool)
        if refusal is None:
            return True
        refusal = Refusal(gate, refusal.reason, scope=refusal.scope)
        await self._record_once(agent, tool, "tool", refusal)
        return False

    async def mcp_tool_filter(self, context: Any, tool: Any) -> bool:
        """Gate 2 as an MCP server's ``tool_filter`` (``ToolFilterContext``, ``mcp.types.Tool``)."""
        agent = getattr(getattr(context, "agent", None), "name", "")
        return await self.tool_visible(agent, tool.name, gate=Gate.MCP_VISIBILITY)

    async def handoff_visible(self, sender: str, receiver: str) -> bool:
        """Gate 3: whether ``sender`` may be offered the handoff to ``receiver``."""
        if not self.policy.visibility:
            return True
        refusal = self.policy.check_handoff(
            await self.effective(sender), receiver, Gate.HANDOFF_VISIBILITY
        )
        if refusal is None:
            return True
        await self._record_once(sender, receiver, "handoff", refusal)
        return False

    # -- gate 4: invocation ---------------------------------------------------------

    async def check_response(
        self,
        agent: Agent[Any],
        response: ModelResponse,
        *,
        handoff_targets: Mapping[str, str],
        guarded: Any,
    ) -> set[str]:
        """``on_llm_end``: check every call of the response; return the refused call ids.

        A refused tool call that a guard wrapper covers is answered by the
        wrapper with an error output; anything else refused stops the run
        (after every refusal of the response is recorded).
        """
        self._refused_calls = set()
        stop: AuthorityDenied | None = None
        handoff_seen = False
        authority = await self.effective(agent.name)
        for call in calls_of(response.output):
            function = call.kind == "function_call"
            target = handoff_targets.get(call.name) if function else None
            if target is not None:
                if handoff_seen:
                    continue  # the SDK takes the first handoff of a response only
                handoff_seen = True
                refusal = self.policy.check_handoff(authority, target, Gate.INVOCATION)
                subject, kind = target, "handoff"
            else:
                refusal = self.policy.check_call(authority, call.name, call.arguments)
                subject, kind = call.name, "tool"
            wrapped = kind == "tool" and function and guarded(call.name)
            if kind == "tool" and self.policy.asks(authority, call.name, call.arguments):
                if wrapped:
                    continue  # the wrapper's needs_approval stops the run for a person
                refusal = _unaskable(self.policy, call.name, refusal)
            if refusal is None:
                continue
            how = Enforcement.TOOL_REFUSED if wrapped else Enforcement.RUN_STOPPED
            error = await self._record(
                agent.name, subject, kind, refusal, how, call.call_id, call.arguments
            )
            self._refused_calls.add(call.call_id)
            if not wrapped and stop is None:
                stop = error
        if stop is not None:
            await self._stop(stop)
        return set(self._refused_calls)

    async def asks(self, agent: str, tool: str, arguments: str) -> bool:
        """Whether the policy makes ``agent``'s call wait for a person (a guarded tool's
        ``needs_approval``). When the agent's authority cannot be settled it asks: the
        invocation gate decides again, on the record, after the answer."""
        try:
            authority = await self.effective(agent)
        except Exception as failure:
            logger.error("the authority of %r could not be settled: %s", agent, failure)
            return True
        return self.policy.asks(authority, tool, arguments)

    async def refuse_call(self, agent: str, call_id: str, tool: str, arguments: str) -> str | None:
        """The tool wrapper's gate: an error output for the model when the call is refused.

        A call the policy asks a person about runs only when the record holds a person's
        approval of exactly these arguments (fail closed: when the record cannot be read,
        it is refused)."""
        authority = await self.effective(agent)
        refusal = self.policy.check_call(authority, tool, arguments)
        if self.policy.asks(authority, tool, arguments):
            refusal = await self._unapproved(agent, call_id, tool, arguments, refusal)
        if refusal is None:
            return None
        if call_id not in self._refused_calls:
            await self._record(
                agent, tool, "tool", refusal, Enforcement.TOOL_REFUSED, call_id, arguments
            )
        return f"Error: {agent} may not call {tool}: {refusal.reason} (authority, {refusal.gate})"

    async def _unapproved(
        self, agent: str, call_id: str, tool: str, arguments: str, refusal: Refusal | None
    ) -> Refusal | None:
        """None when a person approved the call on the record; else why it is refused."""
        try:
            if await self._recorder.approved(agent, call_id, tool, arguments):
                return None
            why = "it needs a person's approval, and none on the record approves these arguments"
        except Exception as failure:
            logger.error("the approval of call %r could not be established: %s", call_id, failure)
            why = f"its approval could not be established ({type(failure).__name__})"
        rule = self.policy.tools[tool]
        if refusal is None:
            return Refusal(Gate.INVOCATION, why, scope=rule.scope)
        return Refusal(
            refusal.gate,
            f"{refusal.reason}: {why}",
            scope=refusal.scope,
            ceiling=refusal.ceiling,
            limit=refusal.limit,
            value=refusal.value,
        )

    async def check_handoff(self, sender: str, receiver: str, arguments: str) -> None:
        """The handoff wrapper's gate: a refused handoff stops the run."""
        refusal = self.policy.check_handoff(await self.effective(sender), receiver, Gate.INVOCATION)
        if refusal is not None:
            error = await self._record(
                sender, receiver, "handoff", refusal, Enforcement.RUN_STOPPED, None, arguments
            )
            await self._stop(error)

    def widens(self, agent: str, tool: str, arguments: str) -> str | None:
        """Why a guardrail's modified arguments would exceed the agent's authority, if they do.

        Asked after the invocation gate settled the agent's authority in this turn.
        """
        authority = self._effective.get(agent, Authority())
        refusal = self.policy.check_call(authority, tool, arguments)
        return None if refusal is None else refusal.reason

    # -- recording ----------------------------------------------------------------------

    async def _record_once(self, agent: str, subject: str, kind: str, refusal: Refusal) -> None:
        key = (refusal.gate, agent, subject)
        if key not in self._said:
            self._said.add(key)
            await self._record(agent, subject, kind, refusal, Enforcement.HIDDEN, None, None)

    async def _record(
        self,
        agent: str,
        subject: str,
        kind: str,
        refusal: Refusal,
        how: str,
        call_id: str | None,
        arguments: str | None,
    ) -> AuthorityDenied:
        """Record a refusal (the action does not happen either way) and return its error."""
        authority = await self.effective(agent)
        refused = AuthorityRefused(
            gate=refusal.gate,
            agent=agent,
            subject=subject,
            kind=kind,
            reason=refusal.reason,
            scope=refusal.scope,
            ceiling=refusal.ceiling,
            limit=refusal.limit,
            value=refusal.value,
            call_id=call_id,
            arguments_digest=None if arguments is None else digest(arguments),
            authority=authority.to_json(),
            enforcement=how,
        )
        error = RunAuthorityDenied(
            gate=refusal.gate,
            agent=agent,
            subject=subject,
            reason=refusal.reason,
            scope=refusal.scope,
            ceiling=refusal.ceiling,
        )
        try:
            await self._recorder.record_refusal(refused)
        except Exception as failure:
            # Refused anyway: a refusal that cannot be written still refuses.
            logger.error("authority refusal on %r could not be recorded: %s", subject, failure)
        logger.info(
            "authority refused %s %r for %s at %s: %s",
            kind,
            subject,
            agent,
            refusal.gate,
            refusal.reason,
        )
        return error

    async def _stop(self, error: AuthorityDenied) -> NoReturn:
        try:
            await self._recorder.authority_stopped(error)
        except Exception:  # the refusal is what the caller must hear of
            logger.exception("could not close the run stopped by an authority refusal")
        raise error


def _unaskable(policy: Policy, tool: str, refusal: Refusal | None) -> Refusal:
    """A call the policy would ask a person about, with no guard wrapper to stop the run
    for it: refused (beyond its ceiling, it is refused as without the approval rule)."""
    if refusal is not None:
        return refusal
    return Refusal(
        Gate.INVOCATION,
        f"tool {tool!r} needs a person's approval, which only session.guard(agent) can ask for",
        scope=policy.tools[tool].scope,
    )
