"""The benchmarks still run: each one's smoke mode, as a real subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each benchmark's smoke mode as a real process


ROOT = Path(__file__).resolve().parents[1]


def run_bench(name: str, *args: str) -> str:
    """Run ``bench/{name}.py --quick`` and return what it printed."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{name}.py"), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_session_benchmark_runs() -> None:
    out = run_bench("session")
    assert "(c) full get_items of" in out
    # The handoff case checks its replays against SQLiteSession before timing them.
    assert "(d) replay 5 handoffs x 10 items, cold" in out
    assert "(d) replay 5 handoffs x 10 items, warm" in out
    # Many sessions' concurrent turns, each session's items checked after timing.
    assert "(f) 50 sessions x 2 turns, concurrent" in out
    # The floors: our store alone takes the recorded writes whole (checked on close).
    assert "(a) floor: our store alone, the turn's writes" in out
    assert "(f) floor: our store alone, the same turns' writes" in out


def test_store_benchmark_runs() -> None:
    out = run_bench("store", "--store", "sqlite")
    assert "append_many 2 streams" in out
    assert "tail read 20 of" in out


def test_guardrail_benchmark_runs() -> None:
    out = run_bench("guardrail")
    assert "(a) /v1/validate round trip" in out
    assert "(b) overhead + guardrail (hooks + guard)" in out


def test_ledger_benchmark_runs() -> None:
    out = run_bench("ledger")
    assert "raw sha256" in out
    assert "full verify" in out
    assert "floor: least chain" in out
    assert "signatures" in out


def test_catalog_benchmark_runs() -> None:
    out = run_bench("catalog")
    assert "first build" in out
    assert "after 10 new" in out
