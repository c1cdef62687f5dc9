"""The lines of a session: forking a line into a branch, deleting a branch, clearing every
line at once (each one atomic write, with the closes of the subagents open on an ending line).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from agentjournal import events
from agentjournal.engine import stamps
from agentjournal.engine.checkpoints import Checkpoints
from agentjournal.engine.fork import (
    Branch,
    LineHead,
    line_end_id,
    line_end_reason,
    plan_fork,
    plan_line_ends,
    read_branches,
)
from agentjournal.engine.fork_cut import (
    cut_from_events,
    cut_from_model,
    log_place,
    opened_by,
    place,
)
from agentjournal.engine.items import NoRun, plan_innermost_control
from agentjournal.engine.line import Line
from agentjournal.engine.plan import ItemsPlan, SessionFacts, WritePlan
from agentjournal.engine.plan_items import plan_items
from agentjournal.engine.reader import Reader
from agentjournal.engine.timeline import Clear
from agentjournal.engine.tree import Commit, SessionTree, next_index_after
from agentjournal.errors import InvalidInput, StreamNotFound
from agentjournal.ledger.chain import HASH_KEY
from agentjournal.store.contract import RecordedEvent
from agentjournal.streams import (
    MAIN_BRANCH,
    branch_authority_stream,
    branch_stream,
    continuation_id,
    subsession_stream,
)


def _continuations(
    session_id: str,
    branch: str,
    chain: Sequence[RecordedEvent],
    originals: Sequence[tuple[events.Subagent, Any]],
) -> list[events.SubagentContinued]:
    """The continuation of each subagent open at a cut, outermost first (pure): a stream of
    its own on the branch (:func:`~agentjournal.streams.continuation_id`), whose parent is
    the branch's top stream or the continuation outside it, carrying the original's
    identity and grant and its last event before the cut."""
    continued: list[events.SubagentContinued] = []
    parent = branch
    for event, (subagent, grant) in zip(chain, originals, strict=True):
        agent_id = continuation_id(subagent.agent_name, branch, event.stream)
        stream = subsession_stream(session_id, agent_id)
        continued.append(
            events.SubagentContinued(
                agent_id=agent_id,
                agent_type=subagent.agent_name,
                source_agent=subagent.source_agent,
                call_id=subagent.call_id,
                subsession_stream=stream,
                parent_stream=parent,
                continues=place(event),
                granted_authority=grant,
            )
        )
        parent = stream
    return continued


async def _line_head(store: Any, line: Branch) -> LineHead | None:
    """A live branch line's head as a clear must name it (None: it has ended already)."""
    try:
        tail = await store.read(line.stream, backwards=True, limit=1)
    except StreamNotFound:
        return None
    if not tail or tail[0].type == events.BRANCH_DELETED:
        return None
    last = tail[0]
    found = next_index_after(last)
    revision = last.revision
    while found is None and revision > 0:  # a foreign event on top: scan back for one
        page = await store.read(line.stream, from_revision=revision - 1, backwards=True, limit=64)
        found = next((n for n in map(next_index_after, page) if n is not None), None)
        revision = page[-1].revision if page else 0
    return LineHead(
        line.name,
        line.stream,
        line.parent,
        last.revision,
        last.metadata.get(HASH_KEY, ""),
        found if found is not None else line.next_index,
        last.metadata.get(events.OPEN_KEY) or None,
    )


def plan_closes(
    tree: SessionTree,
    facts: SessionFacts,
    *,
    next_index: int,
    nonce: str,
    end: Any,
    reason: str,
    trace: Mapping[str, str],
) -> ItemsPlan | None:
    """The closes of every subagent open on a branch line that ends (None: none is open).

    Planned exactly as :meth:`~agentjournal.sdk.session.JournalSession.close_subagents`
    plans a run's (``plan_items`` with ``closing``): ``SubagentCompleted`` (``cancelled``)
    on the subsession and its parent stream, innermost first, each at its exact revision;
    every copy also carries ``aj.line_end`` = ``end``, the id of the ``BranchDeleted`` that
    follows on the line's top stream in the same write.
    """
    if not tree.chain:
        return None
    return plan_items(
        tree,
        facts,
        NoRun(),
        [],
        first_index=next_index,
        nonce=nonce,
        now=stamps.now(),
        trace={**trace, events.LINE_END_KEY: str(end)},
        closing=("cancelled", line_end_reason(facts.branch or MAIN_BRANCH, reason)),
    )


def _generated_names(base: str) -> Iterator[str]:
    """``base``, then ``base_2``, ``base_3``... (a generated branch name that is taken)."""
    yield base
    for number in itertools.count(2):
        yield f"{base}_{number}"


