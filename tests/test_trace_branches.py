"""``agentjournal trace export`` of a session with branches.

A real ``Runner`` writes a session with a handoff (triage -> billing -> refunds), then a
second run; the session is forked inside the open subagents ("inside", before #7) and
after them ("outside", before #10); each branch runs (the inside one closes its
continuations, the outside one hands off again); "outside" is forked again in its prefix
("below", later deleted) and at one of its own items ("deeper"), and those run too. Every
export is read back (JSONL, the console exporter, a real OTLP collector on loopback) and
checked span by span: main's spans are exactly what they were before any fork, each
branch's runs are traces of their own whose run spans link to the run at their cut on the
line below, a continuation is an ``invoke_agent`` span of the branch, the prefix is never
exported twice, and a follower that meets the forks sends exactly what a one-shot export
does. On SQLite and the KurrentDB double (``Runner.run`` on one, ``run_streamed`` on the
other); the branched session still verifies. A run span is opened by a run only (not by a
line's guard or the closes of its end), and a follower resumed from a state saved before
lines follows the branches forked before that save.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agents import Agent
from agents.testing import ScriptedModel, assistant_message

from agentjournal import Journal, JournalSession
from agentjournal.audit.verify import verify_records
from agentjournal.read import projections
from agentjournal.read.traces import Projector, project_tree
from agentjournal.records import Record, TreeRecords
from agentjournal.store import open_store
from agentjournal.streams import branch_key, branch_stream
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from agentjournal.walk import read_tree
from cli_run import run
from drive import Method, drive
from handoff_scenarios import nested, single, top_level
from otlp_collector import collector
from paused_graph import paused_graph

TESTS = Path(__file__).resolve().parent
SID = "tb1"
Span = dict[str, Any]


@dataclass
class Written:
    """A branched session and what was exported before its first fork."""

    uri: str
    before: list[Span]  # `trace export SID` after main's two runs, before any fork


def _export(uri: str, folder: Path, *args: str) -> list[Span]:
    """``trace export ARGS --jsonl FILE``, read back."""
    out = folder / f"spans-{time.monotonic_ns()}.jsonl"
    done = run("trace", "export", *args, "--jsonl", str(out), "--uri", uri)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("exported "), done.stdout
    return [json.loads(line) for line in out.read_text().splitlines()]


async def _main_runs(uri: str, method: Method) -> None:
    async with Journal.open(uri) as journal:
        main = journal.session(SID)
        await drive(nested(), "Why was I charged twice?", method=method, session=main, hooks=main)
        await drive(top_level(), "Anything else?", method=method, session=main, hooks=main)
        assert len(await main.get_items()) == 12


async def _forks_and_branch_runs(uri: str, method: Method) -> None:
    async with Journal.open(uri) as journal:
        main = journal.session(SID)
        await main.fork(at=7, name="inside")  # billing and refunds open at the cut
        await main.fork(at=10, name="outside")  # after run 1's subagents closed
        on_inside = journal.session(SID, branch="inside")
        await drive(top_level(), "On inside?", method=method, session=on_inside, hooks=on_inside)
        on_outside = journal.session(SID, branch="outside")
        await drive(single(), "On outside?", method=method, session=on_outside, hooks=on_outside)
        await on_outside.fork(at=3, name="below")  # in outside's prefix: main's run 1
        await on_outside.fork(at=11, name="deeper")  # inside outside's own run
        for name in ("below", "deeper"):
            line = journal.session(SID, branch=name)
            await drive(top_level(), f"On {name}?", method=method, session=line, hooks=line)
        await main.delete_branch("below")
        report = verify_records(await read_tree(journal.store, SID), {}, allow_uncovered=True)
        assert report.ok, report.text()


@pytest.fixture(scope="module", params=[("sqlite", "run"), ("kurrentdb", "run_streamed")])
def written(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Written]:
    backend, method = request.param
    folder = tmp_path_factory.mktemp("branches")
    with contextlib.ExitStack() as stack:
        if backend == "kurrentdb":
            uri = stack.enter_context(KurrentDBDouble.in_thread()).uri
        else:
            uri = f"sqlite:///{folder / 'journal.db'}"
        asyncio.run(_main_runs(uri, method))
        before = _export(uri, folder, SID)
        asyncio.run(_forks_and_branch_runs(uri, method))
        yield Written(uri, before)


def _runs(spans: list[Span]) -> list[Span]:
    return sorted(
        (s for s in spans if s["parent_span_id"] is None), key=lambda s: s["start_time_unix_nano"]
    )


def _named(spans: list[Span], name: str) -> list[Span]:
    return [s for s in spans if s["name"] == name]


def _key(span: Span) -> str:
    return json.dumps(span, sort_keys=True)


def _line(written: Written, tmp_path: Path, name: str) -> list[Span]:
    return _export(written.uri, tmp_path, SID, "--branch", name)


# -- main: exactly as before any fork ---------------------------------------------------------


@pytest.mark.slow
def test_main_is_what_it_was_before_the_forks(written: Written, tmp_path: Path) -> None:
    """Forks made after main's runs (and every branch's runs) change none of main's spans:
    the fork's marker on main belongs to no run (before, it stretched main's last run
    span to the moment of the fork)."""
    main_traces = {s["trace_id"] for s in written.before}
    assert len(_runs(written.before)) == 2
    everything = _export(written.uri, tmp_path, SID)
    mains = [s for s in everything if s["trace_id"] in main_traces]
    assert sorted(map(_key, mains)) == sorted(map(_key, written.before))
    only_main = _line(written, tmp_path, "main")
    assert sorted(map(_key, only_main)) == sorted(map(_key, written.before))
    assert all("agentjournal.branch" not in s["attributes"] for s in only_main)


# -- each branch: its own runs, linked to the run at its cut ----------------------------------


def _check_branch(spans: list[Span], before: list[Span], name: str, parent: str) -> Span:
    """What every branch export shows; returns its first run span."""
    main_ids = {s["span_id"] for s in before}
    main_traces = {s["trace_id"] for s in before}
    assert spans, name
    assert not main_ids & {s["span_id"] for s in spans}  # the prefix is never exported again
    assert not main_traces & {s["trace_id"] for s in spans}
    runs = _runs(spans)
    assert runs
    by_id = {s["span_id"]: s for s in spans}
    assert len(by_id) == len(spans)
    for span in spans:  # one tree per run: every parent is in the export, in its trace
        if span["parent_span_id"] is not None:
            parent_span = by_id[span["parent_span_id"]]
            assert parent_span["trace_id"] == span["trace_id"]
            assert parent_span["start_time_unix_nano"] <= span["start_time_unix_nano"]
            assert span["end_time_unix_nano"] <= parent_span["end_time_unix_nano"]
    for root in runs:
        attributes = root["attributes"]
        assert attributes["agentjournal.branch"] == name
        assert attributes["agentjournal.parent_branch"] == parent
        assert attributes["agentjournal.branch_stream"].startswith(f"AgentBranch-{SID}@")
        assert attributes["agentjournal.fork_cut_kind"] == "index"
        assert attributes["agentjournal.session_id"] == SID
        assert attributes["gen_ai.agent.name"] == "triage"
    return runs[0]


def _link(root: Span) -> tuple[str, str]:
    (link,) = root["links"]
    assert link["attributes"] == {
        "agentjournal.link": "forked_from",
        "agentjournal.branch": (root["attributes"]["agentjournal.branch"]),
    }
    return link["trace_id"], link["span_id"]


def test_a_fork_inside_the_subagents_continues_them_as_spans_of_the_branch(
    written: Written, tmp_path: Path
) -> None:
    spans = _line(written, tmp_path, "inside")
    root = _check_branch(spans, written.before, "inside", "main")
    first_main = _runs(written.before)[0]
    # The cut (before #7) is inside main's first run: the link goes to its run span.
    assert _link(root) == (first_main["trace_id"], first_main["span_id"])
    assert root["attributes"]["agentjournal.fork_cut_value"] == 7
    # billing and refunds were open at the cut: each goes on in a continuation, a span of
    # the branch's run (closed `error` by the branch's next run), nested as on main.
    originals = {s["name"]: s["attributes"]["agentjournal.stream"] for s in written.before
                 if s["name"].startswith("invoke_agent ")}  # fmt: skip
    (billing,) = _named(spans, "invoke_agent billing")
    (refunds,) = _named(spans, "invoke_agent refunds")
    assert billing["parent_span_id"] == root["span_id"]
    assert refunds["parent_span_id"] == billing["span_id"]
    for span in (billing, refunds):
        attributes = span["attributes"]
        assert attributes["agentjournal.continues"] == originals[span["name"]]
        assert attributes["agentjournal.stream"] != originals[span["name"]]
        assert attributes["agentjournal.branch"] == "inside"
        assert attributes["agentjournal.outcome"] == "error"
        assert span["status"]["code"] == "ERROR"
        assert span["trace_id"] == root["trace_id"]
    assert root["status"]["code"] == "ERROR"  # a subagent of the run ended in error
    assert [s["parent_span_id"] for s in spans if s["name"].startswith("chat")] == [root["span_id"]]


def test_a_fork_after_the_subagents_and_forks_of_a_branch(written: Written, tmp_path: Path) -> None:
    outside = _line(written, tmp_path, "outside")
    root = _check_branch(outside, written.before, "outside", "main")
    first_main = _runs(written.before)[0]
    # Before #10 = before main's second run's input: the cut is after the first run.
    assert _link(root) == (first_main["trace_id"], first_main["span_id"])
    (billing,) = _named(outside, "invoke_agent billing")  # a handoff of the branch's own
    assert billing["parent_span_id"] == root["span_id"]
    assert billing["attributes"]["agentjournal.outcome"] == "success"
    assert "agentjournal.continues" not in billing["attributes"]
    (lookup,) = _named(outside, "execute_tool lookup_order")
    assert lookup["parent_span_id"] == billing["span_id"]
    # A fork of outside in its prefix links to main's run below it; one at an own item of
    # outside links to outside's run. The deleted branch's past is still exported.
    below = _line(written, tmp_path, "below")
    assert _link(_check_branch(below, written.before, "below", "outside")) == (
        first_main["trace_id"],
        first_main["span_id"],
    )
    deeper = _line(written, tmp_path, "deeper")
    assert _link(_check_branch(deeper, written.before, "deeper", "outside")) == (
        root["trace_id"],
        root["span_id"],
    )
    for spans in (below, deeper):
        assert not {s["span_id"] for s in outside} & {s["span_id"] for s in spans}


LINES = {None, "inside", "outside", "below", "deeper"}
"""What the run spans of the whole session name as their branch (None: main)."""


def _lines_of(spans: Any) -> set[str | None]:
    return {s["attributes"].get("agentjournal.branch") for s in spans if not s["parent_span_id"]}


@pytest.mark.slow
def test_the_session_export_is_every_line_once(written: Written, tmp_path: Path) -> None:
    """``trace export SESSION`` = main and every branch, each span once; ``--all`` the same."""
    everything = _export(written.uri, tmp_path, SID)
    assert _lines_of(everything) == LINES
    lines = [_line(written, tmp_path, name)
             for name in ("main", "inside", "outside", "below", "deeper")]  # fmt: skip
    union = sorted(_key(s) for spans in lines for s in spans)
    assert len(set(union)) == len(union)
    assert sorted(map(_key, everything)) == union
    assert sorted(map(_key, _export(written.uri, tmp_path, "--all"))) == union


async def _records(uri: str) -> tuple[TreeRecords, list[Record]]:
    """The session's tree, and its records in commit order."""
    store = await open_store(uri, create=False)
    try:
        tree = await read_tree(store, SID)
    finally:
        await store.close()
    return tree, sorted(tree.records(), key=lambda r: r.position or 0)


