"""Scorers over a recorded support conversation: rules, reference answers, a scripted LLM
judge, importable functions, and the scorers file's one-line errors."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.errors import InvalidInput
from agentjournal.evals.scorers import Score, Scorer, load_scorers
from agentjournal.evals.scorers.judge import JUDGE_ERROR, JudgeScorer
from agentjournal.read.evals.turns import ScoredSession, TurnUsage, session_turns
from agentjournal.read.usage import Prices
from agentjournal.tokens import Usage
from eval_support import ANSWERS, INPUTS, PRICES, record_support

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


@pytest.fixture
async def support(tmp_path: Path) -> AsyncIterator[ScoredSession]:
    """The support conversation, recorded by real Runner runs and read back (priced)."""
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}") as journal:
        await record_support(journal, "support-1")
        yield await session_turns(journal.store, "support-1", prices=PRICES)


def _scorers(tmp_path: Path, text: str, **files: str) -> list[Scorer]:
    for name, body in files.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    path = tmp_path / "scorers.yaml"
    path.write_text(text, encoding="utf-8")
    return load_scorers(path)


def _one(tmp_path: Path, text: str, **files: str) -> Scorer:
    (scorer,) = _scorers(tmp_path, "scorers:\n" + text, **files)
    return scorer


async def _by_turn(scorer: Scorer, session: ScoredSession) -> list[Score | None]:
    return [await scorer.score_turn(turn) for turn in session.turns]


def _values(scores: list[Score | None]) -> list[float | None]:
    return [None if s is None else s.value for s in scores]


# -- rules ------------------------------------------------------------------------------


async def test_tool_called_passes_where_the_call_with_its_arguments_was_made(
    tmp_path: Path, support: ScoredSession
) -> None:
    scorer = _one(
        tmp_path,
        """
  - name: refund-called
    rule: tool_called
    tool: refund
    arguments: {order_id: "42"}
    arguments_match: {amount_cents: "^1250$"}
""",
    )
    scores = await _by_turn(scorer, support)
    assert _values(scores) == [0.0, 1.0, 0.0]
    assert scores[0] is not None
    assert scores[0].label == "fail"
    assert "calls: lookup_order" in scores[0].reason
    assert scores[1] is not None
    assert scores[1].label == "pass"
    assert "refund" in scores[1].reason
    assert "turn 2" in scores[1].reason
    assert await scorer.score_session(support) is None  # a turn rule


async def test_tool_called_fails_when_the_arguments_differ(
    tmp_path: Path, support: ScoredSession
) -> None:
    subset = _one(
        tmp_path, "  - {name: a, rule: tool_called, tool: refund, arguments: {order_id: '7'}}"
    )
    pattern = _one(
        tmp_path,
        "  - {name: b, rule: tool_called, tool: refund, arguments_match: {amount_cents: '^99'}}",
    )
    assert _values(await _by_turn(subset, support)) == [0.0, 0.0, 0.0]
    assert _values(await _by_turn(pattern, support)) == [0.0, 0.0, 0.0]


async def test_tool_not_called_fails_where_the_call_was_made(
    tmp_path: Path, support: ScoredSession
) -> None:
    scorer = _one(tmp_path, "  - {name: n, rule: tool_not_called, tool: refund}")
    scores = await _by_turn(scorer, support)
    assert _values(scores) == [1.0, 0.0, 1.0]
    session = _one(tmp_path, "  - {name: n, rule: tool_not_called, tool: refund, scope: session}")
    whole = await session.score_session(support)
    assert whole is not None
    assert (whole.value, whole.label) == (0.0, "fail")
    assert "in turn 2" in whole.reason


async def test_answer_matches_searches_the_answer(tmp_path: Path, support: ScoredSession) -> None:
    scorer = _one(tmp_path, "  - {name: m, rule: answer_matches, pattern: '(?i)charged twice'}")
    scores = await _by_turn(scorer, support)
    assert _values(scores) == [1.0, 0.0, 0.0]
    assert scores[1] is not None
    assert "does not match" in scores[1].reason


async def test_answer_schema_parses_the_answer_as_json(
    tmp_path: Path, support: ScoredSession
) -> None:
    scorer = _one(
        tmp_path,
        """
  - name: status
    rule: answer_schema
    schema: {type: object, required: [status], properties: {status: {enum: [resolved]}}}
