"""README.md and the docs pages, run as written: every shell block, in order, in a fresh copy of
the repository (README.md first, then each page of :data:`PAGES`).

The blocks run in one bash process (so ``. .venv/bin/activate`` and ``export`` carry over, as
in a reader's terminal); every command is checked, and the first that fails names its block
and README line. The install step really runs: a fresh virtualenv and ``pip install -e .``
(about 20 s with pip's cache warm, as it is after CI's own install).

A block the test must treat differently says so in README.md, in an HTML comment on the line
before it, so a reader sees it too:

* ``<!-- readme-test: skip: REASON -->`` — not run here (Docker, a real KurrentDB server, the
  test suite itself, minutes of benchmarks). :data:`SKIPPED` lists exactly which blocks may be
  skipped and why, so nothing else can be skipped silently.
* ``<!-- readme-test: background: REASON -->`` — a long-running service: started in the
  background, waited for until it prints its first line, and stopped by its PID at the end.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [
    "README.md",
    "docs/commands.md",
    "docs/branches.md",
    "docs/runner.md",
    "docs/viewer.md",
    "docs/kurrentdb.md",
    "docs/experiments.md",
]
"""The documents whose shell blocks run, in this order (a later page uses what an earlier made)."""
SHELLS = ("bash", "sh", "shell", "console")
MARK = re.compile(r"^<!-- readme-test: (skip|background): (.+) -->$")

SKIPPED = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest -n 2": (
        "the test suite itself"
    ),
    "docker compose up -d": "needs Docker",
    'agentjournal selfcheck --uri "kurrentdb://127.0.0.1:2113?Tls=false"': "KurrentDB server",
    'KURRENTDB_URI="kurrentdb://127.0.0.1:2113?Tls=false" pytest -m kurrentdb_server -ra': (
        "KurrentDB server"
    ),
}
"""First command of each block the test skips (without its comment) -> what its reason says."""
BACKGROUND = {
    "agentjournal guardrail serve --port 0 --rules samples/guardrail-rules.yml",
    "agentjournal ui --port 0 --pubkey journal.pem.pub",
}
"""First command of each block run as a background service."""


@dataclass(frozen=True)
class Block:
    """One fenced shell block of the README."""

    page: str  # the document, e.g. "README.md"
    line: int  # of the opening fence, 1-based
    commands: tuple[str, ...]  # logical lines: continuations joined, blank lines and comments out
    first: str  # the block's first command, without a trailing comment
    mark: str | None  # "skip", "background" or None
    reason: str


def readme_blocks(text: str, page: str = "README.md") -> list[Block]:
    """Every shell block of ``text`` (the document ``page``), with the mark before it."""
    lines = text.splitlines()
    blocks: list[Block] = []
    number = 0
    while number < len(lines):
        line = lines[number]
        fence = line.strip()
        if fence.startswith("```"):
            body: list[str] = []
            number += 1
            while not lines[number].strip().startswith("```"):
                body.append(lines[number])
                number += 1
            if lines[number].strip() != "```":  # CommonMark would not close the block here
                raise AssertionError(f"{page}:{number + 1}: text after a closing fence")
            if fence[3:].strip() not in SHELLS:
                number += 1
                continue
            before = lines[number - len(body) - 2] if number - len(body) - 2 >= 0 else ""
            found = MARK.match(before.strip())
            blocks.append(
                Block(
                    page=page,
                    line=number - len(body),
                    commands=_commands(body),
                    first=re.sub(r"\s+#.*$", "", body[0].strip()) if body else "",
                    mark=found.group(1) if found else None,
                    reason=found.group(2) if found else "",
                )
            )
        elif "readme-test" in line and not MARK.match(line.strip()):
            raise AssertionError(f"{page}:{number + 1}: malformed readme-test mark: {line}")
        elif MARK.match(line.strip()) and not lines[number + 1].strip().startswith("```"):
            raise AssertionError(f"{page}:{number + 1}: a readme-test mark not before a block")
        number += 1
    return blocks


def _commands(body: list[str]) -> tuple[str, ...]:
    commands: list[str] = []
    pending = ""
    for raw in body:
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1].strip() + " "
            continue
        command = pending + raw.strip()
        pending = ""
        if command and not command.startswith("#"):
            commands.append(command)
    return tuple(commands)


def _script(blocks: list[Block], pids: Path, logs: Path) -> str:
    """One bash script running the blocks in order, checking every command."""
    out = [
        'fail() { echo "the block at $1 failed (exit $2): $3" >&2; exit 1; }',
    ]
    for block in blocks:
        if block.mark == "skip":
            continue
        where = f"{block.page}:{block.line}"
        out.append(f"echo '::: block at {where}'")
        for command in block.commands:
            quoted = shlex.quote(command)
            if block.mark == "background":
                log = logs / f"service-{block.page.replace('/', '-')}-{block.line}.log"
                out += [
                    f"{command} > {log} 2>&1 &",
                    f"echo $! >> {pids}",
                    # Wait for its first line: the address it listens on.
                    "for _ in $(seq 300); do "
                    f"[ -s {log} ] && break; "
                    f"kill -0 $! 2>/dev/null || fail {where} 1 {quoted}; "
                    "sleep 0.1; done",
                    f"[ -s {log} ] || fail {where} 1 {quoted}",
                    f"cat {log}",
                ]
            else:
                out += [
                    command,
                    f"status=$?; [ $status -eq 0 ] || fail {where} $status {quoted}",
                ]
    out.append("echo '::: README done'")
    return "\n".join(out) + "\n"


def _environment() -> dict[str, str]:
    """This environment without our virtualenv or agentjournal settings: a reader's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTJOURNAL_", "KURRENTDB_"))}
    venv = env.pop("VIRTUAL_ENV", None)
    if venv:
        env["PATH"] = os.pathsep.join(
            part for part in env.get("PATH", "").split(os.pathsep) if not part.startswith(venv)
        )
    env.pop("PYTHONPATH", None)
    return env


