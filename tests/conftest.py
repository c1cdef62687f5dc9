"""Shared fixtures: journals on every backend, the KurrentDB double; what the slow tier takes."""

from __future__ import annotations

import compileall
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import agentjournal
from agentjournal import Journal
from agentjournal.testing.kurrentdb_double import KurrentDBDouble, ThreadedKurrentDBDouble


@pytest.fixture
def kurrentdb_double() -> Iterator[ThreadedKurrentDBDouble]:
    """A fresh, empty KurrentDB double served from its own thread."""
    with KurrentDBDouble.in_thread() as double:
        yield double


@pytest.fixture(params=["sqlite-file", "sqlite-memory", "kurrentdb"])
def journal_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A journal URI on each backend, each test on an empty store."""
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'journal.db'}"
    if request.param == "sqlite-memory":
        return "sqlite://:memory:"
    double: ThreadedKurrentDBDouble = request.getfixturevalue("kurrentdb_double")
    return double.uri


@pytest.fixture
async def journal(journal_uri: str) -> AsyncIterator[Journal]:
    """An open journal on each backend."""
    async with Journal.open(journal_uri) as journal:
        yield journal


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package's modules where no current bytecode is, once, before any worker
    starts: the commands the tests start as fresh processes then start as from an installed
    package (pip compiles at install), not each compiling every module it imports, as an
    editable install under ``PYTHONDONTWRITEBYTECODE`` would."""
    if not hasattr(config, "workerinput"):  # pytest-xdist's controller, or a run without it
        compileall.compile_dir(Path(agentjournal.__file__).parent, quiet=1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tier also takes, outside the files about KurrentDB itself, the KurrentDB
    double's case and the in-memory SQLite case of every test run on each backend (gRPC on
    loopback costs several times SQLite's; the fast tier keeps SQLite on a file and the
    double's own files, so every module is still covered there). And the README test,
    which installs the package into a fresh virtualenv and runs every block (about a
    minute): marked here, as test_readme.py is the README's own to keep."""
    for item in items:
        if item.path.name == "test_readme.py":
            item.add_marker(pytest.mark.slow)
            continue
        callspec = getattr(item, "callspec", None)
        if (
            callspec is not None
            and "kurrentdb" not in item.path.name
            and ("sqlite-memory" in callspec.id or "kurrentdb" in re.split(r"[-\[\]]", callspec.id))
        ):
            item.add_marker(pytest.mark.slow)