def _given_cut(at: int | None, turn: int | None, revision: int | None) -> list[tuple[str, int]]:
    """The cut a fork was given, as (kind, value): none, or one of ``index``, ``turn``,
    ``revision``.

    Raises:
        InvalidInput: More than one, or one that is not a whole number in range.
    """
    given = [(kind, value) for kind, value in (("index", at), ("turn", turn)) if value is not None]
    if revision is not None:
        given.append(("revision", revision))
    if len(given) > 1:
        raise InvalidInput("fork at one cut: give at most one of at, turn and revision")
    for kind, value in given:
        least = 1 if kind == "turn" else 0
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise InvalidInput(f"a fork's {kind} must be an integer >= {least}, got {value!r}")
    return given


async def fork(
    line: Line,
    checkpoints: Checkpoints,
    *,
    at: int | None = None,
    turn: int | None = None,
    revision: int | None = None,
    name: str | None = None,
    trace: Mapping[str, str],
    generated: str | None = None,
    used: Callable[[str], str] | None = None,
) -> Branch:
    """Fork this line: a new branch that continues it as of a cut.

    The cut is before item ``at``, before turn ``turn``'s user message (the
    ``turn``-th user message visible now), or after revision ``revision`` of the
    line's top stream; none of them: after its head. One atomic write
    (:func:`~agentjournal.engine.fork.plan_fork`); nothing is copied. A subagent
    open at the cut continues on the branch in a continuation stream of its own
    (``SubagentContinued``): the branch's runs speak, resume and close inside it
    while the parent line keeps its original.

    Args:
        at: An item's message index.
        turn: A turn number (from 1).
        revision: A revision of the line's top stream.
        name: The branch's name (any non-blank text up to 1,000 characters but
            ``"main"``); default ``fork_{value}_{unix seconds}``, then ``_2``, ``_3``...
        trace: The caller's trace ids.
        generated: The stem of a generated name instead of ``fork_{value}_{unix
            seconds}`` (``AdvancedSQLiteSession``'s ``branch_from_turn_{N}_{secs}``).
        used: The message for a name already used (default ours).

    Raises:
        InvalidInput: More than one cut; no such item, turn or revision; the session
            does not exist; a subagent open at the cut cannot be read; the name is
            refused or has been used in this session.
        StoreError: The fork did not land.
    """
    given = _given_cut(at, turn, revision)
    branch_name = line.facts.branch or MAIN_BRANCH
    explicit = branch_stream(line.facts.session_id, name) if name is not None else None
    tree = line.tree
    top = line.facts.stream
    nonce = stamps.next_nonce()
    async with tree.lock:
        await line.reader.refresh(0)
        line.check_live()
        if tree.heads.get(top, -1) < 0:
            if given and given[0][0] == "turn":  # the SDK's answer on an empty session
                raise InvalidInput(
                    f"Turn {given[0][1]} does not contain a user message in branch '{branch_name}'"
                )
            raise InvalidInput(f"{top} does not exist: there is nothing to fork")
        kind, value = given[0] if given else ("revision", tree.heads[top])
        # From the store's read model when it can say exactly (SQLite, current, the
        # cut in the line's own part, no subagent open and no authority log entry at
        # or after it, nothing since the cut hiding an item before it): then the
        # branch's model starts as a copy of the line's. Else the line's events.
        cut_at = await cut_from_model(line, kind, value, branch_name) or await cut_from_events(
            line, kind, value, branch_name
        )
        position, point, lines, copy, read = cut_at
        seen = dict(tree.heads)
        # Every subagent open at the cut continues on the branch.
        base = tuple(place(event) for event in (point.base, *point.chain))
        originals = [await opened_by(line, read, event.stream) for event in point.chain]
        prefix = {
            str(event.id)
            for recorded in read.values()
            for event in recorded
            if event.position < position
        }
        authority = await log_place(line, position, lines, prefix)
        cut = events.Cut(kind, value, position)
        store = line.store
        candidates = (
            iter([name])
            if name is not None
            else _generated_names(generated or f"fork_{value}_{stamps.unix_seconds()}")
        )
        chosen: list[str] = [next(candidates)]

        async def build() -> WritePlan:
            # A delete of this line may have landed since (the writer caught up).
            line.check_live()
            while True:
                stream = explicit or branch_stream(line.facts.session_id, chosen[0])
                if await store.head(stream) is None:
                    break
                if name is not None:
                    raise InvalidInput(
                        used(name)
                        if used is not None
                        else f"branch {name!r} has already been used in session "
                        f"{line.facts.session_id}: choose a new name"
                    )
                chosen[0] = next(candidates)
            registry = await line.registry_head()
            continued = _continuations(line.facts.session_id, stream, point.chain, originals)
            started = events.BranchStarted(
                session_id=line.facts.session_id,
                branch=chosen[0],
                branch_stream=stream,
                parent=branch_name,
                cut=cut,
                base=base,
                authority=authority,
                next_index=point.next_index,
                prefix_items=point.prefix_items,
                continuations={
                    event.stream: continuation.subsession_stream
                    for event, continuation in zip(point.chain, continued, strict=True)
                },
            )
            # The copy only if the line is still where the model was read (a retry
            # after another writer moved it plans none: the branch reads its events).
            still = copy is not None and tree.heads == seen
            return plan_fork(
                tree,
                line.facts,
                started,
                next_index=await line.reader.next_index(),
                registry=registry,
                nonce=nonce,
                trace=trace,
                continued=continued,
                copy=copy if still else None,
            )

        landed = await line.writer.write(build)
        assert landed is not None
        stream = landed.requests[1].stream
        first = await store.read(stream, limit=1)
        if checkpoints.key is not None:
            # Sign the fork at once, the branch's first event and each continuation's
            # with it (requests 1 and 3...: the registry's is 2): nothing else covers
            # them until the branch is written to.
            await checkpoints.maybe(
                force=True,
                trace=trace,
                extra={
                    request.stream: (0, request.events[0].metadata.get(HASH_KEY, ""))
                    for request in (landed.requests[1], *landed.requests[3:])
                },
            )
    return Branch(
        name=chosen[0],
        stream=stream,
        parent=branch_name,
        cut=cut,
        next_index=point.next_index,
        prefix_items=point.prefix_items,
        created=first[0].recorded_at,
    )


