"""What an experiment found: both lines of each session side by side, and the totals (pure).

Built from the two lines' turns (:func:`agentjournal.read.evals.turns.session_turns`),
the scores the experiment's eval run holds, and how each of the candidate's turns ended.
Rendered as a table (:func:`render_text`) or JSON (:meth:`ExperimentReport.to_json`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentjournal._text import plural
from agentjournal.read.evals.turns import ScoredSession, ScoredTurn, TurnUsage

MAIN = "main"


@dataclass(frozen=True, slots=True)
class ScoreRow:
    """One turn's score by one scorer, as the experiment's eval run holds it."""

    session: str
    line: str
    turn: int
    scorer: str
    value: float


@dataclass(frozen=True, slots=True)
class LineScore:
    """A session line's score in the eval run (its ``SessionScored``): the mean of its
    scores, and each scorer's (session-level scorers included)."""

    line: str
    score: float
    by_scorer: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the candidate's run of a turn ended (``answered``, ``blocked``, ``failed``,
    ``interrupted``) and why, when it did not answer."""

    turn: int
    status: str
    error: str = ""


@dataclass(frozen=True, slots=True)
class LineResult:
    """One line of one session, from the experiment's first turn on.

    Attributes:
        line: ``"main"`` or the experiment's branch.
        score: The mean of its scores (None: nothing scored).
        by_scorer: The mean of each scorer's scores.
        turn_scores: Each turn's scores by scorer.
        usage: What its model calls cost (tokens, requests, US dollars when priced).
        tool_calls: Each tool call as ``name {arguments}``, in order.
        blocks: Each guardrail BLOCK as ``kind tool: reason``, in order.
        answers: Each turn's final answer, by turn.
        refusals: Each action the authority policy refused, as ``subject: reason``.
    """

    line: str
    score: float | None
    by_scorer: Mapping[str, float]
    turn_scores: Mapping[int, Mapping[str, float]]
    usage: TurnUsage
    tool_calls: tuple[str, ...]
    blocks: tuple[str, ...]
    answers: Mapping[int, str]
    refusals: tuple[str, ...] = ()

    @property
    def final(self) -> str:
        """The last turn's answer (``""``: none)."""
        return self.answers[max(self.answers)] if self.answers else ""

    def to_json(self) -> dict[str, Any]:
        """The line as plain JSON."""
        return {
            "line": self.line,
            "score": self.score,
            "by_scorer": dict(self.by_scorer),
            "turn_scores": {str(t): dict(s) for t, s in self.turn_scores.items()},
            "usage": _usage_json(self.usage),
            "tool_calls": list(self.tool_calls),
            "blocks": list(self.blocks),
            "refusals": list(self.refusals),
            "answers": {str(t): a for t, a in self.answers.items()},
            "final": self.final,
        }


@dataclass(frozen=True, slots=True)
class TurnChange:
    """A turn whose score differs between the lines: each line's mean over its scorers,
    the scorers that differ, and both answers."""

    turn: int
    main: float | None
    candidate: float | None
    scorers: tuple[str, ...]
    main_answer: str
    candidate_answer: str

    def to_json(self) -> dict[str, Any]:
        """The change as plain JSON."""
        return {
            "turn": self.turn,
            "main": self.main,
            "candidate": self.candidate,
            "scorers": list(self.scorers),
            "main_answer": self.main_answer,
            "candidate_answer": self.candidate_answer,
        }


