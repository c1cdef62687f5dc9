"""Branch vocabulary: stream names and the branch events (pure)."""

from __future__ import annotations

import dataclasses
import json
import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentjournal import events
from agentjournal.errors import CodecError, InvalidInput
from agentjournal.events import (
    BranchAdded,
    BranchDeleted,
    BranchForked,
    BranchRemoved,
    BranchStarted,
    Cut,
    ItemPlace,
    StreamPlace,
    SubagentContinued,
    TurnUsage,
    turn_of,
)
from agentjournal.ledger.redaction import KEPT, withholds
from agentjournal.store.contract import validate_stream_name
from agentjournal.streams import (
    MAX_BRANCH_NAME,
    branch_authority_stream,
    branch_key,
    branch_stream,
    branch_subagent_id,
    branches_stream,
    continuation_id,
    subsession_stream,
    validate_id,
)

HASH = "ab" * 32


def _names(kind: type[object]) -> list[str]:
    return [field.name for field in dataclasses.fields(kind)]  # type: ignore[arg-type]


def test_session_and_key_never_split_two_ways() -> None:
    # "-" may be part of an id, so "a-b"+"c" and "a"+"b-c" must not meet: "@" joins them.
    assert branch_stream("a-b", "c") == "AgentBranch-a-b@c"
    assert branch_stream("a", "b-c") == "AgentBranch-a@b-c"
    assert branch_stream("a-b", "c") != branch_stream("a", "b-c")
    assert branch_authority_stream("a-b", "c") != branch_authority_stream("a", "b-c")
    assert branch_authority_stream("s", "draft") == "AgentAuthority-s@draft"
    assert branches_stream("s") == "AgentBranches-s"


@pytest.mark.parametrize(
    "name",
    ["draft", "branch_from_turn_3_1764590000", "branch_from_turn_3_1764590000_2", "a.b-c", "_"],
)
def test_literal_keys_are_the_name(name: str) -> None:
    assert branch_key(name) == name


@pytest.mark.parametrize(
    "name", ["Draft", "DRAFT", " draft ", "draft ", "-x", "é", "a/b", "x" * 49, "日本語"]
)
def test_other_names_are_hashed_and_distinct(name: str) -> None:
    key = branch_key(name)
    assert re.fullmatch(r"[a-z0-9._-]{1,24}~[0-9a-f]{20}", key), key
    assert key != branch_key(name.lower()) or name == name.lower()
    validate_stream_name(branch_stream("s", name))


def test_keys_differ_in_more_than_case() -> None:
    names = ["draft", "Draft", "DRAFT", "dRaft", " draft", "draft "]
    keys = [branch_key(name) for name in names]
    assert len({key.lower() for key in keys}) == len(names)


def test_a_name_with_no_letters_left_keys_as_branch() -> None:
    assert branch_key("日本語").startswith("branch~")
    assert branch_key("!!!").startswith("branch~")


def test_the_longest_name_fits_and_one_more_is_refused() -> None:
    longest = "Ü" * MAX_BRANCH_NAME
    validate_stream_name(branch_stream("s" * 128, longest))
    with pytest.raises(InvalidInput, match="at most 1000"):
        branch_key(longest + "x")


@pytest.mark.parametrize("name", ["", " ", "\t\n"])
def test_blank_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidInput, match="blank"):
        branch_stream("s", name)


def test_main_and_non_strings_are_refused() -> None:
    with pytest.raises(InvalidInput, match="main line"):
        branch_key("main")
    assert branch_key("Main") != "main"  # another name, hashed
    with pytest.raises(InvalidInput, match="must be a string"):
        branch_key(7)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="session id"):
        branch_stream("a@b", "x")


@pytest.mark.slow
@given(st.text(min_size=1, max_size=60).filter(lambda name: name.strip() and name != "main"))
def test_keys_are_deterministic_lowercase_and_valid(name: str) -> None:
    key = branch_key(name)
    assert key == branch_key(name)
    assert key == key.lower()
    assert "@" not in key
    validate_stream_name(branch_stream("s", name))


