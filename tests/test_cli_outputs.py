"""The commands that write a file (``bundle export -o``, ``view -o``, ``trace export --jsonl``)
refuse, in one line and before they write anything, an output that is the store they read,
a private key, a folder, a pipe or an empty name; through a symbolic link they write its
target and keep the link."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from agentjournal import Journal
from cli_run import run


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A SQLite store holding session ``s`` (two messages), and a private key beside it."""
    path = tmp_path / "journal.db"

    async def write() -> None:
        async with Journal.open(f"sqlite:///{path}") as journal:
            await journal.session("s").add_items([{"role": "user", "content": "hello"}])
            await journal.session("s").add_items([{"role": "user", "content": "again"}])

    asyncio.run(write())
    assert run("keygen", "-o", str(tmp_path / "key.pem")).returncode == 0
    return path


def _commands(store: Path, output: str) -> list[tuple[str, ...]]:
    uri = f"sqlite:///{store}"
    return [
        ("bundle", "export", "s", "--uri", uri, "--no-checkpoint", "-o", output),
        ("view", "s", "--uri", uri, "-o", output),
        ("trace", "export", "s", "--uri", uri, "--jsonl", output),
    ]


@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("journal.db", "it holds a SQLite database, which an export never replaces"),
        ("journal.db-wal", "it holds the write-ahead log of the SQLite database journal.db"),
        ("key.pem", "it holds a private key, which an export never replaces"),
        ("folder", "it is a folder; give a file name"),
        ("pipe", "not a regular file (a pipe or a device)"),
        ("link-to-db", "it holds a SQLite database, which an export never replaces"),
        ("", "the output file name is empty"),
        ("seed.key", "it holds a private key, which an export never replaces"),
        ("padded.key", "it holds a private key, which an export never replaces"),
        ("commented.pem", "it holds a private key, which an export never replaces"),
        ("server.pem", "it holds a private key, which an export never replaces"),
        ("journal.db-shm", "it holds the shared memory of the SQLite database journal.db"),
        ("journal.db-journal", "it holds the rollback journal of the SQLite database journal.db"),
        ("dangling", "folder {folder}/missing does not exist; create it first"),
    ],
)
def test_an_output_that_must_not_be_replaced_is_refused_and_left_as_it_was(
    store: Path, target: str, says: str
) -> None:
    folder = store.parent
    (folder / "folder").mkdir()
    os.mkfifo(folder / "pipe")
    (folder / "link-to-db").symlink_to(store)
    (folder / "journal.db-wal").write_bytes(b"\x37\x7f\x06\x82" + bytes(28))
    (folder / "seed.key").write_text(os.urandom(32).hex() + "\n")  # a key as a raw seed
    (folder / "padded.key").write_text(os.urandom(32).hex() + " " * 5_000)  # as the loader reads
    pem = (folder / "key.pem").read_text()
    (folder / "commented.pem").write_text("# a comment\n" * 500 + pem)  # past the first 4 KiB
    certificate = "-----BEGIN CERTIFICATE-----\n" + "MIIB" * 16 + "\n-----END CERTIFICATE-----\n"
    server = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (folder / "server.pem").write_bytes(certificate.encode() + server)  # a TLS server's, say
    (folder / "journal.db-shm").write_bytes(b"")  # empty, as while a reader has it open
    (folder / "journal.db-journal").write_bytes(b"")
    (folder / "dangling").symlink_to(folder / "missing" / "x.json")
    # Every file, the store and its key among them (and no -shm: the store is never opened).
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    for command in _commands(store, str(folder / target) if target else ""):
        done = run(*command)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        # An empty --jsonl is no destination at all: the trace command asks for one.
        told = "--jsonl FILE" if target == "" and command[0] == "trace" else says
        told = told.format(folder=folder)
        assert done.stderr.count("\n") == 1, (command, done.stderr)
        assert told in done.stderr, (command, done.stderr)
        assert "Traceback" not in done.stderr
    after = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert after == before  # nothing replaced, no .partial left
    assert (folder / "link-to-db").is_symlink()
    assert run("show", "s", "--uri", f"sqlite:///{store}").returncode == 0  # the store is whole


def test_through_a_symbolic_link_the_target_is_written_and_the_link_kept(store: Path) -> None:
    folder = store.parent
    (folder / "real").mkdir()
    for number, command in enumerate(_commands(store, str(folder / "out"))):
        target = folder / "real" / f"{number}.out"
        target.write_text("old")
        link = folder / "out"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target)
        done = run(*command)
        assert done.returncode == 0, (command, done.stderr)
        assert link.is_symlink()
        assert link.resolve() == target
        assert target.read_text() != "old"  # the export, written through the link
        assert [n for _, _, names in os.walk(folder) for n in names if n.endswith(".partial")] == []


def test_an_existing_export_is_replaced(store: Path) -> None:
    output = store.parent / "bundle.json"
    output.write_text("an earlier export")
    done = run(*_commands(store, str(output))[0])
    assert done.returncode == 0, done.stderr
    assert output.read_text().startswith("{")


def test_a_link_where_the_file_is_written_first_is_never_followed(store: Path) -> None:
    # The file is written beside the output under a name of its own, created new: a link
    # planted at any name there cannot make the export write through it.
    folder = store.parent
    key = folder / "key.pem"
    kept = key.read_bytes()
    for name in ("out.json.partial", ".out.json.partial"):
        (folder / name).symlink_to(key)
    done = run(*_commands(store, str(folder / "out.json"))[0])
    assert done.returncode == 0, done.stderr
    assert key.read_bytes() == kept
    assert (folder / "out.json").read_text().startswith("{")
    assert not (folder / "out.json").is_symlink()


def test_what_is_checked_is_what_is_written_through_a_linked_folder_and_dot_dot(
    store: Path,
) -> None:
    # sub/../key.pem: the operating system follows the link first, so it names
    # other/key.pem (new), not the key beside sub: that file is checked, and written.
    folder = store.parent
    (folder / "other" / "deep").mkdir(parents=True)
    (folder / "sub").symlink_to(folder / "other" / "deep")
    kept = (folder / "key.pem").read_bytes()
    output = f"{folder}/sub/../key.pem"
    for command in _commands(store, output):
        done = run(*command)
        assert done.returncode == 0, (command, done.stderr)
        assert (folder / "key.pem").read_bytes() == kept
        assert (folder / "other" / "key.pem").exists()
        (folder / "other" / "key.pem").unlink()


def test_a_dash_is_refused_where_the_output_can_only_be_a_file(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``view -o -`` writes standard output; the commands that only write a file refuse
    ``-`` rather than make a file of that name."""
    monkeypatch.chdir(store.parent)
    for command in _commands(store, "-"):
        if command[0] == "view":
            continue
        done = run(*command)
        assert (done.returncode, done.stdout) == (1, ""), command
        assert done.stderr == (
            "agentjournal: cannot write -: this command writes a file; give its name\n"
        )
    assert not (store.parent / "-").exists()
