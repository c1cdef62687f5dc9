"""Decisions, refusals and grants written on a line, and resets of its authority log."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import Any

from agentjournal import events
from agentjournal.authority import Authority
from agentjournal.engine import stamps
from agentjournal.engine.line import Line
from agentjournal.engine.plan import RunView, WritePlan
from agentjournal.engine.plan_control import plan_control
from agentjournal.engine.plan_log import plan_log, run_grant
from agentjournal.engine.tree import SessionTree
from agentjournal.errors import InvalidInput
from agentjournal.ledger import redaction

logger = logging.getLogger("agentjournal.engine")


async def record(
    line: Line,
    type_: str,
    data: bytes,
    *,
    agent: str,
    run: RunView,
    metadata: Mapping[str, str],
    held: tuple[str, Any] | None = None,
) -> None:
    """Append a decision, refusal or grant to the stream of the agent acting in ``run``.

    That is the innermost open subsession when this run wrote inside it or
    ``agent`` is its agent (a resumed run), else the session stream (a new
    run's first agent speaks there). ``held`` (agent, authority JSON) adds the
    grant's entry to the authority log in the same transaction, and the run's
    model responses not yet written go first in it. With
    ``record_payloads`` off, a decision or refusal is written as its redacted
    view (``aj.viewed``).

    Raises:
        StoreError: It did not land.
    """
    tree = line.tree
    extra = dict(metadata)
    if not line.facts.record_payloads:
        shown = redaction.view(type_, data, extra)
        if shown is not None:
            data = json.dumps(shown, ensure_ascii=False, separators=(",", ":")).encode()
            extra[events.VIEWED_KEY] = "1"

    async def build() -> WritePlan:
        line.check_live()
        inner = tree.chain and (run.same_run(tree.chain_run) or tree.chain[-1].agent_name == agent)
        stream = tree.chain[-1].stream if inner else tree.stream
        log = await line.reader.authority_log() if held is not None else None
        return plan_control(
            tree,
            line.facts,
            stream,
            type_,
            data,
            next_index=await line.reader.next_index(),
            metadata=extra,
            held=held,
            log=log,
            run=run,
        )

    async with tree.lock:
        if not tree.loaded:
            await line.reader.load(0)
        await line.writer.write(build)


async def record_grant(
    line: Line, agent: str, authority: Authority, run: RunView, trace: Mapping[str, str]
) -> None:
    """Append ``agentjournal.AuthorityGranted`` (what a run's first agent holds) and its
    entry on the authority log, in one transaction."""
    await record(
        line,
        events.AUTHORITY_GRANTED,
        run_grant(agent, authority),
        agent=agent,
        run=run,
        metadata=trace,
        held=(agent, authority.to_json()),
    )


async def reset_authority(line: Line, agent: str, reason: str, trace: Mapping[str, str]) -> None:
    """Record ``agentjournal.AuthorityReset``: ``agent``'s next run starts from its policy
    entry again.

    Raises:
        InvalidInput: The session has no policy, or ``reason`` is empty.
    """
    policy = line.facts.policy
    if policy is None:
        raise InvalidInput(
            f"{line.facts.session_id!r} has no policy: there is no authority to reset"
        )
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("reset_authority needs a reason (it is recorded for auditors)")

    branch = line.facts.branch is not None

    async def build() -> WritePlan:
        guard: tuple[SessionTree, int, uuid.UUID] | None = None
        if branch:
            # A deleted branch acts no more: nothing to reset (its writes are refused
            # too). Checked in every plan, and the write expects the line's head (a
            # guard there: the log's append alone does not), so an end landing between
            # this check and the write conflicts, and the next plan refuses. Main is
            # never deleted, so its reset reads no history and needs no guard.
            await line.reader.refresh(0)
            line.check_live()
            guard = (line.tree, await line.reader.next_index(), stamps.random_id())
        log = await line.reader.authority_log(fresh=True)
        held = {name: value for name, value in log.held.items() if name != agent}
        reset = events.AuthorityReset(agent, reason, policy.digest, held)
        return plan_log(
            line.facts,
            log,
            [(events.AUTHORITY_RESET, reset.encode())],
            held,
            trace,
            guard=guard,
        )

    async with line.tree.lock:
        await line.writer.write(build)
    logger.info("authority of %r reset in %s: %s", agent, line.facts.session_id, reason)
