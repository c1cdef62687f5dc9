"""Every sample runs and says what it claims."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def run_sample(name: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(SAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_event_store_sample(tmp_path: Path) -> None:
    out = run_sample("event_store.py", f"sqlite:///{tmp_path / 'sample.db'}")
    assert "conflict, as expected" in out
    assert "AgentSession-demo@1 " in out
    assert "AgentSubsession-demo-sub-billing-1@0 " in out
    assert "tail of AgentSession-demo: SubagentStarted" in out


@pytest.mark.slow
def test_authority_seed_sample() -> None:
    guarded = run_sample("authority_seed.py")
    assert "refused at handoff_visibility: triage -> sre" in guarded
    assert "refused at invocation: billing -> issue_credit (amount_cents=25000" in guarded
    assert "refused at invocation: triage -> kb_export (destination='any'" in guarded
    assert "tool bodies ran: none" in guarded
    gates_off = run_sample("authority_seed.py", "--no-visibility")
    assert "refused at invocation: triage -> sre" in gates_off
    assert "refused at invocation: billing -> issue_credit" in gates_off
    unguarded = run_sample("authority_seed.py", "--no-policy")
    assert "tool bodies ran: ['credit c-7 25000']" in unguarded
    assert "refused" not in unguarded
