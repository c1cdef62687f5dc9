"""``agentjournal trace export``: real runs projected into spans, received by a real OTLP
collector on loopback (HTTP and gRPC), on SQLite and the KurrentDB double; ``--follow``
killed with SIGKILL and restarted neither drops nor invents a span."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentjournal import events
from agentjournal._digests import value_digest
from agentjournal.store import open_store
from agentjournal.testing.kurrentdb_double import KurrentDBDouble, ThreadedKurrentDBDouble
from agentjournal.walk import read_tree
from cli_run import run
from otlp_collector import Collector, Received, collector
from trace_scenarios import EXPECTED_CALLS, write_support

TESTS = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def otlp() -> Iterator[Collector]:
    with collector() as sink:
        yield sink


@pytest.fixture(scope="module")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('traces') / 'journal.db'}"
    asyncio.run(write_support(uri, "t1"))
    return uri


@pytest.fixture(scope="module")
def double() -> Iterator[ThreadedKurrentDBDouble]:
    with KurrentDBDouble.in_thread() as served:
        yield served


async def _recorded(uri: str, session: str) -> dict[str, Any]:
    """What the events recorded: each run's trace id, the span id on its first event, and
    the span id on each subagent's own first tool call."""
    store = await open_store(uri, create=False)
    try:
        tree = await read_tree(store, session)
    finally:
        await store.close()
    ordered = sorted(tree.records(), key=lambda r: r.position or 0)
    firsts: dict[str, str] = {}
    agents: dict[str, str] = {}
    arguments: dict[str, str] = {}
    for record in ordered:
        trace = record.metadata.get(events.TRACE_ID_KEY)
        if trace and trace not in firsts and record.stream.startswith("AgentSession-"):
            firsts[trace] = record.metadata[events.SPAN_ID_KEY]
        if record.type == "AssistantToolCallsGenerated":
            author = (record.body or {})["author_name"]
            agents.setdefault(author, record.metadata[events.SPAN_ID_KEY])
            item = json.loads((record.body or {})["extensions"]["openai"]["item_json"])
            arguments[item["call_id"]] = item["arguments"]
    return {"runs": firsts, "agents": agents, "arguments": arguments}


def _export(uri: str, url: str, *extra: str) -> None:
    done = run("trace", "export", *extra, "--otlp", url, "--uri", uri)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("exported "), done.stdout


