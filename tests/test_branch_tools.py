"""The tools see branches: ``fork``, ``replay --branch``, ``show``,
``sessions``, ``usage --branch`` and ``tail``, run as the user runs them, on SQLite and the
KurrentDB double.

The store holds the demo session (nested handoffs, a guardrail BLOCK, signed checkpoints),
forked by the command line before its second user message (#14) into ``retry``, a real
``Runner`` run on ``retry`` (``ScriptedModel``), and a fork of that fork.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.engine.codec import exact_json
from agentjournal.store import open_store
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from branch_items import user as _user
from cli_run import Ran, run
from drive import drive
from handoff_scenarios import top_level

SID = "demo-1"


@dataclass
class Store:
    """A store, what the fixture's commands printed, and the branch's items after its run."""

    uri: str
    folder: Path
    forked: Ran | None = None
    branch_items: list[Any] = field(default_factory=list)
    main_items: list[Any] = field(default_factory=list)


async def _run_on_branch(uri: str) -> tuple[list[Any], list[Any]]:
    async with Journal.open(uri) as journal:
        branch = journal.session(SID, branch="retry")
        await drive(top_level(), "One more question", session=branch, hooks=branch)
        return await branch.get_items(), await journal.session(SID).get_items()


async def _count_events(uri: str) -> int:
    store = await open_store(uri, create=False)
    try:
        return sum(1 for e in await store.read_all() if not e.stream.startswith("AgentProjection-"))
    finally:
        await store.close()


def _fill(out: Store) -> None:
    key = out.folder / "key.pem"
    assert run("keygen", "-o", str(key)).returncode == 0
    demo = run("demo", "--uri", out.uri, "--session", SID, "--key", str(key))
    assert demo.returncode == 0, demo.stderr
    out.forked = run("fork", SID, "--at", "14", "--name", "retry", "--uri", out.uri)
    assert out.forked.returncode == 0, out.forked.stderr
    out.branch_items, out.main_items = asyncio.run(_run_on_branch(out.uri))


@pytest.fixture(scope="module", params=["sqlite", "kurrentdb"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Store]:
    folder = tmp_path_factory.mktemp(f"branch-tools-{request.param}")
    if request.param == "sqlite":
        out = Store(f"sqlite:///{folder / 'journal.db'}", folder)
        _fill(out)
        yield out
        return
    with KurrentDBDouble.in_thread() as double:
        out = Store(double.uri, folder)
        _fill(out)
        yield out


def _ok(*args: str, uri: str) -> str:
    done = run(*args, "--uri", uri)
    assert done.returncode == 0, (args, done.stderr)
    assert done.stderr == ""
    return done.stdout


def _lines(items: list[Any]) -> str:
    return "".join(exact_json(item) + "\n" for item in items)


# -- fork -------------------------------------------------------------------------------


@pytest.mark.slow
def test_fork_prints_the_branch_its_cut_and_how_to_replay_it(store: Store) -> None:
    assert store.forked is not None
    assert store.forked.stdout.splitlines() == [
        f"forked branch 'retry' of session {SID}",
        f"  from     main before #14 (global position "
        f"{store.forked.stdout.split('global position ')[1].split(')')[0]})",
        f"  stream   AgentBranch-{SID}@retry",
        "  shares   14 items; its own items start at #14",
        f"  replay   agentjournal replay {SID} --branch retry",
    ]
    assert store.forked.stderr == ""


@pytest.mark.slow
def test_a_branch_replays_as_its_parent_before_the_cut_then_its_own_items(store: Store) -> None:
    uri = store.uri
    main_before = _ok("replay", SID, "--at", "14", uri=uri)
    mine = _ok("replay", SID, "--branch", "retry", uri=uri)
    # What the agent on the branch got back, byte for byte: the prefix, then its own run.
    assert mine == _lines(store.branch_items)
    assert mine.startswith(main_before)
    assert len(mine.splitlines()) == 14 + 2  # its user message and the answer
    assert _ok("replay", SID, uri=uri) == _lines(store.main_items)  # main is untouched
    # --at on the line: below the cut, the parent's history; above it, the branch's own.
    for at in (0, 2, 8, 14):
        assert _ok("replay", SID, "--branch", "retry", "--at", str(at), uri=uri) == _ok(
            "replay", SID, "--at", str(at), uri=uri
        )
    assert _ok("replay", SID, "--branch", "retry", "--at", "15", uri=uri) == _lines(
        store.branch_items[:15]
    )
    limited = _ok("replay", SID, "--branch", "retry", "--at", "15", "--limit", "2", uri=uri)
    assert limited == _lines(store.branch_items[13:15])
    assert _ok("replay", SID, "--branch", "retry", "--limit", "0", uri=uri) == ""
    assert _ok("replay", SID, "--branch", "main", uri=uri) == _lines(store.main_items)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["fork", "nobody", "--at", "1"], "no session 'nobody'"),
        (["fork", SID, "--at", "999"], "has no item #999"),
        (["fork", SID, "--turn", "9"], "Turn 9 does not contain a user message"),
        (["fork", SID, "--revision", "999"], "has no revision 999"),
        (["fork", SID, "--at", "1", "--name", "retry"], "'retry' has already been used"),
        (["fork", SID, "--at", "1", "--name", "main"], "the main line's name"),
        (["fork", SID, "--at", "1", "--name", "  "], "must not be blank"),
        (["fork", SID, "--at", "1", "--name", "x" * 1001], "at most 1000"),
        (["fork", SID, "--at", "1", "--from", "nope"], "has no branch 'nope'"),
        (["fork", SID], "one of the arguments --at --turn --revision is required"),
        (["fork", SID, "--at", "-1"], "-1 is less than 0"),
        (["fork", SID, "--turn", "0"], "0 is less than 1"),
        (["fork", SID, "--at", "1", "--turn", "1"], "not allowed with argument"),
        (["replay", SID, "--branch", "nope"], "has no branch 'nope': its branches: 'retry'"),
        (["replay", SID, "--branch", "retry", "--at", "99"], "branch 'retry' of session"),
        (["show", SID, "--branch", "nope"], "has no branch 'nope'"),
        (["usage", "--branch", "retry"], "--branch needs a SESSION"),
        (["usage", SID, "--branch", "nope"], "has no branch 'nope'"),
    ],
)
def test_bad_input_is_one_line_exit_1_and_writes_nothing(
    store: Store, args: list[str], says: str
) -> None:
    before = asyncio.run(_count_events(store.uri))
    done = run(*args, "--uri", store.uri)
    assert done.returncode == 1
    assert done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]  # argparse prints its usage line first
    assert says in last, done.stderr
    assert asyncio.run(_count_events(store.uri)) == before


def test_a_fork_inside_an_open_subagent_replays_as_the_parent_did_there(store: Store) -> None:
    # #5 is inside billing's subsession: the branch continues billing.
    uri = store.uri
    assert "inside" in _ok("fork", SID, "--at", "5", "--name", "inside", uri=uri)
    assert _ok("replay", SID, "--branch", "inside", uri=uri) == _ok(
        "replay", SID, "--at", "5", uri=uri
    )


def test_forks_inside_a_handoff_show_their_continuations_and_add_no_subagent(
    store: Store,
) -> None:
    uri = store.uri

    def subagents() -> Any:
        rows = {r["session_id"]: r for r in json.loads(_ok("sessions", "--json", uri=uri))}
        return rows[SID]["subagents"]

    before = subagents()
    for name in ("within-1", "within-2", "within-3"):  # #5 is inside billing's subsession
        _ok("fork", SID, "--at", "5", "--name", name, uri=uri)
    assert subagents() == before  # each branch continues billing: the same subagent
    only = _ok("show", SID, "--branch", "within-1", uri=uri).splitlines()
    top = only.index(f"  AgentBranch-{SID}@within-1")
    (at,) = [i for i, line in enumerate(only) if "SubagentContinued" in line]
    header = only[at - 1]
    assert header.startswith(f"      AgentSubsession-{SID}-sub-billing-")  # nested one deeper
    assert at > top
    assert f"billing continues AgentSubsession-{SID}-sub-billing-" in only[at]
    data = json.loads(_ok("show", SID, "--branch", "within-1", "--json", uri=uri))
    (line,) = data["branches"]
    assert header.strip() in line["streams"]


def test_fork_never_creates_a_store(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    done = run("fork", SID, "--at", "1", "--uri", f"sqlite:///{missing}")
    assert done.returncode == 1
    assert "no store at" in done.stderr
    assert not missing.exists()


@pytest.mark.slow
def test_fork_by_turn_revision_from_a_branch_and_with_a_generated_name(store: Store) -> None:
    uri = store.uri
    by_turn = _ok("fork", SID, "--turn", "2", "--name", "turn-two", uri=uri)
    assert "from     main before turn 2" in by_turn
    assert _ok("replay", SID, "--branch", "turn-two", uri=uri) == _ok(
        "replay", SID, "--at", "14", uri=uri
    )
    # A fork of the branch after its first own item (revision 1 is its user message).
    deeper = _ok("fork", SID, "--from", "retry", "--revision", "1", "--name", "deeper", uri=uri)
    assert "from     retry after @1" in deeper
    assert "shares   15 items; its own items start at #15" in deeper
    assert _ok("replay", SID, "--branch", "deeper", uri=uri) == _lines(store.branch_items[:15])
    named = _ok("fork", SID, "--at", "0", uri=uri)
    name = named.split("'")[1]
    assert name.startswith("fork_0_")
    assert _ok("replay", SID, "--branch", name, uri=uri) == ""
    # A name that is not a literal key (spaces, capitals) round-trips through every reader.
    odd = _ok("fork", SID, "--at", "1", "--name", "Plan B: refund", uri=uri)
    assert "forked branch 'Plan B: refund'" in odd
    assert _ok("replay", SID, "--branch", "Plan B: refund", uri=uri) == _ok(
        "replay", SID, "--at", "1", uri=uri
    )


# -- show, sessions, usage ----------------------------------------------------------------


@pytest.mark.slow
def test_show_names_each_fork_and_each_branch_under_its_header(store: Store) -> None:
    text = _ok("show", SID, uri=store.uri)
    assert (
        "BranchForked                 branch 'retry' forked before #14 "
        f"\u2192 AgentBranch-{SID}@retry" in text
    )
    assert "\u2442 branch 'retry' \u2190 main before #14: shares 14 items with main" in text
    assert f"  AgentBranch-{SID}@retry\n    @0  BranchStarted " in text
    assert "#14 One more question" in text  # the branch's own item, under its stream
    only = _ok("show", SID, "--branch", "retry", uri=store.uri)
    assert f"AgentSession-{SID}\n" not in only  # the prefix is summarised, not repeated
    assert only.startswith("\u2442 branch 'retry' \u2190 main before #14")
    assert "#15 Anything else?" in only
    main_only = _ok("show", SID, "--branch", "main", uri=store.uri)
    assert "AgentBranch-" not in main_only.replace(f"\u2192 AgentBranch-{SID}@", "")
    data = json.loads(_ok("show", SID, "--json", uri=store.uri))
    retry = next(b for b in data["branches"] if b["name"] == "retry")
    assert retry["parent"] == "main"
    assert retry["cut"]["kind"] == "index"
    assert retry["cut"]["value"] == 14
    assert retry["prefix_items"] == 14
    assert retry["next_index"] == 14
    assert [r["type"] for r in retry["streams"][f"AgentBranch-{SID}@retry"]][:2] == [
        "agentjournal.BranchStarted",
        "UserMessageReceived",
    ]
    stream = _ok("show", SID, "--stream", f"AgentBranch-{SID}@retry", uri=store.uri)
    assert "BranchStarted" in stream
    assert f"AgentSession-{SID}\n" not in stream


def test_sessions_lists_each_branch_with_its_items(store: Store) -> None:
    rows = {r["session_id"]: r for r in json.loads(_ok("sessions", "--json", uri=store.uri))}
    row = rows[SID]
    assert row["items"] == len(store.main_items)  # main's own count, branches apart
    retry = next(b for b in row["branches"] if b["name"] == "retry")
    assert retry["stream"] == f"AgentBranch-{SID}@retry"
    assert retry["parent"] == "main"
    assert retry["at"]["kind"] == "index"
    assert retry["at"]["value"] == 14
    assert retry["items"] == len(store.branch_items)
    assert retry["deleted"] is None
    fresh = {
        r["session_id"]: r for r in json.loads(_ok("sessions", "--json", "--fresh", uri=store.uri))
    }
    assert fresh[SID]["branches"] == row["branches"]  # the saved fold and a fresh one agree
    table = _ok("sessions", uri=store.uri)
    assert "branches" in table.splitlines()[0]


def test_usage_of_a_branch_counts_only_its_own_model_responses(store: Store) -> None:
    whole = json.loads(_ok("usage", SID, "--json", uri=store.uri))
    mine = json.loads(_ok("usage", SID, "--branch", "retry", "--json", uri=store.uri))
    main = json.loads(_ok("usage", SID, "--branch", "main", "--json", uri=store.uri))
    assert mine["total"]["requests"] == 1  # the branch's one model call; the prefix is main's
    assert main == whole  # the session's tree is main's (its branches are lines of their own)


# -- tail and the entry points --------------------------------------------------------------


@pytest.mark.slow
def test_tail_follows_branches_and_branch_limits_it(store: Store, tmp_path: Path) -> None:
    if not store.uri.startswith("sqlite"):
        pytest.skip("a process tail of the double is covered by test_tail.py; once is enough")

    def tail(*args: str) -> list[str]:
        out_path = tmp_path / "tail.out"
        with out_path.open("w") as out:
            env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agentjournal.cli",
                    "tail",
                    SID,
                    "--from-start",
                    *args,
                    "--uri",
                    store.uri,
                ],
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            assert process.stderr is not None
            ready = process.stderr.readline()
            deadline = time.monotonic() + 60
            while "Anything else?" not in out_path.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.3)  # what a running tail prints after it, of this store: nothing
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=30) == 0
        return [ready, *out_path.read_text().splitlines()]

    everything = tail()
    assert "and branches" in everything[0]
    assert any(f"AgentBranch-{SID}@retry@0  BranchStarted" in line for line in everything)
    assert any(f"AgentSession-{SID}@1  UserMessageReceived" in line for line in everything)
    mine = tail("--branch", "retry")
    assert mine[0].startswith(f"tailing branch 'retry' of session {SID}")
    assert all(f"AgentBranch-{SID}@retry@" in line for line in mine[1:])
    assert len(mine) > 2


@pytest.mark.slow
def test_the_branch_readers_and_fork_load_neither_the_sdk_nor_an_http_client(
    store: Store,
) -> None:
    if not store.uri.startswith("sqlite"):
        pytest.skip("the imports do not depend on the store")
    script = (
        "import sys, contextlib, io\n"
        "from agentjournal.cli import main\n"
        "for args in (['replay', 'demo-1', '--branch', 'retry', '--at', '15'],\n"
        "             ['show', 'demo-1'], ['fork', 'demo-1', '--at', '1', '--name', 'light']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        f"        assert main([*args, '--uri', {store.uri!r}]) == 0, args\n"
        "print(sorted(m for m in ('agents', 'httpx', 'openai') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# -- fork --from with a signing key; replay of a deleted branch --------------------------------


@pytest.mark.slow
def test_fork_from_a_branch_signs_and_the_session_verifies(tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    uri = f"sqlite:///{tmp_path / 'd.db'}"
    assert run("keygen", "-o", str(key)).returncode == 0
    assert run("demo", "--uri", uri, "--session", SID, "--key", str(key)).returncode == 0
    env = {"AGENTJOURNAL_SIGNING_KEY_FILE": str(key)}
    for args in (
        ["--at", "14", "--name", "retry"],
        ["--at", "5", "--name", "deep", "--from", "retry"],
    ):
        forked = run("fork", SID, *args, "--uri", uri, env=env)
        assert forked.returncode == 0, forked.stderr
    verified = run("verify", SID, "--uri", uri, "--pubkey", f"{key}.pub")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.splitlines()[-1].startswith("VERIFIED: ")


def test_replay_of_a_deleted_branch_points_to_at(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'e.db'}"

    async def write() -> None:
        async with Journal.open(uri) as journal:
            main = journal.session(SID)
            await main.add_items([_user("q1"), _user("q2")])
            await main.fork(at=1, name="alt")
            await journal.session(SID, branch="alt").add_items([_user("alt q")])
            await main.delete_branch("alt")

    asyncio.run(write())
    done = run("replay", SID, "--branch", "alt", "--uri", uri)
    assert done.returncode == 1
    assert "was deleted" in done.stderr
    assert "--at INDEX" in done.stderr
    assert "switch_to_branch" not in done.stderr
    before = run("replay", SID, "--branch", "alt", "--at", "1", "--uri", uri)
    assert before.returncode == 0, before.stderr
    assert '"q1"' in before.stdout
