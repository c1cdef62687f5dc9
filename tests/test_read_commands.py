"""``agentjournal sessions``, ``show`` and ``replay`` end to end, on SQLite and KurrentDB.

The store holds sessions written by real ``Runner`` runs (``ScriptedModel``, offline): the
demo under a tight policy and tight guardrail rules (nested handoffs, a guardrail BLOCK, an
authority refusal, signed checkpoints), a session whose history was popped and cleared
between runs with handoffs, and one whose subagent failed. Every command runs through the
command line's entry point (``cli_run.run``: the same code as the console script); one test
runs them as real processes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.engine.codec import exact_json
from agentjournal.store import open_store
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from agentjournal.walk import read_tree
from cli_run import on_a_terminal, run
from drive import drive
from handoff_scenarios import failing, nested, single, top_level
from stored_form import store_as_written

POLICY = Path(__file__).parent.parent / "samples" / "policy.yml"

# The demo's refunds agent asks for 2500 then 1250 cents: the policy caps refunds at 2000
# (the authority refuses 2500), the guardrail at 1000 (it blocks 1250).
RULES = """
rules:
  - kind: ceiling
    tool: issue_refund
    argument: amount_cents
    max: 1000
  - kind: redact_pii
"""


@dataclass
class Written:
    """A store and what was written to it."""

    uri: str
    key: Path
    folder: Path
    double: Any = None  # the KurrentDB double serving ``uri``, if it is one
    # (items get_items returned then, the store's last position then) after each step of
    # the edited session: the history before the next item written.
    snapshots: list[tuple[list[Any], int]] = field(default_factory=list)


async def _last_position(uri: str) -> int:
    store = await open_store(uri, create=False)
    try:
        return (await store.read_all(from_position=None))[-1].position
    finally:
        await store.close()


async def _write_sessions(written: Written) -> None:
    """The edited session (handoffs, a pop, a clear) and the failed one."""
    async with Journal.open(written.uri, signing_key=str(written.key)) as journal:
        session = journal.session("edits-1", app_name="shop", user_id="u-2")

        async def snapshot() -> None:
            written.snapshots.append((await session.get_items(), await _last_position(written.uri)))

        await drive(nested(), "refund order 42", session=session, hooks=session)
        await snapshot()
        assert await session.pop_item() is not None
        await snapshot()
        await drive(single(), "and order 43?", session=session, hooks=session)
        await snapshot()
        await session.clear_session()
        await snapshot()
        await drive(top_level(), "hello again", session=session, hooks=session)

        failed = journal.session("failed-1", app_name="shop", user_id="u-3")
        with pytest.raises(RuntimeError, match="model backend down"):
            async with failed.run_scope():
                await drive(failing(), "help", session=failed, hooks=failed)


def _write(written: Written) -> None:
    rules = written.folder / "rules.yml"
    rules.write_text(RULES)
    policy = written.folder / "policy.yml"
    policy.write_text(POLICY.read_text().replace("limit: 3000}", "limit: 2000}"))
    demo = run(
        "demo",
        "--uri",
        written.uri,
        "--session",
        "demo-1",
        "--key",
        str(written.key),
        "--policy",
        str(policy),
        "--rules",
        str(rules),
    )
    assert demo.returncode == 0, demo.stderr
    for command in ("sessions", "show demo-1", "replay demo-1", "usage demo-1", "tail demo-1"):
        assert f"  agentjournal {command}" in demo.stdout  # the demo points at the readers
    assert "  agentjournal trace export demo-1" in demo.stdout
    asyncio.run(_write_sessions(written))


@pytest.fixture(scope="module", params=["sqlite", "kurrentdb"])
def written(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Written]:
    """A store with the three sessions, on each backend (written once per module)."""
    folder = tmp_path_factory.mktemp(f"read-{request.param}")
    key = folder / "key.pem"
    assert run("keygen", "-o", str(key)).returncode == 0
    if request.param == "sqlite":
        out = Written(f"sqlite:///{folder / 'journal.db'}", key, folder)
        _write(out)
        yield out
        return
    with KurrentDBDouble.in_thread() as double:
        out = Written(double.uri, key, folder, double)
        _write(out)
        yield out


def _rows(written: Written, *args: str) -> dict[str, dict[str, Any]]:
    listed = run("sessions", "--uri", written.uri, "--json", *args)
    assert listed.returncode == 0, listed.stderr
    return {row["session_id"]: row for row in json.loads(listed.stdout)}


async def _items(uri: str, session_id: str, limit: int | None = None) -> list[Any]:
    store = await open_store(uri, create=False)
    try:
        got: list[Any] = await Journal(store, uri).session(session_id).get_items(limit)
        return got
    finally:
        await store.close()


async def _count_events(uri: str) -> int:
    store = await open_store(uri, create=False)
    try:
        return sum(1 for e in await store.read_all() if not e.stream.startswith("AgentProjection-"))
    finally:
        await store.close()


async def _types(uri: str, session_id: str) -> list[str]:
    store = await open_store(uri, create=False)
    try:
        tree = await read_tree(store, session_id)
        return [record.type for record in tree.records()]
    finally:
        await store.close()


# -- sessions ---------------------------------------------------------------------------


@pytest.mark.slow
def test_sessions_one_row_per_session_with_what_happened(written: Written) -> None:
    rows = _rows(written, "--pubkey", f"{written.key}.pub")
    assert list(rows) == ["failed-1", "edits-1", "demo-1"]  # newest activity first
    demo, edits, failed = rows["demo-1"], rows["edits-1"], rows["failed-1"]
    assert (demo["app"], demo["user"], demo["agent"]) == (
        "agentjournal-demo",
        "customer-7",
        "triage",
    )
    assert demo["subagents"] == {"open": 0, "closed": 2, "failed": 0}
    # The refund the guardrail blocks is asked about, approved and blocked again when the
    # resumed run reaches it: the guardrail judges the call that runs.
    assert (demo["guardrail_blocks"], demo["refusals"]) == (2, 1)
    # Eight model responses of 150 tokens each; before ModelResponded existed the two
    # responses that only handed off stored no usage.
    modelled = "agentjournal.ModelResponded" in asyncio.run(_types(written.uri, "demo-1"))
    assert demo["tokens"] == (1200 if modelled else 900)
    assert demo["integrity"]["state"] == "verified"
    assert demo["first_activity"] <= demo["last_activity"]
    # The items column is what get_items() returns: pops and clears count.
    for session_id, row in rows.items():
        assert row["items"] == len(asyncio.run(_items(written.uri, session_id))), session_id
    assert (edits["app"], edits["user"], edits["items"]) == ("shop", "u-2", 2)
    assert edits["agent"] == failed["agent"] == "triage"  # the first agent that acted
    assert edits["subagents"] == {"open": 0, "closed": 3, "failed": 0}
    assert failed["subagents"] == {"open": 0, "closed": 0, "failed": 1}
    assert edits["integrity"]["state"] == failed["integrity"]["state"] == "verified"


def test_sessions_table_filters_and_keys(written: Written) -> None:
    table = run("sessions", "--uri", written.uri)
    assert table.returncode == 0, table.stderr
    header, *lines = table.stdout.splitlines()
    assert header.split()[:5] == ["session", "app", "user", "agent", "items"]
    rows, notes = lines[:3], lines[3:]
    assert [line.split()[0] for line in rows] == ["failed-1", "edits-1", "demo-1"]
    # Without the public key the signature cannot be checked: it says whose key it needs.
    assert all(line.endswith("untrusted key") for line in rows)
    assert notes[0].startswith("integrity: every chain link, the newest checkpoint and nothing")
    assert [note.split(":")[0].strip() for note in notes[1:]] == ["failed-1", "edits-1", "demo-1"]
    assert all("SIGNED BY AN UNTRUSTED KEY: ed25519:" in note for note in notes[1:])
    assert list(_rows(written, "--app", "shop")) == ["failed-1", "edits-1"]
    assert list(_rows(written, "--user", "customer-7")) == ["demo-1"]
    assert list(_rows(written, "--since", "1h")) == ["failed-1", "edits-1", "demo-1"]
    assert list(_rows(written, "--since", "2999-01-01")) == []
    assert list(_rows(written, "--since", "2000-01-01T00:00:00+00:00")) == [
        "failed-1",
        "edits-1",
        "demo-1",
    ]
    # The signing key configured for the journal is trusted like --pubkey.
    own = run(
        "sessions",
        "--uri",
        written.uri,
        "--json",
        env={"AGENTJOURNAL_SIGNING_KEY_FILE": str(written.key)},
    )
    assert {row["integrity"]["state"] for row in json.loads(own.stdout)} == {"verified"}


def _unchecked(rows: list[Any]) -> list[Any]:
    return [dataclasses.replace(row, checked_at=row.last_activity) for row in rows]


def test_sessions_folds_only_what_is_new(written: Written) -> None:
    from agentjournal.read import catalog

    async def go() -> None:
        store = await open_store(written.uri, create=False)
        try:
            first = await catalog.refresh(store)
            again = await catalog.refresh(store)
            assert again.folded == 0
            assert not again.saved
            assert again.rows == first.rows
            async with Journal.open(written.uri) as journal:
                session = journal.session(f"late-{len(first.rows)}", app_name="late")
                await drive(single(), "one more", session=session, hooks=session)
            later = await catalog.refresh(store)
            assert 0 < later.folded < 30
            assert later.saved
            assert later.rows[0].session_id == session.session_id
            # The catalog after incremental folds equals one folded from the start.
            fresh = catalog.Catalog()
            for event in await store.read_all():
                fresh.fold(event)
            trusted = fresh.trusted({})
            # Equal but for when each was folded (a fold from the start checks now).
            assert _unchecked(fresh.rows(trusted)) == _unchecked(later.rows)
        finally:
            await store.close()

    asyncio.run(go())


def test_usage_errors_are_one_line_exit_1(written: Written, tmp_path: Path) -> None:
    for args in (
        ("sessions", "--uri", written.uri, "--since", "yesterday"),
        ("sessions", "--uri", written.uri, "--since", "5y"),
        ("sessions", "--uri", written.uri, "--pubkey", "not-a-key"),
        ("sessions", "--uri", f"sqlite:///{tmp_path / 'none.db'}"),
        ("show", "nobody", "--uri", written.uri),
        ("show", "bad id!", "--uri", written.uri),
        ("show", "demo-1", "--uri", written.uri, "--stream", "AgentSession-other"),
        ("show", "demo-1", "--uri", f"sqlite:///{tmp_path / 'none.db'}"),
        ("replay", "nobody", "--uri", written.uri),
        ("replay", "demo-1", "--uri", written.uri, "--at", "999"),
    ):
        result = run(*args)
        assert result.returncode == 1, args
        assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
        assert result.stdout == "", args
    assert not (tmp_path / "none.db").exists()  # reading never creates
    for args in (("replay", "demo-1", "--limit", "-1"), ("replay", "demo-1", "--at", "x")):
        assert run(*args, "--uri", written.uri).returncode == 1
    for option in ("--limit", "--at"):  # past any count SQLite holds: refused, not a crash
        huge = run("replay", "demo-1", option, str(2**63 - 1), "--uri", written.uri)
        assert huge.returncode == 1
        assert "is larger than any store counts (2**62 at most)" in huge.stderr
    assert run("replay", "demo-1", "--limit", str(2**62), "--uri", written.uri).returncode == 0


# -- show -------------------------------------------------------------------------------


def test_show_prints_the_tree_with_everything_where_it_happened(written: Written) -> None:
    shown = run("show", "demo-1", "--uri", written.uri)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "AgentSession-demo-1"
    assert lines[-2].startswith(
        "@N: the event's revision on its stream · #N: the item's message index"
    )
    assert lines[-1].startswith("integrity: SIGNED BY AN UNTRUSTED KEY: ")  # no --pubkey
    sub = "AgentSubsession-demo-1-sub-refunds-call_to_refunds"
    assert f"        {sub}" in lines  # nested two levels deep
    text = shown.stdout
    granted = "granted [orders.note,orders.read,orders.refund] refund≤5000"
    assert f"SubagentStarted              #1 opens billing, {granted}" in text
    assert "GuardrailDecided             TOOL_CALL issue_refund: BLOCK CEILING_EXCEEDED" in text
    assert "GuardrailDecided             TOOL_CALL add_note: MODIFY PII_REDACTED" in text
    assert "AuthorityRefused             tool issue_refund refused to refunds at invocation" in text
    assert "AuthorityGranted             triage holds [orders.*] refund≤5000 (run)" in text
    assert "sub-billing-call_to_billing success: " in text
    assert "AgentAuthority-demo-1" in lines
    assert "AgentLedger-demo-1" in lines
    assert "Checkpoint                   signed by ed25519:" in text
    assert "…" in text  # long text is cut
    assert "#0 Why was I charged twice for order 42?" in text
    # The demo prints the same view of its session tree (one view, no copy).
    only = run("show", "demo-1", "--uri", written.uri, "--stream", sub)
    assert only.stdout.splitlines()[0] == sub
    assert "AgentSession-demo-1" not in only.stdout
    assert only.stdout.splitlines()[1].startswith("  @0  SubagentStarted")


def test_show_json_is_every_record(written: Written) -> None:
    shown = run("show", "edits-1", "--uri", written.uri, "--json")
    data = json.loads(shown.stdout)
    assert data["session_id"] == "edits-1"
    types = [r["type"] for records in data["streams"].values() for r in records]
    assert types == asyncio.run(_types(written.uri, "edits-1"))
    assert {"agentjournal.ItemPopped", "agentjournal.SessionCleared"} <= set(types)
    first = data["streams"]["AgentSession-edits-1"][0]
    assert first["type"] == "SessionStarted"
    assert first["data"]["app_name"] == "shop"
    assert first["revision"] == 0
    assert first["metadata"]["aj.seq"] == "0"
    failed = run("show", "failed-1", "--uri", written.uri)
    assert "sub-billing-h1 error (RuntimeError: model backend down" in failed.stdout


# -- replay -----------------------------------------------------------------------------


@pytest.mark.slow
def test_replay_is_get_items_byte_for_byte_and_writes_nothing(written: Written) -> None:
    before = asyncio.run(_count_events(written.uri))
    for session_id in ("demo-1", "edits-1", "failed-1"):
        for limit in (None, 0, 1, 3, 100):
            args = ["replay", session_id, "--uri", written.uri]
            if limit is not None:
                args += ["--limit", str(limit)]
            replayed = run(*args)
            assert replayed.returncode == 0, replayed.stderr
            expected = asyncio.run(_items(written.uri, session_id, limit))
            assert replayed.stdout == "".join(exact_json(item) + "\n" for item in expected)
    assert asyncio.run(_count_events(written.uri)) == before  # reading wrote no event


@pytest.mark.slow
def test_replay_at_an_index_is_the_history_before_that_item(written: Written) -> None:
    async def first_item_after(position: int) -> tuple[int, int]:
        """The message index and position of the first item written after ``position``."""
        store = await open_store(written.uri, create=False)
        try:
            tree = await read_tree(store, "edits-1")
        finally:
            await store.close()
        return min(
            (int(r.metadata["aj.index"]), r.position)
            for r in tree.records()
            if "aj.index" in r.metadata and r.position is not None and r.position > position
        )

    snapshots = written.snapshots
    assert len(snapshots) == 4  # after a run, a pop, a run, a clear
    assert snapshots[1][0] == snapshots[0][0][:-1]  # the pop shows
    assert snapshots[3][0] == []  # and the clear
    for _, position in snapshots:
        index, at = asyncio.run(first_item_after(position))
        # What get_items returned last before that item was written (a pop or a clear
        # in between included).
        items = [items for items, taken in snapshots if taken < at][-1]
        replayed = run("replay", "edits-1", "--uri", written.uri, "--at", str(index))
        assert replayed.returncode == 0, replayed.stderr
        assert replayed.stdout == "".join(exact_json(item) + "\n" for item in items), index
        limited = run("replay", "edits-1", "--uri", written.uri, "--at", str(index), "--limit", "2")
        assert limited.stdout == "".join(exact_json(item) + "\n" for item in items[-2:])
    at_zero = run("replay", "demo-1", "--uri", written.uri, "--at", "0")
    assert at_zero.returncode == 0
    assert at_zero.stdout == ""


# -- the ledger column ------------------------------------------------------------------


def _copy(written: Written, tmp_path: Path) -> Path:
    """A copy of the SQLite store without its saved catalog (a store never catalogued)."""
    source = Path(written.uri.removeprefix("sqlite:///"))
    target = tmp_path / "copy.db"
    shutil.copy(source, target)
    store_as_written(target)  # the tests' edits are of the data as written
    with sqlite3.connect(target) as db:
        db.execute(
            "DELETE FROM events WHERE stream_id IN "
            "(SELECT id FROM streams WHERE name LIKE 'AgentProjection-%')"
        )
        db.execute("DELETE FROM streams WHERE name LIKE 'AgentProjection-%'")
    return target


def _sqlite_only(written: Written) -> None:
    if not written.uri.startswith("sqlite:"):
        pytest.skip("edits the SQLite file underneath the store")


def test_an_edited_event_shows_a_broken_chain(written: Written, tmp_path: Path) -> None:
    _sqlite_only(written)
    target = _copy(written, tmp_path)
    with sqlite3.connect(target) as db:
        db.execute(
            "UPDATE events SET data = CAST(replace(CAST(data AS TEXT), 'order 42', 'order 24') "
            "AS BLOB) WHERE stream_id = "
            "(SELECT id FROM streams WHERE name = 'AgentSession-demo-1') AND revision = 1"
        )
    rows = _rows(
        Written(f"sqlite:///{target}", written.key, tmp_path), "--pubkey", f"{written.key}.pub"
    )
    assert rows["demo-1"]["integrity"]["state"] == "failed"
    assert rows["demo-1"]["integrity"]["problem"].startswith(
        "AgentSession-demo-1@1: the event's hash"
    )
    assert rows["edits-1"]["integrity"]["state"] == "verified"


def test_a_data_column_edited_to_text_reads_as_changed_content(
    written: Written, tmp_path: Path
) -> None:
    _sqlite_only(written)
    target = _copy(written, tmp_path)
    with sqlite3.connect(target) as db:  # replace() on a BLOB stores TEXT
        db.execute(
            "UPDATE events SET data = replace(data, 'order 42', 'order 24') WHERE stream_id = "
            "(SELECT id FROM streams WHERE name = 'AgentSession-demo-1') AND revision = 1"
        )
        assert db.execute("SELECT count(*) FROM events WHERE typeof(data) = 'text'").fetchone()
    edited = Written(f"sqlite:///{target}", written.key, tmp_path)
    rows = _rows(edited, "--pubkey", f"{written.key}.pub")
    assert rows["demo-1"]["integrity"]["state"] == "failed"
    assert rows["demo-1"]["integrity"]["problem"].startswith(
        "AgentSession-demo-1@1: the event's hash"
    )
    assert rows["edits-1"]["integrity"]["state"] == "verified"
    replayed = run("replay", "demo-1", "--uri", edited.uri)
    assert replayed.returncode == 0, replayed.stderr
    assert "order 24" in replayed.stdout
    shown = run("show", "demo-1", "--uri", edited.uri)
    assert shown.returncode == 0, shown.stderr
    checked = run("verify", "demo-1", "--uri", edited.uri, "--pubkey", f"{written.key}.pub")
    assert checked.returncode != 0
    assert "AgentSession-demo-1@1" in checked.stdout + checked.stderr


def test_sessions_fresh_does_not_trust_the_saved_catalog(written: Written, tmp_path: Path) -> None:
    _sqlite_only(written)
    target = _copy(written, tmp_path)
    copy = Written(f"sqlite:///{target}", written.key, tmp_path)
    pubkey = ("--pubkey", f"{written.key}.pub")
    assert _rows(copy, *pubkey)["demo-1"]["integrity"]["state"] == "verified"  # folded and saved
    with sqlite3.connect(target) as db:  # an event edited after it was folded
        db.execute(
            "UPDATE events SET data = CAST(replace(CAST(data AS TEXT), 'order 42', 'order 24') "
            "AS BLOB) WHERE stream_id = "
            "(SELECT id FROM streams WHERE name = 'AgentSession-demo-1') AND revision = 1"
        )
        saves = "SELECT count(*) FROM events"
        before = db.execute(saves).fetchone()
    assert (
        _rows(copy, *pubkey)["demo-1"]["integrity"]["state"] == "verified"
    )  # the saved fold, trusted
    fresh = _rows(copy, *pubkey, "--fresh")
    assert fresh["demo-1"]["integrity"]["state"] == "failed"
    assert fresh["edits-1"]["integrity"]["state"] == "verified"
    with sqlite3.connect(target) as db:
        assert db.execute(saves).fetchone() == before  # --fresh saves nothing


async def _append_checkpoint(uri: str, key: Path, change: str) -> None:
    """Sign a checkpoint of demo-1 that is wrong in one way, chained properly."""
    import dataclasses
    from datetime import UTC, datetime

    from agentjournal.engine.writer import append_chained
    from agentjournal.ledger import SigningKey
    from agentjournal.ledger.checkpoints import Checkpoint
    from agentjournal.ledger.keys import signed_event_id

    signer = SigningKey.from_file(key)
    store = await open_store(uri, create=False)
    try:
        ledger = "AgentLedger-demo-1"
        (last,) = await store.read(ledger, backwards=True, limit=1)
        head = await store.read("AgentSession-demo-1", backwards=True, limit=1)
        heads = {"AgentSession-demo-1": (head[0].revision, head[0].metadata["aj.hash"])}
        if change == "hash":
            heads["AgentSession-demo-1"] = (head[0].revision, "0" * 64)
        if change == "truncated":
            heads["AgentSession-demo-1"] = (head[0].revision + 5, "0" * 64)
        metadata = {"$schema_version": "2"}
        checkpoint = Checkpoint.sign(
            signer,
            "demo-1",
            heads,
            datetime.now(UTC),
            sequence=last.revision + 1,
            previous=last.metadata["aj.hash"],
            metadata=metadata,
        )
        if change == "signature":
            checkpoint = dataclasses.replace(checkpoint, signed_at="2000-01-01T00:00:00+00:00")
        event_id = signed_event_id(ledger, checkpoint.signature)
        await append_chained(
            store,
            ledger,
            "agentjournal.Checkpoint",
            checkpoint.encode(),
            event_id,
            metadata=metadata,
        )
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("change", "state", "problem"),
    [
        ("none", "verified", None),
        ("signature", "failed", ": the signature is invalid"),
        ("hash", "failed", ": AgentSession-demo-1@"),
        ("truncated", "failed", ": it names AgentSession-demo-1@"),
    ],
)
def test_a_bad_checkpoint_shows_failed(
    written: Written, tmp_path: Path, change: str, state: str, problem: str | None
) -> None:
    _sqlite_only(written)
    target = _copy(written, tmp_path)
    uri = f"sqlite:///{target}"
    copy = Written(uri, written.key, tmp_path)
    trusted = _rows(copy, "--pubkey", f"{written.key}.pub")["demo-1"]["integrity"]
    assert trusted["state"] == "verified"
    asyncio.run(_append_checkpoint(uri, written.key, change))
    # The catalog was saved before: only the new checkpoint is folded (and, for the
    # signature, checked now that its key is given).
    row = _rows(copy, "--pubkey", f"{written.key}.pub")["demo-1"]["integrity"]
    assert row["state"] == state, row
    assert (row["problem"] is None) if problem is None else problem in row["problem"], row
    untrusted = _rows(copy)["demo-1"]["integrity"]
    if change in ("hash", "truncated"):
        assert untrusted["problem"] == row["problem"]
    else:
        assert (untrusted["state"], untrusted["keys"]) == ("untrusted", [_key_id(written)])


def _key_id(written: Written) -> str:
    from agentjournal.ledger import SigningKey

    return SigningKey.from_file(written.key).key_id


# -- the saved catalog ------------------------------------------------------------------


def test_a_store_refusing_the_save_still_lists_with_one_warning(written: Written) -> None:
    """A reader without the right to write (KurrentDB's access denied) still gets its rows."""
    if written.double is None:
        pytest.skip("SQLite has no read-only user (and root writes a read-only file)")

    async def new_session() -> None:
        async with Journal.open(written.uri) as journal:
            session = journal.session("refused-save")
            await drive(single(), "hi", session=session, hooks=session)

    asyncio.run(new_session())  # something new to fold, so the catalog wants to save
    written.double.faults.access_denied("BatchAppend", times=10)
    try:
        listed = run("sessions", "--uri", written.uri)
    finally:
        written.double.faults.clear()
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[0] == "refused-save"
    (warning,) = listed.stderr.splitlines()
    assert warning.startswith("agentjournal: warning: the catalog could not be saved ("), warning
    assert _rows(written)["refused-save"]["items"] == 6  # the next call folds it again


def test_a_damaged_saved_catalog_is_rebuilt_with_one_warning(written: Written) -> None:
    from agentjournal.read import catalog, projections
    from agentjournal.store.contract import NewEvent, StreamState

    async def damage() -> None:
        store = await open_store(written.uri, create=False)
        try:
            await catalog.refresh(store)
            await store.append(
                "AgentProjection-catalog",
                [NewEvent(projections.SAVED, b"{}")],
                expected=StreamState.EXISTS,
            )
        finally:
            await store.close()

    asyncio.run(damage())
    listed = run("sessions", "--uri", written.uri, "--json")
    assert listed.returncode == 0, listed.stderr
    (warning,) = listed.stderr.splitlines()
    assert warning.startswith("agentjournal: warning: the saved catalog was damaged (")
    rebuilt = {row["session_id"]: row for row in json.loads(listed.stdout)}
    again = run("sessions", "--uri", written.uri, "--json")
    assert again.stderr == ""
    assert {row["session_id"]: row for row in json.loads(again.stdout)} == rebuilt
    assert {"demo-1", "edits-1", "failed-1"} <= set(rebuilt)


def test_a_twin_saving_first_is_fenced(written: Written) -> None:
    """Two readers of one store: the one that saves second reloads the other's save and
    folds only what came after it."""
    from agentjournal.read import catalog, projections
    from agentjournal.store.contract import EventStore

    async def new_session(name: str) -> None:
        async with Journal.open(written.uri) as journal:
            session = journal.session(name)
            await drive(single(), "hi", session=session, hooks=session)

    class TwinFirst:
        """The store, where a twin saves the catalog (and a session is written) just before
        our first save."""

        def __init__(self, store: EventStore) -> None:
            self.store = store
            self.twin_saved = False

        def __getattr__(self, name: str) -> Any:
            return getattr(self.store, name)

        async def append(self, stream: str, events: Any, *, expected: Any) -> Any:
            if stream == "AgentProjection-catalog" and not self.twin_saved:
                self.twin_saved = True
                assert (await catalog.refresh(self.store)).saved
                await new_session("twin-after")
            return await self.store.append(stream, events, expected=expected)

    async def go() -> None:
        store = await open_store(written.uri, create=False)
        try:
            # A save first, whichever tests ran on this store before this one; then a
            # session that the next refresh must fold and save.
            await catalog.refresh(store)
            await new_session("twin-before")
            before = await projections.load(store, catalog.NAME)
            assert before is not None
            wrapped = TwinFirst(store)
            listing = await catalog.refresh(wrapped)
            assert wrapped.twin_saved
            assert listing.saved
            # Ours saved on top of the twin's save, which it loaded: two saves, one each.
            saves = await store.read("AgentProjection-catalog", from_revision=before.revision + 1)
            assert [e.type for e in saves].count(projections.SAVED) == 2
            ids = [row.session_id for row in listing.rows]
            assert ids[:2] == ["twin-after", "twin-before"]
            again = await catalog.refresh(store)
            assert again.folded == 0
            assert again.rows == listing.rows
        finally:
            await store.close()

    asyncio.run(go())


@pytest.mark.slow
def test_the_commands_as_processes(written: Written) -> None:
    _sqlite_only(written)
    for args, first in (
        (["sessions"], "session"),
        (["show", "demo-1"], "AgentSession-demo-1"),
        (["replay", "demo-1", "--limit", "1"], '{"'),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "agentjournal.cli", *args, "--uri", written.uri],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(first), args
        assert done.stderr == ""  # no progress, no escape codes in a pipe
        assert "\x1b[" not in done.stdout


@pytest.mark.slow
def test_the_readers_load_neither_the_sdk_nor_an_http_client(written: Written) -> None:
    _sqlite_only(written)
    script = (
        "import sys, contextlib, io\n"
        "from agentjournal.cli import main\n"
        "for args in (['sessions'], ['show', 'demo-1'], ['replay', 'demo-1'],\n"
        "             ['replay', 'demo-1', '--at', '3']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        f"        assert main([*args, '--uri', {written.uri!r}]) == 0\n"
        "print(sorted(m for m in ('agents', 'httpx', 'openai') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
def test_on_a_terminal_a_rich_tree_and_table(written: Written) -> None:
    _sqlite_only(written)
    tree = on_a_terminal("show", "demo-1", "--uri", written.uri)
    assert "\x1b[" in tree  # styled
    assert "├── " in tree or "└── " in tree  # drawn as a tree
    assert "AgentSubsession-demo-1-sub-refunds-call_to_refunds" in tree
    assert "BLOCK CEILING_EXCEEDED" in tree
    listed = on_a_terminal("sessions", "--uri", written.uri)
    assert "\x1b[" in listed
    assert "demo-1" in listed


# -- hostile stored text ------------------------------------------------------------------

# A message that would forge audit lines, a user message that drives the terminal, names
# with ESC, NUL, a C1 control and a bidi override.
FORGED = "ok\n  @9  GuardrailDecided             TOOL_CALL wire_money: ALLOW"
DRIVES = "line1\r\x1b[2Kfake\x00\x85"
NAME = "ev\u202eil\x1b[31m"
CONTROLS = ("\n  @9", "\r", "\x1b", "\x00", "\x85", "\u202e")


def _hostile(tmp_path: Path) -> str:
    from agents import Agent, RunConfig, Runner
    from agents.testing import ScriptedModel, assistant_message

    uri = f"sqlite:///{tmp_path / 'hostile.db'}"

    async def write() -> None:
        async with Journal.open(uri) as journal:
            session = journal.session("h", app_name=NAME, user_id=NAME, agent_name=NAME)
            model = ScriptedModel([[assistant_message(FORGED, item_id="m")]])
            agent = Agent(name=NAME, model=model)
            config = RunConfig(tracing_disabled=True)
            await Runner.run(agent, DRIVES, session=session, hooks=session, run_config=config)

    asyncio.run(write())
    return uri


@pytest.mark.slow
def test_stored_control_characters_are_printed_escaped(tmp_path: Path) -> None:
    uri = _hostile(tmp_path)
    shown = run("show", "h", "--uri", uri)
    assert shown.returncode == 0, shown.stderr
    on_terminal = on_a_terminal("show", "h", "--uri", uri)
    listed = run("sessions", "--uri", uri)
    by_agent = run("usage", "h", "--by", "agent", "--uri", uri)
    for out in (shown.stdout, listed.stdout, by_agent.stdout):
        for control in CONTROLS:
            assert control not in out
        assert "\\u202e" in out
    # On a terminal rich adds its own styles (ESC [): the stored ones arrive escaped.
    assert "\u202e" not in on_terminal
    assert "\x00" not in on_terminal
    assert "ev\\u202eil\\x1b[31m" in on_terminal
    assert "\\r\\x1b[2Kfake" in on_terminal
    assert not any(
        line.lstrip().startswith("@9  GuardrailDecided") for line in shown.stdout.splitlines()
    )
    assert "ok\\n  @9  GuardrailDecided" in shown.stdout
    assert "line1\\r\\x1b[2Kfake\\x00\\x85" in shown.stdout
    assert "ev\\u202eil\\x1b[31m" in listed.stdout


def test_a_damaged_event_is_named_in_one_line(tmp_path: Path) -> None:
    from damaged import add_damaged_session

    uri = f"sqlite:///{tmp_path / 'damaged.db'}"
    where = asyncio.run(add_damaged_session(uri, "bad"))
    done = run("show", "bad", "--uri", uri)
    assert done.returncode == 1
    assert done.stderr == f"agentjournal: {where}: the data is not UTF-8 text (byte 0)\n"