def test_saved_and_loaded_anywhere_the_fold_of_every_line_goes_on_identically(
    written: Written,
) -> None:
    tree, ordered = asyncio.run(_records(written.uri))
    whole = [span.as_json() for span in project_tree(tree)]
    for cut in range(0, len(ordered), 11):
        first = Projector(SID)
        spans = [span for record in ordered[:cut] for span in first.feed(record)]
        again = Projector.load(first.dump())
        spans += [span for record in ordered[cut:] for span in again.feed(record)]
        assert [span.as_json() for span in spans + again.finish()] == whole, cut
    # A state saved before lines were projected (no line fields) loads as main's.
    old = Projector(SID)
    for record in ordered[:5]:
        old.feed(record)
    state = json.loads(old.dump())
    del state["line"]
    for saved in state["trees"].values():
        for key in ("line", "top", "parent", "cut", "fork", "runs"):
            del saved[key]
    assert Projector.load(json.dumps(state).encode()).line is None


def test_crafted_line_events_pull_in_nothing_and_crash_nothing(written: Written) -> None:
    """A marker naming another session's branch stream makes no line; a continuation that
    names itself as its parent is projected without looping."""
    tree, ordered = asyncio.run(_records(written.uri))
    whole = [span.as_json() for span in project_tree(tree)]
    forged = []
    for record in ordered:
        body = record.body or {}
        if record.type == "agentjournal.BranchForked" and body.get("branch") == "deeper":
            body = {**body, "branch_stream": "AgentBranch-other@deeper"}
            record = dataclasses.replace(record, data=json.dumps(body))
        elif record.type == "agentjournal.SubagentContinued":
            body = {**body, "parent_stream": record.stream}
            record = dataclasses.replace(record, data=json.dumps(body))
        forged.append(record)
    projector = Projector(SID)
    spans = [span for record in forged for span in projector.feed(record)] + projector.finish()
    lines = {s.attributes.get("agentjournal.branch") for s in spans if s.parent_id is None}
    assert lines == LINES - {"deeper"}
    assert len(spans) < len(whole)
    assert all(s.trace_id != "" for s in spans)


