"""Every sample runs and says what it claims."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