def test_subagent_ids_on_a_line_are_valid_and_line_specific() -> None:
    one = branch_subagent_id("Billing", "AgentBranch-s@a", "call_1")
    other = branch_subagent_id("Billing", "AgentBranch-s@b", "call_1")
    assert one != other
    assert re.fullmatch(r"sub-billing-[0-9a-f]{24}", one)
    assert validate_id(one, "agent id") == one
    subsession_stream("s", one)
    # A continuation never shares an id with a handoff of the same line, whatever the call id.
    cont = continuation_id("Billing", "AgentBranch-s@a", "AgentSubsession-s-sub-billing-call_1")
    assert cont != branch_subagent_id(
        "Billing", "AgentBranch-s@a", "continues\nAgentSubsession-s-sub-billing-call_1"
    )
    assert cont != branch_subagent_id(
        "Billing", "AgentBranch-s@a", '"continues","AgentSubsession-s-sub-billing-call_1'
    )
    assert validate_id(cont, "agent id") == cont


def _forked() -> BranchForked:
    return BranchForked(
        session_id="s-1",
        branch="Draft ✓",
        branch_stream=branch_stream("s-1", "Draft ✓"),
        parent="main",
        cut=Cut("turn", 2, 1234),
        base=(
            StreamPlace("AgentSession-s-1", 7, HASH),
            StreamPlace("AgentSubsession-s-1-sub-billing-c1", 3, "cd" * 32),
        ),
        authority=StreamPlace("AgentAuthority-s-1", 2, "ef" * 32),
        next_index=9,
        prefix_items=8,
    )


def _started() -> BranchStarted:
    forked = _forked()
    return BranchStarted(
        **{name: getattr(forked, name) for name in _names(BranchForked)},
        continuations={"AgentSubsession-s-1-sub-billing-c1": "AgentSubsession-s-1-sub-billing-x"},
    )


def _all() -> list[object]:
    event = str(uuid.uuid4())
    return [
        _forked(),
        _started(),
        BranchForked(**_fields(_forked(), authority=None)),  # type: ignore[arg-type]
        SubagentContinued(
            agent_id="sub-billing-" + "0" * 24,
            agent_type="Billing",
            source_agent="Triage",
            call_id="c1",
            subsession_stream="AgentSubsession-s-1-sub-billing-" + "0" * 24,
            parent_stream="AgentBranch-s-1@draft",
            continues=StreamPlace("AgentSubsession-s-1-sub-billing-c1", 3, HASH),
            granted_authority={"scopes": ["refund"], "ceilings": {"amount": 50}},
        ),
        BranchDeleted("draft", "deleted", 12),
        BranchDeleted("draft", "cleared", -1),
        BranchAdded("draft", "AgentBranch-s-1@draft", "main", event),
        BranchRemoved("draft", "AgentBranch-s-1@draft", "main", event),
        TurnUsage(
            branch="draft",
            turn=3,
            anchor=ItemPlace("AgentBranch-s-1@draft", 4, 0),
            requests=2,
            input_tokens=10,
            output_tokens=5,
            total_tokens=15,
            input_tokens_details='{"cached_tokens": 0}',
            output_tokens_details=None,
        ),
    ]


def _fields(value: BranchForked, **changes: object) -> dict[str, object]:
    body = {name: getattr(value, name) for name in _names(BranchForked)}
    return {**body, **changes}


@pytest.mark.parametrize("value", _all(), ids=lambda value: type(value).__name__)
def test_events_round_trip_as_compact_json(value: object) -> None:
    encoded = value.encode()  # type: ignore[attr-defined]
    assert type(value).decode(encoded) == value  # type: ignore[attr-defined]
    body = json.loads(encoded)  # a JSON object a foreign reader can parse
    assert encoded == json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def test_the_started_twin_carries_every_forked_field() -> None:
    forked = json.loads(_forked().encode())
    started = json.loads(_started().encode())
    assert {key: started[key] for key in forked} == forked
    assert set(started) - set(forked) == {"continuations"}
    assert forked["base"][0] == {"stream": "AgentSession-s-1", "revision": 7, "hash": HASH}
    assert forked["cut"] == {"kind": "turn", "value": 2, "position": 1234}


