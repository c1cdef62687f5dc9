"""The benchmarks still run: each one's smoke mode, as a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_session_benchmark_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "session.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "(c) full get_items of" in result.stdout
    # The handoff case checks its replays against SQLiteSession before timing them.
    assert "(d) replay 5 handoffs x 10 items, cold" in result.stdout
    assert "(d) replay 5 handoffs x 10 items, warm" in result.stdout
