"""The list's query and content search, without HTTP: parsing parameters, one page of rows,
and the inverted index over item events (``read.catalog.query``, ``read.catalog.search``)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentjournal.errors import InvalidInput
from agentjournal.ledger.integrity import Integrity
from agentjournal.read.catalog.query import ListQuery, page_of, parse_query
from agentjournal.read.catalog.rows import SessionRow
from agentjournal.read.catalog.search import ContentIndex, readable_text
from agentjournal.store.contract import RecordedEvent

START = datetime(2026, 1, 1, tzinfo=UTC)


def row(number: int, **fields: Any) -> SessionRow:
    values: dict[str, Any] = {
        "session_id": f"s-{number:02d}",
        "app": "shop",
        "user": "u-1",
        "agent": "triage",
        "items": number % 3,
        "subagents_open": 0,
        "subagents_closed": 0,
        "subagents_failed": 0,
        "guardrail_blocks": 0,
        "refusals": 0,
        "tokens": 10 * number,
        "first_activity": START,
        "last_activity": START + timedelta(hours=number),
        "integrity": Integrity("unsigned"),
        "checked_at": START,
    }
    values.update(fields)
    return SessionRow(**values)


def params(text: str) -> list[tuple[str, str]]:
    return [tuple(pair.split("=", 1)) for pair in text.split("&") if pair]  # type: ignore[misc]


def test_an_empty_query_is_the_newest_fifty() -> None:
    assert parse_query([]) == ListQuery()
    assert parse_query(params("q=&app=&token=abc")) == ListQuery()
    rows = [row(n) for n in range(60)]
    page = page_of(rows, ListQuery())
    assert [r.session_id for r in page.rows] == [f"s-{n:02d}" for n in range(59, 9, -1)]
    assert (page.total, page.sessions, page.offset, page.limit) == (60, 60, 0, 50)


def test_a_query_goes_to_parameters_and_back() -> None:
    text = (
        "q=Refund order&app=shop&user=u-1&agent=triage&state=failed&blocks=1&branches=1"
        "&since=2026-01-01T00:00:00+00:00&until=2026-02-01T00:00:00+00:00"
        "&sort=tokens&order=asc&offset=50&limit=10"
    )
    query = parse_query(params(text))
    assert query.since == START
    assert parse_query(query.as_params().items()) == query
    assert query.terms() == ["refund", "order"]
    # A time without a zone is UTC; a date is its midnight.
    assert parse_query([("since", "2026-01-01")]).since == START


def test_ties_are_broken_by_session_id_so_pages_never_overlap() -> None:
    rows = [row(n, tokens=5) for n in range(25)]
    seen = []
    for offset in range(0, 25, 10):
        page = page_of(rows, ListQuery(sort="tokens", order="asc", offset=offset, limit=10))
        seen += [r.session_id for r in page.rows]
    assert seen == sorted(r.session_id for r in rows)


def test_terms_match_names_whole_and_content_word_by_word() -> None:
    rows = [row(1), row(2, app="bank"), row(3, user="ann")]
    content = {"refund": {"s-01"}, "refunded": {"s-02"}, "order": {"s-01", "s-03"}}

    def matching(word: str) -> set[str]:
        return set().union(*(v for k, v in content.items() if k.startswith(word)))

    def found(q: str) -> list[str]:
        return sorted(r.session_id for r in page_of(rows, ListQuery(q=q), content=matching).rows)

    assert found("refund") == ["s-01", "s-02"]
    assert found("REFUND order") == ["s-01"]
    assert found("refund-order") == ["s-01"]  # the words of a term, all in its content
    assert found("bank") == ["s-02"]
    assert found("s-0") == ["s-01", "s-02", "s-03"]
    assert found("ann order") == ["s-03"]
    assert found("nothing") == []
    # Without an index, q finds names only.
    assert [r.session_id for r in page_of(rows, ListQuery(q="refund")).rows] == []


def test_filters_and_the_integrity_order() -> None:
    rows = [
        row(1, integrity=Integrity("verified", ("k",))),
        row(2, integrity=Integrity("failed", (), "broken")),
        row(3, guardrail_blocks=1),
        row(4, refusals=2, app="bank"),
    ]
    ids = [r.session_id for r in page_of(rows, ListQuery(sort="integrity", order="asc")).rows]
    assert ids[0] == "s-02"
    assert ids[-1] == "s-01"
    blocked = page_of(rows, ListQuery(blocks=True))
    assert {r.session_id for r in blocked.rows} == {"s-03", "s-04"}
    assert page_of(rows, ListQuery(blocks=True, app="bank")).total == 1
    assert page_of(rows, ListQuery(state="failed")).total == 1
    since = page_of(rows, ListQuery(since=START + timedelta(hours=3)))
    assert {r.session_id for r in since.rows} == {"s-03", "s-04"}
    assert page_of(rows, ListQuery()).choices == {"app": ["bank", "shop"], "agent": ["triage"]}


@pytest.mark.parametrize(
    "bad",
    [
        "sort=colour",
        "order=sideways",
        "limit=0",
        "limit=501",
        "limit=1.5",
        "offset=-3",
        "offset=²",
        "state=fine",
        "branches=true",
        "until=soon",
        "q=a&q=b",
        "page=2",
        "q=" + " ".join("abcdefghijklmnopq"),
        "q=" + "x" * 257,
    ],
)
def test_a_bad_parameter_is_refused_in_one_line(bad: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        parse_query(params(bad))
    assert "\n" not in str(raised.value)


def _event(kind: str, body: Any, stream: str = "AgentSession-a") -> RecordedEvent:
    return RecordedEvent(
        stream=stream,
        revision=0,
        position=1,
        type=kind,
        data=json.dumps(body).encode(),
        metadata={},
        id=uuid.uuid4(),
        recorded_at=START,
    )


def test_the_readable_text_of_each_item_event() -> None:
    assert readable_text("UserMessageReceived", b'{"content": "Where is it?"}') == "Where is it?"
    calls = {"tool_calls": [{"tool_name": "lookup", "arguments": {"order_id": 42}}]}
    assert readable_text("AssistantToolCallsGenerated", json.dumps(calls).encode()) == (
        "lookup order_id 42"
    )
    result = {"result": '{"status": "shipped"}'}  # JSON in a string is opened up
    assert readable_text("ToolResultReceived", json.dumps(result).encode()) == "status shipped"
    assert readable_text("agentjournal.ModelResponded", b'{"agent": "x"}') == ""
    assert readable_text("UserMessageReceived", b"not json") == ""
    assert readable_text("UserMessageReceived", b"[1]") == ""


def test_the_index_finds_sessions_by_the_beginning_of_their_words() -> None:
    index = ContentIndex()
    index.fold("a", _event("UserMessageReceived", {"content": "Refund my ORDER 42, please"}))
    index.fold("b", _event("AssistantTextGenerated", {"content": "Refunded."}))
    index.fold("b", _event("SessionStarted", {"app_name": "invisible"}))
    assert index.matching("refund") == {"a", "b"}
    assert index.matching("REFUNDED") == {"b"}
    assert index.matching("order") == {"a"}
    assert index.matching("invisible") == set()  # not an item: not indexed
    assert index.matching("zebra") == set()
    assert index.matching("") == set()
    # New words after a search are found by the next one.
    index.fold("c", _event("ToolResultReceived", {"result": "zebra crossing"}))
    assert index.matching("zeb") == {"c"}
    assert index.indexed == 3


def test_the_filter_choices_keep_the_most_frequent_values() -> None:
    """Of 201 apps the one with the most sessions is a choice, wherever its name sorts."""
    from agentjournal.read.catalog.query import MAX_CHOICES, choices

    rows = [row(n, app=f"app-{n:03d}") for n in range(MAX_CHOICES + 1)]
    rows += [row(1000 + n, app="zzz-busiest") for n in range(5)]
    picked = choices(rows)["app"]
    assert len(picked) == MAX_CHOICES
    assert "zzz-busiest" in picked
    assert picked == sorted(picked)
