"""The integrity check on two processes finds exactly what it finds on one.

A large tree's chains are checked in two parts, the second in a forked child
(``audit.verify._parallel``). Whatever the split and whatever is wrong with the events,
the report (every stream's first problem, in stream order) and the call markers left for
containment are those of the one-process check; a child that fails costs time, never a
result. The bundles are sessions the SDK's real ``Runner`` wrote (``ledger_sessions.py``),
damaged after the fact as an attacker would.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import agentjournal.audit.verify as verify_module
from agentjournal import _forked
from agentjournal.audit.verify import Report, _parallel, verify_bundle
from agentjournal.audit.verify._integrity import Markers, check_chain
from agentjournal.audit.verify._parse import bundle_records
from agentjournal.errors import InvalidInput
from agentjournal.ledger.chain import GENESIS, chain_hash
from agentjournal.records import Record
from ledger_sessions import TRUSTED, rechain, record, stream_of

BUNDLES = record()
SHARES = (0.1, 0.3, 0.5, 0.7, 0.95, 1.0)
FORKING_SAFE = _forked.forking_safe  # the real rule, before the fixture below
FORKS: list[int] = []


@pytest.fixture(autouse=True)
def forking(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork whatever else runs in this test process (a thread another test file left idle
    would keep every child here from running), and count the forks."""
    real = _forked.forked

    def counted(work: Callable[[], Any]) -> Any:
        FORKS.append(1)
        return real(work)

    monkeypatch.setattr(_forked, "forked", counted)
    monkeypatch.setattr(_forked, "forking_safe", lambda: True)
    FORKS.clear()


Streams = dict[str, list[Record]]


def streams_of(bundle: dict[str, Any]) -> Streams:
    return {name: list(stream) for name, stream in bundle_records(bundle).streams.items()}


def one_process(streams: Streams) -> tuple[list[Any], dict[tuple[str, int], Any]]:
    report, markers = Report(), Markers()
    for name, stream in streams.items():
        check_chain(report, name, stream, markers)
    return report.problems, placed(streams, markers)


def two_processes(streams: Streams, share: float) -> tuple[list[Any], dict[tuple[str, int], Any]]:
    report, markers = Report(), Markers()
    forks = len(FORKS)
    _parallel.check_integrity(report, streams, markers, workers=2, share=share)
    assert len(FORKS) == forks + 1  # the child did run
    return report.problems, placed(streams, markers)


def placed(streams: Streams, markers: Markers) -> dict[tuple[str, int], Any]:
    """The markers by stream and revision (a record's id differs between readings)."""
    return {
        (name, event.revision): markers[id(event)]
        for name, stream in streams.items()
        for event in stream
        if id(event) in markers
    }


def reseal(bundle: dict[str, Any], name: str) -> None:
    """Recompute one stream's data digests and chain, leaving every view commitment as it is."""
    stream = stream_of(bundle, name)
    prev = GENESIS
    for event in stream["events"]:
        metadata = event["metadata"]
        metadata["aj.prev"] = prev
        metadata["aj.hash"] = chain_hash(
            stream["name"],
            event["revision"],
            event["id"],
            event["type"],
            event["data_sha256"],
            metadata,
        )
        prev = metadata["aj.hash"]


