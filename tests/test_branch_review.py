"""What an outside review of branches found (issue 19), each pinned by a test that failed
before its fix: a fork racing a delete of its line, a clear racing a fork, a reset of a
deleted line's authority, `fork --from` with a signing key, `replay --branch` of a deleted
branch."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, JournalSession
from agentjournal.audit.verify import verify_records
from agentjournal.errors import BranchDeleted
from agentjournal.ledger import SigningKey
from agentjournal.store.contract import AppendRequest
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.streams import authority_stream
from agentjournal.walk import read_tree
from cli_run import run

SID = "review"


def _user(text: str) -> Any:
    return {"role": "user", "content": text}


def _assistant(text: str) -> Any:
    return {"role": "assistant", "content": text}


class Before:
    """A real store on its own connection that, before its first ``append_many`` holding
    an event of type ``kind``, lets ``first`` run (another object's write, through another
    connection): the interleaving a second process could make."""

    def __init__(
        self, inner: SQLiteEventStore, kind: str, first: Callable[[], Awaitable[None]]
    ) -> None:
        self._inner, self._kind, self._first, self.fired = inner, kind, first, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append_many(self, requests: Sequence[AppendRequest]) -> Any:
        if not self.fired and any(e.type == self._kind for r in requests for e in r.events):
            self.fired = True
            await self._first()
        return await self._inner.append_many(requests)


async def test_a_fork_racing_a_delete_of_its_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    base = SQLiteEventStore.connect(path)
    main = JournalSession(base, SID)
    await main.add_items([_user("q1"), _assistant("a1"), _user("q2"), _assistant("a2")])
    await main.fork(at=2, name="alt")
    await JournalSession(base, SID, branch="alt").add_items([_user("alt q")])
    other = JournalSession(SQLiteEventStore.connect(path), SID)

    async def delete() -> None:
        await other.delete_branch("alt")

    racing = Before(SQLiteEventStore.connect(path), "agentjournal.BranchForked", delete)
    mine = JournalSession(racing, SID, branch="alt")
    await mine.get_items()
    with pytest.raises(BranchDeleted):
        await mine.fork(name="child")
    assert racing.fired
    assert [b.name for b in await main.branches()] == ["alt"]  # no child of a deleted line


async def test_a_clear_racing_a_fork_ends_the_new_branch_too(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    base = SQLiteEventStore.connect(path)
    main = JournalSession(base, SID)
    await main.add_items([_user("q1"), _assistant("a1"), _user("q2"), _assistant("a2")])
    await main.fork(at=2, name="alt")
    other_store = SQLiteEventStore.connect(path)

    async def fork() -> None:
        await JournalSession(other_store, SID).fork(at=2, name="late")
        await JournalSession(other_store, SID, branch="late").add_items([_user("late q")])

    racing = Before(SQLiteEventStore.connect(path), "agentjournal.SessionCleared", fork)
    await JournalSession(racing, SID).clear_session()
    assert racing.fired
    fresh = JournalSession(SQLiteEventStore.connect(path), SID)
    assert [b["branch_id"] for b in await fresh.list_branches()] == []  # as the SDK's clear
    assert {(b.name, b.deleted) for b in await fresh.branches()} == {
        ("alt", "cleared"),
        ("late", "cleared"),
    }


async def test_a_deleted_line_s_authority_cannot_be_reset(tmp_path: Path) -> None:
    policy = Path(__file__).parents[1] / "samples" / "policy.yml"
    async with Journal.open(f"sqlite:///{tmp_path / 'c.db'}") as journal:
        main = journal.session(SID, policy=str(policy))
        await main.add_items([_user("q1"), _user("q2")])
        await main.fork(at=1, name="alt")
        stale = journal.session(SID, branch="alt", policy=str(policy))
        await stale.get_items()
        await main.delete_branch("alt")
        with pytest.raises(BranchDeleted):
            await stale.reset_authority("triage", reason="after the delete")
        assert await journal.store.head(f"{authority_stream(SID)}@alt") is None


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
    assert verified.stdout.splitlines()[-1] == "OK"


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


@pytest.mark.parametrize("end", ["delete_branch", "clear_session"])
async def test_a_signing_session_signs_the_end_of_a_line_at_once(tmp_path: Path, end: str) -> None:
    """``delete_branch`` and ``clear_session`` end branches with ``BranchDeleted`` on lines
    nothing will write again: a signing session covers them in the same call."""
    key = SigningKey.generate()
    async with Journal.open(f"sqlite:///{tmp_path / 'f.db'}", signing_key=key) as journal:
        main = journal.session(SID)
        await main.add_items([_user("q1"), _assistant("a1")])
        await main.fork(name="alt")
        await journal.session(SID, branch="alt").add_items([_user("alt q")])
        if end == "delete_branch":
            await main.delete_branch("alt")
        else:
            await main.clear_session()
        report = verify_records(await read_tree(journal.store, SID), {key.key_id: key.public_key})
        assert report.ok, report.text()
