"""The errors a run stops with, as the Agents SDK expects them (``AgentsException``).

The SDK passes an ``AgentsException`` raised inside a tool or a handoff through
unchanged and wraps anything else in its own ``UserError``. These subclasses
keep agentjournal's types (catch :class:`~agentjournal.errors.GuardrailBlocked`
and :class:`~agentjournal.errors.AuthorityDenied`) and let the SDK pass them
on. They live apart from :mod:`agentjournal.errors` so that importing the error
tree does not load the SDK.
"""

from __future__ import annotations

from agents.exceptions import AgentsException

from agentjournal.errors import AuthorityDenied, GuardrailBlocked


class RunGuardrailBlocked(GuardrailBlocked, AgentsException):
    """A :class:`GuardrailBlocked` raised inside a run."""


class RunAuthorityDenied(AuthorityDenied, AgentsException):
    """An :class:`AuthorityDenied` raised inside a run."""
