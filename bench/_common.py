"""What the benchmarks share: interleaved timing and a plain table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable, Sequence

ROUNDS = 5


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
    baseline: list[float] = []
    ours: list[float] = []
    for _ in range(rounds):
        started = time.perf_counter()
        result = baseline_round()
        if isinstance(result, Awaitable):
            await result
        baseline.append(time.perf_counter() - started)
        started = time.perf_counter()
        await our_round()
        ours.append(time.perf_counter() - started)
    return statistics.median(baseline), statistics.median(ours)


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
