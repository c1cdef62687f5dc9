"""What a journal session gives its guardrail enforcer and authority gates to record through:
the one implementation of the ports in :mod:`agentjournal.sdk.port`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry.trace import Span

from agentjournal import events
from agentjournal.authority import Authority
from agentjournal.engine.approvals import approves
from agentjournal.engine.routing import SUMMARY_CHARS
from agentjournal.errors import AuthorityDenied, GuardrailBlocked
from agentjournal.sdk import tracing

if TYPE_CHECKING:
    from agentjournal.sdk.session import JournalSession


class SessionRecorder:
    """What the guardrail's enforcer and the authority gates record through their session.

    Kept off :class:`JournalSession` so the session's public surface is the SDK's
    ``Session`` and ``RunHooks`` and the calls a user makes; this is the
    ``Recorder`` and ``RefusalRecorder`` the two collaborators are given.
    """

    def __init__(self, session: JournalSession) -> None:
        self._session = session

    def agent_span(self) -> Span | None:
        """The span of the agent acting now (for guardrail calls)."""
        return self._session._run.trace.current if self._session._run.trace is not None else None

    def trace_now(self) -> dict[str, str]:
        """Trace metadata for an event written now: the acting agent's span, else the
        current span or SDK trace."""
        span = self.agent_span()
        return tracing.trace_metadata(
            tracing.ids_of(span) if span is not None else tracing.current_ids()
        )

    def current_run(self) -> Any:
        """The run in progress as a write by its own main context sees it."""
        run = self._session._run
        return run.view(run.wrapper() if run.wrapper is not None else None)

    async def run_stopped(self, error: GuardrailBlocked | AuthorityDenied) -> None:
        """A guardrail or a refusal ends the run: open subagents close with outcome ``error``."""
        if self._session._run.trace is not None:
            self._session._run.trace.end(error)
        reason = f"{type(error).__name__}: {error}"[:SUMMARY_CHARS]
        await self._session.close_subagents(outcome="error", reason=reason)

    async def authority_stopped(self, error: AuthorityDenied) -> None:
        """An authority refusal ends the run: its open subagents close with outcome ``error``."""
        await self.run_stopped(error)

    async def record_decision(self, decided: events.GuardrailDecided) -> None:
        """Append a guardrail decision to the acting agent's stream before it is acted on.

        Raises:
            StoreError: The decision did not land (then it must not be acted on).
        """
        trace = tracing.trace_metadata(tracing.TraceIds(decided.trace_id, decided.span_id))
        facts = self._session._acting().facts
        rule = facts.rule_metadata(decided.subject) if decided.action_type == "TOOL_CALL" else {}
        await self._session._acting().record(
            events.GUARDRAIL_DECIDED,
            decided.encode(),
            agent=decided.agent,
            run=self.current_run(),
            metadata={**trace, **rule},
        )
        self._landed()

    async def record_refusal(self, refused: events.AuthorityRefused) -> None:
        """Append an authority refusal to the acting agent's stream.

        Raises:
            StoreError: The refusal did not land (the action is refused anyway).
        """
        await self._session._acting().record(
            events.AUTHORITY_REFUSED,
            refused.encode(),
            agent=refused.agent,
            run=self.current_run(),
            metadata={**self.trace_now(), **self._session._acting().facts.policy_metadata()},
        )
        self._landed()

    async def record_grant(self, agent: str, authority: Authority) -> None:
        """Append ``agentjournal.AuthorityGranted`` (what a run's first agent holds) and,
        in the same transaction, its entry on the authority log."""
        await self._session._acting().record_grant(
            agent, authority, self.current_run(), self.trace_now()
        )
        self._landed()

    def _landed(self) -> None:
        """A write landed: the model responses it carried are no longer pending."""
        self._session._run.landed(self._session._acting().tree.responded)

    async def handoff_granted(self, sender: str, receiver: str, authority: Authority) -> None:
        """A handoff granted ``receiver`` an authority: it goes on the record with the next
        write, whether or not that write can show the handoff as a subagent."""
        self._session._run.granted(sender, receiver, authority)

    async def held_grant(self, agent: str) -> Authority | None:
        """What ``agent`` last held in this session (the authority log, read afresh), if any."""
        return await self._session._acting().held_grant(agent)

    async def open_grant(self, agent: str) -> tuple[bool, Authority | None]:
        """Whether ``agent`` speaks inside the innermost open subagent, and what it was granted.

        A run that resumes there (e.g. after an approval, in a new process)
        must not start from the agent's own policy entry.
        """
        return await self._session._acting().open_grant(agent)

    async def approved(self, agent: str, call_id: str, tool: str, arguments: str) -> bool:
        """Whether a person's approval on the record lets this call run now (the questions
        on the run's line: its top stream's and its open subagents', read afresh), by an
        answer that counts under this session's policy and every one the session recorded.

        Raises:
            InvalidInput: A recorded policy does not read (the call is refused).
        """
        acting = self._session._acting()
        return approves(
            await acting.approvals(),
            agent=agent,
            call_id=call_id,
            tool=tool,
            arguments=arguments,
            policies=await acting.policies(),
            session_id=acting.facts.session_id,
        )