# -- the exporters, for real ------------------------------------------------------------------


@pytest.mark.slow
def test_console_and_otlp_carry_the_fork_link(written: Written, tmp_path: Path) -> None:
    expected = _line(written, tmp_path, "outside")
    root = _runs(expected)[0]
    trace_id, span_id = _link(root)
    shown = run("trace", "export", SID, "--branch", "outside", "--console", "--uri", written.uri)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count('"span_id": "0x') == len(expected) + 1  # each span, one link
    assert f'"trace_id": "0x{trace_id}"' in shown.stdout
    assert f'"span_id": "0x{span_id}"' in shown.stdout
    assert f"exported {len(expected)} spans" in shown.stderr
    with collector() as otlp:
        done = run(
            "trace", "export", SID, "--branch", "outside", "--otlp", otlp.http_url,
            "--uri", written.uri,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        received = otlp.snapshot()
    assert {(s.trace_id, s.span_id, s.parent_id, s.name) for s in received} == {
        (s["trace_id"], s["span_id"], s["parent_span_id"], s["name"]) for s in expected
    }
    (got,) = [s for s in received if s.span_id == root["span_id"]]
    assert got.links == [
        (trace_id, span_id, {"agentjournal.link": "forked_from", "agentjournal.branch": "outside"})
    ]
    assert got.attributes["agentjournal.branch"] == "outside"
    assert all(not s.links for s in received if s.parent_id is not None)


# -- --follow meets the forks -----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("line", [None, "outside"])
def test_a_follower_meeting_forks_sends_what_a_one_shot_export_does(
    written: Written, tmp_path: Path, line: str | None
) -> None:
    """A follower of the session (every line) or of one branch, started on the written store:
    it folds main's runs, the forks, and every branch's runs in commit order."""
    chosen = [] if line is None else ["--branch", line]
    expected = {s["span_id"]: s for s in _export(written.uri, tmp_path, SID, *chosen)}
    out = tmp_path / "followed.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
    follower = subprocess.Popen(
        [sys.executable, "-m", "agentjournal.cli", "trace", "export", SID, *chosen, "--follow",
         "--jsonl", str(out), "--idle", "0.3", "--uri", written.uri],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=TESTS,
    )  # fmt: skip

    def sent() -> dict[str, Span]:
        if not out.exists():
            return {}
        # Only whole lines: the follower may be appending one right now.
        lines = [line for line in out.read_text().splitlines(keepends=True) if line[-1:] == "\n"]
        return {s["span_id"]: s for s in map(json.loads, lines)}

    try:
        deadline = time.monotonic() + 60
        while set(sent()) != set(expected):
            assert follower.poll() is None, follower.stderr.read() if follower.stderr else ""
            assert not set(sent()) - set(expected)
            assert time.monotonic() < deadline, sorted(set(expected) - set(sent()))
            time.sleep(0.05)
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(20) == 0
        assert "Traceback" not in (follower.stderr.read() if follower.stderr else "")
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    assert sorted(map(_key, sent().values())) == sorted(map(_key, expected.values()))
    # The branches' runs were not dropped.
    assert _lines_of(sent().values()) == (LINES if line is None else {line})


def test_a_follower_stops_even_when_its_subscription_swallows_a_cancel(tmp_path: Path) -> None:
    """A follower stopped by SIGTERM right after it saved (its own append wakes its SQLite
    subscription) stops. Python 3.11's ``asyncio.wait_for`` returns its inner result when
    that completes in the step the cancellation arrives, so the subscription can eat one
    ``cancel`` and read on (a single cancel leaves it running in most attempts, printed
    below): the follower cancels until the task is done (``_cancelled``)."""
    from agentjournal.cli._trace_follow import _cancelled
    from agentjournal.store.contract import NewEvent, StreamState

    async def go() -> bool:
        store = await open_store(f"sqlite:///{tmp_path / 'wake.db'}")
        try:
            event = [NewEvent("Noted", b"{}", {})]
            last = (await store.append("Notes-1", event, expected=StreamState.ANY)).position

            async def pump() -> None:
                async for _ in store.subscribe(after_position=last):
                    pass

            task = asyncio.create_task(pump())
            await asyncio.sleep(0.3)  # caught up: it waits for a wake-up
            await store.append("Notes-1", event, expected=StreamState.ANY)  # wakes it
            task.cancel()  # in the same step, as the follower's stop did
            done, _ = await asyncio.wait({task}, timeout=1.0)
            await asyncio.wait_for(_cancelled(task), 10)
            assert task.done()
            return bool(done)
        finally:
            await store.close()

    print("one cancel was enough:", asyncio.run(go()))


# -- bad input: one line, exit 1, nothing written ---------------------------------------------


async def _last_position(uri: str) -> int:
    store = await open_store(uri, create=False)
    try:
        return len(await store.read_all())
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([SID, "--branch", "nope"], f"session {SID} has no branch 'nope': its branches: 'inside'"),
        ([SID, "--branch", "nope", "--follow"], f"session {SID} has no branch 'nope'"),
        (["--all", "--branch", "inside"], "--branch needs a SESSION: a branch is a line of"),
        (["--branch", "inside"], "--branch needs a SESSION"),
        (["nobody", "--branch", "inside"], "no session 'nobody'"),
    ],
)
def test_bad_branch_input_is_one_line_and_writes_nothing(
    written: Written, tmp_path: Path, args: list[str], message: str
) -> None:
    events_before = asyncio.run(_last_position(written.uri))
    out = tmp_path / "none.jsonl"
    done = run("trace", "export", *args, "--jsonl", str(out), "--uri", written.uri)
    assert done.returncode == 1
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not out.exists()
    assert asyncio.run(_last_position(written.uri)) == events_before


