"""Experiments refused before anything is written: sessions that ran under a guardrail
service, without one (a candidate that would have been blocked must show it, never pass
unchecked), and a model script that names none of the sessions (every turn would fail)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentjournal import Journal
from agentjournal.errors import InvalidInput
from agentjournal.evals.experiment import run_experiment
from agentjournal.evals.scorers import load_scorers
from agentjournal.guardrails.rules import load_rules
from agentjournal.guardrails.service import running
from agentjournal.journal import GUARDRAIL_URL_ENV
from experiment_sessions import candidate_script, record, scorers_document

RULES = """
rules:
  - kind: deny_tools
    tools: [delete_account]
"""


async def test_a_guarded_session_without_a_guardrail_service_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(GUARDRAIL_URL_ENV, raising=False)
    script = tmp_path / "script.yml"
    script.write_text(yaml.safe_dump(candidate_script(fix=False, breaks=False)), encoding="utf-8")
    scorers_file = tmp_path / "scorers.yml"
    scorers_file.write_text(yaml.safe_dump(scorers_document()), encoding="utf-8")
    async with (
        running(load_rules(RULES)) as url,
        Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal,
    ):
        await record(journal, ["exp-hours"], guardrails=url)
        before = [e.id for e in await journal.store.read_all()]
        with pytest.raises(InvalidInput, match="ran under a guardrail service"):
            await run_experiment(
                journal,
                ["exp-hours"],
                "experiment_sessions:candidate",
                scorers=load_scorers(scorers_file),
                model_script=script,
            )
        after = [e.id for e in await journal.store.read_all()]
    assert after == before


async def test_a_model_script_that_names_none_of_the_sessions_is_refused(tmp_path: Path) -> None:
    scorers_file = tmp_path / "scorers.yml"
    scorers_file.write_text(yaml.safe_dump(scorers_document()), encoding="utf-8")
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record(journal, ["exp-hours"])
        before = [e.id for e in await journal.store.read_all()]
        with pytest.raises(InvalidInput, match="names none of the sessions \\(exp-hours\\)"):
            await run_experiment(
                journal,
                ["exp-hours"],
                "experiment_sessions:candidate",
                scorers=load_scorers(scorers_file),
                model_script=scorers_file,  # the wrong file
            )
        after = [e.id for e in await journal.store.read_all()]
    assert after == before
