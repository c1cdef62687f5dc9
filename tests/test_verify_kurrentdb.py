"""On KurrentDB, ``trace export --all`` and the verifier use the second core as on SQLite.

Both fork only where forking is safe: no other Python thread running. ``trace export
--all`` forks before it opens the store, and each process then opens its own client; the
verifier forks once the tree is read and the store closed, in a process that has loaded
gRPC, whose core runs threads of its own (not Python's). Each is checked here in a fresh
process that is only a client (the double serves from the test's process, as a server
would from its machine): it forks, the child's result comes back, and the result is the
one a single process makes — for the export also when a writer appended between the child's
reading and this process's.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

from agentjournal import Journal
from agentjournal.ledger import SigningKey
from agentjournal.read.traces.parts import Part
from agentjournal.testing.kurrentdb_double import ThreadedKurrentDBDouble

SESSION = "kurrentdb-two-cores"
LATE = ("late-1", "late-4")
"""Sessions a writer appends after the child read: one in each part of the trees."""

CLIENT = """
import asyncio, json, sys, threading
from agentjournal import _forked
from agentjournal.audit.verify import verify_records
from agentjournal.cli import _trace_all
from agentjournal.ledger import load_public_key
from agentjournal.ledger.keys import key_id
from agentjournal.store import open_store
from agentjournal.walk import read_tree

uri, session, public = sys.argv[1:4]
forks, results = [], []
real_forked, real_result = _forked.forked, _forked.Child.result

def forked(work):
    child = real_forked(work)
    forks.append(child is not None)
    return child

def result(self):
    sent = real_result(self)
    results.append(sent is not None)
    return sent

_forked.forked, _forked.Child.result = forked, result
_forked.core_to_spare = _forked.forking_safe  # whatever the machine's load: the safety rule

async def spans(second):
    store = await open_store(uri, create=False)
    try:
        return await _trace_all._every_tree(store, second, _trace_all._lines())
    finally:
        await store.close()

second = _trace_all._second_part(uri, _trace_all._lines())  # before any gRPC, as the command
try:
    split = asyncio.run(spans(second))
finally:
    if second is not None:
        second.close()
alone = asyncio.run(spans(None))

async def tree():
    store = await open_store(uri, create=False)
    try:
        return await read_tree(store, session)
    finally:
        await store.close()

records = asyncio.run(tree())
threads = threading.active_count()
key = load_public_key(public)
trusted = {key_id(key): key}
one = verify_records(records, trusted, workers=1)
two = verify_records(records, trusted, workers=2)
print(json.dumps({
    "forks": forks,
    "results": results,
    "spans": len(alone),
    "same spans": split == alone,
    "threads": threads,
    "events": sum(len(stream) for stream in records.streams.values()),
    "verified": one.ok and two.ok,
    "same report": one.text() == two.text(),
    "report": two.text(),
}))
"""

APPENDED = """
import asyncio, json, sys
from agentjournal import Journal, _forked
from agentjournal.cli import _trace_all
from agentjournal.store import open_store

uri, LATE = sys.argv[1], sys.argv[2:]
_forked.core_to_spare = _forked.forking_safe

async def spans(second):
    store = await open_store(uri, create=False)
    try:
        return await _trace_all._every_tree(store, second, _trace_all._lines())
    finally:
        await store.close()

class Sent:
    def __init__(self, sent):
        self.sent = sent

    def result(self):
        return self.sent

second = _trace_all._second_part(uri, _trace_all._lines())
try:
    sent = second.result()  # the child's part, of the store as it was then
finally:
    second.close()

async def late():
    async with Journal.open(uri) as journal:
        for name in LATE:
            await journal.session(name).add_items([
                {"role": "user", "content": name},
                {"type": "function_call", "call_id": "c", "name": "t", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c", "output": "ok"},
            ])

asyncio.run(late())
split = asyncio.run(spans(Sent(sent)))
alone = asyncio.run(spans(None))
print(json.dumps({
    "sent": sent is not None,
    "same spans": split == alone,
    "late": [name for name in LATE if any(name in line for _, line in alone)],
}))
"""


def turn(n: int) -> list[Any]:
    return [
        {"role": "user", "content": f"Where is order {n}?"},
        {
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "lookup_order",
            "arguments": json.dumps({"order_id": str(n)}),
        },
        {"type": "function_call_output", "call_id": f"call_{n}", "output": "shipped"},
        {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{n}",
            "status": "completed",
            "content": [{"type": "output_text", "text": f"Order {n} shipped.", "annotations": []}],
        },
    ]


async def write(uri: str, key: SigningKey) -> None:
    async with Journal.open(uri, signing_key=key) as journal:
        session = journal.session(SESSION)
        for n in range(40):
            await session.add_items(turn(n))
        await session.checkpoint()


def test_trace_export_and_verify_fork_and_agree_with_one_process(
    kurrentdb_double: ThreadedKurrentDBDouble,
) -> None:
    key = SigningKey.generate()
    asyncio.run(write(kurrentdb_double.uri, key))
    done = subprocess.run(
        [sys.executable, "-c", CLIENT, kurrentdb_double.uri, SESSION, key.public_pem()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    # The export forked before any gRPC, the verifier after reading the tree through it; each
    # child's result came back.
    assert found["forks"] == [True, True]
    assert found["results"] == [True, True]
    assert found["spans"] > 40
    assert found["same spans"]
    assert found["threads"] == 1  # the client leaves no Python thread behind
    assert found["events"] > 160  # the 160 items, the checkpoints, the key
    assert found["verified"], found["report"]
    assert found["same report"]


def test_a_trace_part_read_before_a_writer_appended_is_folded_again_on_kurrentdb(
    kurrentdb_double: ThreadedKurrentDBDouble,
) -> None:
    """The parts are merged by global position, which on KurrentDB has gaps: the child's part,
    of the store before the writer appended, is folded again here up to where this process
    read, so the export is one prefix of the global order, as one process's."""
    assert {Part(0, 2).owns(name) for name in LATE} == {True, False}
    asyncio.run(write(kurrentdb_double.uri, SigningKey.generate()))
    done = subprocess.run(
        [sys.executable, "-c", APPENDED, kurrentdb_double.uri, *LATE],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["sent"]
    assert found["same spans"]
    assert found["late"] == list(LATE)
