"""Shared fixtures: journals on every backend, the KurrentDB double; the README test is slow."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The README test installs the package into a fresh virtualenv and runs every block
    (about a minute): it is in the slow tier. Marked here, as test_readme.py is the README's
    own to keep."""
    for item in items:
        if item.path.name == "test_readme.py":
            item.add_marker(pytest.mark.slow)
