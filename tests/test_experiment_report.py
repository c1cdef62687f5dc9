"""The experiment report, pure: what differs between two lines of a session, and the totals."""

from __future__ import annotations

from agentjournal.evals.report import (
    LineScore,
    Outcome,
    ScoreRow,
    build_report,
    compare_session,
    render_text,
)
from agentjournal.read.evals.turns import (
    GuardrailCheck,
    ScoredSession,
    ScoredTurn,
    ToolCall,
    TurnUsage,
)


def turn(
    line: str, index: int, output: str, calls: tuple[ToolCall, ...] = (), **more: object
) -> ScoredTurn:
    return ScoredTurn("s1", line, index, f"question {index}", output, tool_calls=calls, **more)  # type: ignore[arg-type]


LOOKUP = ToolCall("lookup", {"id": 1, "b": [2]}, "c1")


def test_tool_calls_differ_as_multisets_of_name_and_arguments() -> None:
    twice = ScoredSession("s1", "main", (turn("main", 1, "a", (LOOKUP, LOOKUP)),))
    once = ScoredSession(
        "s1", "exp", (turn("exp", 1, "a", (ToolCall("lookup", {"b": [2], "id": 1}, "x"),)),)
    )

    compared = compare_session(twice, once, [], [Outcome(1, "answered")])

    assert compared.tool_calls_only_main == ('lookup {"b": [2], "id": 1}',)
    assert compared.tool_calls_only_candidate == ()
    assert compared.differs


def test_blocks_and_changed_turns_and_the_line_scores_come_from_the_run() -> None:
    block = GuardrailCheck("BLOCK", "tool_call", "wipe", "denied")
    main = ScoredSession(
        "s1",
        "main",
        (turn("main", 1, "a"), turn("main", 2, "b")),
        usage=TurnUsage(requests=2, total_tokens=30, cost=0.25),
    )
    tried = ScoredSession(
        "s1",
        "exp",
        (turn("exp", 1, "a", guardrails=(block,)), turn("exp", 2, "c")),
        usage=TurnUsage(requests=3, total_tokens=45, cost=None),
    )
    rows = [
        ScoreRow("s1", "main", 1, "ref", 1.0),
        ScoreRow("s1", "main", 2, "ref", 1.0),
        ScoreRow("s1", "exp", 1, "ref", 1.0),
        ScoreRow("s1", "exp", 2, "ref", 0.0),
    ]
    totals = [
        LineScore("main", 0.9, {"ref": 1.0, "whole": 0.8}),
        LineScore("exp", 0.4, {"ref": 0.5}),
    ]

    compared = compare_session(
        main, tried, rows, [Outcome(1, "answered"), Outcome(2, "answered")], totals
    )
    report = build_report("exp", "mod:agent", 1, [compared])

    assert compared.blocks_only_candidate == ("tool_call wipe: denied",)
    assert [(c.turn, c.main, c.candidate, c.candidate_answer) for c in compared.changed_turns] == [
        (2, 1.0, 0.0, "c")
    ]
    assert (compared.main.score, compared.candidate.score) == (0.9, 0.4)
    assert compared.main.by_scorer == {"ref": 1.0, "whole": 0.8}
    assert report.totals["main"]["score"] == 1.0
    assert report.totals["candidate"]["score"] == 0.5
    assert report.totals["candidate"]["usage"]["cost"] is None  # one line's cost unknown
    assert report.totals["main"]["usage"]["total_tokens"] == 30
    text = render_text(report)
    assert (
        "s1                         0.90   0.40  -0.50               30/45          $0.2500/?"
        in text
    )
    assert "  blocks only in candidate: tool_call wipe: denied" in text


def test_lines_that_agree_do_not_differ() -> None:
    main = ScoredSession("s1", "main", (turn("main", 1, "same", (LOOKUP,)),))
    tried = ScoredSession("s1", "exp", (turn("exp", 1, "same", (LOOKUP,)),))
    rows = [ScoreRow("s1", "main", 1, "ref", 1.0), ScoreRow("s1", "exp", 1, "ref", 1.0)]

    compared = compare_session(main, tried, rows, [Outcome(1, "answered")])

    assert not compared.differs
    assert build_report("exp", "c", 1, [compared]).changed == ()