def _fresh_copy(target: Path) -> Path:
    shutil.copytree(
        ROOT,
        target,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv",
            "venv",
            "__pycache__",
            "*.egg-info",
            ".mypy_cache",
            ".ruff_cache",
            ".pytest_cache",
            ".hypothesis",
            "*.db",
            "*.db-wal",
            "*.db-shm",
            "*.pem",
            "*.pem.pub",
            "*.partial",
            "results",
            "dist",
            "build",
        ),
    )
    return target


def all_blocks() -> list[Block]:
    """The shell blocks of every page of :data:`PAGES`, in order."""
    return [
        block
        for page in PAGES
        for block in readme_blocks((ROOT / page).read_text(encoding="utf-8"), page)
    ]


def test_every_page_with_a_shell_block_is_run() -> None:
    pages = ["README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")))]
    with_blocks = {
        page for page in pages if readme_blocks((ROOT / page).read_text(encoding="utf-8"), page)
    }
    assert with_blocks <= set(PAGES), with_blocks - set(PAGES)


def test_marks_say_exactly_which_blocks_are_skipped_and_why() -> None:
    blocks = all_blocks()
    skipped = {b.first: b.reason for b in blocks if b.mark == "skip"}
    assert set(skipped) == set(SKIPPED), "README.md skips other blocks than this test expects"
    for first, reason in skipped.items():
        assert SKIPPED[first] in reason, (first, reason)
    assert {b.first for b in blocks if b.mark == "background"} == BACKGROUND
    assert all(b.commands for b in blocks), "an empty shell block"
    assert len([b for b in blocks if b.mark is None]) >= 3


