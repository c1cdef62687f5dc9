"""Tamper evidence: every edit of a recorded session is detected, with the stream and revision.

The sessions are written by the SDK's real Runner (``ledger_sessions.py``);
each test edits an exported bundle the way an attacker would — including
recomputing digests and chains, which needs no key — and verifies it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal.audit.verify import Problem, verify_bundle
from agentjournal.ledger import SigningKey
from ledger_sessions import KEY, TRUSTED, edited, rechain, record, relink, resign, stream_of

BUNDLES = record()


def problem(bundle: dict[str, Any], **options: Any) -> Problem:
    report = verify_bundle(bundle, TRUSTED, **options)
    assert not report.ok, report.text()
    # A missing trusted key is a state of its own, not a failure of the record.
    states = ("SIGNED BY AN UNTRUSTED KEY: ", "UNSIGNED: ")
    last = report.text().splitlines()[-1]
    failed = any(not found.untrusted for found in report.problems)
    assert last.startswith(("FAILED: ",) if failed else states), last
    return report.problems[0]


def event_of(bundle: dict[str, Any], prefix: str, type_: str) -> tuple[str, dict[str, Any]]:
    stream = stream_of(bundle, prefix)
    return stream["name"], next(e for e in stream["events"] if e["type"] == type_)


@pytest.mark.parametrize("name", sorted(BUNDLES))
def test_recorded_sessions_verify(name: str) -> None:
    report = verify_bundle(BUNDLES[name], TRUSTED)
    assert report.ok, report.text()
    assert report.text().splitlines()[-1].startswith("VERIFIED: ")


def test_edit_data() -> None:
    bundle = edited(BUNDLES["guarded"])
    stream, event = event_of(bundle, "AgentSession-", "UserMessageReceived")
    event["data"] = event["data"].replace("secret", "public")
    found = problem(bundle)
    assert (found.stream, found.revision, found.check) == (stream, event["revision"], "integrity")
    assert "digest" in found.message
    # Recomputing the digest does not help: the hash covers it.
    event["data_sha256"] = __import__("hashlib").sha256(event["data"].encode()).hexdigest()
    found = problem(bundle)
    assert (found.stream, found.revision) == (stream, event["revision"])
    assert "hash" in found.message


def test_edit_metadata() -> None:
    bundle = edited(BUNDLES["guarded"])
    stream, event = event_of(bundle, "AgentSession-", "AssistantToolCallsGenerated")
    event["metadata"]["aj.index"] = "99"
    found = problem(bundle)
    assert (found.stream, found.revision) == (stream, event["revision"])


def test_delete_an_event() -> None:
    bundle = edited(BUNDLES["guarded"])
    stream = stream_of(bundle, "AgentSession-")
    del stream["events"][3]
    found = problem(bundle)
    assert (found.stream, found.revision) == (stream["name"], 4)
    assert "removed" in found.message


def test_reorder_two_events() -> None:
    bundle = edited(BUNDLES["guarded"])
    stream = stream_of(bundle, "AgentSession-")
    events = stream["events"]
    events[2], events[3] = events[3], events[2]
    found = problem(bundle)
    assert (found.stream, found.revision) == (stream["name"], 3)
    # Renumbering the revisions does not help either.
    events[2]["revision"], events[3]["revision"] = 2, 3
    found = problem(bundle)
    assert (found.stream, found.revision) == (stream["name"], 2)


def test_truncate_the_tail_is_caught_by_the_checkpoint() -> None:
    bundle = edited(BUNDLES["simple"])
    stream = stream_of(bundle, "AgentSession-")
    last = stream["events"].pop()
    unsigned = edited(bundle)
    unsigned["streams"] = [s for s in unsigned["streams"] if s["name"] == stream["name"]]
    assert verify_bundle(unsigned, {}, allow_uncovered=True).ok  # the chain alone cannot tell
    found = problem(bundle)
    assert (found.check, found.stream, found.revision) == (
        "checkpoints",
        stream["name"],
        last["revision"],
    )
    assert "truncated" in found.message


def test_removing_the_last_checkpoint_uncovers_the_tail() -> None:
    bundle = edited(BUNDLES["guarded"])
    ledger = stream_of(bundle, "AgentLedger-")
    ledger["events"].pop()
    stream = stream_of(bundle, "AgentSession-")
    stream["events"].pop()  # and the events it covered
    found = problem(bundle)
    assert found.check == "checkpoints"
    assert "after the last checkpoint" in found.message


def test_splice_an_event_from_another_session() -> None:
    bundle = edited(BUNDLES["guarded"])
    foreign = stream_of(BUNDLES["nested"], "AgentSession-")["events"][1]
    stream = stream_of(bundle, "AgentSession-")
    spliced = json.loads(json.dumps(foreign))
    spliced["revision"] = 1
    stream["events"][1] = spliced
    found = problem(bundle)
    assert (found.stream, found.revision) == (stream["name"], 1)


def test_flip_a_guardrail_decision() -> None:
    bundle = edited(BUNDLES["guarded"])
    stream, event = event_of(bundle, "AgentSession-", "agentjournal.GuardrailDecided")
    body = json.loads(event["data"])
    body["decision"] = "BLOCK" if body["decision"] != "BLOCK" else "ALLOW"
    event["data"] = json.dumps(body)
    assert problem(bundle).check == "integrity"
    rechain(bundle, stream)  # the attacker recomputes the chain: the signature still holds
    found = problem(bundle)
    assert (found.check, found.stream) == ("checkpoints", stream)


def _widen(bundle: dict[str, Any]) -> None:
    for stream in bundle["streams"]:
        for event in stream["events"]:
            if event["type"] != "SubagentStarted":
                continue
            body = json.loads(event["data"])
            granted = json.loads(body["extensions"]["agentjournal"]["granted_authority"])
            granted["scopes"] = ["admin.*", *granted["scopes"]]
            body["extensions"]["agentjournal"]["granted_authority"] = json.dumps(granted)
            event["data"] = json.dumps(body)
        rechain(bundle, stream["name"])


def test_widen_a_granted_authority() -> None:
    bundle = edited(BUNDLES["nested"])
    _widen(bundle)
    assert problem(bundle).check == "twins"  # the parent recorded the subsession's old hash
    relink(bundle)
    assert problem(bundle).check == "checkpoints"  # the chains were redone, not the signature
    resign(bundle, SigningKey.generate())
    found = problem(bundle)
    assert found.check == "checkpoints"
    assert "not a trusted key" in found.message
    # Even a checkpoint signed with the trusted key does not make a wider grant valid.
    resign(bundle, KEY)
    found = problem(bundle)
    assert found.check == "delegation"
    assert "wider than its sender's" in found.message


def test_a_checkpoint_signed_with_a_foreign_key() -> None:
    bundle = edited(BUNDLES["simple"])
    resign(bundle, SigningKey.generate())
    found = problem(bundle)
    assert (found.check, found.stream, found.revision) == ("checkpoints", "AgentLedger-simple", 0)
    assert "not a trusted key" in found.message


def test_a_forged_signature() -> None:
    bundle = edited(BUNDLES["simple"])
    ledger = stream_of(bundle, "AgentLedger-")
    body = json.loads(ledger["events"][0]["data"])
    body["signed_at"] = "2020-01-01T00:00:00+00:00"
    ledger["events"][0]["data"] = json.dumps(body)
    rechain(bundle, ledger["name"])
    found = problem(bundle)
    assert "signature is invalid" in found.message


def test_an_executed_call_without_an_allow() -> None:
    """Containment: a writer that logged a call the guardrail never allowed."""
    bundle = edited(BUNDLES["guarded"])
    stream = stream_of(bundle, "AgentSession-")
    stream["events"] = [
        e
        for e in stream["events"]
        if not (e["type"] == "agentjournal.GuardrailDecided" and '"TOOL_CALL"' in e["data"])
    ]
    rechain(bundle, stream["name"])
    resign(bundle, KEY)
    found = problem(bundle)
    assert found.check == "containment"
    assert "without an ALLOW or MODIFY decision" in found.message


@pytest.mark.parametrize(
    "bundle",
    [None, {}, [], "", {"format": "agentjournal-bundle"}],
    ids=["null", "empty-object", "list", "string", "missing-fields"],
)
def test_empty_or_malformed_input_fails(bundle: Any) -> None:
    assert problem(bundle).check == "structure"


def test_unknown_fields_fail() -> None:
    for where in ("top", "stream", "event"):
        bundle = edited(BUNDLES["simple"])
        target = {
            "top": bundle,
            "stream": bundle["streams"][0],
            "event": bundle["streams"][0]["events"][0],
        }[where]
        target["trust_me"] = True
        assert problem(bundle).check == "structure"


def test_without_a_trusted_key_nothing_is_ok() -> None:
    report = verify_bundle(BUNDLES["simple"], {})
    assert not report.ok
    assert "not a trusted key" in str(report.problems[0])


def test_a_redacted_bundle_still_verifies() -> None:
    bundle = edited(BUNDLES["guarded"])
    bundle["redacted"] = True
    for stream in bundle["streams"]:
        for event in stream["events"]:
            if event["type"] in ("UserMessageReceived", "AssistantTextGenerated"):
                event["data"] = None
    assert verify_bundle(bundle, TRUSTED).ok


# -- any single mutation is detected ---------------------------------------------------

MUTATIONS = [
    "data",
    "metadata-value",
    "metadata-add",
    "metadata-remove",
    "delete",
    "swap",
    "truncate",
    "duplicate",
    "type",
    "id",
    "revision",
    "withhold-and-edit-digest",
]


def mutate(bundle: dict[str, Any], kind: str, stream_pick: int, event_pick: int) -> None:
    stream = bundle["streams"][stream_pick % len(bundle["streams"])]
    events = stream["events"]
    index = event_pick % len(events)
    event = events[index]
    if kind == "data":
        event["data"] = event["data"] + " "
    elif kind == "metadata-value":
        key = sorted(event["metadata"])[event_pick % len(event["metadata"])]
        event["metadata"][key] += "x"
    elif kind == "metadata-add":
        event["metadata"]["aj.extra"] = "1"
    elif kind == "metadata-remove":
        key = sorted(event["metadata"])[event_pick % len(event["metadata"])]
        del event["metadata"][key]
    elif kind == "delete":
        del events[index]
    elif kind == "swap":
        other = (index + 1) % len(events)
        if other == index:
            events.append(json.loads(json.dumps(event)))  # a one-event stream: duplicate it
        else:
            events[index], events[other] = events[other], events[index]
    elif kind == "truncate":
        del events[index:]
    elif kind == "duplicate":
        events.insert(index, json.loads(json.dumps(event)))
    elif kind == "type":
        event["type"] += "X"
    elif kind == "id":
        event["id"] = "00000000-0000-0000-0000-000000000000"
    elif kind == "revision":
        event["revision"] += 1
    elif kind == "withhold-and-edit-digest":
        event["data"] = None
        event["data_sha256"] = "0" * 64
    if not stream["events"]:
        bundle["streams"].remove(stream)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(sorted(BUNDLES)),
    st.sampled_from(MUTATIONS),
    st.integers(0, 1000),
    st.integers(0, 1000),
)
def test_every_single_mutation_is_detected(
    name: str, kind: str, stream_pick: int, event_pick: int
) -> None:
    bundle = edited(BUNDLES[name])
    mutate(bundle, kind, stream_pick, event_pick)
    assert not verify_bundle(bundle, TRUSTED).ok, (name, kind, stream_pick, event_pick)


def test_withholding_what_is_never_redacted_fails() -> None:
    """A tool call's arguments are withheld only behind their committed view: nulling them
    cannot hide a ceiling breach."""
    bundle = edited(BUNDLES["guarded"])
    bundle["redacted"] = True
    stream, event = event_of(bundle, "AgentSession-", "AssistantToolCallsGenerated")
    event["data"] = None
    found = problem(bundle)
    assert (found.stream, found.revision, found.check) == (stream, event["revision"], "integrity")
    assert "withheld" in found.message


@pytest.mark.parametrize("where", ["surrogate-data", "extensions", "granted", "rule"])
def test_crafted_events_fail_instead_of_crashing(where: str) -> None:
    bundle = edited(BUNDLES["nested"])
    if where == "surrogate-data":
        stream = stream_of(bundle, "AgentSession-")
        stream["events"][1]["data"] = "\ud800"
    else:
        for stream in bundle["streams"]:
            for event in stream["events"]:
                if where == "rule" and "aj.tool_rule" in event["metadata"]:
                    event["metadata"]["aj.tool_rule"] = '{"ceilings": 3}'
                if event["type"] != "SubagentStarted" or where == "rule":
                    continue
                body = json.loads(event["data"])
                if where == "extensions":
                    body["extensions"] = "x"
                else:
                    body["extensions"]["agentjournal"]["granted_authority"] = "{not json"
                event["data"] = json.dumps(body)
            rechain(bundle, stream["name"])
        relink(bundle)
        resign(bundle, KEY)
    report = verify_bundle(bundle, TRUSTED)
    assert not report.ok
    assert report.text().splitlines()[-1].startswith("FAILED: ")


def test_a_bundle_cut_back_to_an_earlier_checkpoint_needs_an_outside_anchor() -> None:
    bundle = edited(BUNDLES["guarded"])
    ledger = stream_of(bundle, "AgentLedger-")
    first = json.loads(ledger["events"][0]["data"])
    # Cut every stream back to what the first checkpoint covered; drop what came after.
    heads = first["heads"]
    bundle["streams"] = [
        s
        for s in bundle["streams"]
        if s["name"] in heads or s["name"] == ledger["name"] or s["name"].startswith("AgentSub")
    ]
    for stream in bundle["streams"]:
        if stream["name"] in heads:
            del stream["events"][heads[stream["name"]]["revision"] + 1 :]
    ledger["events"] = ledger["events"][:1]
    opened = {
        json.loads(e["data"])["subsession_stream"]
        for s in bundle["streams"]
        for e in s["events"]
        if e["type"] == "SubagentStarted" and "aj.index" in e["metadata"]
    }
    bundle["streams"] = [
        s for s in bundle["streams"] if not s["name"].startswith("AgentSub") or s["name"] in opened
    ]
    report = verify_bundle(bundle, TRUSTED)
    assert report.ok, report.text()  # indistinguishable from the session as it was then
    later = json.loads(stream_of(BUNDLES["guarded"], "AgentLedger-")["events"][-1]["data"])
    found = problem(bundle, not_before=later["signed_at"])
    assert "cut back" in found.message


def test_checkpoints_of_two_writers_together_cover_the_session() -> None:
    """A checkpoint that lands last but knew less does not make earlier coverage void."""
    bundle = edited(BUNDLES["simple"])
    ledger = stream_of(bundle, "AgentLedger-")
    session = stream_of(bundle, "AgentSession-")
    from datetime import UTC, datetime

    from agentjournal.ledger import Checkpoint, signed_event_id

    stale = Checkpoint.sign(
        KEY,
        "simple",
        {session["name"]: (1, session["events"][1]["metadata"]["aj.hash"])},
        datetime.now(UTC),
        sequence=1,
        previous=ledger["events"][0]["metadata"]["aj.hash"],
    )
    ledger["events"].append(
        {
            "revision": 1,
            "id": str(signed_event_id(ledger["name"], stale.signature)),
            "type": "agentjournal.Checkpoint",
            "data": stale.encode().decode(),
            "data_sha256": "",
            "metadata": {},
            "view": None,
        }
    )
    rechain(bundle, ledger["name"])
    report = verify_bundle(bundle, TRUSTED)
    assert report.ok, report.text()
