"""Which line of which session tree an event belongs to: the trace projector's line registry.

A session's lines are projected apart: main, and each branch learnt from the
``agentjournal.BranchForked`` on its parent line's top stream (committed first in the
fork's transaction). Each line has its own :class:`~.state.Tree`; a branch's tree knows
its fork and the parent line's run at the cut, which its run spans link to. A projector
loaded from a state saved before lines learns a branch forked before that save from the
branch's own events.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Final

from agentjournal import events
from agentjournal.errors import CodecError
from agentjournal.read.traces.state import BRANCH_PREFIX, Tree, top_of, tree_from_json
from agentjournal.read.traces.stored import Event, data_of
from agentjournal.streams import session_of

_SUBSESSION_PREFIX: Final = "AgentSubsession-"


def session_of_stream(stream: str) -> str | None:
    """The session id of a session stream (``AgentSession-{id}``), else None
    (:func:`agentjournal.streams.session_of`)."""
    return session_of(stream)


class Lines:
    """The lines of the session trees seen so far: which tree each stream belongs to.

    Args:
        only: Keep only this session's trees; None: every tree of the store.

    It owns the stream map and the set of trees; what is open on a tree is the projector's.
    """

    def __init__(self, only: str | None) -> None:
        self._only = only
        self._streams: dict[str, str] = {}  # stream -> its tree (main's or a branch's)
        self._trees: dict[str, Tree] = {}
        # Loaded from a state saved before lines: it never saw the BranchForked of a branch
        # forked before that save, so it learns such a branch from the branch's own events.
        self._learn = False

    def dump(self) -> dict[str, Any]:
        """The registry's part of the projector's saved state."""
        state: dict[str, Any] = {
            "streams": self._streams,
            "trees": {key: asdict(tree) for key, tree in self._trees.items()},
        }
        if self._learn:  # kept across saves: such a branch may first speak much later
            state["learn_branches"] = True
        return state

    @classmethod
    def load(cls, only: str | None, state: dict[str, Any]) -> Lines:
        """The registry a saved projector state holds."""
        lines = cls(only)
        # A state saved before lines has no "line" (nor any line field in its trees).
        lines._learn = "line" not in state or bool(state.get("learn_branches"))
        lines._streams = dict(state["streams"])
        for key, tree in state["trees"].items():
            lines._trees[key] = tree_from_json(tree)
        return lines

    def knows(self, stream: str) -> bool:
        """Whether ``stream`` belongs to a session tree seen so far."""
        return stream in self._streams

    def learns(self, stream: str) -> bool:
        """Whether ``stream`` is the top stream of a branch not seen fork that this registry,
        loaded from a state saved before lines, learns (see the projector's ``learns``)."""
        return self._unknown_branch(stream) is not None

    def _unknown_branch(self, stream: str) -> str | None:
        """The session of an unknown branch top stream this registry learns, else None."""
        if not self._learn or stream in self._streams or not stream.startswith(BRANCH_PREFIX):
            return None
        session, join, key = stream[len(BRANCH_PREFIX) :].partition("@")
        if not join or not key or session not in self._trees:  # only a session it followed
            return None
        return session

    def in_order(self) -> list[Tree]:
        """The trees by key: an order a saved and loaded state keeps (its JSON is sorted)."""
        return [self._trees[key] for key in sorted(self._trees)]

    def keyed(self) -> list[tuple[str, Tree]]:
        """The trees with their keys, in :meth:`in_order`'s order."""
        return [(key, self._trees[key]) for key in sorted(self._trees)]

    def session_at(self, stream: str) -> str | None:
        """The session whose tree an event of ``stream`` would be folded into now
        (:meth:`tree_of`, without making anything), or None: none (a branch it may learn
        from this event: the branch's session)."""
        key = self._streams.get(stream)
        if key is None:
            learnt = self._unknown_branch(stream)
            if learnt is not None:  # its tree's session, if it makes one
                return learnt
            session = session_of_stream(stream)
            if session is None or (self._only is not None and session != self._only):
                return None
            key = session
        tree = self._trees.get(key)
        return key if tree is None else tree.session_id

    def tree_of(self, record: Event) -> Tree | None:
        """The tree of ``record``'s line (made on its first event), or None: not followed."""
        key = self._streams.get(record.stream)
        if key is None and self._unknown_branch(record.stream) is not None:
            key = self._learnt(record)
        if key is None:
            session = session_of_stream(record.stream)
            if session is None or (self._only is not None and session != self._only):
                return None
            key = self._streams[record.stream] = session
        tree = self._trees.get(key)
        if tree is None:
            tree = self._trees[key] = Tree(key)
        return tree

    def join(self, stream: str, opener: str) -> None:
        """``stream`` (a subsession or a continuation) is on the line of ``opener``."""
        self._streams[stream] = self._streams[opener]

    def line_event(self, tree: Tree, record: Event) -> None:
        """A fork's marker makes its branch's tree; the branch's first event names its
        continuations, which join the branch's line."""
        try:
            if record.type == events.BRANCH_FORKED and record.stream == top_of(tree):
                self._forked(tree, record, events.BranchForked.decode(data_of(record)))
            elif (
                record.type == events.BRANCH_STARTED
                and record.revision == 0
                and record.stream == top_of(tree)
            ):
                started = events.BranchStarted.decode(data_of(record))
                own = f"{_SUBSESSION_PREFIX}{tree.session_id}-"  # only this session's streams
                for continuation in started.continuations.values():
                    if continuation.startswith(own) and continuation not in self._streams:
                        self._streams[continuation] = self._streams[record.stream]
        except (CodecError, RecursionError):
            return  # not what agentjournal writes: the verifier reports it

    def _forked(self, tree: Tree, record: Event, forked: events.BranchForked) -> None:
        """A branch left this line: its own tree, and the link its run spans carry."""
        stream = forked.branch_stream
        own = f"{BRANCH_PREFIX}{tree.session_id}@"
        if forked.session_id != tree.session_id or not stream.startswith(own):
            return  # only this session's branches (a crafted marker pulls in nothing)
        if stream in self._streams:
            return
        self._branch_tree(tree.session_id, self._streams[record.stream], forked, record.id)

    def _branch_tree(
        self, session: str, parent_key: str | None, forked: events.BranchForked, fork_id: str
    ) -> None:
        """The tree of a branch that left the line ``parent_key`` (None: a line not known)."""
        stream = forked.branch_stream
        parent = self._trees.get(parent_key) if parent_key is not None else None
        self._streams[stream] = stream
        self._trees[stream] = Tree(
            session,
            line=forked.branch,
            top=stream,
            parent=parent_key if parent is not None else None,
            cut=forked.cut.position,
            fork={
                "event": fork_id,
                "parent": forked.parent,
                "kind": forked.cut.kind,
                "value": forked.cut.value,
                "position": forked.cut.position,
                "link": None if parent is None else self._run_at(parent, forked.cut.position),
            },
        )

    def _learnt(self, record: Event) -> str | None:
        """The tree of a branch forked before a pre-lines save (:meth:`learns`): from its
        ``BranchStarted`` (the twin of its ``BranchForked``: the same fields), else from
        its stream's name (its key: the branch's name unless the name needed hashing;
        where it forked unknown)."""
        stream = record.stream
        session = self._unknown_branch(stream)
        assert session is not None
        if record.type == events.BRANCH_STARTED and record.revision == 0:
            try:
                started = events.BranchStarted.decode(data_of(record))
            except (CodecError, RecursionError):
                return None  # not what agentjournal writes: the verifier reports it
            twin = record.metadata.get(events.TWIN_KEY)
            if started.session_id != session or started.branch_stream != stream or not twin:
                return None
            parents = [
                key
                for key, tree in self._trees.items()
                if tree.session_id == session and tree.line == started.parent
            ]
            # A parent branch forked before the save and not yet learnt: no link.
            self._branch_tree(session, parents[0] if len(parents) == 1 else None, started, twin)
            return stream
        self._streams[stream] = stream
        self._trees[stream] = Tree(
            session,
            line=stream.partition("@")[2],
            top=stream,
            fork=dict.fromkeys(("event", "parent", "kind", "value", "position", "link")),
        )
        return stream

    def _run_at(self, tree: Tree, position: int) -> list[str] | None:
        """[trace id, root span id] of the run a line was in just before ``position``: its
        newest run started before it, else (a cut in a branch's prefix) the line below's
        before the branch's own cut."""
        at: Tree | None = tree
        while at is not None:
            found = None
            for start, trace_id, root in at.runs:
                if start >= position:
                    break
                found = [trace_id, root]
            if found is not None:
                return found
            if at.parent is None:
                return None
            if at.cut is not None:
                position = min(position, at.cut)
            at = self._trees.get(at.parent)
        return None