def _check_tree(spans: list[Received], recorded: dict[str, Any]) -> None:
    """The shape of the support session's spans (see trace_scenarios.write_support)."""
    by_id = {span.span_id: span for span in spans}
    assert len(by_id) == len(spans)  # no span twice in one export
    roots = [span for span in spans if span.parent_id is None]
    # A root span per run, with the trace id and span id its first event recorded.
    assert {root.trace_id: root.span_id for root in roots} == recorded["runs"]
    assert all(root.name == "agentjournal.run" for root in roots)
    first = next(r for r in roots if r.trace_id == next(iter(recorded["runs"])))
    assert first.attributes["gen_ai.agent.name"] == "triage"
    named = {span.name: span for span in spans}
    billing, refunds = named["invoke_agent billing"], named["invoke_agent refunds"]
    # Subagents nest two deep and reuse the span ids of the live agent spans.
    assert billing.parent_id == first.span_id
    assert refunds.parent_id == billing.span_id
    assert billing.span_id == recorded["agents"]["billing"]
    assert refunds.span_id == recorded["agents"]["refunds"]
    assert billing.attributes["agentjournal.outcome"] == "success"
    assert billing.status_code == 0
    assert refunds.trace_id == first.trace_id
    # A span per tool call, under the agent that called it: name, call id, arguments digest.
    tools = [span for span in spans if span.name.startswith("execute_tool ")]
    assert sorted(t.attributes["gen_ai.tool.call.id"] for t in tools) == sorted(EXPECTED_CALLS)
    for tool in tools:
        call_id = tool.attributes["gen_ai.tool.call.id"]
        owner = billing if call_id in ("call_lookup", "call_note") else refunds
        assert tool.parent_id == owner.span_id, call_id
        assert tool.attributes["agentjournal.arguments_digest"] == value_digest(
            recorded["arguments"][call_id]
        )
        assert not any("argument" in key and "digest" not in key for key in tool.attributes)
        assert tool.start_ns <= tool.end_ns
    status = {t.attributes["gen_ai.tool.call.id"]: t.status_code for t in tools}
    assert status == {
        "call_lookup": 0,
        "call_note": 0,
        "call_refund_big": 2,  # the guardrail blocked it
        "call_refund_over": 2,  # the policy refused it
        "call_refund": 0,
    }
    # A span per model response (GenAI conventions), under the agent that called the model.
    chats = [span for span in spans if span.name.split(" ")[0] == "chat"]
    callers = sorted(
        (c.attributes["gen_ai.agent.name"], c.parent_id, c.trace_id == first.trace_id)
        for c in chats
    )
    second = next(r for r in roots if r is not first)
    assert callers == sorted(
        [("triage", first.span_id, True), ("triage", second.span_id, False)]
        + [("billing", billing.span_id, True)] * 3
        + [("refunds", refunds.span_id, True)] * 4
    )
    for chat in chats:
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 120
        assert chat.attributes["gen_ai.usage.output_tokens"] == 30
        assert chat.attributes["gen_ai.response.id"] == "resp-789"
        assert chat.start_ns < chat.end_ns
    # Guardrail decisions and refusals are span events on the acting agent's span.
    refund_events = [(name, attrs) for name, attrs in refunds.events]
    blocks = [a for n, a in refund_events if a.get("decision") == "BLOCK"]
    assert [b["reason_code"] for b in blocks] == ["CEILING_EXCEEDED"]
    refusals = [a for n, a in refund_events if n == "agentjournal.authority_refused"]
    assert [r["call_id"] for r in refusals] == ["call_refund_over"]
    assert "value" not in refusals[0]
    assert "reason" in refusals[0]
    modified = [a for n, a in billing.events if a.get("decision") == "MODIFY"]
    assert [m["subject"] for m in modified] == ["add_note"]
    # Children inside their parents' time, every span of one run in its trace.
    for span in spans:
        if span.parent_id is not None:
            parent = by_id[span.parent_id]
            assert parent.trace_id == span.trace_id
            assert parent.start_ns <= span.start_ns <= span.end_ns <= parent.end_ns
        assert span.resource["service.name"] == "agentjournal"


def _key(spans: list[Received]) -> set[tuple[Any, ...]]:
    return {
        (s.trace_id, s.span_id, s.parent_id, s.name, s.start_ns, s.end_ns, s.status_code)
        for s in spans
    }


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_export_a_session_over_otlp(otlp: Collector, sqlite_uri: str, protocol: str) -> None:
    url = otlp.http_url if protocol == "http" else otlp.grpc_url
    recorded = asyncio.run(_recorded(sqlite_uri, "t1"))
    otlp.clear()
    _export(sqlite_uri, url, "t1", "--protocol", protocol)
    first = otlp.snapshot()
    _check_tree(first, recorded)
    # Exporting again gives the very same spans: same ids, same times.
    otlp.clear()
    _export(sqlite_uri, url, "t1", "--protocol", protocol)
    assert _key(otlp.snapshot()) == _key(first)


def test_console_and_jsonl_give_the_same_spans(
    otlp: Collector, sqlite_uri: str, tmp_path: Path
) -> None:
    otlp.clear()
    _export(sqlite_uri, otlp.http_url, "--all")
    sent = {(s.span_id, s.parent_id, s.name) for s in otlp.snapshot()}
    lines = tmp_path / "spans.jsonl"
    done = run("trace", "export", "--all", "--jsonl", str(lines), "--uri", sqlite_uri)
    assert done.returncode == 0, done.stderr
    written = [json.loads(line) for line in lines.read_text().splitlines()]
    assert {(s["span_id"], s["parent_span_id"], s["name"]) for s in written} == sent
    shown = run("trace", "export", "t1", "--console", "--uri", sqlite_uri)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count('"span_id": "0x') == len(sent)
    assert "exported" in shown.stderr


@pytest.mark.slow
def test_export_on_the_kurrentdb_double(otlp: Collector, double: ThreadedKurrentDBDouble) -> None:
    asyncio.run(write_support(double.uri, "k1"))
    recorded = asyncio.run(_recorded(double.uri, "k1"))
    otlp.clear()
    _export(double.uri, otlp.grpc_url, "k1", "--protocol", "grpc")
    _check_tree(otlp.snapshot(), recorded)


# -- --follow, killed and restarted ----------------------------------------------------------


def _process(*args: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=TESTS,
    )


