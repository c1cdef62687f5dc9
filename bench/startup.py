"""Cold start of every command: time to its first line, and in all.

Each command runs as a fresh process (``python -m agentjournal.cli``, as the console script
runs it) in a folder holding the demo's store and key, its standard error on a terminal (the
progress lines a person sees), and the time to the first byte it writes (stdout or stderr) is
taken, then the time it ends. Medians of ``--rounds`` runs;
the target is a first line within 0.5 s for every command.
"""

from __future__ import annotations

import argparse
import os
import pty
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _common import run_publishing, table

ROOT = Path(__file__).resolve().parents[1]
SID = "bench-1"
_TAIL = "tail (stopped after its first line)"
_UI = "ui (stopped once serving)"
_GUARDRAIL = "guardrail serve (stopped once serving)"
_SERVING = (_TAIL, _UI, _GUARDRAIL)


def _timed(args: Sequence[str], folder: Path, stdin: Path | None) -> tuple[float, float, int]:
    """(first byte, total) in seconds, and the exit code, of one cold run: its standard
    output a pipe, its standard error a terminal (a pseudo-terminal), as a person running
    it in a shell meets its progress lines."""
    start = time.perf_counter()
    terminal, error_end = pty.openpty()
    with open(stdin or os.devnull, "rb") as source:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentjournal.cli", *args],
            cwd=folder,
            stdin=source,
            stdout=subprocess.PIPE,
            stderr=error_end,
        )
        os.close(error_end)
        assert process.stdout is not None
        chooser = selectors.DefaultSelector()
        chooser.register(process.stdout.fileno(), selectors.EVENT_READ)
        chooser.register(terminal, selectors.EVENT_READ)
        first: float | None = None
        open_ = 2
        while open_:
            for key, _ in chooser.select():
                try:
                    data = os.read(key.fd, 65536)
                except OSError:  # the terminal's other end closed (EIO)
                    data = b""
                if not data:
                    chooser.unregister(key.fd)
                    open_ -= 1
                elif first is None:
                    first = time.perf_counter() - start
        code = process.wait()
        process.stdout.close()
    os.close(terminal)
    total = time.perf_counter() - start
    return (total if first is None else first), total, code


def _commands(folder: Path) -> list[tuple[str, list[str], Path | None]]:
    manifests = ROOT / "samples" / "manifests"
    pub = "agentjournal-demo.pem.pub"
    return [
        ("--help", ["--help"], None),
        ("demo", ["demo", "--session", "{fresh}"], None),
        ("demo, a wrong --policy", ["demo", "--policy", "missing.yml"], None),
        ("selfcheck", ["selfcheck"], None),
        ("verify", ["verify", SID, "--pubkey", pub], None),
        ("bundle export", ["bundle", "export", SID, "-o", "bundle.json"], None),
        ("bundle verify", ["bundle", "verify", "bundle.json", "--pubkey", pub], None),
        ("keygen", ["keygen", "-o", "{fresh}.pem"], None),
        ("sessions", ["sessions", "--pubkey", pub], None),
        ("show", ["show", SID, "--pubkey", pub], None),
        ("replay", ["replay", SID], None),
        ("fork", ["fork", SID, "--at", "3", "--name", "{fresh}"], None),
        ("usage", ["usage"], None),
        (_TAIL, ["tail", SID, "--from-start", "--json"], None),
        (_UI, ["ui", "--port", "0", "--pubkey", pub], None),
        (_GUARDRAIL, ["guardrail", "serve", "--port", "0"], None),
        ("trace export", ["trace", "export", SID, "--jsonl", "spans.jsonl"], None),
        ("view", ["view", SID, "-o", "page.html", "--pubkey", pub], None),
        (
            "run",
            [
                "run",
                "--manifests",
                str(manifests),
                "--agent",
                "io.clawpedia.agents.jira-ticket-manager",
                "--tools",
                str(manifests / "tools.py"),
                "--model-script",
                str(manifests / "script.yml"),
            ],
            manifests / "request.json",
        ),
        (
            "run, a wrong --manifests",
            ["run", "--manifests", "missing", "--agent", "x"],
            manifests / "request.json",
        ),
    ]


def run(rounds: int) -> list[list[str]]:
    rows = []
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        made = subprocess.run(
            [sys.executable, "-m", "agentjournal.cli", "demo", "--session", SID],
            cwd=folder,
            capture_output=True,
            check=False,
        )
        assert made.returncode == 0, made.stderr
        fresh = 0
        for label, args, stdin in _commands(folder):
            firsts, totals, codes = [], [], set()
            for _ in range(rounds):
                fresh += 1
                argv = [a.replace("{fresh}", f"f-{fresh}") for a in args]
                if label in _SERVING:
                    first, total, code = _until_stopped(argv, folder)
                else:
                    first, total, code = _timed(argv, folder, stdin)
                firsts.append(first)
                totals.append(total)
                codes.add(code)
            first = statistics.median(firsts)
            rows.append(
                [
                    label,
                    f"{first:.2f}",
                    f"{statistics.median(totals):.2f}",
                    "/".join(map(str, sorted(codes))),
                    "yes" if first <= 0.5 else "NO",
                ]
            )
    return rows


def _until_stopped(argv: list[str], folder: Path) -> tuple[float, float, int]:
    """A command that runs until stopped (``tail``, a server): the time to its first line
    on stdout, then it is stopped."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "agentjournal.cli", *argv],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    process.stdout.readline()
    first = time.perf_counter() - start
    process.stdout.close()  # unread output must not hold it on a full pipe
    process.terminate()
    code = process.wait()
    return first, time.perf_counter() - start, code


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, for a smoke run")
    parser.add_argument("--rounds", type=int, default=5, help="runs per command (default: 5)")
    args = parser.parse_args(argv)
    rows = run(1 if args.quick else args.rounds)
    print(table(["command", "first line s", "total s", "exit", "first <= 0.5 s"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("startup", main, sys.argv[1:]))
