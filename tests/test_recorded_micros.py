"""``RecordedEvent.recorded_micros``: the stored time without a ``datetime``, equal to
``recorded_at`` whichever way the event was built."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from agentjournal.store import open_store
from agentjournal.store.contract import NewEvent, RecordedEvent, StreamState


def _micros(moment: datetime) -> int:
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


async def test_a_stored_events_micros_are_its_recorded_time(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path / 's.db'}")
    try:
        await store.append(
            "AgentSession-t",
            [NewEvent("E", b"{}", {}) for _ in range(3)],
            expected=StreamState.NO_STREAM,
        )
        fresh = await store.read("AgentSession-t")
        again = await store.read("AgentSession-t")
    finally:
        await store.close()
    for event in fresh:  # before recorded_at was made, then after
        micros = event.recorded_micros
        assert micros == _micros(event.recorded_at) == event.recorded_micros
    for event in again:  # recorded_at made first
        assert _micros(event.recorded_at) == event.recorded_micros


def test_a_built_events_micros_are_its_recorded_time() -> None:
    when = datetime(2026, 12, 5, 8, 30, 1, 123457, tzinfo=UTC)
    event = RecordedEvent(
        id=uuid.uuid4(),
        type="E",
        data=b"{}",
        metadata={},
        stream="s",
        revision=0,
        position=1,
        recorded_at=when,
    )
    assert event.recorded_micros == _micros(when)
