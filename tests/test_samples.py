"""Every sample runs and says what it claims."""

from __future__ import annotations

import os
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


@pytest.mark.slow
def test_erasure_sample(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "AGENTJOURNAL_URI": f"sqlite:///{tmp_path / 'journal.db'}",
        "AGENTJOURNAL_KEYS": str(tmp_path / "keys.db"),
    }
    env.pop("AGENTJOURNAL_SIGNING_KEY", None)
    env.pop("AGENTJOURNAL_SIGNING_KEY_FILE", None)

    def run(*argv: str) -> str:
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=120, check=False, env=env
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    python = sys.executable
    assert "Refunded to the card ending 1111." in run(python, str(SAMPLES / "erasure.py"))
    cli = [python, "-m", "agentjournal.cli"]
    erased = run(*cli, "erase", "--subject", "user-42", "--reason", "GDPR 88", "--as", "dpo")
    assert "SubjectErased on sessions: support-4900" in erased
    shown = run(python, str(SAMPLES / "erasure.py"), "--show")
    assert "[erased]" in shown
    assert "Jane Example" not in shown
    assert "a new turn runs on the erased history" in shown
    verified = run(*cli, "verify", "support-4900", "--allow-uncovered")
    assert "content of subject user-42 erased at" in verified
    assert b"Jane Example" not in (tmp_path / "journal.db").read_bytes()
