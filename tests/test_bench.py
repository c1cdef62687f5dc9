"""The benchmarks still run: each one's smoke mode, as a real subprocess."""

from __future__ import annotations

import re
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
    # And our turns with their plans made beforehand (each checked for the turn's items and
    # stream, from the tree's heads).
    assert "(a) floor: our turn, its plans made beforehand" in out
    assert "(f) floor: our turns, their plans made beforehand" in out
    # And with only the least Python planning (its events checked against the plans').
    assert "(a) floor: our turn, only its least Python planning" in out
    assert "(f) floor: our turns, only their least Python planning" in out


def test_planning_benchmark_runs() -> None:
    # The least planner's events are checked identical to plan_items's before timing.
    out = run_bench("planning")
    assert "plan_items" in out
    assert "floor: least Python" in out


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
    assert "full verify, of the exporter's objects" in out  # the bundle not parse_bundle's
    assert "floor: least chain" in out
    assert "signatures" in out
    assert "floor: least verifier, + read, + 50 views" in out  # its views checked equal first
    # The least verifier's work and then our checks after integrity (their report must be
    # the verifier's, or the benchmark fails): more work than the least verifier's alone.
    rates = _floor_figures(out, "floor: ")
    ours = rates["least integrity + our checks after it"]
    assert ours < rates["least verifier, + read, + 50 views"]
    # The least checks after integrity ran (the benchmark fails where they pass any of their
    # mutations: a call not its item's, a key they look for, a checkpoint not as signed...).
    assert "least verifier + least checks after it" in rates
    # The parts, each alone (each of ours checked to find nothing wrong, each of the least's
    # to raise where it would), and the closest design's reading beside ours.
    parts = out[out.index("one process's verify in parts") :]
    assert "records for 55 of 204 events" in parts  # 50 calls, 3 checkpoints, 2 heads
    for part in ("reading", "chains", "views", "after integrity", "whole"):
        assert re.search(rf"^{part} +\d", parts, re.MULTILINE), part


def test_codec_benchmark_runs() -> None:
    out = run_bench("codec")
    assert "encode_item" in out
    assert "decode_event" in out


def test_branches_benchmark_runs() -> None:
    out = run_bench("branches")
    assert "(g)" in out


def test_a_benchmark_writes_what_it_printed_into_its_section(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    original = (ROOT / "bench" / "RESULTS.md").read_text(encoding="utf-8")
    results.write_text(original, encoding="utf-8")
    out = run_bench("codec", "--results", str(results))
    written = results.read_text(encoding="utf-8")
    start, end = "<!-- bench:codec -->", "<!-- /bench:codec -->"
    section = written[written.index(start) + len(start) : written.index(end)]
    assert out.strip() in section
    assert "`python bench/codec.py --quick`" in section
    # Every other section is as it was.
    assert written.replace(section, "") == original.replace(
        original[original.index(start) + len(start) : original.index(end)], ""
    )


def test_a_results_file_without_the_section_is_refused_and_left_alone(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    results.write_text("# no sections\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "codec.py"), "--quick", "--results", str(results)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1
    assert "no single section <!-- bench:codec -->" in result.stderr
    assert results.read_text(encoding="utf-8") == "# no sections\n"


def test_catalog_benchmark_runs() -> None:
    out = run_bench("catalog")
    # Cold and warm at both sizes (items, then events), each beside its floors.
    for case in ("cold", "warm", "floor: raw read", "floor: least chain", "floor: fold only"):
        assert f"2,000 items: {case}" in out
        assert f" events: {case}" in out


def test_disk_benchmark_runs() -> None:
    out = run_bench("disk")
    assert "2,000 items in 20 sessions" in out
    assert "of which events" in out
    # The default form's floors, each on a copy of the store (every compact metadata row is
    # checked to decode back to the bytes written, or the benchmark fails).
    floors = _floor_figures(out, "floor: ")
    # Every event holding a raw item is counted, the handoff calls' too, and the copy that
    # keeps only the events holding an item keeps one per item.
    assert "floor: the raw item only where needed (1,900 of 2,000 left out)" in out
    assert "floor: + only the events that hold items (what the SDK keeps: 2,000 events)" in out
    assert [name.split(" (")[0] for name in floors] == [
        "vacuumed, nothing changed",
        "the raw item only where needed",
        "+ metadata in a compact stored form",
        "+ the read model's texts compressed",
        "+ no read model",
        "+ only the events that hold items",
    ]
    sizes = list(floors.values())
    assert sizes == sorted(sizes, reverse=True)
    assert len(set(sizes)) == len(sizes)  # each change saves bytes here


def _floor_figures(out: str, prefix: str) -> dict[str, int]:
    """The floor rows a benchmark printed: name (after ``prefix``) -> its first figure."""
    return {
        name.removeprefix(prefix): int(size.replace(",", ""))
        for name, size, *_ in (
            re.split(r"\s{2,}", line.strip())
            for line in out.splitlines()
            if line.strip().startswith(prefix)
        )
    }


def test_disk_form_benchmark_runs() -> None:
    out = run_bench("disk_form")
    assert "2,000 items in 20 sessions: SQLiteSession" in out
    floors = _floor_figures(out, "floor, stored as given: ")
    assert list(floors)[1].startswith("the raw item only where needed (2,000 of 2,000 left out)")
    sizes = list(floors.values())[:5]  # one event per item: keeping only those changes nothing
    assert len(sizes) == 5
    assert sizes == sorted(sizes, reverse=True)
    assert len(set(sizes)) == len(sizes)  # each change saves bytes here


def test_traces_benchmark_runs() -> None:
    out = run_bench("traces")
    assert "export --all, JSON Lines" in out
    assert "floor: raw read" in out


def test_startup_benchmark_runs() -> None:
    out = run_bench("startup")
    assert "first line s" in out
    assert "demo, a wrong --policy" in out


def test_list_benchmark_runs() -> None:
    out = run_bench("list", "--rebuild")
    assert "cold: first list" in out
    assert "content search, 2 words" in out
    assert "MISSED" not in out


def test_sealing_benchmark_runs() -> None:
    out = run_bench("sealing")
    # Three sides side by side; the histories are checked identical before timing.
    assert "sealed/clear" in out
    assert "(a) turn, durable" in out
    assert "(c) full get_items of 400, cold" in out


def test_evals_benchmark_runs() -> None:
    out = run_bench("evals")
    assert "rule scorers" in out
    assert "eval run" in out
