"""Span ids and times: the ids events recorded, the ids derived from event ids, and ns.

A run's trace id is the one its events recorded; the run span reuses the span id recorded
on the run's first event, a subagent span the one recorded on the receiver's own first
event (so the projection joins the live trace, its logs and the guardrail service's
spans). Where nothing was recorded, or a recorded id is taken by another span of the run,
ids are derived from event ids (SHA-256), so projecting the same events twice gives the
same spans. A run notes every span id it gave out (``Run.used``, which starts with its
root span's); a subagent's span id is fixed the first time anything needs it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Final

from agentjournal import events
from agentjournal.read.traces.event_fields import author
from agentjournal.read.traces.state import Run, Subagent, Tree
from agentjournal.read.traces.stored import Event

TRACE_ID: Final = re.compile(r"[0-9a-f]{32}")
SPAN_ID: Final = re.compile(r"[0-9a-f]{16}")


def ns(when: datetime | None) -> int:
    """``when`` in ns since the epoch (naive: UTC; None: 0)."""
    if when is None:
        return 0
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH) // _MICROSECOND * 1000


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


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


def root_id(record: Event, first_event: str) -> str:
    """A run span's id: the span id ``record`` recorded beside a trace id, else one derived
    from the run's first event."""
    if recorded(record.metadata, events.TRACE_ID_KEY, TRACE_ID) is not None:
        found = recorded(record.metadata, events.SPAN_ID_KEY, SPAN_ID)
        if found is not None:
            return found
    return derived("run", first_event, 16)


def notice_own(tree: Tree, record: Event) -> None:
    """Remember the span id recorded on a subagent's own first event (not its twin, not
    the sender's handoff output, not a guardrail call's span, not a closing)."""
    sub = tree.subagents.get(record.stream)
    if sub is None or sub.span_id is not None or sub.candidate is not None:
        return
    if record.type in (events.GUARDRAIL_DECIDED, events.SUBAGENT_COMPLETED):
        return
    if author(record) != sub.agent or (
        record.type == events.SUBAGENT_STARTED and record.opens is None
    ):
        return
    if recorded(record.metadata, events.TRACE_ID_KEY, TRACE_ID) == sub.trace_id:
        sub.candidate = recorded(record.metadata, events.SPAN_ID_KEY, SPAN_ID)


def subagent_id(run: Run, sub: Subagent) -> str:
    """A subagent's span id, fixed the first time anything needs it."""
    if sub.span_id is None:
        chosen = sub.candidate
        if chosen is None or chosen in run.used or run.trace_id != sub.trace_id:
            chosen = derived("subagent", sub.twin, 16)
        if run.trace_id == sub.trace_id:
            run.used.append(chosen)
        sub.span_id = chosen
    return sub.span_id


def owner_id(tree: Tree, run: Run, stream: str) -> str:
    """The span an event of ``stream`` belongs under: its subagent's, when the subagent
    was opened in this run, else the run's."""
    sub = tree.subagents.get(stream)
    if sub is not None and sub.trace_id == run.trace_id:
        return subagent_id(run, sub)
    return run.root_id


def fresh_id(run: Run, kind: str, event_id: str) -> str:
    """A derived span id for a span of ``run``, noted as taken."""
    span_id = derived(kind, event_id, 16)
    run.used.append(span_id)
    return span_id
