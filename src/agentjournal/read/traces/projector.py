"""The trace projector: the fold of session trees' events into span data (pure, no I/O).

:class:`Projector` folds events in commit order and returns each span once, when it ends
(the package docs say which spans). It decides which run an event belongs to, which span
an event goes under, when a span ends and with what status; the line registry
(:mod:`.lines`) says which line's tree an event is on, :mod:`.attributes` what each span
says, :mod:`.ids` which ids it gets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any, Final

from agentjournal import events
from agentjournal._digests import value_digest
from agentjournal.errors import CodecError
from agentjournal.read.traces.attributes import (
    agent_attributes,
    approval_attributes,
    chat_of,
    guardrail_attributes,
    refusal_attributes,
    run_attributes,
    tool_attributes,
)
from agentjournal.read.traces.event_fields import (
    FAILED,
    INPUT,
    LINE_EVENTS,
    OTHER_ITEM,
    OUTPUT_TYPES,
    TOOL_CALLS,
    TOOL_RESULT,
    author,
    calls,
)
from agentjournal.read.traces.ids import (
    TRACE_ID,
    derived,
    fresh_id,
    notice_own,
    ns,
    owner_id,
    parse_time,
    recorded,
    root_id,
    subagent_id,
)
from agentjournal.read.traces.lines import Lines
from agentjournal.read.traces.parts import Part
from agentjournal.read.traces.spans import ProjectedSpan, SpanEvent
from agentjournal.read.traces.state import (
    STATE_VERSION,
    Call,
    Run,
    Subagent,
    Tree,
    Wait,
    span_events,
    top_of,
)
from agentjournal.read.traces.stored import Event, data_of
from agentjournal.records import TreeRecords

_LINE_CHANGES: Final = LINE_EVENTS | {events.SUBAGENT_STARTED}
"""What can change which tree a stream is on: a line's own events, and a handoff's open."""
_OUTSIDE_RUNS: Final = LINE_EVENTS | {
    events.SUBAGENT_COMPLETED,
    events.INTERRUPT_RESOLVED,
    events.RUN_RESUMED,
}
"""The kinds :meth:`Projector.feed` may fold outside any run (each its own test there)."""


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

    def __init__(
        self, session_id: str | None = None, *, line: str | None = None, part: Part | None = None
    ) -> None:
        self._only = session_id
        self._line = line
        self._lines = Lines(session_id)
        self._part = part
        self._owned: dict[str, bool] = {}  # session -> whether its trees are this part's

    # -- state ----------------------------------------------------------------------

    def dump(self) -> bytes:
        """The state as JSON bytes (what a follower saves with its position)."""
        state = {
            "version": STATE_VERSION,
            "only": self._only,
            "line": self._line,
            **self._lines.dump(),
        }
        return json.dumps(state, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def load(cls, data: bytes) -> Projector:
        """A projector in the state :meth:`dump` saved.

        Raises:
            ValueError: ``data`` is not a state this version saves.
        """
        state = json.loads(data)
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError("not a trace projector state of this version")
        projector = cls(state["only"], line=state.get("line"))
        projector._lines = Lines.load(state["only"], state)
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
        return self._lines.knows(stream)

    def learns(self, stream: str) -> bool:
        """Whether ``stream`` is the top stream of a branch of a followed session that this
        projector, loaded from a state saved before lines, has not seen fork: fed its
        ``BranchStarted`` (revision 0) first, it knows the branch's name and fork as if
        it had seen the fork; else it learns the branch from its stream's name alone."""
        return self._lines.learns(stream)

    @property
    def part(self) -> Part | None:
        """The part of the session trees whose spans this projector sends (None: all)."""
        return self._part

    def folds(self, stream: str) -> bool:
        """Whether this projector's part folds an event of ``stream`` now (the event's tree
        is one of its trees; an event on no tree is the first part's)."""
        part = self._part
        if part is None:
            return True
        session = self._lines.session_at(stream)
        return part.index == 0 if session is None else self._owns(session)

    def _owns(self, session: str) -> bool:
        """Whether ``session``'s trees are this projector's part's (every one without parts)."""
        owned = self._owned.get(session)
        if owned is None:
            owned = self._owned[session] = self._part is None or self._part.owns(session)
        return owned

    def skips(self, stream: str, kind: str) -> bool:
        """Whether an event of ``stream`` and type ``kind`` changes nothing this projector
        sends: another part folds it (:meth:`folds`) and it changes no line. Such an event
        need not be read into a record nor fed."""
        return not self.folds(stream) and kind not in _LINE_CHANGES

    # -- the fold -------------------------------------------------------------------

    def feed(self, record: Event) -> list[ProjectedSpan]:
        """Fold one event (in commit order); return the spans it ended."""
        tree = self._lines.tree_of(record)
        if tree is None:
            return []
        if self._part is not None and not self._owns(tree.session_id):
            self._lines_only(tree, record)
            return []
        kind = record.type
        if kind in _OUTSIDE_RUNS:  # one test for the kinds that may belong to no run
            if kind in LINE_EVENTS:
                if kind == events.SUBAGENT_CONTINUED:
                    self._continued(tree, record)
                else:
                    self._lines.line_event(tree, record)
                return []
            if kind == events.SUBAGENT_COMPLETED and events.LINE_END_KEY in record.metadata:
                # A line's end closes what was open on it: no run writes it (its trace ids
                # are the ending object's), so it must neither start nor stretch one.
                return self._shown(tree, self._line_closed(tree, record))
            if kind == events.INTERRUPT_RESOLVED and events.INTERRUPT_KEY in record.metadata:
                # A person's answer belongs to no run (it may come days later, from
                # anywhere): it ends the wait's span and neither starts nor stretches a run.
                return self._shown(tree, self._answered(tree, record))
            if kind == events.RUN_RESUMED:
                # The claim on a paused run is written before the resumed run starts,
                # outside any run: like an answer it neither starts nor stretches one.
                return []
        sent: list[ProjectedSpan] = []
        run = self._run_for(tree, record, sent)
        when = ns(record.recorded_at)
        if when > run.end_ns:
            run.end_ns = when
        if kind not in INPUT:
            run.only_input = False
        # The body is parsed only where it is read: the agent an event speaks for matters
        # only to a run without one yet and to a subagent without its own span id.
        stream = record.stream
        if not run.agent and stream == top_of(tree):
            speaker = author(record)
            if speaker:
                run.agent = speaker
        self._adopt(tree, run, stream, when)
        notice_own(tree, record)
        if kind == events.MODEL_RESPONDED:
            sent.extend(self._responded(tree, run, record, when))
        elif kind == events.SUBAGENT_STARTED:
            if record.opens is not None:
                self._opened(tree, run, record, record.body or {}, when)
            else:
                self._call_or_output(tree, run, record, when, sent)
        elif kind == events.SUBAGENT_COMPLETED:
            sent.extend(self._closed(tree, run, record.body or {}, when))
        elif kind == events.GUARDRAIL_DECIDED:
            self._decided(tree, run, record, record.body or {}, when)
        elif kind == events.AUTHORITY_REFUSED:
            self._refused(tree, run, record, record.body or {}, when)
        elif kind == events.INTERRUPT_ISSUED and events.INTERRUPT_KEY in record.metadata:
            self._asked(tree, run, record, when)
        else:
            self._call_or_output(tree, run, record, when, sent)
        return self._shown(tree, sent)

    def _lines_only(self, tree: Tree, record: Event) -> None:
        """What an event of another part's tree does to the lines (which tree each stream
        is on), as :meth:`feed` would do it, and nothing else: every part knows every
        stream's tree, so each part's trees fold as they do in one projector."""
        if record.type in LINE_EVENTS:
            if record.type != events.SUBAGENT_CONTINUED:
                self._lines.line_event(tree, record)
        elif record.type == events.SUBAGENT_STARTED and record.opens is not None:
            self._lines.join(record.opens, record.stream)

    def _shown(self, tree: Tree, spans: list[ProjectedSpan]) -> list[ProjectedSpan]:
        """``spans`` (of ``tree``) when its line is sent, else none."""
        return spans if self._line is None or tree.line == self._line else []

    def idle(self, now: datetime, quiet: timedelta) -> list[ProjectedSpan]:
        """Send the run span of every run whose tree wrote nothing for ``quiet`` before ``now``
        (by the store's commit times): a follower takes such a run as over. Its subagents and
        tool calls still open are sent when they end."""
        limit = ns(now) - quiet // timedelta(microseconds=1) * 1000
        sent = []
        for tree in self._lines.in_order():
            run = tree.run
            if run is not None and not run.sent and run.end_ns <= limit and not run.only_input:
                sent.extend(self._shown(tree, [self._run_span(tree, run)]))
        return sent

    def finish(self) -> list[ProjectedSpan]:
        """Everything not sent yet, as it is now (a one-shot export's end): spans still open
        end at their run's last event and carry ``agentjournal.in_progress``."""
        return [span for _, spans in self.finish_by_tree() for span in spans]

    def finish_by_tree(self) -> list[tuple[str, list[ProjectedSpan]]]:
        """:meth:`finish`'s spans, tree by tree (by the tree's key, in the order sent)."""
        sent: list[tuple[str, list[ProjectedSpan]]] = []
        for key, tree in self._lines.keyed():
            if not self._owns(tree.session_id):
                continue
            spans: list[ProjectedSpan] = []
            for call in list(tree.calls.values()):
                spans.append(self._call_span(tree, call, None, in_progress=True))
            tree.calls.clear()
            for sub in sorted(tree.subagents.values(), key=lambda s: -s.start_ns):
                if sub.trace_id:  # a continuation no run of its branch spoke in: no span
                    spans.append(self._subagent_span(tree, sub, None, in_progress=True))
            tree.subagents.clear()
            for wait in tree.waits.values():
                last = tree.run.end_ns if tree.run is not None else wait.start_ns
                spans.append(self._wait_span(tree, wait, last, in_progress=True))
            tree.waits.clear()
            run = tree.run
            if run is not None and not run.sent and not run.only_input:
                spans.append(self._run_span(tree, run))
            sent.append((key, self._shown(tree, spans)))
        return sent

    # -- which run --------------------------------------------------------------

    def _run_for(self, tree: Tree, record: Event, sent: list[ProjectedSpan]) -> Run:
        """The run an event belongs to; a new trace id (or, without trace ids, a new user
        input after other events) starts the next run, and ends the one before."""
        trace = recorded(record.metadata, events.TRACE_ID_KEY, TRACE_ID)
        run = tree.run
        if run is not None:
            if trace is None or trace == run.trace_id:
                if trace is not None or record.type not in INPUT or run.only_input:
                    return run
            elif run.only_input and not run.recorded and not run.sent:
                # The run's input was written before anything knew its trace: adopt it.
                run.trace_id, run.recorded = trace, True
                run.root_id = root_id(record, run.first_event)
                run.used = [run.root_id]
                if tree.runs and run.position is not None and tree.runs[-1][0] == run.position:
                    tree.runs[-1] = [run.position, run.trace_id, run.root_id]
                return run
            sent.extend(self._run_over(tree))
        when = ns(record.recorded_at)
        root = root_id(record, record.id)
        tree.run = Run(
            trace_id=trace or derived("trace", record.id, 32),
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

    def _run_over(self, tree: Tree) -> list[ProjectedSpan]:
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

    # -- continuations --------------------------------------------------------------------

    def _continued(self, tree: Tree, record: Event) -> None:
        """A subagent open at the fork goes on in this continuation: open on the branch, its
        span belongs to the first branch run that speaks in it (:meth:`_adopt`)."""
        if record.revision != 0:
            return
        try:
            continued = events.SubagentContinued.decode(data_of(record))
        except (CodecError, RecursionError):
            return  # not what agentjournal writes: the verifier reports it
        if continued.subsession_stream != record.stream or record.stream in tree.subagents:
            return
        when = ns(record.recorded_at)
        tree.subagents[record.stream] = Subagent(
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

    def _adopt(self, tree: Tree, run: Run, stream: str, when: int) -> None:
        """A continuation (and the continuations it is inside) joins ``run``: the first run
        of its branch that writes in it or closes it."""
        chain: list[Subagent] = []  # innermost first; a crafted cycle ends where it closes
        sub = tree.subagents.get(stream)
        while sub is not None and not sub.trace_id and sub not in chain:
            chain.append(sub)
            sub = tree.subagents.get(sub.parent_stream)
        for sub in reversed(chain):  # outermost first: each under its parent's span
            sub.parent_id = owner_id(tree, run, sub.parent_stream)
            sub.trace_id = run.trace_id
            sub.start_ns = sub.end_ns = when

    # -- span events ---------------------------------------------------------------

    def _event_list(self, tree: Tree, run: Run, stream: str) -> list[dict[str, Any]]:
        """The span events an event of ``stream`` goes to: its subagent's, else its run's."""
        sub = tree.subagents.get(stream)
        if sub is not None and sub.trace_id == run.trace_id:
            return sub.events
        return run.events

    # -- what each event does -------------------------------------------------------

    def _opened(
        self, tree: Tree, run: Run, record: Event, body: Mapping[str, Any], when: int
    ) -> None:
        child = record.opens
        assert child is not None
        openai = body.get("extensions", {}).get("openai", {})
        self._lines.join(child, record.stream)
        tree.subagents[child] = Subagent(
            stream=child,
            agent=str(body.get("agent_type", "")),
            agent_id=str(body.get("agent_id", "")),
            source=str(openai.get("source_agent", "")),
            call_id=str(openai.get("call_id", "")),
            parent_stream=record.stream,
            twin=record.id,
            trace_id=run.trace_id,
            parent_id=owner_id(tree, run, record.stream),
            start_ns=when,
            end_ns=when,
        )

    def _closed(
        self, tree: Tree, run: Run, body: Mapping[str, Any], when: int
    ) -> list[ProjectedSpan]:
        openai = body.get("extensions", {}).get("openai", {})
        closed = str(openai.get("subsession_stream", ""))
        self._adopt(tree, run, closed, when)  # a continuation closed before it spoke
        sub = tree.subagents.pop(closed, None)
        if sub is None:  # its other copy closed it already
            return []
        outcome = str(body.get("outcome", ""))
        error = None
        if outcome in FAILED:
            error = f"{outcome}: {openai.get('reason') or 'no reason given'}"
            if sub.trace_id == run.trace_id and run.error is None:
                run.error = f"subagent {sub.agent} ended with {error}"
        return [self._subagent_span(tree, sub, when, outcome=outcome, error=error)]

    def _line_closed(self, tree: Tree, record: Event) -> list[ProjectedSpan]:
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
                ns(record.recorded_at),
                outcome=outcome,
                error=error if outcome in FAILED else None,
            )
        ]

    def _responded(self, tree: Tree, run: Run, record: Event, when: int) -> list[ProjectedSpan]:
        chat = chat_of(data_of(record), tree.session_id, record)
        if chat is None:
            return []
        started, ended, model, attributes = chat
        end = parse_time(ended) or when
        start = parse_time(started) or end
        run.start_ns = min(run.start_ns, start)
        run.end_ns = max(run.end_ns, end)
        tree.responded[record.stream] = end
        name = f"chat {model}" if model else "chat"
        return [
            ProjectedSpan(
                trace_id=run.trace_id,
                span_id=fresh_id(run, "model", record.id),
                parent_id=owner_id(tree, run, record.stream),
                name=name,
                start_ns=start,
                end_ns=max(start, end),
                attributes=attributes,
            )
        ]

    def _decided(
        self, tree: Tree, run: Run, record: Event, body: Mapping[str, Any], when: int
    ) -> None:
        attributes = guardrail_attributes(record, body)
        self._event_list(tree, run, record.stream).append(
            asdict(SpanEvent("agentjournal.guardrail", when, attributes))
        )
        call_id = body.get("call_id")
        if body.get("decision") == "BLOCK" and isinstance(call_id, str):
            code = body.get("reason_code") or "no reason code"
            tree.refused[call_id] = f"the guardrail blocked the call ({code})"
        if body.get("enforcement") in ("run_stopped", "unenforceable") and run.error is None:
            run.error = f"guardrail {body.get('decision')} on {body.get('subject')} stopped the run"

    def _refused(
        self, tree: Tree, run: Run, record: Event, body: Mapping[str, Any], when: int
    ) -> None:
        attributes = refusal_attributes(record, body)
        self._event_list(tree, run, record.stream).append(
            asdict(SpanEvent("agentjournal.authority_refused", when, attributes))
        )
        call_id = body.get("call_id")
        if isinstance(call_id, str):
            tree.refused[call_id] = f"authority refused the call ({body.get('gate')} gate)"
        if body.get("enforcement") == "run_stopped" and run.error is None:
            run.error = f"authority refused {body.get('subject')} and stopped the run"

    def _asked(self, tree: Tree, run: Run, record: Event, when: int) -> None:
        """A call waits for a person: its wait opens under the span of the agent that
        asked, in the paused run's trace."""
        try:
            asked = events.ApprovalAsked.decode(data_of(record))
        except (CodecError, RecursionError):
            return  # not what agentjournal writes: the verifier reports it
        tree.waits[record.id] = Wait(
            request_id=asked.request_id,
            tool=asked.tool_name,
            agent=asked.agent,
            stream=record.stream,
            event_id=record.id,
            trace_id=run.trace_id,
            parent_id=owner_id(tree, run, record.stream),
            span_id=fresh_id(run, "approval", record.id),
            start_ns=when,
        )

    def _answered(self, tree: Tree, record: Event) -> list[ProjectedSpan]:
        """A person answered: the wait of the question the answer names ends now."""
        try:
            decided = events.ApprovalDecided.decode(data_of(record))
        except (CodecError, RecursionError):
            return []
        wait = tree.waits.pop(decided.issued, None)
        if wait is None:  # a question this projector never saw open
            return []
        when = ns(record.recorded_at)
        return [self._wait_span(tree, wait, when, outcome=decided.outcome, by=decided.by)]

    def _call_or_output(
        self,
        tree: Tree,
        run: Run,
        record: Event,
        when: int,
        sent: list[ProjectedSpan],
    ) -> None:
        item_type = record.metadata.get(events.ITEM_TYPE_KEY)
        call_id = record.metadata.get(events.CALL_ID_KEY)
        if record.type == TOOL_RESULT or item_type in OUTPUT_TYPES:
            key = call_id or (record.body or {}).get("call_id")
            call = tree.calls.pop(key, None) if isinstance(key, str) else None
            if call is not None:
                refused = tree.refused.pop(call.call_id, None)
                sent.append(self._call_span(tree, call, refused, end=when))
            return
        if record.type not in (TOOL_CALLS, OTHER_ITEM):
            return
        # The runner writes a call with its output after it ran: the call started when the
        # response that asked for it had arrived (or, without one, when it was written).
        start = min(tree.responded.get(record.stream, when), when)
        for kind, found_id, name, arguments in calls(record, record.body or {}):
            tree.calls[found_id] = Call(
                call_id=found_id,
                kind=kind,
                name=name,
                digest=value_digest(arguments),
                agent=author(record) or "",
                stream=record.stream,
                event_id=f"{record.id}:{found_id}",
                trace_id=run.trace_id,
                parent_id=owner_id(tree, run, record.stream),
                start_ns=start,
            )

    # -- spans ----------------------------------------------------------------------

    def _call_span(
        self,
        tree: Tree,
        call: Call,
        error: str | None,
        *,
        end: int | None = None,
        in_progress: bool = False,
    ) -> ProjectedSpan:
        run = tree.run
        if end is None:
            end = run.end_ns if run is not None and run.trace_id == call.trace_id else call.start_ns
        attributes = tool_attributes(call, tree.session_id, in_progress=in_progress)
        if run is not None and run.trace_id == call.trace_id:
            span_id = fresh_id(run, "tool", call.event_id)
        else:
            span_id = derived("tool", call.event_id, 16)
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
        tree: Tree,
        sub: Subagent,
        end: int | None,
        *,
        outcome: str | None = None,
        error: str | None = None,
        in_progress: bool = False,
    ) -> ProjectedSpan:
        run = tree.run
        if run is not None and run.trace_id == sub.trace_id:
            span_id = subagent_id(run, sub)
            if end is None:
                end = run.end_ns
        else:
            span_id = sub.span_id or derived("subagent", sub.twin, 16)
        end = sub.start_ns if end is None else end
        attributes = agent_attributes(tree, sub, outcome=outcome, in_progress=in_progress)
        return ProjectedSpan(
            trace_id=sub.trace_id,
            span_id=span_id,
            parent_id=sub.parent_id,
            name=f"invoke_agent {sub.agent}",
            start_ns=sub.start_ns,
            end_ns=max(sub.start_ns, end),
            attributes=attributes,
            events=span_events(sub.events),
            error=error,
        )

    def _wait_span(
        self,
        tree: Tree,
        wait: Wait,
        end: int,
        *,
        outcome: str = "pending",
        by: str | None = None,
        in_progress: bool = False,
    ) -> ProjectedSpan:
        attributes = approval_attributes(
            wait, tree.session_id, outcome=outcome, by=by, in_progress=in_progress
        )
        return ProjectedSpan(
            trace_id=wait.trace_id,
            span_id=wait.span_id,
            parent_id=wait.parent_id,
            name=f"await_approval {wait.tool}",
            start_ns=wait.start_ns,
            end_ns=max(wait.start_ns, end),
            attributes=attributes,
        )

    def _run_span(self, tree: Tree, run: Run) -> ProjectedSpan:
        run.sent = True
        attributes, links = run_attributes(tree, run)
        span = ProjectedSpan(
            trace_id=run.trace_id,
            span_id=run.root_id,
            parent_id=None,
            name="agentjournal.run",
            start_ns=run.start_ns,
            end_ns=run.end_ns,
            attributes=attributes,
            events=span_events(run.events),
            error=run.error,
            links=links,
        )
        run.events = []
        return span


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
