"""The four integrity states, named the same by ``verify``, ``sessions``, ``view`` and the viewer.

One SQLite store holds four sessions, one per state as a reader with the demo's key sees
them: ``signed`` (verified by the trusted key), ``foreign`` (signed by a key the reader does
not hold: untrusted), ``plain`` (written by a journal without a key: unsigned) and
``edited`` (signed, then an event changed in the file: FAILED).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.cli._common import trusted_keys
from agentjournal.ledger import SigningKey
from agentjournal.store import open_store
from agentjournal.ui.page import session_page
from cli_run import run

ITEMS: list[Any] = [
    {"role": "user", "content": "refund order 42"},
    {"role": "assistant", "content": "done"},
]


@dataclass(frozen=True)
class Store:
    uri: str
    path: Path
    key: Path
    foreign: Path


async def _write(uri: str, session_id: str, key: SigningKey | None) -> None:
    async with Journal.open(uri, signing_key=key) as journal:
        session = journal.session(session_id)
        await session.add_items(ITEMS)
        await session.checkpoint()


def _edit(path: Path, session_id: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE events SET data = CAST(replace(CAST(data AS TEXT), 'order 42', 'order 24') "
            "AS BLOB) WHERE stream_id = (SELECT id FROM streams WHERE name = ?) AND revision = 1",
            (f"AgentSession-{session_id}",),
        )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    folder = tmp_path_factory.mktemp("states")
    key, foreign = folder / "key.pem", folder / "foreign.pem"
    for path in (key, foreign):
        assert run("keygen", "-o", str(path)).returncode == 0
    path = folder / "journal.db"
    uri = f"sqlite:///{path}"
    ours, theirs = SigningKey.from_file(str(key)), SigningKey.from_file(str(foreign))
    asyncio.run(_write(uri, "signed", ours))
    asyncio.run(_write(uri, "foreign", theirs))
    asyncio.run(_write(uri, "plain", None))
    asyncio.run(_write(uri, "edited", ours))
    _edit(path, "edited")
    return Store(uri, path, key, foreign)


def _verify(store: Store, session_id: str, *options: str) -> tuple[int, str]:
    done = run("verify", session_id, "--uri", store.uri, *options)
    assert done.stderr == ""
    return done.returncode, done.stdout.splitlines()[-1]


def test_verify_names_each_state_and_fails_all_but_verified_unless_allowed(store: Store) -> None:
    trust = ("--pubkey", f"{store.key}.pub")
    key_id = SigningKey.from_file(str(store.key)).key_id
    foreign_id = SigningKey.from_file(str(store.foreign)).key_id
    assert _verify(store, "signed", *trust) == (
        0,
        f"VERIFIED: checkpoints signed by {key_id}, a trusted key",
    )
    code, last = _verify(store, "foreign", *trust)
    assert (code, last.split(";")[0]) == (2, f"SIGNED BY AN UNTRUSTED KEY: {foreign_id}")
    code, last = _verify(store, "plain", *trust)
    assert (code, last.split(":")[0]) == (2, "UNSIGNED")
    code, last = _verify(store, "edited", *trust)
    assert code == 2
    assert last.startswith("FAILED: AgentSession-edited@1: ")
    # --allow-uncovered accepts a record no trusted key signed, and still names it so.
    allowed = ("--allow-uncovered", *trust)
    assert _verify(store, "foreign", *allowed)[0] == 0
    assert _verify(store, "plain", *allowed) == (0, _verify(store, "plain", *trust)[1])
    assert _verify(store, "edited", *allowed)[0] == 2


def test_sessions_names_each_state_and_says_when_it_checked(store: Store) -> None:
    listed = run("sessions", "--uri", store.uri, "--json", "--pubkey", f"{store.key}.pub")
    assert listed.returncode == 0, listed.stderr
    rows = {row["session_id"]: row["integrity"] for row in json.loads(listed.stdout)}
    assert {name: row["state"] for name, row in rows.items()} == {
        "signed": "verified",
        "foreign": "untrusted",
        "plain": "unsigned",
        "edited": "failed",
    }
    assert rows["edited"]["problem"].startswith("AgentSession-edited@1: the event's hash")
    assert rows["edited"]["text"] == f"FAILED: {rows['edited']['problem']}"
    assert all(row["checked_at"] for row in rows.values())
    table = run("sessions", "--uri", store.uri, "--pubkey", f"{store.key}.pub")
    header, *lines = table.stdout.splitlines()
    assert header.split()[-1] == "integrity"
    words = {line.split()[0]: line.rsplit("  ", 1)[-1].strip() for line in lines[:4]}
    assert words == {
        "signed": "verified",
        "foreign": "untrusted key",
        "plain": "unsigned",
        "edited": "FAILED",
    }
    notes = lines[4:]
    assert notes[0].startswith("integrity: every chain link, the newest checkpoint and nothing")
    assert sorted(note.split(":")[0].strip() for note in notes[1:]) == ["edited", "foreign"]


@pytest.mark.parametrize(
    ("session_id", "state", "words"),
    [("signed", "verified", "VERIFIED"), ("foreign", "untrusted", "SIGNED BY AN UNTRUSTED KEY")],
)
def test_view_writes_the_state_into_the_exported_file(
    store: Store, tmp_path: Path, session_id: str, state: str, words: str
) -> None:
    out = tmp_path / f"{session_id}.html"
    trust = ("--pubkey", f"{store.key}.pub")
    done = run("view", session_id, "-o", str(out), "--uri", store.uri, *trust)
    assert done.returncode == 0, done.stderr
    assert f"; {words}: " in done.stderr
    assert f'"state": "{state}"' in out.read_text()


def test_show_ends_with_the_state_verify_names(store: Store) -> None:
    trust = ("--pubkey", f"{store.key}.pub")
    for session_id in ("signed", "foreign", "plain", "edited"):
        _, verified = _verify(store, session_id, *trust)
        shown = run("show", session_id, "--uri", store.uri, *trust)
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.splitlines()[-1] == f"integrity: {verified}"
        data = json.loads(run("show", session_id, "--uri", store.uri, "--json", *trust).stdout)
        assert data["integrity"]["text"] == verified
    # Without the key, the same signed session is signed by a key not trusted.
    shown = run("show", "signed", "--uri", store.uri)
    assert shown.stdout.splitlines()[-1].startswith("integrity: SIGNED BY AN UNTRUSTED KEY: ")


def test_an_edited_read_model_fails_verify_show_and_the_page_alike(
    store: Store, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.db"
    shutil.copy(store.path, copy)
    with sqlite3.connect(copy) as db:
        db.execute(
            """UPDATE items SET item = '{"role": "user", "content": "transfer all funds"}'"""
        )
    uri = f"sqlite:///{copy}"
    trust = ("--pubkey", f"{store.key}.pub")
    verified = run("verify", "signed", "--uri", uri, *trust).stdout.splitlines()[-1]
    assert verified.startswith("FAILED: AgentSession-signed: ")
    assert verified.endswith("(read model)")
    shown = run("show", "signed", "--uri", uri, *trust).stdout.splitlines()[-1]
    assert shown == f"integrity: {verified}"

    async def page() -> dict[str, Any]:
        opened = await open_store(uri, create=False)
        try:
            return await session_page(opened, "signed", trusted_keys([f"{store.key}.pub"]))
        finally:
            await opened.close()

    assert asyncio.run(page())["integrity"]["text"] == verified


def test_a_tail_written_after_the_last_checkpoint_fails_the_list_as_it_fails_verify(
    store: Store, tmp_path: Path
) -> None:
    """Signed, listed (the fold saved), then one more item by a writer without the key: no
    checkpoint covers it, and the list says so as ``verify`` does, without a fresh fold."""
    copy = tmp_path / "tail.db"
    shutil.copy(store.path, copy)
    uri = f"sqlite:///{copy}"
    trust = ("--pubkey", f"{store.key}.pub")

    def listed() -> dict[str, Any]:
        done = run("sessions", "--uri", uri, "--json", *trust)
        assert done.returncode == 0, done.stderr
        rows = {row["session_id"]: row["integrity"] for row in json.loads(done.stdout)}
        signed: dict[str, Any] = rows["signed"]
        return signed

    assert listed()["state"] == "verified"

    async def more() -> None:
        async with Journal.open(uri) as journal:
            await journal.session("signed").add_items([{"role": "user", "content": "one more"}])

    asyncio.run(more())
    row = listed()
    assert row["state"] == "failed"
    assert row["problem"] == (
        "AgentSession-signed@3: events after the last checkpoint (not covered by a signature)"
    )
    done = run("verify", "signed", "--uri", uri, *trust)
    assert done.returncode == 2
    assert "AgentSession-signed@3: events after the last checkpoint" in done.stdout
    # Accepted as a warning, the tail is not vouched for: the last line says so.
    key_id = SigningKey.from_file(str(store.key)).key_id
    accepted = run("verify", "signed", "--uri", uri, *trust, "--allow-uncovered")
    assert accepted.returncode == 0, accepted.stdout
    assert (
        "  warning: AgentSession-signed@3: events after the last checkpoint (not covered by a "
        "signature)"
    ) in accepted.stdout.splitlines()
    assert accepted.stdout.splitlines()[-1] == (
        f"VERIFIED UP TO THE NEWEST CHECKPOINT: checkpoints signed by {key_id}, a trusted key; "
        "1 event after it is signed by no trusted key"
    )
    bundle = tmp_path / "tail.json"
    exported = run("bundle", "export", "signed", "--uri", uri, "--no-checkpoint", "-o", str(bundle))
    assert exported.returncode == 0, exported.stderr
    checked = run("bundle", "verify", str(bundle), *trust, "--allow-uncovered")
    assert checked.returncode == 0, checked.stdout
    assert checked.stdout.splitlines()[-1] == accepted.stdout.splitlines()[-1]

    # A new checkpoint by the trusted key covers it again.
    async def sign() -> None:
        async with Journal.open(uri, signing_key=SigningKey.from_file(str(store.key))) as j:
            await j.session("signed").checkpoint()

    asyncio.run(sign())
    assert listed()["state"] == "verified"


def test_a_tail_signed_only_by_an_untrusted_key_fails_the_list_as_it_fails_verify(
    store: Store, tmp_path: Path
) -> None:
    """Signed by the trusted key, then one more item and a checkpoint by a key the reader
    does not trust: that checkpoint covers nothing for this reader."""
    copy = tmp_path / "after.db"
    shutil.copy(store.path, copy)
    uri = f"sqlite:///{copy}"
    trust = ("--pubkey", f"{store.key}.pub")

    async def more() -> None:
        theirs = SigningKey.from_file(str(store.foreign))
        async with Journal.open(uri, signing_key=theirs) as journal:
            session = journal.session("signed")
            await session.add_items([{"role": "user", "content": "one more"}])
            await session.checkpoint()

    asyncio.run(more())
    done = run("sessions", "--uri", uri, "--json", *trust)
    rows = {row["session_id"]: row["integrity"] for row in json.loads(done.stdout)}
    assert rows["signed"]["state"] == "failed"
    assert rows["signed"]["problem"].startswith("AgentSession-signed@3: events after the last")
    verified = run("verify", "signed", "--uri", uri, *trust)
    assert verified.returncode == 2
    assert "AgentSession-signed@3: events after the last checkpoint" in verified.stdout
    # Whoever trusts both keys sees it verified by both.
    both = run("sessions", "--uri", uri, "--json", *trust, "--pubkey", f"{store.foreign}.pub")
    rows = {row["session_id"]: row["integrity"] for row in json.loads(both.stdout)}
    assert rows["signed"]["state"] == "verified"


def test_the_uncovered_count_is_every_event_after_what_a_trusted_key_signed_on_any_path(
    store: Store, tmp_path: Path
) -> None:
    """A branch and more items written without a key after the trusted checkpoint, then
    signed by a key the reader does not trust: each stream's tail and the ledger's own are
    counted, the same in one process and two, and the line says no trusted key signed them."""
    from agentjournal.audit.export import export_bundle
    from agentjournal.audit.verify import parse_bundle, verify_bundle

    copy = tmp_path / "branched.db"
    shutil.copy(store.path, copy)
    uri = f"sqlite:///{copy}"

    async def more() -> dict[str, Any]:
        async with Journal.open(uri) as journal:
            session = journal.session("signed")
            await session.fork(1, name="retry")
            await session.add_items([{"role": "user", "content": "one more"}])
        theirs = SigningKey.from_file(str(store.foreign))
        async with Journal.open(uri, signing_key=theirs) as journal:
            await journal.session("signed").checkpoint()
            bundle: dict[str, Any] = await export_bundle(journal.store, "signed")
        return bundle

    exported = asyncio.run(more())
    parsed = parse_bundle(json.dumps(exported).encode())
    ours = SigningKey.from_file(str(store.key))
    trusted = {ours.key_id: ours.public_key}
    one = verify_bundle(parsed, trusted, allow_uncovered=True, workers=1)
    two = verify_bundle(parsed, trusted, allow_uncovered=True, workers=2)
    # Counted apart: each warning's stream, from its revision on.
    lengths = {stream["name"]: len(stream["events"]) for stream in exported["streams"]}
    warned = [
        line.split()[1].rstrip(":").rsplit("@", 1)
        for line in one.lines
        if line.startswith("  warning: ") and "events after the last checkpoint" in line
    ]
    assert len(warned) >= 3, one.lines  # the session, the branch's stream, the ledger
    expected = sum(lengths[stream] - int(revision) for stream, revision in warned)
    assert one.integrity.uncovered == two.integrity.uncovered == expected
    assert (
        one.text().splitlines()[-1]
        == two.text().splitlines()[-1]
        == (
            f"VERIFIED UP TO THE NEWEST CHECKPOINT: checkpoints signed by {ours.key_id}, a trusted "
            f"key; {expected} events after it are signed by no trusted key"
        )
    )
