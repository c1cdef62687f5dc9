"""kill -9 during an erasure: the subject's key is still there and no erasure is recorded,
or the key is gone and its content unreadable; never an erasure recorded over readable
content. A retried erasure finishes it: one ``SubjectErased`` per affected session, nothing
twice, every session verifies, and no byte of the content or the key is left in the files.

A worker process (``tests/erase_worker.py``) runs ``journal.erase`` on a sealed store
holding a dozen sessions of one subject (a handoff and its subsession, a branch, guardrail
payloads, a paused run; ``tests/shred_scenarios.py``) beside another subject's. It is
killed at each step of the erasure (it kills itself there: deterministic), and from
outside at delays spread over an erasure's length. On SQLite each kill starts from a copy
of one prepared store; on the KurrentDB double each from a fresh double.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, events
from agentjournal.audit.verify import verify_records
from agentjournal.ledger import SigningKey
from agentjournal.shred.fields import ERASED
from agentjournal.shred.sealing import OpeningStore
from agentjournal.shred.sqlite_keys import SQLiteKeyStore
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from agentjournal.walk import read_tree
from erase_worker import BY, REASON, SIGNING_KEY
from shred_scenarios import PLANTED, plant

pytestmark = pytest.mark.slow  # worker processes, killed

WORKER = Path(__file__).with_name("erase_worker.py")
KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}
ALICE = [f"alice-{n:02d}" for n in range(10)]
ALICE_SAID = [f"KILL-alice-{n:02d}-7c1e" for n in range(10)]
ALICE_SESSIONS = sorted(["plant-1", "plant-2", *ALICE])
BOB = ["bob-1", "bob-2"]
BOB_SAID = ["KEEP-bob-1-5a0d", "KEEP-bob-2-e3b9"]
LINES = [("plant-1", None), ("plant-1", "b1"), ("plant-2", None)] + [(s, None) for s in ALICE]
POINTS = ["before-destroy", "after-destroy", "after-erased:1", "after-erased:6", "before-purge"]


async def populate(journal: Journal) -> None:
    """Alice's twelve sessions and Bob's two, each line checkpointed."""
    await plant(journal, "alice")
    for session_id, said in zip(ALICE, ALICE_SAID, strict=True):
        session = journal.session(session_id, user_id="alice")
        await session.add_items([{"role": "user", "content": said}])
        await session.add_items([{"role": "assistant", "content": f"noted {said}"}])
    for session_id, said in zip(BOB, BOB_SAID, strict=True):
        await journal.session(session_id, user_id="bob").add_items(
            [{"role": "user", "content": said}]
        )
    for session_id, branch in [*LINES, *((s, None) for s in BOB)]:
        user = "bob" if session_id in BOB else "alice"
        await journal.session(session_id, user_id=user, branch=branch).checkpoint()


@dataclass
class Place:
    """A store and its key store, as the worker and the checks open them."""

    uri: str
    keys: Path
    folder: Path

    def open(self) -> Any:
        return Journal.open(self.uri, keys=self.keys, signing_key=KEY)


def key_ids(keys: Path, subject: str) -> dict[str, bool]:
    """Each key of ``subject``: whether it is destroyed (read from the file, no cache)."""
    store = SQLiteKeyStore(keys)
    try:
        rows = store._db.execute(
            "SELECT key_id FROM subject_keys WHERE subject = ?", (subject,)
        ).fetchall()
        return {row[0]: store.is_destroyed(row[0]) for row in rows}
    finally:
        store.close()


def secrets(keys: Path, subject: str) -> list[bytes]:
    db = sqlite3.connect(keys)
    try:
        rows = db.execute(
            "SELECT secret FROM subject_keys WHERE subject = ? AND secret IS NOT NULL", (subject,)
        ).fetchall()
        return [bytes(row[0]) for row in rows]
    finally:
        db.close()


def found(raw: bytes, texts: list[str]) -> list[str]:
    return [text for text in texts if text.encode() in raw]


async def readable(journal: Journal, subject: str) -> bytes:
    """Every event of the store as a holder of the keys reads it, and every line's items
    of ``subject``'s sessions, as bytes."""
    assert journal.keys is not None
    opened = await OpeningStore(journal.store, journal.keys).read_all()
    raw = b"".join(e.data + json.dumps(dict(e.metadata)).encode() for e in opened)
    lines = LINES if subject == "alice" else [(s, None) for s in BOB]
    for session_id, branch in lines:
        items = await journal.session(session_id, user_id=subject, branch=branch).get_items()
        raw += json.dumps(items).encode()
    return raw


