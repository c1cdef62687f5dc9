"""What a verification found: :class:`Problem` (one failed check, where and what) and
:class:`Report` (the lines each stage sums up with, and every problem)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One failed check: where, and what."""

    check: str
    stream: str
    revision: int | None
    message: str

    def __str__(self) -> str:
        where = self.stream if self.revision is None else f"{self.stream}@{self.revision}"
        return f"{where}: {self.message} ({self.check})"


@dataclass
class Report:
    """What verification found."""

    lines: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def fail(self, check: str, stream: str, revision: int | None, message: str) -> None:
        self.problems.append(Problem(check, stream, revision, message))

    def failed(self, check: str) -> bool:
        """Whether a check of this kind has failed."""
        return any(problem.check == check for problem in self.problems)

    def text(self) -> str:
        """The readable report, ending with OK or FAILED and the first problem."""
        out = list(self.lines)
        out.extend(f"  problem: {problem}" for problem in self.problems[:20])
        if len(self.problems) > 20:
            out.append(f"  ... and {len(self.problems) - 20} more")
        out.append("OK" if self.ok else f"FAILED: {self.problems[0]}")
        # Forged data can carry lone surrogates into a message: shown escaped, never a crash.
        return "\n".join(out).encode("utf-8", "backslashreplace").decode("utf-8")
