"""``Record.of``: a stored event as a record, its data's digest made when first asked; the
same record, by every measure, as one built with the digest (``Record(...)``)."""

from __future__ import annotations

import copy
import dataclasses
import os
import uuid

import pytest

from agentjournal._digests import data_digest
from agentjournal.records import DamagedEvent, Record
from agentjournal.store.contract import RecordedEvent

_DATA = [b"{}", b'{"text":"caf\xc3\xa9 \xf0\x9f\x99\x82"}', b"not json", b"", b'{"n":1}']


def _stored(
    data: bytes, raw_id: bytes | None = None, metadata: bytes = b'{"k":"v"}'
) -> RecordedEvent:
    return RecordedEvent.from_raw(
        stream="AgentSession-x",
        position=9,
        revision=3,
        raw_id=os.urandom(16) if raw_id is None else raw_id,
        type="E",
        data=data,
        raw_metadata=metadata,
        recorded_at_us=1_765_000_000_123_456,
    )


def _eager(event: RecordedEvent) -> Record:
    return Record(
        event.stream,
        event.revision,
        str(event.id),
        event.type,
        event.data.decode(),
        data_digest(event.data),
        dict(event.metadata),
        None,
        event.position,
        event.recorded_at,
    )


@pytest.mark.parametrize("data", _DATA)
def test_a_record_of_an_event_is_the_record_built_with_its_digest(data: bytes) -> None:
    event = _stored(data)
    eager = _eager(event)
    assert Record.of(event) == eager  # the digest made by the comparison
    assert hash(Record.of(event)) == hash(eager)
    assert repr(Record.of(event)) == repr(eager)
    lazy = Record.of(event)
    assert lazy.data_sha256 == data_digest(data)
    assert vars(lazy) == vars(eager)  # once asked, kept as the field is


@pytest.mark.parametrize("data", _DATA)
def test_a_record_of_an_event_copies_as_the_built_one(data: bytes) -> None:
    event = _stored(data)
    made = copy.copy(Record.of(event))
    assert made == _eager(event)
    assert made.data_sha256 == data_digest(data)
    assert made.as_dict() == _eager(event).as_dict()


def test_a_record_replaced_keeps_its_digest() -> None:
    event = _stored(b'{"a":1}')
    moved = dataclasses.replace(Record.of(event), data=None)
    assert moved.data_sha256 == data_digest(b'{"a":1}')


def test_a_record_of_an_event_has_its_id_as_text() -> None:
    made = uuid.uuid4()
    assert Record.of(_stored(b"{}", made.bytes)).id == str(made)


@pytest.mark.parametrize(
    ("event", "message"),
    [
        (_stored(b"{}", b"\x00" * 15), "the event id is not 16 bytes"),
        (_stored(b"\xff{}"), "the data is not UTF-8 text (byte 0)"),
        (_stored(b"{}", metadata=b'{"k":1}'), "the metadata does not map strings to strings"),
        (_stored(b"{}", metadata=b"[1"), "the metadata is not a UTF-8 JSON object"),
        (_stored(b"{}", metadata=b'"ab"'), "the metadata is not a UTF-8 JSON object"),
        (_stored(b"{}", metadata=b'["ab"]'), "the metadata is not a UTF-8 JSON object"),
    ],
)
def test_a_damaged_event_is_still_refused(event: RecordedEvent, message: str) -> None:
    with pytest.raises(DamagedEvent) as refused:
        Record.of(event)
    assert refused.value.message == message
