"""The command line, run as a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_demo_shows_the_session_tree_and_the_replay(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    result = run("demo", "--db", str(db))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "refunds: I refunded the duplicate charge of 12.50 EUR." in out
    assert "AgentSession-support-" in out
    assert "-sub-billing-call_to_billing" in out
    assert "-sub-refunds-call_to_refunds" in out
    assert out.count("SubagentCompleted") == 4  # two subagents, each on both of its streams
    assert "replayed flat history (16 items" in out
    # The reference guardrail redacted the note's e-mail address and refused the large refund.
    assert "GuardrailDecided             TOOL_CALL add_note: MODIFY PII_REDACTED" in out
    assert "noted on order 42: [REDACTED] disputes" in out
    assert "GuardrailDecided             TOOL_CALL issue_refund: BLOCK CEILING_EXCEEDED" in out
    assert "Error: the guardrail blocked this call to issue_re" in out
    assert f"database: {db}" in out
    # The ledger: exported and verified offline with the key kept next to the database.
    assert "  integrity: 37 events in 4 streams chain correctly" in out
    assert "\n  OK\n" in out
    assert f"--pubkey {db}.key.pem.pub" in out
    assert (db.parent / "demo.db.key.pem").stat().st_mode & 0o777 == 0o600
    assert db.exists()


def test_selfcheck_on_a_fresh_file_passes() -> None:
    result = run("selfcheck")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "OK"
    assert "FAIL" not in result.stdout


def test_selfcheck_on_a_named_store(tmp_path: Path) -> None:
    db = tmp_path / "checked.db"
    result = run("selfcheck", "--uri", f"sqlite:///{db}")
    assert result.returncode == 0, result.stderr
    assert db.exists()


def test_unknown_store_is_a_usage_error() -> None:
    result = run("selfcheck", "--uri", "postgres://db/x")
    assert result.returncode == 1
    assert "unknown store URI" in result.stderr
