"""``agentjournal eval run|show|list`` and ``verify``/``bundle`` ``--eval``: a rule scorers
file over recorded support conversations, a line per session on stderr, the run verified
from the store and as a (redacted) bundle; bad input is one line, exit 1, nothing written."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.ledger import SigningKey
from cli_run import run
from eval_sessions import record_support

SCORERS = """\
scorers:
  - name: refund-called
    rule: tool_called
    tool: refund
    scope: session
  - name: polite
    rule: answer_matches
    pattern: "(?i)order|done|welcome"
"""


@pytest.fixture
def place(tmp_path: Path) -> tuple[str, Path]:
    """A store of three recorded support conversations (two of app ``support``) and a
    scorers file."""
    uri = f"sqlite:///{tmp_path / 'j.db'}"

    async def record() -> None:
        async with Journal.open(uri) as journal:
            await record_support(journal, "support-1")
            await record_support(journal, "support-2", turns=1)
            await record_support(journal, "sales-1", app="sales", turns=1)

    asyncio.run(record())
    (tmp_path / "scorers.yaml").write_text(SCORERS)
    return uri, tmp_path


def test_eval_run_scores_the_sessions_named_and_says_so(place: tuple[str, Path]) -> None:
    uri, folder = place
    scorers = str(folder / "scorers.yaml")
    ran = run("eval", "run", "--scorers", scorers, "support-1", "--id", "r1", "--uri", uri)
    assert ran.returncode == 0, ran.stderr
    assert ran.stderr == "[1/1] support-1: 3 turns scored, 1.00 pass\n"
    assert ran.stdout.startswith("eval run r1: 1 session line, 3 turn scores, average 1.000")
    again = run("eval", "run", "--scorers", scorers, "support-1", "--id", "r1", "--uri", uri)
    assert again.returncode == 0
    assert again.stdout == ran.stdout
    shown = run("eval", "show", "r1", "--uri", uri)
    assert shown.returncode == 0
    assert "support-1: 1.00 pass (polite 1.00, refund-called 1.00)" in shown.stdout
    assert "  turn 2 polite: 1.00 pass" in shown.stdout
    as_json = json.loads(run("eval", "show", "r1", "--json", "--uri", uri).stdout)
    assert as_json["status"] == "completed"
    assert len(as_json["turns"]) == 3


def test_eval_run_chooses_sessions_by_app_or_all(place: tuple[str, Path]) -> None:
    uri, folder = place
    scorers = str(folder / "scorers.yaml")
    by_app = run("eval", "run", "--scorers", scorers, "--app", "support", "--json", "--uri", uri)
    assert by_app.returncode == 0, by_app.stderr
    assert [s["session"] for s in json.loads(by_app.stdout)["sessions"]] == [
        "support-1",
        "support-2",
    ]
    every = run("eval", "run", "--scorers", scorers, "--all", "--id", "all", "--uri", uri)
    assert every.returncode == 0
    assert every.stderr.count("\n") == 3
    listed = json.loads(run("eval", "list", "--json", "--uri", uri).stdout)
    assert sorted(r["sessions"] for r in listed) == [2, 3]
    assert all(r["status"] == "completed" for r in listed)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scorers", "missing.yaml", "support-1"], "cannot read scorers"),
        (["--scorers", "{scorers}", "nobody"], "no session 'nobody'"),
        (["--scorers", "{scorers}", "support-1", "--branch", "nob"], "has no branch 'nob'"),
        (["--scorers", "{scorers}"], "name the sessions to score"),
        (["--scorers", "{scorers}", "support-1", "--all"], "not both"),
        (["--scorers", "{scorers}", "--app", "nothing"], "no session matches"),
        (["--scorers", "{scorers}", "support-1", "--id", "bad id"], "contains ' '"),
        (["--scorers", "{bad}", "support-1"], "entry 1"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(
    place: tuple[str, Path], args: list[str], message: str
) -> None:
    uri, folder = place
    (folder / "bad.yaml").write_text("scorers:\n  - name: x\n    rule: tool_caled\n")
    filled = [a.format(scorers=folder / "scorers.yaml", bad=folder / "bad.yaml") for a in args]
    named = [] if "--id" in args else ["--id", "r9"]
    ran = run("eval", "run", *filled, *named, "--uri", uri)
    assert ran.returncode == 1
    assert ran.stdout == ""
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert message in ran.stderr
    assert run("eval", "list", "--json", "--uri", uri).stdout.strip() == "[]"


def test_an_eval_run_verifies_from_the_store_and_as_a_redacted_bundle(
    place: tuple[str, Path],
) -> None:
    uri, folder = place
    key = SigningKey.generate()
    (folder / "k.pem").write_text(key.private_pem())
    (folder / "k.pub").write_text(key.public_pem())
    env = {"AGENTJOURNAL_SIGNING_KEY_FILE": str(folder / "k.pem")}
    scorers = str(folder / "scorers.yaml")
    ran = run("eval", "run", "--scorers", scorers, "support-1", "--id", "r", "--uri", uri, env=env)
    assert ran.returncode == 0, ran.stderr
    pub = str(folder / "k.pub")
    verified = run("verify", "--eval", "r", "--pubkey", pub, "--uri", uri)
    assert verified.returncode == 0, verified.stdout
    assert "eval: 3 turn scores, 1 session score, completed" in verified.stdout
    out = str(folder / "r.json")
    exported = run("bundle", "export", "--eval", "r", "-o", out, "--redact", "--uri", uri)
    assert exported.returncode == 0, exported.stderr
    assert "charged twice" not in Path(out).read_text()
    checked = run("bundle", "verify", out, "--pubkey", pub)
    assert checked.returncode == 0, checked.stdout
    assert "(4 withheld)" in checked.stdout
    both = run("verify", "support-1", "--eval", "r", "--pubkey", pub, "--uri", uri)
    assert both.returncode == 1
    assert "one of them" in both.stderr
