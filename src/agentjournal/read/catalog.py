"""The session catalog: one row per session tree, folded from the store's global order.

``agentjournal sessions`` lists every session without reading any session by
itself: the catalog is a projection (:mod:`agentjournal.read.projections`). A call
loads the saved state (one read of its trailer and chunks), folds only the
events written since the saved position, settles what the fold could not decide
alone (a checkpoint naming an older revision, a signature by a key trusted only
now: one point read each), returns the rows and saves the state again. The
first call on a store reads the whole global order once, in pages.

The fold (:class:`Catalog`) is pure: events in, JSON-serialisable state out. It
learns which session a stream belongs to from the events themselves: a session
stream (``AgentSession-{id}``), its authority log and checkpoint stream by the
names :mod:`agentjournal.streams` gives them, and each subsession from the
``SubagentStarted`` that opened it (any depth), which commits before the
subsession's first event.

Each row says (see :class:`SessionRow`): the session's app, user and first
agent (``SessionStarted``); how many items ``get_items()`` would return (item
events, minus pops, reset by clears); subagents open, closed and failed;
guardrail blocks; authority refusals; tokens; first and last activity; and the
*cheap ledger check*: every event's chain hash is recomputed and its ``aj.prev``
links its stream's previous ``aj.hash``, and the newest checkpoint's signature
is valid under a trusted key over heads equal to what the projection saw.
``agentjournal verify`` remains the full check (twins, coverage, delegation,
containment).

Typical use::

    listing = await catalog.refresh(store, keys={key.key_id: key.public_key})
    for row in listing.rows:
        print(row.session_id, row.items, row.ledger)
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final

from agentjournal import events
from agentjournal._digests import data_digest
from agentjournal._gc import no_collection
from agentjournal.engine.tree import index_of
from agentjournal.errors import (
    ConcurrencyError,
    InvalidInput,
    JournalError,
    StoreError,
    StreamNotFound,
)
from agentjournal.events import ITEM_EVENT_TYPES
from agentjournal.ledger.chain import (
    GENESIS,
    HASH_KEY,
    PREV_KEY,
    SEQ_KEY,
    chain_format,
    chain_hash,
)
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import KEY_ROTATED, KeyRotation, trusted_closure
from agentjournal.read import projections
from agentjournal.read.usage import legacy_counts
from agentjournal.streams import (
    KEYS_STREAM,
    branches_stream,
    ledger_stream,
    projection_stream,
    session_of,
    session_stream,
)
from agentjournal.tokens import ModelResponse

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentjournal.store.contract import EventStore, RecordedEvent

__all__ = [
    "NAME",
    "PAGE",
    "BranchRow",
    "Catalog",
    "Listing",
    "SessionRow",
    "refresh",
    "sessions",
]

NAME: Final = "catalog"
"""The projection's name: its state is saved on ``AgentProjection-catalog``."""
PAGE: Final = 2000
"""Events per ``read_all`` page."""
VERSION: Final = 4  # 2: items counted by the engine's index rule; 3: branches; 4: continuations
"""The state's layout; a saved state of another version is rebuilt from the start."""

_SAVE_ATTEMPTS: Final = 5


@dataclass(frozen=True)
class BranchRow:
    """One branch of a session in the catalog (DESIGN §17.4).

    Attributes:
        name: The branch's name.
        stream: Its top stream, ``AgentBranch-{session}@{key}``.
        parent: Its parent line's name (``main`` or a branch's).
        at: Its cut as ``BranchForked`` recorded it: ``kind`` (``index``, ``turn`` or
            ``revision``), ``value`` and ``position``.
        items: How many items ``get_items()`` on the branch returns: the items it shares
            with its parent (``prefix_items``), plus its own item events, less its pops,
            reset by its clears.
        last: When its line was last written (UTC; the fork's time until it is).
        deleted: ``deleted`` or ``cleared`` once it was, else None.
    """

    name: str
    stream: str
    parent: str
    at: Mapping[str, Any]
    items: int
    last: datetime
    deleted: str | None

    def as_dict(self) -> dict[str, Any]:
        """The branch as JSON-ready data (times in RFC 3339)."""
        return {
            "name": self.name,
            "stream": self.stream,
            "parent": self.parent,
            "at": dict(self.at),
            "items": self.items,
            "last": self.last.isoformat(),
            "deleted": self.deleted,
        }