@dataclass(frozen=True, slots=True)
class SessionComparison:
    """One session of an experiment: both lines and what differs between them.

    Attributes:
        session: The session id.
        branch: The candidate's branch.
        main: The recorded line, from the experiment's first turn.
        candidate: The branch.
        outcomes: How each of the candidate's turns ended.
        changed_turns: The turns whose scores differ.
        tool_calls_only_main: Calls the recorded line made and the candidate did not
            (a multiset difference of ``name {arguments}``).
        tool_calls_only_candidate: Calls only the candidate made.
        blocks_only_main: Guardrail blocks only the recorded line met.
        blocks_only_candidate: Guardrail blocks only the candidate met.
        refusals_only_main: Authority refusals only the recorded line met.
        refusals_only_candidate: Authority refusals only the candidate met.
    """

    session: str
    branch: str
    main: LineResult
    candidate: LineResult
    outcomes: tuple[Outcome, ...]
    changed_turns: tuple[TurnChange, ...]
    tool_calls_only_main: tuple[str, ...]
    tool_calls_only_candidate: tuple[str, ...]
    blocks_only_main: tuple[str, ...]
    blocks_only_candidate: tuple[str, ...]
    refusals_only_main: tuple[str, ...] = ()
    refusals_only_candidate: tuple[str, ...] = ()

    @property
    def differs(self) -> bool:
        """Whether anything the report compares differs (scores, calls, blocks, answers)."""
        return bool(
            self.changed_turns
            or self.tool_calls_only_main
            or self.tool_calls_only_candidate
            or self.blocks_only_main
            or self.blocks_only_candidate
            or self.refusals_only_main
            or self.refusals_only_candidate
            or dict(self.main.answers) != dict(self.candidate.answers)
        )

    @property
    def stopped(self) -> tuple[Outcome, ...]:
        """The candidate's turns that did not end with an answer."""
        return tuple(o for o in self.outcomes if o.status != "answered")

    def to_json(self) -> dict[str, Any]:
        """The comparison as plain JSON."""
        return {
            "session": self.session,
            "branch": self.branch,
            "differs": self.differs,
            "main": self.main.to_json(),
            "candidate": self.candidate.to_json(),
            "outcomes": [
                {"turn": o.turn, "status": o.status, "error": o.error} for o in self.outcomes
            ],
            "changed_turns": [change.to_json() for change in self.changed_turns],
            "tool_calls": {
                "only_main": list(self.tool_calls_only_main),
                "only_candidate": list(self.tool_calls_only_candidate),
            },
            "blocks": {
                "only_main": list(self.blocks_only_main),
                "only_candidate": list(self.blocks_only_candidate),
            },
            "refusals": {
                "only_main": list(self.refusals_only_main),
                "only_candidate": list(self.refusals_only_candidate),
            },
        }


