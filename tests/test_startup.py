"""Start-up: bad input is refused before the Agents SDK is loaded, and a command that must
load it says so first. (How long each command takes to its first line is measured by
``bench/startup.py``, not asserted here.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "samples" / "manifests"

# The command line in a fresh process that says, last on stderr, whether it loaded the SDK.
_PROBE = (
    "import sys\n"
    "from agentjournal.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print('SDK LOADED' if 'agents' in sys.modules else 'SDK NOT LOADED', file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _probe(*args: str, cwd: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PROBE, *args],
        cwd=cwd,
        input=stdin.decode(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("demo", "--policy", "missing.yml"), "missing.yml"),
        (("demo", "--rules", "missing.yml"), "cannot read rules missing.yml"),
        (("demo", "--session", "not an id"), "session id"),
        (("demo", "--uri", "foo://x"), "unknown store URI 'foo'"),
        (("demo", "--uri", "sqlite:///nodir/x.db"), "directory"),
        (("demo", "--uri", "sqlite:///x.db?bad=1"), "the one option is ?compress=zstd"),
    ],
)
def test_demo_refuses_bad_input_before_loading_the_sdk_and_writes_nothing(
    tmp_path: Path, args: tuple[str, ...], message: str
) -> None:
    done = _probe(*args, cwd=tmp_path)
    assert done.returncode == 1
    error, probe = done.stderr.strip().splitlines()
    assert error.startswith("agentjournal: ")
    assert message in error
    assert probe == "SDK NOT LOADED"
    assert done.stdout == ""  # not even the session's line
    assert list(tmp_path.iterdir()) == []  # no store, no key


def test_run_refuses_missing_manifests_before_loading_the_sdk(tmp_path: Path) -> None:
    request = (MANIFESTS / "request.json").read_bytes()
    done = _probe("run", "--manifests", "missing", "--agent", "x", cwd=tmp_path, stdin=request)
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["code"] == "INVALID_MANIFEST"
    assert done.stderr.strip().splitlines()[-1] == "SDK NOT LOADED"


@pytest.mark.slow
def test_demo_names_its_session_before_it_loads_the_sdk(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", "demo", "--session", "s-1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "session s-1 in sqlite:///agentjournal.db"
    assert lines[1].startswith("guardrail service http://127.0.0.1:")
    assert lines[-1].startswith("done in ")
    assert done.stderr == ""  # progress is for a terminal only
