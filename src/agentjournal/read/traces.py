"""The trace projector: a session tree's events as OpenTelemetry span data (pure, no I/O).

:class:`Projector` folds the events of session trees, in commit order, into
:class:`ProjectedSpan` values, each returned once, when the span ends:

* a **run** span (``agentjournal.run``) per run: the events of one run share their
  ``trace_id`` (SCHEMA.md); it ends when the run is over (the next run of the tree
  starts, :meth:`Projector.idle`, or :meth:`Projector.finish`);
* an ``invoke_agent {agent}`` span per subagent, at any depth, under the span of the
  agent that handed off; status ERROR for outcome ``error`` or ``cancelled``;
* a ``chat {model}`` span per model response (``agentjournal.ModelResponded``) with the
  GenAI semantic conventions (``gen_ai.*``);
* an ``execute_tool {tool}`` span per tool call, from the call item to its output item,
  with the call's name, id and the digest of its arguments (never the arguments);
* span events for guardrail decisions and authority refusals, on the span of the agent
  that acted.

A session's **lines** (DESIGN §17) are projected apart: main, and each branch learnt
from the ``agentjournal.BranchForked`` on its parent line's top stream (committed first
in the fork's transaction). A branch's runs are its own traces; its prefix is never
projected again (it is its parent's, exported with the parent's spans). Every run span
of a branch names it (``agentjournal.branch`` and the fork's cut) and carries a
**link** to the parent line's run span at the cut, so a trace viewer goes from a
branch to where it forked. A subagent open at the fork continues on the branch
(``agentjournal.SubagentContinued``): its ``invoke_agent`` span belongs to the first
branch run that speaks in it or closes it. The fork's own events (and a
``BranchDeleted``, a ``LineGuarded``) belong to no run: a fork made after a run never
stretches that run; the closes a line's end writes (``aj.line_end``) end their subagents'
spans, cancelled, without a run.

Ids: a run's trace id is the one its events recorded; the run span reuses the span id
recorded on the run's first event, a subagent span the one recorded on the receiver's
own first event (so the projection joins the live trace, its logs and the guardrail
service's spans). Where nothing was recorded, or a recorded id is taken by another span
of the run, ids are derived from event ids (SHA-256), so projecting the same events
twice gives the same spans. DESIGN.md §14 has the table.

The projector's state is JSON (:meth:`Projector.dump` / :meth:`Projector.load`): a
follower saves it with its position (:mod:`agentjournal.read.projections`) and, restarted,
goes on exactly where the save was.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final, TypeAlias

from agentjournal import events
from agentjournal._calls import CALL_KINDS, call_of
from agentjournal._digests import value_digest
from agentjournal.errors import CodecError
from agentjournal.records import Record, TreeRecords
from agentjournal.streams import MAIN_BRANCH, session_of
from agentjournal.tokens import ModelResponse

__all__ = [
    "Attribute",
    "ProjectedSpan",
    "Projector",
    "SpanEvent",
    "SpanLink",
    "project_tree",
    "session_of_stream",
]

Attribute: TypeAlias = str | int | float | bool
"""An attribute value a span carries."""

SESSION_PREFIX: Final = "AgentSession-"
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_USER_MESSAGE: Final = "UserMessageReceived"
_INPUT: Final = frozenset({events.SESSION_STARTED, _USER_MESSAGE})
"""What a run's input writes: a trace-less one after other events starts the next run."""
_TOOL_CALLS: Final = "AssistantToolCallsGenerated"
_TOOL_RESULT: Final = "ToolResultReceived"
_OTHER_ITEM: Final = "OpenAIItemRecorded"
_OUTPUT_TYPES: Final = frozenset(f"{kind}_output" for kind in CALL_KINDS)
_FAILED: Final = frozenset({"error", "cancelled"})
_STATE_VERSION: Final = 1
_LINE_EVENTS: Final = frozenset(
    {
        events.BRANCH_FORKED,
        events.BRANCH_STARTED,
        events.SUBAGENT_CONTINUED,
        events.BRANCH_DELETED,
        events.LINE_GUARDED,
    }
)
"""A line's own events: they open, continue, guard or end a line and belong to no run (a
``LineGuarded`` is written beside a reset or a clear, outside any run)."""
_BRANCH_PREFIX: Final = "AgentBranch-"
_SUBSESSION_PREFIX: Final = "AgentSubsession-"


@dataclass(frozen=True)
class SpanEvent:
    """An event on a span (a guardrail decision, an authority refusal).

    Attributes:
        name: ``agentjournal.guardrail`` or ``agentjournal.authority_refused``.
        time_ns: When it was recorded (ns since the epoch).
        attributes: What it says.
    """

    name: str
    time_ns: int
    attributes: Mapping[str, Attribute]


@dataclass(frozen=True)
class SpanLink:
    """A link from a span to a span of another trace (a branch's run to its fork point).

    Attributes:
        trace_id: The linked span's trace id.
        span_id: The linked span's id.
        attributes: What the link says (``agentjournal.link``: ``forked_from``).
    """

    trace_id: str
    span_id: str
    attributes: Mapping[str, Attribute]