""",
    )
    scores = await _by_turn(scorer, support)
    assert _values(scores) == [0.0, 0.0, 1.0]
    assert scores[0] is not None
    assert "not JSON" in scores[0].reason
    wrong = _one(
        tmp_path,
        "  - {name: s, rule: answer_schema, schema: {properties: {order_id: {type: integer}}}}",
    )
    last = await wrong.score_turn(support.turns[2])
    assert last is not None
    assert last.value == 0.0
    assert "at order_id" in last.reason
    assert "integer" in last.reason


async def test_no_guardrail_block_fails_the_turn_with_the_block(
    tmp_path: Path, support: ScoredSession
) -> None:
    scorer = _one(tmp_path, "  - {name: g, rule: no_guardrail_block}")
    scores = await _by_turn(scorer, support)
    assert _values(scores) == [1.0, 0.0, 1.0]
    assert scores[1] is not None
    assert scores[1].reason.startswith("a guardrail blocked tool_call refund by billing in turn 2")
    inputs_only = _one(tmp_path, "  - {name: g, rule: no_guardrail_block, kinds: [input]}")
    assert _values(await _by_turn(inputs_only, support)) == [1.0, 1.0, 1.0]
    session = _one(tmp_path, "  - {name: g, rule: no_guardrail_block, scope: session}")
    whole = await session.score_session(support)
    assert whole is not None
    assert whole.value == 0.0


async def test_cost_under_compares_the_priced_cost(tmp_path: Path, support: ScoredSession) -> None:
    # Turn 1: 240 input and 60 output tokens at 1 and 4 USD per 1M: 0.00048 USD.
    tight = _one(tmp_path, "  - {name: c, rule: cost_under, max: 0.0005}")
    assert _values(await _by_turn(tight, support)) == [1.0, 0.0, 1.0]
    session = _one(tmp_path, "  - {name: c, rule: cost_under, max: 0.001, scope: session}")
    whole = await session.score_session(support)
    assert whole is not None
    assert whole.label == "fail"
    assert "over 0.001" in whole.reason
    unpriced = await _unpriced(support)
    unknown = await tight.score_turn(unpriced.turns[0])
    assert unknown is not None
    assert (unknown.value, unknown.label) == (0.0, "unknown")


async def _unpriced(support: ScoredSession) -> ScoredSession:
    turns = tuple(
        replace(t, usage=TurnUsage(t.usage.requests, 1, 1, 2, None)) for t in support.turns
    )
    return replace(support, turns=turns)


async def test_tokens_under_counts_the_chosen_tokens(
    tmp_path: Path, support: ScoredSession
) -> None:
    total = _one(tmp_path, "  - {name: t, rule: tokens_under, max: 300}")
    assert _values(await _by_turn(total, support)) == [1.0, 0.0, 1.0]  # 300, 350, 150
    output = _one(tmp_path, "  - {name: t, rule: tokens_under, max: 60, count: output}")
    assert _values(await _by_turn(output, support)) == [1.0, 0.0, 1.0]  # 60, 70, 30


async def test_handoff_reached_names_the_agent(tmp_path: Path, support: ScoredSession) -> None:
    scorer = _one(tmp_path, "  - {name: h, rule: handoff_reached, agent: billing}")
    scores = await _by_turn(scorer, support)
    assert _values(scores) == [0.0, 1.0, 0.0]
    assert scores[0] is not None
    assert "agents: triage" in scores[0].reason
    session = _one(tmp_path, "  - {name: h, rule: handoff_reached, agent: sre, scope: session}")
    whole = await session.score_session(support)
    assert whole is not None
    assert whole.value == 0.0


async def test_turn_filters_leave_other_turns_unscored(
    tmp_path: Path, support: ScoredSession
) -> None:
    by_number = _one(tmp_path, "  - {name: f, rule: handoff_reached, agent: billing, turns: [2]}")
    assert _values(await _by_turn(by_number, support)) == [None, 1.0, None]
    by_input = _one(
        tmp_path,
        "  - {name: f, rule: handoff_reached, agent: billing, when_input_matches: '(?i)refund'}",
    )
    assert _values(await _by_turn(by_input, support)) == [None, 1.0, None]
    session = _one(
        tmp_path,
        "  - {name: f, rule: tool_called, tool: refund, scope: session, turns: [1, 3]}",
    )
    whole = await session.score_session(support)
    assert whole is not None
    assert whole.value == 0.0


# -- reference answers ------------------------------------------------------------------


async def test_reference_answers_by_session_and_turn(
    tmp_path: Path, support: ScoredSession
) -> None:
    scorer = _one(
        tmp_path,
        """
  - name: expected
    reference:
      support-1:
        1: "order 42 was charged twice 2 x 12.50 eur"
        2: {contains: "A colleague will refund"}
        3: {exact: "resolved"}
      another-session: {1: nothing}
