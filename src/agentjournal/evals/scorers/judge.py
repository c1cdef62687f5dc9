"""The LLM judge: an Agents SDK agent that scores a turn (or a session line) by a rubric.

The judge is an ``agents.Agent`` whose instructions are the entry's rubric (plus what to
answer) and whose output is structured (:class:`Verdict`: score, label, reason); each
judgement is one ``Runner.run`` on the turn shown as text (:func:`shown_turn`). Its model
is the entry's ``model`` (a name the SDK's default provider runs: an OpenAI model with
``OPENAI_API_KEY`` set) or, offline, a script of answers (``script: FILE``,
:func:`load_judge_script`) played by the SDK's ``ScriptedModel``. Tracing is off for the
judge's runs: its calls are recorded with the score instead (requests, tokens and the
cost under :meth:`~agentjournal.read.usage.Prices.default`, or the entry's ``prices``
file), in
:attr:`~agentjournal.evals.scorers.base.Score.usage` and ``model``.

A verdict the judge cannot give — output that is not a verdict, or a score outside
[0, 1] — is not clamped or dropped: it is the score 0.0 labelled ``judge_error`` with the
reason, so a broken judge shows as failing checks and never as quiet passes. A model
that cannot be reached raises (the run stops, and a resumed run judges again).

The script format is the judge's own rather than the manifest runner's
(:mod:`agentjournal.runner.script`): a judge answers with verdicts, not text or tool
calls, and a script gives each answer's token usage so the recorded usage can be tested::

    model: gpt-4.1-mini          # the name the scripted judge goes by (priced as it)
    answers:
      - score: 0.9
        label: good
        reason: Polite and correct.
        usage: {input_tokens: 310, output_tokens: 24}
      - text: not a verdict      # raw text: a judge that answers badly

This module imports the Agents SDK; a scorers file without a judge never loads it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agents import Agent, ModelBehaviorError, RunConfig, Runner
from agents.models.interface import Model
from agents.testing import ModelStep, ScriptedModel, assistant_message
from agents.usage import Usage as SdkUsage
from pydantic import BaseModel

from agentjournal._text import cut
from agentjournal._yaml import read_yaml
from agentjournal.errors import InvalidInput
from agentjournal.evals.scorers.base import Score
from agentjournal.evals.scorers.entry import Common, Scope, TurnFilter, check_keys, text
from agentjournal.read.evals.turns import ScoredSession, ScoredTurn, TurnUsage
from agentjournal.read.usage import Prices
from agentjournal.tokens import Usage

JUDGE_ERROR: Final = "judge_error"
"""The label of a judgement the judge could not give."""

SCRIPTED: Final = "scripted-judge"
"""The model name of a scripted judge whose script names none."""

ASK: Final = (
    "\n\nYou judge a recorded conversation of an AI agent against the rubric above. Answer "
    "with a score from 0 (fails the rubric) to 1 (meets it fully), a one-word label, and "
    "the reason in one sentence."
)


class Verdict(BaseModel):
    """What the judge answers."""

    score: float
    label: str
    reason: str


@dataclass(slots=True)
class JudgeScorer:
    """An LLM judge (see the module docs).

    Attributes:
        rubric: The rubric (the judge's instructions).
        model_name: The judge's model as recorded (a scripted judge: its script's name).
        model: What ``Agent(model=...)`` is given: the name, or the scripted model.
        prices: What the judge's calls cost.
    """

    name: str
    version: str
    scope: Scope
    filter: TurnFilter
    rubric: str = field(repr=False)
    model_name: str
    model: str | Model = field(repr=False)
    prices: Prices = field(default_factory=Prices.default, repr=False)
    kind: str = "judge"

    @property
    def rubric_sha256(self) -> str:
        """The hex SHA-256 of the rubric's UTF-8 text."""
        return hashlib.sha256(self.rubric.encode("utf-8")).hexdigest()

    def describe(self) -> dict[str, Any]:
        """Its record in ``EvalRunStarted``: with the rubric's digest and the model."""
        return {
            "name": self.name,
            "version": self.version,
            "kind": self.kind,
            "rubric_sha256": self.rubric_sha256,
            "model": self.model_name,
            "scope": self.scope,
        }

    async def score_turn(self, turn: ScoredTurn) -> Score | None:
        """The judge's verdict on one turn (None: a session judge, or a skipped turn)."""
        if self.scope != "turn" or not self.filter.applies(turn):
            return None
        return await self.judge(shown_turn(turn))

    async def score_session(self, session: ScoredSession) -> Score | None:
        """The judge's verdict on the line's turns (None: a turn judge, or no turn)."""
        if self.scope != "session":
            return None
        turns = self.filter.select(session)
        return await self.judge(shown_session(session, turns)) if turns else None

    async def judge(self, shown: str) -> Score:
        """One ``Runner.run`` of the judge on ``shown``, its verdict as a score.

        Raises:
            InvalidInput: A scripted judge has no answer left.
        """
        if isinstance(self.model, ScriptedModel) and self.model.remaining_steps == 0:
            raise InvalidInput(f"judge {self.name}: its script has no answer left")
        agent: Agent[Any] = Agent(
            name=f"judge-{self.name}",
            instructions=self.rubric + ASK,
            model=self.model,
            output_type=Verdict,
        )
        config = RunConfig(tracing_disabled=True, workflow_name=f"judge {self.name}")
        try:
            result = await Runner.run(agent, shown, run_config=config)
        except ModelBehaviorError as error:
            used = error.run_data.context_wrapper.usage if error.run_data is not None else None
            return Score(
                0.0,
                JUDGE_ERROR,
                f"the judge's answer is not a verdict: {cut(str(error), 120)}",
                self._usage(used),
                self.model_name,
            )
        verdict = result.final_output_as(Verdict)
        usage = self._usage(result.context_wrapper.usage)
        if not (math.isfinite(verdict.score) and 0 <= verdict.score <= 1):
            return Score(
                0.0,
                JUDGE_ERROR,
                f"the judge answered the score {verdict.score}, outside [0, 1] "
                f"({cut(verdict.reason, 80)})",
                usage,
                self.model_name,
            )
        label = verdict.label.strip() or ("pass" if verdict.score >= 0.5 else "fail")
        return Score(verdict.score, label, verdict.reason.strip(), usage, self.model_name)

    def _usage(self, used: SdkUsage | None) -> TurnUsage:
        if used is None:
            return TurnUsage()
        counts = Usage(
            requests=used.requests,
            input_tokens=used.input_tokens,
            cached_input_tokens=used.input_tokens_details.cached_tokens or 0,
            output_tokens=used.output_tokens,
            reasoning_tokens=used.output_tokens_details.reasoning_tokens or 0,
            total_tokens=used.total_tokens,
        )
        cost = self.prices.cost(self.model_name, counts)
        return TurnUsage(
            counts.requests,
            counts.input_tokens,
            counts.output_tokens,
            counts.total_tokens,
            float(cost) if cost is not None else None,
        )


