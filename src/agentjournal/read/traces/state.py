"""The trace projector's state: runs, open subagents, tool calls and waits for approval,
per line of a session.

Plain dataclasses of JSON values, dumped and loaded whole with the projector
(:meth:`~agentjournal.read.traces.Projector.dump`). They are the projector's own: only
its fold changes them. A state saved before lines existed loads as main lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from agentjournal.read.traces.spans import SpanEvent
from agentjournal.streams import MAIN_BRANCH

STATE_VERSION: Final = 1
SESSION_PREFIX: Final = "AgentSession-"
BRANCH_PREFIX: Final = "AgentBranch-"


@dataclass
class Run:
    """One run of a line: its trace, its root span and what the root span will say."""

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
class Subagent:
    """A subagent open on a line: its ``invoke_agent`` span until it closes."""

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
class Call:
    """A tool call waiting for its output: its ``execute_tool`` span until then."""

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
class Wait:
    """A tool call that waits for a person's approval: its ``await_approval`` span, from
    the question (``InterruptIssued``) until the answer (``InterruptResolved``)."""

    request_id: str
    tool: str
    agent: str
    stream: str
    event_id: str  # the question's: the answer names it
    trace_id: str  # the paused run's
    parent_id: str  # the span of the agent that asked (or the run's)
    span_id: str
    start_ns: int


@dataclass
class Tree:
    """One line of a session tree (main, or a branch) and what is open on it."""

    session_id: str
    run: Run | None = None
    subagents: dict[str, Subagent] = field(default_factory=dict)
    calls: dict[str, Call] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # call id -> why it did not run
    responded: dict[str, int] = field(default_factory=dict)  # stream -> last response's end
    waits: dict[str, Wait] = field(default_factory=dict)  # question event id -> its wait
    # Main's tree is keyed by the session id, a branch's by its top stream (it holds "@",
    # never in an id). States saved before lines load as main.
    line: str = MAIN_BRANCH
    top: str = ""  # the line's top stream ("": the session stream)
    parent: str | None = None  # the parent line's tree key
    cut: int | None = None  # the global position the branch left its parent at
    fork: dict[str, Any] | None = None  # what its run spans say of the fork, and their link
    # [first position, trace id, root span id] of each run, oldest first: what a fork made
    # later finds the run at its cut in (one entry a run).
    runs: list[list[Any]] = field(default_factory=list)


def tree_from_json(tree: Mapping[str, Any]) -> Tree:
    """A tree as ``dataclasses.asdict`` dumped it (a state saved before lines has no line
    fields: its trees are main lines)."""
    run = tree["run"]
    return Tree(
        session_id=tree["session_id"],
        run=Run(**run) if run is not None else None,
        subagents={k: Subagent(**v) for k, v in tree["subagents"].items()},
        calls={k: Call(**v) for k, v in tree["calls"].items()},
        refused=dict(tree["refused"]),
        responded=dict(tree["responded"]),
        waits={k: Wait(**v) for k, v in tree.get("waits", {}).items()},
        line=tree.get("line", MAIN_BRANCH),
        top=tree.get("top", ""),
        parent=tree.get("parent"),
        cut=tree.get("cut"),
        fork=tree.get("fork"),
        runs=[list(entry) for entry in tree.get("runs", [])],
    )


def top_of(tree: Tree) -> str:
    """The top stream of a tree's line: the session stream, or the branch's stream."""
    return tree.top or SESSION_PREFIX + tree.session_id


def span_events(stored: Iterable[dict[str, Any]]) -> tuple[SpanEvent, ...]:
    """Span events as the state keeps them, as records."""
    return tuple(SpanEvent(e["name"], e["time_ns"], dict(e["attributes"])) for e in stored)