""",
    )
    scores = await _by_turn(scorer, support)
    assert _values(scores) == [1.0, 1.0, 0.0]
    assert scores[2] is not None
    assert "similarity" in scores[2].reason
    assert scorer.describe() == {
        "name": "expected",
        "version": "1",
        "kind": "reference",
        "match": "normalized",
        "scope": "turn",
    }


async def test_reference_answers_as_a_list_a_file_and_patterns(
    tmp_path: Path, support: ScoredSession
) -> None:
    listed = _one(
        tmp_path,
        "  - {name: r, reference: ['ORDER 42 was charged twice: 2 x 12.50 EUR', null, '^\\{'],"
        " match: regex}",
    )
    assert _values(await _by_turn(listed, support)) == [0.0, None, 1.0]  # regex: case counts
    from_file = _one(
        tmp_path,
        "  - {name: r, reference: answers.yaml}",
        **{"answers.yaml": "support-1:\n  2: {pattern: 'colleague'}\n"},
    )
    assert _values(await _by_turn(from_file, support)) == [None, 1.0, None]


async def test_a_similar_reference_gives_partial_credit(
    tmp_path: Path, support: ScoredSession
) -> None:
    scorer = _one(
        tmp_path,
        "  - {name: r, match: similar, reference: ['Order 42 has been charged twice: 2 x 12.50"
        " EUR', 'Your refund of 12.50 EUR is done']}",
    )
    first, second, third = await _by_turn(scorer, support)
    assert first is not None
    assert second is not None
    assert third is None
    assert 0.8 <= first.value < 1.0
    assert first.label == "pass"
    assert 0.0 < second.value < 0.8
    assert second.label == "fail"
    session = _one(
        tmp_path,
        "  - {name: r, match: similar, scope: session, reference: ['Order 42 has been"
        " charged twice: 2 x 12.50 EUR', 'Your refund of 12.50 EUR is done']}",
    )
    whole = await session.score_session(support)
    assert whole is not None
    assert whole.value == pytest.approx((first.value + second.value) / 2)
    assert whole.reason == "1 of 2 turns as expected (not turn 2)"


# -- importable functions ---------------------------------------------------------------


async def test_a_callable_scores_in_each_form_it_may_return(
    tmp_path: Path, support: ScoredSession
) -> None:
    tuple_form, async_form, session_form = _scorers(
        tmp_path,
        """
