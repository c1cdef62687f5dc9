"""People's ratings of a session's turns, on the record (``JournalSession.score``).

A rating is a ``TurnScored`` marked human, with who gave it, on the session's feedback run
``EvalRun-feedback-{session}`` (:func:`agentjournal.engine.evals.record_rating`): the same
canonical events an eval run writes, chained, sealed under the session's subject key when
the session's content is, and signed with the session's key when it has one.
"""

from __future__ import annotations

import uuid
from typing import Any

from agentjournal.engine.eval_events import LABEL, TurnScore, checked_score, label_of
from agentjournal.engine.evals import record_rating, session_sealer
from agentjournal.errors import InvalidInput
from agentjournal.ledger.keys import SigningKey
from agentjournal.read.evals.turns import session_turns
from agentjournal.shred.sealing import SubjectSealer
from agentjournal.store.contract import EventStore

_MAX_TEXT = 1000


def _text(value: Any, what: str, *, blank: bool = True) -> str:
    if not isinstance(value, str) or (not blank and not value.strip()):
        raise InvalidInput(f"{what} must be {'text' if blank else 'non-blank text'}")
    if len(value) > _MAX_TEXT:
        raise InvalidInput(f"{what} must be at most {_MAX_TEXT:,} characters")
    return value


async def rate_turn(
    store: EventStore,
    session_id: str,
    line: str,
    turn: int,
    score: float,
    *,
    label: str | None,
    reason: str | None,
    by: str,
    rating: str | None,
    sealer: SubjectSealer | None,
    signing_key: SigningKey | None,
) -> bool:
    """Record a person's rating of ``turn`` of the session's ``line`` (see
    :meth:`agentjournal.JournalSession.score`); whether this call wrote it.

    Raises:
        InvalidInput: The turn is not on the line, the score is not in [0, 1], ``by`` is
            blank, or another argument is malformed; nothing is written.
        StoreError: It did not land.
    """
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise InvalidInput(f"turn must be a turn number (1, 2, ...), got {turn!r}")
    value = checked_score(score)
    by = _text(by, "by", blank=False).strip()
    if label is not None and not LABEL.fullmatch(_text(label, "label")):
        raise InvalidInput(
            "label must be one short word (letters, digits, '.', ':', '+', '-', '_'; at most "
            "40): it stays in the clear, where the reason is sealed with the session"
        )
    shown_label = label if label is not None else label_of(value)
    why = _text(reason, "reason") if reason is not None else ""
    if rating is not None:
        rating = _text(rating, "id", blank=False)
    if sealer is not None:  # what was judged is the session's: sealed under its subject's key
        sealer = await session_sealer(store, session_id, sealer.keys) or sealer
    read = await session_turns(store, session_id, line=line)
    found = next((t for t in read.turns if t.index == turn), None)
    if found is None:
        raise InvalidInput(
            f"session {session_id} has no turn {turn} on line {line} (it has {len(read.turns)})"
        )
    return await record_rating(
        store,
        TurnScore(
            session=session_id,
            line=line,
            turn=turn,
            scorer="human",
            version="1",
            value=value,
            label=shown_label,
            reason=why,
            input=found.input,
            output=found.output,
            head=found.head,
            human=True,
            by=by,
            rating=rating if rating is not None else uuid.uuid4().hex,
        ),
        sealer=sealer,
        signing_key=signing_key,
    )