# -- what the judge reads ------------------------------------------------------------------


def shown_turn(turn: ScoredTurn) -> str:
    """A turn as the judge reads it: the user's message, the agents, the tool calls with
    their outputs, the guardrail decisions and the answer (pure)."""
    lines = [f"Turn {turn.index} of session {turn.session} (line {turn.line})", ""]
    lines.append(f"User: {turn.input}")
    if turn.agents:
        lines.append(f"Agents: {', '.join(turn.agents)}")
    for call in turn.tool_calls:
        arguments = json.dumps(call.arguments, ensure_ascii=False, default=str)
        output = json.dumps(call.output, ensure_ascii=False, default=str)
        lines.append(f"Tool call: {call.name}({arguments}) -> {output}")
    for check in turn.guardrails:
        subject = f" {check.tool}" if check.tool else ""
        lines.append(f"Guardrail: {check.action} {check.kind}{subject}: {check.reason}")
    lines.append(f"Answer: {turn.output}")
    return "\n".join(lines)


def shown_session(session: ScoredSession, turns: Sequence[ScoredTurn]) -> str:
    """A session line's turns as the judge reads them (pure)."""
    return "\n\n".join(
        [f"Session {session.session} (line {session.line}), {len(turns)} turns"]
        + [shown_turn(turn) for turn in turns]
    )


