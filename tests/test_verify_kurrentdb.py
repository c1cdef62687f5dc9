"""On KurrentDB, ``trace export --all`` and ``agentjournal verify`` use the second core as on
SQLite.

Both fork only where forking is safe: no other thread running, Python's or any library's
(the kernel's count: a lock another thread held would stay held in the child, and gRPC's fork
handler waits for its threads). ``trace export --all`` forks before it opens the
store, and each process opens its own client. ``agentjournal verify`` reads the tree in an
event loop and verifies it once the loop has ended (collecting what it left in reference
cycles, if a thread is left): gRPC's poller is a Python thread, and a call the store's close
cancelled can keep it running while the loop runs (about one run in five, verifying inside
the loop) and after it until those cycles are collected. Each is checked from a
process that is only a client (``kurrentdb_cores_worker.py``; the double serves from this
test's process, as a server would from its machine): it forks, the child's result comes
back and is used, and the output is the one a single process makes — for the export also
when a writer appended between the child's read and this process's, which the merge by
global position (with gaps, on KurrentDB) must notice. That the two processes agree on
damaged trees is ``test_verify_parallel*.py``'s and ``test_trace_parts.py``'s, on bundles
and SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentjournal.ledger import SigningKey
from agentjournal.read.traces.parts import Part
from agentjournal.testing.kurrentdb_double import ThreadedKurrentDBDouble
from trace_scenarios import write_support

WORKER = Path(__file__).with_name("kurrentdb_cores_worker.py")
SESSIONS = ("kurrentdb-two-cores", "kurrentdb-other")
"""Support sessions the Runner writes before the export (a handoff, guardrail decisions, a
policy's grants, two runs each): one in each part of the trees."""
LATE = ("late-1", "late-4")
"""Sessions a writer appends after the child read: one in each part of the trees."""


async def write(uri: str, key: SigningKey) -> None:
    for name in SESSIONS:
        await write_support(uri, name, key)


def worker(*args: str) -> dict[str, Any]:
    """What the worker printed; its process group (its children too) killed if it hangs."""
    process = subprocess.Popen(
        [sys.executable, str(WORKER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # a child the worker left, if any
    assert process.returncode == 0, err
    found: dict[str, Any] = json.loads(out.splitlines()[-1])
    assert found["reaped"]  # no child left
    assert found["viewed here"] == 0  # the verifier's child checked the views, when it ran
    return found


ALONE = [["MainThread"], 1]
"""What a command found when it judged whether a second core is free: Python's main thread
and no other thread at all (the kernel's count)."""


def both_parts(names: tuple[str, ...]) -> bool:
    return {Part(0, 2).owns(name) for name in names} == {True, False}


@pytest.mark.slow
def test_trace_export_forks_before_grpc_and_exports_what_one_process_does(
    kurrentdb_double: ThreadedKurrentDBDouble, tmp_path: Path
) -> None:
    assert both_parts(SESSIONS)
    asyncio.run(write(kurrentdb_double.uri, SigningKey.generate()))
    found = worker("export", kurrentdb_double.uri, str(tmp_path / "spans.jsonl"))
    assert found["code"] == 0
    assert found["judged"] == [ALONE]
    assert found["forks"] == [True]
    assert found["results"] == [True]
    assert found["refolded"] == []  # the child's part is used as it sent it
    assert found["spans"] > 10 * len(SESSIONS)
    assert found["sessions"] == sorted(SESSIONS)
    assert found["same"]


@pytest.mark.slow
def test_a_trace_part_read_before_a_writer_appended_is_folded_again_on_kurrentdb(
    kurrentdb_double: ThreadedKurrentDBDouble,
) -> None:
    """The child's part, of the store before the writer appended, is folded again here up to
    where this process read, so the export is one prefix of the global order, as one
    process's."""
    assert both_parts(LATE)
    asyncio.run(write(kurrentdb_double.uri, SigningKey.generate()))
    found = worker("appended", kurrentdb_double.uri, *LATE)
    assert found["forks"] == [True]
    assert found["results"] == [True]
    assert len(found["refolded"]) == 1  # the child's part, once
    assert found["refolded"][0] is not None  # up to where this process read
    assert found["sessions"] == sorted((*SESSIONS, *LATE))
    assert found["same"]


@pytest.mark.slow
def test_verify_reads_over_grpc_then_forks_and_prints_the_one_process_report(
    kurrentdb_double: ThreadedKurrentDBDouble, tmp_path: Path
) -> None:
    key = SigningKey.generate()
    asyncio.run(write(kurrentdb_double.uri, key))
    pubkey = tmp_path / "key.pub"
    pubkey.write_text(key.public_pem())
    found = worker("verify", kurrentdb_double.uri, SESSIONS[0], str(pubkey))
    # Each time, the command's loop had ended and gRPC's threads with it: a fork, and the
    # child's result used.
    assert found["judged"] == [ALONE] * 4
    assert found["forks"] == [True] * 4
    assert found["results"] == [True] * 4
    assert found["codes"] == [0]
    assert found["last"].startswith("VERIFIED: ")
    assert found["same"]