- {name: order, callable: "eval_callables:mentions_order"}
- {name: short, callable: "eval_callables:short_answer", version: 3}
- {name: turns, callable: "eval_callables:turns_over_three", scope: session}
""",
    )
    assert _values(await _by_turn(tuple_form, support)) == [1.0, 0.0, 1.0]
    short = await async_form.score_turn(support.turns[0])
    assert short is not None
    assert short.label == "short"
    assert 0 < short.value < 1
    assert async_form.version == "3"
    whole = await session_form.score_session(support)
    assert whole is not None
    assert (whole.value, whole.label) == (1.0, "pass")
    assert session_form.describe()["callable"] == "eval_callables:turns_over_three"


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("out_of_range", r"scorer bad: returned the score 1\.5, outside \[0, 1\]"),
        ("wrong_type", "scorer bad: returned str"),
    ],
)
async def test_a_callable_returning_no_score_is_refused(
    tmp_path: Path, support: ScoredSession, function: str, message: str
) -> None:
    scorer = _one(tmp_path, f"  - {{name: bad, callable: 'eval_callables:{function}'}}")
    with pytest.raises(InvalidInput, match=message):
        await scorer.score_turn(support.turns[0])


# -- the judge --------------------------------------------------------------------------

_JUDGE_SCRIPT = """
model: gpt-4.1-mini
answers:
  - score: 0.9
    label: good
    reason: Explains the charge.
    usage: {input_tokens: 400, output_tokens: 30}
  - {score: 1.7, label: great, reason: Too kind., usage: {input_tokens: 500, output_tokens: 20}}
  - text: I think it is fine
