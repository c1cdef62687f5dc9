"""``eval run`` without ``--id`` that stops after it started says the run's id, so the same
command with ``--id`` finishes it (the id was made up and never shown)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from agentjournal import Journal
from cli_run import run
from eval_sessions import record_support

SCORERS = """
scorers:
  - name: helpful
    judge: Is the answer helpful?
    script: judge.yml
"""
JUDGE = """
model: gpt-4.1-mini
answers:
  - {score: 0.9, label: good, reason: Clear., usage: {input_tokens: 10, output_tokens: 2}}
"""


def test_a_run_that_stops_names_its_id_to_finish_it(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'j.db'}"

    async def recorded() -> None:
        async with Journal.open(uri) as journal:
            await record_support(journal, "support-1")

    asyncio.run(recorded())
    (tmp_path / "scorers.yml").write_text(SCORERS)
    (tmp_path / "judge.yml").write_text(JUDGE)  # one answer for three turns: it stops
    stopped = run(
        "eval", "run", "--scorers", str(tmp_path / "scorers.yml"), "support-1", "--uri", uri
    )
    assert stopped.returncode == 1
    assert "its script has no answer left" in stopped.stderr
    assert "is unfinished: add --id eval-" in stopped.stderr
