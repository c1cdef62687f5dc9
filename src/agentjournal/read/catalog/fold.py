"""The catalog's fold: one row of counts per session tree, from events in global order (pure).

:class:`Catalog` learns which session a stream belongs to from the events themselves: a
session stream (``AgentSession-{id}``), its authority log and checkpoint stream by the
names :mod:`agentjournal.streams` gives them, each subsession from the
``SubagentStarted`` that opened it (any depth), which commits before the subsession's
first event, and each branch from its ``BranchForked``. It keeps each stream's head for
the cheap ledger check (:mod:`agentjournal.read.catalog.ledger`); its state is plain JSON.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

import orjson

from agentjournal import events
from agentjournal._fastjson import loads, loads_bytes
from agentjournal._gc import no_collection
from agentjournal.engine.tree import index_of
from agentjournal.errors import InvalidInput, JournalError
from agentjournal.ledger.chain import GENESIS, HASH_KEY
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import KEY_ROTATED, KeyRotation, trusted_closure
from agentjournal.read.catalog.ledger import (
    chain_problem,
    checkpoint_problem,
    ledger_status,
    linked,
    unreadable,
)
from agentjournal.read.catalog.responses import response_counts
from agentjournal.read.catalog.rows import BranchRow, SessionRow
from agentjournal.read.catalog.scores import SCORE_TYPES, fold_score, score_marks, scored_session
from agentjournal.read.usage import legacy_counts
from agentjournal.streams import (
    KEYS_STREAM,
    branches_stream,
    ledger_stream,
    session_of,
    session_stream,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentjournal.read.catalog.parts import Share
    from agentjournal.store.contract import RecordedEvent

VERSION: Final = 9  # 2: items counted by the engine's index rule; 3: branches; 4: continuations;
# 5: a continuation is the subagent it continues, not one more; 7: each key's tail;
# 8: pending approvals; 9: eval scores
"""The state's layout; a saved state of another version is rebuilt from the start."""


def _new_row() -> dict[str, Any]:
    return {
        "app": "",
        "user": "",
        "agent": "",
        "items": 0,
        "floor": -1,
        "cleared": False,
        "started": 0,
        "closed": 0,
        "failed": 0,
        "blocks": 0,
        "refusals": 0,
        "tokens": 0,
        "responded": [],  # streams with a ModelResponded so far
        "legacy": 0,
        "responses": {},
        "first": None,
        "last": None,
        "broken": None,
        "ck": None,
        # key id -> [position, "stream@revision"] of the first event folded after that
        # key's newest checkpoint (None: nothing yet); no checkpoint can cover such an event
        # (each signs heads it read before its own append), so verify finds it uncovered
        "tails": {},
        "branches": {},  # branch top stream -> what the catalog knows of the branch
        "lines": {},  # a stream of a branch line (its top stream, its subsessions) -> top
        "continued": [],  # continuation streams: their closes count for no subagent
        "checked": None,  # when an event of the session was last folded (unix µs)
        # approvals asked and not yet answered nor run, on a stream some line still
        # follows (a subagent's ending drops its stream's): "stream call_id" -> the
        # question's event id (engine.approvals' rule, on every line of the tree)
        "asked": {},
        # eval runs (read.catalog.scores): its latest session score, newest rating, runs
        "score": None,
        "rated": None,
        "evals": [],
    }


