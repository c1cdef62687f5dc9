"""The authority log's events: the policy in force, what an agent holds, and resets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentjournal.events._codec import Event
from agentjournal.events._names import AUTHORITY_HELD, AUTHORITY_RESET, POLICY_RECORDED


@dataclass(frozen=True, slots=True)
class PolicyRecorded(Event):
    """``agentjournal.PolicyRecorded``: the policy in force from here on, on the authority log.

    Attributes:
        digest: ``Policy.digest`` of ``policy``.
        policy: The policy's canonical form (``Policy.to_json``).
    """

    digest: str
    policy: dict[str, Any]

    EVENT_TYPE = POLICY_RECORDED


@dataclass(frozen=True, slots=True)
class AuthorityHeld(Event):
    """``agentjournal.AuthorityHeld``: an agent was granted an authority (the authority log).

    Attributes:
        agent: The agent.
        authority: What it holds now (JSON form).
        cause: ``run`` (it started a run: ``AuthorityGranted``) or ``handoff`` (it received
            one: the parent copy of ``SubagentStarted``).
        event: The id of that event.
        stream: The stream of that event.
        policy: The digest of the policy it was computed under.
        held: What every agent of the session holds after this entry (agent -> JSON form).
    """

    agent: str
    authority: dict[str, Any]
    cause: str
    event: str
    stream: str
    policy: str
    held: dict[str, Any]

    EVENT_TYPE = AUTHORITY_HELD


@dataclass(frozen=True, slots=True)
class AuthorityReset(Event):
    """``agentjournal.AuthorityReset``: the application let an agent start from its policy entry.

    Written by ``JournalSession.reset_authority``: the agent's next run starts from its
    policy entry again instead of at most what it last held.

    Attributes:
        agent: The agent.
        reason: Why, as the application gave it.
        policy: The digest of the policy in force.
        held: What every agent holds after this entry (the agent removed).
    """

    agent: str
    reason: str
    policy: str
    held: dict[str, Any]

    EVENT_TYPE = AUTHORITY_RESET
