"""``RecordedEvent.id_text``: the id as text without a ``uuid.UUID``, equal to ``str(id)``
whichever way the event was built, and refused as ``id`` refuses a damaged id."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime

import pytest

from agentjournal.store.contract import RecordedEvent


def _raw(raw_id: object) -> RecordedEvent:
    return RecordedEvent.from_raw(
        stream="s",
        position=1,
        revision=0,
        raw_id=raw_id,  # type: ignore[arg-type]  # a damaged column, on purpose
        type="E",
        data=b"{}",
        raw_metadata=b"{}",
        recorded_at_us=0,
    )


def test_a_raw_events_id_text_is_its_id_as_text() -> None:
    for raw in [bytes(16), b"\xff" * 16, *(os.urandom(16) for _ in range(200))]:
        event = _raw(raw)
        assert event.id_text == str(uuid.UUID(bytes=raw))
        assert event.id_text == str(event.id)  # and once the id is made


def test_a_built_events_id_text_is_its_id_as_text() -> None:
    made = uuid.uuid4()
    event = RecordedEvent(
        id=made,
        type="E",
        data=b"{}",
        metadata={},
        stream="s",
        revision=0,
        position=1,
        recorded_at=datetime(2026, 12, 5, tzinfo=UTC),
    )
    assert event.id_text == str(made)


@pytest.mark.parametrize("raw", [b"", b"\x00" * 15, b"\x00" * 17, "0123456789abcdef", 7])
def test_a_damaged_id_is_refused_as_id_refuses_it(raw: object) -> None:
    with pytest.raises(Exception) as by_id:  # noqa: PT011  # whatever id raises
        _ = _raw(raw).id
    with pytest.raises(by_id.type):
        _ = _raw(raw).id_text