@pytest.mark.parametrize(
    ("kind", "change", "message"),
    [
        (BranchForked, {"base": []}, "base must be a non-empty list"),
        (BranchForked, {"base": [{"stream": "x", "revision": -1, "hash": HASH}]}, "revision"),
        (BranchForked, {"base": [{"stream": "x", "revision": 1, "hash": HASH}] * 2}, "twice"),
        (BranchForked, {"cut": {"kind": "day", "value": 1, "position": 1}}, "cut kind"),
        (BranchForked, {"next_index": True}, "next_index"),
        (BranchForked, {"next_index": "9"}, "next_index"),
        (BranchForked, {"branch": ""}, "branch"),
        (BranchForked, {"authority": "AgentAuthority-s-1"}, "stream place"),
        (BranchStarted, {"continuations": {"a": 1}}, "continuations"),
        (BranchStarted, {"continuations": []}, "continuations"),
    ],
)
def test_malformed_fork_events_are_refused(
    kind: type[BranchForked], change: dict[str, object], message: str
) -> None:
    body = json.loads(_started().encode()) | change
    with pytest.raises(CodecError, match=message):
        kind.decode(json.dumps(body).encode())


@pytest.mark.parametrize("missing", ["authority", "base", "cut", "prefix_items", "session_id"])
def test_a_fork_event_missing_a_field_is_refused(missing: str) -> None:
    body = json.loads(_forked().encode())
    del body[missing]
    with pytest.raises(CodecError, match=r"lacks|base|cut"):
        BranchForked.decode(json.dumps(body).encode())


@pytest.mark.parametrize(
    ("kind", "data", "message"),
    [
        (BranchDeleted, {"branch": "b", "reason": "gone", "through_index": 1}, "reason"),
        (BranchDeleted, {"branch": "b", "reason": "deleted", "through_index": -2}, "through"),
        (BranchAdded, {"branch": "b", "stream": "s", "parent": "main", "event": "x"}, "event id"),
        (TurnUsage, {"branch": "b"}, "lacks"),
        (SubagentContinued, {"agent_id": "a"}, "granted_authority"),
    ],
)
def test_malformed_branch_events_are_refused(
    kind: type[BranchDeleted], data: dict[str, object], message: str
) -> None:
    with pytest.raises(CodecError, match=message):
        kind.decode(json.dumps(data).encode())
    with pytest.raises(CodecError, match="not a JSON object"):
        kind.decode(b"[]")


def test_turn_usage_needs_a_turn_and_a_whole_anchor() -> None:
    body = json.loads(_all()[-1].encode())  # type: ignore[attr-defined]
    with pytest.raises(CodecError, match="turn"):
        TurnUsage.decode(json.dumps(body | {"turn": -1}).encode())
    # Turn 0 holds the items before the first user message: the SDK books usage there.
    assert TurnUsage.decode(json.dumps(body | {"turn": 0}).encode()).turn == 0
    with pytest.raises(CodecError, match="part"):
        TurnUsage.decode(json.dumps(body | {"anchor": {"stream": "s", "revision": 1}}).encode())
    with pytest.raises(CodecError, match="input_tokens_details"):
        TurnUsage.decode(json.dumps(body | {"input_tokens_details": {}}).encode())


@pytest.mark.parametrize(
    ("text", "turn"),
    [
        ("1", 1),
        ("12", 12),
        (None, None),
        ("0", None),
        ("01", None),
        ("-1", None),
        ("\u0661", None),
        ("x", None),
    ],
)
def test_turn_of_reads_only_turn_numbers(text: str | None, turn: int | None) -> None:
    assert turn_of({} if text is None else {events.TURN_KEY: text}) == turn


def test_every_branch_event_is_kept_whole_in_a_redacted_bundle() -> None:
    assert events.BRANCH_EVENTS <= KEPT
    for value in _all():
        assert not withholds(type(value).EVENT_TYPE, {})  # type: ignore[attr-defined]
