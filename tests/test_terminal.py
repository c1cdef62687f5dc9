"""The command line as a terminal user meets it: a reader that leaves early, what stands out
on a terminal, numbers that line up, and ``tail --wait`` for a session not started yet.

Real processes of ``python -m agentjournal.cli`` on a real SQLite store holding the demo
session (a guardrail BLOCK and MODIFY, ALLOWs), real pipes and a pseudo-terminal.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time

import pytest

from agentjournal import Journal
from cli_run import on_a_terminal, run

SID = "term-1"


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("terminal")
    uri = f"sqlite:///{folder / 'journal.db'}"
    made = run("demo", "--uri", uri, "--session", SID, "--key", str(folder / "demo.pem"))
    assert made.returncode == 0, made.stderr
    return uri


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentjournal.cli", *args]


@pytest.mark.parametrize(
    "args",
    [
        ("show", SID),
        ("show", SID, "--json"),
        ("replay", SID),
        ("sessions",),
        ("usage", "--by", "agent"),
        ("tail", SID, "--from-start"),
        ("tail", SID, "--from-start", "--json"),
    ],
    ids=lambda args: "-".join(args[:1] + tuple(a for a in args[1:] if a.startswith("--"))),
)
def test_a_reader_that_leaves_early_is_a_quiet_success(uri: str, args: tuple[str, ...]) -> None:
    process = subprocess.Popen(
        _command(*args, "--uri", uri), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    assert process.stderr is not None
    process.stdout.close()  # before the command has written anything: every write fails
    try:
        code = process.wait(timeout=120)
    finally:
        errors = process.stderr.read().decode()
        process.stderr.close()
    assert code == 0, errors
    assert "Broken pipe" not in errors
    assert "Traceback" not in errors


def _lines_with(text: str, needle: str) -> list[str]:
    return [line for line in text.splitlines() if needle in line]


def test_on_a_terminal_a_block_and_a_modify_stand_out_and_an_allow_does_not(uri: str) -> None:
    shown = on_a_terminal("show", SID, "--uri", uri)
    (block,) = _lines_with(shown, "BLOCK CEILING_EXCEEDED")
    (modify,) = _lines_with(shown, "MODIFY PII_REDACTED")
    allow = _lines_with(shown, "lookup_order: ALLOW")[0]
    assert "\x1b[1;31m" in block  # bold red
    assert "\x1b[1;33m" in modify  # bold yellow
    assert "\x1b[32m" in allow
    assert "31m" not in allow
    # An ordinary event is plain text: only its revision is dim.
    user = _lines_with(shown, "UserMessageReceived")[0]
    assert re.sub(r"\x1b\[2m@\d+\s*\x1b\[0m", "", user).count("\x1b[") == 0, repr(user)


def test_numbers_are_right_aligned(uri: str) -> None:
    table = run("usage", "--by", "agent", "--uri", uri).stdout.splitlines()
    header, rows = table[0], table[1:]
    total_end = header.index("total") + len("total")
    for row in rows:
        assert row[:total_end].endswith(row[:total_end].split()[-1])
        assert row[total_end - 1].isdigit(), row  # every count ends under its header
    sessions = run("sessions", "--uri", uri).stdout.splitlines()
    end = sessions[0].index("items") + len("items")
    assert sessions[1][end - 2 : end] == "16", sessions[1]


async def _start_session(uri: str) -> None:
    async with Journal.open(uri) as journal:
        session = journal.session("late-1", app_name="late")
        await session.add_items([{"role": "user", "content": "are you there?"}])


def _read_until(process: subprocess.Popen[str], needle: str, deadline: float) -> list[str]:
    assert process.stdout is not None
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} never came: {seen}")


def test_tail_wait_follows_a_session_that_starts_later(uri: str) -> None:
    refused = run("tail", "late-1", "--uri", uri)
    assert refused.returncode == 1
    assert "no session 'late-1'" in refused.stderr
    assert "--wait for it to start" in refused.stderr
    process = subprocess.Popen(
        _command("tail", "late-1", "--wait", "--uri", uri),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        first = process.stderr.readline()
        assert first.startswith("waiting for session late-1 to start"), first
        assert process.stderr.readline().startswith("tailing session late-1")
        asyncio.run(_start_session(uri))
        seen = _read_until(process, "are you there?", time.monotonic() + 60)
        assert any("SessionStarted" in line for line in seen)
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=30)
    assert code == 0


def test_wait_is_refused_without_a_single_session(uri: str) -> None:
    for args in (("tail", "--wait"), ("tail", SID, "--wait", "--branch", "main")):
        done = run(*args, "--uri", uri)
        assert done.returncode == 1
        assert "--wait needs a SESSION" in done.stderr
