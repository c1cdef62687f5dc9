"""Reading a session tree from a store: the one place that finds a tree's streams.

:func:`walk_tree` reads the streams under a root level by level (a session, a branch's
top stream); :func:`read_tree` reads every line of a session into
:class:`~agentjournal.records.TreeRecords`, each event decoded once, with its chain
position. The bundle exporter, the read tools and the session's full reads come
through here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping, Sequence

from agentjournal import events
from agentjournal.errors import CodecError, InvalidInput, StreamNotFound, UndecodableEvent
from agentjournal.records import DamagedEvent, Record, TreeRecords, opened_stream
from agentjournal.store.abilities import abilities_of
from agentjournal.store.contract import EventStore, RecordedEvent
from agentjournal.streams import (
    KEYS_STREAM,
    authority_stream,
    branch_authority_stream,
    branch_stream,
    branches_stream,
    ledger_stream,
    session_stream,
    subsession_stream,
    validate_id,
)

__all__ = ["read_tree", "walk_line", "walk_tree"]

logger = logging.getLogger("agentjournal.walk")


async def walk_tree(
    store: EventStore,
    root: str,
    *,
    limits: Mapping[str, int] | None = None,
    read: Mapping[str, list[RecordedEvent]] | None = None,
) -> AsyncIterator[tuple[str, list[RecordedEvent]]]:
    """Every stream of the tree under ``root``, level by level.

    The root first, then the subsessions its ``SubagentStarted`` events name (in
    stream order), then theirs, and so on; the streams of one level are read
    concurrently. ``limits`` caps a
    stream at a revision (nothing past what a caller has seen), ``read`` gives
    whole streams already read. A subsession that does not exist is skipped with
    a warning (a verifier reports it from the records).

    Raises:
        StreamNotFound: ``root`` does not exist.
        UndecodableEvent: The store holds an event of the tree it cannot hand out.
        StoreUnavailable: The store could not be read.
    """
    limits = limits or {}
    read = read or {}
    batched = abilities_of(store).batched

    async def whole(stream: str) -> list[RecordedEvent] | None:
        if stream in read:
            return read[stream]
        try:
            if stream in limits:
                return await store.read(stream, limit=limits[stream] + 1)
            return await store.read(stream)
        except StreamNotFound:
            if stream == root:
                raise
            logger.warning("subsession stream %s is missing; it is left out", stream)
            return None

    async def level_of(streams: list[str]) -> list[list[RecordedEvent] | None]:
        if batched is not None and len(streams) > 1:
            # A store that reads many streams in one trip (SQLite: to its thread): one hop
            # per level instead of one per subsession.
            wanted = [s for s in streams if s not in read]
            answers = dict(
                zip(
                    wanted,
                    await batched.read_streams(
                        [(s, limits[s] + 1 if s in limits else None) for s in wanted]
                    ),
                    strict=True,
                )
            )
            found: list[list[RecordedEvent] | None] = []
            for stream in streams:
                events_of = read[stream] if stream in read else answers[stream]
                if events_of is None:
                    if stream == root:
                        raise StreamNotFound(stream)
                    logger.warning("subsession stream %s is missing; it is left out", stream)
                found.append(events_of)
            return found
        tasks = [asyncio.ensure_future(whole(stream)) for stream in streams]
        try:
            return list(await asyncio.gather(*tasks))
        finally:  # one failed read cancels its siblings: nobody reads for a caller that left
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    seen = {root}
    level = [root]
    while level:
        found = await level_of(level)
        following: list[str] = []
        for stream, recorded in zip(level, found, strict=True):
            if recorded is None:
                continue
            yield stream, recorded
            for event in recorded:
                child = opened_stream(event)
                if child is not None and child not in seen:
                    seen.add(child)
                    following.append(child)
        level = following


async def read_tree(store: EventStore, session_id: str) -> TreeRecords:
    """Read a session tree into records (see the module docs), every line of it.

    The checkpoints are read first, then the branch registry: a session written
    meanwhile then only adds events no checkpoint names, never a checkpoint naming
    events the read lacks. A branch is found from its registry entry and from its
    ``BranchForked`` marker on its parent line (so a fork that lands during the read, or
    a registry that lost an entry, is still read); only streams named like a branch of
    this session are followed. A branch stream that does not exist is left out with a
    warning: the verifier reports the fork that names it.

    Raises:
        InvalidInput: The session id is malformed, or the session does not exist.
        DamagedEvent: A stored event cannot be read as any event agentjournal writes can.
        StoreUnavailable: The store could not be read.
    """
    session_id = validate_id(session_id, "session id")
    checkpoints = await _read(store, ledger_stream(session_id))
    registry = await _read(store, branches_stream(session_id))
    streams: dict[str, Sequence[Record]] = {}
    try:
        async for stream, recorded in walk_tree(store, session_stream(session_id)):
            streams[stream] = [Record.of(event) for event in recorded]
    except StreamNotFound:
        raise InvalidInput(f"session {session_id!r} does not exist") from None
    except UndecodableEvent as error:  # e.g. a SQLite text column that is not UTF-8
        raise DamagedEvent(error.stream, None, f"cannot be read: {error}") from None
    line_logs = await _read_lines(store, session_id, registry, streams)
    for stream, recorded in (
        (authority_stream(session_id), await _read(store, authority_stream(session_id))),
        *[(log, await _read(store, log)) for log in line_logs],
        (branches_stream(session_id), registry),
        (ledger_stream(session_id), checkpoints),
        (KEYS_STREAM, await _read(store, KEYS_STREAM)),
    ):
        if recorded:
            streams[stream] = [Record.of(event) for event in recorded]
    return TreeRecords(session_id, streams)


async def _read_lines(
    store: EventStore,
    session_id: str,
    registry: list[RecordedEvent],
    streams: dict[str, Sequence[Record]],
) -> list[str]:
    """Read every branch line of the session into ``streams`` (its top stream, then the
    subsessions and continuations on it); return the branches' authority log streams.

    Branches come from the registry's ``BranchAdded`` entries, then from ``BranchForked``
    markers on the lines read (a fork of a fork, a fork the registry lacks). Stream names
    come from event data, so only names of this session's kinds are followed: a crafted
    entry cannot pull another session's streams into the tree.
    """
    line_prefix = branch_stream(session_id, "x")[:-1]  # "AgentBranch-{id}@"
    queue: list[tuple[str, str]] = []  # (branch stream, branch name)
    logs: list[str] = []

    def want(kind: type[events.BranchAdded] | type[events.BranchForked], data: str | None) -> None:
        try:
            if kind is events.BranchAdded:
                added = events.BranchAdded.decode((data or "").encode())
                stream, name = added.stream, added.branch
            else:
                forked = events.BranchForked.decode((data or "").encode())
                stream, name = forked.branch_stream, forked.branch
        except (CodecError, RecursionError):  # nested past the parser's depth: the same
            return  # the verifier reports the entry or marker
        if stream.startswith(line_prefix) and stream not in streams:
            queue.append((stream, name))

    def markers(records: Sequence[Record]) -> None:
        for record in records:
            if record.type == events.BRANCH_FORKED:
                want(events.BranchForked, record.data)

    for entry in registry:
        if entry.type == events.BRANCH_ADDED:
            want(events.BranchAdded, entry.data.decode("utf-8", "replace"))
    markers(streams.get(session_stream(session_id), ()))
    while queue:
        stream, name = queue.pop(0)
        if stream in streams:
            continue
        started = await walk_line(store, session_id, stream, streams)
        if started is not None:
            name = started.branch
        if stream in streams:
            markers(streams[stream])  # forks of this branch
            try:
                log = branch_authority_stream(session_id, name)
            except InvalidInput:
                continue
            if log not in logs:
                logs.append(log)
    return logs


async def walk_line(
    store: EventStore, session_id: str, stream: str, streams: dict[str, Sequence[Record]]
) -> events.BranchStarted | None:
    """Read one branch line's own streams into ``streams``: its top stream ``stream``, the
    subsessions opened on it, and the continuation of each subagent open at its fork
    (named by its ``BranchStarted``, with theirs), each at any depth. Streams already in
    ``streams`` are not read again. Returns the line's ``BranchStarted`` (None: the
    stream is missing, or does not begin with a readable one).

    Raises:
        DamagedEvent: The store holds an event of the line it cannot hand out.
        StoreUnavailable: The store could not be read.
    """
    sub_prefix = subsession_stream(session_id, "x")[:-1]  # "AgentSubsession-{id}-"
    started: events.BranchStarted | None = None
    roots = [stream]
    while roots:
        root = roots.pop(0)
        if root in streams:
            continue
        try:
            async for found, recorded in walk_tree(store, root):
                if found not in streams:
                    streams[found] = [Record.of(event) for event in recorded]
        except StreamNotFound:
            logger.warning("branch stream %s is missing; it is left out", root)
            continue
        except UndecodableEvent as error:
            raise DamagedEvent(error.stream, None, f"cannot be read: {error}") from None
        first = streams[root][0] if streams[root] else None
        if root == stream and first is not None and first.type == events.BRANCH_STARTED:
            try:
                started = events.BranchStarted.decode((first.data or "").encode())
            except (CodecError, RecursionError):
                continue
            # Only names of this session's kinds: a crafted fork cannot pull in others.
            roots.extend(c for c in started.continuations.values() if c.startswith(sub_prefix))
    return started


async def _read(store: EventStore, stream: str) -> list[RecordedEvent]:
    try:
        return await store.read(stream)
    except StreamNotFound:
        return []
    except UndecodableEvent as error:  # e.g. a SQLite text column that is not UTF-8
        raise DamagedEvent(stream, None, f"cannot be read: {error}") from None
