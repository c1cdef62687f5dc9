"""``write_atomically`` writes a text or its pieces alike, and never leaves half a file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentjournal.cli._common import write_atomically

PIECES = ['{"a": 1}\n', "é\u2028😀\n", "", "last line, no newline"]


def test_the_pieces_of_a_text_are_written_as_the_text(tmp_path: Path) -> None:
    whole, pieces = tmp_path / "whole.jsonl", tmp_path / "pieces.jsonl"
    write_atomically(str(whole), "".join(PIECES))
    write_atomically(str(pieces), PIECES)
    assert pieces.read_bytes() == whole.read_bytes() == "".join(PIECES).encode()


def test_pieces_that_fail_midway_leave_the_old_file_and_no_partial(tmp_path: Path) -> None:
    target = tmp_path / "out.jsonl"
    target.write_text("old\n")

    def failing() -> Iterator[str]:
        yield "new\n"
        raise RuntimeError("the producer failed")

    with pytest.raises(RuntimeError):
        write_atomically(str(target), failing())
    assert target.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [target]