@dataclass(frozen=True)
class ProjectedSpan:
    """One span, ready for an exporter.

    Attributes:
        trace_id: 32 lowercase hex digits.
        span_id: 16 lowercase hex digits.
        parent_id: The parent's span id; None for a run span.
        name: The span's name.
        start_ns: Start, ns since the epoch.
        end_ns: End, ns since the epoch (never before the start).
        attributes: Its attributes.
        events: Its span events, in time order.
        error: The status description when its status is ERROR, else None.
        links: Its links to spans of other traces (a branch's run span: the parent
            line's run span at the fork).
    """

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Attribute]
    events: Sequence[SpanEvent] = ()
    error: str | None = None
    links: Sequence[SpanLink] = ()

    def as_json(self) -> dict[str, Any]:
        """The span as a JSON object (the ``--jsonl`` line)."""
        return {
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_id,
            "name": self.name,
            "start_time_unix_nano": self.start_ns,
            "end_time_unix_nano": self.end_ns,
            "status": {"code": "ERROR", "message": self.error}
            if self.error is not None
            else {"code": "UNSET"},
            "attributes": dict(self.attributes),
            "events": [
                {"name": e.name, "time_unix_nano": e.time_ns, "attributes": dict(e.attributes)}
                for e in self.events
            ],
            "links": [
                {
                    "trace_id": link.trace_id,
                    "span_id": link.span_id,
                    "attributes": dict(link.attributes),
                }
                for link in self.links
            ],
        }


# -- the fold's state (plain dataclasses of JSON values: dumped and loaded whole) ----------


@dataclass
class _Run:
    trace_id: str
    root_id: str
    first_event: str
    start_ns: int
    end_ns: int
    recorded: bool  # its trace id was recorded (else derived)
    only_input: bool = True  # nothing but its input so far
    sent: bool = False
    agent: str = ""
    error: str | None = None
    used: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    position: int | None = None  # its first event's global position


@dataclass
class _Subagent:
    stream: str
    agent: str
    agent_id: str
    source: str
    call_id: str
    parent_stream: str
    twin: str  # the parent copy's event id: what a derived span id is made from
    trace_id: str
    parent_id: str
    start_ns: int
    end_ns: int
    span_id: str | None = None
    candidate: str | None = None  # the span id recorded on its own first event
    events: list[dict[str, Any]] = field(default_factory=list)
    continues: str | None = None  # a continuation: the subsession it continues at a fork


@dataclass
class _Call:
    call_id: str
    kind: str
    name: str
    digest: str
    agent: str
    stream: str
    event_id: str
    trace_id: str
    parent_id: str
    start_ns: int


@dataclass
class _Tree:
    session_id: str
    run: _Run | None = None
    subagents: dict[str, _Subagent] = field(default_factory=dict)
    calls: dict[str, _Call] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # call id -> why it did not run
    responded: dict[str, int] = field(default_factory=dict)  # stream -> last response's end
    # The line (DESIGN §17): main's tree is keyed by the session id, a branch's by its top
    # stream (it holds "@", never in an id). States saved before lines load as main.
    line: str = MAIN_BRANCH
    top: str = ""  # the line's top stream ("": the session stream)
    parent: str | None = None  # the parent line's tree key
    cut: int | None = None  # the global position the branch left its parent at
    fork: dict[str, Any] | None = None  # what its run spans say of the fork, and their link
    # [first position, trace id, root span id] of each run, oldest first: what a fork made
    # later finds the run at its cut in (one entry a run).
    runs: list[list[Any]] = field(default_factory=list)


def session_of_stream(stream: str) -> str | None:
    """The session id of a session stream (``AgentSession-{id}``), else None
    (:func:`agentjournal.streams.session_of`)."""
    return session_of(stream)


