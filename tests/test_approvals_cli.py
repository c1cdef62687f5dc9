"""Approvals across sessions: ``Journal.pending_approvals`` and the ``approvals``,
``approve`` and ``reject`` commands.

Runs pause with the SDK's real ``Runner`` and ``ScriptedModel`` (tests/paused_graph.py)
on real stores; the commands run through ``agentjournal.cli.main``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from agents import Runner

from agentjournal import AlreadyResolved, InvalidInput, Journal
from agentjournal import events as ev
from agentjournal.cli import main as cli_main
from agentjournal.read.approvals import PendingApproval
from approval_worker import ANSWER, graph
from approval_worker import ASK as WORKER_ASK
from cli_run import Ran, run
from drive import drive
from paused_graph import approval_graph, paused_graph

ASK = "Refund order 42"


async def paused(journal: Journal, session_id: str, depth: int = 1, **options: Any) -> None:
    """A run of ``session_id`` that stops on billing's (or refunds') refund, held."""
    session = journal.session(session_id, **options)
    result = await Runner.run(paused_graph(depth), ASK, session=session, hooks=session)
    await session.hold(result)


def quiet() -> Any:
    """An agent that answers at once (no approval)."""
    from agents import Agent
    from agents.testing import ScriptedModel, assistant_message

    return Agent(name="triage", model=ScriptedModel([[assistant_message("done")]]))


def where(found: list[PendingApproval]) -> list[tuple[str, str, str, str]]:
    return [(p.session_id, p.branch, p.approval.agent, p.approval.request_id) for p in found]


async def test_the_journal_lists_every_session_s_waiting_calls_oldest_first(
    journal: Journal,
) -> None:
    """Across sessions, oldest first, as each session's own ``pending_approvals`` sees it
    (a subagent two deep too); an answered call is gone; app, user and session filters."""
    await paused(journal, "s-b", app_name="shop", user_id="ann")
    await paused(journal, "s-a", depth=2, app_name="desk", user_id="bob")
    await paused(journal, "s-c", app_name="shop", user_id="bob")
    await Runner.run(quiet(), "no approval", session=journal.session("s-quiet"))
    assert where(await journal.pending_approvals()) == [
        ("s-b", "main", "billing", "r1"),
        ("s-a", "main", "refunds", "r1"),
        ("s-c", "main", "billing", "r1"),
    ]
    for session_id in ("s-a", "s-b", "s-c"):
        own = await journal.session(session_id).pending_approvals()
        listed = [p.approval for p in await journal.pending_approvals(sessions=[session_id])]
        assert listed == own
    assert where(await journal.pending_approvals(app="shop", user="bob")) == [
        ("s-c", "main", "billing", "r1")
    ]
    assert [p.session_id for p in await journal.pending_approvals(user="bob")] == ["s-a", "s-c"]
    await journal.session("s-b").reject("r1", by="dana", reason="no")
    assert [p.session_id for p in await journal.pending_approvals()] == ["s-a", "s-c"]
    with pytest.raises(InvalidInput, match="no session 'nobody'"):
        await journal.pending_approvals(sessions=["nobody"])


async def test_a_call_waiting_on_a_branch_is_listed_with_its_branch(journal: Journal) -> None:
    """A branch's own question is listed under the branch (its session object sees it)."""
    main = journal.session("s-branch")
    await Runner.run(quiet(), "first", session=main)
    await main.fork(at=1, name="try")
    branch = journal.session("s-branch", branch="try")
    result = await Runner.run(paused_graph(), ASK, session=branch, hooks=branch)
    await branch.hold(result)
    (found,) = await journal.pending_approvals()
    assert (found.session_id, found.branch) == ("s-branch", "try")
    assert [found.approval] == await branch.pending_approvals()
    assert await main.pending_approvals() == []


async def test_listing_a_store_of_many_sessions_opens_only_those_with_a_question(
    journal_uri: str,
) -> None:
    """The catalog names the sessions with an unanswered question; the rest are not read.

    Counted with the store's reads: a second listing with nothing new reads only the
    sessions that ask."""
    if journal_uri.startswith("kurrentdb"):
        pytest.skip("the count of reads is the SQLite store's")
    async with Journal.open(journal_uri) as journal:
        for number in range(30):
            session = journal.session(f"quiet-{number}")
            await session.add_items([{"role": "user", "content": f"hi {number}"}])
        await paused(journal, "asks")
        assert where(await journal.pending_approvals()) == [("asks", "main", "billing", "r1")]
        read: list[str] = []
        store: Any = journal.store
        names = ("read", "read_types", "read_streams", "read_model", "head")
        originals = {name: getattr(store, name) for name in names}

        def counting(name: str) -> Any:
            async def counted(*args: Any, **options: Any) -> Any:
                read.append(repr(args))
                return await originals[name](*args, **options)

            return counted

        for name in names:
            setattr(store, name, counting(name))
        try:
            assert len(await journal.pending_approvals()) == 1
        finally:
            for name in names:
                setattr(store, name, originals[name])
        assert read, "the session that asks is read"
        assert not [s for s in read if "quiet-" in s], read


