"""An experiment's candidate runs under the guardrails and the policy the sessions ran under:
what would have been blocked is blocked, and the report shows it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentjournal import Journal
from agentjournal.authority import Authority, Policy, ToolRule
from agentjournal.evals.experiment import run_experiment
from agentjournal.evals.scorers import load_scorers
from agentjournal.guardrails.rules import load_rules
from agentjournal.guardrails.service import running
from experiment_sessions import candidate_script, record, scorers_document

CANDIDATE = "experiment_sessions:candidate"
RULES = """
rules:
  - kind: deny_tools
    tools: [delete_account]
  - kind: deny_phrases
    phrases: ["wire transfer"]
"""


def write(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


async def test_a_candidate_the_guardrail_blocks_shows_the_blocks(tmp_path: Path) -> None:
    script = write(
        tmp_path / "script.yml",
        candidate_script(
            fix=False,
            breaks=False,
            extra={
                "exp-hours": {
                    1: [
                        {"tool_calls": [{"name": "delete_account", "arguments": {"user": "u1"}}]},
                        {"text": "We are open 9 to 17, Monday to Friday."},
                    ]
                },
                "exp-where": {1: [{"text": "Pay the customs fee by wire transfer first."}]},
            },
        ),
    )
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))
    sessions = ["exp-where", "exp-hours", "exp-returns"]
    async with (
        running(load_rules(RULES)) as url,
        Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal,
    ):
        await record(journal, sessions, guardrails=url)

        report = await run_experiment(
            journal, sessions, CANDIDATE, scorers=scorers, model_script=script, guardrails=url
        )

    by_session = {s.session: s for s in report.sessions}
    hours, where = by_session["exp-hours"], by_session["exp-where"]
    assert hours.blocks_only_candidate == (
        "tool_call delete_account: tool 'delete_account' is not allowed",
    )
    assert hours.tool_calls_only_candidate == ('delete_account {"user": "u1"}',)
    assert hours.main.blocks == ()
    assert [(o.turn, o.status) for o in where.outcomes] == [(1, "blocked")]
    assert "AGENT_RESPONSE" in where.outcomes[0].error
    assert len(where.blocks_only_candidate) == 1
    assert where.blocks_only_candidate[0].startswith("output")
    assert [(c.turn, c.main, c.candidate) for c in where.changed_turns] == [(1, 1.0, 0.0)]
    assert not by_session["exp-returns"].differs


async def test_a_candidate_outside_the_recorded_policy_is_refused(tmp_path: Path) -> None:
    policy = Policy(
        agents={"support": Authority.of("orders.*")},
        tools={
            "lookup_order": ToolRule("orders.read"),
            "cancel_order": ToolRule("orders.cancel"),
            "delete_account": ToolRule("accounts.delete"),
        },
    )
    script = write(
        tmp_path / "script.yml",
        candidate_script(
            fix=False,
            breaks=False,
            extra={
                "exp-hours": {
                    1: [
                        {"tool_calls": [{"name": "delete_account", "arguments": {"user": "u1"}}]},
                        {"text": "We are open 9 to 17, Monday to Friday."},
                    ]
                }
            },
        ),
    )
    scorers = load_scorers(write(tmp_path / "scorers.yml", scorers_document()))
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        await record(journal, ["exp-hours", "exp-cancel"], policy=policy)

        # No policy is given here: the session's recorded one is the candidate's.
        report = await run_experiment(
            journal, ["exp-hours", "exp-cancel"], CANDIDATE, scorers=scorers, model_script=script
        )

    by_session = {s.session: s for s in report.sessions}
    hours = by_session["exp-hours"]
    assert hours.refusals_only_candidate == ("delete_account: scope 'accounts.delete' is not held",)
    assert hours.main.refusals == ()
    assert [(o.turn, o.status) for o in hours.outcomes] == [(1, "failed")]
    assert not by_session["exp-cancel"].differs
