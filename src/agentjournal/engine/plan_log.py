"""Planning the authority log's entries: what each agent holds after a write's grants, the
policy when it changed, a run's or a handoff's grant event, and a write of the log alone
(a reset) (pure).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from agentjournal import events
from agentjournal.authority import Authority
from agentjournal.engine import stamps
from agentjournal.engine.plan import Grant, SessionFacts, WritePlan
from agentjournal.engine.sealing import Events, add_guard, seal_event
from agentjournal.engine.tree import AuthorityLog, Commit, SessionTree
from agentjournal.store.contract import AppendRequest, NewEvent, StreamState


def plan_log(
    facts: SessionFacts,
    log: AuthorityLog,
    entries: list[tuple[str, bytes]],
    held: Mapping[str, Any],
    trace: Mapping[str, str],
    *,
    guard: tuple[SessionTree, int, uuid.UUID] | None = None,
) -> WritePlan:
    """Entries of the authority log alone (after the policy when it changed).

    ``guard``: (the line's tree, its next free index, an id): the write also puts an
    ``agentjournal.LineGuarded`` at the head of the line's top stream, naming the last
    entry (which names it back), so it expects that head: a reset on a branch, which a
    racing end of the line must conflict with."""
    twin = None if guard is None else guard[2]
    request, after = log_request(
        facts, log, [*_policy_entries(facts, log), *entries], trace, twin=twin
    )
    after = AuthorityLog(after.revision, after.hash, after.policy, dict(sorted(held.items())))
    if guard is None:
        commit = Commit(heads={}, hashes={}, written=len(request.events), authority=after)
        return WritePlan([request], commit)
    tree, next_index, guard_id = guard
    traced = {k: v for k, v in trace.items() if k in (events.TRACE_ID_KEY, events.SPAN_ID_KEY)}
    out = Events(tree, next_index, traced)
    add_guard(out, facts.stream, guard_id, request.events[-1].id, request.stream)
    heads, hashes = out.written()
    commit = Commit(heads=heads, hashes=hashes, written=len(request.events) + 1, authority=after)
    return WritePlan([request, *out.requests()], commit)


def _policy_entries(facts: SessionFacts, log: AuthorityLog) -> list[tuple[str, bytes]]:
    """``PolicyRecorded`` when the log's policy in force is not the session's."""
    policy = facts.policy
    assert policy is not None, "only a session with a policy writes the authority log"
    if log.policy == policy.digest:
        return []
    recorded = events.PolicyRecorded(policy.digest, policy.to_json())
    return [(events.POLICY_RECORDED, recorded.encode())]


def held_entries(
    facts: SessionFacts, log: AuthorityLog, grants: Sequence[tuple[str, Any, str, str, str]]
) -> list[tuple[str, bytes]]:
    """The policy when it changed, then an ``AuthorityHeld`` per grant (agent, authority
    JSON, cause, event id, event stream), each with what every agent holds after it."""
    assert facts.policy is not None
    held = dict(log.held)
    entries = _policy_entries(facts, log)
    for agent, authority, cause, event, stream in grants:
        held[agent] = authority
        entry = events.AuthorityHeld(
            agent, authority, cause, event, stream, facts.policy.digest, dict(sorted(held.items()))
        )
        entries.append((events.AUTHORITY_HELD, entry.encode()))
    return entries


def log_request(
    facts: SessionFacts,
    log: AuthorityLog,
    entries: Sequence[tuple[str, bytes]],
    trace: Mapping[str, str],
    *,
    twin: uuid.UUID | None = None,
) -> tuple[AppendRequest, AuthorityLog]:
    """Seal ``entries`` after the log's head: the request and the log after it lands.
    ``twin``: the last entry's ``aj.twin`` (the guard written with it)."""
    assert facts.policy is not None
    stream = facts.authority_stream
    prev = log.hash
    new: list[NewEvent] = []
    held: Mapping[str, Any] = log.held
    for offset, (type_, data) in enumerate(entries):
        metadata = {
            events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE,
            **{k: v for k, v in trace.items() if k in (events.TRACE_ID_KEY, events.SPAN_ID_KEY)},
        }
        if twin is not None and offset == len(entries) - 1:
            metadata[events.TWIN_KEY] = str(twin)
        id_ = stamps.random_id()
        prev = seal_event(stream, log.revision + 1 + offset, id_, type_, data, metadata, prev)
        new.append(NewEvent(type=type_, data=data, metadata=metadata, id=id_))
        body = json.loads(data)
        if isinstance(body.get("held"), dict):
            held = body["held"]
    expected = StreamState.NO_STREAM if log.revision < 0 else log.revision
    after = AuthorityLog(log.revision + len(new), prev, facts.policy.digest, held)
    return AppendRequest(stream, new, expected), after


def handoff_grant(grant: Grant) -> bytes:
    """``AuthorityGranted`` of a handoff that opened no subagent."""
    body = {
        "agent": grant.receiver,
        "authority": grant.authority.to_json(),
        "cause": "handoff",
        "sender": grant.sender,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def run_grant(agent: str, authority: Authority) -> bytes:
    """``AuthorityGranted`` of a run's first agent."""
    body = {"agent": agent, "authority": authority.to_json(), "cause": "run"}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
