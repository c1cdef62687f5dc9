"""The SDK's own generic session tests, run against JournalSession.

The tests ship in the ``openai-agents`` source distribution (not the wheel).
This module downloads the sdist of the installed version once (cached under
``$AGENTJOURNAL_SDK_TESTS_CACHE`` or ``~/.cache/agentjournal``), extracts
``tests/memory/test_session.py`` and ``tests/memory/test_session_limit.py``
with the helpers they import, drops in ``sdk_suite/sdk_conftest.py`` (which
swaps ``SQLiteSession`` for our session) and runs them with pytest in a
subprocess. None of the SDK's code is committed here.

Tests that probe ``SQLiteSession``'s private machinery (its worker-thread
connections, its process-local file lock, rows it corrupts with raw SQL on its
own tables) do not describe the ``Session`` contract and are deselected below,
each with the reason.
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the SDK's own session suite, fetched and run whole


HERE = Path(__file__).resolve().parent
VERSION = importlib.metadata.version("openai-agents")
CACHE = Path(
    os.environ.get("AGENTJOURNAL_SDK_TESTS_CACHE", Path.home() / ".cache" / "agentjournal")
)
WANTED = (
    "tests/__init__.py",
    "tests/test_responses.py",
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
)

SQLITE_SESSION_INTERNALS = {
    "test_sqlite_session_close_closes_worker_thread_connections": "its per-thread connections",
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": "its connections",
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": (
        "its per-thread connections"
    ),
    "test_sqlite_session_keeps_connections_of_live_worker_threads": "its per-thread connections",
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": "raw SQL on its agent_messages",
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
        "raw SQL on its agent_messages"
    ),
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": "raw SQL on its rows",
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (
        "raw SQL on its agent_messages"
    ),
    "test_sqlite_session_file_lock_is_shared_across_instances": "its process-local file lock",
    "test_sqlite_session_failed_add_items_releases_write_lock": "raw SQL on its agent_sessions",
    "test_sqlite_session_failed_clear_session_rolls_back": "monkeypatches its connections",
    "test_sqlite_session_failed_pop_item_releases_write_lock": "monkeypatches its connections",
    "test_sqlite_session_rollback_failure_evicts_connection": "monkeypatches its connections",
    "test_sqlite_session_close_retries_quarantined_connection": "monkeypatches its connections",
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": (
        "monkeypatches its connections"
    ),
}


def fetch_sdist(wanted: tuple[str, ...] = WANTED) -> Path:
    """Return the extracted SDK tests (``wanted`` among them), downloading the sdist on
    first use.

    Safe for several processes at once (``pytest -n``): one fetches while the others wait
    on a lock file, and each file appears whole (written aside, then renamed)."""
    root = CACHE / f"openai-agents-{VERSION}-tests"
    wanted = (*WANTED, *(name for name in wanted if name not in WANTED))
    if all((root / name).exists() for name in wanted):
        return root
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "fetch.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all((root / name).exists() for name in wanted):  # another process fetched it
            return root
        return _fetch(root, wanted)


def _fetch(root: Path, wanted: tuple[str, ...]) -> Path:
    download = CACHE / "downloads"
    download.mkdir(parents=True, exist_ok=True)
    archives = sorted(download.glob(f"openai_agents-{VERSION}.tar.gz"))
    if not archives:  # a later suite may want more of an sdist fetched before
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"openai-agents=={VERSION}",
                "-d",
                str(download),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        archives = sorted(download.glob(f"openai_agents-{VERSION}.tar.gz"))
        if result.returncode != 0 or not archives:
            pytest.skip(
                f"cannot download the openai-agents {VERSION} sdist: {result.stderr[-300:]}"
            )
    with tarfile.open(archives[0]) as archive:
        prefix = archive.getnames()[0].split("/")[0]
        for name in wanted:
            member = archive.getmember(f"{prefix}/{name}")
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            assert source is not None
            aside = target.with_name(f"{target.name}.{os.getpid()}.part")
            aside.write_bytes(source.read())
            aside.replace(target)
    return root


def test_sdk_session_tests_pass_against_journal_session(tmp_path: Path) -> None:
    sdk = fetch_sdist()
    work = tmp_path / "sdk"
    shutil.copytree(sdk, work)
    shutil.copy(HERE / "sdk_suite" / "sdk_conftest.py", work / "conftest.py")
    (work / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    deselect = [
        f"--deselect=tests/memory/test_session.py::{name}" for name in SQLITE_SESSION_INTERNALS
    ]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(work),
            *deselect,
            str(work / "tests" / "memory"),
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    print(result.stdout[-4000:])
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, summary
    assert int(passed.group(1)) >= 54, summary
    # 15 names; the post-commit cancellation test has three parameters.
    assert "17 deselected" in summary, summary
    assert "failed" not in summary, summary
    assert "error" not in summary, summary