def test_the_readme_runs_as_written(tmp_path: Path) -> None:
    blocks = all_blocks()
    repo = _fresh_copy(tmp_path / "agentjournal")
    pids, logs = tmp_path / "pids", tmp_path
    script = tmp_path / "readme.sh"
    script.write_text(_script(blocks, pids, logs), encoding="utf-8")
    try:
        result = subprocess.run(
            ["bash", str(script)],
            cwd=repo,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        # While the service still runs: it answers where it said it listens.
        for log in logs.glob("service-*.log"):
            first = log.read_text(encoding="utf-8").splitlines()[0]
            viewer = re.search(r"serving (http://\S+/) \(read-only\)", first)
            if viewer is not None:  # agentjournal ui: the demo's session is there
                page = viewer.group(1) + "sessions/support-4711"
                with urllib.request.urlopen(page, timeout=30) as response:
                    assert "support-4711" in response.read().decode("utf-8")
                continue
            url = re.search(r"http://\S+/v1/validate", first)
            assert url is not None, first
            health = url.group(0).replace("/v1/validate", "/health")
            with urllib.request.urlopen(health, timeout=10) as response:
                assert json.load(response) == {"status": "ok"}
    finally:
        stopped = _stop(pids)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-6000:]
    out = result.stdout
    assert out.rstrip().endswith("::: README done")
    assert stopped, "no background service was started"
    # The demo's own check, and every verification the README runs, said OK.
    assert re.search(r"reference guardrail on http://127\.0\.0\.1:\d+/v1/validate \(4 rules\)", out)
    assert re.search(
        r"delegation: 1 policy recorded \(sha256:[0-9a-f]{64}\); 5 grants, each recomputed", out
    )
    # verify in the store, bundle verify, after the rotation
    assert len(re.findall(r"^VERIFIED: checkpoints signed by ed25519:", out, re.MULTILINE)) >= 3
    assert "1 policy recorded (the one given)" in out  # verify --policy
    assert "keys: 1 trusted key given; 1 rotation recorded" in out  # the first key was enough
    hint = f"verify it yourself: agentjournal verify support-4711 --pubkey {repo}/journal.pem.pub"
    assert hint in out  # the key of $AGENTJOURNAL_SIGNING_KEY_FILE, named as the README did
    # `agentjournal sessions`: both demo sessions verify cheaply, the second through the
    # recorded rotation (or the configured key).
    for session in ("support-4712", "support-4711"):
        assert re.search(rf"^{session}\s.*\sverified$", out, re.MULTILINE), session
    assert (repo / "agentjournal.db").exists()
    assert (repo / "bundle.json").exists()
    bundle = json.loads((repo / "bundle.json").read_text(encoding="utf-8"))
    assert bundle["redacted"] is True


def _stop(pids: Path) -> list[int]:
    """Stop every background service by its PID; return the PIDs that were stopped."""
    if not pids.exists():
        return []
    stopped = []
    for text in pids.read_text().split():
        pid = int(text)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        stopped.append(pid)
        for _ in range(100):  # up to 10 s for a graceful exit
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
    return stopped


def test_readme_parser_sees_marks_and_continuations() -> None:
    text = "\n".join(
        [
            "<!-- readme-test: skip: not here -->",
            "```bash",
            "echo one \\",
            "  two   # joined",
            "# a comment",
            "```",
            "```python",
            "print('not shell')",
            "```",
            "```bash",
            "echo three",
            "```",
        ]
    )
    first, second = readme_blocks(text)
    assert (first.mark, first.reason, first.commands) == (
        "skip",
        "not here",
        ("echo one two   # joined",),
    )
    assert (second.mark, second.commands, second.line) == (None, ("echo three",), 10)


def approvals_block(text: str) -> str:
    """The Python block of README's "Approvals" section."""
    section = text.split("\n## Approvals\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_approvals_block_runs_offline_as_written(tmp_path: Path) -> None:
    """The README's approval flow: the run stops, is held, approved by alice and resumed."""
    import sys

    script = tmp_path / "approvals.py"
    script.write_text(approvals_block(README.read_text(encoding="utf-8")), encoding="utf-8")
    env = {**_environment(), "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        'billing asks to run issue_refund {"order_id":"42","amount_cents":1250}\n'
        "Refunded 12.50 EUR.\n"
    )
    assert list(tmp_path.iterdir()) == [script]  # an in-memory store: nothing written here
