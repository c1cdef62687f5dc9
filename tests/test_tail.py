"""``agentjournal tail``: events as another process writes them, across subsessions, on
SQLite and the KurrentDB double; SIGINT and SIGTERM end it cleanly."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import pytest

from agentjournal.store import open_store
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from agentjournal.walk import read_tree
from cli_run import run
from trace_scenarios import write_support

TESTS = Path(__file__).resolve().parent
LINE = re.compile(r"\d\d:\d\d:\d\d\.\d{3}  (\S+)@(\d+)  (\S+)(  .*)?")


def _start(out: IO[str], *args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, *args], stdout=out, stderr=subprocess.PIPE, text=True, env=env, cwd=TESTS
    )


def _tail(out: IO[str], uri: str, *args: str) -> subprocess.Popen[str]:
    tail = _start(out, "-m", "agentjournal.cli", "tail", *args, "--uri", uri)
    assert tail.stderr is not None
    ready = tail.stderr.readline()  # once it knows where it starts
    assert ready.startswith("tailing "), ready
    return tail


def _wait_lines(path: Path, count: int, timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = path.read_text().splitlines()
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


async def _events_after(uri: str, position: int, session: str | None) -> list[tuple[str, int]]:
    store = await open_store(uri, create=False)
    try:
        if session is None:
            chosen = await store.read_all(from_position=position + 1)
            return [(e.stream, e.revision) for e in chosen]
        tree = await read_tree(store, session)
        records = [r for r in tree.records() if (r.position or 0) > position]
        tree_streams = {
            s for s in tree.streams if s.startswith(("AgentSession-", "AgentSubsession-"))
        }
        records = [r for r in records if r.stream in tree_streams]
        return [(r.stream, r.revision) for r in sorted(records, key=lambda r: r.position or 0)]
    finally:
        await store.close()


async def _last(uri: str) -> int:
    store = await open_store(uri, create=False)
    try:
        return max((e.position for e in await store.read_all()), default=0)
    finally:
        await store.close()


@pytest.mark.slow
def test_tail_a_session_from_now_follows_the_subsessions_it_opens(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'tail.db'}"
    asyncio.run(write_support(uri, "w1"))
    before = asyncio.run(_last(uri))
    output = tmp_path / "tail.jsonl"
    with output.open("w") as out:
        tail = _tail(out, uri, "w1", "--json")
        try:
            # Another process: w1 again (new runs open new subsessions) and another session.
            writer = _start(subprocess.DEVNULL, "trace_scenarios.py", uri, "other", "w1")  # type: ignore[arg-type]
            assert writer.wait(120) == 0
            expected = asyncio.run(_events_after(uri, before, "w1"))
            lines = _wait_lines(output, len(expected))
            tail.send_signal(signal.SIGINT)
            assert tail.wait(20) == 0
        finally:
            if tail.poll() is None:
                tail.kill()
    assert tail.stderr is not None
    assert "Traceback" not in tail.stderr.read()
    shown = [json.loads(line) for line in output.read_text().splitlines()]
    assert [(e["stream"], e["revision"]) for e in shown] == expected
    opened = {e["stream"] for e in shown if e["stream"].startswith("AgentSubsession-")}
    assert len(opened) == 2
    assert all(".".join(s.split(".")[:-1]) for s in opened)
    assert all(e["position"] > before for e in shown)
    assert shown[-1]["description"] == "#35 Glad I could help! [150 tokens]"
    assert len(lines) == len(expected)


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_tail_everything_from_the_start_on_the_kurrentdb_double(
    tmp_path: Path, stop: signal.Signals
) -> None:
    with KurrentDBDouble.in_thread() as double:
        asyncio.run(write_support(double.uri, "k1"))
        output = tmp_path / "tail.txt"
        with output.open("w") as out:
            tail = _tail(out, double.uri, "--from-start")
            try:
                writer = _start(subprocess.DEVNULL, "trace_scenarios.py", double.uri, "k2")  # type: ignore[arg-type]
                assert writer.wait(120) == 0
                expected = asyncio.run(_events_after(double.uri, 0, None))
                _wait_lines(output, len(expected))
                tail.send_signal(stop)
                assert tail.wait(20) == 0
            finally:
                if tail.poll() is None:
                    tail.kill()
    assert tail.stderr is not None
    assert "Traceback" not in tail.stderr.read()
    lines = output.read_text().splitlines()
    parsed = [LINE.fullmatch(line) for line in lines]
    assert all(parsed), [line for line, p in zip(lines, parsed, strict=True) if not p]
    assert [(p.group(1), int(p.group(2))) for p in parsed if p] == expected
    assert any("issue_refund refused to refunds" in line for line in lines)
    assert any("AgentSession-k2@" in line for line in lines)


@pytest.mark.slow
def test_tail_bad_input(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'none.db'}"
    done = run("tail", "--uri", uri)
    assert done.returncode == 1
    assert "no store" in done.stderr
    assert not (tmp_path / "none.db").exists()
    asyncio.run(write_support(f"sqlite:///{tmp_path / 'one.db'}", "s1"))
    done = run("tail", "nobody", "--uri", f"sqlite:///{tmp_path / 'one.db'}")
    assert done.returncode == 1
    assert "no session 'nobody'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_tail_describes_events_as_show_does(tmp_path: Path) -> None:
    from agentjournal.read.views import describe_record

    uri = f"sqlite:///{tmp_path / 'd.db'}"
    asyncio.run(write_support(uri, "d1"))

    async def described() -> list[Any]:
        store = await open_store(uri, create=False)
        try:
            tree = await read_tree(store, "d1")
        finally:
            await store.close()
        return [(r.type, describe_record(r)) for r in tree.records() if r.position is not None]

    lines = asyncio.run(described())
    assert (
        "SubagentStarted",
        "#1 opens billing, granted [orders.note,orders.read,orders.refund] refund≤5000",
    ) in lines
    assert (
        "agentjournal.GuardrailDecided",
        "TOOL_CALL issue_refund: BLOCK CEILING_EXCEEDED",
    ) in lines
    assert all(text for kind, text in lines), [kind for kind, text in lines if not text]


def test_stored_control_characters_are_printed_escaped() -> None:
    from agentjournal.cli.tail import _line
    from agentjournal.records import Record

    forged = json.dumps({"content": "ok\n  @9  GuardrailDecided  ALLOW\r\x1b[2K\u202e"})
    record = Record("AgentSession-\x1bx", 3, "id", "UserMessageReceived\x07", forged, "", {})
    line = _line(record)
    assert "\n" not in line
    assert "\x1b" not in line
    assert "\u202e" not in line
    assert "\x07" not in line
    assert line.endswith(
        "  AgentSession-\\x1bx@3  UserMessageReceived\\x07  "
        "ok\\n  @9  GuardrailDecided  ALLOW\\r\\x1b[2K\\u202e"
    )


def test_tail_json_stays_one_object_per_line_past_a_damaged_event(tmp_path: Path) -> None:
    from agentjournal import Journal

    path = tmp_path / "damaged.db"
    uri = f"sqlite:///{path}"

    async def write() -> None:
        async with Journal.open(uri) as journal:
            await journal.session("s").add_items([{"role": "user", "content": "hello"}])
            await journal.session("s").add_items([{"role": "user", "content": "again"}])

    asyncio.run(write())
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE events SET data = ? WHERE revision = 1 AND stream_id = "
            "(SELECT id FROM streams WHERE name = 'AgentSession-s')",
            (b"\xff",),
        )
    db.close()
    output = tmp_path / "tail.jsonl"
    with output.open("w") as out:
        tail = _tail(out, uri, "s", "--from-start", "--json")
        try:
            lines = _wait_lines(output, 3)
        finally:
            tail.send_signal(signal.SIGTERM)
            tail.wait(timeout=30)
            assert tail.stderr is not None
            tail.stderr.close()
    parsed = [json.loads(line) for line in lines]
    damaged = [line for line in parsed if "damaged" in line]
    assert damaged == [
        {
            "stream": "AgentSession-s",
            "revision": 1,
            "position": damaged[0]["position"],
            "damaged": "the data is not UTF-8 text (byte 0)",
        }
    ]
    assert [line["revision"] for line in parsed] == [0, 1, 2]