# -- the scorers file's entry ---------------------------------------------------------------


def judge_scorer(common: Common, entry: Mapping[str, Any], base: Path) -> JudgeScorer:
    """The judge of an entry (``judge: RUBRIC`` with ``model:`` or ``script:``, and
    optionally ``prices:``, a price table file its cost is counted with).

    Raises:
        InvalidInput: The rubric is missing, neither or both of model and script are
            given, a model without a key to call it with ($OPENAI_API_KEY, or the SDK's
            default key or client set), or the script is malformed.
    """
    check_keys(entry, ("judge", "model", "script", "prices"), "judge")
    rubric = text(entry, "judge")
    prices = Prices.load(base / text(entry, "prices")) if "prices" in entry else Prices.default()
    if ("model" in entry) == ("script" in entry):
        raise InvalidInput("a judge needs model: NAME or script: FILE (one of them)")
    if "model" in entry:
        name = text(entry, "model")
        if not _callable_models():
            raise InvalidInput(
                f"model {name} cannot be called: no $OPENAI_API_KEY (script: FILE judges offline)"
            )
        return JudgeScorer(
            common.name, common.version, common.scope, common.filter, rubric, name, name, prices
        )
    name, model = load_judge_script(base / text(entry, "script"))
    return JudgeScorer(
        common.name, common.version, common.scope, common.filter, rubric, name, model, prices
    )


def _callable_models() -> bool:
    """Whether the SDK's default provider has a key or a client to call a model with."""
    if os.environ.get("OPENAI_API_KEY"):
        return True
    from agents.models import _openai_shared as shared

    return bool(shared.get_default_openai_key() or shared.get_default_openai_client())


def load_judge_script(path: Path) -> tuple[str, ScriptedModel]:
    """A judge script (see the module docs): the name it goes by, and its model.

    Raises:
        InvalidInput: The file cannot be read or is malformed (the message names the
            answer).
    """
    document = read_yaml(path, "judge script")
    where = f"judge script {path}"
    if not isinstance(document, Mapping) or not set(document) <= {"model", "answers"}:
        raise InvalidInput(f"{where}: expected a mapping with answers (and model)")
    name = document.get("model", SCRIPTED)
    if not isinstance(name, str) or not name.strip():
        raise InvalidInput(f"{where}: model must be a name")
    answers = document.get("answers")
    if not isinstance(answers, list) or not answers:
        raise InvalidInput(f"{where}: answers must be a non-empty list")
    steps = [_step(answer, f"{where}: answer {n}") for n, answer in enumerate(answers, start=1)]
    model = ScriptedModel(steps)
    model.model = name  # type: ignore[attr-defined]  # the name its usage is priced as
    return name, model


def _step(answer: Any, where: str) -> ModelStep:
    if not isinstance(answer, Mapping):
        raise InvalidInput(f"{where}: expected {{score, label, reason}} or {{text}}")
    given = dict(answer)
    usage = given.pop("usage", {})
    if not isinstance(usage, Mapping) or not set(usage) <= {"input_tokens", "output_tokens"}:
        raise InvalidInput(f"{where}: usage takes input_tokens and output_tokens")
    counts = [usage.get("input_tokens", 0), usage.get("output_tokens", 0)]
    if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
        raise InvalidInput(f"{where}: token counts are whole numbers of 0 or more")
    if set(given) == {"text"} and isinstance(given["text"], str):
        body = given["text"]
    elif set(given) == {"score", "label", "reason"}:
        body = json.dumps(given, ensure_ascii=False)
    else:
        raise InvalidInput(f"{where}: expected score, label and reason (or text alone)")
    return ModelStep(
        output=[assistant_message(body)],
        usage=SdkUsage(
            requests=1,
            input_tokens=counts[0],
            output_tokens=counts[1],
            total_tokens=counts[0] + counts[1],
        ),
    )
