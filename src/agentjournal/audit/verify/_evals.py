"""The eval run stage: what an ``EvalRun-{run_id}`` stream may hold (:func:`check_eval_run`).

After integrity (the stream's chain, as every stream's) and before the checkpoints: the
run's streams are only its own, its checkpoints and the key rotations; it starts with
one ``EvalRunStarted`` and ends, if completed, with one ``EvalRunCompleted``; every event
is a valid kurrent-agent-schema message of its type (``from_json``, and no field the
message does not have; in a redacted bundle its view, what was withheld aside); every
score is a finite number in [0, 1]; no (session, line, turn, scorer) is scored twice nor
any line twice; every score is of a line and by a scorer ``EvalRunStarted`` names, and
marked human only on a feedback run, where every score is a person's rating of its session;
and ``EvalRunCompleted``'s ``turns_scored`` and ``average_score`` are
those of the ``TurnScored`` events.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.json_format import ParseError
from kurrent_agent_schema import EVENT_TYPE_BY_NAME, from_json

from agentjournal import events
from agentjournal._text import cut, plural
from agentjournal.audit.verify._report import Report
from agentjournal.ledger.redaction import is_withheld
from agentjournal.records import Record
from agentjournal.streams import KEYS_STREAM, eval_run_stream, ledger_stream

EXTENSION: Final = "agentjournal"
_AVERAGE_TOLERANCE: Final = 1e-9


def run_streams(run_id: str) -> tuple[str, str]:
    """The run's stream and its checkpoint stream."""
    stream = eval_run_stream(run_id)
    return stream, ledger_stream(stream)


def _fields(type_: str) -> frozenset[str]:
    message = EVENT_TYPE_BY_NAME[type_]
    return frozenset(f.name for f in message.DESCRIPTOR.fields)


def _schema_problem(record: Record) -> tuple[dict[str, Any] | None, str | None]:
    """The event's body (its data, or its view with what was withheld left out) and why it
    is not a valid schema message of its type, if it is not."""
    body = record.body
    if body is None:
        return None, f"{record.type} data is not a JSON object"
    unknown = set(body) - _fields(record.type)
    if unknown:
        return (
            None,
            f"{record.type} has fields the schema does not: {cut(str(sorted(unknown)), 120)}",
        )
    shown = {k: v for k, v in body.items() if not is_withheld(v)}
    try:
        from_json(EVENT_TYPE_BY_NAME[record.type], json.dumps(shown))
    except (ParseError, ValueError, TypeError, RecursionError) as error:
        return None, f"{record.type} is not a valid schema event: {cut(str(error), 160)}"
    return body, None


