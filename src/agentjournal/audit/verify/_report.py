"""What a verification found: :class:`Problem` (one failed check, where and what) and
:class:`Report` (the lines each stage sums up with, every problem, and the
:class:`~agentjournal.ledger.integrity.Integrity` they conclude)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentjournal._text import printable
from agentjournal.ledger.integrity import Integrity


@dataclass(frozen=True)
class Problem:
    """One failed check: where, and what.

    ``untrusted`` marks the one problem that says only that no checkpoint is signed by
    a trusted key (nothing in the record is wrong): it makes the state ``untrusted`` or
    ``unsigned`` rather than ``failed``.
    """

    check: str
    stream: str
    revision: int | None
    message: str
    untrusted: bool = False

    def __str__(self) -> str:
        where = self.stream if self.revision is None else f"{self.stream}@{self.revision}"
        return f"{where}: {self.message} ({self.check})"


@dataclass
class Report:
    """What verification found.

    Attributes:
        lines: What each stage sums up with.
        problems: Every failed check, in the order found.
        signers: The trusted keys that signed a checkpoint (the checkpoints stage).
        foreign: The keys of checkpoints not counted: not trusted, nor rotated to.
        uncovered: How many events after the newest trusted checkpoint were accepted
            uncovered (``allow_uncovered``; the checkpoints stage sets it).
    """

    lines: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    signers: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    uncovered: int = 0

    @property
    def ok(self) -> bool:
        """Whether nothing failed (an untrusted or unsigned record fails unless allowed)."""
        return not self.problems

    @property
    def integrity(self) -> Integrity:
        """The state this report concludes (see :class:`Integrity`)."""
        failed = next((p for p in self.problems if not p.untrusted), None)
        if failed is not None:
            return Integrity("failed", problem=str(failed))
        if self.signers:
            return Integrity("verified", tuple(self.signers), uncovered=self.uncovered)
        if self.foreign:
            return Integrity("untrusted", tuple(self.foreign))
        return Integrity("unsigned")

    def fail(
        self,
        check: str,
        stream: str,
        revision: int | None,
        message: str,
        *,
        untrusted: bool = False,
    ) -> None:
        self.problems.append(Problem(check, stream, revision, message, untrusted))

    def extend(self, later: Report) -> None:
        """Add what ``later`` found after what this report found: its lines and problems
        after these, and its signers, foreign keys and uncovered events (the checkpoints
        stage sets them)."""
        self.lines += later.lines
        self.problems += later.problems
        self.signers, self.foreign = later.signers or self.signers, later.foreign or self.foreign
        self.uncovered = later.uncovered or self.uncovered

    def model_checked(self, found: tuple[str, str | None] | None, stream: str) -> None:
        """Add the read-model comparison (``read.replay.check_read_model``): its line, and
        its problem as a failure on ``stream`` (None: the store keeps no read model)."""
        if found is None:
            return
        line, problem = found
        self.lines.append(line)
        if problem is not None:
            self.fail("read model", stream, None, problem)

    def failed(self, check: str) -> bool:
        """Whether a check of this kind has failed."""
        return any(problem.check == check for problem in self.problems)

    def text(self) -> str:
        """The readable report, ending with the integrity state in one line."""
        out = list(self.lines)
        shown = [problem for problem in self.problems if not problem.untrusted]
        out.extend(f"  problem: {problem}" for problem in shown[:20])
        if len(shown) > 20:
            out.append(f"  ... and {len(shown) - 20} more")
        out.append(self.integrity.text())
        # Forged data reaches messages (an event's type, a stream's name): each line is
        # shown with its control characters escaped, so none starts a line of its own, and
        # lone surrogates escaped, never a crash.
        text = "\n".join(printable(line) for line in out)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