# -- the commands ---------------------------------------------------------------------------


@pytest.fixture
async def store_with_approvals(tmp_path: Path) -> str:
    """A SQLite file holding two paused sessions (one two subagents deep) and a quiet one."""
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    async with Journal.open(uri) as journal:
        await paused(journal, "s-one")
        await paused(journal, "s-two", depth=2)
        await journal.session("s-quiet").add_items([{"role": "user", "content": "hi"}])
    return uri


async def cli(*args: str) -> Ran:
    return await asyncio.to_thread(run, *args)


async def test_approvals_lists_the_waiting_calls_as_a_table_and_as_json(
    store_with_approvals: str,
) -> None:
    uri = store_with_approvals
    table = await cli("approvals", "--uri", uri)
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == [
        "session",
        "request",
        "agent",
        "tool",
        "arguments",
        "asked",
        "at",
        "(UTC)",
    ]
    assert [row.split()[:4] for row in rows] == [
        ["s-one", "r1", "billing", "issue_refund"],
        ["s-two", "r1", "refunds", "issue_refund"],
    ]
    assert (await cli("approvals", "--all", "--uri", uri)).stdout == table.stdout
    one = await cli("approvals", "s-two", "--json", "--uri", uri)
    (listed,) = json.loads(one.stdout)
    assert listed["session_id"] == "s-two"
    assert listed["branch"] == "main"
    assert (listed["request_id"], listed["agent"], listed["tool"]) == (
        "r1",
        "refunds",
        "issue_refund",
    )
    assert json.loads(listed["arguments"]) == {"order_id": "42", "amount_cents": 1250}
    assert listed["stream"].startswith("AgentSubsession-s-two")  # the acting agent's
    none = await cli("approvals", "s-quiet", "--uri", uri)
    assert (none.returncode, none.stdout.strip()) == (0, "no approvals wait")


async def test_arguments_are_shortened_in_the_table_only(tmp_path: Path) -> None:
    """A long argument is cut with … in the table; --json has it whole."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, function_call

    @function_tool(needs_approval=True)
    def send_mail(body: str) -> str:
        """Send a mail."""
        return "sent"

    body = "x" * 200
    agent = Agent(
        name="mailer",
        model=ScriptedModel([[function_call("send_mail", {"body": body}, call_id="m1")]]),
        tools=[send_mail],
    )
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    async with Journal.open(uri) as journal:
        session = journal.session("mail")
        await session.hold(await Runner.run(agent, "mail", session=session, hooks=session))
    table = await cli("approvals", "--uri", uri)
    assert "…" in table.stdout
    assert body not in table.stdout
    (listed,) = json.loads((await cli("approvals", "--json", "--uri", uri)).stdout)
    assert json.loads(listed["arguments"]) == {"body": body}


async def test_approve_records_the_answer_and_the_run_resumes_from_it(
    store_with_approvals: str,
) -> None:
    """``approve`` writes ``InterruptResolved`` (who, why) on the question's stream; the
    session resumes its held run with it; the call is no longer listed."""
    uri = store_with_approvals
    done = await cli("approve", "s-one", "r1", "--as", "dana", "--reason", "checked", "--uri", uri)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "approved request r1 of session s-one as dana"
    listed = json.loads((await cli("approvals", "--json", "--uri", uri)).stdout)
    assert [p["session_id"] for p in listed] == ["s-two"]
    async with Journal.open(uri) as journal:
        found = [e for e in await journal.store.read_all() if e.type == ev.INTERRUPT_RESOLVED]
        (decided,) = [ev.ApprovalDecided.decode(e.data) for e in found]
        assert (decided.outcome, decided.by, decided.reason) == ("approved", "dana", "checked")
        session = journal.session("s-one")
        result = await session.resume(approval_graph("refunded"))
        assert result.final_output == "refunded"
    again = await cli("approve", "s-one", "r1", "--as", "lee", "--uri", uri)
    assert again.returncode == 1
    assert "already approved by 'dana'" in again.stderr


async def test_reject_records_the_answer_with_who_and_why(store_with_approvals: str) -> None:
    uri = store_with_approvals
    done = await cli("reject", "s-two", "r1", "--as", "lee", "--reason", "too much", "--uri", uri)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "rejected request r1 of session s-two as lee"
    async with Journal.open(uri) as journal:
        found = [e for e in await journal.store.read_all() if e.type == ev.INTERRUPT_RESOLVED]
        (decided,) = [ev.ApprovalDecided.decode(e.data) for e in found]
        assert (decided.outcome, decided.by, decided.reason) == ("rejected", "lee", "too much")
        assert found[0].stream != "AgentSession-s-two"  # the question's: the subagent's


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("approve", "nobody", "r1", "--as", "dana"), "no session 'nobody'"),
        (("approve", "s-one", "r9", "--as", "dana"), "no approval request 'r9' in session s-one"),
        (("reject", "s-one", "r1", "--as", "  "), "--as needs the name of who decides"),
        (("approvals", "nobody"), "no session 'nobody'"),
        (("approvals", "s-one", "--all"), "not allowed with argument"),
    ],
)
async def test_bad_input_is_one_line_and_writes_nothing(
    store_with_approvals: str, args: tuple[str, ...], says: str
) -> None:
    uri = store_with_approvals
    async with Journal.open(uri) as journal:
        before = len(await journal.store.read_all())
    failed = await cli(*args, "--uri", uri)
    assert failed.returncode == 1
    assert says in failed.stderr
    assert failed.stdout == ""
    async with Journal.open(uri) as journal:
        assert len(await journal.store.read_all()) == before


async def test_an_answered_request_names_who_answered(store_with_approvals: str) -> None:
    uri = store_with_approvals
    async with Journal.open(uri) as journal:
        await journal.session("s-one").approve("r1", by="dana")
        with pytest.raises(AlreadyResolved):
            await journal.session("s-one").reject("r1", by="lee")
    failed = await cli("reject", "s-one", "r1", "--as", "lee", "--uri", uri)
    assert failed.returncode == 1
    assert failed.stderr.strip() == (
        "agentjournal: approval request 'r1' was already approved by 'dana'"
    )


async def test_the_commands_need_no_agents_sdk(store_with_approvals: str) -> None:
    """``approvals`` and ``approve`` run without importing the Agents SDK."""
    import subprocess
    import sys

    code = (
        "import sys; from agentjournal.cli import main; "
        f"r = main(['approvals', '--uri', {store_with_approvals!r}]); "
        "assert 'agents' not in sys.modules, 'agents loaded'; sys.exit(r)"
    )
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


# -- replay and tail describe them as show does ----------------------------------------------

APPROVAL_TYPES = (ev.INTERRUPT_ISSUED, ev.INTERRUPT_RESOLVED, ev.RUN_PAUSED)


async def answered(uri: str) -> None:
    """s-one's question answered by dana, why given."""
    async with Journal.open(uri) as journal:
        await journal.session("s-one").approve("r1", by="dana", reason="checked")


