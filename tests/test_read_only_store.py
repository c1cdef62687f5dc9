"""A SQLite store this process cannot write (another user's, on a read-only mount) is read as it
was when opened: every read works, a read after someone else wrote it is refused, every write
is refused in one line, and nothing in the folder changes. Each case runs its reader as a
separate process that truly cannot write there: another user's folder (root giving up its
override of modes), a folder of mode 0555, or inside a read-only bind mount, whichever this
machine allows."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentjournal.store import StreamState
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.testing.store_conformance import make_events
from cli_run import run
from sqlite_v2 import V2_SCHEMA


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}


def _shared_folder() -> Path:
    """A new folder the reader can enter (pytest's own may not be, inside a bind mount)."""
    folder = Path(tempfile.mkdtemp(prefix="agentjournal-ro-"))
    folder.chmod(0o755)
    return folder


def _works(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, check=False).returncode == 0
    except OSError:
        return False


# Root writes any file, whatever its mode and owner, by these two capabilities: without
# them it is held to the modes, as any other user.
_WITHOUT_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


def _own(folder: Path, uid: int) -> None:
    for path in (folder, *folder.iterdir()):
        os.chown(path, uid, -1, follow_symlinks=False)


@dataclass
class Reader:
    """Runs commands that read ``folder`` and cannot write it, naming it ``sees``: as
    another user's folder (its files owned by nobody, the reader root without its
    override), a folder of mode 0555 (not root), or through a read-only bind mount."""

    how: str
    folder: Path
    sees: Path
    prefix: list[str]

    @contextlib.contextmanager
    def unwritable(self) -> Iterator[None]:
        """The folder as the reader meets it, for the time of the block."""
        if self.how == "another user's folder":
            _own(self.folder, NOBODY)
        elif self.how == "a folder of mode 0555":
            self.folder.chmod(0o555)
        try:
            yield
        finally:
            if self.how == "another user's folder":
                _own(self.folder, 0)
            elif self.how == "a folder of mode 0555":
                self.folder.chmod(0o755)

    def command(self, *argv: str) -> list[str]:
        return [*self.prefix, *argv]

    def run(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """``argv`` run in the folder as the reader sees it."""
        with self.unwritable():
            return subprocess.run(
                self.command(*argv),
                cwd=self.sees,
                capture_output=True,
                text=True,
                env=_clean_env(),
                check=False,
            )


NOBODY = 65534


@pytest.fixture(params=["a folder it cannot write", "a read-only file system"])
def reader(request: pytest.FixtureRequest) -> Iterator[Reader]:
    folder = _shared_folder()
    mount = _shared_folder()
    try:
        if request.param == "a folder it cannot write":
            if os.geteuid() != 0:
                yield Reader("a folder of mode 0555", folder, folder, [])
            elif _works([*_WITHOUT_OVERRIDE, "true"]):
                yield Reader("another user's folder", folder, folder, _WITHOUT_OVERRIDE)
            else:
                pytest.skip("root here cannot give up writing any file (setpriv)")
        else:
            if os.geteuid() != 0 or not _works(["unshare", "-m", "true"]):
                pytest.skip("no read-only bind mount here (needs root and unshare)")
            script = 'mount --bind -o ro "$1" "$2" && cd "$2" && shift 2 && exec "$@"'
            prefix = ["unshare", "-m", "sh", "-c", script, "sh", str(folder), str(mount)]
            yield Reader("a read-only file system", folder, mount, prefix)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(mount, ignore_errors=True)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def _write_store(path: Path) -> None:
    async def write() -> None:
        async with await SQLiteEventStore.open(path) as store:
            await store.append("S-1", make_events(3), expected=StreamState.NO_STREAM)
            await store.append("S-2", make_events(2), expected=StreamState.NO_STREAM)

    asyncio.run(write())


_API = """
import asyncio, json, sys
from agentjournal.errors import ConcurrencyError, StoreUnavailable
from agentjournal.store import AppendRequest, StreamState
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.testing.store_conformance import make_events

async def main():
    out = {}
    try:
        store = await SQLiteEventStore.open(sys.argv[1], create=False)
    except StoreUnavailable as error:
        print(json.dumps({"open": str(error)}))
        return
    async with store:
        out["read_only"] = store.read_only
        out["probe"] = store.heads_now(["S-1"])
        out["S-1"] = [e.revision for e in await store.read("S-1")]
        out["all"] = len(await store.read_all())
        out["head"] = await store.head("S-2")
        out["position"] = (await store.append("S-1", [], expected=StreamState.ANY)).position
        out["expected"] = (await store.append("S-2", [], expected=1)).revision
        try:
            await store.append("S-1", [], expected=StreamState.NO_STREAM)
        except ConcurrencyError as error:
            out["conflict"] = type(error).__name__
        for name, write in [
            ("append", store.append("S-1", make_events(1, start=3), expected=2)),
            ("new stream", store.append("S-3", make_events(1), expected=StreamState.NO_STREAM)),
            ("append_many", store.append_many([
                AppendRequest("S-1", make_events(1, start=3), 2),
                AppendRequest("S-2", make_events(1, start=2), 1),
            ])),
            ("purge", store.purge(["S-1"])),
        ]:
            try:
                await write
                out[name] = "written"
            except StoreUnavailable as error:
                out[name] = str(error)
    print(json.dumps(out))

asyncio.run(main())
"""


def _api(reader: Reader) -> dict[str, object]:
    done = reader.run(sys.executable, "-c", _API, str(reader.sees / "events.db"))
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def _read_only_answers(reader: Reader, revisions: list[int]) -> dict[str, object]:
    """What ``_API`` prints of the store ``_write_store`` made, its stream S-1 holding
    ``revisions``, read where it cannot be written."""
    refused = (
        f"SQLite store {reader.sees / 'events.db'} is read-only here, as {reader.sees} "
        "cannot be written: nothing was written"
    )
    return {
        "read_only": True,
        "probe": None,
        "S-1": revisions,
        "all": len(revisions) + 2,
        "head": 1,
        "position": len(revisions) + 2,
        "expected": 1,
        "conflict": "ConcurrencyError",
        "append": refused,
        "new stream": refused,
        "append_many": refused,
        "purge": refused,
    }


def test_a_store_that_cannot_be_written_here_is_read_and_refuses_every_write(
    reader: Reader,
) -> None:
    _write_store(reader.folder / "events.db")
    assert sorted(_files(reader.folder)) == ["events.db"]  # closed: no -wal, no -shm
    before = _files(reader.folder)

    assert _api(reader) == _read_only_answers(reader, [0, 1, 2])
    assert _files(reader.folder) == before


_WATCH = """
import asyncio, json, sys
from agentjournal.errors import StoreUnavailable
from agentjournal.store.sqlite import SQLiteEventStore

async def main():
    async with await SQLiteEventStore.open(sys.argv[1], create=False) as store:
        for _ in sys.stdin:
            try:
                print(json.dumps([e.revision for e in await store.read("S-1")]), flush=True)
            except StoreUnavailable as error:
                print(json.dumps(str(error)), flush=True)

asyncio.run(main())
"""


def _ask(watch: subprocess.Popen[str]) -> object:
    assert watch.stdin is not None
    assert watch.stdout is not None
    watch.stdin.write("read\n")
    watch.stdin.flush()
    return json.loads(watch.stdout.readline())


def _append_one(path: Path, revision: int) -> None:
    async def append() -> None:
        async with await SQLiteEventStore.open(path) as store:
            await store.append("S-1", make_events(1, start=revision), expected=revision - 1)

    asyncio.run(append())


@contextlib.contextmanager
def _watching(reader: Reader, first: list[int]) -> Iterator[subprocess.Popen[str]]:
    """A reader process that has the store open read-only, its first read ``first``, and
    reads S-1 when asked (:func:`_ask`); the folder is as the reader meets it while it
    opens and first reads."""
    with reader.unwritable():
        watch = subprocess.Popen(
            reader.command(sys.executable, "-c", _WATCH, str(reader.sees / "events.db")),
            cwd=reader.sees,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_clean_env(),
        )
        try:
            assert _ask(watch) == first
        except BaseException:
            watch.kill()
            watch.wait(timeout=60)
            raise
    try:
        yield watch
    finally:
        assert watch.stdin is not None
        watch.stdin.close()
        watch.wait(timeout=60)


def _written(reader: Reader) -> str:
    return (
        f"SQLite store {reader.sees / 'events.db'} was written since this process opened it "
        "read-only: run the command again to read it as it is now"
    )


def test_a_store_read_as_an_unchanging_file_that_its_owner_writes_refuses_the_next_read(
    reader: Reader,
) -> None:
    """Whoever can write the folder still can: a read after that write (or torn by it) is
    refused, never answered stale, and the next open reads what was written."""
    path = reader.folder / "events.db"
    _write_store(path)
    with _watching(reader, [0, 1, 2]) as watch:
        _append_one(path, 3)  # the owner opens the store, writes and closes it
        assert _ask(watch) == _written(reader)
        assert _ask(watch) == _written(reader)  # every read after it
    assert _api(reader)["S-1"] == [0, 1, 2, 3]


def test_a_store_its_owner_only_opens_refuses_the_reads_after(reader: Reader) -> None:
    """A writer that has the store open may write at any moment, into a ``-wal`` a reader
    of the unchanging file does not read: from its opening on, reads are refused."""
    path = reader.folder / "events.db"
    _write_store(path)
    with _watching(reader, [0, 1, 2]) as watch:
        holder = sqlite3.connect(path)
        try:
            holder.execute("SELECT count(*) FROM events").fetchone()  # -wal and -shm made
            assert _ask(watch) == _written(reader)
        finally:
            holder.close()


def test_a_store_its_writer_has_open_is_read_as_written_and_refuses_writes(
    reader: Reader,
) -> None:
    """With the writer's ``-wal`` and ``-shm`` beside it, SQLite reads the store the
    ordinary way, the latest writes included; it is still read-only to this reader."""
    if reader.how == "a folder of mode 0555":
        pytest.skip("the reader owns the files it reads here, so SQLite may write them")
    path = reader.folder / "events.db"
    _write_store(path)
    holder = sqlite3.connect(path)  # the writer's process, its connection open
    try:
        holder.execute("SELECT count(*) FROM events").fetchone()
        _append_one(path, 3)
        assert (reader.folder / "events.db-wal").exists()
        assert _api(reader) == _read_only_answers(reader, [0, 1, 2, 3])
        # Such a reader is not kept up to date by SQLite: a read after the writer's next
        # commit is refused, never answered stale.
        with _watching(reader, [0, 1, 2, 3]) as watch:
            _append_one(path, 4)
            assert _ask(watch) == _written(reader)
    finally:
        holder.close()


def test_a_store_file_it_cannot_write_in_a_folder_it_can_is_read_without_making_a_file(
    tmp_path: Path,
) -> None:
    """Read the ordinary way, SQLite would make ``-wal`` and ``-shm`` beside the file,
    which the store's owner might then be unable to write or remove."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        if not _works([*_WITHOUT_OVERRIDE, "true"]):
            pytest.skip("root here cannot give up writing any file (setpriv)")
        prefix = _WITHOUT_OVERRIDE  # held to the file's mode, as its owner
    folder = _shared_folder()
    try:
        _write_store(folder / "events.db")
        (folder / "events.db").chmod(0o444)
        before = _files(folder)
        done = subprocess.run(
            [*prefix, sys.executable, "-c", _API, str(folder / "events.db")],
            capture_output=True,
            text=True,
            env=_clean_env(),
            check=False,
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        assert (seen["read_only"], seen["S-1"]) == (True, [0, 1, 2])
        assert seen["append"] == (
            f"SQLite store {folder / 'events.db'} is read-only here, as {folder / 'events.db'} "
            "cannot be written: nothing was written"
        )
        assert _files(folder) == before  # no -wal, no -shm
    finally:
        shutil.rmtree(folder)


def test_an_empty_write_ahead_log_it_cannot_read_does_not_stop_the_reading(
    reader: Reader,
) -> None:
    if reader.how != "another user's folder":
        pytest.skip("only another user's file can be unreadable to this reader")
    _write_store(reader.folder / "events.db")
    (reader.folder / "events.db-wal").write_bytes(b"")
    (reader.folder / "events.db-wal").chmod(0o600)
    assert _api(reader) == _read_only_answers(reader, [0, 1, 2])


def test_a_store_that_can_be_written_is_not_read_only(tmp_path: Path) -> None:
    _write_store(tmp_path / "events.db")

    async def check() -> None:
        async with await SQLiteEventStore.open(tmp_path / "events.db", create=False) as store:
            assert store.read_only is False
            assert (await store.append("S-1", make_events(1, start=3), expected=2)).revision == 3

    asyncio.run(check())


def test_writes_still_in_the_write_ahead_log_are_refused_not_left_unread(reader: Reader) -> None:
    """A copy of a store taken while it was open: its last writes are only in ``-wal``,
    which a reader can read only with the WAL index it cannot make in that folder."""
    live = _shared_folder()
    try:
        path = live / "events.db"
        _write_store(path)

        async def copy_while_open() -> None:
            async with await SQLiteEventStore.open(path) as store:
                await store.append("S-1", make_events(2, start=3), expected=2)
                for name in ("events.db", "events.db-wal"):
                    shutil.copyfile(live / name, reader.folder / name)

        asyncio.run(copy_while_open())
    finally:
        shutil.rmtree(live)
    assert (reader.folder / "events.db-wal").stat().st_size > 0
    before = _files(reader.folder)

    seen = _api(reader)

    db = reader.sees / "events.db"
    assert seen == {
        "open": (
            f"cannot open SQLite store {db} here: its writes in {db}-wal are read only with "
            f"the WAL index SQLite keeps in {db}-shm, which is not there, and this process "
            "cannot write the store; whoever can write it can open the store once, which "
            "moves them into the file"
        )
    }
    assert _files(reader.folder) == before
    # Where the folder can be written, the same files hold every write.
    copy = Path(tempfile.mkdtemp())
    try:
        for name, data in before.items():
            (copy / name).write_bytes(data)

        async def revisions() -> list[int]:
            async with await SQLiteEventStore.open(copy / "events.db", create=False) as store:
                return [e.revision for e in await store.read("S-1")]

        assert asyncio.run(revisions()) == [0, 1, 2, 3, 4]
    finally:
        shutil.rmtree(copy)


def test_a_store_of_an_earlier_schema_version_is_refused_as_its_upgrade_is_a_write(
    reader: Reader,
) -> None:
    path = reader.folder / "events.db"
    with sqlite3.connect(path) as db:
        db.executescript(V2_SCHEMA)
    db.close()
    before = _files(reader.folder)

    seen = _api(reader)

    assert seen == {
        "open": (
            f"cannot open SQLite store {reader.sees / 'events.db'} here: it has schema version 2, "
            "upgraded to 3 when first opened where it can be written, and it cannot be written "
            "here"
        )
    }
    assert _files(reader.folder) == before


@pytest.mark.slow
def test_every_read_command_works_on_a_store_that_cannot_be_written_and_writers_refuse(
    reader: Reader,
) -> None:
    """The demo's store, read by every read command (the output files written elsewhere);
    a command that writes the store refuses in one line, and so does a new demo there."""
    store = reader.folder / "agentjournal.db"
    outputs = _shared_folder()  # the reader's own: the key, and what it writes
    demo = run("demo", "--db", str(store), "--session", "s1", "--key", str(outputs / "k.pem"))
    assert demo.returncode == 0, demo.stderr
    before = _files(reader.folder)
    aj = [sys.executable, "-m", "agentjournal.cli"]
    try:
        verified = reader.run(*aj, "verify", "s1", "--pubkey", str(outputs / "k.pem.pub"))
        assert verified.returncode == 0, verified.stderr
        assert verified.stdout.splitlines()[-1].startswith("VERIFIED"), verified.stdout
        for argv in [
            ("sessions",),
            ("show", "s1"),
            ("replay", "s1"),
            ("usage", "s1"),
            ("approvals",),
            ("eval", "list"),
            ("bundle", "export", "s1", "-o", str(outputs / "s1.json")),
            ("view", "s1", "-o", str(outputs / "s1.html")),
            ("trace", "export", "--all", "--jsonl", str(outputs / "spans.jsonl")),
        ]:
            done = reader.run(*aj, *argv)
            assert done.returncode == 0, (argv, done.stderr)
        listed = reader.run(*aj, "sessions")
        assert "s1" in listed.stdout
        assert listed.stderr.startswith("agentjournal: warning: the catalog could not be saved")
        for name in ("s1.json", "s1.html", "spans.jsonl"):
            assert (outputs / name).stat().st_size > 0
        key = f"AGENTJOURNAL_SIGNING_KEY_FILE={outputs / 'k.pem'}"
        signed = reader.run(
            "env", key, *aj, "bundle", "export", "s1", "-o", str(outputs / "k.json")
        )
        assert signed.returncode == 1
        assert signed.stderr.endswith(
            "nothing was written (a checkpoint is signed before an export when a key is set; "
            "--no-checkpoint exports without one)\n"
        ), signed.stderr
        forked = reader.run(*aj, "fork", "s1", "--at", "3")
        assert forked.returncode == 1
        assert forked.stderr == (
            "agentjournal: SQLite store agentjournal.db is read-only here, as "
            f"{reader.sees} cannot be written: nothing was written\n"
        )
        again = reader.run(*aj, "demo", "--key", str(outputs / "other.pem"))
        assert (again.returncode, again.stdout) == (1, "")
        assert again.stderr == (
            f"agentjournal: cannot write SQLite store agentjournal.db: {reader.sees} "
            "cannot be written here\n"
        )
        assert _files(reader.folder) == before
    finally:
        shutil.rmtree(outputs)