async def delete_line(
    line: Line, checkpoints: Checkpoints, parent: str, trace: Mapping[str, str]
) -> None:
    """End this branch line: ``agentjournal.BranchDeleted`` (reason ``deleted``) at its
    top stream's head and ``agentjournal.BranchRemoved`` on the registry, one atomic
    write, which first closes every subagent open on the line ``cancelled``
    (:func:`plan_closes`). It folds as a clear of every item; nothing is written to the
    line again.

    Raises:
        BranchDeleted: It was deleted or cleared already.
        StoreError: It did not land.
    """
    facts = line.facts
    assert facts.branch is not None, "the main line is never deleted"
    tree = line.tree
    nonce = stamps.next_nonce()

    async def build() -> WritePlan:
        await line.reader.refresh(0)
        line.check_live()
        next_index = await line.reader.next_index()
        # The subagents open on the line close ``cancelled`` in the same write: nothing
        # reads the line again, and a subsession left open would read as a handoff
        # that never ended.
        close = plan_closes(
            tree,
            facts,
            next_index=next_index,
            nonce=nonce,
            end=line_end_id(facts.session_id, nonce, 0),
            reason="deleted",
            trace=trace,
        )
        closed = close.commit if close is not None else Commit(heads={}, hashes={})
        head = LineHead(
            facts.branch or MAIN_BRANCH,
            tree.stream,
            parent,
            closed.heads.get(tree.stream, tree.heads[tree.stream]),
            closed.hashes.get(tree.stream, tree.hashes.get(tree.stream, "")),
            next_index,
        )
        requests, hashes = plan_line_ends(
            facts.session_id,
            [head],
            reason="deleted",
            registry=await line.registry_head(),
            nonce=nonce,
            trace=trace,
            closes=None if close is None else {tree.stream: close},
        )
        commit = Commit(
            heads={**closed.heads, tree.stream: head.revision + 1},
            hashes={**closed.hashes, tree.stream: hashes[tree.stream]},
            entries=[Clear(head.next_index - 1)],
            written=sum(len(request.events) for request in requests),
            chain=None if close is None else [],
        )
        return WritePlan(
            requests,
            commit,
            foreign=frozenset(r.stream for r in requests if r.stream != tree.stream),
        )

    async with tree.lock:
        if not tree.loaded:
            await line.reader.load(0)
        await line.writer.write(build)
        # Signed at once, the BranchDeleted and the registry's entry: no later write on
        # this line would cover them.
        await checkpoints.maybe(force=True, trace=trace)
        tree.ended("deleted")