async def erased_events(journal: Journal) -> list[Any]:
    return [e for e in await journal.store.read_all() if e.type == events.SUBJECT_ERASED]


async def kill_erasure(
    place: Place, *, die_at: str = "", delay: float | None = None
) -> tuple[int, float]:
    """Run the worker's erasure on ``place``: killed at ``die_at`` (by itself) or after
    ``delay`` seconds (from here), or let finish. Its exit code, and the seconds from its
    start to its outcome (or its end)."""
    key_file = place.folder / "signing.pem"
    if not key_file.exists():
        key_file.write_text(KEY.private_pem())
    env = {
        **os.environ,
        SIGNING_KEY: str(key_file),
        "PYTHONPATH": os.pathsep.join([str(WORKER.parent), *sys.path]),
    }
    stderr = place.folder / "worker.err"
    with stderr.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            place.uri,
            str(place.keys),
            "alice",
            die_at,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=sink,
            env=env,
        )
    assert process.stdout is not None
    assert process.stdin is not None
    ready = await asyncio.wait_for(process.stdout.readline(), 120)
    assert ready == b"ready\n", (ready, stderr.read_text())
    process.stdin.write(b"go\n")
    await process.stdin.drain()
    started = time.perf_counter()
    if delay is not None:
        await asyncio.sleep(delay)
        if process.returncode is None:
            process.send_signal(signal.SIGKILL)
    await asyncio.wait_for(process.stdout.readline(), 120)  # its outcome, or its end
    took = time.perf_counter() - started
    code = await asyncio.wait_for(process.wait(), 120)
    assert code in (0, -signal.SIGKILL), stderr.read_text()
    return code, took


async def check_killed(place: Place) -> str:
    """The state a killed erasure left (see the module docs); which one it is."""
    keys = key_ids(place.keys, "alice")
    assert keys
    destroyed = set(keys.values())
    assert len(destroyed) == 1, f"some of alice's keys destroyed, not all: {keys}"
    async with place.open() as journal:
        erased = await erased_events(journal)
        raw = await readable(journal, "alice")
        if destroyed == {False}:
            assert erased == [], "an erasure recorded while the key is still there"
            assert found(raw, [*PLANTED, *ALICE_SAID]) == [*PLANTED, *ALICE_SAID]
            return "key kept, nothing recorded"
        assert found(raw, [*PLANTED, *ALICE_SAID]) == [], "content readable, key destroyed"
        assert ERASED.encode() in raw
        streams = [e.stream for e in erased]
        assert len(streams) == len(set(streams)), f"an erasure recorded twice: {streams}"
        return f"key destroyed, {len(erased)} of {len(ALICE_SESSIONS)} sessions told"


async def check_retried(place: Place) -> None:
    """A retried erasure finishes the killed one (see the module docs)."""
    async with place.open() as journal:
        erasure = await journal.erase(subject="alice", reason=REASON, by=BY)
        assert list(erasure.sessions) == ALICE_SESSIONS
        erased = await erased_events(journal)
        assert sorted(e.stream for e in erased) == [f"AgentSession-{s}" for s in ALICE_SESSIONS]
        for event in erased:
            body = events.SubjectErased.decode(event.data)
            assert (body.subject, body.reason, body.by) == ("alice", REASON, BY)
        count = len(await journal.store.read_all())
        await journal.erase(subject="alice", reason=REASON, by=BY)
        assert len(await journal.store.read_all()) == count  # finished: nothing more to write
        assert found(await readable(journal, "alice"), [*PLANTED, *ALICE_SAID]) == []
        assert found(await readable(journal, "bob"), BOB_SAID) == BOB_SAID
        for session_id in [*ALICE_SESSIONS, *BOB]:
            report = verify_records(await read_tree(journal.store, session_id), TRUSTED)
            assert report.ok, (session_id, report.text())
            if session_id in ALICE_SESSIONS:
                assert "content of subject alice erased at" in report.text()
    assert all(key_ids(place.keys, "alice").values())


