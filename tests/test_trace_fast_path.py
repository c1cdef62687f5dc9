"""The export of every tree reads stored events without records and prints span lines from
a template; both give exactly what records and ``json`` give: the same fields and damage
errors for every event (rich, damaged and random ones), the same spans from the projector,
and the same line for every span (random attribute values: non-ASCII, escapes, floats)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal.read.traces import ProjectedSpan, Projector, SpanEvent, SpanLink, attributes
from agentjournal.read.traces.jsonl import exact_line, span_line
from agentjournal.read.traces.stored import StoredEvent, data_of
from agentjournal.records import DamagedEvent, Record
from agentjournal.store import open_store
from agentjournal.store.contract import RecordedEvent
from test_trace_parts import mixed  # noqa: F401  (the rich store of the parts' tests)


def _read_all(uri: str) -> list[RecordedEvent]:
    async def read() -> list[RecordedEvent]:
        store = await open_store(uri, create=False)
        try:
            return await store.read_all(from_position=0, limit=1_000_000)
        finally:
            await store.close()

    return asyncio.run(read())


def _read(event: RecordedEvent, of: Any) -> tuple[str, Any]:
    """What reading ``event`` gives: its fields, or the damage error's message."""
    try:
        made = of(event)
    except DamagedEvent as bad:
        return "damaged", (bad.stream, bad.revision, str(bad))
    except Exception as error:  # whatever fails, fails alike (see below)
        return "failed", (type(error), str(error))
    fields = (
        made.stream,
        made.revision,
        made.id,
        made.type,
        made.data,
        dict(made.metadata),
        made.position,
        made.recorded_at,
        made.body,
        made.opens,
        data_of(made),
    )
    return "read", fields


def test_a_stored_event_reads_as_its_record_on_a_rich_store(mixed: str) -> None:  # noqa: F811
    events = _read_all(mixed)
    kinds = {_read(event, StoredEvent.of)[0] for event in events}
    assert kinds == {"read", "damaged"}  # the store holds a damaged event
    for event in events:
        assert _read(event, StoredEvent.of) == _read(event, Record.of)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def _metadata_bytes() -> st.SearchStrategy[bytes]:
    good = st.dictionaries(st.text(), st.text(), max_size=4).map(lambda d: json.dumps(d).encode())
    odd = _JSON_VALUES.map(lambda v: json.dumps(v).encode())
    return good | odd | st.binary(max_size=20) | st.just(b'{"a": "\xff"}')


def _data_bytes() -> st.SearchStrategy[bytes]:
    objects = st.dictionaries(
        st.sampled_from(["subsession_stream", "agent", "author_name", "x"]),
        st.text() | st.sampled_from(["AgentSubsession-s-1", "AgentSession-s"]),
        max_size=3,
    )
    return (
        objects.map(lambda d: json.dumps(d).encode())
        | _JSON_VALUES.map(lambda v: json.dumps(v, ensure_ascii=False).encode())
        | st.sampled_from([b"NaN", b'{"a": Infinity}', b"\xff\xfe", b"[1e999]", b'"\\ud800"'])
        | st.binary(max_size=20)
    )


@settings(max_examples=300, deadline=None)
@given(
    raw_id=st.binary(min_size=15, max_size=17) | st.just(uuid.uuid4().bytes),
    kind=st.sampled_from(["SubagentStarted", "UserMessageReceived", "x"]),
    data=_data_bytes(),
    metadata=_metadata_bytes(),
)
def test_a_random_or_damaged_stored_event_reads_as_its_record(
    raw_id: bytes, kind: str, data: bytes, metadata: bytes
) -> None:
    """Alike for every event: read or damaged."""
    event = RecordedEvent.from_raw(
        stream="AgentSession-s",
        position=7,
        revision=3,
        raw_id=raw_id,
        type=kind,
        data=data,
        raw_metadata=metadata,
        recorded_at_us=1_796_523_194_378_690,
    )
    assert _read(event, StoredEvent.of) == _read(event, Record.of)


