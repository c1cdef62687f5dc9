"""One invocation: a manifest's agent on the journal session of ``thread_id``.

Everything a run records comes from the session (``Journal.open(uri).session(thread_id,
guardrails=...)``, passed as the SDK's session and hooks, and ``session.guard(agent)``):
history, handoffs as subagents, guardrail decisions, the ledger, spans. This module adds
what the seed's contract needs around it: the manifests as SDK agents, ``system::handoff``
(:mod:`agentjournal.runner.handoff`), the thread state (:mod:`agentjournal.runner.state`),
the trace context of the input, and the one output object.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from agents import RunConfig, Runner
from agents.exceptions import AgentsException, MaxTurnsExceeded, UserError
from agents.testing import ModelScriptError
from opentelemetry import trace

from agentjournal.errors import (
    AuthorityDenied,
    GuardrailBlocked,
    InvalidInput,
    JournalError,
    StoreError,
)
from agentjournal.journal import Journal
from agentjournal.runner import toolkit
from agentjournal.runner.agents import manifest_desk
from agentjournal.runner.contract import (
    ApprovalAsked,
    ErrorInfo,
    HandoffRecord,
    InvocationInput,
    InvocationOutput,
    TraceOut,
)
from agentjournal.runner.manifest import Catalog, Manifest
from agentjournal.runner.state import (
    THREAD_STATE,
    load_state,
    merge_state,
    session_started,
    state_event,
)
from agentjournal.sdk import tracing
from agentjournal.sdk.trace_context import continue_trace

if TYPE_CHECKING:
    from agentjournal.engine.approvals import Approval
    from agentjournal.runner.script import ModelScript
    from agentjournal.runner.tools import Registry
    from agentjournal.sdk.session import JournalSession

logger = logging.getLogger("agentjournal.runner")

EXIT_CODES: Final = {"completed": 0, "invalid": 1, "blocked": 2, "failed": 3, "interrupted": 4}
"""Process exit codes: completed 0; invalid input, manifests, tools or options 1 (nothing
was run or written); blocked by a guardrail or the authority policy 2; failed 3;
interrupted 4 (tool calls wait for a person's approval; the run is held)."""


class ApprovalsRefused(InvalidInput):
    """Raised when an input's ``approvals`` do not answer exactly the calls the thread's
    held run waits for; nothing was written."""


MAX_TURNS: Final = 10


@dataclass(frozen=True)
class Invocation:
    """What is fixed before stdin is read: the manifests, the tools, the models, the store.

    Attributes:
        catalog: The manifests.
        registry: The tool implementations (every declared tool is bound).
        agent: The reference of the agent to run (``ID`` or ``ID@VERSION``).
        uri: The journal's store.
        guardrails: The guardrail service's URL, if any.
        script: The scripted models, else each manifest's ``model.name`` on OpenAI.
    """

    catalog: Catalog
    registry: Registry
    agent: str
    uri: str | None
    guardrails: str | None
    script: ModelScript | None


def hardcoded_ids(catalog: Catalog) -> list[tuple[Manifest, str]]:
    """Manifests whose instructions name another agent's id (the seed's anti-pattern)."""
    found: list[tuple[Manifest, str]] = []
    for manifest in catalog:
        for other in catalog.ids():
            if other != manifest.id and other in manifest.instructions:
                found.append((manifest, other))
    return found


async def invoke(setup: Invocation, request: InvocationInput) -> InvocationOutput:
    """Run one invocation; return the output object (never raises for a run's failure).

    Raises:
        StoreError: The store could not be opened or read before the run started.
    """
    first = setup.catalog.resolve(setup.agent)
    traceparent, tracestate = request.trace.header()
    _, parent_span_id = request.trace.ids()
    with continue_trace(traceparent, tracestate):
        root = tracing.start_span(
            "agentjournal.invocation",
            attributes={"thread_id": request.thread_id, "run_id": request.run_id},
            kind=trace.SpanKind.SERVER,
        )
        ids = tracing.ids_of(root)
        trace_out = TraceOut(
            trace_id=ids.trace_id, span_id=ids.span_id, parent_span_id=parent_span_id
        )
        token = toolkit.set_config(request.config)
        try:
            with trace.use_span(root, end_on_exit=False):
                output = await _run(setup, request, first, trace_out)
        except BaseException as error:
            tracing.end_span(root, error)
            raise
        finally:
            toolkit.reset_config(token)
        ended = output.status in ("completed", "interrupted")
        tracing.end_span(root, None if ended else output.status)
    return output


async def _run(
    setup: Invocation, request: InvocationInput, first: Manifest, trace_out: TraceOut
) -> InvocationOutput:
    log = {"thread_id": request.thread_id, "run_id": request.run_id}
    logger.info("invocation started: agent %s", first.key, extra=log)
    async with Journal.open(setup.uri) as journal:
        state = merge_state(await load_state(journal.store, request.thread_id), request.state)
        desk = manifest_desk(setup.catalog, setup.registry, setup.script, state)
        resolve = desk.resolve
        session = journal.session(
            request.thread_id,
            guardrails=setup.guardrails,
            app_name="agentjournal-runner",
            agent_name=first.id,
        )
        config = RunConfig(
            tracing_disabled=True,  # the spans are OpenTelemetry's (agentjournal.*)
            tool_not_found_behavior="return_error_to_model",  # an unknown name never crashes
        )
        status, response, error = "completed", None, None
        final_agent: str | None = first.id
        waiting: list[Approval] = []
        resuming = (
            await _answered(journal, session, request) if request.input_message is None else None
        )
        try:
            async with session.run_scope():
                if resuming is not None:
                    for answer in request.approvals:
                        decide = session.approve if answer.approve else session.reject
                        await decide(answer.request_id, by=answer.by, reason=answer.reason)
                    result = await session.resume(
                        session.guard(resolve(resuming)), run_config=config, max_turns=MAX_TURNS
                    )
                else:
                    assert request.input_message is not None  # the contract's rule
                    result = await Runner.run(
                        session.guard(resolve(first.id)),
                        request.input_message.content,
                        session=session,
                        hooks=session,
                        run_config=config,
                        max_turns=MAX_TURNS,
                    )
                if result.interruptions:
                    waiting = await session.hold(result)
            final_agent = result.last_agent.name
            if waiting:
                status = "interrupted"
            else:
                final = result.final_output
                response = final if isinstance(final, str) else str(final)
        except GuardrailBlocked as blocked:
            status = "blocked"
            error = _error(
                blocked.reason_code or "GUARDRAIL_BLOCKED",
                f"the guardrail blocked {blocked.action_type}: "
                f"{blocked.reason_message or 'no reason given'}",
            )
        except AuthorityDenied as denied:
            status, error = "blocked", _error("AUTHORITY_DENIED", str(denied))
        except MaxTurnsExceeded:
            status = "failed"
            error = ErrorInfo(code="MAX_TURNS", message=f"no final answer within {MAX_TURNS} turns")
        except (ModelScriptError, AgentsException) as failed:
            status = "failed"
            # A bound tool's body never raises (its failure is an error output the model
            # sees); what still ends a run "running a tool" is the SDK's wrapper of any other
            # tool error (run_internal/tool_execution.py: UserError "Error running tool ...").
            tool = isinstance(failed, UserError) and str(failed).startswith("Error running tool ")
            error = _error("TOOL_ERROR" if tool else "MODEL_ERROR", failed)
        except JournalError as failed:
            status, error = "failed", _error("JOURNAL_ERROR", failed)
        except Exception as failed:  # the provider or anything else: the contract still answers
            status, error = "failed", _error("RUN_ERROR", failed)
        if status not in ("completed", "interrupted") and desk.taken:
            final_agent = desk.taken[-1].target
        for taken in desk.taken:
            logger.info(
                "handoff %s -> %s (call %s)", taken.sender, taken.target, taken.call_id, extra=log
            )
        try:
            # A run that wrote nothing on a new thread (its first write failed) leaves no
            # session; a ThreadState would start one without SessionStarted.
            if await session_started(journal.store, request.thread_id):
                await session.append_event(
                    THREAD_STATE,
                    state_event(state, run_id=request.run_id, agent_id=final_agent, status=status),
                )
                # The run signed its heads when it ended; the state came after: sign again
                # (nothing happens without a signing key).
                await session.checkpoint()
            else:
                logger.warning("nothing was written: the thread's state is not stored", extra=log)
        except StoreError as failed:
            status, response = "failed", None
            error = _error("STATE_NOT_RECORDED", failed)
    logger.info("invocation %s: final agent %s", status, final_agent, extra=log)
    return InvocationOutput(
        thread_id=request.thread_id,
        run_id=request.run_id,
        status=status,  # type: ignore[arg-type]
        response=response if status == "completed" else None,
        agent_id=final_agent,
        state=state,
        handoffs=[
            HandoffRecord.model_validate(
                {
                    "from": taken.sender,
                    "to": taken.target,
                    "input": taken.input,
                    "call_id": taken.call_id,
                }
            )
            for taken in desk.taken
        ],
        approvals=[
            ApprovalAsked(
                request_id=a.request_id, tool=a.tool_name, arguments=a.arguments, agent=a.agent
            )
            for a in waiting
        ]
        if status == "interrupted"
        else [],
        trace=trace_out,
        error=error,
    )


async def _answered(journal: Journal, session: JournalSession, request: InvocationInput) -> str:
    """Check the input's answers against the calls the thread waits for (before anything
    is written); the agent whose held run resumes. Without answers, every call the held
    run waits for must be answered on the record already.

    Raises:
        ApprovalsRefused: The thread waits for nothing, an answer names a call that does
            not wait, or a waiting call has no answer.
    """
    thread = request.thread_id
    if not await session_started(journal.store, thread):
        raise ApprovalsRefused(f"approvals: thread {thread!r} has no run that waits for approval")
    pending = {a.request_id: a for a in await session.pending_approvals()}
    if not request.approvals:  # the answers are on the record already
        if pending:
            raise ApprovalsRefused(
                f"approvals: request {next(iter(pending))!r} waits for an answer: give "
                "approvals, or answer it first (agentjournal approve/reject)"
            )
        answered = [
            a
            for a in await session.paused_approvals()
            if a is not None and a.decision is not None and not a.ran
        ]
        if not answered:
            raise ApprovalsRefused(
                f"approvals: thread {thread!r} has no held run with answered calls to resume"
            )
        return _one_agent(answered)
    for answer in request.approvals:
        if answer.request_id not in pending:
            raise ApprovalsRefused(
                f"approvals: request {answer.request_id!r} does not wait for an answer on "
                f"thread {thread!r} (unknown, or answered already); waiting: "
                + (", ".join(map(repr, pending)) or "none")
            )
    given = {answer.request_id for answer in request.approvals}
    missing = [r for r in pending if r not in given]
    if missing:
        raise ApprovalsRefused(
            f"approvals: request {missing[0]!r} waits for an answer too: answer every "
            "waiting call of the thread in one invocation"
        )
    return _one_agent(list(pending.values()))


def _one_agent(approvals: list[Approval]) -> str:
    """The one agent that asked ``approvals`` (whose held run resumes)."""
    agents = {a.agent for a in approvals}
    if len(agents) != 1:
        raise ApprovalsRefused(
            f"approvals: the waiting calls are of several agents ({', '.join(sorted(agents))})"
        )
    return agents.pop()


def _error(code: str, problem: BaseException | str) -> ErrorInfo:
    """The output's error, its message scrubbed of config values (one line)."""
    scrubber = toolkit.scrubber()
    if isinstance(problem, BaseException):
        return ErrorInfo(code=code, message=scrubber.error_line(problem))
    return ErrorInfo(code=code, message=scrubber.scrub(" ".join(scrubber.scrub(problem).split())))
