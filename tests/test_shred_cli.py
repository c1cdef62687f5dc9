"""``agentjournal erase``: the erasure from the command line, and bad input refused in one
line with nothing written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.audit.verify import verify_records
from agentjournal.cli import main as cli
from agentjournal.shred import SQLiteKeyStore
from agentjournal.shred.fields import ERASED
from agentjournal.walk import read_tree


async def _write(uri: str, keys: Path) -> None:
    async with Journal.open(uri, keys=keys) as journal:
        session = journal.session("cli-1", user_id="alice")
        await session.add_items([{"role": "user", "content": "CLI-secret-6b1f"}])


async def _state(uri: str, keys: Path) -> tuple[int, str]:
    async with Journal.open(uri, keys=keys) as journal:
        count = len(await journal.store.read_all())
        items = await journal.session("cli-1", user_id="alice").get_items()
        return count, str(items)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    monkeypatch.delenv("AGENTJOURNAL_KEYS", raising=False)
    monkeypatch.delenv("AGENTJOURNAL_SIGNING_KEY", raising=False)
    monkeypatch.delenv("AGENTJOURNAL_SIGNING_KEY_FILE", raising=False)
    uri, keys = f"sqlite:///{tmp_path / 'journal.db'}", tmp_path / "keys.db"
    asyncio.run(_write(uri, keys))
    return uri, keys


def test_erase_destroys_the_subject_s_keys_and_records_it(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    uri, keys = store
    argv = ["erase", "--subject", "alice", "--reason", "request 88", "--as", "dpo"]
    assert cli([*argv, "--keys", str(keys), "--uri", uri]) == 0
    out = capsys.readouterr().out
    assert "erased subject alice at " in out
    assert "SubjectErased on sessions: cli-1" in out
    _, items = asyncio.run(_state(uri, keys))
    assert ERASED in items
    assert "CLI-secret-6b1f" not in items

    async def verified() -> str:
        async with Journal.open(uri) as journal:
            report = verify_records(
                await read_tree(journal.store, "cli-1"), {}, allow_uncovered=True
            )
            assert report.ok, report.text()
            return report.text()

    assert "content of subject alice erased at" in asyncio.run(verified())


def test_erase_takes_the_key_store_from_the_environment(
    store: tuple[str, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    uri, keys = store
    monkeypatch.setenv("AGENTJOURNAL_KEYS", str(keys))
    assert cli(["erase", "--subject", "bob", "--reason", "r", "--as", "dpo", "--uri", uri]) == 0
    assert "subject bob has no key" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--subject", " ", "--reason", "r", "--as", "dpo"], "--subject must be non-blank"),
        (["--subject", "alice", "--reason", "", "--as", "dpo"], "--reason must be non-blank"),
        (["--subject", "alice", "--reason", "r", "--as", " "], "--as must be non-blank"),
        (
            ["--subject", "alice", "--reason", "r", "--as", "dpo", "--keys", "nope.db"],
            "no key store at",
        ),
        (["--subject", "alice", "--reason", "r", "--as", "dpo", "--keys", ""], "no key store:"),
    ],
)
def test_erase_refuses_bad_input_in_one_line_and_writes_nothing(
    store: tuple[str, Path],
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    uri, keys = store
    before = asyncio.run(_state(uri, keys))
    argv = ["erase", *extra, "--uri", uri]
    if "--keys" not in extra:
        argv += ["--keys", str(keys)]
    assert cli(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("agentjournal: ")
    assert len(err.strip().splitlines()) == 1
    assert message in err
    assert asyncio.run(_state(uri, keys)) == before
    assert "CLI-secret-6b1f" in before[1]


def test_erase_without_a_required_flag_is_a_usage_error(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    uri, keys = store
    with pytest.raises(SystemExit) as exit_:
        cli(["erase", "--subject", "alice", "--reason", "r", "--keys", str(keys), "--uri", uri])
    assert exit_.value.code == 1
    assert "--as" in capsys.readouterr().err


def test_erase_on_a_missing_store_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "keys.db"
    SQLiteKeyStore(keys).close()
    uri = f"sqlite:///{tmp_path / 'missing.db'}"
    argv = ["erase", "--subject", "a", "--reason", "r", "--as", "b", "--keys", str(keys)]
    assert cli([*argv, "--uri", uri]) == 1
    assert capsys.readouterr().err.startswith("agentjournal: no store at")
    assert not (tmp_path / "missing.db").exists()


def test_erase_pointed_at_a_file_that_is_no_key_store_changes_nothing_in_it(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--keys`` naming the journal's own database by mistake: one line, and neither file
    changes (no key table is created in it)."""
    uri, _ = store
    database = Path(uri.removeprefix("sqlite:///"))
    before = database.read_bytes()
    argv = ["erase", "--subject", "alice", "--reason", "r", "--as", "dpo", "--uri", uri]
    assert cli([*argv, "--keys", str(database)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("agentjournal: ")
    assert "is not a key store" in err
    assert database.read_bytes() == before


def test_erasing_a_subject_again_says_nothing_new_was_written(
    store: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    uri, keys = store
    argv = ["erase", "--subject", "alice", "--reason", "r", "--as", "dpo", "--uri", uri]
    assert cli([*argv, "--keys", str(keys)]) == 0
    assert "SubjectErased on sessions:" in capsys.readouterr().out
    before = asyncio.run(_state(uri, keys))
    assert cli([*argv, "--keys", str(keys)]) == 0
    out = capsys.readouterr().out
    assert "was erased already" in out
    assert "nothing new written" in out
    assert asyncio.run(_state(uri, keys)) == before