def _follower(uri: str, url: str) -> subprocess.Popen[str]:
    return _process(
        "-m", "agentjournal.cli", "trace", "export", "--all", "--follow", "--otlp", url,
        "--idle", "0.5", "--uri", uri,
    )  # fmt: skip


def _wait(check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _follow_kill_restart(uri: str, otlp: Collector, tmp_path: Path) -> None:
    otlp.clear()
    follower = _follower(uri, otlp.http_url)
    writer = _process("trace_scenarios.py", uri, "f1", "f2", "f3")
    try:
        # Killed in the middle: some spans are out, the writer is still writing.
        _wait(lambda: len(otlp.ids()) >= 6 or writer.poll() is not None)
        follower.send_signal(signal.SIGKILL)
        follower.wait(10)
        assert writer.wait(120) == 0, writer.stderr.read() if writer.stderr else ""
        follower = _follower(uri, otlp.http_url)
        expected_file = tmp_path / "expected.jsonl"
        done = run("trace", "export", "--all", "--jsonl", str(expected_file), "--uri", uri)
        assert done.returncode == 0, done.stderr
        expected = [json.loads(line) for line in expected_file.read_text().splitlines()]
        wanted = {span["span_id"] for span in expected}
        _wait(lambda: otlp.ids() >= wanted)
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(20) == 0
        assert "Traceback" not in (follower.stderr.read() if follower.stderr else "")
    finally:
        for process in (follower, writer):
            if process.poll() is None:
                process.kill()
                process.wait()
    received = otlp.snapshot()
    # No span lost, none made up; a resent span is the same span.
    assert {span.span_id for span in received} == wanted
    by_id = {span["span_id"]: span for span in expected}
    for span in received:
        want = by_id[span.span_id]
        assert (span.trace_id, span.parent_id, span.name) == (
            want["trace_id"],
            want["parent_span_id"],
            want["name"],
        )
        assert (span.start_ns, span.end_ns) == (
            want["start_time_unix_nano"],
            want["end_time_unix_nano"],
        )
    assert {s["trace_id"] for s in expected if s["parent_span_id"] is None} == {
        s.trace_id for s in received
    }


@pytest.mark.slow
def test_follow_survives_kill_9_on_sqlite(otlp: Collector, tmp_path: Path) -> None:
    _follow_kill_restart(f"sqlite:///{tmp_path / 'follow.db'}", otlp, tmp_path)


@pytest.mark.slow
def test_follow_survives_kill_9_on_the_kurrentdb_double(otlp: Collector, tmp_path: Path) -> None:
    with KurrentDBDouble.in_thread() as served:
        _follow_kill_restart(served.uri, otlp, tmp_path)


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["t1"], "say where the spans go"),
        (["t1", "--console", "--jsonl", "x.jsonl"], "give one destination, not --console and"),
        (["t1", "--all", "--console"], "give a session id or --all, not both"),
        (["--console"], "give a session id, or --all"),
        (["t1", "--console", "--protocol", "grpc"], "--protocol goes with --otlp"),
        (["t1", "--otlp", "ftp://127.0.0.1:1"], "is not a collector URL"),
        (["t1", "--otlp", "http://127.0.0.1:99999"], "has an invalid port"),
        (["t1", "--otlp", "http://h:1/x", "--protocol", "grpc"], "a gRPC collector URL has no"),
        (["t1", "--console", "--name", "x"], "--name goes with --follow"),
        (["nobody", "--console"], "no session 'nobody'"),
        (["bad id", "--console"], "contains ' '"),
        (["t1", "--jsonl", "/no/such/folder/x.jsonl"], "folder /no/such/folder does not exist"),
        (["t1", "--otlp", "http://[::1"], "is not a URL: Invalid IPv6 URL"),
        (["t1", "--otlp", "http://u:planted-pw@h:99999"], "'http://***@h:99999' has an invalid"),
        (["t1", "--console", "--follow", "--idle", "inf"], "--idle must be a positive number"),
        (["t1", "--console", "--timeout", "1e300"], "at most a day, got 1e+300"),
    ],
)
def test_bad_input_is_one_line(sqlite_uri: str, args: list[str], message: str) -> None:
    done = run("trace", "export", *args, "--uri", sqlite_uri)
    assert done.returncode == 1
    assert message in done.stderr
    assert "planted-pw" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_unreachable_collector_is_one_line(sqlite_uri: str, protocol: str) -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://user:planted-pw@127.0.0.1:{port}"  # its credentials are never shown
    args = ["t1", "--otlp", url, "--protocol", protocol, "--timeout", "1"]
    done = run("trace", "export", *args, "--uri", sqlite_uri)
    assert done.returncode == 1
    shown = "http://***@" if protocol == "http" else "http://"  # gRPC's endpoint has none
    assert f"could not export 18 spans to {shown}127.0.0.1:{port}" in done.stderr
    assert "planted-pw" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.slow