def _ns(when: datetime | None) -> int:
    if when is None:
        return 0
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def _parse_time(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return _ns(datetime.fromisoformat(text))
    except ValueError:
        return None


def _derived(kind: str, event_id: str, digits: int) -> str:
    """An id derived from an event id: the same event always gives the same id, never zero."""
    digest = hashlib.sha256(f"agentjournal.trace:{kind}:{event_id}".encode()).hexdigest()
    value = digest[:digits]
    return value if int(value, 16) else "1".rjust(digits, "0")


def _recorded(metadata: Mapping[str, str], key: str, pattern: re.Pattern[str]) -> str | None:
    value = metadata.get(key)
    if value is None or not pattern.fullmatch(value) or not int(value, 16):
        return None
    return value


def _author(record: Record) -> str | None:
    """The agent an event speaks for, when it says."""
    body = record.body or {}
    if record.type == events.SUBAGENT_STARTED:
        source = body.get("extensions", {}).get("openai", {}).get("source_agent")
        return source if isinstance(source, str) else None
    for key in ("author_name", "agent"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
    return None


class Projector:
    """Folds session trees' events, in commit order, into spans (see the module docs).

    Args:
        session_id: Project only this session tree; None: every tree of the store.
        line: Send only the spans of this line of the session: ``"main"`` or a branch's
            name (None: every line). Every line is still folded: a branch's runs link
            to the run at their fork on the line below.

    The state belongs to this object: change it only through :meth:`feed`,
    :meth:`idle` and :meth:`finish`.
    """

    def __init__(self, session_id: str | None = None, *, line: str | None = None) -> None:
        self._only = session_id
        self._line = line
        self._streams: dict[str, str] = {}  # stream -> its tree (main's or a branch's)
        self._trees: dict[str, _Tree] = {}
        # Loaded from a state saved before lines: it never saw the BranchForked of a branch
        # forked before that save, so it learns such a branch from the branch's own events.
        self._learn = False

    # -- state ----------------------------------------------------------------------

    def dump(self) -> bytes:
        """The state as JSON bytes (what a follower saves with its position)."""
        state = {
            "version": _STATE_VERSION,
            "only": self._only,
            "line": self._line,
            "streams": self._streams,
            "trees": {key: asdict(tree) for key, tree in self._trees.items()},
        }
        if self._learn:  # kept across saves: such a branch may first speak much later
            state["learn_branches"] = True
        return json.dumps(state, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def load(cls, data: bytes) -> Projector:
        """A projector in the state :meth:`dump` saved.

        Raises:
            ValueError: ``data`` is not a state this version saves.
        """
        state = json.loads(data)
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError("not a trace projector state of this version")
        projector = cls(state["only"], line=state.get("line"))
        # A state saved before lines has no "line" (nor any line field below).
        projector._learn = "line" not in state or bool(state.get("learn_branches"))
        projector._streams = dict(state["streams"])
        for key, tree in state["trees"].items():
            run = tree["run"]
            projector._trees[key] = _Tree(
                session_id=tree["session_id"],
                run=_Run(**run) if run is not None else None,
                subagents={k: _Subagent(**v) for k, v in tree["subagents"].items()},
                calls={k: _Call(**v) for k, v in tree["calls"].items()},
                refused=dict(tree["refused"]),
                responded=dict(tree["responded"]),
                # A state saved before lines has none of these: its trees are main lines.
                line=tree.get("line", MAIN_BRANCH),
                top=tree.get("top", ""),
                parent=tree.get("parent"),
                cut=tree.get("cut"),
                fork=tree.get("fork"),
                runs=[list(entry) for entry in tree.get("runs", [])],
            )
        return projector

    @property
    def session_id(self) -> str | None:
        """The one session tree projected, or None for all."""
        return self._only

    @property
    def line(self) -> str | None:
        """The one line whose spans are sent, or None for every line."""
        return self._line

    def knows(self, stream: str) -> bool:
        """Whether ``stream`` belongs to a session tree this projector has seen."""
        return stream in self._streams

    def learns(self, stream: str) -> bool:
        """Whether ``stream`` is the top stream of a branch of a followed session that this
        projector, loaded from a state saved before lines, has not seen fork: fed its
        ``BranchStarted`` (revision 0) first, it knows the branch's name and fork as if
        it had seen the fork; else it learns the branch from its stream's name alone."""
        return self._unknown_branch(stream) is not None

    def _unknown_branch(self, stream: str) -> str | None:
        """The session of an unknown branch top stream this projector learns, else None."""
        if not self._learn or stream in self._streams or not stream.startswith(_BRANCH_PREFIX):
            return None
        session, join, key = stream[len(_BRANCH_PREFIX) :].partition("@")
        if not join or not key or session not in self._trees:  # only a session it followed
            return None
        return session

    # -- the fold -------------------------------------------------------------------

    def feed(self, record: Record) -> list[ProjectedSpan]:
        """Fold one event (in commit order); return the spans it ended."""
        tree = self._tree_of(record)
        if tree is None:
            return []
        if record.type in _LINE_EVENTS:
            self._line_event(tree, record)
            return []
        if record.type == events.SUBAGENT_COMPLETED and events.LINE_END_KEY in record.metadata:
            # A line's end closes what was open on it: no run writes it (its trace ids are
            # the ending object's), so it must neither start nor stretch one.
            return self._shown(tree, self._line_closed(tree, record))
        sent: list[ProjectedSpan] = []
        run = self._run_for(tree, record, sent)
        when = _ns(record.recorded_at)
        run.end_ns = max(run.end_ns, when)
        if record.type not in _INPUT:
            run.only_input = False
        author = _author(record)
        if not run.agent and author and record.stream == _top_of(tree):
            run.agent = author
        self._adopt(tree, run, record.stream, when)
        self._notice_own(tree, record, author)
        body = record.body or {}
        kind = record.type
        if kind == events.SUBAGENT_STARTED and record.opens is not None:
            self._opened(tree, run, record, body, when)
        elif kind == events.SUBAGENT_COMPLETED:
            sent.extend(self._closed(tree, run, body, when))
        elif kind == events.MODEL_RESPONDED:
            sent.extend(self._responded(tree, run, record, when))
        elif kind == events.GUARDRAIL_DECIDED:
            self._decided(tree, run, record, body, when)
        elif kind == events.AUTHORITY_REFUSED:
            self._refused(tree, run, record, body, when)
        else:
            self._call_or_output(tree, run, record, body, when, sent)
        return self._shown(tree, sent)

    def _shown(self, tree: _Tree, spans: list[ProjectedSpan]) -> list[ProjectedSpan]:
        """``spans`` (of ``tree``) when its line is sent, else none."""
        return spans if self._line is None or tree.line == self._line else []

    def idle(self, now: datetime, quiet: timedelta) -> list[ProjectedSpan]:
        """Send the run span of every run whose tree wrote nothing for ``quiet`` before ``now``
        (by the store's commit times): a follower takes such a run as over. Its subagents and
        tool calls still open are sent when they end."""
        limit = _ns(now) - quiet // timedelta(microseconds=1) * 1000
        sent = []
        for tree in self._in_order():
            run = tree.run
            if run is not None and not run.sent and run.end_ns <= limit and not run.only_input:
                sent.extend(self._shown(tree, [self._run_span(tree, run)]))
        return sent

    def finish(self) -> list[ProjectedSpan]:
        """Everything not sent yet, as it is now (a one-shot export's end): spans still open
        end at their run's last event and carry ``agentjournal.in_progress``."""
        sent: list[ProjectedSpan] = []
        for tree in self._in_order():
            spans: list[ProjectedSpan] = []
            for call in list(tree.calls.values()):
                spans.append(self._call_span(tree, call, None, in_progress=True))
            tree.calls.clear()
            for sub in sorted(tree.subagents.values(), key=lambda s: -s.start_ns):
                if sub.trace_id:  # a continuation no run of its branch spoke in: no span
                    spans.append(self._subagent_span(tree, sub, None, in_progress=True))
            tree.subagents.clear()
            run = tree.run
            if run is not None and not run.sent and not run.only_input:
                spans.append(self._run_span(tree, run))
            sent.extend(self._shown(tree, spans))
        return sent

    def _in_order(self) -> list[_Tree]:
        """The trees by key: an order a saved and loaded state keeps (its JSON is sorted)."""
        return [self._trees[key] for key in sorted(self._trees)]

    # -- which tree, which run -----------------------------------------------------

    def _tree_of(self, record: Record) -> _Tree | None:
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
            tree = self._trees[key] = _Tree(key)
        return tree

    def _run_for(self, tree: _Tree, record: Record, sent: list[ProjectedSpan]) -> _Run:
        """The run an event belongs to; a new trace id (or, without trace ids, a new user
        input after other events) starts the next run, and ends the one before."""
        trace = _recorded(record.metadata, events.TRACE_ID_KEY, _TRACE_ID)
        run = tree.run
        if run is not None:
            if trace is None or trace == run.trace_id:
                if trace is not None or record.type not in _INPUT or run.only_input:
                    return run
            elif run.only_input and not run.recorded and not run.sent:
                # The run's input was written before anything knew its trace: adopt it.
                run.trace_id, run.recorded = trace, True
                run.root_id = self._root_id(record, run.first_event)
                run.used = [run.root_id]
                if tree.runs and run.position is not None and tree.runs[-1][0] == run.position:
                    tree.runs[-1] = [run.position, run.trace_id, run.root_id]
                return run
            sent.extend(self._run_over(tree))
        when = _ns(record.recorded_at)
        root = self._root_id(record, record.id)
        tree.run = _Run(
            trace_id=trace or _derived("trace", record.id, 32),
            root_id=root,
            first_event=record.id,
            start_ns=when,
            end_ns=when,
            recorded=trace is not None,
            used=[root],
            position=record.position,
        )
        if record.position is not None:
            tree.runs.append([record.position, tree.run.trace_id, root])
        return tree.run

    @staticmethod
    def _root_id(record: Record, first_event: str) -> str:
        if _recorded(record.metadata, events.TRACE_ID_KEY, _TRACE_ID) is not None:
            recorded = _recorded(record.metadata, events.SPAN_ID_KEY, _SPAN_ID)
            if recorded is not None:
                return recorded
        return _derived("run", first_event, 16)

    def _run_over(self, tree: _Tree) -> list[ProjectedSpan]:
        """The tree's run is over (another starts): its run span, and its tool calls that
        never got an output. Its open subagents stay open: a later run may close them."""
        run = tree.run
        if run is None:
            return []
        sent = [
            self._call_span(tree, call, "no output was recorded for this call")
            for call in tree.calls.values()
            if call.trace_id == run.trace_id
        ]
        tree.calls = {k: c for k, c in tree.calls.items() if c.trace_id != run.trace_id}
        tree.refused.clear()
        tree.responded.clear()
        if not run.sent and not run.only_input:
            sent.append(self._run_span(tree, run))
        return sent

    # -- lines ----------------------------------------------------------------------

    def _line_event(self, tree: _Tree, record: Record) -> None:
        """A fork's marker makes its branch's tree, the branch's first event names its
        continuations, each continuation opens its subagent on the branch (no run yet)."""
        try:
            if record.type == events.BRANCH_FORKED and record.stream == _top_of(tree):
                self._forked(tree, record, events.BranchForked.decode(_bytes(record)))
            elif (
                record.type == events.BRANCH_STARTED
                and record.revision == 0
                and record.stream == _top_of(tree)
            ):
                started = events.BranchStarted.decode(_bytes(record))
                own = f"{_SUBSESSION_PREFIX}{tree.session_id}-"  # only this session's streams
                for continuation in started.continuations.values():
                    if continuation.startswith(own) and continuation not in self._streams:
                        self._streams[continuation] = self._streams[record.stream]
            elif record.type == events.SUBAGENT_CONTINUED and record.revision == 0:
                self._continued(tree, record, events.SubagentContinued.decode(_bytes(record)))
        except (CodecError, RecursionError):
            return  # not what agentjournal writes: the verifier reports it

    def _forked(self, tree: _Tree, record: Record, forked: events.BranchForked) -> None:
        """A branch left this line: its own tree, and the link its run spans carry."""
        stream = forked.branch_stream
        own = f"{_BRANCH_PREFIX}{tree.session_id}@"
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
        self._trees[stream] = _Tree(
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

    def _learnt(self, record: Record) -> str | None:
        """The tree of a branch forked before a pre-lines save (:meth:`learns`): from its
        ``BranchStarted`` (the twin of its ``BranchForked``: the same fields), else from
        its stream's name (its key: the branch's name unless the name needed hashing;
        where it forked unknown)."""
        stream = record.stream
        session = self._unknown_branch(stream)
        assert session is not None
        if record.type == events.BRANCH_STARTED and record.revision == 0:
            try:
                started = events.BranchStarted.decode(_bytes(record))
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
        self._trees[stream] = _Tree(
            session,
            line=stream.partition("@")[2],
            top=stream,
            fork=dict.fromkeys(("event", "parent", "kind", "value", "position", "link")),
        )
        return stream

    def _run_at(self, tree: _Tree, position: int) -> list[str] | None:
        """[trace id, root span id] of the run a line was in just before ``position``: its
        newest run started before it, else (a cut in a branch's prefix) the line below's
        before the branch's own cut."""
        at: _Tree | None = tree
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

    def _continued(self, tree: _Tree, record: Record, continued: events.SubagentContinued) -> None:
        """A subagent open at the fork goes on in this continuation: open on the branch, its
        span belongs to the first branch run that speaks in it (:meth:`_adopt`)."""
        if continued.subsession_stream != record.stream or record.stream in tree.subagents:
            return
        when = _ns(record.recorded_at)
        tree.subagents[record.stream] = _Subagent(
            stream=record.stream,
            agent=continued.agent_type,
            agent_id=continued.agent_id,
            source=continued.source_agent,
            call_id=continued.call_id,
            parent_stream=continued.parent_stream,
            twin=record.id,
            trace_id="",  # no run yet
            parent_id="",
            start_ns=when,
            end_ns=when,
            continues=continued.continues.stream,
        )

    def _adopt(self, tree: _Tree, run: _Run, stream: str, when: int) -> None:
        """A continuation (and the continuations it is inside) joins ``run``: the first run
        of its branch that writes in it or closes it."""
        chain: list[_Subagent] = []  # innermost first; a crafted cycle ends where it closes
        sub = tree.subagents.get(stream)
        while sub is not None and not sub.trace_id and sub not in chain:
            chain.append(sub)
            sub = tree.subagents.get(sub.parent_stream)
        for sub in reversed(chain):  # outermost first: each under its parent's span
            sub.parent_id = self._owner(tree, run, sub.parent_stream)
            sub.trace_id = run.trace_id
            sub.start_ns = sub.end_ns = when

    # -- ids ------------------------------------------------------------------------

    def _notice_own(self, tree: _Tree, record: Record, author: str | None) -> None:
        """Remember the span id recorded on a subagent's own first event (not its twin, not
        the sender's handoff output, not a guardrail call's span, not a closing)."""
        sub = tree.subagents.get(record.stream)
        if sub is None or sub.span_id is not None or sub.candidate is not None:
            return
        if record.type in (events.GUARDRAIL_DECIDED, events.SUBAGENT_COMPLETED):
            return
        if author != sub.agent or (record.type == events.SUBAGENT_STARTED and record.opens is None):
            return
        if _recorded(record.metadata, events.TRACE_ID_KEY, _TRACE_ID) == sub.trace_id:
            sub.candidate = _recorded(record.metadata, events.SPAN_ID_KEY, _SPAN_ID)

    def _subagent_id(self, run: _Run, sub: _Subagent) -> str:
        """A subagent's span id, fixed the first time anything needs it."""
        if sub.span_id is None:
            chosen = sub.candidate
            if chosen is None or chosen in run.used or run.trace_id != sub.trace_id:
                chosen = _derived("subagent", sub.twin, 16)
            if run.trace_id == sub.trace_id:
                run.used.append(chosen)
            sub.span_id = chosen
        return sub.span_id

    def _owner(self, tree: _Tree, run: _Run, stream: str) -> str:
        """The span an event of ``stream`` belongs under: its subagent's, when the subagent
        was opened in this run, else the run's."""
        sub = tree.subagents.get(stream)
        if sub is not None and sub.trace_id == run.trace_id:
            return self._subagent_id(run, sub)
        return run.root_id

    def _span_events(self, tree: _Tree, run: _Run, stream: str) -> list[dict[str, Any]]:
        sub = tree.subagents.get(stream)
        if sub is not None and sub.trace_id == run.trace_id:
            return sub.events
        return run.events

    # -- what each event does -------------------------------------------------------

    def _opened(
        self, tree: _Tree, run: _Run, record: Record, body: Mapping[str, Any], when: int
    ) -> None:
        child = record.opens
        assert child is not None
        openai = body.get("extensions", {}).get("openai", {})
        self._streams[child] = self._streams[record.stream]  # its line's tree
        tree.subagents[child] = _Subagent(
            stream=child,
            agent=str(body.get("agent_type", "")),
            agent_id=str(body.get("agent_id", "")),
            source=str(openai.get("source_agent", "")),
            call_id=str(openai.get("call_id", "")),
            parent_stream=record.stream,
            twin=record.id,
            trace_id=run.trace_id,
            parent_id=self._owner(tree, run, record.stream),
            start_ns=when,
            end_ns=when,
        )

    def _closed(
        self, tree: _Tree, run: _Run, body: Mapping[str, Any], when: int
    ) -> list[ProjectedSpan]:
        openai = body.get("extensions", {}).get("openai", {})
        closed = str(openai.get("subsession_stream", ""))
        self._adopt(tree, run, closed, when)  # a continuation closed before it spoke
        sub = tree.subagents.pop(closed, None)
        if sub is None:  # its other copy closed it already
            return []
        outcome = str(body.get("outcome", ""))
        error = None
        if outcome in _FAILED:
            error = f"{outcome}: {openai.get('reason') or 'no reason given'}"
            if sub.trace_id == run.trace_id and run.error is None:
                run.error = f"subagent {sub.agent} ended with {error}"
        return [self._subagent_span(tree, sub, when, outcome=outcome, error=error)]

    def _line_closed(self, tree: _Tree, record: Record) -> list[ProjectedSpan]:
        """A close a line's end wrote (``aj.line_end``): the subagent's span ends then, as
        cancelled; a continuation no run of its branch touched has no span."""
        body = record.body or {}
        openai = body.get("extensions", {}).get("openai", {})
        sub = tree.subagents.pop(str(openai.get("subsession_stream", "")), None)
        if sub is None or not sub.trace_id:  # closed by its other copy, or never touched
            return []
        outcome = str(body.get("outcome", ""))
        error = f"{outcome}: {openai.get('reason') or 'no reason given'}"
        return [
            self._subagent_span(
                tree,
                sub,
                _ns(record.recorded_at),
                outcome=outcome,
                error=error if outcome in _FAILED else None,
            )
        ]

    def _responded(self, tree: _Tree, run: _Run, record: Record, when: int) -> list[ProjectedSpan]:
        try:
            response = ModelResponse.decode((record.data or "").encode())
        except (ValueError, TypeError):
            return []
        end = _parse_time(response.ended_at) or when
        start = _parse_time(response.started_at) or end
        run.start_ns = min(run.start_ns, start)
        run.end_ns = max(run.end_ns, end)
        tree.responded[record.stream] = end
        attributes: dict[str, Attribute] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.agent.name": response.agent,
            "gen_ai.usage.input_tokens": response.usage.input_tokens,
            "gen_ai.usage.output_tokens": response.usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": response.usage.cached_input_tokens,
            "gen_ai.usage.reasoning.output_tokens": response.usage.reasoning_tokens,
            "agentjournal.session_id": tree.session_id,
            "agentjournal.stream": record.stream,
            "agentjournal.event_id": record.id,
        }
        if response.system:
            attributes["gen_ai.system"] = response.system
            attributes["gen_ai.provider.name"] = response.system
        if response.model:
            attributes["gen_ai.request.model"] = response.model
            attributes["gen_ai.response.model"] = response.model
        if response.response_id:
            attributes["gen_ai.response.id"] = response.response_id
        if response.outputs:
            attributes["agentjournal.outputs"] = ",".join(
                f"{output}={count}" for output, count in sorted(response.outputs.items())
            )
        name = f"chat {response.model}" if response.model else "chat"
        return [
            ProjectedSpan(
                trace_id=run.trace_id,
                span_id=self._fresh(run, "model", record.id),
                parent_id=self._owner(tree, run, record.stream),
                name=name,
                start_ns=start,
                end_ns=max(start, end),
                attributes=attributes,
            )
        ]

    def _fresh(self, run: _Run, kind: str, event_id: str) -> str:
        span_id = _derived(kind, event_id, 16)
        run.used.append(span_id)
        return span_id

    def _decided(
        self, tree: _Tree, run: _Run, record: Record, body: Mapping[str, Any], when: int
    ) -> None:
        attributes: dict[str, Attribute] = {}
        for key in (
            "action_id",
            "action_type",
            "decision",
            "guardrail_decision",
            "reason_code",
            "enforcement",
            "agent",
            "subject",
            "call_id",
            "payload_digest",
            "modified_payload_digest",
        ):
            value = body.get(key)
            if isinstance(value, str):
                attributes[key] = value
        latency = body.get("latency_ms")
        if isinstance(latency, int | float) and not isinstance(latency, bool):
            attributes["latency_ms"] = float(latency)
        span_id = _recorded(record.metadata, events.SPAN_ID_KEY, _SPAN_ID)
        if span_id is not None:  # the guardrail call's own span: the service's spans hang there
            attributes["guardrail_span_id"] = span_id
        attributes["event_id"] = record.id
        self._span_events(tree, run, record.stream).append(
            asdict(SpanEvent("agentjournal.guardrail", when, attributes))
        )
        call_id = body.get("call_id")
        if body.get("decision") == "BLOCK" and isinstance(call_id, str):
            code = body.get("reason_code") or "no reason code"
            tree.refused[call_id] = f"the guardrail blocked the call ({code})"
        if body.get("enforcement") in ("run_stopped", "unenforceable") and run.error is None:
            run.error = f"guardrail {body.get('decision')} on {body.get('subject')} stopped the run"

    def _refused(
        self, tree: _Tree, run: _Run, record: Record, body: Mapping[str, Any], when: int
    ) -> None:
        attributes: dict[str, Attribute] = {}
        # Never the refused value: it is an argument of the conversation.
        for key in (
            "gate",
            "agent",
            "subject",
            "kind",
            "reason",
            "scope",
            "ceiling",
            "call_id",
            "arguments_digest",
            "enforcement",
        ):
            value = body.get(key)
            if isinstance(value, str):
                attributes[key] = value
        attributes["event_id"] = record.id
        self._span_events(tree, run, record.stream).append(
            asdict(SpanEvent("agentjournal.authority_refused", when, attributes))
        )
        call_id = body.get("call_id")
        if isinstance(call_id, str):
            tree.refused[call_id] = f"authority refused the call ({body.get('gate')} gate)"
        if body.get("enforcement") == "run_stopped" and run.error is None:
            run.error = f"authority refused {body.get('subject')} and stopped the run"

    def _call_or_output(
        self,
        tree: _Tree,
        run: _Run,
        record: Record,
        body: Mapping[str, Any],
        when: int,
        sent: list[ProjectedSpan],
    ) -> None:
        item_type = record.metadata.get(events.ITEM_TYPE_KEY)
        call_id = record.metadata.get(events.CALL_ID_KEY)
        if record.type == _TOOL_RESULT or item_type in _OUTPUT_TYPES:
            key = call_id or body.get("call_id")
            call = tree.calls.pop(key, None) if isinstance(key, str) else None
            if call is not None:
                refused = tree.refused.pop(call.call_id, None)
                sent.append(self._call_span(tree, call, refused, end=when))
            return
        if record.type not in (_TOOL_CALLS, _OTHER_ITEM):
            return
        # The runner writes a call with its output after it ran: the call started when the
        # response that asked for it had arrived (or, without one, when it was written).
        start = min(tree.responded.get(record.stream, when), when)
        for kind, found_id, name, arguments in _calls(record, body):
            tree.calls[found_id] = _Call(
                call_id=found_id,
                kind=kind,
                name=name,
                digest=value_digest(arguments),
                agent=_author(record) or "",
                stream=record.stream,
                event_id=f"{record.id}:{found_id}",
                trace_id=run.trace_id,
                parent_id=self._owner(tree, run, record.stream),
                start_ns=start,
            )

    # -- spans ----------------------------------------------------------------------

    def _call_span(
        self,
        tree: _Tree,
        call: _Call,
        error: str | None,
        *,
        end: int | None = None,
        in_progress: bool = False,
    ) -> ProjectedSpan:
        run = tree.run
        if end is None:
            end = run.end_ns if run is not None and run.trace_id == call.trace_id else call.start_ns
        attributes: dict[str, Attribute] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.call_id,
            "gen_ai.tool.type": "function" if call.kind == "function_call" else call.kind,
            "agentjournal.arguments_digest": call.digest,
            "agentjournal.session_id": tree.session_id,
            "agentjournal.stream": call.stream,
        }
        if call.agent:
            attributes["gen_ai.agent.name"] = call.agent
        if in_progress:
            attributes["agentjournal.in_progress"] = True
        if run is not None and run.trace_id == call.trace_id:
            span_id = self._fresh(run, "tool", call.event_id)
        else:
            span_id = _derived("tool", call.event_id, 16)
        return ProjectedSpan(
            trace_id=call.trace_id,
            span_id=span_id,
            parent_id=call.parent_id,
            name=f"execute_tool {call.name}",
            start_ns=call.start_ns,
            end_ns=max(call.start_ns, end),
            attributes=attributes,
            error=error,
        )

    def _subagent_span(
        self,
        tree: _Tree,
        sub: _Subagent,
        end: int | None,
        *,
        outcome: str | None = None,
        error: str | None = None,
        in_progress: bool = False,
    ) -> ProjectedSpan:
        run = tree.run
        if run is not None and run.trace_id == sub.trace_id:
            span_id = self._subagent_id(run, sub)
            if end is None:
                end = run.end_ns
        else:
            span_id = sub.span_id or _derived("subagent", sub.twin, 16)
        end = sub.start_ns if end is None else end
        attributes: dict[str, Attribute] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": sub.agent,
            "gen_ai.agent.id": sub.agent_id,
            "agentjournal.session_id": tree.session_id,
            "agentjournal.stream": sub.stream,
            "agentjournal.parent_stream": sub.parent_stream,
            "agentjournal.source_agent": sub.source,
            "agentjournal.handoff_call_id": sub.call_id,
        }
        if outcome is not None:
            attributes["agentjournal.outcome"] = outcome
        if sub.continues is not None:
            attributes["agentjournal.continues"] = sub.continues
            attributes["agentjournal.branch"] = tree.line
        if in_progress:
            attributes["agentjournal.in_progress"] = True
        return ProjectedSpan(
            trace_id=sub.trace_id,
            span_id=span_id,
            parent_id=sub.parent_id,
            name=f"invoke_agent {sub.agent}",
            start_ns=sub.start_ns,
            end_ns=max(sub.start_ns, end),
            attributes=attributes,
            events=_events(sub.events),
            error=error,
        )

    def _run_span(self, tree: _Tree, run: _Run) -> ProjectedSpan:
        run.sent = True
        attributes: dict[str, Attribute] = {
            "agentjournal.session_id": tree.session_id,
            "agentjournal.first_event": run.first_event,
            "agentjournal.trace_recorded": run.recorded,
        }
        if run.agent:
            attributes["gen_ai.agent.name"] = run.agent
        links: tuple[SpanLink, ...] = ()
        fork = tree.fork
        if fork is not None:  # a branch's run: which line, where it left its parent
            attributes["agentjournal.branch"] = tree.line
            attributes["agentjournal.branch_stream"] = tree.top
            for name, key in (
                ("parent_branch", "parent"),
                ("fork_event_id", "event"),
                ("fork_cut_kind", "kind"),
                ("fork_cut_value", "value"),
                ("fork_cut_position", "position"),
            ):
                if fork[key] is not None:  # None: learnt without its fork (Projector.learns)
                    attributes[f"agentjournal.{name}"] = fork[key]
            if fork["link"] is not None:
                trace_id, span_id = fork["link"]
                links = (
                    SpanLink(
                        trace_id,
                        span_id,
                        {"agentjournal.link": "forked_from", "agentjournal.branch": tree.line},
                    ),
                )
        span = ProjectedSpan(
            trace_id=run.trace_id,
            span_id=run.root_id,
            parent_id=None,
            name="agentjournal.run",
            start_ns=run.start_ns,
            end_ns=run.end_ns,
            attributes=attributes,
            events=_events(run.events),
            error=run.error,
            links=links,
        )
        run.events = []
        return span


def _top_of(tree: _Tree) -> str:
    """The top stream of a tree's line: the session stream, or the branch's stream."""
    return tree.top or SESSION_PREFIX + tree.session_id


def _bytes(record: Record) -> bytes:
    return (record.data or "").encode()


def _events(stored: Iterable[dict[str, Any]]) -> tuple[SpanEvent, ...]:
    return tuple(SpanEvent(e["name"], e["time_ns"], dict(e["attributes"])) for e in stored)


def _calls(record: Record, body: Mapping[str, Any]) -> list[tuple[str, str, str, Any]]:
    """The locally executed calls an item event holds: (kind, call id, name, arguments)."""
    item: Any = None
    if record.type == _OTHER_ITEM:
        item = body.get("item")
    else:
        text = body.get("extensions", {}).get("openai", {}).get("item_json")
        if isinstance(text, str):
            try:
                item = json.loads(text)
            except ValueError:
                item = None
    call = call_of(item) if item is not None else None
    if call is not None:
        return [(call.kind, call.call_id, call.name, call.arguments)]
    if record.type != _TOOL_CALLS:
        return []
    found = []  # another integration's event: the canonical fields only
    for entry in body.get("tool_calls", []) or []:
        if isinstance(entry, dict) and isinstance(entry.get("call_id"), str):
            arguments = json.dumps(entry.get("arguments", {}), sort_keys=True)
            found.append(
                ("function_call", entry["call_id"], str(entry.get("tool_name", "")), arguments)
            )
    return found


def project_tree(tree: TreeRecords, *, line: str | None = None) -> list[ProjectedSpan]:
    """Every span of a session tree read with :func:`~agentjournal.walk.read_tree`,
    in the order they end (spans still open last, as :meth:`Projector.finish` sends them).

    The records are folded in commit order, as a follower sees them, so a one-shot
    export and a follower give the same spans. ``line`` keeps one line's spans
    (``"main"`` or a branch's name; None: every line's).
    """
    projector = Projector(tree.session_id, line=line)
    ordered = sorted(
        (r for r in tree.records() if r.position is not None), key=lambda r: r.position or 0
    )
    spans = [span for record in ordered for span in projector.feed(record)]
    return spans + projector.finish()
