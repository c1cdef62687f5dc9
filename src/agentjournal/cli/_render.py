"""How the read commands print: rich tables, trees and progress on a terminal, plain text
when the output is a pipe or a file (so ``| grep`` and ``> file`` get no escape codes).

Every command that prints data goes through here, so "is this a terminal" is decided
in one place: ``NO_COLOR`` is honoured, and progress goes to stderr only when stderr
is a terminal (a pipe gets no progress at all).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, Protocol, TextIO

if TYPE_CHECKING:
    from rich.console import Console


def console(file: TextIO | None = None) -> Console:
    """A console on ``file`` (default stdout): styled on a terminal, plain text otherwise."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1; the command line makes a reader that left a quiet success
            raise BrokenPipeError

    out = file if file is not None else sys.stdout
    terminal = out.isatty()
    return _Console(
        file=out,
        force_terminal=terminal,
        no_color=None if terminal else True,  # None: rich honours $NO_COLOR itself
        highlight=False,
        soft_wrap=not terminal,  # a pipe gets whole lines, never wrapped at 80 columns
        width=None if terminal else 10_000,
    )


class Lines:
    """Standard output for a command that prints a table and lines of text: a rich console
    on a terminal; on a pipe or a file, rich is loaded only to print a line it would not
    print as it is (its import is some 15-40 ms of start-up that a script would pay for
    nothing).
    """

    def __init__(self, file: TextIO | None = None) -> None:
        self.file: TextIO = file if file is not None else sys.stdout
        self.is_terminal: bool = self.file.isatty()
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        """The rich console on this output (:func:`console`), made when first asked for."""
        if self._console is None:
            self._console = console(self.file)
        return self._console

    def line(self, text: str) -> None:
        """Print ``text`` and a line break, never read as markup: what
        ``console().print(text, markup=False, highlight=False)`` prints."""
        if self.is_terminal or not prints_as_is(text):
            self.console.print(text, markup=False, highlight=False)
            return
        self.file.write(text + "\n")
        self.file.flush()


def prints_as_is(text: str) -> bool:
    """Whether a plain console (:func:`console` on a pipe) prints ``text`` unchanged: printable
    ASCII (rich drops control codes and expands tabs) in which nothing reads as an emoji code
    (``:name:``) but the ``:24:`` of a time of day (no emoji is named by two digits or none)."""
    return (
        text.isascii()
        and text.isprintable()
        and all(
            len(name) <= 2 and (name == "" or name.isdigit())
            for _, name, _ in _EMOJI_CODE.findall(text)
        )
    )


_EMOJI_CODE: Final = re.compile(r"(:(\S*?)(?:(?:\-)(emoji|text))?:)")
"""What rich replaces by an emoji when its name is one (rich's ``_emoji_replace``)."""


def table(out: Console | Lines, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print rows under ``columns``: a rich table on a terminal, aligned plain text otherwise.

    A column of numbers (counts, costs, ``o/c/f`` triples; ``-`` and ``unknown`` for none)
    is right-aligned, so its digits line up.
    """
    from agentjournal._text import printable

    # Cells hold stored names (app, user, agent, model): shown escaped, never as markup.
    body = [[printable(str(cell)) for cell in row] for row in rows]
    right = [
        bool(body)
        and all(_NUMBER.fullmatch(line[at]) for line in body)
        and any(line[at][:1].isdigit() for line in body)
        for at in range(len(columns))
    ]
    if out.is_terminal:
        from rich.table import Table
        from rich.text import Text

        grid = Table(show_edge=False, header_style="bold")
        for name, numeric in zip(columns, right, strict=True):
            grid.add_column(name, justify="right" if numeric else "left")
        for line in body:
            grid.add_row(*(Text(cell) for cell in line))
        (out.console if isinstance(out, Lines) else out).print(grid)
        return
    cells = [list(map(str, columns)), *body]
    widths = [max(len(line[at]) for line in cells) for at in range(len(columns))]
    lines = [
        "  ".join(
            cell.rjust(width) if numeric else cell.ljust(width)
            for cell, width, numeric in zip(line, widths, right, strict=True)
        ).rstrip()
        + "\n"
        for line in cells
    ]
    # Plain text, written as it is: no markup, no emoji codes, one write (a console's
    # print per line costs a rendering each: seconds for 10,000 rows).
    out.file.write("".join(lines))
    out.file.flush()


_NUMBER: Final = re.compile(r"[0-9][0-9.,/]*|-|unknown")
"""A cell of a numeric column: digits (a count, a cost, ``0/2/0``), or none of them."""


TONE_STYLES: Final[dict[str, str]] = {
    "blocked": "bold red",
    "refused": "bold red",
    "failed": "red",
    "modified": "bold yellow",
    "allowed": "green",
}
"""How a decision or an outcome looks on a terminal (``read.views.Tone``): a BLOCK, a
refusal and a failure in red, a MODIFY in yellow, an ALLOW in green."""


class Progress(Protocol):
    """Advance a progress display by ``done`` units (events, sessions)."""

    def __call__(self, done: int) -> None: ...


@contextmanager
def progress(description: str, total: int | None = None) -> Iterator[Progress]:
    """A progress bar on stderr while a long read runs; a no-op when stderr is not a terminal."""
    if not sys.stderr.isatty():
        yield lambda done: None
        return
    from rich.console import Console
    from rich.progress import Progress as Bar

    with Bar(console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.advance(task, done)