def test_an_event_of_the_wrong_column_types_is_damaged_alike() -> None:
    event = RecordedEvent(
        id=uuid.uuid4(),
        type="x",
        data="text, not bytes",  # type: ignore[arg-type]  # what a broken backend could give
        metadata={},
        stream="AgentSession-s",
        revision=0,
        position=0,
        recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert _read(event, StoredEvent.of)[0] == "damaged"
    assert _read(event, StoredEvent.of) == _read(event, Record.of)


def _spans(events: list[RecordedEvent], of: Any) -> list[ProjectedSpan]:
    projector = Projector()
    spans: list[ProjectedSpan] = []
    for event in events:
        try:
            spans += projector.feed(of(event))
        except DamagedEvent:
            continue
    return spans + projector.finish()


def test_the_projector_sends_the_same_spans_from_stored_events_and_records(
    mixed: str,  # noqa: F811
) -> None:
    events = _read_all(mixed)
    from_records = _spans(events, Record.of)
    assert len(from_records) > 50
    assert _spans(events, StoredEvent.of) == from_records
    for span in from_records:
        assert span_line(span) == exact_line(span)


_TEXT = st.text() | st.sampled_from(["", "é", "\x7f", '"', "\\", "\n\t", "\ud800", "😀"])
_ATTRIBUTE = (
    _TEXT
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.booleans()
    | st.floats()
    | st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e16, 5e-324, 1e-05])
)
_ATTRIBUTES = st.dictionaries(_TEXT, _ATTRIBUTE, max_size=6)


@settings(max_examples=400, deadline=None)
@given(
    attributes=_ATTRIBUTES,
    name=_TEXT,
    parent=st.none() | _TEXT,
    error=st.none() | _TEXT,
    times=st.tuples(st.integers(min_value=0), st.integers(min_value=0)),
    events=st.lists(st.builds(SpanEvent, _TEXT, st.integers(min_value=0), _ATTRIBUTES), max_size=2),
    links=st.lists(st.builds(SpanLink, _TEXT, _TEXT, _ATTRIBUTES), max_size=2),
)
def test_a_span_line_is_what_json_prints(
    attributes: dict[str, Any],
    name: str,
    parent: str | None,
    error: str | None,
    times: tuple[int, int],
    events: list[SpanEvent],
    links: list[SpanLink],
) -> None:
    span = ProjectedSpan(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        parent_id=parent,
        name=name,
        start_ns=times[0],
        end_ns=times[1],
        attributes=attributes,
        events=events,
        error=error,
        links=links,
    )
    assert span_line(span) == json.dumps(span.as_json(), sort_keys=True) + "\n"


def _span(attributes: Any) -> ProjectedSpan:
    return ProjectedSpan(
        trace_id="0af7651916cd43dd8448eb211c80319c",
        span_id="b7ad6b7169203331",
        parent_id=None,
        name="n",
        start_ns=1,
        end_ns=2,
        attributes=attributes,
    )


def test_a_span_line_with_keys_that_are_no_strings_is_what_json_prints() -> None:
    span = _span({2: "two", 1: None, 1.5: [1]})
    assert span_line(span) == json.dumps(span.as_json(), sort_keys=True) + "\n"


def test_a_span_whose_keys_json_cannot_sort_fails_as_json_fails() -> None:
    span = _span({"a": 1, 2: "two"})
    with pytest.raises(TypeError):
        json.dumps(span.as_json(), sort_keys=True)
    with pytest.raises(TypeError):
        span_line(span)


def test_a_span_is_made_with_every_field_and_stays_frozen() -> None:
    span = ProjectedSpan("t", "s", None, "n", 1, 2, {"a": 1}, error="e")
    assert list(vars(span)) == [field.name for field in dataclasses.fields(ProjectedSpan)]
    assert span == dataclasses.replace(span)
    assert (span.events, span.links, span.error) == ((), (), "e")
    with pytest.raises(dataclasses.FrozenInstanceError):
        span.name = "m"  # type: ignore[misc]


class _Reversed(str):
    """A key equal to a plain one that sorts the other way: only ``json`` prints it."""

    __hash__ = str.__hash__

    def __lt__(self, other: object) -> bool:
        return str.__gt__(self, other)  # type: ignore[operator]


def test_objects_of_one_shape_print_as_json_prints_whatever_their_keys_are() -> None:
    shapes = [
        {"bee": 1, "ay": "x", "cee": True},
        {"bee": 2, "ay": "y", "cee": False},  # the same key objects: printed by the shape
        {"ay": "z", "bee": 3, "cee": None},  # the same keys in another order
        {"bee": 1, "ay": "x", "cee": 1.5},
        {"".join(["be", "e"]): 1, "".join(["a", "y"]): "x", "cee": 2},  # equal, new objects
        {_Reversed("bee"): 1, _Reversed("ay"): "x", "cee": True},  # equal, sorted otherwise
        {"bee": 1, 2: "two", "cee": True},
    ]
    for shape in shapes * 2:
        span = _span(shape)
        try:
            expected = json.dumps(span.as_json(), sort_keys=True) + "\n"
        except TypeError:
            with pytest.raises(TypeError):
                span_line(span)
            continue
        assert span_line(span) == expected


