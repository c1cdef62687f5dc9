"""What the benchmarks share: interleaved timing and a plain table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

ROUNDS = 5


@dataclass(frozen=True)
class Timing:
    """Median seconds of one round, wall clock and CPU (every thread of the process)."""

    baseline: float
    ours: float
    baseline_cpu: float
    ours_cpu: float


async def measure(
    baseline_round: Callable[[], object | Awaitable[object]],
    our_round: Callable[[], Awaitable[object]],
    *,
    rounds: int = ROUNDS,
) -> tuple[float, float]:
    """Return the median seconds of one round for the baseline and for us.

    Rounds alternate (baseline, ours, baseline, ...) so the machine's noise
    falls on both sides alike; the medians shrug off outliers.
    """
    timing = await measure_cpu(baseline_round, our_round, rounds=rounds)
    return timing.baseline, timing.ours


async def measure_cpu(
    baseline_round: Callable[[], object | Awaitable[object]],
    our_round: Callable[[], Awaitable[object]],
    *,
    rounds: int = ROUNDS,
) -> Timing:
    """:func:`measure`, with the CPU time of each side too: on a shared machine the
    wall clock counts other processes' work, CPU time mostly does not."""
    baseline: list[tuple[float, float]] = []
    ours: list[tuple[float, float]] = []
    for _ in range(rounds):
        started, cpu = time.perf_counter(), time.process_time()
        result = baseline_round()
        if isinstance(result, Awaitable):
            await result
        baseline.append((time.perf_counter() - started, time.process_time() - cpu))
        started, cpu = time.perf_counter(), time.process_time()
        await our_round()
        ours.append((time.perf_counter() - started, time.process_time() - cpu))
    return Timing(
        statistics.median(w for w, _ in baseline),
        statistics.median(w for w, _ in ours),
        statistics.median(c for _, c in baseline),
        statistics.median(c for _, c in ours),
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Format rows under headers; the first column left-aligned, the rest right-aligned."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        first, *rest = cells
        return "  ".join(
            [f"{first:<{widths[0]}}", *(f"{c:>{w}}" for c, w in zip(rest, widths[1:], strict=True))]
        )

    out = [line(headers), "-" * (sum(widths) + 2 * (len(widths) - 1))]
    out.extend(line(row) for row in rows)
    return "\n".join(out)
