"""The journal session: the SDK's ``Session`` and ``RunHooks`` in one object.

Use it as both (``Runner.run(agent, input, session=s, hooks=s)``). As a
session it writes every item as one canonical event and gives the items back
exactly; as hooks it learns what only the run knows — which agent spoke, the
token usage of each response, and which tool call is a handoff — and records it.

**Streams.** Items land on ``AgentSession-{id}`` until a handoff. The handoff
call becomes ``SubagentStarted``, appended atomically to the sender's stream
(with the call item) and to the receiver's own stream
``AgentSubsession-{id}-{agent_id}`` (its twin); the receiver's transcript —
the handoff acknowledgement, its tool calls and results, its final message —
goes to that stream, and so on at any depth. When the run's last agent
finishes, ``SubagentCompleted`` is appended to both streams of every open
subagent, innermost first, in the same write as the final message.

**Writes.** One ``add_items`` call is one atomic store transaction over every
stream it touches, at the exact revisions the session last saw, with event
ids derived from a per-call nonce (a retry after an unknown outcome is
recognised by the store and never duplicates). If another writer got there
first the session catches up and tries again (bounded). ``message_index`` is
session-wide: every write goes through the innermost open stream, which
serialises writers of one session tree, and every event carries the next free
index, so indices stay unique and gapless with no recounting.

**Reads.** The flat history is every visible item of the tree in index order.
A :class:`~agentjournal.engine.timeline.Timeline` caches the newest items; a warm
``get_items`` asks the store only for what was appended since, and a cold one
merges the streams backwards only as far as ``limit`` needs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import uuid
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from agents.handoffs import Handoff, handoff
from agents.lifecycle import RunHooksBase
from agents.memory.session import _CompactionSnapshot
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)
from kurrent_agent_schema import TokenUsage, to_json
from opentelemetry.trace import Span

from agentjournal import events, ledger
from agentjournal.authority import Authority, Policy
from agentjournal.calls import call_of
from agentjournal.engine import codec
from agentjournal.engine.reader import AuthorityLog, SessionTree, TreeReader
from agentjournal.engine.routing import SUMMARY_CHARS, Plan, plan_write, starts_a_run
from agentjournal.engine.timeline import Clear, Entry, Key, Pop, TimelineEvent
from agentjournal.errors import (
    AuthorityDenied,
    ConcurrencyError,
    GuardrailBlocked,
    InvalidInput,
    StoreUnavailable,
    StreamNotFound,
)
from agentjournal.guardrails.client import GuardrailClient
from agentjournal.ledger import redaction
from agentjournal.sdk import guard as guarding
from agentjournal.sdk import tracing
from agentjournal.sdk.enforce import Enforcer
from agentjournal.sdk.gates import Gatekeeper
from agentjournal.store.base import (
    AppendRequest,
    EventStore,
    NewEvent,
    StreamState,
    event_id,
)
from agentjournal.streams import authority_stream, ledger_stream, session_stream, validate_id

if TYPE_CHECKING:
    from agents.agent import Agent
    from agents.items import ModelResponse, TResponseInputItem
    from agents.run_context import RunContextWrapper
    from agents.tool import Tool

__all__ = ["JournalSession", "SessionTree"]

logger = logging.getLogger("agentjournal.sdk.session")

DEFAULT_CHECKPOINT_EVERY: Final = 100
_CONFLICT_RETRIES: Final = 32
_UNAVAILABLE_RETRIES: Final = 3
_REMEMBERED: Final = 1024
_ASSISTANT_TYPES: Final = frozenset(
    {"AssistantTextGenerated", "AssistantToolCallsGenerated", "AssistantThinkingGenerated"}
)


@dataclass(slots=True)
class _Grant:
    """A handoff's grant not yet written: on its ``SubagentStarted`` when the write carries the
    handoff's call (``call_id``), else as an ``AuthorityGranted`` of its own."""

    sender: str
    receiver: str
    authority: Authority
    call_id: str | None = None


@dataclass(frozen=True, slots=True)
class _Produced:
    """What the hooks learned about a model output item."""

    response_id: str | None
    usage_json: str | None
    agent: str