# -- a run span is opened by a run only -------------------------------------------------------

TOP = branch_stream(SID, "b")
POLICY = str(Path(__file__).parents[1] / "samples" / "policy.yml")


def _hello() -> Agent[Any]:
    return Agent(name="triage", model=ScriptedModel([[assistant_message("hi")]]))


async def _pause(session: JournalSession) -> None:
    result: Any = await drive(paused_graph(), "Refund order 42", session=session, hooks=session)
    assert result.interruptions


def _run_spans_of(spans: Any, branch: str) -> list[Any]:
    return [
        s
        for s in spans
        if s.name == "agentjournal.run" and s.attributes.get("agentjournal.branch") == branch
    ]


def test_a_reset_on_a_branch_that_never_ran_exports_no_run_span(tmp_path: Path) -> None:
    async def spans() -> Any:
        async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
            main = journal.session(SID, policy=POLICY)
            await drive(_hello(), "hello", session=main, hooks=main)
            await main.fork(name="b")
            b = journal.session(SID, branch="b", policy=POLICY)
            await b.reset_authority("triage", reason="a fresh start")
            return project_tree(await read_tree(journal.store, SID))

    # No agentjournal.run span on b from its LineGuarded: nothing ran there.
    assert _run_spans_of(asyncio.run(spans()), "b") == []