@dataclass(frozen=True, slots=True)
class ExperimentReport:
    """An experiment's report: each session compared, and the totals.

    Attributes:
        experiment: The experiment's id (its branch's name, its eval run's id).
        candidate: How the candidate was named.
        at_turn: The turn the branches start at.
        sessions: Each session's comparison, in the order given.
        totals: Per line (``main``, ``candidate``): ``score`` (the mean of its turn
            scores over every session), ``by_scorer`` (each scorer's mean), ``usage``.
    """

    experiment: str
    candidate: str
    at_turn: int
    sessions: tuple[SessionComparison, ...]
    totals: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def changed(self) -> tuple[SessionComparison, ...]:
        """The sessions where anything differs."""
        return tuple(s for s in self.sessions if s.differs)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON (what ``agentjournal experiment --json`` prints)."""
        return {
            "experiment": self.experiment,
            "candidate": self.candidate,
            "at_turn": self.at_turn,
            "totals": {line: dict(body) for line, body in self.totals.items()},
            "changed": [s.session for s in self.changed],
            "sessions": [s.to_json() for s in self.sessions],
        }


def compare_session(
    main: ScoredSession,
    candidate: ScoredSession,
    scores: Iterable[ScoreRow],
    outcomes: Sequence[Outcome],
    totals: Iterable[LineScore] = (),
    refusals: Mapping[str, Sequence[str]] | None = None,
) -> SessionComparison:
    """Compare the two lines of one session (``scores``, ``totals``: that session's;
    ``refusals``: each line's authority refusals after the fork, by line)."""
    rows = list(scores)
    whole = {total.line: total for total in totals}
    refused = refusals or {}
    main_line = _line(
        main,
        [r for r in rows if r.line == main.line],
        whole.get(main.line),
        tuple(refused.get(main.line, ())),
    )
    branch_line = _line(
        candidate,
        [r for r in rows if r.line == candidate.line],
        whole.get(candidate.line),
        tuple(refused.get(candidate.line, ())),
    )
    changes: list[TurnChange] = []
    for turn in sorted(set(main_line.turn_scores) | set(branch_line.turn_scores)):
        before = main_line.turn_scores.get(turn, {})
        after = branch_line.turn_scores.get(turn, {})
        differ = tuple(
            sorted(name for name in set(before) | set(after) if before.get(name) != after.get(name))
        )
        if differ:
            changes.append(
                TurnChange(
                    turn,
                    _mean(before.values()),
                    _mean(after.values()),
                    differ,
                    main_line.answers.get(turn, ""),
                    branch_line.answers.get(turn, ""),
                )
            )
    return SessionComparison(
        session=main.session,
        branch=candidate.line,
        main=main_line,
        candidate=branch_line,
        outcomes=tuple(outcomes),
        changed_turns=tuple(changes),
        tool_calls_only_main=_only(main_line.tool_calls, branch_line.tool_calls),
        tool_calls_only_candidate=_only(branch_line.tool_calls, main_line.tool_calls),
        blocks_only_main=_only(main_line.blocks, branch_line.blocks),
        blocks_only_candidate=_only(branch_line.blocks, main_line.blocks),
        refusals_only_main=_only(main_line.refusals, branch_line.refusals),
        refusals_only_candidate=_only(branch_line.refusals, main_line.refusals),
    )


def build_report(
    experiment: str, candidate: str, at_turn: int, sessions: Sequence[SessionComparison]
) -> ExperimentReport:
    """The report of ``sessions``, with the totals of each line."""
    totals: dict[str, dict[str, Any]] = {}
    for name, pick in ((MAIN, _main_of), ("candidate", _candidate_of)):
        lines = [pick(s) for s in sessions]
        values = [
            v for line in lines for scores in line.turn_scores.values() for v in scores.values()
        ]
        by_scorer: dict[str, list[float]] = {}
        for line in lines:
            for scores in line.turn_scores.values():
                for scorer, value in scores.items():
                    by_scorer.setdefault(scorer, []).append(value)
        totals[name] = {
            "score": _mean(values),
            "by_scorer": {k: _mean(v) for k, v in sorted(by_scorer.items())},
            "usage": _usage_json(_sum(line.usage for line in lines)),
        }
    return ExperimentReport(experiment, candidate, at_turn, tuple(sessions), totals)


def render_text(report: ExperimentReport) -> str:
    """The report as a terminal table: one row per session, then what differs."""
    out = [
        f"experiment {report.experiment}: candidate {report.candidate}, from turn "
        f"{report.at_turn}, {plural(len(report.sessions), 'session')}, "
        f"{len(report.changed)} changed",
        "",
        f"{'session':<24} {'main':>6} {'cand.':>6} {'Δ':>6}  {'tokens main/cand.':>18}  "
        f"{'cost main/cand.':>17}  what differs",
    ]
    for s in report.sessions:
        delta = (
            s.candidate.score - s.main.score
            if s.candidate.score is not None and s.main.score is not None
            else None
        )
        tokens = f"{s.main.usage.total_tokens}/{s.candidate.usage.total_tokens}"
        cost = f"{_money(s.main.usage.cost)}/{_money(s.candidate.usage.cost)}"
        out.append(
            f"{s.session[:24]:<24} {_num(s.main.score):>6} {_num(s.candidate.score):>6} "
            f"{_signed(delta):>6}  {tokens:>18}  {cost:>17}  {_summary(s)}"
        )
    for name in (MAIN, "candidate"):
        total = report.totals.get(name, {})
        usage = total.get("usage", {})
        scorers = ", ".join(f"{k} {_num(v)}" for k, v in total.get("by_scorer", {}).items())
        out.append(
            f"{'total ' + name:<24} {_num(total.get('score')):>6}  tokens "
            f"{usage.get('total_tokens', 0)}, cost {_money(usage.get('cost'))}"
            + (f"; by scorer: {scorers}" if scorers else "")
        )
    for s in report.changed:
        out += ["", f"── {s.session} (branch {s.branch})"]
        for change in s.changed_turns:
            out.append(
                f"  turn {change.turn}: {_num(change.main)} → {_num(change.candidate)} "
                f"({', '.join(change.scorers)})"
            )
        for label, calls in (
            ("tool calls only in main", s.tool_calls_only_main),
            ("tool calls only in candidate", s.tool_calls_only_candidate),
            ("blocks only in main", s.blocks_only_main),
            ("blocks only in candidate", s.blocks_only_candidate),
            ("refusals only in main", s.refusals_only_main),
            ("refusals only in candidate", s.refusals_only_candidate),
        ):
            for call in calls:
                out.append(f"  {label}: {call}")
        for stop in s.stopped:
            out.append(f"  candidate turn {stop.turn} {stop.status}: {stop.error}")
        out.append(f"  main:      {_one_line(s.main.final)}")
        out.append(f"  candidate: {_one_line(s.candidate.final)}")
    out += ["", f"in the viewer (agentjournal ui): /experiments/{report.experiment}"]
    return "\n".join(out)


# -- helpers ----------------------------------------------------------------------------


def _line(
    session: ScoredSession,
    rows: Sequence[ScoreRow],
    whole: LineScore | None,
    refusals: tuple[str, ...],
) -> LineResult:
    """One line's result: its turns' scores; its score and each scorer's from its
    ``SessionScored`` when there is one, else the means of the turn scores."""
    turn_scores: dict[int, dict[str, float]] = {}
    for row in rows:
        turn_scores.setdefault(row.turn, {})[row.scorer] = row.value
    by_scorer: dict[str, list[float]] = {}
    for scores in turn_scores.values():
        for scorer, value in scores.items():
            by_scorer.setdefault(scorer, []).append(value)
    means = {k: m for k, v in sorted(by_scorer.items()) if (m := _mean(v)) is not None}
    score = _mean(v for scores in by_scorer.values() for v in scores)
    if whole is not None:
        score, means = whole.score, dict(sorted(whole.by_scorer.items()))
    return LineResult(
        line=session.line,
        score=score,
        by_scorer=means,
        turn_scores={t: dict(sorted(s.items())) for t, s in sorted(turn_scores.items())},
        usage=session.usage,
        tool_calls=tuple(
            _call(call.name, call.arguments) for t in session.turns for call in t.tool_calls
        ),
        blocks=tuple(_block(t) for turn in session.turns for t in _blocked(turn)),
        answers={turn.index: turn.output for turn in session.turns},
        refusals=refusals,
    )


def _blocked(turn: ScoredTurn) -> list[Any]:
    return [check for check in turn.guardrails if check.action == "BLOCK"]


def _block(check: Any) -> str:
    subject = f"{check.kind} {check.tool}" if check.tool else check.kind
    return f"{subject}: {check.reason}" if check.reason else subject


def _call(name: str, arguments: Any) -> str:
    return f"{name} {json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)}"


def _only(these: Sequence[str], those: Sequence[str]) -> tuple[str, ...]:
    """What ``these`` hold beyond ``those`` (a multiset difference), in ``these``' order."""
    left = Counter(these) - Counter(those)
    found: list[str] = []
    for item in these:
        if left[item] > 0:
            found.append(item)
            left[item] -= 1
    return tuple(found)


def _mean(values: Iterable[float]) -> float | None:
    listed = list(values)
    return sum(listed) / len(listed) if listed else None


def _sum(usages: Iterable[TurnUsage]) -> TurnUsage:
    listed = list(usages)
    costs = [u.cost for u in listed]
    return TurnUsage(
        requests=sum(u.requests for u in listed),
        input_tokens=sum(u.input_tokens for u in listed),
        output_tokens=sum(u.output_tokens for u in listed),
        total_tokens=sum(u.total_tokens for u in listed),
        cost=None if any(c is None for c in costs) else sum(c for c in costs if c is not None),
    )


def _usage_json(usage: TurnUsage) -> dict[str, Any]:
    return {
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "cost": usage.cost,
    }


def _main_of(s: SessionComparison) -> LineResult:
    return s.main


def _candidate_of(s: SessionComparison) -> LineResult:
    return s.candidate


def _summary(s: SessionComparison) -> str:
    parts: list[str] = []
    if s.changed_turns:
        turns = ",".join(str(c.turn) for c in s.changed_turns)
        parts.append(("turn " if len(s.changed_turns) == 1 else "turns ") + turns)
    calls = len(s.tool_calls_only_main) + len(s.tool_calls_only_candidate)
    if calls:
        parts.append(plural(calls, "tool call"))
    blocks = len(s.blocks_only_main) + len(s.blocks_only_candidate)
    if blocks:
        parts.append(plural(blocks, "block"))
    refusals = len(s.refusals_only_main) + len(s.refusals_only_candidate)
    if refusals:
        parts.append(plural(refusals, "refusal"))
    if s.stopped:
        parts.append(", ".join(f"turn {o.turn} {o.status}" for o in s.stopped))
    if not parts and dict(s.main.answers) != dict(s.candidate.answers):
        parts.append("answers")
    return "; ".join(parts) or "—"


def _num(value: Any) -> str:
    return "—" if value is None else f"{value:.2f}"


def _signed(value: float | None) -> str:
    return "" if value is None or abs(value) < 1e-9 else f"{value:+.2f}"


def _money(value: Any) -> str:
    return "?" if value is None else f"${value:.4f}"


def _one_line(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"
