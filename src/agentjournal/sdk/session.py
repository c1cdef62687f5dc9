"""The journal session: the SDK's ``Session`` and ``RunHooks`` in one object.

Use it as both (``Runner.run(agent, input, session=s, hooks=s)``). As a
session it writes every item as one canonical event and gives the items back
exactly; as hooks it learns what only the run knows — which agent spoke, the
token usage of each response, and which tool call is a handoff — and records it.

This is the adapter: SDK objects in, plain dicts and names out. What a session
writes and reads, and how (streams, handoffs as subagents, one atomic write per
``add_items``, the windowed reads), is the SDK-free engine's
(:class:`~agentjournal.engine.core.SessionCore`); what a run knows lives in one
:class:`~agentjournal.sdk.run.RunState`; guardrails, the authority gates and the
run's spans sit here beside it (:mod:`~agentjournal.sdk.enforce`,
:mod:`~agentjournal.sdk.gates`, :mod:`~agentjournal.sdk.tracing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from agents.memory.session import _CompactionSnapshot
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from agentjournal import events
from agentjournal.authority import Policy
from agentjournal.engine.checkpoints import DEFAULT_CHECKPOINT_EVERY
from agentjournal.engine.core import SessionCore, open_line
from agentjournal.engine.fork import Branch
from agentjournal.engine.plan import ItemsPlan
from agentjournal.engine.routing import SUMMARY_CHARS
from agentjournal.engine.tree import SessionTree
from agentjournal.errors import BranchDeleted, InvalidInput
from agentjournal.guardrails.client import GuardrailClient
from agentjournal.ledger.checkpoints import Checkpoint
from agentjournal.ledger.keys import SigningKey
from agentjournal.sdk import guard as guarding
from agentjournal.sdk import tracing
from agentjournal.sdk.advanced import AdvancedSessionAPI
from agentjournal.sdk.app_events import ApplicationEventsAPI, check_not_deciding
from agentjournal.sdk.approvals import ApprovalsAPI
from agentjournal.sdk.enforce import Enforcer
from agentjournal.sdk.gates import Gatekeeper
from agentjournal.sdk.hooks import SessionHooks
from agentjournal.sdk.recorder import SessionRecorder
from agentjournal.sdk.run import RunState, weak
from agentjournal.shred.sealing import SubjectSealer
from agentjournal.store.contract import EventStore
from agentjournal.streams import MAIN_BRANCH, validate_id

if TYPE_CHECKING:
    from types import TracebackType

    from agents.agent import Agent
    from agents.items import TResponseInputItem
    from agents.run_context import RunContextWrapper

_logger = logging.getLogger("agentjournal.session")
logger = _logger


class JournalSession(AdvancedSessionAPI, ApprovalsAPI, ApplicationEventsAPI, SessionHooks):
    """A Session and RunHooks backed by an event store.

    Create it with :meth:`agentjournal.Journal.session`. One object may serve
    many runs one after another; concurrent calls on it are serialised.

    Attributes:
        session_id: The session's id (kurrent-agent-schema §2.4 rules).
        session_settings: Defaults for ``get_items`` (``limit``).
        stream: The line's top stream: the session's, ``AgentSession-{session_id}``, or
            on a branch (``branch=``) the branch's, ``AgentBranch-{session_id}@{key}``.
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
        signing_key: SigningKey | None = None,
        checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
        record_payloads: bool = True,
        branch: str | None = None,
        trees: Callable[[str | None], SessionTree] | None = None,
        logger: logging.Logger | None = None,
        sealer: SubjectSealer | None = None,
    ) -> None:
        self.session_id = validate_id(session_id, "session id")
        self._closed = False
        if branch == MAIN_BRANCH:
            branch = None
        self.session_settings: SessionSettings | None = _settings(session_settings)
        self._agent_name = agent_name
        # A sealed session reads through a store that opens its sealed content.
        self._store = store if sealer is None else sealer.opening(store)
        self._trees = trees
        self._logger = logger if logger is not None else _logger
        self._signing_key = signing_key
        self._checkpoint_every = checkpoint_every
        self._line_facts: dict[str, Any] = {
            "app_name": app_name,
            "user_id": user_id,
            "agent_name": agent_name,
            "policy": policy,
            "guarded": guardrails is not None,
            "record_payloads": record_payloads,
            "sealer": sealer,
        }
        # One core per line this object has been on (the pointer moves between them);
        # a line's tree is the journal's shared one when the journal made this object.
        self._lines: dict[str | None, SessionCore] = {}
        if tree is not None:
            self._lines[branch] = self._new_core(branch, tree)
        self._branch: str | None = None
        self._core = self._line(branch)
        self.stream = self._core.facts.stream
        self._branch = branch
        self._run_core: SessionCore | None = None  # the line the current run started on
        self._run = RunState(speaker=agent_name)
        self._recorder = SessionRecorder(self)
        self._enforcer = (
            Enforcer(guardrails, thread_id=self.session_id, recorder=self._recorder)
            if guardrails is not None
            else None
        )
        self._gates = Gatekeeper(policy, recorder=self._recorder) if policy is not None else None
        self._wiring = guarding.Wiring(self._enforcer, self._gates)

    # -- lines: the current-branch pointer (DESIGN, "Branches") ----------

    def _new_core(self, branch: str | None, tree: SessionTree | None = None) -> SessionCore:
        """The reads and writes of one line of this session."""
        if tree is None and self._trees is not None:
            tree = self._trees(branch)
        return open_line(
            self._store,
            self.session_id,
            branch=branch,
            tree=tree,
            # A branch signs its own streams, its log and the registry on the session's
            # shared ledger stream; the verifier reads every line (DESIGN, "Branches").
            signing_key=self._signing_key,
            checkpoint_every=self._checkpoint_every,
            **self._line_facts,
        )

    def _line(self, branch: str | None) -> SessionCore:
        """The core of ``branch`` (None: main), made on first use."""
        core = self._lines.get(branch)
        if core is None:
            core = self._lines[branch] = self._new_core(branch)
        return core

    def _point(self, branch: str | None) -> None:
        """Move the current-branch pointer (this object only; nothing is written)."""
        self._core = self._line(branch)
        self._branch = branch
        self.stream = self._core.facts.stream

    @property
    def _current_branch_id(self) -> str:
        """The current branch's name (``AdvancedSQLiteSession``'s attribute, read-only)."""
        return self.branch

    async def _current(self) -> SessionCore:
        """The current line, resolved before anything is awaited (a later switch does not
        redirect this call), then checked: a branch cleared meanwhile (by any object), or
        deleted and the session cleared since, moves this object to main, as the SDK
        does; one deleted (and no clear since) raises.

        Raises:
            BranchDeleted: The current branch was deleted.
        """
        core = self._core
        if core.facts.branch is None:
            return core
        ended = await core.ended()
        if ended is None:
            return core
        if ended == "cleared" or await core.cleared_since_end():
            if self._core is core:
                self._point(None)
            return self._line(None)
        raise BranchDeleted(self.session_id, core.facts.branch, ended)

    async def _retry_cleared(self, core: SessionCore, act: Callable[[SessionCore], Any]) -> Any:
        """Run ``act`` on ``core``; on main if that branch line ended meanwhile by a clear,
        or was deleted and the session cleared since (see :meth:`_current`)."""
        try:
            return await act(core)
        except BranchDeleted as error:
            if core.facts.branch is None:
                raise
            if error.reason != "cleared" and not await core.cleared_since_end():
                raise
            if self._core is core:
                self._point(None)
            if self._run_core is core:
                self._run_core = self._line(None)
            return await act(self._line(None))

    def _reading(self, branch_id: str | None) -> SessionCore | None:
        """The line ``branch_id`` names for a read (None: the current one); None when
        the name cannot be a branch of this session."""
        if branch_id is None:
            return self._core
        if branch_id == MAIN_BRANCH:
            return self._line(None)
        try:
            return self._line(branch_id)
        except InvalidInput:
            return None

    async def _read_line(self, branch_id: str | None, read: Callable[[SessionCore], Any]) -> Any:
        """``read`` on the line ``branch_id`` names; None for a branch never forked or
        deleted, the current one included (it reads as empty, as the SDK's does; a write
        there is refused)."""
        if branch_id is None:
            try:
                return await self._retry_cleared(self._core, read)
            except BranchDeleted:
                return None
        core = self._reading(branch_id)
        if core is None:
            return None
        try:
            return await read(core)
        except BranchDeleted:
            return None
        except InvalidInput:
            if core.facts.branch is None or core.reader.line_checked:
                raise
            self._lines.pop(core.facts.branch, None)  # never forked: keep no core for it
            return None

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
        self._check_open()
        if self._enforcer is None and self._gates is None:
            return agent
        return guarding.guard_graph(agent, self._wiring)

    async def mcp_tool_filter(self, context: Any, tool: Any) -> bool:
        """The policy's MCP gate: pass it as an MCP server's ``tool_filter``.

        ``MCPServerStdio(params, tool_filter=session.mcp_tool_filter)`` hides the
        server's tools whose scope the running agent does not hold. Without a
        policy every tool is offered.
        """
        self._check_open()
        if self._gates is None:
            return True
        return await self._gates.mcp_tool_filter(context, tool)

    def __repr__(self) -> str:
        line = "" if self._branch is None else f", branch={self._branch!r}"
        return f"JournalSession({self.session_id!r}{line}, stream={self.stream!r})"

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        """Close this session object; every later call on it raises ``RuntimeError``.

        The SDK's contract (``SQLiteSession.close()``: synchronous, idempotent, and
        ``add_items([])`` refused too); ``store_run_usage`` logs the error instead, as the
        SDK's does. Closing writes nothing: every write already landed or failed. What
        this object holds alone goes: a run it was recording is cut short there (its
        trace ends so marked, the model response it had not written yet — recorded with
        a run's next write — is not recorded, and the subagents it opened stay open until
        the session's next run closes them, as after a crash). The store and the cached
        reads of the session's lines belong to the :class:`~agentjournal.Journal` and stay
        open for its other session objects, on this session id too; close the journal to
        close them. ``async with journal.session(id) as session:`` closes it on exit.
        """
        if self._closed:
            return
        self._closed = True
        if self._run.trace is not None:
            self._run.trace.end("the session was closed during the run")

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")
        check_not_deciding(self._core.tree)

    async def __aenter__(self) -> JournalSession:
        self._check_open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # -- Session protocol -------------------------------------------------------

    async def get_items(
        self,
        limit: int | None = None,
        branch_id: str | None = None,
        *,
        wrapper: RunContextWrapper[Any] | None = None,
    ) -> list[TResponseInputItem]:
        """Return the latest ``limit`` items in chronological order.

        ``None`` falls back to ``session_settings.limit``, then to every item;
        ``0`` returns ``[]`` and a negative limit every item (the SDK's sessions keep
        SQLite's ``LIMIT -1``). Items are fresh copies, exactly as written, with
        the transcripts of subagents where the handoffs happened. ``branch_id``
        reads another line (``"main"`` or a branch's name) instead of the current
        one, as ``AdvancedSQLiteSession`` does: ``[]`` for a name never forked or
        a branch deleted (the current branch too, when another object deleted it).
        A run's own reads (with ``wrapper``) stay on the line the run started on.

        Raises:
            RuntimeError: The session is closed.
        """
        self._check_open()
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool)):
            raise InvalidInput(f"limit must be an integer or None, got {limit!r}")
        run_core = None
        if wrapper is not None:
            self._enter_run(wrapper, main=True)
            run_core = self._run_line(wrapper) if branch_id is None else None
        resolved = resolve_session_limit(limit, self.session_settings)
        if resolved == 0:
            return []
        if resolved is not None and resolved < 0:
            resolved = None
        if run_core is not None:
            # A run that starts on a line cleared meanwhile (by any object) goes on main.
            found: list[TResponseInputItem] = await self._retry_cleared(
                run_core, lambda line: line.items(resolved)
            )
            return found
        found = await self._read_line(branch_id, lambda core: core.items(resolved))
        return [] if found is None else found

    async def add_items(
        self, items: list[TResponseInputItem], *, wrapper: RunContextWrapper[Any] | None = None
    ) -> None:
        """Append ``items`` as one atomic write; all of them land or none.

        Raises:
            InvalidInput: An item is not a mapping; nothing was written.
            CodecError: An item cannot be stored exactly; nothing was written.
            RetriesExhausted: Other writers kept winning for every retry.
            StoreUnavailable: The store failed and the outcome could not be settled.
        """
        self._check_open()
        items = list(items)
        for at, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise InvalidInput(
                    f"item {at} is a {type(item).__name__}, not an SDK item (a mapping)"
                )
        if wrapper is not None:
            self._enter_run(wrapper, main=True)
        if items:
            await self._write(items, wrapper=wrapper)

    async def pop_item(
        self, *, wrapper: RunContextWrapper[Any] | None = None
    ) -> TResponseInputItem | None:
        """Hide the latest item and return it; ``None`` when there is none.

        The item stays on its stream; an ``agentjournal.ItemPopped`` event
        records that it left the history.
        """
        self._check_open()
        trace = self._recorder.trace_now()
        run_core = self._run_line(wrapper) if wrapper is not None else None
        core = run_core if run_core is not None else self._core
        return await self._retry_cleared(core, lambda line: line.pop(trace))  # type: ignore[no-any-return]

    async def clear_session(self, *, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Hide every item of every line; ``get_items`` returns ``[]`` until new items come.

        History is kept, in one atomic write: an ``agentjournal.SessionCleared`` event on
        the session's stream marks the cut, and every live branch ends with
        ``agentjournal.BranchDeleted`` (reason ``cleared``) and its registry entry, as
        ``AdvancedSQLiteSession`` deletes every branch's rows; a subagent open on such a
        branch is closed ``cancelled`` in that write. This object moves to
        main; another object on a cleared branch moves there at its next call. Branch
        names stay used.
        """
        self._check_open()
        trace = self._recorder.trace_now()
        await self._line(None).clear_lines(trace)
        self._point(None)

    # -- branches ---------------------------------------------------------------------------

    async def fork(
        self,
        at: int | None = None,
        *,
        turn: int | None = None,
        revision: int | None = None,
        name: str | None = None,
    ) -> Branch:
        """Fork this line (the session, or the branch this object is on): a new branch that
        continues it as of a cut; nothing is copied.

        The cut is before item ``at`` (a message index, as ``agentjournal show`` numbers
        items; on a branch, its prefix's items count), before turn ``turn``'s user message
        (the ``turn``-th user message of the items visible now), or after revision
        ``revision`` of the line's top stream; with none of them, after everything
        written so far. Open the new branch with ``journal.session(id, branch=name)``.
        The fork is one atomic write: ``agentjournal.BranchForked`` here,
        ``agentjournal.BranchStarted`` as the branch stream's first event, an entry in the
        session's branch registry, and for each subagent open at the cut an
        ``agentjournal.SubagentContinued`` opening the stream that continues it on the
        branch (the branch's runs resume, speak and close it there; this line keeps its
        own). A fork can be made at any moment, in the middle of a run too (from a tool).

        Args:
            at: The item before which the branch leaves the session.
            turn: The turn before whose user message it leaves.
            revision: The revision of the session's stream after which it leaves.
            name: The branch's name (any non-blank text up to 1,000 characters but
                ``"main"``); default ``fork_{value}_{unix seconds}`` (``_2``, ``_3``...
                when taken).

        Raises:
            InvalidInput: More than one cut, no such item, turn or revision, no session
                yet, a subagent open at the cut whose stream cannot be read, or a name
                refused or already used in this session (names are never reused, even
                after a branch is deleted).
            StoreError: The fork did not land.
        """
        self._check_open()
        trace = self._recorder.trace_now()
        branch: Branch = await self._retry_cleared(
            self._core,
            lambda core: core.fork(at=at, turn=turn, revision=revision, name=name, trace=trace),
        )
        return branch

    @property
    def branch(self) -> str:
        """The line this object reads and writes: ``"main"`` or a branch's name."""
        return MAIN_BRANCH if self._branch is None else self._branch

    async def branches(self) -> list[Branch]:
        """Every branch of the session, in the order they were forked (deleted ones too)."""
        self._check_open()
        return await self._core.branches()

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
        self._check_open()
        if not self._unchanged_storage():
            return None  # a subclass that transforms items must supply its own
        snapshot = await self._core.snapshot(limit)
        seen = snapshot.seen

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            expected = seen[start:]
            if not expected:
                return False
            return await self._core.replace_suffix(
                expected,
                list(output),
                prune_prefix,
                trace=self._recorder.trace_now(),
                speaker=self._run.speaker,
            )

        return _CompactionSnapshot(snapshot.items, snapshot.complete, replace_suffix)  # type: ignore[arg-type]

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
        self._check_open()
        if not self._unchanged_storage():
            return False
        await self._core.replace_all(
            list(items), trace=self._recorder.trace_now(), speaker=self._run.speaker
        )
        return True

    def _unchanged_storage(self) -> bool:
        """Whether reads and writes are this class's own (a subclass may transform items)."""
        kind = type(self)
        return kind.add_items is JournalSession.add_items and (
            kind.get_items is JournalSession.get_items
        )

    # -- subagents ----------------------------------------------------------------

    async def open_subagents(self) -> list[events.Subagent]:
        """Return the subagents that are open now, outermost first (read from the streams)."""
        self._check_open()
        return await self._core.open_subagents()

    async def close_subagents(self, *, outcome: str = "error", reason: str = "") -> int:
        """Close every open subagent with ``outcome`` and ``reason``; return how many.

        Use it when a run failed and will not be resumed (see also
        :meth:`run_scope`). Each ``SubagentCompleted`` goes to both of its
        streams, innermost first, in one atomic write.

        Raises:
            InvalidInput: ``outcome`` is not ``success``, ``error`` or ``cancelled``.
        """
        self._check_open()
        if outcome not in events.OUTCOMES:
            raise InvalidInput(f"outcome must be one of {events.OUTCOMES}, got {outcome!r}")
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
        self._check_open()
        try:
            yield self
        except BaseException as error:
            if self._closed:  # nothing more may be written through this object
                logger.warning(
                    "%s was closed during the run: its open subagents stay open until the "
                    "session's next run closes them",
                    self.stream,
                )
                raise
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
        if self._run.finished is not None and not self._closed:
            await self._write([], wrapper=None, closing=("success", ""))

    async def _write(
        self,
        items: list[Any],
        *,
        wrapper: RunContextWrapper[Any] | None,
        closing: tuple[str, str] | None = None,
    ) -> int:
        """One atomic write of ``items`` (and closings); return the subagents it closed."""
        run = self._run
        run_core = self._run_line(wrapper) if wrapper is not None else None
        if run_core is not None:
            core = run_core
        else:  # a closing after a failed run goes to the run's line
            core = self._acting() if closing is not None and not items else self._core
        trace = tracing.trace_metadata(self._trace_ids(wrapper))

        def add(line: SessionCore) -> Awaitable[ItemsPlan | None]:
            return line.add(
                items,
                run.view(wrapper),
                trace=trace,
                closing=closing,
                landed=lambda plan: self._landed(
                    run, plan, items=bool(items), closing=closing, line=line
                ),
                # Only a session that signs writes checkpoints: the others skip looking
                # up the trace ids a checkpoint would carry (a few µs a write).
                checkpoint_trace=(
                    self._recorder.trace_now() if line.signing_key is not None else None
                ),
            )

        plan = await self._retry_cleared(core, add)
        return plan.closed if plan is not None else 0

    def _landed(
        self,
        run: RunState,
        plan: ItemsPlan,
        *,
        items: bool,
        closing: tuple[str, str] | None,
        line: SessionCore,
    ) -> None:
        """A write landed (told before its checkpoint): what it carried is no longer pending."""
        run.written(plan, items=items, closing=closing is not None)
        run.landed(line.tree.responded)

    # -- runs and spans -------------------------------------------------------------

    def _enter_run(self, context: RunContextWrapper[Any], *, main: bool = False) -> None:
        """Notice a new run: every context of one run shares its ``usage`` object."""
        usage = getattr(context, "usage", None)
        if usage is None or self._run.is_run(usage):
            if main:
                self._run.main_context(context)
            return
        if self._run.trace is not None:
            self._run.trace.end("the run ended without finishing (error or interruption)")
        previous = self._run
        # A run stays on the line it started on: a switch meanwhile moves the pointer
        # for later calls, not the rest of this run (DESIGN, "Branches").
        self._run_core = self._core
        self._run = RunState(
            usage=weak(usage),
            wrapper=weak(context) if main else None,
            trace=tracing.RunTrace(self.session_id),
            speaker=self._agent_name,
        )
        self._run.carry(previous)
        if self._enforcer is not None:
            self._enforcer.new_run()
        if self._gates is not None:
            self._gates.new_run()

    def _run_line(self, wrapper: RunContextWrapper[Any] | None) -> SessionCore | None:
        """The line of the run ``wrapper`` belongs to, when it is the current run's."""
        if wrapper is None or self._run_core is None:
            return None
        return self._run_core if self._run.is_run(getattr(wrapper, "usage", None)) else None

    def _acting(self) -> SessionCore:
        """The line hook events go to: the current run's, else the current one."""
        return self._run_core if self._run_core is not None else self._core

    def _trace_ids(self, wrapper: RunContextWrapper[Any] | None) -> tracing.TraceIds | None:
        """The ids for events written now: the speaking agent's span, if this run has one."""
        run = self._run
        if run.trace is not None and run.view(wrapper).same_run(run.wrapper):
            return tracing.ids_of(run.trace.current)
        return tracing.current_ids()

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
        self._check_open()
        await self._core.reset_authority(agent, reason, self._recorder.trace_now())

    # -- people's ratings -------------------------------------------------------------

    async def score(
        self,
        turn: int,
        score: float,
        *,
        label: str | None = None,
        reason: str | None = None,
        by: str,
        id: str | None = None,
    ) -> bool:
        """Record a person's rating of turn ``turn`` of this line (the SDK's turn numbers:
        1 for the first user message) on the session's feedback run,
        ``EvalRun-feedback-{session_id}``: a ``TurnScored`` marked human, as an eval run
        writes it (DESIGN §20). Whether it was written: with ``id`` (the caller's
        rating id) a rating given again is recorded once.

        Args:
            turn: The turn rated.
            score: In [0, 1].
            label: A short word (default ``pass`` at 0.5 or more, else ``fail``).
            reason: Why.
            by: Who rates it.
            id: The caller's id of the rating (default: a new one each call).

        Raises:
            InvalidInput: No such turn on this line, a score outside [0, 1], a blank
                ``by``; nothing is written.
            StoreError: It did not land.
        """
        self._check_open()
        from agentjournal.sdk.feedback import rate_turn

        return await rate_turn(
            self._store,
            self.session_id,
            self.branch,
            turn,
            score,
            label=label,
            reason=reason,
            by=by,
            rating=id,
            sealer=self._core.facts.sealer,
            signing_key=self._signing_key,
        )

    # -- checkpoints ----------------------------------------------------------------

    async def checkpoint(self) -> Checkpoint | None:
        """Sign the heads of the session tree now (``agentjournal.Checkpoint``); None without a key.

        The session also checkpoints by itself at the end of each run and
        every ``checkpoint_every`` events it writes.

        Raises:
            StoreError: The checkpoint could not be written.
        """
        self._check_open()
        return await self._core.checkpoint(self._recorder.trace_now())


# -- helpers ----------------------------------------------------------------------


def _settings(value: SessionSettings | Mapping[str, Any] | None) -> SessionSettings:
    if value is None:
        return SessionSettings()
    if isinstance(value, Mapping):
        value = dict(value)
    return coerce_session_settings(value)  # the SDK's own rules and errors