def test_the_closes_of_a_line_end_open_no_run_span_of_their_own(tmp_path: Path) -> None:
    async def spans() -> Any:
        async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
            main = journal.session(SID)
            await drive(_hello(), "hello", session=main, hooks=main)
            await main.fork(name="b")
            await _pause(journal.session(SID, branch="b"))
            await main.delete_branch("b")
            return project_tree(await read_tree(journal.store, SID))

    runs = _run_spans_of(asyncio.run(spans()), "b")
    # The paused run's alone: the closes carry the deleting object's trace ids (main's
    # finished run), and must not open a run span there for a run that never ran on b.
    assert len(runs) == 1, [(s.trace_id, s.span_id) for s in runs]


def test_a_follower_state_saved_before_lines_keeps_following_existing_branches(
    tmp_path: Path,
) -> None:
    async def records() -> list[Record]:
        async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
            main = journal.session(SID)
            await drive(_hello(), "hello", session=main, hooks=main)
            await main.fork(name="b")
            b = journal.session(SID, branch="b")
            await drive(_hello(), "on b", session=b, hooks=b)
            tree = await read_tree(journal.store, SID)
        return sorted(
            (r for r in tree.records() if r.position is not None), key=lambda r: r.position or 0
        )

    ordered = asyncio.run(records())
    # What a follower without lines saved after the fork: main's tree only, no line fields
    # (its projector dropped every branch event).
    state, fork_read = _state_without_lines(SID, ordered, TOP)
    resumed = Projector.load(state)
    sent = [span for record in ordered[fork_read:] for span in resumed.feed(record)]
    sent += resumed.finish()
    # b's run is sent, though its stream is unknown to the loaded state.
    assert _run_spans_of(sent, "b"), [s.name for s in sent]