class JournalSession(TreeReader, RunHooksBase[Any, "Agent[Any]"]):
    """A Session and RunHooks backed by an event store.

    Create it with :meth:`agentjournal.Journal.session`. One object may serve
    many runs one after another; concurrent calls on it are serialised.

    Attributes:
        session_id: The session's id (kurrent-agent-schema §2.4 rules).
        session_settings: Defaults for ``get_items`` (``limit``).
        stream: The session's stream, ``AgentSession-{session_id}``.
    """

    def __init__(
        self,
        store: EventStore,
        session_id: str,
        *,
        app_name: str | None = None,
        user_id: str | None = None,
        agent_name: str | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        tree: SessionTree | None = None,
        guardrails: GuardrailClient | None = None,
        policy: Policy | None = None,
        signing_key: ledger.SigningKey | None = None,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        record_payloads: bool = True,
    ) -> None:
        self.session_id = validate_id(session_id, "session id")
        self.stream = session_stream(self.session_id)
        self.session_settings: SessionSettings | None = _settings(session_settings)
        self._store = store
        self._app_name = app_name
        self._user_id = user_id
        self._agent_name = agent_name
        self._tree = tree if tree is not None else SessionTree()
        # What the hooks of the current run learned.
        self._current_agent: str | None = agent_name
        self._produced: OrderedDict[str, _Produced] = OrderedDict()
        self._handoff_calls: OrderedDict[str, tuple[str, str]] = OrderedDict()  # call -> (from, to)
        self._handoffs: dict[str, tuple[str, str]] = {}  # matched by on_handoff, not yet written
        self._finished: str | None = None  # the last agent's output, set by on_agent_end
        self._warned_unwired = False
        self._taken: set[str] = set()  # subsession streams found to exist already
        # The current run: its usage object identifies it to every hook and tool context.
        self._run_usage: weakref.ref[Any] | None = None
        self._run_wrapper: weakref.ref[Any] | None = None
        self._trace: tracing.RunTrace | None = None
        self._grants: list[_Grant] = []  # handoffs granted since the last write
        self._enforcer = (
            Enforcer(guardrails, thread_id=self.session_id, recorder=self)
            if guardrails is not None
            else None
        )
        self._gates = Gatekeeper(policy, recorder=self) if policy is not None else None
        if checkpoint_every < 1:
            raise ValueError(f"checkpoint_every must be at least 1, got {checkpoint_every}")
        self._signing_key = signing_key
        self._checkpoint_every = checkpoint_every
        self._record_payloads = record_payloads
        self._wiring = guarding.Wiring(self._enforcer, self._gates)

    @property
    def guardrails(self) -> GuardrailClient | None:
        """The guardrail client this session checks actions with, if any."""
        return self._enforcer.client if self._enforcer is not None else None

    @property
    def policy(self) -> Policy | None:
        """The authority policy this session enforces, if any."""
        return self._gates.policy if self._gates is not None else None

    def guard(self, agent: Agent[Any]) -> Agent[Any]:
        """Return a copy of ``agent``'s graph with guardrail and authority wrappers installed.

        The hooks alone stop the run on a blocked or refused tool call or
        handoff, cannot apply a MODIFY to one and cannot hide anything; run
        the guarded copy (still with ``session=s, hooks=s``) and a blocked or
        refused tool call becomes an error output the model sees, MODIFY runs
        the tool or handoff with the modified arguments, and the policy's
        visibility gates hide tools and handoffs (see
        :mod:`agentjournal.sdk.guard`). The agents passed in are not changed.
        With neither a guardrail nor a policy, ``agent`` is returned as it is.
        """
        if self._enforcer is None and self._gates is None:
            return agent
        return guarding.guard_graph(agent, self._wiring)

    async def mcp_tool_filter(self, context: Any, tool: Any) -> bool:
        """The policy's MCP gate: pass it as an MCP server's ``tool_filter``.

        ``MCPServerStdio(params, tool_filter=session.mcp_tool_filter)`` hides the
        server's tools whose scope the running agent does not hold. Without a
        policy every tool is offered.
        """
        if self._gates is None:
            return True
        return await self._gates.mcp_tool_filter(context, tool)

    def __repr__(self) -> str:
        return f"JournalSession({self.session_id!r}, stream={self.stream!r})"

    # -- Session protocol -------------------------------------------------------

    async def get_items(
        self, limit: int | None = None, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items in chronological order.

        ``None`` falls back to ``session_settings.limit``, then to every item;
        ``0`` returns ``[]``. Items are fresh copies, exactly as written, with
        the transcripts of subagents where the handoffs happened.
        """
        if wrapper is not None:
            self._enter_run(wrapper, main=True)
        resolved = resolve_session_limit(limit, self.session_settings)
        if resolved is not None and resolved <= 0:
            return []
        async with self._tree.lock:
            await self._refresh(resolved)
            return [entry.item() for entry in self._tree.timeline.latest(resolved)]  # type: ignore[misc]

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Append ``items`` as one atomic write; all of them land or none.

        Raises:
            CodecError: An item cannot be stored exactly; nothing was written.
            ConcurrencyError: Other writers kept winning for every retry.
            StoreUnavailable: The store failed and the outcome could not be settled.
        """
        items = list(items)
        if wrapper is not None:
            self._enter_run(wrapper, main=True)
        if items:
            await self._write(items, wrapper=wrapper, closing=None)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """Hide the latest item and return it; ``None`` when there is none.

        The item stays on its stream; an ``agentjournal.ItemPopped`` event
        records that it left the history.
        """
        tree = self._tree
        async with tree.lock:
            for attempt in range(_CONFLICT_RETRIES):
                if attempt:
                    await _backoff(attempt)
                await self._refresh(1)
                latest = tree.timeline.latest(1)
                if not latest:
                    return None
                entry = latest[0]
                popped = events.ItemPopped(entry.stream, entry.revision, entry.part, entry.index)
                if await self._append_control(events.ITEM_POPPED, popped.encode()):
                    tree.timeline.apply(Pop(entry.key))
                    return entry.item()  # type: ignore[return-value]
            raise ConcurrencyError(self.stream, "exact", tree.heads.get(self.stream))

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Hide every item; ``get_items`` returns ``[]`` until new items come.

        History is kept: an ``agentjournal.SessionCleared`` event marks the cut.
        """
        tree = self._tree
        async with tree.lock:
            for attempt in range(_CONFLICT_RETRIES):
                if attempt:
                    await _backoff(attempt)
                await self._refresh(0)
                if tree.heads.get(self.stream, -1) < 0:
                    return
                through = await self._next_index() - 1
                cleared = events.SessionCleared(through)
                if await self._append_control(events.SESSION_CLEARED, cleared.encode()):
                    tree.timeline.apply(Clear(through))
                    return
            raise ConcurrencyError(self.stream, "exact", tree.heads.get(self.stream))

    # -- OpenAIResponsesCompactionSession -----------------------------------------------

    async def _get_compaction_snapshot(
        self,
        limit: int,
        *,
        prune_prefix: Callable[[TResponseInputItem], bool] | None = None,
    ) -> _CompactionSnapshot | None:
        """The newest ``limit`` items, and a replacement of their suffix that cannot lose a write.

        The SDK's compaction session asks its store for this (``SQLiteSession`` has
        the same private method): it compacts a suffix of what it read, then calls
        ``replace_suffix(start, output)``. That hides the items from ``start`` on and
        appends ``output``, in one atomic write, only if those items are still the
        newest visible ones; if another writer added, popped or cleared anything
        since, nothing is written and it returns False. ``prune_prefix`` (from
        ``EncryptedSession``: expired envelopes) also hides, in the same write, the
        oldest visible items before the suffix for which it returns True, up to the
        first for which it does not. Hidden items stay on their streams.
        ``complete`` is True when no visible item is older than ``items``.
        """
        if not self._unchanged_storage():
            return None  # a subclass that transforms items must supply its own
        tree = self._tree
        async with tree.lock:
            await self._refresh(max(limit, 0) + 1)
            window = tree.timeline.latest(max(limit, 0) + 1)
            complete = len(window) <= limit
            read = window[max(len(window) - limit, 0) :] if limit > 0 else []
            seen = [(entry.key, entry.item_json) for entry in read]
            items: list[TResponseInputItem] = [entry.item() for entry in read]  # type: ignore[misc]

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            expected = seen[start:]
            if not expected:
                return False

            async def hiding() -> list[Entry | Clear]:
                return await self._suffix_to_hide(expected, prune_prefix)

            try:
                await self._write(list(output), wrapper=None, closing=None, hiding=hiding)
            except _HistoryChanged:
                return False
            return True

        return _CompactionSnapshot(items, complete, replace_suffix)

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """Replace the whole visible history with ``items`` in one atomic write.

        The SDK's compaction session uses this (as ``RedisSession``'s) for a manual
        ``run_compaction()`` instead of ``clear_session`` then ``add_items``, whose
        failure it repairs by clearing again and re-adding every item, which would
        leave a copy of the conversation on the record. Like the SDK's, it does not
        check that the history is still what was compacted: a manual compaction
        replaces the complete history. Returns False (use the fallback) for a
        subclass that transforms items.
        """
        if not self._unchanged_storage():
            return False

        async def hiding() -> list[Entry | Clear]:
            await self._refresh(0)
            if self._tree.heads.get(self.stream, -1) < 0:
                return []  # no session yet: nothing to clear
            return [Clear(await self._next_index() - 1)]

        await self._write(list(items), wrapper=None, closing=None, hiding=hiding)
        return True

    async def _suffix_to_hide(
        self,
        expected: list[tuple[Key, str]],
        prune_prefix: Callable[[TResponseInputItem], bool] | None,
    ) -> list[Entry | Clear]:
        """What a snapshot's replacement hides, read now (under the tree's lock).

        Raises:
            _HistoryChanged: The newest visible items are no longer ``expected``.
        """
        tree = self._tree
        if prune_prefix is None:
            await self._refresh(len(expected))
            visible = tree.timeline.latest(len(expected))
        else:
            visible = await self._visible()
        if len(visible) < len(expected):
            raise _HistoryChanged
        suffix = visible[len(visible) - len(expected) :]
        if [(entry.key, entry.item_json) for entry in suffix] != expected:
            raise _HistoryChanged
        prefix: list[Entry] = []
        if prune_prefix is not None:
            for entry in visible[: len(visible) - len(expected)]:
                if not prune_prefix(entry.item()):  # type: ignore[arg-type]
                    break
                prefix.append(entry)
        hidden: list[Entry | Clear] = [*prefix, *suffix]
        whole = tree.timeline.complete and len(hidden) == len(tree.timeline.entries)
        if whole and all(entry.index >= 0 for entry in [*prefix, *suffix]):
            # Everything goes: one clear instead of a pop per item, and later reads stop there.
            return [Clear(await self._next_index() - 1)]
        return hidden

    def _unchanged_storage(self) -> bool:
        """Whether reads and writes are this class's own (a subclass may transform items)."""
        kind = type(self)
        return kind.add_items is JournalSession.add_items and (
            kind.get_items is JournalSession.get_items
        )

    # -- subagents ----------------------------------------------------------------

    async def open_subagents(self) -> list[events.Subagent]:
        """Return the subagents that are open now, outermost first (read from the streams)."""
        async with self._tree.lock:
            await self._refresh(0)
            return list(self._tree.chain)

    async def close_subagents(self, *, outcome: str = "error", reason: str = "") -> int:
        """Close every open subagent with ``outcome`` and ``reason``; return how many.

        Use it when a run failed and will not be resumed (see also
        :meth:`run_scope`). Each ``SubagentCompleted`` goes to both of its
        streams, innermost first, in one atomic write.
        """
        if outcome not in events.OUTCOMES:
            raise ValueError(f"outcome must be one of {events.OUTCOMES}, got {outcome!r}")
        return await self._write([], wrapper=None, closing=(outcome, reason))

    @contextlib.asynccontextmanager
    async def run_scope(self) -> AsyncIterator[JournalSession]:
        """Wrap a run so that a failure closes its subagents with the exact outcome.

        ::

            async with session.run_scope():
                await Runner.run(triage, "hi", session=session, hooks=session)

        If the body raises, open subagents are closed with outcome
        ``cancelled`` (cancellation, ``KeyboardInterrupt``) or ``error`` and
        the exception as reason, then the exception propagates. Without it the
        session closes them at its next write of a new run, with outcome
        ``error``.
        """
        try:
            yield self
        except BaseException as error:
            cancelled = isinstance(error, asyncio.CancelledError | KeyboardInterrupt)
            reason = f"{type(error).__name__}: {error}"[:SUMMARY_CHARS]
            closing = self.close_subagents(
                outcome="cancelled" if cancelled else "error", reason=reason
            )
            try:
                await asyncio.shield(asyncio.ensure_future(closing))
            except Exception:  # the run's own error is the one to report
                logger.exception("could not close the subagents of %s", self.stream)
            raise
        if self._finished is not None:
            await self._write([], wrapper=None, closing=("success", ""))

    # -- RunHooks ---------------------------------------------------------------

    async def on_agent_start(self, context: RunContextWrapper[Any], agent: Agent[Any]) -> None:
        """Remember which agent is speaking: it authors the items that follow."""
        self._enter_run(context)
        self._current_agent = agent.name
        self._finished = None
        if self._trace is not None:
            self._trace.agent_started(agent.name)
        if self._gates is not None:
            await self._gates.agent_started(agent.name)
        if self._enforcer is not None:
            self._enforcer.agent_started()

    async def on_agent_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], output: Any
    ) -> None:
        """The run's last agent finished: its subagents close with its final message.

        A final output that was no message (a tool's result) is checked here.
        """
        if self._enforcer is not None:
            await self._enforcer.check_final_output(agent, output)
        self._finished = output if isinstance(output, str) else repr(output)
        if self._trace is not None:
            self._trace.end()

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        """Check a newly started agent's input with the guardrail (AGENT_INPUT)."""
        self._enter_run(context, main=True)
        if self._enforcer is not None:
            await self._enforcer.check_input(agent, input_items)

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        """Open the tool call's span."""
        if self._trace is not None:
            self._trace.tool_started(_tool_key(context, tool), tool.name)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: Any
    ) -> None:
        """Close the tool call's span."""
        if self._trace is not None:
            self._trace.tool_ended(_tool_key(context, tool))

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        """Remember usage, response id and handoff calls; check every action with the guardrail."""
        self._enter_run(context, main=True)
        produced = _Produced(response.response_id, _usage_json(response, agent), agent.name)
        targets = _handoff_targets(agent)
        # A handoff is matched within its own response: forget this agent's older
        # candidates (e.g. the second of two handoffs, which the SDK ignores).
        for stale in [c for c, (source, _) in self._handoff_calls.items() if source == agent.name]:
            del self._handoff_calls[stale]
        for output in response.output:
            for key in _identities(output):
                self._produced[key] = produced
            name = getattr(output, "name", None)
            call_id = getattr(output, "call_id", None)
            if getattr(output, "type", None) == "function_call" and name in targets and call_id:
                self._handoff_calls[call_id] = (agent.name, targets[name])
        _trim(self._produced)
        _trim(self._handoff_calls)
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
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        """Match the handoff to its exact call; grant the receiver its authority.

        The SDK takes the first handoff call of a response, and ``on_llm_end`` kept only
        the sender's latest response's calls: the sender's first candidate is the call.
        Its receiver is ``to_agent``, which a routing handoff may choose at run time.
        """
        source, target = from_agent.name, to_agent.name
        if self._gates is not None:
            await self._gates.handed_off(source, target)
        for call_id, (sender, _) in self._handoff_calls.items():
            if sender == source:
                del self._handoff_calls[call_id]
                self._handoffs[call_id] = (source, target)
                for grant in reversed(self._grants):
                    if (grant.sender, grant.receiver, grant.call_id) == (source, target, None):
                        grant.call_id = call_id
                        break
                return
        logger.warning(
            "handoff %s -> %s has no matching call from on_llm_end; it is stored as a tool call",
            from_agent.name,
            to_agent.name,
        )

    # -- runs, spans and guardrail decisions ----------------------------------------

    def _enter_run(self, context: RunContextWrapper[Any], *, main: bool = False) -> None:
        """Notice a new run: every context of one run shares its ``usage`` object."""
        usage = getattr(context, "usage", None)
        if usage is None or (self._run_usage is not None and self._run_usage() is usage):
            if main:
                self._run_wrapper = _weak(context)
            return
        if self._trace is not None:
            self._trace.end("the run ended without finishing (error or interruption)")
        self._run_usage = _weak(usage)
        self._run_wrapper = _weak(context) if main else None
        self._trace = tracing.RunTrace(self.session_id)
        if self._enforcer is not None:
            self._enforcer.new_run()
        if self._gates is not None:
            self._gates.new_run()

    async def open_grant(self, agent: str) -> tuple[bool, Authority | None]:
        """Whether ``agent`` speaks inside the innermost open subagent, and what it was granted.

        A run that resumes there (e.g. after an approval, in a new process)
        must not start from the agent's own policy entry.
        """
        async with self._tree.lock:
            await self._refresh(0)
        chain = self._tree.chain
        if not chain or chain[-1].agent_name != agent:
            return False, None
        granted = self._tree.grants.get(chain[-1].stream)
        try:
            return True, None if granted is None else Authority.from_json(granted)
        except InvalidInput as error:
            logger.warning("the grant of %s is unreadable (%s): it holds nothing", agent, error)
            return True, None

    def agent_span(self) -> Span | None:
        """The span of the agent acting now (for guardrail calls)."""
        return self._trace.current if self._trace is not None else None

    def _trace_ids(self, wrapper: RunContextWrapper[Any] | None) -> tracing.TraceIds | None:
        """The ids for events written now: the speaking agent's span, if this run has one."""
        if self._trace is not None and _same_run(self._run_wrapper, wrapper):
            return tracing.ids_of(self._trace.current)
        return tracing.current_ids()

    async def run_stopped(self, error: GuardrailBlocked | AuthorityDenied) -> None:
        """A guardrail or a refusal ends the run: open subagents close with outcome ``error``."""
        if self._trace is not None:
            self._trace.end(error)
        reason = f"{type(error).__name__}: {error}"[:SUMMARY_CHARS]
        await self.close_subagents(outcome="error", reason=reason)

    async def authority_stopped(self, error: AuthorityDenied) -> None:
        """An authority refusal ends the run: its open subagents close with outcome ``error``."""
        await self.run_stopped(error)

    async def record_decision(self, decided: events.GuardrailDecided) -> None:
        """Append a guardrail decision to the acting agent's stream before it is acted on.

        Raises:
            StoreError: The decision did not land (then it must not be acted on).
        """
        trace = tracing.TraceIds(decided.trace_id, decided.span_id)
        metadata = (
            self._rule_metadata(decided.subject) if decided.action_type == "TOOL_CALL" else {}
        )
        await self._record_control(
            events.GUARDRAIL_DECIDED, decided.encode(), trace, decided.agent, metadata=metadata
        )

    async def record_refusal(self, refused: events.AuthorityRefused) -> None:
        """Append an authority refusal to the acting agent's stream.

        Raises:
            StoreError: The refusal did not land (the action is refused anyway).
        """
        await self._record_control(
            events.AUTHORITY_REFUSED,
            refused.encode(),
            self._current_ids(),
            refused.agent,
            metadata=self._policy_metadata(),
        )

    async def record_grant(self, agent: str, authority: Authority) -> None:
        """Append ``agentjournal.AuthorityGranted`` (what a run's first agent holds) and,
        in the same transaction, its entry on the authority log."""
        trace = self._current_ids()
        data = json.dumps(
            {"agent": agent, "authority": authority.to_json(), "cause": "run"},
            sort_keys=True,
            separators=(",", ":"),
        ).encode()
        await self._record_control(
            events.AUTHORITY_GRANTED, data, trace, agent, held=(agent, authority.to_json())
        )

    async def handoff_granted(self, sender: str, receiver: str, authority: Authority) -> None:
        """A handoff granted ``receiver`` an authority: it goes on the record with the next
        write, whether or not that write can show the handoff as a subagent."""
        last = self._grants[-1] if self._grants else None
        if last is not None and (last.sender, last.receiver, last.authority) == (
            sender,
            receiver,
            authority,
        ):
            return  # the guard's wrapper and the hooks both saw this handoff
        self._grants.append(_Grant(sender, receiver, authority))

    async def held_grant(self, agent: str) -> Authority | None:
        """What ``agent`` last held in this session (the authority log, read afresh), if any.

        An unreadable entry holds nothing (fail closed).
        """
        async with self._tree.lock:
            log = await self._authority_log(fresh=True)
        raw = log.held.get(agent)
        if raw is None:
            return None
        try:
            return Authority.from_json(raw)
        except InvalidInput as error:
            logger.warning("what %s last held is unreadable (%s): it holds nothing", agent, error)
            return Authority()

    async def reset_authority(self, agent: str, *, reason: str) -> None:
        """Let ``agent`` start its next run from its policy entry again.

        Within one session a run's first agent holds at most what it last held
        (a subagent narrowed by a handoff chain stays narrowed when the next
        turn starts at it). Widening it again is this explicit call, recorded
        as ``agentjournal.AuthorityReset`` on the authority log, where a
        verifier sees it. It does not touch a subagent that is still open
        (close it with :meth:`close_subagents` first) nor a run in progress.

        Raises:
            InvalidInput: The session has no policy, or ``reason`` is empty.
        """
        if self._gates is None:
            raise InvalidInput(f"{self.session_id!r} has no policy: there is no authority to reset")
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("reset_authority needs a reason (it is recorded for auditors)")
        policy = self._gates.policy
        tree = self._tree
        async with tree.lock:
            for attempt in range(_CONFLICT_RETRIES):
                if attempt:
                    await _backoff(attempt)
                log = await self._authority_log(fresh=True)
                held = {name: value for name, value in log.held.items() if name != agent}
                entries = self._policy_entries(log)
                reset = events.AuthorityReset(agent, reason, policy.digest, held)
                entries.append((events.AUTHORITY_RESET, reset.encode()))
                request, after = self._log_request(log, entries, held)
                landed = await self._append([request])
                if isinstance(landed, ConcurrencyError):
                    continue
                tree.authority = after
                logger.info("authority of %r reset in %s: %s", agent, self.session_id, reason)
                return
            raise ConcurrencyError(authority_stream(self.session_id), "exact", None)

    def _current_ids(self) -> tracing.TraceIds | None:
        """The acting agent's span in this run, else the current span or SDK trace."""
        span = self.agent_span()
        return tracing.ids_of(span) if span is not None else tracing.current_ids()

    async def _record_control(
        self,
        type_: str,
        data: bytes,
        trace: tracing.TraceIds | None,
        agent: str,
        *,
        metadata: Mapping[str, str] | None = None,
        held: tuple[str, Any] | None = None,
    ) -> None:
        """Append a decision, refusal or grant to the stream of the agent acting in this run.

        That is the innermost open subsession when this run wrote inside it or
        ``agent`` is its agent (a resumed run), else the session stream (a new
        run's first agent speaks there). ``held`` (agent, authority JSON) adds
        the grant's entry to the authority log in the same transaction.
        """
        tree = self._tree
        extra = {**_trace_metadata(trace), **(metadata or {})}
        if not self._record_payloads:
            # What it judged stays out of the record: its view (digests) is the data.
            shown = redaction.view(type_, data, extra)
            if shown is not None:
                data = json.dumps(shown, ensure_ascii=False, separators=(",", ":")).encode()
                extra[events.VIEWED_KEY] = "1"
        async with tree.lock:
            if not tree.loaded:
                await self._load(0)
            for attempt in range(_CONFLICT_RETRIES):
                if attempt:
                    await _backoff(attempt)
                run = self._run_wrapper() if self._run_wrapper is not None else None
                inner = tree.chain and (
                    _same_run(tree.chain_run, run) or tree.chain[-1].agent_name == agent
                )
                stream = tree.chain[-1].stream if inner else self.stream
                request, sealed = await self._control_request(type_, data, stream, extra)
                requests = [request]
                after: AuthorityLog | None = None
                if held is not None:
                    log = await self._authority_log()
                    entry = (held[0], held[1], "run", str(request.events[0].id), stream)
                    log_request, after = self._held_request(log, [entry])
                    requests.append(log_request)
                landed = await self._append(requests)
                if isinstance(landed, ConcurrencyError):
                    await self._catch_up()
                    tree.authority = None  # reread the log's head before the next attempt
                    continue
                tree.heads[stream] = landed[0]
                tree.hashes[stream] = sealed
                tree.unsigned += sum(len(r.events) for r in requests)
                if after is not None:
                    tree.authority = after
                return
            raise ConcurrencyError(self.stream, "exact", tree.heads.get(self.stream))

    # -- the authority log ---------------------------------------------------------

    def _policy_entries(self, log: AuthorityLog) -> list[tuple[str, bytes]]:
        """``PolicyRecorded`` when the log's policy in force is not this session's."""
        assert self._gates is not None
        policy = self._gates.policy
        if log.policy == policy.digest:
            return []
        recorded = events.PolicyRecorded(policy.digest, policy.to_json())
        return [(events.POLICY_RECORDED, recorded.encode())]

    def _held_request(
        self, log: AuthorityLog, grants: list[tuple[str, Any, str, str, str]]
    ) -> tuple[AppendRequest, AuthorityLog]:
        """The authority log's entries for ``grants`` (agent, authority JSON, cause, event id,
        event stream), after the policy when it changed."""
        assert self._gates is not None
        digest = self._gates.policy.digest
        held = dict(log.held)
        entries = self._policy_entries(log)
        for agent, authority, cause, event, stream in grants:
            held[agent] = authority
            entry = events.AuthorityHeld(
                agent, authority, cause, event, stream, digest, dict(sorted(held.items()))
            )
            entries.append((events.AUTHORITY_HELD, entry.encode()))
        return self._log_request(log, entries, held)

    def _log_request(
        self, log: AuthorityLog, entries: list[tuple[str, bytes]], held: Mapping[str, Any]
    ) -> tuple[AppendRequest, AuthorityLog]:
        """Seal ``entries`` after the log's head; the request and the log after it lands."""
        assert self._gates is not None
        stream = authority_stream(self.session_id)
        prev = log.hash
        new: list[NewEvent] = []
        for offset, (type_, data) in enumerate(entries):
            metadata = {
                events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE,
                **_trace_metadata(self._current_ids()),
            }
            event_id = uuid.uuid4()
            prev = _seal(stream, log.revision + 1 + offset, event_id, type_, data, metadata, prev)
            new.append(NewEvent(type=type_, data=data, metadata=metadata, id=event_id))
        expected = StreamState.NO_STREAM if log.revision < 0 else log.revision
        after = AuthorityLog(
            log.revision + len(new), prev, self._gates.policy.digest, dict(sorted(held.items()))
        )
        return AppendRequest(stream, new, expected), after

    def _policy_metadata(self) -> dict[str, str]:
        """``aj.policy``: the digest of the policy this session enforces (nothing without)."""
        return {events.POLICY_KEY: self._gates.policy.digest} if self._gates is not None else {}

    def _rule_metadata(self, tool: str) -> dict[str, str]:
        """``aj.policy`` and ``aj.tool_rule`` of a tool, under this session's policy."""
        if self._gates is None:
            return {}
        rule = self._gates.policy.tools.get(tool)
        text = (
            json.dumps(
                {"scope": rule.scope, "ceilings": dict(rule.ceilings)},
                sort_keys=True,
                separators=(",", ":"),
            )
            if rule is not None
            else "null"
        )
        return {**self._policy_metadata(), events.TOOL_RULE_KEY: text}

    # -- checkpoints ----------------------------------------------------------------

    async def checkpoint(self) -> ledger.Checkpoint | None:
        """Sign the heads of the session tree now (``agentjournal.Checkpoint``); None without a key.

        The session also checkpoints by itself at the end of each run and
        every ``checkpoint_every`` events it writes.

        Raises:
            StoreError: The checkpoint could not be written.
        """
        if self._signing_key is None:
            return None
        async with self._tree.lock:
            await self._refresh(0)
            return await self._write_checkpoint()

    async def _maybe_checkpoint(self, *, force: bool) -> None:
        """Checkpoint at the end of a run or after enough events (under the tree lock)."""
        tree = self._tree
        if self._signing_key is None or not (force or tree.unsigned >= self._checkpoint_every):
            return
        try:
            await self._write_checkpoint()
        except Exception:  # the write it follows has landed; the next checkpoint covers it
            logger.exception("could not write a checkpoint of %s", self.stream)

    async def _write_checkpoint(self) -> ledger.Checkpoint | None:
        tree = self._tree
        assert self._signing_key is not None
        await self._catch_up()  # sign the heads as they are now, not as this process last saw
        heads = {
            stream: (revision, tree.hashes.get(stream, ""))
            for stream, revision in tree.heads.items()
            if revision >= 0
        }
        log = await self._authority_log(fresh=True)
        if log.revision >= 0:
            heads[authority_stream(self.session_id)] = (log.revision, log.hash)
        if not heads:
            return None
        stream = ledger_stream(self.session_id)
        for _ in range(_CONFLICT_RETRIES):
            if tree.ledger_head is None:
                try:
                    tail = await self._store.read(stream, backwards=True, limit=1)
                except StreamNotFound:
                    tail = []
                tree.ledger_head = (
                    (tail[0].revision, tail[0].metadata.get(ledger.HASH_KEY, ""))
                    if tail
                    else (-1, ledger.GENESIS)
                )
            head, prev = tree.ledger_head
            metadata = {
                events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE,
                **_trace_metadata(self._current_ids()),
            }
            checkpoint = ledger.Checkpoint.sign(
                self._signing_key,
                self.session_id,
                heads,
                datetime.now(UTC),
                sequence=head + 1,
                previous=prev,
                metadata=metadata,
            )
            data = checkpoint.encode()
            event_id = ledger.signed_event_id(stream, checkpoint.signature)
            sealed = _seal(stream, head + 1, event_id, ledger.CHECKPOINT, data, metadata, prev)
            event = NewEvent(type=ledger.CHECKPOINT, data=data, metadata=metadata, id=event_id)
            expected = StreamState.NO_STREAM if head < 0 else head
            landed = await self._append([AppendRequest(stream, [event], expected)])
            if isinstance(landed, ConcurrencyError):
                tree.ledger_head = None  # another process checkpointed: read its head
                continue
            tree.ledger_head = (landed[0], sealed)
            tree.unsigned = 0
            return checkpoint
        raise ConcurrencyError(stream, "exact", None)

    # -- writing ------------------------------------------------------------------

    async def _write(
        self,
        items: list[TResponseInputItem],
        *,
        wrapper: RunContextWrapper[Any] | None,
        closing: tuple[str, str] | None,
        hiding: Callable[[], Awaitable[Sequence[Entry | Clear]]] | None = None,
    ) -> int:
        """Plan, encode and append one atomic write; return the subagents it closed.

        ``hiding`` (a compaction's replacement) is asked before each attempt, under
        the tree's lock, which items the same write hides (popped entries, or one
        clear); it raises to give up.
        """
        tree = self._tree
        nonce = uuid.uuid4().hex
        conflict = ConcurrencyError(self.stream, "exact", tree.heads.get(self.stream))
        async with tree.lock:
            if not tree.loaded:
                await self._load(0)
            for attempt in range(_CONFLICT_RETRIES):
                if attempt:
                    await _backoff(attempt)
                hides = await hiding() if hiding is not None else ()
                first = await self._next_index()
                plan = self._plan(items, wrapper, closing, first)
                if not plan.ops and not hides:
                    return 0
                log = await self._authority_log() if self._grants else None
                requests, entries, hashes, after = self._encode(
                    plan, nonce, first, wrapper, log, hides
                )
                landed = await self._append(requests)
                if isinstance(landed, ConcurrencyError):
                    conflict = landed
                    tree.authority = None  # reread the log's head before the next attempt
                    opened = {
                        op.subagent.stream for op in plan.ops if op.kind == "start" and op.subagent
                    }
                    if conflict.stream in opened:
                        # That subsession exists already: the handoff's call id was used
                        # before in this session. Give the receiver a new id and retry.
                        self._taken.add(conflict.stream)
                        continue
                    if not await self._catch_up(until=requests[0].events[-1].id):
                        continue
                    # An earlier attempt with these ids did land; the catch-up read it back.
                else:
                    for request, result in zip(requests, landed, strict=True):
                        tree.heads[request.stream] = result
                    for entry in entries:
                        tree.timeline.apply(entry)
                    tree.chain = plan.chain
                    followed = {self.stream, *(sub.stream for sub in plan.chain)}
                    tree.heads = {k: v for k, v in tree.heads.items() if k in followed}
                    tree.hashes = {k: v for k, v in hashes.items() if k in followed}
                    tree.next_index = first + plan.indexed
                    if after is not None:
                        tree.authority = after
                tree.call_owner = plan.call_owner
                if wrapper is not None and tree.chain:
                    tree.chain_run = _weak(wrapper)
                closed = sum(1 for op in plan.ops if op.kind == "close")
                run_ended = bool(
                    closed or closing is not None or (items and self._finished is not None)
                )
                if closed or closing is not None or items:
                    self._finished = None  # the final output has been written (or closed)
                if not isinstance(landed, ConcurrencyError):
                    tree.unsigned += sum(len(r.events) for r in requests)
                    await self._maybe_checkpoint(force=run_ended)
                for op in plan.ops:
                    if op.kind == "start" and op.subagent is not None:
                        self._handoffs.pop(op.subagent.call_id, None)
                        granted = self._granted(op.subagent.call_id)
                        tree.grants[op.subagent.stream] = (
                            granted.authority.to_json() if granted is not None else None
                        )
                self._grants = []  # written, on a SubagentStarted or as AuthorityGranted
                if items:
                    # A handoff this write could not show as a subagent (its call is inside
                    # an encrypted envelope, or was never matched) never will be.
                    self._handoffs.clear()
                return closed
            raise conflict

    def _plan(
        self,
        items: list[TResponseInputItem],
        wrapper: RunContextWrapper[Any] | None,
        closing: tuple[str, str] | None,
        first: int,
    ) -> Plan:
        """Route the items (pure, :func:`agentjournal.engine.routing.plan_write`)."""
        tree = self._tree
        plan = plan_write(
            items,
            session_id=self.session_id,
            session_stream=self.stream,
            chain=tree.chain,
            call_owner=tree.call_owner,
            first_index=first,
            handoffs=self._handoffs,
            taken=self._taken,
            closing=closing,
            finished=self._finished,
            new_run=bool(items)
            and starts_a_run(items[0])
            and not _same_run(tree.chain_run, wrapper),
        )
        for output in plan.unmatched_outputs:
            self._warn_if_unwired(output)
        return plan

    def _granted(self, call_id: str) -> _Grant | None:
        """The grant of the handoff made by call ``call_id``, if the hooks matched it."""
        return next((grant for grant in self._grants if grant.call_id == call_id), None)

    def _encode(
        self,
        plan: Plan,
        nonce: str,
        first: int,
        wrapper: RunContextWrapper[Any] | None,
        log: AuthorityLog | None,
        hides: Sequence[Entry | Clear] = (),
    ) -> tuple[list[AppendRequest], list[TimelineEvent], dict[str, str], AuthorityLog | None]:
        """Turn the plan into per-stream event lists, the timeline entries they make, the
        streams' chain hashes after them, and the authority log after its new entries.
        ``hides`` go first, to the innermost open stream, as ``ItemPopped`` per entry and
        ``SessionCleared`` per clear."""
        tree = self._tree
        now = datetime.now(UTC)
        trace = _trace_metadata(self._trace_ids(wrapper))
        next_index = first + plan.indexed
        by_stream: dict[str, list[NewEvent]] = {}
        heads = dict(tree.heads)
        hashes = dict(tree.hashes)
        entries: list[TimelineEvent] = []
        counter = 0
        open_child = {s.parent_stream: s.stream for s in tree.chain}
        grants: list[tuple[str, Any, str, str, str]] = []  # for the authority log
        shown: list[_Grant] = []  # grants this write shows on a SubagentStarted

        def add(
            stream: str, type_: str, data: bytes, metadata: dict[str, str], **extra: str
        ) -> NewEvent:
            nonlocal counter
            metadata[events.NEXT_INDEX_KEY] = str(next_index)
            metadata[events.SCHEMA_VERSION_KEY] = events.SCHEMA_VERSION_VALUE
            child = open_child.get(stream)
            if child:
                metadata[events.OPEN_KEY] = child
            metadata.update(trace)
            metadata.update(extra)
            event_id = self._id(nonce, counter)
            revision = revision_of(stream) + 1
            prev = hashes.get(stream, "") if revision > 0 else ledger.GENESIS
            hashes[stream] = _seal(stream, revision, event_id, type_, data, metadata, prev)
            event = NewEvent(type=type_, data=data, metadata=metadata, id=event_id)
            counter += 1
            by_stream.setdefault(stream, []).append(event)
            return event

        def revision_of(stream: str) -> int:
            return heads.get(stream, -1) + len(by_stream.get(stream, []))

        if heads.get(self.stream, -1) < 0 and not by_stream.get(self.stream):
            started = events.encode_session_started(
                app_name=self._app_name,
                agent_name=self._agent_name or self._current_agent,
                user_id=self._user_id,
                timestamp=now,
            )
            add(self.stream, events.SESSION_STARTED, started, {})
        innermost = tree.chain[-1].stream if tree.chain else self.stream
        for hidden in hides:
            if isinstance(hidden, Clear):
                cleared = events.SessionCleared(hidden.through_index)
                add(innermost, events.SESSION_CLEARED, cleared.encode(), {})
                entries.append(hidden)
            else:
                popped = events.ItemPopped(
                    hidden.stream, hidden.revision, hidden.part, hidden.index
                )
                add(innermost, events.ITEM_POPPED, popped.encode(), {})
                entries.append(Pop(hidden.key))
        for op in plan.ops:
            if op.kind == "item":
                assert op.item is not None
                assert op.index is not None
                produced = self._produced_by(op.item)
                author = produced.agent if produced else self._author_of(op.item)
                encoded = codec.encode_item(
                    op.item, message_index=op.index, author=author, timestamp=now
                )
                metadata = {events.INDEX_KEY: str(op.index)}
                if produced and encoded.type in _ASSISTANT_TYPES:
                    if produced.usage_json:
                        metadata[events.USAGE_KEY] = produced.usage_json
                    if produced.response_id:
                        metadata[events.RESPONSE_ID_KEY] = produced.response_id
                metadata.update(self._call_metadata(op.item))
                add(op.stream, encoded.type, encoded.data, metadata)
                entries.append(
                    Entry(op.stream, revision_of(op.stream), 0, op.index, encoded.item_json)
                )
            elif op.kind == "start":
                assert op.subagent is not None
                assert op.item is not None
                assert op.index is not None
                sub = op.subagent
                item_json = codec.exact_json(op.item)
                grant = self._granted(sub.call_id)
                granted = grant.authority.to_json() if grant is not None else None
                owner_id, twin_id = self._id(nonce, counter), self._id(nonce, counter + 1)
                if grant is not None:
                    shown.append(grant)
                    grants.append(
                        (sub.agent_name, granted, "handoff", str(owner_id), sub.parent_stream)
                    )
                open_child[sub.parent_stream] = sub.stream
                add(
                    sub.parent_stream,
                    events.SUBAGENT_STARTED,
                    events.encode_subagent_started(
                        sub, item_json=item_json, twin=twin_id, timestamp=now, authority=granted
                    ),
                    {events.INDEX_KEY: str(op.index), events.TWIN_KEY: str(twin_id)},
                )
                entries.append(
                    Entry(sub.parent_stream, revision_of(sub.parent_stream), 0, op.index, item_json)
                )
                add(
                    sub.stream,
                    events.SUBAGENT_STARTED,
                    events.encode_subagent_started(
                        sub, item_json=None, twin=owner_id, timestamp=now, authority=granted
                    ),
                    {events.TWIN_KEY: str(owner_id)},
                )
            else:
                assert op.subagent is not None
                sub = op.subagent
                # The twin first: the parent's copy carries the subsession's final hash,
                # so the parent's chain covers the whole closed subtree.
                sub_id, parent_id = self._id(nonce, counter), self._id(nonce, counter + 1)
                open_child.pop(sub.parent_stream, None)
                for stream, twin in ((sub.stream, parent_id), (sub.parent_stream, sub_id)):
                    data = events.encode_subagent_completed(
                        sub,
                        outcome=op.outcome,
                        summary=op.summary,
                        reason=op.reason,
                        twin=twin,
                        timestamp=now,
                    )
                    metadata = {events.TWIN_KEY: str(twin)}
                    if stream == sub.parent_stream:
                        metadata[events.CLOSES_KEY] = sub.stream
                        metadata[events.CLOSES_HASH_KEY] = hashes[sub.stream]
                    add(stream, events.SUBAGENT_COMPLETED, data, metadata)
        # A grant whose handoff this write does not show as a subagent is recorded on its own,
        # after the write's items: what follows on that stream is the receiver's.
        owner = plan.chain[-1].stream if plan.chain else self.stream
        for grant in self._grants:
            if any(grant is other for other in shown):
                continue
            event = add(owner, events.AUTHORITY_GRANTED, _grant_data(grant), {})
            grants.append(
                (grant.receiver, grant.authority.to_json(), "handoff", str(event.id), owner)
            )
        after: AuthorityLog | None = None
        if grants and log is not None:
            log_request, after = self._held_request(log, grants)
            by_stream[log_request.stream] = list(log_request.events)
            heads[log_request.stream] = log.revision
            hashes[log_request.stream] = after.hash
        # A receiver's stream must not exist yet, whatever was read before.
        opened = {op.subagent.stream for op in plan.ops if op.kind == "start" and op.subagent}
        requests = [
            AppendRequest(
                stream,
                new,
                StreamState.NO_STREAM
                if stream in opened or heads.get(stream, -1) < 0
                else heads[stream],
            )
            for stream, new in by_stream.items()
        ]
        return requests, entries, hashes, after

    async def _append_control(self, type_: str, data: bytes) -> bool:
        """Append an event that is no item to the innermost stream; False on conflict."""
        tree = self._tree
        stream = tree.chain[-1].stream if tree.chain else self.stream
        request, sealed = await self._control_request(
            type_, data, stream, _trace_metadata(self._current_ids())
        )
        landed = await self._append([request])
        if isinstance(landed, ConcurrencyError):
            await self._catch_up()
            return False
        tree.heads[stream] = landed[0]
        tree.hashes[stream] = sealed
        tree.unsigned += 1
        return True

    async def _control_request(
        self, type_: str, data: bytes, stream: str, extra: Mapping[str, str]
    ) -> tuple[AppendRequest, str]:
        """One sealed event that is no item, after ``stream``'s head; and its chain hash."""
        tree = self._tree
        metadata = {
            events.NEXT_INDEX_KEY: str(await self._next_index()),
            events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE,
            **extra,
        }
        child = next((s.stream for s in tree.chain if s.parent_stream == stream), None)
        if child is not None:
            metadata[events.OPEN_KEY] = child  # a new process finds the open subagent from here
        event_id = uuid.uuid4()
        head = tree.heads.get(stream, -1)
        prev = tree.hashes.get(stream, "") if head >= 0 else ledger.GENESIS
        sealed = _seal(stream, head + 1, event_id, type_, data, metadata, prev)
        event = NewEvent(type=type_, data=data, metadata=metadata, id=event_id)
        return AppendRequest(stream, [event], StreamState.NO_STREAM if head < 0 else head), sealed

    async def _append(self, requests: list[AppendRequest]) -> list[int] | ConcurrencyError:
        """Append atomically; the new head of each stream, or the conflict (nothing written)."""
        for attempt in range(_UNAVAILABLE_RETRIES + 1):
            try:
                if len(requests) == 1:
                    (only,) = requests
                    result = await self._store.append(
                        only.stream, only.events, expected=only.expected
                    )
                    return [result.revision]
                return [result.revision for result in await self._store.append_many(requests)]
            except ConcurrencyError as conflict:
                # After an unknown outcome (ours or the store's) a conflict may be
                # our own earlier attempt: its ids in place mean it landed, and
                # writing again after a catch-up would duplicate every item.
                landed = await _landed(self._store, requests)
                return conflict if landed is None else landed
            except StoreUnavailable:
                # Unknown outcome: the same ids at the same revisions are recognised
                # by the store if the first attempt did land.
                if attempt == _UNAVAILABLE_RETRIES:
                    raise
                await asyncio.sleep(0.05 * 4**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call_metadata(self, item: Mapping[str, Any]) -> dict[str, str]:
        """What a verifier needs to check a tool call without its payload (``aj.call_id``, ...),
        or to say that it cannot look into an item (``aj.opaque``)."""
        if not isinstance(item.get("type"), str) and not isinstance(item.get("role"), str):
            return {events.OPAQUE_KEY: "1"}
        call_id = item.get("call_id")
        kind = item.get("type", "")
        if not isinstance(call_id, str) or not call_id or not isinstance(kind, str):
            return {}  # an object whose type is no string is no call (it is stored opaque)
        metadata = {events.CALL_ID_KEY: call_id, events.ITEM_TYPE_KEY: kind}
        call = call_of(item)
        if call is not None:
            if self._enforcer is not None:
                metadata[events.GUARDED_KEY] = "1"
            metadata.update(self._rule_metadata(call.name))
        return metadata

    def _id(self, nonce: str, counter: int) -> uuid.UUID:
        return event_id(self.stream, nonce, counter)

    def _author_of(self, item: Mapping[str, Any]) -> str | None:
        role = item.get("role")
        if role == "user" or (role is None and not isinstance(item.get("type"), str)):
            return None  # the user's; or opaque (an EncryptedSession envelope): nobody knows
        return self._current_agent

    def _produced_by(self, item: Mapping[str, Any]) -> _Produced | None:
        for key in _identities(item):
            found = self._produced.get(key)
            if found is not None:
                return found
        return None

    def _warn_if_unwired(self, item: Mapping[str, Any]) -> None:
        """Warn once when a handoff's output arrives without the hooks having seen it."""
        if self._warned_unwired:
            return
        self._warned_unwired = True
        logger.warning(
            "a handoff (%s) reached %s without the hooks: pass the session as hooks= too "
            "(Runner.run(..., session=s, hooks=s)) to record it as a subagent; it is stored "
            "as an ordinary tool call",
            item.get("output"),
            self.stream,
        )


# -- helpers ----------------------------------------------------------------------


def _grant_data(grant: _Grant) -> bytes:
    """``AuthorityGranted`` of a handoff that opened no subagent."""
    body = {
        "agent": grant.receiver,
        "authority": grant.authority.to_json(),
        "cause": "handoff",
        "sender": grant.sender,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _seal(
    stream: str,
    revision: int,
    event_id: uuid.UUID,
    type_: str,
    data: bytes,
    metadata: dict[str, str],
    prev: str,
) -> str:
    """Commit the event's redacted view (``aj.redacted``, when its type has one), then add
    the chain keys; return its hash. Every event the session writes goes through here."""
    shown = redaction.view(type_, data, metadata)
    if shown is not None:
        metadata[events.REDACTED_KEY] = redaction.view_digest(shown)
    return ledger.seal(stream, revision, str(event_id), type_, data, metadata, prev)


class _HistoryChanged(Exception):
    """A compaction snapshot's suffix is no longer the newest history: replace nothing."""


async def _landed(store: EventStore, requests: list[AppendRequest]) -> list[int] | None:
    """The new heads if every stream holds these events right where the write expected them."""
    heads: list[int] = []
    for request in requests:
        expected = request.expected
        if isinstance(expected, StreamState) and expected is not StreamState.NO_STREAM:
            return None  # ANY/EXISTS say nothing about where a write went
        start = expected + 1 if isinstance(expected, int) else 0
        try:
            found = await store.read(request.stream, from_revision=start, limit=len(request.events))
        except StreamNotFound:
            return None
        if [event.id for event in found] != [event.id for event in request.events]:
            return None
        heads.append(found[-1].revision)
    return heads


async def _backoff(attempt: int) -> None:
    """Wait a little after losing a race, more each time, at random (no lockstep retries)."""
    await asyncio.sleep(random.uniform(0, min(0.1, 0.002 * 2**attempt)))


def _settings(value: SessionSettings | Mapping[str, Any] | None) -> SessionSettings:
    if value is None:
        return SessionSettings()
    if isinstance(value, Mapping):
        value = dict(value)
    return coerce_session_settings(value)  # the SDK's own rules and errors


def _trim(mapping: OrderedDict[str, Any]) -> None:
    while len(mapping) > _REMEMBERED:
        mapping.popitem(last=False)


def _weak(wrapper: Any) -> weakref.ref[Any] | None:
    try:
        return weakref.ref(wrapper)
    except TypeError:
        return None


def _same_run(chain_run: weakref.ref[Any] | None, wrapper: Any) -> bool:
    return wrapper is not None and chain_run is not None and chain_run() is wrapper


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


def _identities(item: Any) -> list[str]:
    """Keys that match a model output item with the session item made from it."""
    keys = []
    for name in ("call_id", "id"):
        value = item.get(name) if isinstance(item, Mapping) else getattr(item, name, None)
        if isinstance(value, str) and value:
            keys.append(f"{name}:{value}")
    return keys


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


def _trace_metadata(ids: tracing.TraceIds | None) -> dict[str, str]:
    """``trace_id`` and ``span_id`` metadata for ``ids`` (nothing when there are none)."""
    if ids is None:
        return {}
    found = {events.TRACE_ID_KEY: ids.trace_id}
    if ids.span_id:
        found[events.SPAN_ID_KEY] = ids.span_id
    return found


def _tool_key(context: Any, tool: Any) -> str:
    """One tool call's key for its span: the call id when the context has it."""
    return str(getattr(context, "tool_call_id", None) or getattr(tool, "name", ""))
