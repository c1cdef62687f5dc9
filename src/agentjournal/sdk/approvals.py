"""Approvals on a journal session: the calls a run stops on, the person's answer, and the
resume of the paused run from the record, in any process.

Part of :class:`~agentjournal.sdk.session.JournalSession` (one object: it inherits
:class:`ApprovalsAPI`). The hooks note at each model response which function calls will
wait for a person (:func:`asks_of`); the write of such a call's item records the question
(``InterruptIssued``). :meth:`ApprovalsAPI.hold` stores the paused run,
:meth:`ApprovalsAPI.approve`/:meth:`ApprovalsAPI.reject` record the answer
(``InterruptResolved``), and :meth:`ApprovalsAPI.resume` applies every recorded answer to
the stored run and runs it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from agents import Runner
from agents.result import RunResult, RunResultBase, RunResultStreaming
from agents.run_state import RunState as SDKRunState
from agents.tool import FunctionTool
from agents.util._approvals import evaluate_needs_approval_setting, parse_function_tool_arguments

from agentjournal import events
from agentjournal.engine.approvals import (
    Approval,
    all_ran,
    already_resumed,
    recomputed_digests,
    waits_of,
)
from agentjournal.engine.core import SessionCore
from agentjournal.engine.plan import Ask
from agentjournal.errors import ApproverNotAllowed, InvalidInput
from agentjournal.ledger.approvals import check_answer

if TYPE_CHECKING:
    from agents.agent import Agent
    from agents.items import ModelResponse
    from agents.lifecycle import RunHooks
    from agents.run_context import RunContextWrapper
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from agentjournal.ledger.keys import SigningKey
    from agentjournal.sdk.gates import Gatekeeper
    from agentjournal.sdk.recorder import SessionRecorder


async def asks_of(
    context: RunContextWrapper[Any],
    agent: Agent[Any],
    response: ModelResponse,
    gates: Gatekeeper | None,
) -> list[Ask]:
    """The function calls of ``response`` the run will stop on for approval.

    A call asks when its tool's ``needs_approval`` is True, or a callable that returns
    True for the call's arguments (evaluated as the SDK does: with the run context, the
    parsed arguments and the call id; arguments it cannot parse always ask), and the run
    context holds no decision for the call yet (a resumed run's decided calls ask nothing).
    """
    tools = {tool.name: tool for tool in agent.tools if isinstance(tool, FunctionTool)}
    asks: list[Ask] = []
    for item in response.output:
        if getattr(item, "type", None) != "function_call":
            continue
        tool = tools.get(getattr(item, "name", ""))
        call_id, arguments = getattr(item, "call_id", None), getattr(item, "arguments", "")
        if tool is None or not isinstance(call_id, str) or not call_id:
            continue
        if context.is_tool_approved(tool.name, call_id) is not None:
            continue
        if not await _needs_approval(tool, context, arguments, call_id):
            continue
        held = (await gates.effective(agent.name)).to_json() if gates is not None else None
        asks.append(Ask(call_id, tool.name, arguments, agent.name, held))
    return asks


async def _needs_approval(
    tool: FunctionTool, context: RunContextWrapper[Any], arguments: str, call_id: str
) -> bool:
    setting = tool.needs_approval
    if isinstance(setting, bool):
        return setting
    parsed = parse_function_tool_arguments(arguments)
    if parsed is None:
        return True  # the SDK asks when a policy cannot inspect the arguments
    return await evaluate_needs_approval_setting(setting, context, parsed, call_id)


class _Session(Protocol):
    """What these methods use of the session they are part of."""

    _recorder: SessionRecorder
    _core: SessionCore

    def _check_open(self) -> None: ...
    async def _current(self) -> SessionCore: ...


class ApprovalsAPI:
    """Approvals on a journal session (mixed into
    :class:`~agentjournal.sdk.session.JournalSession`); see the module docs."""

    async def hold(self: _Session, result: RunResultBase) -> list[Approval]:
        """Store a run that stopped on approvals, so any process can resume it.

        Writes ``agentjournal.RunPaused`` (``result.to_state().to_string()``) on the
        line's top stream. The run must have been made with ``hooks=session``: its
        approvals are then on the record as ``InterruptIssued``.

        Returns:
            The approvals the run waits for.

        Raises:
            InvalidInput: The run did not stop on an approval asked on this line.
        """
        self._check_open()
        if not isinstance(result, RunResult | RunResultStreaming) or not result.interruptions:
            raise InvalidInput("the run did not stop on an approval: there is nothing to hold")
        core = await self._current()
        return await core.hold(
            result.to_state().to_string(),
            requests_of(result.interruptions),
            self._recorder.trace_now(),
        )

    async def pending_approvals(self: _Session) -> list[Approval]:
        """The approvals that wait for an answer on this session's line, oldest first.

        Those asked on the line's top stream and on the streams of its open subagents,
        not yet answered, whose call has not run.
        """
        self._check_open()
        core = await self._current()
        return [approval for approval in await core.approvals() if approval.pending]

    async def paused_approvals(self: _Session) -> list[Approval | None]:
        """The questions the newest paused run of this line waits for, answered or not, in
        the run's order (None for a request the record holds no question of); empty when
        no run was held (:meth:`hold`)."""
        self._check_open()
        core = await self._current()
        held = await core.paused()
        if held is None:
            return []
        return list(waits_of(held, await core.approvals(held.run.streams)))

    async def approve(
        self: _Session,
        request_id: str,
        *,
        by: str,
        reason: str = "",
        key: Ed25519PrivateKey | SigningKey | None = None,
    ) -> events.ApprovalDecided:
        """Approve a pending request: ``InterruptResolved`` (outcome ``approved``), naming
        the digest of the call's arguments; signed with ``key`` when given.

        Exactly one answer per request lands, whichever processes race to give one.

        Raises:
            InvalidInput: No pending request ``request_id``, or ``by`` is empty.
            AlreadyResolved: It was answered already (the error names who answered).
            ApproverNotAllowed: The policy names approvers for the tool and ``key`` is
                none of theirs (or no key was given); nothing is written.
        """
        return await ApprovalsAPI._resolve(self, request_id, True, by, reason, key)

    async def reject(
        self: _Session,
        request_id: str,
        *,
        by: str,
        reason: str = "",
        key: Ed25519PrivateKey | SigningKey | None = None,
    ) -> events.ApprovalDecided:
        """Reject a pending request: ``InterruptResolved`` (outcome ``rejected``); the
        resumed run gives the model the SDK's rejection message instead of running the tool.
        Signed with ``key`` when given, as :meth:`approve`.

        Raises:
            InvalidInput: No pending request ``request_id``, or ``by`` is empty.
            AlreadyResolved: It was answered already (the error names who answered).
            ApproverNotAllowed: As :meth:`approve`.
        """
        return await ApprovalsAPI._resolve(self, request_id, False, by, reason, key)

    async def _resolve(
        self: _Session,
        request_id: str,
        approve: bool,
        by: str,
        reason: str,
        key: Ed25519PrivateKey | SigningKey | None,
    ) -> events.ApprovalDecided:
        self._check_open()
        core = await self._current()
        return await core.resolve(
            request_id,
            approve=approve,
            by=by,
            reason=reason,
            trace=self._recorder.trace_now(),
            key=key,
        )

    async def resumable(
        self: _Session, agent: Agent[Any], *, retake: bool = False
    ) -> SDKRunState[Any, Any]:
        """Take up the newest paused run of this line, loaded for ``agent`` with every
        recorded answer applied: pass it to ``Runner.run`` or ``Runner.run_streamed``
        (with ``session=`` and ``hooks=`` this session).

        Taking it up writes ``agentjournal.RunResumed`` first, so of two processes
        resuming one paused run exactly one gets its state; the other is refused.

        Args:
            agent: The agent graph the run was made with.
            retake: Take up a run that was taken up before and whose calls have not all
                run (its taker stopped). Its tools may have run in part: check first.

        Raises:
            InvalidInput: No run was held on this line, or a request it waits for has no
                answer yet.
            AlreadyResumed: It was taken up already (and ``retake`` is False), or its
                calls have run.
            ApproverNotAllowed: A recorded answer does not count (fail closed): it is for
                other arguments than its question's, its signature does not verify, or this
                session's policy or one the session recorded names approvers for the tool
                and none of them signed it (a recorded policy that does not read refuses
                too, with ``InvalidInput``).
        """
        self._check_open()
        core = await self._current()
        held = await core.paused()
        if held is None:
            raise InvalidInput(f"no paused run on {core.facts.stream}: hold(result) first")
        asked = await core.approvals(held.run.streams)
        ran = all_ran(held, asked)
        if ran or (held.taken and not retake):
            raise already_resumed(core.facts.stream, held, ran=ran)
        waits = waits_of(held, asked)
        undecided = [r for r, a in zip(held.run.request_ids, waits, strict=True) if not _decided(a)]
        if undecided:
            raise InvalidInput(
                f"approval requests {', '.join(map(repr, undecided))} have no answer yet"
            )
        by_request = {a.request_id: a for a in waits if a is not None}
        policies = await core.policies()  # this session's and every one it recorded
        for approval in by_request.values():
            if approval.decision is None or approval.ran:
                continue
            asked_digest, reason_digest = recomputed_digests(
                core.facts.sealer, approval, approval.decision
            )
            checked = check_answer(
                policies,
                approval.decision,
                session_id=core.facts.session_id,
                stream=approval.stream,
                tool_name=approval.tool_name,
                asked_digest=asked_digest,
                reason_digest=reason_digest,
            )
            if checked.problem is not None:
                raise ApproverNotAllowed(approval.request_id, approval.tool_name, checked.problem)
        try:
            state: SDKRunState[Any, Any] = await SDKRunState.from_string(agent, held.run.state)
        except Exception as error:  # the SDK's UserError, or ValueError/KeyError on its JSON
            raise InvalidInput(
                f"the paused run on {core.facts.stream} cannot be loaded into agent "
                f"{agent.name!r} (pass the graph it was made with): {error}"
            ) from error
        for item in state.get_interruptions():
            found = by_request.get(_call_id(item) or "")
            if found is None or found.decision is None or found.ran:
                continue
            if found.decision.outcome == "approved":
                state.approve(item)
            else:
                state.reject(item)
        await core.take(held, retake=retake, holder=_holder(), trace=self._recorder.trace_now())
        return state

    async def resume(
        self: _Session,
        agent: Agent[Any],
        *,
        hooks: RunHooks[Any] | None = None,
        retake: bool = False,
        **options: Any,
    ) -> RunResult:
        """Resume the newest paused run of this line with every recorded answer:
        ``Runner.run(agent, state, session=self, hooks=hooks or self, **options)``.

        The run is taken up first (``agentjournal.RunResumed``): of two processes that
        resume it, one runs it and the other is refused, and a run once taken up is not
        resumed again unless a person retakes it. A crash after an answer and before the
        resume leaves the answer on the record and the call not run: the next resume
        runs it once.

        Raises:
            InvalidInput, AlreadyResumed: As :meth:`resumable`.
        """
        state = await ApprovalsAPI.resumable(self, agent, retake=retake)
        return await Runner.run(
            agent,
            state,
            session=self,  # type: ignore[arg-type]
            hooks=hooks if hooks is not None else self,  # type: ignore[arg-type]
            **options,
        )


def _holder() -> str:
    """Who takes a paused run up: this process, as ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _decided(approval: Approval | None) -> bool:
    return approval is not None and (approval.decision is not None or approval.ran)


def _call_id(item: Any) -> str | None:
    """The call id of an SDK ``ToolApprovalItem`` (None: not a function call's)."""
    raw = getattr(item, "raw_item", None)
    found = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return found if isinstance(found, str) and found else None


def requests_of(interruptions: Sequence[Any]) -> list[str]:
    """The call ids of a run's interruptions (those that are function calls)."""
    return [r for r in map(_call_id, interruptions) if r is not None]
