"""Loading a user's Python file as a module, as ``--tools FILE`` and ``--candidate FILE`` do."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentjournal._modules import load_file
from agentjournal.errors import InvalidInput


def test_a_file_loads_once_per_process(tmp_path: Path) -> None:
    path = tmp_path / "tools.py"
    path.write_text("import itertools\nCOUNT = next(itertools.count())\nVALUE = object()\n")
    first = load_file(path.resolve(), "test_modules", "--tools tools.py")
    assert load_file(path.resolve(), "test_modules", "--tools tools.py") is first


def test_a_file_that_raises_is_reported_in_one_line_and_leaves_no_module(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('no\\ntools here')\n")
    before = set(sys.modules)
    with pytest.raises(InvalidInput) as raised:
        load_file(path.resolve(), "test_modules", "--tools broken.py")
    assert str(raised.value) == (
        "--tools broken.py: importing broken.py failed: RuntimeError: no\\ntools here"
    )
    assert set(sys.modules) == before


def test_a_file_that_exits_leaves_no_module_and_the_exit_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "exits.py"
    path.write_text("x = 1\nraise SystemExit(3)\ny = 2\n")
    before = set(sys.modules)
    with pytest.raises(SystemExit):
        load_file(path.resolve(), "test_modules", "--tools exits.py")
    assert set(sys.modules) == before
