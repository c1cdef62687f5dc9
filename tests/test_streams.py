"""Stream names and the schema v2 §2.4 id rules."""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kurrent_agent_schema import agent_session_stream, agent_subsession_stream

from agentjournal.errors import InvalidInput
from agentjournal.streams import (
    MAX_ID_BYTES,
    session_stream,
    slug,
    subagent_id,
    subsession_stream,
    validate_id,
)

COMPONENT = re.compile(r"[A-Za-z0-9._-]{1,128}")


def is_component(value: str) -> bool:
    return COMPONENT.fullmatch(value) is not None and value[0] != "-" and value[-1] != "-"


@pytest.mark.parametrize(
    "value",
    ["support-4711", "a", "A.b_c-d", "x" * MAX_ID_BYTES, "0", "v1.2.3", "a--b", ".", "_x_"],
)
def test_valid_ids_are_returned_unchanged(value: str) -> None:
    assert validate_id(value, "session id") == value


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("", "must not be empty"),
        ("has space", "' '"),
        ("slash/inside", "'/'"),
        ("ünïcode", "'ü'"),
        ("tab\t", "'\\t'"),
        ("colon:x", "':'"),
        ("x" * (MAX_ID_BYTES + 1), "at most 128 bytes"),
        ("-leading", "starts or ends with '-'"),
        ("trailing-", "starts or ends with '-'"),
        ("-", "starts or ends with '-'"),
        ("{not-a-guid}", "'{'"),
    ],
)
def test_invalid_ids_are_refused_naming_the_rule(value: str, rule: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_id(value, "session id")
    assert rule in str(caught.value)
    assert "session id" in str(caught.value)


@pytest.mark.parametrize("value", [None, 42, b"bytes", ["list"]])
def test_non_string_ids_are_refused(value: object) -> None:
    with pytest.raises(InvalidInput, match="must be a string"):
        validate_id(value, "agent id")  # type: ignore[arg-type]


GUID = uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e")


@pytest.mark.parametrize(
    "value",
    [
        GUID,
        "0f8fad5b-d9cb-469f-a165-70867728950e",
        "0F8FAD5B-D9CB-469F-A165-70867728950E",
        "{0f8fad5b-d9cb-469f-a165-70867728950e}",
        "0F8FAD5BD9CB469FA16570867728950E",
        "0f8fad5bd9cb469fa16570867728950e",
    ],
)
def test_guids_are_written_lowercase_and_dashless(value: str | uuid.UUID) -> None:
    assert validate_id(value, "session id") == "0f8fad5bd9cb469fa16570867728950e"


def test_almost_guids_are_not_rewritten() -> None:
    # One brace, or the wrong group lengths: not a GUID, so never silently changed.
    with pytest.raises(InvalidInput):
        validate_id("{0f8fad5b-d9cb-469f-a165-70867728950e", "session id")
    assert validate_id("0F8FAD5B-D9CB-469F-A165-70867728950", "id") == (
        "0F8FAD5B-D9CB-469F-A165-70867728950"
    )


def test_session_stream_matches_the_schema_builder() -> None:
    assert session_stream("support-4711") == "AgentSession-support-4711"
    assert session_stream("support-4711") == agent_session_stream("support-4711")
    assert session_stream(GUID) == f"AgentSession-{GUID.hex}"
    with pytest.raises(InvalidInput, match="session id"):
        session_stream("bad id")


def test_subsession_stream_matches_the_schema_builder() -> None:
    name = subsession_stream("s-1", "sub-billing-call_1")
    assert name == "AgentSubsession-s-1-sub-billing-call_1"
    assert name == agent_subsession_stream("s-1", "sub-billing-call_1")
    with pytest.raises(InvalidInput, match="agent id"):
        subsession_stream("s-1", "-x")
    with pytest.raises(InvalidInput, match="session id"):
        subsession_stream("s 1", "x")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("Billing", "billing"),
        ("Billing Agent", "billing-agent"),
        ("  refunds / EU  ", "refunds-eu"),
        ("Ünïcödé Agent", "unicode-agent"),
        ("snake_case.v2", "snake_case.v2"),
        ("--x--", "x"),
        ("日本語", "agent"),
        ("", "agent"),
        ("a" * 200, "a" * 48),
    ],
)
def test_slug(name: str, expected: str) -> None:
    assert slug(name) == expected


@given(st.text())
def test_slug_is_always_a_valid_component(name: str) -> None:
    value = slug(name)
    assert is_component(value)
    assert len(value) <= 48
    assert validate_id(value, "slug") == value


def test_subagent_id_uses_the_call_id() -> None:
    assert subagent_id("Billing Agent", "call_AbC123") == "sub-billing-agent-call_AbC123"


@pytest.mark.parametrize("call_id", ["", "call id with spaces", "-x", "x-", "ü", "c" * 200])
def test_subagent_id_hashes_call_ids_that_cannot_be_used(call_id: str) -> None:
    agent_id = subagent_id("Billing", call_id)
    assert re.fullmatch(r"sub-billing-[0-9a-f]{24}", agent_id)
    assert agent_id == subagent_id("Billing", call_id)  # deterministic


@given(st.text(), st.text(), st.text())
def test_subagent_ids_are_valid_and_distinct_per_call(name: str, call_a: str, call_b: str) -> None:
    first = subagent_id(name, call_a)
    assert is_component(first)
    assert validate_id(first, "agent id") == first
    assert subsession_stream("s", first) == f"AgentSubsession-s-{first}"
    if call_a != call_b:
        assert first != subagent_id(name, call_b)


@given(st.text(alphabet=st.sampled_from("abcXYZ019._-"), min_size=1, max_size=140))
def test_validate_id_accepts_exactly_the_rule(value: str) -> None:
    if len(value) <= MAX_ID_BYTES and value[0] != "-" and value[-1] != "-":
        assert validate_id(value, "id") in (value, value.lower())
    else:
        with pytest.raises(InvalidInput):
            validate_id(value, "id")
