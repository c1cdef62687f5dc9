"""Approvals for people: ``journal.pending_approvals`` across sessions and lines, and the
commands ``agentjournal approvals``, ``approve`` and ``reject``.

Runs pause on the SDK's real ``Runner`` (``ScriptedModel``) and are held; the commands
answer from the command line (the same ``InterruptResolved`` as ``session.approve``),
and the application resumes: the tool runs once, and only when approved.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal import events as ev
from agentjournal.cli import main as cli
from approval_worker import ANSWER, ASK, graph
from drive import drive


async def run_cli(*argv: str) -> tuple[int, str, str]:
    """``agentjournal ARGV`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = await asyncio.to_thread(cli, list(argv))
        except SystemExit as usage:  # argparse's own refusal of the command line
            code = int(usage.code or 0)
    return code, out.getvalue(), err.getvalue()


async def paused(journal: Journal, session_id: str, ran: Path, **options: Any) -> None:
    session = journal.session(session_id, **options)
    result: Any = await drive(graph(ran, resumed=False), ASK, session=session, hooks=session)
    await session.hold(result)


@pytest.fixture
def uri(journal_uri: str) -> str:
    if journal_uri.startswith("sqlite://:memory:") or journal_uri == "sqlite://":
        pytest.skip("the commands open the store in another connection")
    return journal_uri


async def test_pending_approvals_across_sessions_lines_and_filters(
    uri: str, tmp_path: Path
) -> None:
    """Two sessions of two users and a branch each wait: the journal lists all three,
    oldest first, each with its session and line; app and user filters narrow it;
    an answered or run call is no longer listed."""
    ran = tmp_path / "ran"
    async with Journal.open(uri) as journal:
        await paused(journal, "s-ann", ran, app_name="shop", user_id="ann")
        main = journal.session("s-ann")
        branch = await main.create_branch_from_turn(1, "again")
        await paused(journal, "s-ann", ran, branch=branch)
        await paused(journal, "s-bob", ran, app_name="shop", user_id="bob")
        found = await journal.pending_approvals()
        assert [(p.session_id, p.line, p.approval.request_id) for p in found] == [
            ("s-ann", "main", "r1"),
            ("s-ann", "again", "r1"),
            ("s-bob", "main", "r1"),
        ]
        assert [p.line for p in await journal.pending_approvals(user="ann")] == ["main", "again"]
        assert [p.session_id for p in await journal.pending_approvals(sessions=["s-bob"])] == [
            "s-bob"
        ]
        assert await journal.pending_approvals(app="other") == []
        await journal.session("s-bob").reject("r1", by="carol")
        assert [p.session_id for p in await journal.pending_approvals()] == ["s-ann", "s-ann"]


async def test_the_commands_list_answer_and_refuse(uri: str, tmp_path: Path) -> None:
    """``approvals`` lists (table and JSON), ``approve`` records the answer the resume
    uses, a second answer is refused naming the first, and bad input is one line with
    exit 1 and nothing written."""
    ran = tmp_path / "ran"
    async with Journal.open(uri) as journal:
        await paused(journal, "s-1", ran)

    code, out, _ = await run_cli("approvals", "--uri", uri)
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:5] == ["SESSION", "REQUEST", "AGENT", "TOOL", "ARGUMENTS"]
    assert row.split()[:4] == ["s-1", "r1", "billing", "issue_refund"]
    code, out, _ = await run_cli("approvals", "s-1", "--json", "--uri", uri)
    (listed,) = json.loads(out)
    assert listed["arguments"] == '{"order_id":"42","amount_cents":1250}'
    assert (listed["session_id"], listed["line"], listed["tool"]) == ("s-1", "main", "issue_refund")

    for argv, said in [
        (("approve", "s-1", "nope", "--as", "ann"), "no approval request 'nope'"),
        (("approve", "s-1", "r1", "--as", " "), "--as needs the name"),
        (("approve", "missing", "r1", "--as", "ann"), "no session 'missing'"),
        (("approve", "s-1", "r1", "--as", "ann", "--branch", "x"), "no branch"),
        (("approve", "s-1", "r1"), "--as"),
    ]:
        code, out, err = await run_cli(*argv, "--uri", uri)
        assert code == 1, (argv, out, err)
        assert said in err.strip().splitlines()[-1], (argv, err)  # one line says it
    async with Journal.open(uri) as journal:
        assert not [e for e in await journal.store.read_all() if e.type == ev.INTERRUPT_RESOLVED]

    code, out, _ = await run_cli(
        "approve", "s-1", "r1", "--as", "ann@example.com", "--reason", "checked", "--uri", uri
    )
    assert code == 0
    assert out.startswith("approved request r1 of session s-1 as ann@example.com")
    code, _, err = await run_cli("reject", "s-1", "r1", "--as", "bob", "--uri", uri)
    assert code == 1
    assert (
        err.strip()
        == "agentjournal: approval request 'r1' was already approved by 'ann@example.com'"
    )
    code, out, _ = await run_cli("approvals", "--all", "--uri", uri)
    assert out.strip() == "no approval waits for an answer"

    async with Journal.open(uri) as journal:
        session = journal.session("s-1")
        (decided,) = [
            ev.ApprovalDecided.decode(e.data)
            for e in await journal.store.read_all()
            if e.type == ev.INTERRUPT_RESOLVED
        ]
        assert (decided.by, decided.reason) == ("ann@example.com", "checked")
        assert (await session.resume(graph(ran, resumed=True))).final_output == ANSWER
    assert len(ran.read_text().splitlines()) == 1
    code, out, _ = await run_cli("show", "s-1", "--uri", uri)
    assert "approved by ann@example.com [request r1]: checked" in out
    assert "paused run taken up to resume by" in out


async def test_a_rejection_from_the_command_line_never_runs_the_tool(
    uri: str, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    async with Journal.open(uri) as journal:
        await paused(journal, "s-2", ran)
    code, out, _ = await run_cli("reject", "s-2", "r1", "--as", "bob", "--uri", uri)
    assert (code, out.split()[0]) == (0, "rejected")
    async with Journal.open(uri) as journal:
        resumed = await journal.session("s-2").resume(graph(ran, resumed=True))
        assert resumed.final_output == ANSWER
    assert not ran.exists()


def spans_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_trace_export_shows_the_wait_for_a_person_as_its_own_span(
    uri: str, tmp_path: Path
) -> None:
    """The wait is an ``await_approval`` span under the asking agent's span, in the trace of
    the run that stopped: still waiting (in progress) before the answer, then from the
    question to the answer, with the outcome and who gave it."""
    ran = tmp_path / "ran"
    async with Journal.open(uri) as journal:
        await paused(journal, "s-3", ran)
    waiting = tmp_path / "waiting.jsonl"
    assert (await run_cli("trace", "export", "s-3", "--jsonl", str(waiting), "--uri", uri))[0] == 0
    (wait,) = [s for s in spans_of(waiting) if s["name"] == "await_approval issue_refund"]
    assert wait["attributes"]["agentjournal.in_progress"] is True
    assert "agentjournal.approval_outcome" not in wait["attributes"]

    await run_cli("approve", "s-3", "r1", "--as", "ann", "--uri", uri)
    async with Journal.open(uri) as journal:
        await journal.session("s-3").resume(graph(ran, resumed=True))
    done = tmp_path / "done.jsonl"
    assert (await run_cli("trace", "export", "s-3", "--jsonl", str(done), "--uri", uri))[0] == 0
    spans = spans_of(done)
    (wait,) = [s for s in spans if s["name"] == "await_approval issue_refund"]
    (billing,) = [s for s in spans if s["name"] == "invoke_agent billing"]
    assert (wait["trace_id"], wait["parent_span_id"]) == (billing["trace_id"], billing["span_id"])
    assert wait["attributes"]["agentjournal.approval_outcome"] == "approved"
    assert wait["attributes"]["agentjournal.answered_by"] == "ann"
    assert wait["attributes"]["gen_ai.tool.call.id"] == "r1"
    assert "agentjournal.in_progress" not in wait["attributes"]
    assert wait["start_time_unix_nano"] < wait["end_time_unix_nano"]
    assert '"order_id"' not in json.dumps(wait)  # never the call's arguments