async def test_replay_approvals_describes_question_answer_and_paused_run(
    store_with_approvals: str,
) -> None:
    """After the items (exactly get_items), each approval event as show describes it."""
    uri = store_with_approvals
    await answered(uri)
    plain = await cli("replay", "s-one", "--uri", uri)
    replayed = await cli("replay", "s-one", "--approvals", "--uri", uri)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.startswith(plain.stdout)
    extra = [json.loads(line) for line in replayed.stdout[len(plain.stdout) :].splitlines()]
    assert [e["event"] for e in extra] == [
        ev.INTERRUPT_ISSUED,
        ev.RUN_PAUSED,
        ev.INTERRUPT_RESOLVED,
    ]
    issued, paused_run, resolved = (e["description"] for e in extra)
    assert issued == (
        'billing waits for approval of issue_refund({"order_id":"42","amount_cents":1250}) '
        "[request r1]"
    )
    assert paused_run.startswith("run paused for approval of r1 (")
    assert resolved == "approved by dana [request r1]: checked"
    shown = (await cli("show", "s-one", "--uri", uri)).stdout
    for text in (issued, resolved, paused_run):
        assert text in shown
    refused = await cli("replay", "s-one", "--approvals", "--at", "1", "--uri", uri)
    assert refused.returncode == 1
    assert "--approvals shows the line as it is now" in refused.stderr


@pytest.mark.slow  # a process that follows the store
async def test_tail_describes_question_answer_and_paused_run_as_show_does(
    store_with_approvals: str,
) -> None:
    import os
    import signal
    import sys
    import time

    uri = store_with_approvals
    await answered(uri)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
    command = ["-m", "agentjournal.cli", "tail", "s-one", "--from-start", "--json"]
    tail = await asyncio.create_subprocess_exec(
        sys.executable,
        *command,
        "--uri",
        uri,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env=env,
    )
    assert tail.stdout is not None
    seen: list[dict[str, Any]] = []
    try:
        deadline = time.monotonic() + 60
        while sum(e["type"] in APPROVAL_TYPES for e in seen) < 3:
            line = await asyncio.wait_for(tail.stdout.readline(), deadline - time.monotonic())
            assert line, "tail ended"
            seen.append(json.loads(line))
    finally:
        tail.send_signal(signal.SIGINT)
        await asyncio.wait_for(tail.communicate(), 30)
    described = {e["type"]: e["description"] for e in seen if e["type"] in APPROVAL_TYPES}
    replayed = await cli("replay", "s-one", "--approvals", "--uri", uri)
    from_replay = {
        e["event"]: e["description"]
        for e in map(json.loads, replayed.stdout.splitlines())
        if "event" in e
    }
    assert described == from_replay
    assert described[ev.INTERRUPT_RESOLVED] == "approved by dana [request r1]: checked"


