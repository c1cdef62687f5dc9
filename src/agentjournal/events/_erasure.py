"""The erasure of a data subject's content: what was destroyed, by whom, when and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentjournal.errors import CodecError
from agentjournal.events._codec import TEXT, Event, present, wire
from agentjournal.events._names import SUBJECT_ERASED


def _texts(body: Any, key: str, type_: str) -> list[str]:
    value = present(body, key, type_)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise CodecError(f"{type_}: {key} must be a list of non-empty strings, got {value!r}")
    return list(value)


TEXTS = wire(_texts)


@dataclass(frozen=True, slots=True)
class SubjectErased(Event):
    """``agentjournal.SubjectErased``: the keys of a data subject were destroyed, so the
    content sealed under them reads ``[erased]``; one on each affected session's stream.

    It holds no content: the subject's identifier (as the application names it, e.g. a
    ``user_id``), the ids of the destroyed keys, and who erased it, when and why.

    Attributes:
        subject: The data subject.
        key_ids: The ids of its destroyed keys.
        streams: The streams of this session that hold content sealed under them.
        sessions: Every session the erasure reached.
        reason: Why (e.g. the request it carries out).
        by: Who erased it.
        erased_at: When the keys were destroyed (RFC 3339).
    """

    subject: str = field(metadata=TEXT)
    key_ids: list[str] = field(metadata=TEXTS)
    streams: list[str] = field(metadata=TEXTS)
    sessions: list[str] = field(metadata=TEXTS)
    reason: str = field(metadata=TEXT)
    by: str = field(metadata=TEXT)
    erased_at: str = field(metadata=TEXT)

    EVENT_TYPE = SUBJECT_ERASED
