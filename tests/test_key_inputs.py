"""``keygen``'s output and the signing key the environment names: bad input is one line that
says which file or variable, and nothing is left half-written."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_run import run


def _refused(*args: str, env: dict[str, str] | None = None) -> str:
    done = run(*args, env=env)
    assert (done.returncode, done.stdout) == (1, ""), (args, done.stdout)
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("agentjournal: ")
    return done.stderr.removeprefix("agentjournal: ").rstrip("\n")


def test_keygen_refuses_an_output_it_cannot_write_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a key named "-" would be written
    (tmp_path / "folder").mkdir()
    (tmp_path / "dangling.pem").symlink_to(tmp_path / "missing" / "k.pem")
    (tmp_path / "half.pem.pub").mkdir()  # the public half's name is taken by a folder
    before = sorted(p.name for p in tmp_path.iterdir())
    assert _refused("keygen", "-o", "") == "the key file name is empty"
    folder = str(tmp_path / "folder")
    assert _refused("keygen", "-o", folder) == (
        f"cannot write {folder}: it is a folder; give a file name"
    )
    dangling = str(tmp_path / "dangling.pem")
    assert _refused("keygen", "-o", dangling) == f"{dangling} exists; refusing to overwrite a key"
    half = str(tmp_path / "half.pem")
    assert _refused("keygen", "-o", half) == (
        f"cannot write {half}.pub: it is a folder; give a file name"
    )
    assert (
        _refused("keygen", "-o", "-") == "cannot write -: a key is written to a file; give its name"
    )
    # The private half is written, the public one's name is too long: neither is left.
    long = str(tmp_path / ("k" * 252))
    assert _refused("keygen", "-o", long) == f"cannot write {long}.pub: File name too long"
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        (
            "AGENTJOURNAL_SIGNING_KEY",
            "not a key",
            "$AGENTJOURNAL_SIGNING_KEY: an Ed25519 seed is 32 bytes in hex or base64, or a PEM key",
        ),
        (
            "AGENTJOURNAL_SIGNING_KEY_FILE",
            "{folder}/notes.txt",
            "$AGENTJOURNAL_SIGNING_KEY_FILE: {folder}/notes.txt holds no signing key: an "
            "Ed25519 seed is 32 bytes in hex or base64, or a PEM key",
        ),
        (
            "AGENTJOURNAL_SIGNING_KEY_FILE",
            "{folder}/missing.pem",
            "$AGENTJOURNAL_SIGNING_KEY_FILE: cannot read signing key {folder}/missing.pem: No "
            "such file or directory",
        ),
    ],
)
def test_a_signing_key_variable_that_names_no_key_is_named_in_the_error(
    tmp_path: Path, variable: str, value: str, says: str
) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    assert run("selfcheck", "--uri", uri).returncode == 0
    env = {variable: value.format(folder=tmp_path)}
    told = _refused("bundle", "export", "x", "--uri", uri, "-o", str(tmp_path / "b.json"), env=env)
    assert told == says.format(folder=tmp_path)
    assert not (tmp_path / "b.json").exists()