class Catalog:
    """The catalog's state and its fold (pure: no I/O).

    The state is plain JSON (:meth:`dump` / :meth:`load`): a row per session, and per
    stream of a session tree the session it belongs to and its head (revision, hash),
    which the chain check links the next event to. Checkpoints just folded are kept
    aside (not saved) so their signatures can be checked without reading them again, until
    they are.
    """

    def __init__(self, state: Mapping[str, Any] | None = None, part: Share | None = None) -> None:
        state = state or {}
        self.sessions: dict[str, dict[str, Any]] = dict(state.get("sessions", {}))
        self.streams: dict[str, list[Any]] = dict(state.get("streams", {}))
        self.rotations: list[dict[str, Any]] = list(state.get("rotations", []))
        self.fresh: dict[str, Checkpoint] = {}  # session -> its newest checkpoint, folded now
        # When the events folded now are folded (unix µs; the caller's clock, as the fold
        # itself reads none): a row shows when its session was last checked.
        self.now = 0
        # A part of the session trees (None: all of them): rows of its own trees only,
        # and of the others only what decides which tree a stream is on (see fold).
        self.part = part
        self.others: dict[str, dict[str, Any]] = {}  # the other parts' rows, not kept
        self._mine: dict[str, bool] = {}  # session -> whether this part folds it

    @classmethod
    def load(cls, data: bytes) -> Catalog | None:
        """A catalog from :meth:`dump`'s bytes; None when they hold another version's
        state (or none): the catalog is then folded again from the start."""
        try:
            with no_collection():
                state = loads_bytes(data)
        except ValueError:
            return None
        if not isinstance(state, dict) or state.get("v") != VERSION:
            return None
        return cls(state)

    def dump(self) -> bytes:
        """The state as compact JSON (what :func:`refresh` saves)."""
        state = {
            "v": VERSION,
            "sessions": self.sessions,
            "streams": self.streams,
            "rotations": self.rotations,
        }
        try:
            return orjson.dumps(state, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # what orjson cannot print (an integer past 64 bits)
            return json.dumps(state, separators=(",", ":"), sort_keys=True).encode()

    # -- the fold ---------------------------------------------------------------------

    def session_of(self, event: RecordedEvent) -> str | None:
        """The session ``event``'s stream belongs to, learnt from the events so far."""
        stream = event.stream
        known = self.streams.get(stream)
        if known is not None:
            return str(known[0])
        named = session_of(stream, logs=True)
        if named is not None:
            return named
        if event.type == events.SUBAGENT_STARTED:
            # A subsession's own copy, should its parent's copy be unknown: its parent
            # stream names the tree (never the stream's name, which readers must not parse).
            try:
                parent = events.decode_subagent_started(event.data)[0].parent_stream
            except (JournalError, ValueError):
                return None
            owner = self.streams.get(parent)
            return str(owner[0]) if owner is not None else None
        return None

    def fold_page(
        self, page: Sequence[RecordedEvent], also: Callable[[RecordedEvent], None] | None
    ) -> int:
        """Fold a page of events, the next in the global order (and hand each to ``also``
        after it is folded): how many changed the catalog."""
        folded = 0
        for event in page:
            folded += self.fold(event)
            if also is not None:
                also(event)
        return folded

    def fold(self, event: RecordedEvent) -> bool:
        """Fold one event, the next in the global order; whether the catalog changed."""
        stream = event.stream
        part = self.part
        if stream == KEYS_STREAM:
            self._fold_key(event)  # every part folds the rotations; the first counts them
            return part is None or part.index == 0
        if event.type in SCORE_TYPES:
            # An eval run's score of a session (a malformed one counts for nothing).
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                if part is not None and not part.owns(scored_session(event) or ""):
                    return False  # another part's session (or no score: none folds it)
                return fold_score(self.sessions, event, _new_row)
            return False
        head = self.streams.get(stream)
        session_id = str(head[0]) if head is not None else self.session_of(event)
        if session_id is None:
            return False  # not part of a session tree (a projection's stream, another app's)
        if part is not None:
            mine = self._mine.get(session_id)
            if mine is None:
                mine = self._mine[session_id] = part.owns(session_id)
            if not mine:
                self._fold_other(event, head, session_id)
                return False
        row = self.sessions.get(session_id)
        if row is None:
            row = self.sessions[session_id] = _new_row()
        # The chain: link the event to its stream's head; note the first break on the row.
        # What the lean check does not pass (a break, a format 1 event) is chain_problem's.
        problem: str | None
        try:
            metadata = event.metadata
            digest = metadata.get(HASH_KEY, "")
            linking = linked(head, event, metadata, digest)
            problem = None if linking else chain_problem(head, event, metadata)
        except (TypeError, ValueError):  # a column that cannot be read: no chain to follow
            digest, problem = "", unreadable(event)
        if problem is not None and row["broken"] is None:
            row["broken"] = f"{stream}@{event.revision}: {problem}"
        if head is None:
            self.streams[stream] = [session_id, event.revision, digest]
        else:  # in place: one list per stream, not one per event
            head[0], head[1], head[2] = session_id, event.revision, digest
        if row["tails"] and stream != ledger_stream(session_id):
            _after_checkpoints(row, event)
        row["checked"] = self.now
        moment = event.recorded_micros
        first = row["first"]
        if first is None or moment < first:
            row["first"] = moment
        last = row["last"]
        if last is None or moment > last:
            row["last"] = moment
        # An unreadable body counts for nothing; the chain check above still covered it.
        try:  # not contextlib.suppress: a try costs nothing when nothing is raised
            self._fold_content(row, event, session_id)
        except _UNREADABLE:
            return True
        return True

    def _fold_other(self, event: RecordedEvent, head: list[Any] | None, session_id: str) -> None:
        """An event of another part's tree: only which tree its stream, and the streams it
        opens, are on (the first tree to name a stream keeps it), as the whole fold learns
        it; that part folds the rest (its head here is not kept: see :meth:`merge`)."""
        if head is None:
            self.streams[event.stream] = [session_id, -1, GENESIS]
        if event.type in _OPENS_STREAMS:
            row = self.others.get(session_id)
            if row is None:
                row = self.others[session_id] = _new_row()
            try:
                self._fold_content(row, event, session_id)
            except _UNREADABLE:
                return

    def merge(self, other: Catalog) -> None:
        """Take in the rows and heads of ``other``, the other part of the same events (two
        parts folded to one end make the state one fold of every tree makes)."""
        assert self.part is not None
        assert other.part is not None
        self.sessions.update(other.sessions)  # disjoint: each part's own sessions
        owns, known = other.part.owns, other._mine
        for stream, head in other.streams.items():
            theirs = known.get(head[0])
            if theirs or (theirs is None and owns(head[0])):
                self.streams[stream] = head
        self.fresh.update(other.fresh)
        self.part, self.others, self._mine = None, {}, {}

    def _fold_content(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        """What ``event`` says, onto its session's row: the approvals it asks or answers,
        its branch line's share, then its type's handler (:data:`_HANDLERS`), if any."""
        kind = event.type
        if kind == _TOOL_RESULT or events.INTERRUPT_KEY in event.metadata:
            _approval(row, event)  # any line's: before a branch line takes its items
        if kind == events.BRANCH_FORKED:
            self._forked(row, event, session_id)
            return
        lines = row.get("lines")
        if lines:
            line = lines.get(event.stream)
            if line is not None and self._on_branch(row, row["branches"][line], event, session_id):
                return
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, row, event, session_id)

    # -- one handler per event type (_HANDLERS) ----------------------------------------

    def _on_item(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        metadata = event.metadata
        if events.INTERRUPT_KEY in metadata:
            return  # an interrupt written beside the items: no item (events.holds_item)
        self._item(row, event)
        # Legacy usage, before a stream's first ModelResponded: usage.py's rule, so
        # `sessions` and `usage` agree.
        stream = event.stream
        if stream not in row["responded"] and legacy_counts(row["responses"], stream, metadata):
            row["legacy"] += int(loads(metadata[events.USAGE_KEY]).get("total_tokens", 0))

    def _on_session_started(
        self, row: dict[str, Any], event: RecordedEvent, session_id: str
    ) -> None:
        if event.revision == 0 or not row["agent"]:
            body = loads_bytes(event.data)
            row["app"] = str(body.get("app_name", ""))
            row["user"] = str(body.get("user_id", ""))
            row["agent"] = str(body.get("agent_name") or row["agent"])

    def _on_subagent_started(
        self, row: dict[str, Any], event: RecordedEvent, session_id: str
    ) -> None:
        if events.INDEX_KEY not in event.metadata:
            return  # the subsession's own copy
        subagent, item_json = events.decode_subagent_started(event.data)
        self._speaker(row, subagent.source_agent)
        row["started"] += 1
        self.streams.setdefault(subagent.stream, [session_id, -1, GENESIS])
        if item_json is not None:
            self._item(row, event)

    def _on_subagent_completed(
        self, row: dict[str, Any], event: RecordedEvent, session_id: str
    ) -> None:
        metadata = event.metadata
        if events.CLOSES_KEY not in metadata:
            return  # the subsession's own copy
        _, closed, outcome = events.decode_subagent_completed(event.data)
        if events.INTERRUPT_KEY not in metadata:
            _ended(row, closed)
        if closed in row["continued"]:
            return  # a subagent open at a fork, ended on the branch: counted once
        row["closed" if outcome == "success" else "failed"] += 1

    def _on_popped(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        row["items"] = max(0, row["items"] - 1)

    def _on_cleared(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        through = events.SessionCleared.decode(event.data).through_index
        row["items"] = 0  # everything written before a clear is hidden
        row["floor"] = max(row["floor"], through)
        row["cleared"] = True

    def _on_guardrail(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        body = loads_bytes(event.data)
        self._speaker(row, body.get("agent"))
        if body.get("decision") == "BLOCK":
            row["blocks"] += 1

    def _on_granted(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        self._speaker(row, loads_bytes(event.data).get("agent"))

    def _on_refused(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        row["refusals"] += 1

    def _on_responded(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        agent, total = response_counts(event.data)
        self._speaker(row, agent)
        if event.stream not in row["responded"]:
            row["responded"].append(event.stream)
        row["tokens"] += total

    def _on_checkpoint(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        if event.stream == ledger_stream(session_id):
            self._checkpoint(row, event, session_id)

    def _forked(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        """A fork: the branch's streams (top stream, registry) join the session's, and the
        branch starts with the items it shares with its parent."""
        forked = events.BranchForked.decode(event.data)
        if forked.session_id != session_id or forked.branch_stream in row["branches"]:
            return
        row["branches"][forked.branch_stream] = {
            "name": forked.branch,
            "parent": forked.parent,
            "at": forked.cut.to_json(),
            "items": forked.prefix_items,
            "floor": -1,
            "cleared": False,
            "last": event.recorded_micros,
            "deleted": None,
            "forked": event.position,  # the order they were forked in (the state is sorted)
        }
        row["lines"][forked.branch_stream] = forked.branch_stream
        for stream in (forked.branch_stream, branches_stream(session_id)):
            self.streams.setdefault(stream, [session_id, -1, GENESIS])

    def _on_branch(
        self, row: dict[str, Any], branch: dict[str, Any], event: RecordedEvent, session_id: str
    ) -> bool:
        """Fold an event of a branch line onto its branch; whether nothing else counts it
        (items, pops, clears and the branch's own events are the branch's; decisions,
        refusals, subagents and tokens count for the whole session too)."""
        kind = event.type
        branch["last"] = max(branch["last"], event.recorded_micros)
        if events.holds_item(kind, event.metadata):
            self._item(branch, event)
            return True
        if kind == events.SUBAGENT_STARTED and events.INDEX_KEY in event.metadata:
            subagent, item_json = events.decode_subagent_started(event.data)
            row["lines"][subagent.stream] = row["lines"][event.stream]
            if item_json is not None:
                self._item(branch, event)
            row["started"] += 1
            self.streams.setdefault(subagent.stream, [session_id, -1, GENESIS])
            return True
        if kind == events.ITEM_POPPED:
            branch["items"] = max(0, branch["items"] - 1)
            return True
        if kind == events.SESSION_CLEARED:
            through = events.SessionCleared.decode(event.data).through_index
            branch["items"] = 0
            branch["floor"] = max(branch["floor"], through)
            branch["cleared"] = True
            return True
        if kind == events.BRANCH_DELETED:
            branch["deleted"] = events.BranchDeleted.decode(event.data).reason
            branch["items"] = 0
            return True
        if kind == events.BRANCH_STARTED and event.revision == 0:
            # Each subagent open at the cut goes on in a continuation stream of this line.
            # It is the same subagent (one handoff, counted where it started), so neither
            # the continuation nor its close on the branch counts again.
            for continuation in events.BranchStarted.decode(event.data).continuations.values():
                row["lines"][continuation] = row["lines"][event.stream]
                self.streams.setdefault(continuation, [session_id, -1, GENESIS])
                row["continued"].append(continuation)
        return kind in events.BRANCH_EVENTS

    @staticmethod
    def _speaker(row: dict[str, Any], agent: Any) -> None:
        """The first agent, when ``SessionStarted`` named none: the first that acted."""
        if not row["agent"] and isinstance(agent, str):
            row["agent"] = agent

    @staticmethod
    def _item(row: dict[str, Any], event: RecordedEvent) -> None:
        # get_items' own rule (engine.timeline.fold over engine.tree.index_of): once the
        # session holds a clear, an item is hidden if its index is at most the highest
        # index cleared, whenever it was written; an item without any index (-1, a foreign
        # writer's) counts as at most every floor, so any clear hides it.
        if row.get("cleared") and index_of(event) <= row["floor"]:
            return
        row["items"] += 1

    def _checkpoint(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        mark: dict[str, Any] = {"rev": event.revision, "key": None, "sig": None, "pending": []}
        row["ck"] = mark
        self.fresh.pop(session_id, None)
        try:
            checkpoint = Checkpoint.decode(loads_bytes(event.data))
        except (ValueError, InvalidInput) as error:
            mark["problem"] = f"the checkpoint is malformed: {error}"
            return
        mark["key"] = checkpoint.key_id
        # Another key's checkpoint is past what this key signed (verify finds the ledger
        # uncovered when that key is not trusted); this key's tail starts again.
        _after_checkpoints(row, event)
        row["tails"][checkpoint.key_id] = None
        mark["problem"] = checkpoint_problem(self.streams, checkpoint, event, session_id, mark)
        self.fresh[session_id] = checkpoint

    def _fold_key(self, event: RecordedEvent) -> None:
        if event.type == KEY_ROTATED:
            try:
                body = loads_bytes(event.data)
            except ValueError:
                return
            if isinstance(body, dict):
                self.rotations.append(body)

    # -- reading the rows --------------------------------------------------------------

    def trusted(self, keys: Mapping[str, Ed25519PublicKey]) -> dict[str, Ed25519PublicKey]:
        """``keys`` and every key a valid rotation on ``AgentKeys`` leads to from them."""
        rotations = []
        for body in self.rotations:
            try:
                rotations.append(KeyRotation.decode(body))
            except InvalidInput:
                continue
        return trusted_closure(keys, rotations)

    def unsettled(self) -> list[tuple[str, str, int, str]]:
        """Heads a checkpoint names below what the fold saw: (session, stream, revision,
        hash) each, to be compared with the stored event by :meth:`settle_head`."""
        return [
            (session_id, stream, revision, digest)
            for session_id, row in self.sessions.items()
            if row["ck"] is not None
            for stream, revision, digest in row["ck"].get("pending", [])
        ]

    def settle_head(self, session_id: str, stream: str, revision: int, stored: str | None) -> None:
        """The stored hash of a head the newest checkpoint named (None: no such event)."""
        mark = self.sessions[session_id]["ck"]
        pending = mark.get("pending", [])
        named = next((p for p in pending if p[0] == stream and p[1] == revision), None)
        if named is None:
            return
        pending.remove(named)
        if mark.get("problem") is None and stored != named[2]:
            mark["problem"] = (
                f"{stream}@{revision} is not what the checkpoint at "
                f"{ledger_stream(session_id)}@{mark['rev']} signed"
            )

    def needs_signature(self, trusted: Mapping[str, Ed25519PublicKey]) -> list[str]:
        """Sessions whose newest checkpoint is by a trusted key and not checked yet."""
        return [
            session_id
            for session_id, row in self.sessions.items()
            if (mark := row["ck"]) is not None
            and mark.get("problem") is None
            and mark["sig"] is None
            and mark["key"] in trusted
        ]

    def check_signature(
        self, session_id: str, checkpoint: Checkpoint | None, public: Ed25519PublicKey
    ) -> None:
        """Record whether the newest checkpoint's signature holds under ``public``; the
        checkpoint kept aside for it (:attr:`fresh`) is then dropped: nothing reads it again
        (and a part sends the others less)."""
        mark = self.sessions[session_id]["ck"]
        self.fresh.pop(session_id, None)
        if checkpoint is None or checkpoint.key_id != mark["key"]:
            mark["problem"] = f"{ledger_stream(session_id)}@{mark['rev']} cannot be read back"
            return
        mark["sig"] = checkpoint.verify(public)

    def rows(self, trusted: Mapping[str, Ed25519PublicKey]) -> list[SessionRow]:
        """Every session with its session stream, newest activity first."""
        out = [
            found
            for session_id in self.sessions
            if (found := self.row(session_id, trusted)) is not None
        ]
        out.sort(key=lambda r: (r.last_activity, r.session_id), reverse=True)
        return out

    def row(self, session_id: str, trusted: Mapping[str, Ed25519PublicKey]) -> SessionRow | None:
        """One session's row (None: no such session, or no session stream of it yet)."""
        row = self.sessions.get(session_id)
        if row is None or session_stream(session_id) not in self.streams or row["first"] is None:
            return None  # an authority log or checkpoints without a session
        started, closed, failed = row["started"], row["closed"], row["failed"]
        score, rating = score_marks(row)
        branches = tuple(
            BranchRow(
                name=b["name"],
                stream=stream,
                parent=b["parent"],
                at=b["at"],
                items=b["items"],
                last=_moment(b["last"]),
                deleted=b["deleted"],
            )
            for stream, b in sorted(
                row.get("branches", {}).items(), key=lambda pair: pair[1]["forked"]
            )
        )
        return SessionRow(
            session_id=session_id,
            app=row["app"],
            user=row["user"],
            agent=row["agent"],
            items=row["items"],
            subagents_open=max(0, started - closed - failed),
            subagents_closed=closed,
            subagents_failed=failed,
            guardrail_blocks=row["blocks"],
            refusals=row["refusals"],
            tokens=row["tokens"] + row["legacy"],
            first_activity=_moment(row["first"]),
            last_activity=_moment(row["last"]),
            integrity=ledger_status(session_id, row, trusted),
            checked_at=_moment(row.get("checked") or row["last"]),
            branches=branches,
            pending_approvals=len(row["asked"]),
            score=score,
            rating=rating,
            eval_runs=tuple(row.get("evals", ())),
        )


_TOOL_RESULT: Final = "ToolResultReceived"

_UNREADABLE: Final = (ValueError, KeyError, TypeError, AttributeError, JournalError)
"""What an unreadable body raises in a handler: it counts for nothing."""

_OPENS_STREAMS: Final = frozenset(
    {events.SUBAGENT_STARTED, events.BRANCH_FORKED, events.BRANCH_STARTED}
)
"""The types whose handlers put streams on a tree (``self.streams.setdefault``): a part
folds them on the other parts' trees too, on rows it does not keep, for the same answer."""

_Handler = Callable[[Catalog, dict[str, Any], "RecordedEvent", str], None]
_HANDLERS: Final[dict[str, _Handler]] = {
    **dict.fromkeys(events.ITEM_EVENT_TYPES, Catalog._on_item),
    events.SESSION_STARTED: Catalog._on_session_started,
    events.SUBAGENT_STARTED: Catalog._on_subagent_started,
    events.SUBAGENT_COMPLETED: Catalog._on_subagent_completed,
    events.ITEM_POPPED: Catalog._on_popped,
    events.SESSION_CLEARED: Catalog._on_cleared,
    events.GUARDRAIL_DECIDED: Catalog._on_guardrail,
    events.AUTHORITY_GRANTED: Catalog._on_granted,
    events.AUTHORITY_REFUSED: Catalog._on_refused,
    events.MODEL_RESPONDED: Catalog._on_responded,
    CHECKPOINT: Catalog._on_checkpoint,
}
"""What the fold does with an event of each type on the main line (after its approvals
and its branch line's share): a row's counts come from here. A type not named counts for
nothing but its chain link and its time; a new count is a handler and an entry here (and
a :data:`VERSION` step, so saved states are folded again)."""


def _approval(row: dict[str, Any], event: RecordedEvent) -> None:
    """Fold an approval's question (``InterruptIssued``), its answer
    (``InterruptResolved``) or its call's output (``ToolResultReceived``) onto the row's
    pending approvals: asked, and neither answered nor run."""
    asked: dict[str, str] = row["asked"]
    try:
        if event.type == events.INTERRUPT_ISSUED:
            question = events.ApprovalAsked.decode(event.data)
            asked[f"{event.stream} {question.request_id}"] = event.id_text
        elif event.type == events.INTERRUPT_RESOLVED:
            answer = events.ApprovalDecided.decode(event.data)
            key = f"{event.stream} {answer.request_id}"
            if asked.get(key) == answer.issued:
                del asked[key]
        elif event.type == _TOOL_RESULT:
            asked.pop(f"{event.stream} {event.metadata.get(events.CALL_ID_KEY)}", None)
    except (JournalError, ValueError, RecursionError):
        return  # not what agentjournal writes: the verifier reports it


def _ended(row: dict[str, Any], stream: str) -> None:
    """The subagent of ``stream`` ended: no line follows that stream any more, so its
    questions wait no more (``engine.approvals.approvals`` reads the followed streams)."""
    asked: dict[str, str] = row["asked"]
    for key in [k for k in asked if k.split(" ", 1)[0] == stream]:
        del asked[key]


def _after_checkpoints(row: dict[str, Any], event: RecordedEvent) -> None:
    """``event`` comes after each key's newest checkpoint that nothing followed yet."""
    tails = row["tails"]
    for key, tail in tails.items():
        if tail is None:
            tails[key] = [event.position, f"{event.stream}@{event.revision}"]


def _moment(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, UTC)
