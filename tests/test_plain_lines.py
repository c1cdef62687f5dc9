"""Lines on a pipe: what ``cli._render.Lines`` writes itself is exactly what the rich console
it stands for prints, and ``agentjournal sessions`` to a pipe does not load rich at all."""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich._emoji_codes import EMOJI

from agentjournal.cli._render import Lines, console, prints_as_is, table

_ROOT = Path(__file__).resolve().parents[1]


def _by_rich(text: str) -> str:
    out = io.StringIO()
    console(out).print(text, markup=False, highlight=False)
    return out.getvalue()


def _by_lines(text: str) -> str:
    out = io.StringIO()
    Lines(out).line(text)
    return out.getvalue()


# Text where emoji codes, times, control codes, tabs and markup are likely.
_TEXT = st.lists(
    st.sampled_from(
        [
            *"ab :-0123456789[]/\\\t\r\x07\x1b\u00e9\u2192",
            *(":smile:", ":100:", ":+1:", ":-1:", ":24:", ":thumbs_up-text:", "[bold]", "::"),
        ]
    ),
    max_size=40,
).map("".join)


@given(_TEXT)
def test_a_line_on_a_pipe_is_what_the_rich_console_prints(text: str) -> None:
    assert _by_lines(text) == _by_rich(text)


@given(_TEXT)
def test_a_line_written_as_it_is_is_printed_unchanged_by_rich(text: str) -> None:
    if prints_as_is(text):
        assert _by_rich(text) == text + "\n"


@pytest.mark.parametrize(
    "text",
    [
        "integrity: every chain link (the oldest fold 2026-12-06 05:24:55 UTC); `--fresh`",
        "  it-000001: checkpoint 3 signed by an untrusted key",
        "no sessions match",
    ],
)
def test_the_sessions_lines_are_written_without_rich(text: str) -> None:
    assert prints_as_is(text)
    assert _by_lines(text) == _by_rich(text)


@pytest.mark.parametrize("text", [":smile:", ":100:", "a\tb", "caf\u00e9", "\x1b[1mbold", ":+1:"])
def test_what_rich_may_change_goes_through_rich(text: str) -> None:
    assert not prints_as_is(text)
    assert _by_lines(text) == _by_rich(text)


def test_no_emoji_is_named_by_two_digits_or_none() -> None:
    # prints_as_is lets ``:24:`` (a time of day) through on this: an emoji so named in a
    # newer rich would make it wrong, and this test says so.
    assert not [name for name in EMOJI if len(name) <= 2 and (name == "" or name.isdigit())]


def test_a_table_on_lines_is_the_table_on_a_console() -> None:
    columns, rows = ("session", "items"), [("s-1", 3), ("s-22", 14)]
    by_console, by_lines = io.StringIO(), io.StringIO()
    table(console(by_console), columns, rows)
    table(Lines(by_lines), columns, rows)
    assert by_lines.getvalue() == by_console.getvalue()


def test_sessions_to_a_pipe_does_not_load_rich(tmp_path: Path) -> None:
    from agentjournal import Journal

    uri = f"sqlite:///{tmp_path / 'listed.db'}"

    async def write() -> None:
        async with Journal.open(uri) as journal:
            await journal.session("s-1").add_items([{"role": "user", "content": "hi"}])

    asyncio.run(write())
    probe = (
        "import sys\n"
        "from agentjournal.cli import main\n"
        "code = main(sys.argv[1:])\n"
        "print(sorted(name for name in sys.modules if name.startswith('rich')), file=sys.stderr)\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "sessions", "--uri", uri],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(_ROOT / "src")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].startswith("s-1 ")
    assert done.stderr.splitlines()[-1] == "[]", done.stderr