_COUNT = st.integers(min_value=-2, max_value=2**70) | st.sampled_from(
    ["0", "7", "01", "-1", "1.5", "٣", "", "x", True, None, 1.0, [1]]
)
_FIELD = st.none() | st.text(max_size=4) | st.sampled_from([1, True, ["a"], {"a": 1}])


@st.composite
def _model_response_data(draw: st.DrawFn) -> bytes:
    """The data of a ModelResponded event: what agentjournal writes, changed here and there
    (a count of another kind, a field missing or of another type), or no JSON object."""
    usage = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    "input_tokens",
                    "cached_input_tokens",
                    "output_tokens",
                    "reasoning_tokens",
                    "total_tokens",
                    "model",
                ]
            ),
            _COUNT,
        )
    )
    body: dict[str, Any] = {
        "session_id": "s",
        "agent": "triage",
        "model": draw(st.none() | st.sampled_from(["gpt-x", ""])),
        "system": draw(st.none() | st.just("openai")),
        "response_id": draw(st.none() | st.just("resp-1")),
        "usage": usage,
        "started_at": draw(st.none() | st.just("2026-12-06T02:13:14.377635Z")),
        "ended_at": "2026-12-06T02:13:14.378690Z",
        "outputs": draw(st.dictionaries(st.sampled_from(["message", "function_call"]), _COUNT)),
    }
    for key in draw(st.lists(st.sampled_from(sorted(body)), max_size=2, unique=True)):
        if draw(st.booleans()):
            del body[key]
        else:
            body[key] = draw(_FIELD)
    text = json.dumps(body)
    return draw(
        st.just(text.encode())
        | st.just(("\ufeff" + text).encode())
        | st.sampled_from([b"[]", b"NaN", b"{", b"\xff", b'{"usage": {"input_tokens": NaN}}'])
    )


@settings(max_examples=400, deadline=None)
@given(data=_model_response_data())
def test_a_model_response_reads_alike_from_its_plain_object_and_through_decode(
    data: bytes,
) -> None:
    record = Record(
        "AgentSession-s",
        2,
        str(uuid.UUID(int=7)),
        "agentjournal.ModelResponded",
        data.decode("utf-8", "replace"),
        "0" * 64,
        {},
    )
    plain = attributes.chat_of(data, "s", record)
    with mock.patch.object(attributes, "plain_body", return_value=None):
        decoded = attributes.chat_of(data, "s", record)
    assert plain == decoded
    if plain is not None and decoded is not None:
        assert list(plain[3]) == list(decoded[3])  # the same attributes in the same order


def test_a_model_response_span_says_what_the_response_recorded() -> None:
    data = json.dumps(
        {
            "session_id": "s",
            "agent": "triage",
            "model": "gpt-x",
            "system": None,
            "response_id": "resp-1",
            "usage": {"input_tokens": "12", "output_tokens": 3, "cached_input_tokens": "002"},
            "started_at": None,
            "ended_at": "2026-12-06T02:13:14.378690Z",
            "outputs": {"message": "01", "function_call": 2},
        }
    ).encode()
    record = Record("AgentSession-s", 2, str(uuid.UUID(int=7)), "x", data.decode(), "0" * 64, {})
    assert attributes.chat_of(data, "s", record) == (
        None,
        "2026-12-06T02:13:14.378690Z",
        "gpt-x",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.agent.name": "triage",
            "gen_ai.usage.input_tokens": 12,
            "gen_ai.usage.output_tokens": 3,
            "gen_ai.usage.cache_read.input_tokens": 2,
            "gen_ai.usage.reasoning.output_tokens": 0,
            "agentjournal.session_id": "s",
            "agentjournal.stream": "AgentSession-s",
            "agentjournal.event_id": str(uuid.UUID(int=7)),
            "gen_ai.request.model": "gpt-x",
            "gen_ai.response.model": "gpt-x",
            "gen_ai.response.id": "resp-1",
            "agentjournal.outputs": "function_call=2,message=1",
        },
    )
    assert attributes.chat_of(b'{"agent": 1}', "s", record) is None