def call_events(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    stream = stream_of(bundle, "AgentSession-")
    return [e for e in stream["events"] if "aj.redacted" in e["metadata"]]


def data_changed(bundle: dict[str, Any]) -> None:
    stream_of(bundle, "AgentSession-")["events"][-2]["data"] += " "


def metadata_changed(bundle: dict[str, Any]) -> None:
    stream_of(bundle, "AgentSubsession-")["events"][3]["metadata"]["aj.turn"] = "99"


def event_removed(bundle: dict[str, Any]) -> None:
    del stream_of(bundle, "AgentSession-")["events"][5]


def view_forged(bundle: dict[str, Any]) -> None:
    """A tool call whose view commitment no longer matches its data, chained correctly."""
    call = call_events(bundle)[-1]
    call["metadata"]["aj.redacted"] = "0" * 64
    reseal(bundle, stream_of(bundle, "AgentSession-")["name"])


def view_and_hash(bundle: dict[str, Any]) -> None:
    """A tool call whose view commitment and hash are both wrong: the hash is the problem
    (the view is an event's last check), whichever process checks each."""
    call_events(bundle)[0]["metadata"]["aj.redacted"] = "0" * 64


def view_then_hash(bundle: dict[str, Any]) -> None:
    """A forged view early, chained correctly, and a bad hash after it: the view counts."""
    call_events(bundle)[0]["metadata"]["aj.redacted"] = "0" * 64
    reseal(bundle, stream_of(bundle, "AgentSession-")["name"])
    stream_of(bundle, "AgentSession-")["events"][-1]["metadata"]["aj.turn"] = "99"


def two_problems(bundle: dict[str, Any]) -> None:
    """A bad event early and another late in the same stream: only the first counts."""
    events = stream_of(bundle, "AgentSession-")["events"]
    events[2]["metadata"]["aj.turn"] = "99"
    events[-1]["data_sha256"] = "0" * 64


def every_stream(bundle: dict[str, Any]) -> None:
    for stream in bundle["streams"]:
        stream["events"][-1]["metadata"]["aj.seq"] = "x"


DAMAGE: dict[str, Callable[[dict[str, Any]], None]] = {
    "intact": lambda bundle: None,
    "data changed": data_changed,
    "metadata changed": metadata_changed,
    "event removed": event_removed,
    "view forged": view_forged,
    "view and hash": view_and_hash,
    "view then hash": view_then_hash,
    "two problems": two_problems,
    "every stream": every_stream,
}


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize("share", SHARES)
def test_two_processes_report_what_one_does(damage: str, share: float) -> None:
    bundle = copy.deepcopy(BUNDLES["guarded"])
    DAMAGE[damage](bundle)
    problems, markers = one_process(streams_of(bundle))
    found = two_processes(streams_of(bundle), share)
    assert found[0] == problems
    assert bool(problems) is (damage != "intact")  # the damage is seen at all
    if not problems:  # where a chain breaks, nothing reads the markers
        assert found[1] == markers


def test_the_child_leaves_the_markers_containment_reads() -> None:
    streams = streams_of(BUNDLES["guarded"])
    _, markers = two_processes(streams, 1.0)  # every event in the child
    assert markers  # the guarded session's tool calls
    assert markers == one_process(streams)[1]


@pytest.mark.parametrize("fate", ["raises", "is killed", "exits early"])
def test_a_failed_child_costs_time_not_the_result(
    fate: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(streams: Any, parts: Any) -> Any:
        if fate == "raises":
            raise RuntimeError("the child's own failure")
        if fate == "is killed":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(0)  # sends nothing

    monkeypatch.setattr(_parallel, "_child_work", failing)
    bundle = copy.deepcopy(BUNDLES["guarded"])
    two_problems(bundle)
    problems = one_process(streams_of(bundle))[0]
    assert problems
    assert two_processes(streams_of(bundle), 0.5)[0] == problems
    intact = streams_of(BUNDLES["guarded"])
    assert two_processes(intact, 0.5) == one_process(intact)


def test_no_fork_while_another_thread_runs() -> None:
    # another test file may have left one idle; pytest-xdist's worker runs one of its own
    alone = threading.active_count() == 1 and _forked.threads() == 1
    assert FORKING_SAFE() is alone
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not FORKING_SAFE()
    finally:
        stop.set()
        other.join()


def test_by_default_a_fork_needs_a_large_tree_and_a_free_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two processes on a busy machine share one core: forking would only add its cost."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(_forked, "runnable", lambda: 1.0)  # this process alone
    assert _parallel.forking_pays(_parallel.MIN_EVENTS)
    assert not _parallel.forking_pays(_parallel.MIN_EVENTS - 1)
    monkeypatch.setattr(_forked, "runnable", lambda: 2.0)  # and another
    assert not _parallel.forking_pays(10**6)
    monkeypatch.setattr(_forked, "runnable", lambda: 1.0)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    assert not _parallel.forking_pays(10**6)
    monkeypatch.setattr(_forked, "forking_safe", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert not _parallel.forking_pays(10**6)


@pytest.mark.parametrize(("workers", "forks"), [(None, 0), (1, 0), (2, 1)])
def test_workers_says_how_many_processes(workers: int | None, forks: int) -> None:
    """Unless the caller says, a tree this small stays in one process; 2 forks it anyway."""
    report = verify_bundle(BUNDLES["guarded"], TRUSTED, workers=workers)
    assert report.ok
    assert len(FORKS) == forks


def test_split_covers_every_event_once() -> None:
    streams = streams_of(BUNDLES["nested"])
    for share in (0.0, *SHARES):
        mine, theirs = _parallel.split(streams, share)
        covered = [
            (name, revision)
            for name, start, stop in mine + theirs
            for revision in range(start, stop)
        ]
        assert sorted(covered) == sorted(
            (name, e.revision) for name, stream in streams.items() for e in stream
        )
        assert bool(theirs) is (share > 0)


@pytest.mark.parametrize("damage", DAMAGE)
def test_verify_bundle_on_two_processes(damage: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole verification on two processes: the same report as on one, and the child
    did run."""
    bundle = copy.deepcopy(BUNDLES["guarded"])
    DAMAGE[damage](bundle)
    one = verify_bundle(bundle, TRUSTED, workers=1)
    assert not FORKS
    two = verify_bundle(bundle, TRUSTED, workers=2)
    assert FORKS == [1]
    assert one.ok is (damage == "intact")
    assert (one.lines, one.problems) == (two.lines, two.problems)
    assert (one.signers, one.foreign) == (two.signers, two.foreign)


@pytest.mark.parametrize("workers", [0, 3, True, 2.0, "2"])
def test_workers_is_one_or_two(workers: Any) -> None:
    with pytest.raises(InvalidInput, match="workers must be None, 1 or 2"):
        verify_bundle(BUNDLES["simple"], TRUSTED, workers=workers)


def forged_signature(bundle: dict[str, Any]) -> None:
    """The newest checkpoint's signature replaced by another valid-looking one, re-chained."""
    ledger = stream_of(bundle, "AgentLedger-")
    event = ledger["events"][-1]
    body = json.loads(event["data"])
    body["signature"] = base64.b64encode(b"\x01" * 64).decode()
    event["data"] = json.dumps(body)
    rechain(bundle, ledger["name"])


@pytest.mark.parametrize("damage", ["intact", "forged signature"])
def test_a_forged_signature_fails_alike_on_two_processes(damage: str) -> None:
    bundle = copy.deepcopy(BUNDLES["guarded"])
    if damage == "forged signature":
        forged_signature(bundle)
    one = verify_bundle(bundle, TRUSTED, workers=1)
    two = verify_bundle(bundle, TRUSTED, workers=2)
    assert FORKS == [1]
    assert (one.lines, one.problems) == (two.lines, two.problems)
    assert (one.signers, one.foreign) == (two.signers, two.foreign)
    assert one.ok is (damage == "intact")
    if damage != "intact":
        assert "the signature is invalid" in one.text()


CHECKS = (
    "check_twins",
    "check_checkpoints",
    "check_containment",
    "check_approvals",
    "check_erasure",
)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_checkpoints_run_here_and_the_other_checks_in_the_child(
    workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On two processes the child, which computed the call markers, runs containment and
    the other checks after integrity (twins, ... approvals, erasure) while this process runs
    the checkpoints'; the report is one process's, each check's line in its place."""
    ran: dict[str, str] = {}
    for check in CHECKS:
        real = getattr(verify_module, check)

        def marked(report: Report, *args: Any, _real: Any = real, _name: str = check) -> None:
            _real(report, *args)
            report.lines.append(f"{_name} ran in {os.getpid()}")

        monkeypatch.setattr(verify_module, check, marked)
    report = verify_bundle(BUNDLES["guarded"], TRUSTED, workers=workers)
    assert report.ok
    for line in report.lines:
        if " ran in " in line:
            name, pid = line.split(" ran in ")
            ran[name] = pid
    here = str(os.getpid())
    assert list(ran) == list(CHECKS)
    assert (ran["check_containment"] == here) is (workers == 1)
    assert ran["check_twins"] == ran["check_approvals"] == ran["check_containment"]
    assert ran["check_erasure"] == ran["check_containment"]
    assert ran["check_checkpoints"] == here
    one = verify_bundle(BUNDLES["guarded"], TRUSTED, workers=1)
    assert [line.split(" ran in ")[0] for line in report.lines] == [
        line.split(" ran in ")[0] for line in one.lines
    ]


def test_every_child_is_reaped(monkeypatch: pytest.MonkeyPatch) -> None:
    """No child outlives its verification for long as a zombie: each is reaped as it ends."""
    for _ in range(3):
        assert verify_bundle(BUNDLES["guarded"], TRUSTED, workers=2).ok
    deadline = time.monotonic() + 10
    while _forked._ended and time.monotonic() < deadline:
        time.sleep(0.01)
        _forked.reap()
    assert _forked._ended == []
    assert len(FORKS) == 3


def test_an_error_here_stops_and_reaps_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process failing on its own part (here: every part fails) ends the child too."""

    def failing(streams: Any, part: Any, markers: Any) -> Any:
        raise RuntimeError("this process's own failure")

    monkeypatch.setattr(_parallel, "_check", failing)
    with pytest.raises(RuntimeError, match="own failure"):
        two_processes(streams_of(BUNDLES["guarded"]), 0.5)
    deadline = time.monotonic() + 10
    while _forked._ended and time.monotonic() < deadline:
        time.sleep(0.01)
        _forked.reap()
    assert _forked._ended == []
