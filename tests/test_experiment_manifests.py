"""A directory of manifests as an experiment's candidate: built by the manifest runner's own
factory (tools bound, ``system::handoff``), scripted per turn, run on the branch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from agents import Agent
from agents.testing import ScriptedModel, assistant_message

from agentjournal import Journal
from agentjournal.errors import InvalidInput
from agentjournal.evals.candidate import load_candidate
from agentjournal.evals.experiment import run_experiment
from agentjournal.evals.scorers import load_scorers
from drive import drive

MANIFESTS = Path(__file__).resolve().parent.parent / "samples" / "manifests"
MANAGER = "io.clawpedia.agents.jira-ticket-manager"
ADMIN = "io.clawpedia.agents.jira-admin"
ASKED = "What is the status of PROJ-123? Also create a new project named Bluebird."
ANSWER = "PROJ-123 is In Progress (dana). Project Bluebird is created with key BLUE."


async def test_a_manifest_candidate_hands_off_and_answers_on_the_branch(tmp_path: Path) -> None:
    script = tmp_path / "script.yml"
    script.write_text(
        yaml.safe_dump(
            {
                "jira-1": {
                    1: {
                        MANAGER: [
                            {
                                "tool_calls": [
                                    {
                                        "name": "get_ticket_details",
                                        "arguments": {"ticket_id": "PROJ-123"},
                                    }
                                ]
                            },
                            {
                                "tool_calls": [
                                    {
                                        "name": "system::handoff",
                                        "arguments": {
                                            "target_agent_id": ADMIN,
                                            "input": "Create Bluebird.",
                                        },
                                    }
                                ]
                            },
                        ],
                        ADMIN: [
                            {
                                "tool_calls": [
                                    {"name": "create_project", "arguments": {"name": "Bluebird"}}
                                ]
                            },
                            {"text": ANSWER},
                        ],
                    }
                }
            }
        ),
        encoding="utf-8",
    )
    scorers = tmp_path / "scorers.yml"
    scorers.write_text(
        yaml.safe_dump(
            {"scorers": [{"name": "answers", "reference": {"jira-1": {1: {"contains": "BLUE"}}}}]}
        ),
        encoding="utf-8",
    )
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        session = journal.session("jira-1")
        recorded: Agent[Any] = Agent(
            name=MANAGER, model=ScriptedModel([[assistant_message("I cannot create projects.")]])
        )
        await drive(recorded, ASKED, session=session, hooks=session)

        report = await run_experiment(
            journal,
            ["jira-1"],
            f"{MANIFESTS}:{MANAGER}",
            scorers=load_scorers(scorers),
            model_script=script,
        )

    (compared,) = report.sessions
    assert [(o.turn, o.status) for o in compared.outcomes] == [(1, "answered")]
    assert compared.candidate.final == ANSWER
    assert [c.split(" ")[0] for c in compared.tool_calls_only_candidate] == [
        "get_ticket_details",
        "system__handoff",
        "create_project",
    ]
    assert [(c.main, c.candidate) for c in compared.changed_turns] == [(0.0, 1.0)]


def test_a_directory_of_several_agents_needs_one_named() -> None:
    with pytest.raises(InvalidInput, match=r"holds 2 agents .* name one as DIR:ID"):
        load_candidate(str(MANIFESTS))
    assert load_candidate(f"{MANIFESTS}:{ADMIN}").name == ADMIN
