"""Sealing an event's content fields and opening them: structure kept, values exact, and
the erased forms a reader gets once the key is gone (pure)."""

from __future__ import annotations

import json

import pytest

from agentjournal.shred import SubjectKey
from agentjournal.shred._cipher import Unopenable, new_key
from agentjournal.shred.fields import (
    KEY_ID_KEY,
    SEALED,
    UNOPENABLE,
    erased_item,
    open_content,
    seal_content,
    sealed_key_ids,
)

KEY = SubjectKey("k1", "alice", new_key())
ITEM = {
    "arguments": '{"q": "lone \\ud800 é"}',
    "call_id": "c1",
    "name": "lookup",
    "type": "function_call",
}
DATA = json.dumps(
    {
        "tool_calls": [
            {"call_id": "c1", "tool_name": "lookup", "arguments": {"q": "lone \ud800 é"}},
        ],
        "message_index": 2,
        "extensions": {"openai": {"item_json": json.dumps(ITEM, separators=(",", ":"))}},
    }
).encode()


def _seal(data: bytes = DATA, type_: str = "AssistantToolCallsGenerated") -> bytes:
    sealed = seal_content(type_, data, stream="AgentSession-s", event_id="e1", key=KEY)
    assert sealed is not None
    return sealed


def test_a_sealed_event_keeps_its_structure_and_opens_to_the_same_values() -> None:
    sealed = _seal()
    body = json.loads(sealed)
    assert body["tool_calls"][0]["tool_name"] == "lookup"
    assert body["tool_calls"][0]["call_id"] == "c1"
    assert set(body["tool_calls"][0]["arguments"]) == {KEY_ID_KEY}
    assert body["extensions"]["openai"]["item_json"].startswith("aj.enc:v1:k1:")
    assert b'lookup\\"' not in sealed
    assert sealed_key_ids("AssistantToolCallsGenerated", sealed) == {"k1"}
    opened = open_content(
        "AssistantToolCallsGenerated",
        sealed,
        stream="AgentSession-s",
        event_id="e1",
        find={"k1": KEY}.get,
    )
    assert json.loads(opened) == json.loads(DATA)


def test_a_sealed_field_moved_to_another_event_does_not_open() -> None:
    sealed = _seal()
    with pytest.raises(Unopenable):
        open_content(
            "AssistantToolCallsGenerated",
            sealed,
            stream="AgentSession-s",
            event_id="e2",
            find={"k1": KEY}.get,
        )


def test_an_erased_event_shows_its_item_s_erased_form_and_erased_text() -> None:
    opened = json.loads(
        open_content(
            "AssistantToolCallsGenerated",
            _seal(),
            stream="AgentSession-s",
            event_id="e1",
            find=lambda kid: None,
        )
    )
    assert opened["tool_calls"][0]["arguments"] == {}
    item = json.loads(opened["extensions"]["openai"]["item_json"])
    assert item == {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}
    assert "erased_item" not in opened["extensions"]["openai"]


def _never_held(kid: str) -> SubjectKey | None:
    raise KeyError(kid)


def test_a_read_tool_sees_sealed_for_a_key_it_lacks_and_unopenable_for_an_altered_value() -> None:
    message = {"role": "user", "content": "hello PLAIN-1"}
    data = json.dumps(
        {
            "content": "hello PLAIN-1",
            "extensions": {"openai": {"item_json": json.dumps(message)}},
        }
    ).encode()
    sealed = _seal(data, "UserMessageReceived")
    with pytest.raises(KeyError):
        open_content(
            "UserMessageReceived", sealed, stream="AgentSession-s", event_id="e1", find=_never_held
        )
    for find, event_id, marker in (
        (_never_held, "e1", SEALED),
        ({"k1": KEY}.get, "e2", UNOPENABLE),  # moved to another event: it does not open
    ):
        shown = open_content(
            "UserMessageReceived",
            sealed,
            stream="AgentSession-s",
            event_id=event_id,
            find=find,
            shown=True,
        )
        assert b"aj.enc:v1:" not in shown
        assert b"PLAIN-1" not in shown
        body = json.loads(shown)
        assert body["content"] == marker
        assert json.loads(body["extensions"]["openai"]["item_json"]) == {
            "role": "user",
            "content": marker,
        }


def test_a_type_without_content_is_not_sealed() -> None:
    assert (
        seal_content("SessionStarted", b'{"user_id": "alice"}', stream="s", event_id="e", key=KEY)
        is None
    )


@pytest.mark.parametrize(
    ("item", "erased"),
    [
        ({"role": "user", "content": "hi"}, {"role": "user", "content": "[erased]"}),
        (
            {
                "id": "m1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "x", "annotations": []}],
            },
            {
                "id": "m1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "[erased]", "annotations": []}],
            },
        ),
        (
            {"call_id": "c1", "output": "secret", "type": "function_call_output"},
            {"call_id": "c1", "output": "[erased]", "type": "function_call_output"},
        ),
        (
            {"id": "rs", "type": "reasoning", "summary": [], "encrypted_content": "opaque"},
            {
                "id": "rs",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "[erased]"}],
            },
        ),
        ({"__enc__": 1, "payload": "x"}, {"role": "assistant", "content": "[erased]"}),
        (  # a message's name is the application's free text
            {"role": "user", "content": "hi", "name": "ZQ-a-person"},
            {"role": "user", "content": "[erased]"},
        ),
        (
            {"type": "message", "role": "user", "content": "hi", "name": "ZQ-a-person"},
            {"type": "message", "role": "user", "content": "[erased]"},
        ),
    ],
)
def test_an_erased_item_keeps_what_the_sdk_needs_to_run_a_turn(
    item: dict[str, object], erased: dict[str, object]
) -> None:
    assert erased_item(item) == erased
