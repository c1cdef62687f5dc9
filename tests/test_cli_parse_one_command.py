"""Parsing with the named command's module alone (``cli.parse``): every command line comes
out as the whole parser makes it (the same arguments, the same help, the same error and
exit code), and a command does not import the other commands' modules."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import cli

_ROOT = Path(__file__).resolve().parents[1]


def _outcome(parse: Any, argv: list[str]) -> tuple[Any, ...]:
    """What parsing ``argv`` does: the arguments, or the exit code and what was printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            parsed = parse(argv)
        except SystemExit as stop:
            return ("exit", stop.code, out.getvalue(), err.getvalue())
    return ("parsed", sorted((name, _same(value)) for name, value in vars(parsed).items()))


def _same(value: Any) -> Any:
    """A value to compare: a function made by each parser's ``register`` as what it runs."""
    if not callable(value):
        return value
    cells = tuple(_same(cell.cell_contents) for cell in value.__closure__ or ())
    return (value.__module__, value.__qualname__, value.__code__, cells)


def _whole(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser().parse_args(argv)


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, ...]]:
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _leaves(child, (*path, name))


def test_each_command_is_looked_up_in_the_module_that_adds_it() -> None:
    added = {
        name: module
        for module in cli._MODULES
        for name in _commands(cli._parser([module], cli._Parser))
    }
    assert added == cli._MODULE_OF
    assert list(_commands(cli.build_parser())) == list(added)  # --help's order


def test_every_command_s_help_is_the_whole_parser_s() -> None:
    paths = list(_leaves(cli.build_parser()))[1:]
    assert len(paths) > len(cli._MODULES)
    for path in paths:
        for argv in ([*path, "--help"], ["--debug", *path, "-h"]):
            one = _outcome(cli.parse, argv)
            assert one == _outcome(_whole, argv), argv
            assert one[:2] == ("exit", 0)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["sessions", "--bogus"],
        ["sessions", "--since"],
        ["sessions", "extra"],
        ["sessions", "--version"],
        ["--debug", "show"],
        ["bundle"],
        ["bundle", "verify"],
        ["fork", "s-1", "--at", "x"],
        ["fork", "s-1"],
        ["replay", "s-1", "--limit", "-1"],
        ["approve", "s-1"],
        ["view", "s-1"],
        ["eval", "nope"],
        ["--debug", "--debug", "verify", "--bogus"],
        ["nope"],
        ["--", "sessions"],
    ],
)
def test_a_faulty_command_line_is_refused_as_the_whole_parser_refuses_it(
    argv: list[str],
) -> None:
    one = _outcome(cli.parse, argv)
    assert one == _outcome(_whole, argv)
    assert one[:2] == ("exit", 1)


_TOKENS = [
    *cli._MODULE_OF,
    *("export", "verify", "serve", "run", "show", "list"),
    *("--debug", "--deb", "--json", "--fresh", "--app", "--since", "--pubkey", "--uri", "--at"),
    *("--limit", "--branch", "--all", "--as", "-o", "--help", "--version", "-h", "--"),
    *("s-1", "7", "-1", "x", "sqlite:///none.db", "2h"),
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_TOKENS), max_size=6))
def test_any_command_line_parses_as_the_whole_parser_parses_it(argv: list[str]) -> None:
    assert _outcome(cli.parse, argv) == _outcome(_whole, argv)


def test_sessions_imports_no_other_command_module(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from agentjournal.cli import main\n"
        "main(sys.argv[1:])\n"
        "print(sorted(name for name in sys.modules if name.startswith('agentjournal.cli.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "sessions", "--uri", f"sqlite:///{tmp_path / 'none.db'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(_ROOT / "src")},
    )
    loaded = done.stdout.splitlines()[-1]
    assert loaded == str(
        ["agentjournal.cli._common", "agentjournal.cli._render", "agentjournal.cli.sessions"]
    ), done.stderr