def scan_files(folder: Path, alice_secrets: list[bytes]) -> None:
    """No byte of alice's content or keys in any file of ``folder`` (db, WAL, SHM, keys)."""
    raw = b"".join(p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file())
    assert b"alice" in raw  # the scan reads the files (the key store names its subjects)
    assert found(raw, [*PLANTED, *ALICE_SAID]) == []
    assert [s for s in alice_secrets if s in raw] == []


# -- SQLite ----------------------------------------------------------------------------------


@pytest.fixture
async def prepared(tmp_path: Path) -> tuple[Path, list[bytes]]:
    """A folder with the populated store and its key store (closed), and alice's secrets."""
    folder = tmp_path / "prepared"
    folder.mkdir()
    place = Place(f"sqlite:///{folder / 'journal.db'}", folder / "keys.db", folder)
    async with place.open() as journal:
        await populate(journal)
    return folder, secrets(place.keys, "alice")


def copied(prepared: Path, to: Path) -> Place:
    shutil.copytree(prepared, to)
    return Place(f"sqlite:///{to / 'journal.db'}", to / "keys.db", to)


async def test_an_erasure_killed_at_each_step_on_sqlite_is_safe_and_a_retry_finishes_it(
    prepared: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    folder, alice_secrets = prepared
    expected = {
        "before-destroy": "key kept, nothing recorded",
        "after-destroy": "key destroyed, 0 of 12 sessions told",
        "after-erased:1": "key destroyed, 1 of 12 sessions told",
        "after-erased:6": "key destroyed, 6 of 12 sessions told",
        "before-purge": "key destroyed, 12 of 12 sessions told",
    }
    for die_at in POINTS:
        place = copied(folder, tmp_path / die_at.replace(":", "-"))
        code, _ = await kill_erasure(place, die_at=die_at)
        assert code == -signal.SIGKILL, die_at
        assert await check_killed(place) == expected[die_at], die_at
        await check_retried(place)
        scan_files(place.folder, alice_secrets)


async def test_an_erasure_killed_from_outside_at_any_moment_on_sqlite_is_safe_and_finished(
    prepared: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    folder, alice_secrets = prepared
    whole = copied(folder, tmp_path / "whole")
    code, took = await kill_erasure(whole)  # an erasure let finish: how long one takes
    assert code == 0
    assert await check_killed(whole) == "key destroyed, 12 of 12 sessions told"
    states = []
    for n, share in enumerate((0.0, 0.15, 0.3, 0.5, 0.75, 0.9)):
        place = copied(folder, tmp_path / f"delay-{n}")
        await kill_erasure(place, delay=share * took)
        states.append(await check_killed(place))
        await check_retried(place)
        scan_files(place.folder, alice_secrets)
    print(f"an erasure took {took:.3f}s; killed from outside: {states}")


# -- KurrentDB double ------------------------------------------------------------------------


@asynccontextmanager
async def kurrentdb_place(folder: Path) -> AsyncIterator[Place]:
    """A fresh double holding the populated sessions, and the key store in ``folder``
    (which exists)."""
    with KurrentDBDouble.in_thread() as double:
        place = Place(double.uri, folder / "keys.db", folder)
        async with place.open() as journal:
            await populate(journal)
        yield place


async def test_an_erasure_killed_on_the_kurrentdb_double_is_safe_and_a_retry_finishes_it(
    tmp_path: Path,
) -> None:
    runs = [  # (die_at, delay, the state it leaves when deterministic)
        ("before-destroy", None, "key kept, nothing recorded"),
        ("after-destroy", None, "key destroyed, 0 of 12 sessions told"),
        ("after-erased:3", None, "key destroyed, 3 of 12 sessions told"),
        ("", 0.03, None),
        ("", 0.08, None),
    ]
    states = []
    for n, (die_at, delay, expected) in enumerate(runs):
        folder = tmp_path / f"run-{n}"
        folder.mkdir()
        async with kurrentdb_place(folder) as place:
            alice_secrets = secrets(place.keys, "alice")
            await kill_erasure(place, die_at=die_at, delay=delay)
            state = await check_killed(place)
            assert expected in (None, state), (die_at, state)
            states.append(state)
            await check_retried(place)
            scan_files(place.folder, alice_secrets)
    print(f"killed on the KurrentDB double: {states}")
