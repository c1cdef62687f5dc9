"""What a write is planned from and what a plan is: the session's facts, the run's view,
its responses and grants not yet written, and :class:`WritePlan` (pure records).

A :class:`WritePlan` is the store requests of a write — every event id,
message index, twin link and chain hash decided — and the
:class:`~agentjournal.engine.tree.Commit` the tree takes on when the store accepts them. The writer
(:mod:`agentjournal.engine.writer`) appends a plan; the planners are functions of
what they are given, each unit-tested directly:

- :func:`~agentjournal.engine.plan_items.plan_items` — an ``add_items`` (and closing
  subagents, and a compaction's hiding).
- :func:`~agentjournal.engine.plan_control.plan_control` — one event that is no item
  (a decision, a refusal, a run's grant, a pop, a clear).
- :func:`~agentjournal.engine.plan_log.plan_log` — entries of the authority log alone
  (a reset).
- :func:`~agentjournal.engine.checkpoints.plan_checkpoint` — a signed checkpoint of the
  heads.
- :func:`~agentjournal.engine.sealing.seal_event` — the chain keys and view commitment
  every event gets.

Every write first carries the run's model responses not yet written
(:class:`Responded`: one ``agentjournal.ModelResponded`` each, on the stream of the
agent that called the model), so a response rides on the next write the session
makes and lands with it or not at all.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentjournal import events
from agentjournal._calls import call_of
from agentjournal.authority import Authority, Policy
from agentjournal.engine.routing import Plan
from agentjournal.engine.timeline import Key
from agentjournal.engine.tree import Commit
from agentjournal.shred.sealing import SubjectSealer
from agentjournal.store.contract import AppendRequest
from agentjournal.streams import authority_stream, branch_authority_stream


@dataclass(frozen=True, slots=True)
class Produced:
    """What the hooks learned about a model output item: its response and speaker.

    Attributes:
        response_id: The model response's id.
        usage_json: Its token usage as canonical ``TokenUsage`` JSON.
        agent: The agent whose response it was.
    """

    response_id: str | None
    usage_json: str | None
    agent: str


@dataclass(frozen=True, slots=True)
class Responded:
    """A model response whose ``agentjournal.ModelResponded`` event is not written yet.

    It is written with the next write the session makes
    (:func:`~agentjournal.engine.plan_items.plan_items`,
    :func:`~agentjournal.engine.plan_control.plan_control`), before that write's own
    events, and its id is fixed when the response arrives: every attempt of every write
    carries the same event, and a write that landed is recognised by it
    (the ``responded`` ids of its :class:`~agentjournal.engine.tree.SessionTree`).

    Attributes:
        id: Its event id.
        agent: The agent that called the model (it picks the stream).
        data: The event's data (:meth:`agentjournal.tokens.ModelResponse.encode`).
        metadata: Its own metadata: the agent's ``trace_id``/``span_id`` when the
            response arrived, ``aj.response_id`` when the model gave one.
    """

    id: uuid.UUID
    agent: str
    data: bytes
    metadata: Mapping[str, str]


@dataclass(slots=True)
class Grant:
    """A handoff's grant not yet written: on its ``SubagentStarted`` when the write carries
    the handoff's call (``call_id``), else as an ``AuthorityGranted`` of its own.

    Attributes:
        sender: The agent that handed off.
        receiver: The agent that received the handoff.
        authority: What the receiver holds.
        call_id: The handoff's call, once the hooks matched it.
    """

    sender: str
    receiver: str
    authority: Authority
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class Ask:
    """A function tool call the run will stop on, waiting for a person's approval.

    Written as ``InterruptIssued`` beside its call's item, when that item is written
    without its output (:mod:`agentjournal.engine.plan_interrupts`).

    Attributes:
        call_id: The call (the request id).
        tool_name: The tool.
        arguments: The call's arguments as the model gave them.
        agent: The agent that made the call.
        authority: What that agent held (JSON form), when the session has a policy.
    """

    call_id: str
    tool_name: str
    arguments: str
    agent: str
    authority: dict[str, Any] | None = None


class RunView(Protocol):
    """What a write needs to know of the run it belongs to (the adapter's run state)."""

    @property
    def identity(self) -> Any:
        """The run, as a weak reference to what identifies it (None outside a run)."""

    @property
    def speaker(self) -> str | None:
        """The agent speaking now."""

    @property
    def handoffs(self) -> Mapping[str, tuple[str, str]]:
        """Handoff call id -> (sender, receiver), matched and not yet written."""

    @property
    def grants(self) -> Sequence[Grant]:
        """The handoffs' grants not yet written."""

    @property
    def finished(self) -> str | None:
        """The last agent's final output, once it finished."""

    @property
    def responses(self) -> Sequence[Responded]:
        """The run's model responses not yet written, oldest first."""

    @property
    def asks(self) -> Mapping[str, Ask]:
        """The run's calls waiting for approval, by call id, not yet written."""

    def produced_by(self, item: Mapping[str, Any]) -> Produced | None:
        """What the hooks learned about the model output item ``item`` came from."""

    def tool_call_times(self, call_id: str) -> tuple[str, str] | None:
        """When the hooks saw the tool call ``call_id`` start and end (RFC 3339)."""

    def decided(self, call_id: str, tool: str) -> bool | None:
        """The run's own decision on the call ``call_id`` of ``tool``, which waited for
        approval: True (approved) when the hooks saw its tool start in this run, else the
        decision the run's context holds; None when the write cannot tell (no run)."""

    def same_run(self, run: Any) -> bool:
        """Whether ``run`` (a tree's ``chain_run``) is this run."""


@dataclass(frozen=True)
class SessionFacts:
    """What a session object adds to every write, beyond its tree and its run.

    Attributes:
        session_id: The session.
        stream: Its stream, ``AgentSession-{id}``.
        app_name: Recorded on ``SessionStarted``.
        user_id: Recorded on ``SessionStarted``.
        agent_name: Recorded on ``SessionStarted``.
        policy: The authority policy, if any.
        guarded: Whether a guardrail checks the session's calls.
        record_payloads: Whether decisions and refusals keep what they judged.
        branch: The branch the session is on (None: the main line, ``stream`` is then
            ``AgentSession-{id}``; else ``stream`` is the branch's top stream).
        sealer: Seals content under the session's subject's key (None: in the clear).
    """

    session_id: str
    stream: str
    app_name: str | None = None
    user_id: str | None = None
    agent_name: str | None = None
    policy: Policy | None = None
    guarded: bool = False
    record_payloads: bool = True
    branch: str | None = None
    sealer: SubjectSealer | None = None

    @property
    def authority_stream(self) -> str:
        """The line's authority log: the session's, or the branch's own."""
        if self.branch is None:
            return authority_stream(self.session_id)
        return branch_authority_stream(self.session_id, self.branch)

    def policy_metadata(self) -> dict[str, str]:
        """``aj.policy``: the digest of the session's policy (nothing without one)."""
        return {events.POLICY_KEY: self.policy.digest} if self.policy is not None else {}

    def rule_metadata(self, tool: str) -> dict[str, str]:
        """``aj.policy`` and ``aj.tool_rule`` of a tool, under the session's policy."""
        if self.policy is None:
            return {}
        rule = self.policy.tools.get(tool)
        text = (
            json.dumps(
                rule.to_json(),
                sort_keys=True,
                separators=(",", ":"),
            )
            if rule is not None
            else "null"
        )
        return {**self.policy_metadata(), events.TOOL_RULE_KEY: text}

    def call_metadata(self, item: Mapping[str, Any]) -> dict[str, str]:
        """What a verifier needs to check a tool call without its payload (``aj.call_id``, ...),
        or to say that it cannot look into an item (``aj.opaque``)."""
        if not isinstance(item.get("type"), str) and not isinstance(item.get("role"), str):
            return {events.OPAQUE_KEY: "1"}
        call_id = item.get("call_id")
        kind = item.get("type", "")
        if not isinstance(call_id, str) or not call_id or not isinstance(kind, str):
            return {}
        metadata = {events.CALL_ID_KEY: call_id, events.ITEM_TYPE_KEY: kind}
        if not self.guarded and self.policy is None:
            return metadata  # nothing more to say of a call: skip reading it
        call = call_of(item)
        if call is not None:
            if self.guarded:
                metadata[events.GUARDED_KEY] = "1"
            metadata.update(self.rule_metadata(call.name))
        return metadata


@dataclass(frozen=True)
class WritePlan:
    """The store requests of one write and what the tree takes on when they land.

    Attributes:
        requests: One per stream, at the exact revision the tree last saw.
        commit: The tree's change once they land (heads as planned).
        foreign: Streams of the write that are not the tree's (a fork writes the
            branch's first event and the branch registry): they carry no read model
            change of the tree (the tree keeps the heads of the streams it follows only).
    """

    requests: list[AppendRequest]
    commit: Commit
    foreign: frozenset[str] = frozenset()

    @property
    def streams(self) -> list[str]:
        return [request.stream for request in self.requests]


@dataclass(frozen=True)
class ItemsPlan(WritePlan):
    """The plan of an ``add_items`` write, with its routing.

    Attributes:
        routed: Where each item went, which subagents opened and closed.
        shown: The run's grants this write shows on a ``SubagentStarted``.
        turns: Each user message it writes (its key) with its ``aj.turn``.
    """

    routed: Plan = None  # type: ignore[assignment]
    shown: tuple[Grant, ...] = ()
    turns: tuple[tuple[Key, int], ...] = ()

    @classmethod
    def made(
        cls,
        requests: list[AppendRequest],
        commit: Commit,
        routed: Plan,
        shown: tuple[Grant, ...],
        turns: tuple[tuple[Key, int], ...],
    ) -> ItemsPlan:
        """``ItemsPlan(requests, commit, routed=..., shown=..., turns=...)``, built without
        the frozen dataclass's ``__init__`` (a call per field), on every ``add_items``
        write (``tests/test_write_path.py`` compares the two)."""
        plan: ItemsPlan = object.__new__(cls)
        vars(plan).update(
            requests=requests,
            commit=commit,
            foreign=frozenset(),
            routed=routed,
            shown=shown,
            turns=turns,
        )
        return plan

    @property
    def closed(self) -> int:
        """How many subagents this write closes."""
        return sum(1 for op in self.routed.ops if op.kind == "close")

    @property
    def opened(self) -> set[str]:
        """The subsession streams this write opens."""
        return {op.subagent.stream for op in self.routed.ops if op.kind == "start" and op.subagent}
