"""The integrity of a session as a reader is told it: one of four states (pure).

``verify``, ``bundle verify``, ``sessions``, ``show``, the viewer and its exported file all
name a session's integrity with :class:`Integrity`, so the same record reads the same
everywhere: verified (by a trusted key, named), signed by an untrusted key, unsigned, or
FAILED (with the first failure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = ["STATES", "Integrity", "IntegrityState"]

IntegrityState = Literal["verified", "untrusted", "unsigned", "failed"]
"""The four integrity states, in the words :class:`Integrity` names them with."""

STATES: Final[tuple[IntegrityState, ...]] = ("verified", "untrusted", "unsigned", "failed")


@dataclass(frozen=True)
class Integrity:
    """What a verification concludes, in one of four states.

    Attributes:
        state: ``verified`` (every check holds and a trusted key signed the checkpoints),
            ``untrusted`` (the record holds, but its checkpoints are signed only by keys
            the reader did not trust), ``unsigned`` (the hash chains hold, but no
            checkpoint signs them: anyone who can write the store could rewrite them) or
            ``failed`` (a check failed).
        keys: The key ids that signed checkpoints: trusted ones when verified, the
            untrusted ones otherwise.
        problem: The first failure, where and what (``failed`` only).
        uncovered: Events after the newest checkpoint, which no signature covers, that the
            reader accepted (``verified`` only, with ``--allow-uncovered``): the record is
            verified up to that checkpoint, and the line says so.
    """

    state: IntegrityState
    keys: tuple[str, ...] = ()
    problem: str | None = None
    uncovered: int = 0

    def text(self) -> str:
        """One line: the state in capitals, and what it rests on."""
        keys = ", ".join(self.keys)
        if self.state == "verified" and self.uncovered:
            after = (
                "1 event after it is"
                if self.uncovered == 1
                else f"{self.uncovered:,} events after it are"
            )
            return (
                f"VERIFIED UP TO THE NEWEST CHECKPOINT: checkpoints signed by {keys}, a trusted "
                f"key; {after} signed by no trusted key"
            )
        if self.state == "verified":
            return f"VERIFIED: checkpoints signed by {keys}, a trusted key"
        if self.state == "untrusted":
            return (
                f"SIGNED BY AN UNTRUSTED KEY: {keys}; its signatures count only once you "
                "trust that public key (--pubkey)"
            )
        if self.state == "unsigned":
            return (
                "UNSIGNED: the hash chains hold, but no checkpoint signs them: whoever can "
                "write the store could rewrite them"
            )
        return f"FAILED: {self.problem}"

    def as_dict(self) -> dict[str, Any]:
        """Plain data: ``state``, ``keys``, ``text`` and ``problem`` (its text, or None)."""
        return {
            "state": self.state,
            "keys": list(self.keys),
            "text": self.text(),
            "problem": self.problem,
        }
