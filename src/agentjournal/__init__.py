"""agentjournal: an event-sourced, tamper-evident session store for the OpenAI Agents SDK.

::

    from agentjournal import Journal

    async with Journal.open() as journal:               # ./agentjournal.db, or $AGENTJOURNAL_URI
        session = journal.session("support-4711")
        result = await Runner.run(agent, "hi", session=session, hooks=session)

    # Guardrails: every action checked against a /v1/validate service, every decision recorded.
    session = journal.session("support-4711", guardrails="http://127.0.0.1:8787")
    result = await Runner.run(session.guard(agent), "hi", session=session, hooks=session)

Every name but the errors is imported on first use: ``Journal`` and
``JournalSession`` load the Agents SDK, which takes a few seconds to import, so
code that only verifies bundles, reads session trees (``read_tree``) or uses the
stores (``agentjournal.store``) starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentjournal._lazy import exports
from agentjournal.errors import (
    AlreadyResolved,
    AlreadyResumed,
    ApproverNotAllowed,
    AuthorityDenied,
    CodecError,
    ConcurrencyError,
    ExperimentTurnTaken,
    GuardrailBlocked,
    InvalidInput,
    JournalError,
    RetriesExhausted,
    StoreError,
    StoreUnavailable,
    StreamDeleted,
    StreamNotFound,
    UndecodableEvent,
    UnreadableMetadata,
)

if TYPE_CHECKING:
    from agentjournal.audit.export import export_bundle
    from agentjournal.audit.verify import Problem, Report, verify_bundle
    from agentjournal.authority import Authority, Policy
    from agentjournal.events import Subagent
    from agentjournal.guardrails.client import GuardrailClient
    from agentjournal.journal import Journal
    from agentjournal.ledger.checkpoints import Checkpoint
    from agentjournal.ledger.keys import SigningKey
    from agentjournal.records import DamagedEvent, Record, TreeRecords
    from agentjournal.sdk.session import JournalSession
    from agentjournal.sdk.trace_context import TraceLogFilter, continue_trace
    from agentjournal.walk import read_tree

__all__ = [
    "AlreadyResolved",
    "AlreadyResumed",
    "ApproverNotAllowed",
    "Authority",
    "AuthorityDenied",
    "Checkpoint",
    "CodecError",
    "ConcurrencyError",
    "DamagedEvent",
    "ExperimentTurnTaken",
    "GuardrailBlocked",
    "GuardrailClient",
    "InvalidInput",
    "Journal",
    "JournalError",
    "JournalSession",
    "Policy",
    "Problem",
    "Record",
    "Report",
    "RetriesExhausted",
    "SigningKey",
    "StoreError",
    "StoreUnavailable",
    "StreamDeleted",
    "StreamNotFound",
    "Subagent",
    "TraceLogFilter",
    "TreeRecords",
    "UndecodableEvent",
    "UnreadableMetadata",
    "continue_trace",
    "export_bundle",
    "read_tree",
    "verify_bundle",
]

_NAMES = {
    "Authority": "agentjournal.authority",
    "Checkpoint": "agentjournal.ledger.checkpoints",
    "DamagedEvent": "agentjournal.records",
    "GuardrailClient": "agentjournal.guardrails.client",
    "Journal": "agentjournal.journal",
    "JournalSession": "agentjournal.sdk.session",
    "Policy": "agentjournal.authority",
    "Problem": "agentjournal.audit.verify",
    "Record": "agentjournal.records",
    "Report": "agentjournal.audit.verify",
    "SigningKey": "agentjournal.ledger.keys",
    "Subagent": "agentjournal.events",
    "TraceLogFilter": "agentjournal.sdk.trace_context",
    "TreeRecords": "agentjournal.records",
    "continue_trace": "agentjournal.sdk.trace_context",
    "export_bundle": "agentjournal.audit.export",
    "read_tree": "agentjournal.walk",
    "verify_bundle": "agentjournal.audit.verify",
}
__getattr__, __dir__ = exports(__name__, _NAMES)
