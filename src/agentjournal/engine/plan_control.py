"""Planning a write of one event that is no item (a decision, a refusal, a run's grant, a
pop, a clear), and the run's model responses that ride on every write (pure).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from agentjournal import events
from agentjournal.engine import stamps
from agentjournal.engine.plan import RunView, SessionFacts, WritePlan
from agentjournal.engine.plan_log import held_entries, log_request
from agentjournal.engine.sealing import Events, add_guard
from agentjournal.engine.timeline import TimelineEvent
from agentjournal.engine.tree import AuthorityLog, Commit, SessionTree


def add_responses(
    out: Events, tree: SessionTree, facts: SessionFacts, run: RunView
) -> tuple[uuid.UUID, ...]:
    """Add the run's responses not yet written, each to its agent's stream; their ids."""
    added: list[uuid.UUID] = []
    for response in run.responses:
        if response.id in tree.responded or response.id in added:
            continue  # it landed already (with an earlier write, or one whose answer was lost)
        stream = _response_stream(tree, facts.stream, response.agent, run)
        out.add(
            stream,
            events.MODEL_RESPONDED,
            response.data,
            dict(response.metadata),
            response.id,
            own_trace=True,
        )
        added.append(response.id)
    return tuple(added)


def _response_stream(tree: SessionTree, session_stream: str, agent: str, run: RunView) -> str:
    """The stream of the agent that called the model: the innermost open subagent it is,
    else (it speaks inside the chain this run wrote in) the innermost, else the session's."""
    for subagent in reversed(tree.chain):
        if subagent.agent_name == agent:
            return subagent.stream
    if tree.chain and run.same_run(tree.chain_run):
        return tree.chain[-1].stream
    return session_stream


def plan_control(
    tree: SessionTree,
    facts: SessionFacts,
    stream: str,
    type_: str,
    data: bytes,
    *,
    next_index: int,
    metadata: Mapping[str, str],
    entries: Sequence[TimelineEvent] = (),
    held: tuple[str, Any] | None = None,
    log: AuthorityLog | None = None,
    run: RunView | None = None,
    id_: uuid.UUID | None = None,
    guard: uuid.UUID | None = None,
) -> WritePlan:
    """One event that is no item, after ``stream``'s head (and ``run``'s responses not yet
    written, first); with ``held`` (agent, authority JSON: a run's grant) its authority
    log entry in the same transaction. ``id_``: the event's id (default a random one); a
    caller that derives it makes a retry after an unknown outcome recognisable.
    ``guard``: the id of an ``agentjournal.LineGuarded`` to write at the head of the
    line's top stream (``stream`` is then another one: a subagent's), the two naming
    each other, so the write also expects that head."""
    out = Events(tree, next_index, metadata, sealer=facts.sealer)
    responded = add_responses(out, tree, facts, run) if run is not None else ()
    # The control event's own metadata has no open child of another stream than its own.
    own: dict[str, str] = {} if guard is None else {events.TWIN_KEY: str(guard)}
    event = out.add(stream, type_, data, own, id_ if id_ is not None else stamps.random_id())
    if guard is not None:
        assert stream != facts.stream, "a guard is for a head the write has nothing else for"
        add_guard(out, facts.stream, guard, event.id, stream)
    authority: AuthorityLog | None = None
    if held is not None:
        assert log is not None, "a grant needs the authority log's head"
        entry = (held[0], held[1], "run", str(event.id), stream)
        appended, authority = log_request(facts, log, held_entries(facts, log, [entry]), metadata)
        out.add_log(appended, log, authority)
    requests = out.requests()
    heads, hashes = out.written()
    commit = Commit(
        heads=heads,
        hashes=hashes,
        entries=entries,
        written=sum(len(request.events) for request in requests),
        authority=authority,
        responded=responded,
    )
    return WritePlan(requests, commit)
