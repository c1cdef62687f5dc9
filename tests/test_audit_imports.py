"""Importing the offline audit (the verifier, the bundle format) loads no event loop, no
database driver, no HTTP client, no pydantic, no Agents SDK, no store backend, no tree walk
and no engine: verifying a file needs none of them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

FORBIDDEN = (
    "asyncio",
    "sqlite3",
    "_sqlite3",
    "httpx",
    "pydantic",
    "agents",
    "agentjournal.store.sqlite",
    "agentjournal.store.kurrentdb",
    "agentjournal.engine",
    "agentjournal.walk",
)


def _imported(module: str) -> list[str]:
    """Every module ``python -X importtime`` reports importing ``module`` in a fresh
    interpreter with this one's ``sys.path``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    names = [
        line.rsplit("|", 1)[1].strip()
        for line in out.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    ]
    assert module in names  # the probe can fail: it does see what is imported
    return names


def _forbidden(names: list[str]) -> list[str]:
    return [n for n in names if any(n == f or n.startswith(f"{f}.") for f in FORBIDDEN)]


@pytest.mark.parametrize("module", ["agentjournal.audit.verify", "agentjournal.audit.bundle"])
def test_importing_the_audit_loads_nothing_heavy(module: str) -> None:
    assert _forbidden(_imported(module)) == []


def test_the_probe_sees_a_heavy_import() -> None:
    """The check above can fail: the store's sqlite backend does load sqlite3 and asyncio."""
    found = _forbidden(_imported("agentjournal.store.sqlite"))
    assert "sqlite3" in found
    assert "asyncio" in found