"""

_RUBRIC = "Does the answer explain what happened to the order?"


async def test_the_judge_runs_the_rubric_and_records_its_usage(
    tmp_path: Path, support: ScoredSession
) -> None:
    scorer = _one(
        tmp_path,
        f"  - {{name: helpful, judge: '{_RUBRIC}', script: judge.yaml, version: '2'}}",
        **{"judge.yaml": _JUDGE_SCRIPT},
    )
    assert isinstance(scorer, JudgeScorer)
    first, second, third = await _by_turn(scorer, support)
    assert first is not None
    assert (first.value, first.label, first.reason) == (
        0.9,
        "good",
        "Explains the charge.",
    )
    assert first.model == "gpt-4.1-mini"
    assert first.usage is not None
    assert (first.usage.requests, first.usage.input_tokens, first.usage.output_tokens) == (
        1,
        400,
        30,
    )
    # The judge's cost is its model's in the maintained table (genai-prices).
    maintained = Prices.default().cost("gpt-4.1-mini", Usage(1, 400, 0, 30, 0, 430))
    assert maintained is not None
    assert first.usage.cost == pytest.approx(float(maintained))
    # A score outside [0, 1] and an answer that is no verdict are judge errors, not clamped.
    assert second is not None
    assert (second.value, second.label) == (0.0, JUDGE_ERROR)
    assert "1.7, outside [0, 1]" in second.reason
    assert second.usage is not None
    assert second.usage.input_tokens == 500
    assert third is not None
    assert (third.value, third.label) == (0.0, JUDGE_ERROR)
    assert "not a verdict" in third.reason
    # The judge read the rubric and the turn.
    model: Any = scorer.model
    call = model.calls[0]
    assert _RUBRIC in str(call.system_instructions)
    shown = str(call.input)
    assert INPUTS[0] in shown
    assert ANSWERS[0] in shown
    assert "lookup_order" in shown
    assert scorer.describe() == {
        "name": "helpful",
        "version": "2",
        "kind": "judge",
        "rubric_sha256": hashlib.sha256(_RUBRIC.encode()).hexdigest(),
        "model": "gpt-4.1-mini",
        "scope": "turn",
    }
    with pytest.raises(InvalidInput, match="judge helpful: its script has no answer left"):
        await scorer.score_turn(support.turns[0])


async def test_a_session_judge_reads_every_turn(tmp_path: Path, support: ScoredSession) -> None:
    scorer = _one(
        tmp_path,
        "  - {name: j, judge: 'Is the case resolved?', script: j.yaml, scope: session}",
        **{"j.yaml": "answers: [{score: 1, label: resolved, reason: It is.}]"},
    )
    assert await scorer.score_turn(support.turns[0]) is None
    whole = await scorer.score_session(support)
    assert whole is not None
    assert (whole.value, whole.model) == (1.0, "scripted-judge")
    assert isinstance(scorer, JudgeScorer)
    model: Any = scorer.model
    shown = str(model.calls[0].input)
    assert all(text in shown for text in INPUTS)


# -- the sample file, end to end ---------------------------------------------------------


async def test_the_sample_scorers_file_scores_the_support_conversation(
    support: ScoredSession,
) -> None:
    scorers = load_scorers(SAMPLES / "scorers.yml")
    kinds = {scorer.name: scorer.kind for scorer in scorers}
    assert set(kinds.values()) == {"rule", "reference", "judge"}
    turns: dict[str, list[float | None]] = {}
    sessions: dict[str, float | None] = {}
    for scorer in scorers:
        turns[scorer.name] = _values(await _by_turn(scorer, support))
        whole = await scorer.score_session(support)
        sessions[scorer.name] = None if whole is None else whole.value
    assert turns["refund-called"] == [None, 1.0, None]
    assert turns["no-guardrail-block"] == [1.0, 0.0, 1.0]
    assert turns["looked-up-first"] == [1.0, None, None]
    assert sessions["reached-billing"] == 1.0
    assert turns["status-json"] == [None, None, 1.0]
    assert turns["tokens-per-turn"] == [1.0, 1.0, 1.0]
    assert sessions["session-cost"] == 1.0
    assert turns["expected-answers"] == [1.0, 1.0, 1.0]
    assert turns["helpful"] == [1.0, 0.6, 0.8]


# -- the scorers file -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "scorers:\n  - {name: refund-called, rule: tool_caled, tool: refund}",
            "entry 1 (refund-called): unknown rule 'tool_caled' (rules: answer_matches, ",
        ),
        (
            "- {name: a, rule: no_guardrail_block}\n- {name: a, rule: no_guardrail_block}",
            "entry 2 (a): the name 'a' is taken by entry 1 (names are unique)",
        ),
        ("- {rule: no_guardrail_block}", "entry 1: name is missing"),
        ("- {name: a}", "entry 1 (a): give exactly one of rule, reference, judge, callable"),
        (
            "- {name: a, rule: no_guardrail_block, callable: 'x:y'}",
            "give exactly one of rule, reference, judge, callable (it has rule, callable)",
        ),
        ("- {name: a, rule: answer_matches, pattern: '(('}", "pattern: '((' is not a regular"),
        (
            "- {name: a, rule: answer_schema, schema: {type: 7}}",
            "entry 1 (a): schema is not a valid JSON Schema",
        ),
        (
            "- {name: a, rule: tool_called, tool: refund, argument: {}}",
            "unknown key 'argument' for rule tool_called (its keys: rule, tool, arguments, ",
        ),
        ("- {name: a, rule: tool_called}", "entry 1 (a): tool must be non-empty text"),
        ("- {name: a, rule: cost_under, max: -1}", "max must be a number of 0 or more"),
        ("- {name: a, rule: no_guardrail_block, scope: run}", "scope must be turn or session"),
        ("- {name: a, rule: no_guardrail_block, turns: 2}", "turns must be a non-empty list"),
        ("- {name: a, rule: no_guardrail_block, kinds: [tool]}", "kinds must be a list of"),
        ("- {name: a, rule: tokens_under, max: 5, count: all}", "count must be one of total"),
        ("- {name: a, judge: Be kind.}", "entry 1 (a): a judge needs model: NAME or script: FILE"),
        (
            "- {name: a, judge: Be kind., script: missing.yaml}",
            "entry 1 (a): cannot read judge script ",
        ),
        ("- {name: a, callable: nowhere_at_all:f}", "cannot import nowhere_at_all"),
        ("- {name: a, callable: 'eval_callables:nope'}", "eval_callables has no function nope"),
        ("- {name: a, callable: eval_callables}", "must be package.module:function"),
        ("- {name: a, reference: {s: {first: x}}}", "reference.s: 'first' is not a turn number"),
        (
            "- {name: a, reference: [{pattern: x, contains: y}]}",
            "reference.1: give one of exact, normalized, contains, pattern or similar",
        ),
        ("- {name: a, reference: [x], match: fuzzy}", "match must be one of exact, normalized"),
        ("scorers: []", "expected a non-empty list of scorers"),
        ("scorers: [{name: a, rule: no_guardrail_block}]\nextra: 1", "(found extra)"),
        ("scorers: [\n  {name: a", "is not valid YAML at line"),
    ],
)
def test_a_bad_scorers_file_is_one_line_naming_the_entry(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "scorers.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInput) as raised:
        load_scorers(path)
    said = str(raised.value)
    assert message in said
    assert "\n" not in said
    assert "scorers.yaml" in said


def test_a_bad_judge_script_names_the_answer(tmp_path: Path) -> None:
    (tmp_path / "j.yaml").write_text("answers: [{score: 1, label: ok}]", encoding="utf-8")
    path = tmp_path / "scorers.yaml"
    path.write_text("- {name: a, judge: Be kind., script: j.yaml}", encoding="utf-8")
    with pytest.raises(InvalidInput, match=r"entry 1 \(a\): judge script .*j.yaml: answer 1: "):
        load_scorers(path)


def test_versions_default_to_1_and_are_text(tmp_path: Path) -> None:
    first, second = _scorers(
        tmp_path,
        "- {name: a, rule: no_guardrail_block}\n- {name: b, rule: no_guardrail_block, version: 2}",
    )
    assert (first.version, second.version) == ("1", "2")
    assert first.describe() == {
        "name": "a",
        "version": "1",
        "kind": "rule",
        "rule": "no_guardrail_block",
        "scope": "turn",
    }


@pytest.mark.slow
def test_a_scorers_file_without_a_judge_does_not_import_the_agents_sdk(tmp_path: Path) -> None:
    path = tmp_path / "scorers.yaml"
    path.write_text(
        "- {name: a, rule: tool_called, tool: refund}\n- {name: b, reference: [x]}\n",
        encoding="utf-8",
    )
    code = (
        "import sys; from agentjournal.evals.scorers import load_scorers; "
        f"load_scorers({str(path)!r}); print(sorted(m for m in sys.modules if m == 'agents' "
        "or m.startswith('agents.')))"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PYTHONPATH": src},
    )
    assert result.stdout.strip() == "[]"


async def test_a_python_function_is_a_scorer_without_a_file(support: ScoredSession) -> None:
    from agentjournal.evals.scorers.callable import as_scorer
    from eval_callables import mentions_order, turns_over_three

    per_turn = as_scorer(mentions_order)
    assert isinstance(per_turn, Scorer)
    assert (per_turn.name, per_turn.version, per_turn.kind) == ("mentions_order", "1", "callable")
    assert _values(await _by_turn(per_turn, support)) == [1.0, 0.0, 1.0]
    whole = as_scorer(turns_over_three, name="length", scope="session")
    assert (await whole.score_session(support)) == Score(1.0, "pass", "")
    assert whole.describe()["callable"] == "eval_callables:turns_over_three"
    with pytest.raises(InvalidInput, match="a scorer is a function"):
        as_scorer("mentions_order")  # type: ignore[arg-type]


async def test_a_judge_counts_its_cost_with_the_entrys_price_table(
    tmp_path: Path, support: ScoredSession
) -> None:
    scorer = _one(
        tmp_path,
        "  - {name: j, judge: Be fair., script: j.yaml, prices: prices.yml}",
        **{
            "j.yaml": "model: house-judge\nanswers:\n  - {score: 1, label: ok, reason: Fine.,"
            " usage: {input_tokens: 1000, output_tokens: 500}}\n",
            "prices.yml": "models:\n  house-judge: {input: 2.0, output: 10.0}\n",
        },
    )
    score = await scorer.score_turn(support.turns[0])
    assert score is not None
    assert score.usage is not None
    assert score.usage.cost == pytest.approx((1000 * 2.0 + 500 * 10.0) / 1e6)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("OPENAI_API_KEY"), reason="a real judge needs a key")
async def test_a_real_model_judges_with_a_key(tmp_path: Path, support: ScoredSession) -> None:
    scorer = _one(
        tmp_path,
        "  - {name: j, judge: 'Does the answer explain the double charge?', model: gpt-4.1-mini}",
    )
    score = await scorer.score_turn(support.turns[0])
    assert score is not None
    assert 0.0 <= score.value <= 1.0
    assert score.label != JUDGE_ERROR
    assert score.usage is not None
    assert score.usage.requests >= 1
    assert score.usage.input_tokens > 0