@dataclass(frozen=True)
class SessionRow:
    """One session tree in the catalog.

    Attributes:
        session_id: The session.
        app: ``SessionStarted.app_name`` (empty when none was given).
        user: ``SessionStarted.user_id``.
        agent: The first agent: ``SessionStarted.agent_name``, else the first agent that
            handed off, was granted authority, was judged by a guardrail or called a model.
        items: How many items ``get_items()`` returns: item events, less pops, reset by clears.
        subagents_open: Subagents started and not completed.
        subagents_closed: Subagents completed with outcome ``success``.
        subagents_failed: Subagents completed with outcome ``error`` or ``cancelled``.
        guardrail_blocks: ``GuardrailDecided`` events with decision ``BLOCK``.
        refusals: ``AuthorityRefused`` events.
        tokens: Total tokens: the sum of ``ModelResponded`` usage; for a session written
            before that event existed, the ``$usage`` of assistant events, once per
            ``aj.response_id``.
        first_activity: When its first event was recorded (UTC).
        last_activity: When its last event was recorded (UTC).
        ledger: The cheap ledger check: ``ok``, ``unsigned`` (no checkpoint), ``broken
            chain``, ``untrusted key KEY_ID`` (signed by a key not given) or ``FAILED: reason``.
        ledger_detail: Where and why, when the check did not pass.
        branches: The session's branches, in the order they were forked (deleted ones
            too). Every other count is the whole session's, every line together, except
            ``items``, which is the main line's.
    """

    session_id: str
    app: str
    user: str
    agent: str
    items: int
    subagents_open: int
    subagents_closed: int
    subagents_failed: int
    guardrail_blocks: int
    refusals: int
    tokens: int
    first_activity: datetime
    last_activity: datetime
    ledger: str
    ledger_detail: str | None = None
    branches: tuple[BranchRow, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data (times in RFC 3339)."""
        return {
            "session_id": self.session_id,
            "app": self.app,
            "user": self.user,
            "agent": self.agent,
            "items": self.items,
            "subagents": {
                "open": self.subagents_open,
                "closed": self.subagents_closed,
                "failed": self.subagents_failed,
            },
            "guardrail_blocks": self.guardrail_blocks,
            "refusals": self.refusals,
            "tokens": self.tokens,
            "first_activity": self.first_activity.isoformat(),
            "last_activity": self.last_activity.isoformat(),
            "ledger": self.ledger,
            "ledger_detail": self.ledger_detail,
            "branches": [branch.as_dict() for branch in self.branches],
        }


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
        "branches": {},  # branch top stream -> what the catalog knows of the branch
        "lines": {},  # a stream of a branch line (its top stream, its subsessions) -> top
    }


class Catalog:
    """The catalog's state and its fold (pure: no I/O).

    The state is plain JSON (:meth:`dump` / :meth:`load`): a row per session, and per
    stream of a session tree the session it belongs to and its head (revision, hash),
    which the chain check links the next event to. Checkpoints just folded are kept
    aside (not saved) so their signatures can be checked without reading them again.
    """

    def __init__(self, state: Mapping[str, Any] | None = None) -> None:
        state = state or {}
        self.sessions: dict[str, dict[str, Any]] = dict(state.get("sessions", {}))
        self.streams: dict[str, list[Any]] = dict(state.get("streams", {}))
        self.rotations: list[dict[str, Any]] = list(state.get("rotations", []))
        self.fresh: dict[str, Checkpoint] = {}  # session -> its newest checkpoint, folded now

    @classmethod
    def load(cls, data: bytes) -> Catalog | None:
        """A catalog from :meth:`dump`'s bytes; None when they hold another version's
        state (or none): the catalog is then folded again from the start."""
        try:
            with no_collection():
                state = json.loads(data)
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

    def fold(self, event: RecordedEvent) -> bool:
        """Fold one event, the next in the global order; whether the catalog changed."""
        if event.stream == KEYS_STREAM:
            self._fold_key(event)
            return True
        session_id = self.session_of(event)
        if session_id is None:
            return False  # not part of a session tree (a projection's stream, another app's)
        row = self.sessions.get(session_id)
        if row is None:
            row = self.sessions[session_id] = _new_row()
        self._chain(row, event, session_id)
        moment = _micros(event.recorded_at)
        row["first"] = moment if row["first"] is None else min(row["first"], moment)
        row["last"] = moment if row["last"] is None else max(row["last"], moment)
        # An unreadable body counts for nothing; the chain check above still covered it.
        with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError, JournalError):
            self._fold_content(row, event, session_id)
        return True

    def _chain(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        """Link ``event`` to its stream's head; note the first break on the row."""
        head = self.streams.get(event.stream)
        revision, previous = (head[1], head[2]) if head is not None else (-1, GENESIS)
        metadata = event.metadata
        problem = None
        if event.revision != revision + 1:
            problem = f"revision {event.revision} follows {revision}"
        elif metadata.get(SEQ_KEY) != str(event.revision) or HASH_KEY not in metadata:
            problem = "not hash-chained"
        elif metadata.get(PREV_KEY) != previous:
            problem = "aj.prev does not link the previous event's hash"
        elif chain_format(metadata) is None:  # no record to hash: chain_hash would refuse it
            problem = "the event names a chain format this version does not know"
        else:
            digest = chain_hash(
                event.stream,
                event.revision,
                str(event.id),
                event.type,
                data_digest(event.data),
                metadata,
            )
            if digest != metadata[HASH_KEY]:
                problem = "the event's hash does not match its content"
        if problem is not None and row["broken"] is None:
            row["broken"] = f"{event.stream}@{event.revision}: {problem}"
        self.streams[event.stream] = [session_id, event.revision, metadata.get(HASH_KEY, "")]

    def _fold_content(self, row: dict[str, Any], event: RecordedEvent, session_id: str) -> None:
        kind = event.type
        metadata = event.metadata
        if kind == events.BRANCH_FORKED:
            self._forked(row, event, session_id)
            return
        line = row.get("lines", {}).get(event.stream)
        if line is not None and self._on_branch(row, row["branches"][line], event, session_id):
            return
        if kind in ITEM_EVENT_TYPES:
            self._item(row, event)
            # Legacy usage, before a stream's first ModelResponded: usage.py's rule, so
            # `sessions` and `usage` agree.
            if event.stream not in row["responded"] and legacy_counts(
                row["responses"], event.stream, metadata
            ):
                row["legacy"] += int(json.loads(metadata[events.USAGE_KEY]).get("total_tokens", 0))
        elif kind == events.SESSION_STARTED:
            if event.revision == 0 or not row["agent"]:
                body = json.loads(event.data)
                row["app"] = str(body.get("app_name", ""))
                row["user"] = str(body.get("user_id", ""))
                row["agent"] = str(body.get("agent_name") or row["agent"])
        elif kind == events.SUBAGENT_STARTED:
            if events.INDEX_KEY not in metadata:
                return  # the subsession's own copy
            subagent, item_json = events.decode_subagent_started(event.data)
            self._speaker(row, subagent.source_agent)
            row["started"] += 1
            self.streams.setdefault(subagent.stream, [session_id, -1, GENESIS])
            if item_json is not None:
                self._item(row, event)
        elif kind == events.SUBAGENT_COMPLETED:
            if events.CLOSES_KEY not in metadata:
                return  # the subsession's own copy
            outcome = events.decode_subagent_completed(event.data)[2]
            row["closed" if outcome == "success" else "failed"] += 1
        elif kind == events.ITEM_POPPED:
            row["items"] = max(0, row["items"] - 1)
        elif kind == events.SESSION_CLEARED:
            through = events.SessionCleared.decode(event.data).through_index
            row["items"] = 0  # everything written before a clear is hidden
            row["floor"] = max(row["floor"], through)
            row["cleared"] = True
        elif kind == events.GUARDRAIL_DECIDED:
            body = json.loads(event.data)
            self._speaker(row, body.get("agent"))
            if body.get("decision") == "BLOCK":
                row["blocks"] += 1
        elif kind == events.AUTHORITY_GRANTED:
            self._speaker(row, json.loads(event.data).get("agent"))
        elif kind == events.AUTHORITY_REFUSED:
            row["refusals"] += 1
        elif kind == events.MODEL_RESPONDED:
            answer = ModelResponse.decode(event.data)
            self._speaker(row, answer.agent)
            if event.stream not in row["responded"]:
                row["responded"].append(event.stream)
            row["tokens"] += answer.usage.total_tokens
        elif kind == CHECKPOINT and event.stream == ledger_stream(session_id):
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
            "last": _micros(event.recorded_at),
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
        branch["last"] = max(branch["last"], _micros(event.recorded_at))
        if kind in ITEM_EVENT_TYPES:
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
            # It is a subagent of its own on the branch, closed there (by a run, or by the
            # branch's end): counted as started, so a close of it leaves none open.
            for continuation in events.BranchStarted.decode(event.data).continuations.values():
                row["lines"][continuation] = row["lines"][event.stream]
                self.streams.setdefault(continuation, [session_id, -1, GENESIS])
                row["started"] += 1
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
            checkpoint = Checkpoint.decode(json.loads(event.data))
        except (ValueError, InvalidInput) as error:
            mark["problem"] = f"the checkpoint is malformed: {error}"
            return
        mark["key"] = checkpoint.key_id
        mark["problem"] = _checkpoint_problem(self.streams, checkpoint, event, session_id, mark)
        self.fresh[session_id] = checkpoint

    def _fold_key(self, event: RecordedEvent) -> None:
        if event.type == KEY_ROTATED:
            try:
                body = json.loads(event.data)
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
        """Record whether the newest checkpoint's signature holds under ``public``."""
        mark = self.sessions[session_id]["ck"]
        if checkpoint is None or checkpoint.key_id != mark["key"]:
            mark["problem"] = f"{ledger_stream(session_id)}@{mark['rev']} cannot be read back"
            return
        mark["sig"] = checkpoint.verify(public)

    def rows(self, trusted: Mapping[str, Ed25519PublicKey]) -> list[SessionRow]:
        """Every session with its session stream, newest activity first."""
        out = []
        for session_id, row in self.sessions.items():
            if session_stream(session_id) not in self.streams or row["first"] is None:
                continue  # an authority log or checkpoints without a session
            ledger, detail = _ledger(session_id, row, trusted)
            started, closed, failed = row["started"], row["closed"], row["failed"]
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
            out.append(
                SessionRow(
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
                    ledger=ledger,
                    ledger_detail=detail,
                    branches=branches,
                )
            )
        out.sort(key=lambda r: (r.last_activity, r.session_id), reverse=True)
        return out


def _checkpoint_problem(
    streams: Mapping[str, list[Any]],
    checkpoint: Checkpoint,
    event: RecordedEvent,
    session_id: str,
    mark: dict[str, Any],
) -> str | None:
    """What is wrong with a checkpoint against the heads seen so far (None: nothing yet);
    heads below what was seen go to ``mark["pending"]``."""
    if checkpoint.session_id != session_id:
        return "a checkpoint of another session"
    if checkpoint.sequence != event.revision or checkpoint.previous != event.metadata.get(PREV_KEY):
        return f"signed for ledger revision {checkpoint.sequence}: reordered or spliced"
    for stream, (revision, digest) in sorted(checkpoint.heads.items()):
        seen = streams.get(stream)
        if seen is None or seen[0] != session_id:
            return f"it names {stream}, which the store does not hold for this session"
        if revision > seen[1]:
            return f"it names {stream}@{revision}: the stream ends at @{seen[1]} (truncated)"
        if revision == seen[1]:
            if digest != seen[2]:
                return f"{stream}@{revision} is not what the checkpoint signed"
        else:
            mark["pending"].append([stream, revision, digest])
    return None


def _ledger(
    session_id: str, row: Mapping[str, Any], trusted: Mapping[str, Ed25519PublicKey]
) -> tuple[str, str | None]:
    if row["broken"] is not None:
        return "broken chain", row["broken"]
    mark = row["ck"]
    if mark is None:
        return "unsigned", "no checkpoint: a cut tail would not show"
    where = f"{ledger_stream(session_id)}@{mark['rev']}"
    if mark.get("problem") is not None:
        return f"FAILED: {mark['problem']}", where
    if mark["key"] not in trusted:
        return f"untrusted key {mark['key']}", f"{where}: give its public key with --pubkey"
    if mark["sig"] is False:
        return "FAILED: the signature is invalid", where
    if mark["sig"] is None:
        return "unchecked", where  # not reached: refresh checks every trusted signature
    return "ok", None


def _micros(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000)


def _moment(micros: int) -> datetime:
    return datetime.fromtimestamp(micros / 1_000_000, UTC)


# -- the driver: load, fold what is new, settle, save ---------------------------------


@dataclass(frozen=True)
class Listing:
    """What one :func:`refresh` found.

    Attributes:
        rows: Every session, newest activity first.
        position: The global position folded through (None: the store is empty).
        folded: Events of session trees (and key rotations) this call folded (0: nothing
            new since the last save; the saves of projections do not count).
        saved: Whether the state was saved (False when nothing changed, or the store
            refused the save: see ``warning``).
        warning: One line on what went wrong loading or saving, if anything did.
    """

    rows: list[SessionRow]
    position: int | None
    folded: int
    saved: bool
    warning: str | None = None


Progress = Callable[[int], None]


async def refresh(
    store: EventStore,
    *,
    keys: Mapping[str, Ed25519PublicKey] | None = None,
    progress: Progress | None = None,
    fresh: bool = False,
) -> Listing:
    """Bring the saved catalog up to date and return its rows.

    Loads the catalog's last save, folds every event written since (the first call
    reads the whole global order, in pages of :data:`PAGE`, calling ``progress``
    with the number of events of each page), settles checkpoint heads and signatures
    with one point read each, and saves the state on top of the save it loaded. If a
    twin saved in between (``ConcurrencyError``), it loads that save and folds again
    from there. A store that refuses the save (read-only) still gets its rows, with
    ``warning`` set; so does a saved catalog that cannot be read back (it is folded
    again from the start and saved over).

    Args:
        store: The store to list.
        keys: Trusted public keys by key id: a checkpoint signed by one of them, or
            by a key a recorded rotation from them leads to, can be ``ok``.
        progress: Called with each page's event count while reading.
        fresh: Ignore the saved catalog: fold every event from the start, and save
            nothing. The save lives in the store it describes, so anyone who can write
            the store can forge it; this does not trust it (``verify`` is the full check).

    Raises:
        StoreUnavailable: The store could not be read.
    """
    trusted_keys = dict(keys or {})
    if fresh:
        unsaved = Catalog()
        position, folded = await _catch_up(store, unsaved, None, progress)
        trusted = unsaved.trusted(trusted_keys)
        await _settle(store, unsaved, trusted)
        return Listing(unsaved.rows(trusted), position, folded, False)
    damaged = None
    for _ in range(_SAVE_ATTEMPTS):
        try:
            saved = await projections.load(store, NAME)
        except projections.DamagedProjection as error:
            # Derived data: fold it again from the streams and save over the damage.
            damaged = f"the saved catalog was damaged ({error}) and is rebuilt"
            head = await store.head(projection_stream(NAME))
            saved = projections.Saved(None, b"", head if head is not None else -1)
        catalog = Catalog.load(saved.state) if saved is not None else None
        position = saved.position if saved is not None and catalog is not None else None
        if catalog is None:
            catalog = Catalog()  # folded from the start and saved over what was there
        position, folded = await _catch_up(store, catalog, position, progress)
        trusted = catalog.trusted(trusted_keys)
        settled = await _settle(store, catalog, trusted)
        rows = catalog.rows(trusted)
        if not folded and not settled and damaged is None:
            return Listing(rows, position, 0, False)
        try:
            await projections.save(
                store, NAME, position=position, state=catalog.dump(), after=saved
            )
        except ConcurrencyError:
            continue  # a twin saved first: start again from its save
        except StoreError as error:
            warning = f"the catalog could not be saved ({error}); the next call reads it again"
            return Listing(rows, position, folded, False, _joined(damaged, warning))
        return Listing(rows, position, folded, True, damaged)
    warning = "the catalog was not saved: other readers kept saving it first"
    return Listing(rows, position, folded, False, _joined(damaged, warning))


def _joined(*warnings: str | None) -> str | None:
    return "; ".join(w for w in warnings if w) or None


async def sessions(
    store: EventStore, *, keys: Mapping[str, Ed25519PublicKey] | None = None
) -> list[SessionRow]:
    """Every session of ``store``, newest activity first (see :func:`refresh`).

    Raises:
        StoreUnavailable: The store could not be read.
    """
    return (await refresh(store, keys=keys)).rows


async def _catch_up(
    store: EventStore, catalog: Catalog, position: int | None, progress: Progress | None
) -> tuple[int | None, int]:
    """Fold every event after ``position``: the last position folded, and how many."""
    folded = 0
    start = position
    while True:
        # From the last position folded, inclusive: a position the store gave out,
        # which KurrentDB finds without a scan (position + 1 may not be one).
        page = await store.read_all(from_position=start, limit=PAGE)
        fresh = [e for e in page if position is None or e.position > position]
        with no_collection():  # the fold makes only acyclic dicts and lists
            for event in fresh:
                folded += catalog.fold(event)
                position = event.position
        if progress is not None and fresh:
            progress(len(fresh))
        if len(page) < PAGE or not fresh:
            return position, folded
        start = position


async def _settle(
    store: EventStore, catalog: Catalog, trusted: Mapping[str, Ed25519PublicKey]
) -> bool:
    """Decide what the fold left open, with one point read each; whether anything changed."""
    changed = False
    for session_id, stream, revision, _ in catalog.unsettled():
        try:
            found = await store.read(stream, from_revision=revision, limit=1)
        except StreamNotFound:
            found = []
        same = found and found[0].revision == revision
        stored = found[0].metadata.get(HASH_KEY) if same else None
        catalog.settle_head(session_id, stream, revision, stored)
        changed = True
    for session_id in catalog.needs_signature(trusted):
        mark = catalog.sessions[session_id]["ck"]
        checkpoint = catalog.fresh.get(session_id)
        if checkpoint is None:  # folded by an earlier call, before its key was trusted
            try:
                ledger = ledger_stream(session_id)
                found = await store.read(ledger, from_revision=mark["rev"], limit=1)
                checkpoint = Checkpoint.decode(json.loads(found[0].data)) if found else None
            except (StreamNotFound, ValueError, InvalidInput):
                checkpoint = None
        catalog.check_signature(session_id, checkpoint, trusted[mark["key"]])
        changed = True
    return changed