async def clear_lines(line: Line, checkpoints: Checkpoints, trace: Mapping[str, str]) -> None:
    """Clear the session on every line, in one atomic write: ``SessionCleared`` on this
    (the main) line as :func:`~agentjournal.engine.items.clear` writes it,
    ``agentjournal.BranchDeleted`` (reason ``cleared``) on each live branch at its exact
    head, after the closes (``cancelled``) of the subagents open on it
    (:func:`_line_closes`), and their
    ``agentjournal.BranchRemoved`` registry entries. The branches are read as each plan
    is built; a racing write on any of those streams (a fork adds to the registry)
    conflicts and the whole clear is planned again, with them. Main's own open subagent
    stays open (the line goes on: the next run closes it).
    """
    tree = line.tree
    session_id = line.facts.session_id
    nonces: list[str] = []

    async def build() -> WritePlan | None:
        await line.reader.refresh(0)
        lines = [
            branch
            for branch in await read_branches(line.store, line.facts.session_id)
            if branch.deleted is None
        ]
        # Drawn only when a branch ends (once: a retry keeps its ids): a session without
        # branches uses up no nonce, so its later writes' ids stay what they were before
        # branches (tests/data/write_bytes.json).
        if lines and not nonces:
            nonces.append(stamps.next_nonce())
        nonce = nonces[0] if nonces else ""
        heads = [
            head
            for head in [await _line_head(line.store, branch) for branch in lines]
            if head is not None
        ]
        # Each line with a subagent open closes it ``cancelled`` in this same write, at
        # the revisions its own tree reads (a racing write conflicts: all is planned again).
        closes: dict[str, WritePlan] = {}
        for n, head in enumerate(heads):
            if head.open is None:
                continue
            ended_head, close = await _line_closes(line, head, nonce, n, trace)
            heads[n] = ended_head
            if close is not None:
                closes[head.stream] = close
        if tree.heads.get(tree.stream, -1) < 0:
            return None  # no session yet: no branch either
        through = await line.reader.next_index() - 1
        cleared = events.SessionCleared(through).encode()
        # The main line's clear is planned as a clear alone is (a random id, as before
        # branches: a session without branches writes the same bytes as it did). With a
        # subagent open it lands on the subagent's stream, which a fork of main does not
        # touch (its BranchForked goes on main's top stream, its entry in the registry,
        # which this write touches only when a branch ends): a guard at main's head makes
        # such a fork conflict, so the clear plans again and ends the new branch too.
        # (KurrentDB refuses a stream without events in a multi-stream append: the
        # expectation needs an event. Forks of a branch write at that branch's head,
        # which the clear ends when live; a branch that is not live cannot fork.)
        own = await plan_innermost_control(
            line, events.SESSION_CLEARED, cleared, trace, [Clear(through)], guarded=True
        )
        ends, hashes = plan_line_ends(
            session_id,
            heads,
            reason="cleared",
            registry=await line.registry_head(),
            nonce=nonce,
            trace=trace,
            closes=closes,
        )
        ended.clear()
        ended.update({head.stream: (head.revision + 1, hashes[head.stream]) for head in heads})
        ended_names[:] = [head.name for head in heads]
        return WritePlan(
            [*own.requests, *ends],
            own.commit,
            foreign=frozenset(request.stream for request in ends),
        )

    ended: dict[str, tuple[int, str]] = {}
    ended_names: list[str] = []
    async with tree.lock:
        if await line.writer.write(build) is not None:
            # Signed at once, each ended branch's BranchDeleted with main's clear, and
            # each ended line's authority log (a reset there is unsigned till now): no
            # later write on those lines would cover them.
            if checkpoints.key is not None:
                ended.update(await _log_heads(line, ended_names))
            await checkpoints.maybe(force=True, trace=trace, extra=ended)


async def _log_heads(line: Line, names: Sequence[str]) -> dict[str, tuple[int, str]]:
    """The heads (revision, ``aj.hash``) of the named branch lines' authority logs, for
    those that have one. Read after the lines ended: nothing writes on them again."""
    found: dict[str, tuple[int, str]] = {}
    for name in names:
        log = branch_authority_stream(line.facts.session_id, name)
        try:
            tail = await line.store.read(log, backwards=True, limit=1)
        except StreamNotFound:
            continue
        if tail:
            found[log] = (tail[0].revision, tail[0].metadata.get(HASH_KEY, ""))
    return found


async def _line_closes(
    line: Line, head: LineHead, nonce: str, n: int, trace: Mapping[str, str]
) -> tuple[LineHead, WritePlan | None]:
    """For a clear: the closes of the subagents open on another branch line (read into a
    tree of its own, as a session on that line reads it), and the line's head after
    them, where its ``BranchDeleted`` goes (the ``n``-th line this clear ends)."""
    session_id = line.facts.session_id
    facts = SessionFacts(session_id, head.stream, branch=head.name)
    tree = SessionTree(head.stream)
    reader = Reader(
        line.store,
        tree,
        session_id,
        use_model=False,
        branch=head.name,
        authority=facts.authority_stream,
    )
    await reader.load(0)
    # Everything of this line from this one read: a write that landed since the head
    # was read moves its revisions and next index together (the plan stays exact).
    next_index = await reader.next_index()
    close = plan_closes(
        tree,
        facts,
        next_index=next_index,
        nonce=nonce,
        end=line_end_id(session_id, nonce, n),
        reason="cleared",
        trace=trace,
    )
    if close is None:
        return head, None
    after = LineHead(
        head.name,
        head.stream,
        head.parent,
        close.commit.heads[head.stream],
        close.commit.hashes[head.stream],
        next_index,
    )
    return after, close
