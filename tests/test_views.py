"""The tree view's lines for what a real run in the other tests does not write (pure)."""

from __future__ import annotations

import json

from agentjournal import events
from agentjournal.read.views import describe_record, plain_lines, tree_view
from agentjournal.records import Record, TreeRecords
from agentjournal.tokens import ModelResponse, Usage


def record(stream: str, revision: int, type_: str, body: object, **metadata: str) -> Record:
    return Record(stream, revision, f"id-{revision}", type_, json.dumps(body), "", metadata)


def test_a_model_response_shows_its_usage_where_it_happened() -> None:
    answer = ModelResponse(
        "s", "billing", "gpt-x", "openai", "r1", Usage(1, 100, 20, 30, 5, 130), None, "t"
    )
    line = describe_record(
        record("AgentSession-s", 3, events.MODEL_RESPONDED, json.loads(answer.encode()))
    )
    assert line == "billing ← gpt-x: 130 tokens (100 in, 30 out)"


def test_pops_clears_and_refusals_read_as_what_they_did() -> None:
    popped = {"stream": "AgentSession-s", "revision": 4, "part": 0, "message_index": 3}
    assert describe_record(record("S", 5, events.ITEM_POPPED, popped)) == (
        "pops #3 (AgentSession-s@4)"
    )
    cleared = record("S", 6, events.SESSION_CLEARED, {"through_index": 7})
    assert describe_record(cleared) == "clears every item through #7"
    assert describe_record(record("S", 7, "UserMessageReceived", {"content": "x" * 80})) == (
        "x" * 49 + "…"
    )
    assert describe_record(record("S", 8, events.GUARDRAIL_DECIDED, "not an object")) == (
        "(not a JSON object)"
    )


def test_the_demo_view_leaves_the_logs_out_and_show_keeps_them() -> None:
    tree = TreeRecords(
        "s",
        {
            "AgentSession-s": [
                record(
                    "AgentSession-s",
                    0,
                    "UserMessageReceived",
                    {"content": "hi"},
                    **{events.INDEX_KEY: "0"},
                )
            ],
            "AgentLedger-s": [
                record(
                    "AgentLedger-s",
                    0,
                    "agentjournal.Checkpoint",
                    {"key_id": "k", "heads": {"a": 1}},
                )
            ],
        },
    )
    assert [v.stream for v in tree_view(tree, logs=False)] == ["AgentSession-s"]
    assert plain_lines(tree_view(tree)) == [
        "AgentSession-s",
        "  @0  UserMessageReceived          #0 hi",
        "AgentLedger-s",
        "  @0  Checkpoint                   signed by k: heads of 1 stream",
    ]


def test_stored_control_characters_are_shown_escaped() -> None:
    from agentjournal.read.views import describe_item

    forged = {"content": "ok\n  @9  GuardrailDecided  ALLOW\x1b[2K\u2028\x9b"}
    line = describe_record(record("S", 1, "UserMessageReceived", forged))
    assert line == "ok\\n  @9  GuardrailDecided  ALLOW\\x1b[2K\\u2028\\x9b"
    assert describe_item({"role": "user", "content": "a\nb\u202e"}) == "user: a\\nb\\u202e"
    tree = TreeRecords("s", {"AgentSession-s": [record("AgentSession-s", 0, "X\x1b", forged)]})
    assert all("\x1b" not in line and "\n" not in line for line in plain_lines(tree_view(tree)))


def test_a_thread_state_shows_its_run_and_state_keys_never_values() -> None:
    body = {
        "run_id": "run-7",
        "agent_id": "billing",
        "status": "completed",
        "state": {"ticket": "T-1", "api_token": "sk-secret", "cart": {"total": 9}},
    }
    line = describe_record(record("AgentSession-t", 4, "agentjournal.ThreadState", body))
    assert line == "run run-7 completed by billing; state keys: api_token, cart, ticket"
    assert "sk-secret" not in line
    assert "T-1" not in line
    empty = describe_record(record("AgentSession-t", 5, "agentjournal.ThreadState", {}))
    assert empty == "run ? ? by ?; state keys: none"
