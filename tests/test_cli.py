"""The command line at its edges: the demo flow, options, defaults, services and one-line errors.

Commands that load the Agents SDK or serve run as real subprocesses, each in its own empty
working directory; the rest call ``agentjournal.cli.main`` in this process (``cli_run.run``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentjournal.cli import build_parser
from agentjournal.cli.bundle import DEFAULT_MAX_BYTES
from cli_run import run

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def run_process(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
    return subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env={**clean, **(env or {})},
    )


async def _page(uri: str, session_id: str, pubkey: Path) -> dict[str, Any]:
    from agentjournal.cli._common import trusted_keys
    from agentjournal.store import open_store
    from agentjournal.ui.page import session_page

    store = await open_store(uri, create=False)
    try:
        return await session_page(store, session_id, trusted_keys([str(pubkey)]))
    finally:
        await store.close()


@pytest.mark.slow
def test_demo_shows_the_session_tree_and_the_replay(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    result = run_process("demo", "--db", str(db), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "refunds: I refunded the duplicate charge of 12.50 EUR." in out
    assert "AgentSession-support-" in out
    assert "-sub-billing-call_to_billing" in out
    assert "-sub-refunds-call_to_refunds" in out
    assert out.count("SubagentCompleted") == 4  # two subagents, each on both of its streams
    assert "replayed flat history (16 items" in out
    # The reference guardrail redacted the note's e-mail address and refused the large refund.
    assert "GuardrailDecided             TOOL_CALL add_note: MODIFY PII_REDACTED" in out
    assert "noted on order 42: [REDACTED] disputes a double c…\n" in out
    assert "GuardrailDecided             TOOL_CALL issue_refund: BLOCK CEILING_EXCEEDED" in out
    assert "Error: the guardrail blocked this call to issue_r…\n" in out  # cut text says so
    assert f"store: sqlite:///{db}" in out
    # The refund within the ceiling waited for a person: held, approved, resumed.
    assert (
        '  refunds asks to run issue_refund({"order_id":"42","amount_cents":1250}): the run '
        "waits for approval, held on the record\n"
        "  demo-operator approved call_refund; the run resumes from the record\n"
        "  refunds: I refunded the duplicate charge of 12.50 EUR.\n"
    ) in out
    assert "InterruptResolved            approved by demo-operator [request call_refund]" in out
    # The ledger: the question, its answer, the paused run, its taking up, the guardrail's
    # decision on the call when the resumed run runs it, and one more checkpoint (the
    # resumed run signs its own end) are six more events than a run without approval.
    assert "  integrity: 51 events in 4 streams chain correctly" in out
    # Every model response once (8 calls of 120 in, 30 out), a handoff-only one included.
    assert out.count("ModelResponded") == 8
    assert (
        "  usage: 8 model responses; 960 input (0 cached), 240 output (0 reasoning) tokens" in out
    )
    assert "\n  VERIFIED: checkpoints signed by ed25519:" in out
    assert (tmp_path / "agentjournal-demo.pem").stat().st_mode & 0o777 == 0o600
    assert db.exists()
    # The command it prints verifies the session again, from the store, as printed.
    hint = next(line for line in out.splitlines() if line.startswith("verify it yourself: "))
    assert f"--uri sqlite:///{db} --pubkey agentjournal-demo.pem.pub" in hint
    again = run_process(*shlex.split(hint.removeprefix("verify it yourself: "))[1:], cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.splitlines()[-1].startswith("VERIFIED: ")
    # The viewer command it prints trusts the same key: the session's page says VERIFIED.
    browse = next(line for line in out.splitlines() if line.startswith("see it in the browser: "))
    command = shlex.split(browse.removeprefix("see it in the browser: ").split(",")[0])
    assert command[:2] == ["agentjournal", "ui"]
    assert command[-2:] == ["--pubkey", "agentjournal-demo.pem.pub"]
    session_id = re.search(r"AgentSession-(support-[0-9a-f]+)", out).group(1)  # type: ignore[union-attr]
    assert f"/sessions/{session_id} at the address it prints" in browse
    page = asyncio.run(_page(f"sqlite:///{db}", session_id, tmp_path / command[-1]))
    assert page["integrity"]["state"] == "verified", page["integrity"]


@pytest.mark.slow
def test_demo_then_verify_in_the_default_store(tmp_path: Path) -> None:
    """The README's flow: demo, then verify by the session id with the printed key file."""
    demo = run_process("demo", "--session", "support-4711", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert (tmp_path / "agentjournal.db").exists()  # where every other command looks
    assert demo.stdout.splitlines()[-3] == (
        "verify it yourself: agentjournal verify support-4711 --pubkey agentjournal-demo.pem.pub"
    )
    verified = run_process(
        "verify", "support-4711", "--pubkey", "agentjournal-demo.pem.pub", cwd=tmp_path
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    again = run_process("demo", "--session", "support-4711", cwd=tmp_path)
    assert again.returncode == 1
    assert again.stderr == (
        "agentjournal: session support-4711 exists already: choose another --session, or "
        "leave it out for a new one\n"
    )


@pytest.mark.slow
def test_demo_takes_the_store_from_the_environment_and_the_samples(tmp_path: Path) -> None:
    env = {"AGENTJOURNAL_URI": f"sqlite:///{tmp_path / 'env.db'}"}
    demo = run_process(
        "demo",
        "--session",
        "s-1",
        "--key",
        "k.pem",
        "--policy",
        str(SAMPLES / "policy.yml"),
        "--rules",
        str(SAMPLES / "guardrail-rules.yml"),
        cwd=tmp_path,
        env=env,
    )
    assert demo.returncode == 0, demo.stderr
    assert (tmp_path / "env.db").exists()
    assert not (tmp_path / "agentjournal.db").exists()
    # A grant at each run's start (the resumed run's too: refunds, where it resumes) and
    # one along each handoff.
    assert re.search(
        r"delegation: 1 policy recorded \(sha256:[0-9a-f]{64}\); 5 grants, each recomputed",
        demo.stdout,
    )
    assert "each within its agent's authority" in demo.stdout
    assert "verify it yourself: agentjournal verify s-1 --pubkey k.pem.pub" in demo.stdout
    verified = run_process("verify", "s-1", "--pubkey", "k.pem.pub", cwd=tmp_path, env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_selfcheck_on_a_fresh_file_passes(tmp_path: Path) -> None:
    result = run_process("selfcheck", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "OK"
    assert "FAIL" not in result.stdout
    assert list(tmp_path.iterdir()) == []  # a temporary file, gone


def test_selfcheck_on_a_named_store(tmp_path: Path) -> None:
    db = tmp_path / "checked.db"
    result = run("selfcheck", "--uri", f"sqlite:///{db}")
    assert result.returncode == 0, result.stderr
    assert db.exists()
    from_env = tmp_path / "env.db"
    result = run("selfcheck", env={"AGENTJOURNAL_URI": f"sqlite:///{from_env}"})
    assert result.returncode == 0, result.stderr
    assert from_env.exists()


def test_unknown_store_is_a_usage_error() -> None:
    result = run("selfcheck", "--uri", "postgres://db/x")
    assert result.returncode == 1
    assert "unknown store URI" in result.stderr


def test_version() -> None:
    from importlib.metadata import version

    result = run("--version")
    assert (result.returncode, result.stdout) == (0, f"agentjournal {version('agentjournal')}\n")


def test_the_version_is_looked_up_only_when_asked() -> None:
    # The metadata lookup costs every command some 15 ms of start-up.
    code = (
        "import sys; from agentjournal.cli import build_parser; build_parser(); "
        "print('importlib.metadata' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr


def _leaf_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _leaf_parsers(child)


def test_every_option_shows_its_default_in_help() -> None:
    missing = []
    for parser in _leaf_parsers(build_parser()):
        for action in parser._actions:
            if not action.option_strings or action.required:
                continue
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            if "default" not in (action.help or ""):
                missing.append(f"{parser.prog} {action.option_strings[0]}")
    assert missing == []
    shown = run("bundle", "verify", "--help").stdout
    assert f"(default: {DEFAULT_MAX_BYTES}, i.e. 256 MiB)" in " ".join(shown.split())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.slow
def test_guardrail_serve_prints_the_port_it_bound_and_refuses_a_port_in_use(
    tmp_path: Path,
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
    service = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agentjournal.cli",
            "guardrail",
            "serve",
            "--port",
            "0",
            "--rules",
            str(SAMPLES / "guardrail-rules.yml"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=clean,
    )
    try:
        assert service.stdout is not None
        first = service.stdout.readline()
        found = re.fullmatch(
            r"reference guardrail on http://127\.0\.0\.1:(\d+)/v1/validate "
            r"\(4 rules\)\n",
            first,
        )
        assert found is not None, first
        port = int(found.group(1))
        assert port != 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as response:
            assert response.status == 200
        busy = run_process("guardrail", "serve", "--port", str(port), cwd=tmp_path)
        assert busy.returncode == 1
        assert busy.stdout == ""
        assert busy.stderr == (
            f"agentjournal: port {port} on 127.0.0.1 is in use: stop what holds it, or choose "
            "another --port (0 picks a free one)\n"
        )
    finally:
        service.send_signal(signal.SIGINT)
        service.wait(timeout=30)
        if service.stdout is not None:
            service.stdout.close()
        if service.stderr is not None:
            service.stderr.close()


def _one_line(result_stderr: str) -> str:
    assert "Traceback" not in result_stderr
    assert result_stderr.count("\n") == 1, result_stderr
    assert result_stderr.startswith("agentjournal: ")
    return result_stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("keygen", "-o", "{missing}/k.pem"), "folder {missing} does not exist; create it first"),
        (
            ("bundle", "export", "s-1", "--uri", "sqlite:///{db}", "-o", "{missing}/b.json"),
            "folder {missing} does not exist; create it first",
        ),
        (("guardrail", "serve", "--rules", "{bad_yaml}"), "not valid YAML at line 3 column 3"),
        (("guardrail", "serve", "--rules", "{bad_rules}"), "line 2: rules.0.max: Field required"),
        (("guardrail", "serve", "--rules", "{binary}"), "cannot read rules"),
        (("guardrail", "serve", "--rules", "{missing}/r.yml"), "cannot read rules"),
        (("guardrail", "serve", "--port", "70000"), "--port must be 0 to 65535, got 70000"),
        (("guardrail", "serve", "--port", "-1"), "--port must be 0 to 65535, got -1"),
        (("verify", "s-1", "--uri", "sqlite:///{missing}/x.db", "--pubkey", "{pub}"), "no store"),
        (("verify", "s-1", "--uri", "sqlite:///{db}", "--pubkey", "{missing}.pub"), "--pubkey"),
        (("verify", "s-1", "--uri", "sqlite:///{db}", "--pubkey", "{binary}"), "public key"),
        (("verify", "nope", "--uri", "sqlite:///{db}", "--pubkey", "{pub}"), "no session 'nope'"),
        (("verify", "bad id!", "--uri", "sqlite:///{db}", "--pubkey", "{pub}"), "session id"),
        (("bundle", "verify", "{missing}/b.json", "--pubkey", "{pub}"), "cannot read"),
        (("bundle", "verify", "{tmp}", "--pubkey", "{pub}"), "cannot read"),
        (("bundle", "verify", "{db}", "--pubkey", "{pub}", "--max-bytes", "0"), "at least 1"),
    ],
)
def test_expected_errors_are_one_line_naming_what_to_do(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    db = tmp_path / "s.db"
    assert run("selfcheck", "--uri", f"sqlite:///{db}").returncode == 0  # a store, no session
    assert run("keygen", "-o", str(tmp_path / "k.pem")).returncode == 0
    (tmp_path / "bad.yml").write_text("rules:\n  - kind: ceiling\n  tool: [\n")
    (tmp_path / "rules.yml").write_text("rules:\n  - kind: ceiling\n    tool: t\n    argument: a\n")
    (tmp_path / "binary").write_bytes(b"\xff\xfe\x00\x81")
    names = {
        "missing": str(tmp_path / "missing"),
        "db": str(db),
        "pub": str(tmp_path / "k.pem.pub"),
        "bad_yaml": str(tmp_path / "bad.yml"),
        "bad_rules": str(tmp_path / "rules.yml"),
        "binary": str(tmp_path / "binary"),
        "tmp": str(tmp_path),
    }
    result = run(*(arg.format(**names) for arg in args))
    assert result.returncode == 1, result.stdout + result.stderr
    if "--max-bytes" not in args:  # argparse's usage line comes first there
        assert says.format(**names) in _one_line(result.stderr)
    else:
        assert says in result.stderr
    assert not (tmp_path / "missing").exists()


@pytest.mark.slow
def test_demo_errors_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    into_missing = run_process("demo", "--db", str(missing / "d.db"), cwd=tmp_path)
    assert into_missing.returncode == 1
    assert f"directory {missing} does not exist" in _one_line(into_missing.stderr)
    uri = run_process("demo", "--uri", f"sqlite:///{missing}/d.db", cwd=tmp_path)
    assert uri.returncode == 1
    assert "does not exist" in _one_line(uri.stderr)
    (tmp_path / "bad.yml").write_text("rules: [\n")
    rules = run_process("demo", "--rules", "bad.yml", cwd=tmp_path)
    assert rules.returncode == 1
    assert "invalid rules in bad.yml: not valid YAML" in _one_line(rules.stderr)
    policy = run_process("demo", "--policy", "missing.yml", cwd=tmp_path)
    assert policy.returncode == 1
    assert "cannot read policy missing.yml: No such file" in _one_line(policy.stderr)
    assert not missing.exists()
    assert not (tmp_path / "agentjournal.db").exists()


def test_read_only_commands_never_create_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run("keygen", "-o", str(tmp_path / "k.pem")).returncode == 0
    pub = str(tmp_path / "k.pem.pub")
    monkeypatch.chdir(tmp_path)  # the default store: ./agentjournal.db
    for args in (
        ("verify", "s-1", "--pubkey", pub),
        ("bundle", "export", "s-1", "-o", "b.json"),
        ("verify", "s-1", "--pubkey", pub, "--uri", "sqlite:///other.db"),
    ):
        result = run(*args)
        assert result.returncode == 1
        assert "no store at " in _one_line(result.stderr)
    from_env = run("verify", "s-1", "--pubkey", pub, env={"AGENTJOURNAL_URI": "sqlite:///e.db"})
    assert "no store at e.db" in _one_line(from_env.stderr)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    result = run("verify", "s-1", "--pubkey", pub, "--uri", f"sqlite:///{empty}")
    assert "no store at " in _one_line(result.stderr)
    assert empty.read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "k.pem", "k.pem.pub"]


@pytest.mark.slow
def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    quiet = run_process("keygen", "-o", str(tmp_path / "missing" / "k.pem"), cwd=tmp_path)
    assert quiet.returncode == 1
    _one_line(quiet.stderr)
    loud = run_process(
        "--debug", "bundle", "export", "s", "-o", "b.json", "--uri", "sqlite:///x.db", cwd=tmp_path
    )
    assert loud.returncode == 1
    assert "Traceback (most recent call last)" in loud.stderr
    assert "StoreUnavailable: no store at x.db" in loud.stderr
    after = run_process("verify", "s", "--allow-uncovered", "--debug", cwd=tmp_path)
    assert "Traceback (most recent call last)" in after.stderr  # --debug after the command too


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("show",), "the following arguments are required: session (see agentjournal show --help)"),
        (
            ("verify", "s-1", "--bogus"),
            "unrecognized arguments: --bogus (see agentjournal verify --help)",
        ),
        (("--bogus", "verify", "s-1"), "unrecognized arguments: --bogus (see agentjournal --help)"),
        (
            ("bundle", "export", "s-1", "-o", "b.json", "--zz"),
            "unrecognized arguments: --zz (see agentjournal bundle export --help)",
        ),
        (
            ("bundle",),
            "the following arguments are required: COMMAND (see agentjournal bundle --help)",
        ),
        (
            ("sessions", "--since"),
            "argument --since: expected one argument (see agentjournal sessions --help)",
        ),
        ((), "the following arguments are required: COMMAND (see agentjournal --help)"),
        (("nope",), "argument COMMAND: invalid choice: 'nope' (choose from "),
    ],
)
def test_a_command_line_the_parser_refuses_is_one_line_naming_the_help(
    args: tuple[str, ...], says: str
) -> None:
    done = run(*args)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(f"agentjournal: {says}"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