# -- a follower whose saved state predates lines ----------------------------------------------
# Such a state never saw the ``BranchForked`` of a branch forked before it was saved. Resumed,
# the follower learns the branch on its first event: the command reads the branch's
# ``BranchStarted`` (the fork's twin) from the store, so the branch's runs carry its real name
# and fork; the pure projector, without a store, names it by its stream's key.

NAME = "B one"  # a name that needs hashing: its stream's key is not the name


def _state_without_lines(session_id: str, records: list[Record], top: str) -> tuple[bytes, int]:
    """A follower state saved just after the fork of the branch whose top stream is ``top``,
    in the form a projector without lines saved (it dropped every branch event and kept no
    line fields), and how many of ``records`` (in global order) it had read then."""
    fork_at = next(n for n, r in enumerate(records) if r.stream == top)  # BranchStarted
    old = Projector(session_id)
    for record in records[: fork_at + 1]:
        if not record.stream.startswith("AgentBranch"):
            old.feed(record)
    state = json.loads(old.dump())
    del state["line"]
    state["streams"] = {k: v for k, v in state["streams"].items() if "@" not in k}
    state["trees"] = {k: v for k, v in state["trees"].items() if "@" not in k}
    for tree in state["trees"].values():
        for key in ("line", "top", "parent", "cut", "fork", "runs"):
            tree.pop(key, None)
    return json.dumps(state).encode(), fork_at + 1


