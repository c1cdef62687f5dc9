"""The ports a session gives its guardrail enforcer and its authority gates: what they record
through, declared here so neither reaches into the session
(:class:`~agentjournal.sdk.recorder.SessionRecorder` is the one implementation)."""

from __future__ import annotations

from typing import Protocol

from opentelemetry.trace import Span

from agentjournal.authority import Authority
from agentjournal.errors import AuthorityDenied, GuardrailBlocked
from agentjournal.events import AuthorityRefused, GuardrailDecided


class Recorder(Protocol):
    """What the enforcer needs from its session."""

    async def record_decision(self, decided: GuardrailDecided) -> None:
        """Append the decision to the acting agent's stream; raise if it did not land."""

    def agent_span(self) -> Span | None:
        """The span of the agent that is acting now."""

    async def run_stopped(self, error: GuardrailBlocked) -> None:
        """The run is about to end with ``error``: close what it leaves open."""


class RefusalRecorder(Protocol):
    """What the gatekeeper needs from its session."""

    async def record_refusal(self, refused: AuthorityRefused) -> None:
        """Append the refusal to the acting agent's stream; raise if it did not land."""

    async def authority_stopped(self, error: AuthorityDenied) -> None:
        """The run is about to end with ``error``: close what it leaves open."""

    async def record_grant(self, agent: str, authority: Authority) -> None:
        """Append what a run's first agent holds (``agentjournal.AuthorityGranted``)."""

    async def open_grant(self, agent: str) -> tuple[bool, Authority | None]:
        """Whether ``agent`` speaks inside an open subagent (a resumed run), and its grant."""

    async def held_grant(self, agent: str) -> Authority | None:
        """What ``agent`` last held in this session (the authority log), if anything."""

    async def handoff_granted(self, sender: str, receiver: str, authority: Authority) -> None:
        """A handoff granted ``receiver`` ``authority``: record it with the next write."""

    async def approved(self, agent: str, call_id: str, tool: str, arguments: str) -> bool:
        """Whether a person's approval on the record lets this call run now (the newest
        question for the call, by ``agent``, of ``tool``, with exactly ``arguments``, was
        approved and the call has not run); raise if the record cannot be read."""