def _facts(body: Mapping[str, Any]) -> Mapping[str, Any]:
    extensions = body.get("extensions")
    found = extensions.get(EXTENSION) if isinstance(extensions, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _score_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "the score is not a number"
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return f"the score {value!r} is not in [0, 1]"
    return None


@dataclass(frozen=True)
class _Named:
    """What ``EvalRunStarted`` names: the (session, line) pairs and the scorers."""

    lines: frozenset[tuple[Any, Any]]
    scorers: frozenset[Any]

    def problem(self, kind: str, body: Mapping[str, Any], facts: Mapping[str, Any]) -> str | None:
        """Why a score does not belong to the run (None: it does): a line, or a scorer,
        the run does not name; a person's rating off a feedback run, or a score on one
        that is no person's (a feedback run names its session; its lines are any)."""
        session, line = body.get("session_id"), facts.get("line")
        human = facts.get("human") is True
        if kind == "feedback":
            if session not in {s for s, _ in self.lines}:
                return f"a rating of session {cut(str(session), 80)}, not the run's"
            if "scorer" in facts and not (human and isinstance(facts.get("by"), str)):
                return "a score on a feedback run that is not a person's rating (human, by)"
            return None
        if (session, line) not in self.lines:
            return f"{cut(str(session), 80)}@{cut(str(line), 80)} is not a line the run scores"
        if "scorer" in facts and facts.get("scorer") not in self.scorers:
            return f"scorer {cut(str(facts.get('scorer')), 80)} is not one the run names"
        if human:
            return "a person's rating on a run that is not a feedback run"
        return None


def _named(facts: Mapping[str, Any]) -> _Named:
    sessions = facts.get("sessions")
    scorers = facts.get("scorers")
    return _Named(
        frozenset(
            (s.get("session"), s.get("line"))
            for s in (sessions if isinstance(sessions, Sequence) else ())
            if isinstance(s, Mapping)
        ),
        frozenset(
            s.get("name")
            for s in (scorers if isinstance(scorers, Sequence) else ())
            if isinstance(s, Mapping)
        ),
    )


def check_eval_run(report: Report, run_id: str, streams: Mapping[str, Sequence[Record]]) -> None:
    """Check the run's events (see the module docs); fail the first problem of each kind."""
    stream, ledger = run_streams(run_id)
    for name in streams:
        if name not in (stream, ledger, KEYS_STREAM):
            report.fail("structure", name, None, f"{name} is not a stream of eval run {run_id}")
    found = list(streams.get(stream, ()))
    if not found:
        report.fail("eval", stream, None, "the eval run's stream is missing or empty")
        return
    if found[0].type != events.EVAL_RUN_STARTED:
        report.fail("eval", stream, 0, "an eval run starts with EvalRunStarted")
        return
    kind = ""
    named: _Named = _Named(frozenset(), frozenset())
    turns: list[float] = []
    keys: set[tuple[Any, ...]] = set()
    lines: set[tuple[Any, ...]] = set()
    completed: tuple[Record, Mapping[str, Any]] | None = None
    for record in found:
        where = (stream, record.revision)
        if record.type not in events.EVAL_EVENTS:
            report.fail("eval", *where, f"{cut(record.type, 80)} does not belong on an eval run")
            return
        if completed is not None:
            report.fail("eval", *where, "an event after EvalRunCompleted")
            return
        if record.type == events.EVAL_RUN_STARTED and record.revision != 0:
            report.fail("eval", *where, "a second EvalRunStarted")
            return
        body, problem = _schema_problem(record)
        if body is None:
            report.fail("eval", *where, problem or "malformed")
            return
        facts = _facts(body)
        if record.type == events.EVAL_RUN_STARTED:
            found_kind = facts.get("kind")
            kind = found_kind if isinstance(found_kind, str) else ""
            named = _named(facts)
        elif record.type == events.TURN_SCORED:
            problem = _score_problem(body.get("score")) or named.problem(kind, body, facts)
            if problem is not None:
                report.fail("eval", *where, problem)
                return
            key = (
                body.get("session_id"),
                facts.get("line"),
                body.get("turn_index"),
                facts.get("scorer"),
            )
            if kind != "feedback" and key in keys:
                report.fail("eval", *where, "the same turn scored twice by the same scorer")
                return
            keys.add(key)
            turns.append(float(body["score"]))
        elif record.type == events.SESSION_SCORED:
            problem = _score_problem(body.get("score")) or named.problem(kind, body, facts)
            if problem is not None:
                report.fail("eval", *where, problem)
                return
            line = (body.get("session_id"), facts.get("line"))
            if line in lines:
                report.fail("eval", *where, "the same session line scored twice")
                return
            lines.add(line)
        else:
            completed = (record, body)
    if completed is not None:
        last, totals = completed
        where = (stream, last.revision)
        counted = totals.get("turns_scored", 0)
        if counted != len(turns):
            report.fail(
                "eval",
                *where,
                f"EvalRunCompleted says {counted!r} turns scored; the run holds {len(turns)}",
            )
            return
        average = totals.get("average_score", 0.0)
        mean = sum(turns) / len(turns) if turns else 0.0
        if (
            isinstance(average, bool)
            or not isinstance(average, int | float)
            or not abs(average - mean) <= _AVERAGE_TOLERANCE
        ):
            report.fail(
                "eval",
                *where,
                f"EvalRunCompleted says the average is {average!r}; its scores' is {mean!r}",
            )
            return
    state = "completed" if completed is not None else "open"
    report.lines.append(
        f"eval: {plural(len(turns), 'turn score')}, {plural(len(lines), 'session score')}, "
        f"{state}" + (f", average {sum(turns) / len(turns):.3f}" if turns else "")
    )