def _saved_without_lines(records: list[Record]) -> tuple[bytes, int]:
    """What a follower without lines saved just after the fork of ``NAME``, and the position
    it saved at."""
    state, read = _state_without_lines(SID, records, branch_stream(SID, NAME))
    position = records[read - 1].position
    assert position is not None
    return state, position


def _write(uri: str) -> list[Record]:
    async def go() -> list[Record]:
        async with Journal.open(uri) as journal:
            main = journal.session(SID)
            await drive(_hello(), "hello", session=main, hooks=main)
            await main.fork(name=NAME)
            b = journal.session(SID, branch=NAME)
            await drive(_hello(), "on b", session=b, hooks=b)
            tree = await read_tree(journal.store, SID)
        return sorted(
            (r for r in tree.records() if r.position is not None), key=lambda r: r.position or 0
        )

    return asyncio.run(go())


def _branch_runs(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        s
        for s in spans
        if s["name"] == "agentjournal.run" and "agentjournal.branch" in s["attributes"]
    ]


def test_the_pure_projector_names_a_branch_it_never_saw_fork_by_its_key(tmp_path: Path) -> None:
    records = _write(f"sqlite:///{tmp_path / 'j.db'}")
    state, position = _saved_without_lines(records)
    resumed = Projector.load(state)
    sent = [s for r in records if (r.position or 0) > position for s in resumed.feed(r)]
    sent += resumed.finish()
    (run,) = _branch_runs([s.as_json() for s in sent])
    assert run["attributes"]["agentjournal.branch"] == branch_key(NAME) != NAME
    assert "agentjournal.fork_event_id" not in run["attributes"]  # not known: not said
    assert not run["links"]
    # The learning survives a save: a branch may first speak long after the resume.
    assert json.loads(resumed.dump())["learn_branches"] is True
    assert Projector.load(resumed.dump()).learns(branch_stream(SID, "another"))


@pytest.mark.slow
def test_a_follower_resumed_from_a_pre_lines_state_exports_a_branch_with_its_fork(
    tmp_path: Path,
) -> None:
    uri = f"sqlite:///{tmp_path / 'j.db'}"
    records = _write(uri)
    state, position = _saved_without_lines(records)

    async def save() -> None:
        store = await open_store(uri)
        try:
            await projections.save(store, "old", position=position, state=state, after=None)
        finally:
            await store.close()

    asyncio.run(save())
    forked = next(r for r in records if r.type == "agentjournal.BranchForked")
    out = tmp_path / "followed.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
    follower = subprocess.Popen(
        [sys.executable, "-m", "agentjournal.cli", "trace", "export", SID, "--follow",
         "--name", "old", "--jsonl", str(out), "--idle", "0.3", "--uri", uri],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=TESTS,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        runs: list[dict[str, Any]] = []
        while not runs:
            assert follower.poll() is None, follower.stderr.read() if follower.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
            if out.exists():
                text = out.read_text()
                lines = [line for line in text.splitlines(keepends=True) if line[-1:] == "\n"]
                runs = _branch_runs([json.loads(line) for line in lines])
        follower.send_signal(signal.SIGTERM)
        assert follower.wait(20) == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    (run,) = runs
    attributes = run["attributes"]
    assert attributes["agentjournal.branch"] == NAME
    assert attributes["agentjournal.parent_branch"] == "main"
    assert attributes["agentjournal.fork_event_id"] == forked.id
    assert attributes["agentjournal.fork_cut_position"] == forked.position
