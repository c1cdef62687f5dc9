"""What the benchmarks share: interleaved timing, a plain table, and the results file.

Every benchmark prints its table; run with ``--results bench/RESULTS.md`` it also puts what it
printed into its own section of that file (between ``<!-- bench:NAME -->`` and
``<!-- /bench:NAME -->``), so the file holds the current figures, regenerated, not a log.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

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
    (baseline, baseline_cpu), (ours, ours_cpu) = await measure_each(
        [baseline_round, our_round], rounds=rounds
    )
    return Timing(baseline, ours, baseline_cpu, ours_cpu)


async def measure_each(
    sides: Sequence[Callable[[], object | Awaitable[object]]], *, rounds: int = ROUNDS
) -> list[tuple[float, float]]:
    """Median seconds of one round of each side, wall clock and CPU, in the order given.

    Rounds alternate over the sides (first, second, ..., first, ...), as :func:`measure`.
    """
    times: list[list[tuple[float, float]]] = [[] for _ in sides]
    for _ in range(rounds):
        for side, kept in zip(sides, times, strict=True):
            started, cpu = time.perf_counter(), time.process_time()
            result = side()
            if isinstance(result, Awaitable):
                await result
            kept.append((time.perf_counter() - started, time.process_time() - cpu))
    return [
        (statistics.median(w for w, _ in kept), statistics.median(c for _, c in kept))
        for kept in times
    ]


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


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy."""

    def __init__(self, terminal: TextIO) -> None:
        self.terminal = terminal
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.terminal.write(text)
        self.copy.write(text)
        return len(text)

    def flush(self) -> None:
        self.terminal.flush()


def section(text: str, name: str, body: str) -> str:
    """``text`` with the section of benchmark ``name`` replaced by ``body``.

    Raises:
        ValueError: ``text`` has no section for ``name``.
    """
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    first, middle, last = text.find(start), text.find(end), text.rfind(end)
    if first < 0 or middle < first or middle != last:
        raise ValueError(f"no single section {start} ... {end}")
    return text[: first + len(start)] + "\n" + body + text[middle:]


def host_pace() -> str:
    """This host's pace now, to read a run's figures beside another's: the best of seven
    timings of a fixed piece of Python work on objects (20,000 small JSON objects parsed by
    orjson, three of each one's fields read into a tuple: the kind of work the verifier, the
    catalog and the planner do per event) and of raw SHA-256 over 20,000 texts of about 1 KB
    (as the ledger's baseline hashes an event). A run prints it as it starts and as it ends:
    on these machines the pace moves from host to host and, on one host, within seconds, and
    Python's and hashing's not always together."""
    import hashlib

    import orjson

    # Printed by hand: orjson's printing of many small objects leaves the process ~100 MB
    # larger, which would show in a benchmark's peak memory.
    texts = [
        b'{"n":%d,"text":"%s","list":[1,2,3],"object":{"id":"%d"}}' % (n, b"x" * 40, n)
        for n in range(20_000)
    ]
    blocks = [text * 10 for text in texts]
    loads, sha256 = orjson.loads, hashlib.sha256

    def objects() -> None:
        read = []
        for text in texts:
            parsed = loads(text)
            read.append((parsed["n"], parsed["object"]["id"], len(parsed["text"])))

    def hashing() -> None:
        for block in blocks:
            sha256(block).hexdigest()

    best = []
    for work in (objects, hashing):
        times = []
        for _ in range(7):
            started = time.perf_counter()
            work()
            times.append(time.perf_counter() - started)
        best.append(min(times) * 1000)
    return f"Python on objects {best[0]:.1f} ms, SHA-256 of 20 MB {best[1]:.1f} ms"


def host() -> str:
    """Which host this is: its CPU's model and when it booted (Linux; else the platform)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                platform.machine(),
            )
    except OSError:
        model = platform.platform()
    try:
        with open("/proc/stat", encoding="utf-8") as stat:
            booted = next(int(line.split()[1]) for line in stat if line.startswith("btime"))
    except (OSError, StopIteration, ValueError, IndexError):
        return model
    return f"{model}, up since {datetime.fromtimestamp(booted, UTC):%Y-%m-%d %H:%M UTC}"


def compiled() -> None:
    """Compile the package's modules where no current bytecode is: the commands a benchmark
    starts as fresh processes then start as from an installed package (pip compiles at
    install), not paying a compile of every module they import on every start, as an
    editable install under ``PYTHONDONTWRITEBYTECODE`` would."""
    import compileall

    import agentjournal

    compileall.compile_dir(Path(agentjournal.__file__).parent, quiet=1)


def run_publishing(name: str, main: Callable[[list[str]], int], argv: list[str]) -> int:
    """Run a benchmark's ``main``; with ``--results FILE``, also write what it printed into
    FILE's section for ``name`` (nothing is written when the run fails)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--results", type=Path)
    known, rest = parser.parse_known_args(argv)
    target: Path | None = known.results
    if target is not None and not target.is_file():
        print(f"error: --results {target}: no such file", file=sys.stderr)
        return 1
    compiled()
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        print(f"host: {host()}; pace at the start (lower is faster): {host_pace()}")
        code = main(rest)
        print(f"pace at the end: {host_pace()}")
    if target is None or code != 0:
        return code
    command = " ".join(["python", f"bench/{name}.py", *rest])
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = (
        f"`{command}`, {stamp}, {os.cpu_count()} cores, Python {platform.python_version()}:\n\n"
        f"```text\n{tee.copy.getvalue().rstrip()}\n```\n"
    )
    try:
        updated = section(target.read_text(encoding="utf-8"), name, body)
    except ValueError as error:
        print(f"error: --results {target}: {error}", file=sys.stderr)
        return 1
    partial = target.with_name(target.name + ".partial")
    partial.write_text(updated, encoding="utf-8")
    partial.replace(target)
    print(f"wrote the {name} section of {target}", file=sys.stderr)
    return 0
