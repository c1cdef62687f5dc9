"""Span ids and times: the ids events recorded, the ids derived from event ids, and ns.

A run's trace id is the one its events recorded; the run span reuses the span id recorded
on the run's first event, a subagent span the one recorded on the receiver's own first
event (so the projection joins the live trace, its logs and the guardrail service's
spans). Where nothing was recorded, or a recorded id is taken by another span of the run,
ids are derived from event ids (SHA-256), so projecting the same events twice gives the
same spans.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Final

from agentjournal import events
from agentjournal.records import Record

__all__ = ["SPAN_ID", "TRACE_ID", "derived", "ns", "parse_time", "recorded", "root_id"]

TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
SPAN_ID: Final = re.compile(r"[0-9a-f]{16}")


def ns(when: datetime | None) -> int:
    """``when`` in ns since the epoch (naive: UTC; None: 0)."""
    if when is None:
        return 0
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1) * 1000


def parse_time(text: str | None) -> int | None:
    """An ISO 8601 time in ns since the epoch; None when missing or unreadable."""
    if not text:
        return None
    try:
        return ns(datetime.fromisoformat(text))
    except ValueError:
        return None


def derived(kind: str, event_id: str, digits: int) -> str:
    """An id derived from an event id: the same event always gives the same id, never zero."""
    digest = hashlib.sha256(f"agentjournal.trace:{kind}:{event_id}".encode()).hexdigest()
    value = digest[:digits]
    return value if int(value, 16) else "1".rjust(digits, "0")


def recorded(metadata: Mapping[str, str], key: str, pattern: re.Pattern[str]) -> str | None:
    """The id ``metadata`` holds under ``key``, if it is a valid non-zero one."""
    value = metadata.get(key)
    if value is None or not pattern.fullmatch(value) or not int(value, 16):
        return None
    return value


def root_id(record: Record, first_event: str) -> str:
    """A run span's id: the span id ``record`` recorded beside a trace id, else one derived
    from the run's first event."""
    if recorded(record.metadata, events.TRACE_ID_KEY, TRACE_ID) is not None:
        found = recorded(record.metadata, events.SPAN_ID_KEY, SPAN_ID)
        if found is not None:
            return found
    return derived("run", first_event, 16)