def test_a_refusing_collector_is_one_line(otlp: Collector, sqlite_uri: str) -> None:
    otlp.refuse = True
    try:
        done = run("trace", "export", "t1", "--otlp", otlp.http_url, "--uri", sqlite_uri)
    finally:
        otlp.refuse = False
    assert done.returncode == 1
    assert "could not export 18 spans to" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_missing_store_is_not_created(tmp_path: Path) -> None:
    db = tmp_path / "none.db"
    done = run("trace", "export", "--all", "--console", "--uri", f"sqlite:///{db}")
    assert done.returncode == 1
    assert "no store" in done.stderr
    assert not db.exists()


@pytest.mark.slow
def test_follow_saves_nothing_past_spans_the_collector_did_not_take(
    otlp: Collector, tmp_path: Path
) -> None:
    """A follower whose export fails stops (exit 1, one line) without saving past the
    failed spans; restarted, it sends every span of the session, and its save names them."""
    from agentjournal.read import projections

    uri = f"sqlite:///{tmp_path / 'refused.db'}"
    asyncio.run(write_support(uri, "r1"))
    args = (
        "r1",
        "--follow",
        "--name",
        "mine",
        "--otlp",
        otlp.http_url,
        "--idle",
        "0.5",
        "--uri",
        uri,
    )
    otlp.clear()
    otlp.refuse = True
    try:
        failed = _process("-m", "agentjournal.cli", "trace", "export", *args, "--timeout", "1")
        assert failed.wait(60) == 1
    finally:
        otlp.refuse = False
    assert failed.stderr is not None
    said = failed.stderr.read().strip().splitlines()
    assert said[-1].startswith("agentjournal: could not export "), said
    assert "Traceback" not in "\n".join(said)

    async def saved() -> Any:
        store = await open_store(uri, create=False)
        try:
            return await projections.load(store, "mine"), await store.read_all()
        finally:
            await store.close()

    assert asyncio.run(saved())[0] is None  # nothing was saved past what was refused
    assert otlp.snapshot() == []
    expected = tmp_path / "expected.jsonl"
    assert run("trace", "export", "r1", "--jsonl", str(expected), "--uri", uri).returncode == 0
    wanted = {json.loads(line)["span_id"] for line in expected.read_text().splitlines()}
    follower = _process("-m", "agentjournal.cli", "trace", "export", *args)
    try:
        _wait(lambda: otlp.ids() >= wanted)
        follower.send_signal(signal.SIGINT)
        assert follower.wait(20) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
    assert otlp.ids() == wanted
    assert len(otlp.snapshot()) == len(wanted)  # nothing was sent twice
    last, stored = asyncio.run(saved())
    session_events = [e for e in stored if "-r1" in e.stream]
    assert last is not None
    assert last.position >= session_events[-1].position


@pytest.mark.slow
def test_a_damaged_event_is_named_and_skipped_by_all(sqlite_uri: str, tmp_path: Path) -> None:
    import shutil

    from damaged import add_damaged_session

    copy = tmp_path / "copy.db"
    shutil.copy(sqlite_uri.removeprefix("sqlite:///"), copy)
    uri = f"sqlite:///{copy}"
    where = asyncio.run(add_damaged_session(uri, "bad"))
    alone = run("trace", "export", "bad", "--jsonl", str(tmp_path / "bad.jsonl"), "--uri", uri)
    assert alone.returncode == 1
    assert alone.stderr.startswith(f"agentjournal: {where}: the data is not UTF-8"), alone.stderr
    assert len(alone.stderr.strip().splitlines()) == 1, alone.stderr
    out = tmp_path / "all.jsonl"
    every = run("trace", "export", "--all", "--jsonl", str(out), "--uri", uri)
    assert every.returncode == 0, every.stderr
    assert every.stderr == f"agentjournal: skipped {where}: the data is not UTF-8 text (byte 0)\n"
    assert every.stdout.startswith("exported 18 spans"), every.stdout  # t1's, all of them