# On every store the journal fixture opens (the KurrentDB double included), in process.


async def run_inline(*argv: str) -> tuple[int, str, str]:
    """``agentjournal ARGV`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = await asyncio.to_thread(cli_main, list(argv))
        except SystemExit as usage:  # argparse's own refusal of the command line
            code = int(usage.code or 0)
    return code, out.getvalue(), err.getvalue()


async def paused_inline(journal: Journal, session_id: str, ran: Path, **options: Any) -> None:
    session = journal.session(session_id, **options)
    result: Any = await drive(graph(ran, resumed=False), WORKER_ASK, session=session, hooks=session)
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
        await paused_inline(journal, "s-ann", ran, app_name="shop", user_id="ann")
        main = journal.session("s-ann")
        branch = await main.create_branch_from_turn(1, "again")
        await paused_inline(journal, "s-ann", ran, branch=branch)
        await paused_inline(journal, "s-bob", ran, app_name="shop", user_id="bob")
        found = await journal.pending_approvals()
        assert [(p.session_id, p.branch, p.approval.request_id) for p in found] == [
            ("s-ann", "main", "r1"),
            ("s-ann", "again", "r1"),
            ("s-bob", "main", "r1"),
        ]
        assert [p.branch for p in await journal.pending_approvals(user="ann")] == ["main", "again"]
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
        await paused_inline(journal, "s-1", ran)

    code, out, _ = await run_inline("approvals", "--uri", uri)
    assert code == 0
    header, row = out.splitlines()
    assert header.split()[:5] == ["session", "request", "agent", "tool", "arguments"]
    assert row.split()[:4] == ["s-1", "r1", "billing", "issue_refund"]
    code, out, _ = await run_inline("approvals", "s-1", "--json", "--uri", uri)
    (listed,) = json.loads(out)
    assert listed["arguments"] == '{"order_id":"42","amount_cents":1250}'
    assert (listed["session_id"], listed["branch"], listed["tool"]) == (
        "s-1",
        "main",
        "issue_refund",
    )

    for argv, said in [
        (("approve", "s-1", "nope", "--as", "ann"), "no approval request 'nope'"),
        (("approve", "s-1", "r1", "--as", " "), "--as needs the name"),
        (("approve", "missing", "r1", "--as", "ann"), "no session 'missing'"),
        (("approve", "s-1", "r1", "--as", "ann", "--branch", "x"), "no live branch 'x'"),
        (("approve", "s-1", "r1"), "--as"),
    ]:
        code, out, err = await run_inline(*argv, "--uri", uri)
        assert code == 1, (argv, out, err)
        assert said in err.strip().splitlines()[-1], (argv, err)  # one line says it
    async with Journal.open(uri) as journal:
        assert not [e for e in await journal.store.read_all() if e.type == ev.INTERRUPT_RESOLVED]

    code, out, _ = await run_inline(
        "approve", "s-1", "r1", "--as", "ann@example.com", "--reason", "checked", "--uri", uri
    )
    assert code == 0
    assert out.startswith("approved request r1 of session s-1 as ann@example.com")
    code, _, err = await run_inline("reject", "s-1", "r1", "--as", "bob", "--uri", uri)
    assert code == 1
    assert (
        err.strip()
        == "agentjournal: approval request 'r1' was already approved by 'ann@example.com'"
    )
    code, out, _ = await run_inline("approvals", "--all", "--uri", uri)
    assert out.strip() == "no approvals wait"

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
    code, out, _ = await run_inline("show", "s-1", "--uri", uri)
    assert "approved by ann@example.com [request r1]: checked" in out
    assert "paused run taken up to resume by" in out


async def test_a_rejection_from_the_command_line_never_runs_the_tool(
    uri: str, tmp_path: Path
) -> None:
    ran = tmp_path / "ran"
    async with Journal.open(uri) as journal:
        await paused_inline(journal, "s-2", ran)
    code, out, _ = await run_inline("reject", "s-2", "r1", "--as", "bob", "--uri", uri)
    assert (code, out.split()[0]) == (0, "rejected")
    async with Journal.open(uri) as journal:
        resumed = await journal.session("s-2").resume(graph(ran, resumed=True))
        assert resumed.final_output == ANSWER
    assert not ran.exists()
