"""Chain record format 2: its spec and worked example (SCHEMA.md, "Chain
records"), format 1 sessions and bundles still verifying, streams holding both, and tampering
with a format 2 event or its format label."""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from agentjournal import Journal
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import Problem, parse_bundle, verify_bundle
from agentjournal.engine import sealing
from agentjournal.errors import InvalidInput
from agentjournal.ledger import SigningKey, chain, key_id, load_public_key
from ledger_sessions import rechain, relink

ROOT = Path(__file__).resolve().parents[1]
V1 = Path(__file__).parent / "data" / "ledger_v1"

# -- the spec --------------------------------------------------------------------------------

# SCHEMA.md's worked example: these exact values appear there.
EXAMPLE_DATA = b'{"role":"user","content":"Where is order 42?"}'
EXAMPLE_PREV = "db7e886a5d83350840781bac795bc3b90f214f3a526fd1e4c556471a78e24601"
EXAMPLE_RECORD = (
    '[2,"AgentSession-demo",1,"6f1c0a52-7d2b-5c3e-9a41-0b8e3f2d1c7a","UserMessageReceived",'
    '"b256fcde025b3d96e89057af4c07f89af121a30a00cc167fb677c4ccc4db8b2c",'
    '{"$schema_version":"2","aj.chain":"2","aj.index":"0","aj.next_index":"1",'
    '"aj.prev":"db7e886a5d83350840781bac795bc3b90f214f3a526fd1e4c556471a78e24601",'
    '"aj.seq":"1","aj.tool_rule":"{\\"scope\\":\\"orders.read\\"}"}]'
)
EXAMPLE_HASH = "36ca3fce80b27364282ae56d025a326e78a0f8e84f1377634998139f679bc602"


def test_the_worked_example_of_schema_md() -> None:
    metadata = {
        "$schema_version": "2",
        "aj.index": "0",
        "aj.next_index": "1",
        "aj.tool_rule": '{"scope":"orders.read"}',
    }
    event_id, type_ = "6f1c0a52-7d2b-5c3e-9a41-0b8e3f2d1c7a", "UserMessageReceived"
    digest = chain.seal(
        "AgentSession-demo", 1, event_id, type_, EXAMPLE_DATA, metadata, EXAMPLE_PREV
    )
    assert (metadata["aj.seq"], metadata["aj.prev"], metadata["aj.chain"]) == (
        "1",
        EXAMPLE_PREV,
        "2",
    )
    assert hashlib.sha256(EXAMPLE_DATA).hexdigest() in EXAMPLE_RECORD
    record = chain.record_bytes(
        "AgentSession-demo", 1, event_id, type_, hashlib.sha256(EXAMPLE_DATA).hexdigest(), metadata
    )
    assert record == EXAMPLE_RECORD.encode()
    assert digest == metadata["aj.hash"] == EXAMPLE_HASH == hashlib.sha256(record).hexdigest()
    # SCHEMA.md shows the record split over three lines in a code block.
    schema = (ROOT / "SCHEMA.md").read_text()
    start = schema.index('```\n[2,"AgentSession-demo"') + 4
    assert schema[start : schema.index("```", start)].replace("\n", "") == EXAMPLE_RECORD
    assert EXAMPLE_HASH in schema
    assert EXAMPLE_PREV in schema


def _spec_string(text: str) -> str:
    """A JSON string as SCHEMA.md says (RFC 8785's escaping), written from the text alone."""
    short = {
        '"': '\\"',
        "\\": "\\\\",
        "\b": "\\b",
        "\f": "\\f",
        "\n": "\\n",
        "\r": "\\r",
        "\t": "\\t",
    }
    out = []
    for char in text:
        if char in short:
            out.append(short[char])
        elif ord(char) < 0x20:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _spec_record(
    stream: str, revision: int, event_id: str, type_: str, digest: str, metadata: dict[str, str]
) -> bytes:
    members = sorted(
        ((k, v) for k, v in metadata.items() if k != "aj.hash"),
        key=lambda member: [ord(char) for char in member[0]],  # code points
    )
    head = [_spec_string(stream), str(revision), _spec_string(event_id), _spec_string(type_)]
    body = ",".join(f"{_spec_string(k)}:{_spec_string(v)}" for k, v in members)
    return f"[2,{','.join(head)},{_spec_string(digest)},{{{body}}}]".encode()


_text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=20)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    _text,
    st.integers(0, 2**63 - 1),
    _text,
    _text,
    st.dictionaries(st.one_of(_text, st.text(alphabet=st.characters(max_codepoint=127))), _text),
)
def test_format_2_records_are_what_the_spec_says(
    stream: str, revision: int, event_id: str, type_: str, extra: dict[str, str]
) -> None:
    metadata = {**extra, "aj.chain": "2", "aj.hash": "f" * 64}
    digest = "ab" * 32
    expected = _spec_record(stream, revision, event_id, type_, digest, metadata)
    assert chain.record_bytes(stream, revision, event_id, type_, digest, metadata) == expected
    assert chain.chain_hash(stream, revision, event_id, type_, digest, metadata) == (
        hashlib.sha256(expected).hexdigest()
    )


def test_the_two_formats_never_give_the_same_record() -> None:
    fields = ("S-1", 0, "id", "T", "0" * 64)
    one = chain.record_bytes(*fields, {"aj.seq": "0"})
    two = chain.record_bytes(*fields, {"aj.seq": "0", "aj.chain": "2"})
    assert one.startswith(b"{")
    assert two.startswith(b"[")


@pytest.mark.parametrize("label", ["1", "3", "", "2 "])
def test_a_chain_format_this_version_does_not_know_cannot_be_hashed(label: str) -> None:
    with pytest.raises(InvalidInput, match="chain format"):
        chain.chain_hash("S-1", 0, "id", "T", "0" * 64, {"aj.chain": label})


def test_a_lone_surrogate_cannot_be_chained_in_format_2() -> None:
    with pytest.raises(InvalidInput, match="lone surrogate"):
        chain.seal("S", 0, "id", "T", b"{}", {"aj.x": "\ud800"}, chain.GENESIS)


# -- format 1 still verifies ----------------------------------------------------------------


def _fixture(name: str) -> Any:
    return parse_bundle((V1 / name).read_bytes())


def _trusted_v1() -> Any:
    public = load_public_key((V1 / "public-key.txt").read_text())
    return {key_id(public): public}


def _events(bundle: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for stream in bundle["streams"]:
        for event in stream["events"]:
            yield stream["name"], event


@pytest.mark.parametrize("name", ["nested.json", "nested-redacted.json"])
def test_bundles_written_before_format_2_verify(name: str) -> None:
    bundle = _fixture(name)
    assert all("aj.chain" not in event["metadata"] for _, event in _events(bundle))
    assert len(bundle["streams"]) >= 4  # the session, two subsessions, the authority log, ...
    report = verify_bundle(bundle, _trusted_v1())
    assert report.ok, report.text()
    # and an edit of a format 1 event is still caught
    _, event = next(e for e in _events(bundle) if e[1]["type"] == "SubagentStarted")
    event["metadata"]["aj.next_index"] = "99"
    assert _first_problem(bundle, _trusted_v1()).message == "the hash does not match the event"


def _first_problem(bundle: Any, trusted: Any) -> Problem:
    report = verify_bundle(bundle, trusted)
    assert not report.ok
    return report.problems[0]


# -- a session written in both formats ------------------------------------------------------

KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}


def _turn(n: int) -> list[Any]:
    return [
        {"role": "user", "content": f"Where is order {n}?"},
        {
            "type": "function_call",
            "call_id": f"call_{n}",
            "name": "lookup_order",
            "arguments": json.dumps({"order_id": str(n)}),
        },
        {"type": "function_call_output", "call_id": f"call_{n}", "output": "shipped"},
    ]


async def _write(uri: str, turns: range) -> None:
    async with Journal.open(uri, signing_key=KEY) as journal:
        session = journal.session("mixed")
        for n in turns:
            await session.add_items(_turn(n))
        await session.checkpoint()


async def _mixed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    with monkeypatch.context() as patch:  # the writer as it was before format 2
        patch.setattr(sealing, "seal", functools.partial(chain.seal, chain_format=1))
        await _write(uri, range(2))
    await _write(uri, range(2, 4))  # the same session continued by this version
    async with Journal.open(uri) as journal:
        return await export_bundle(journal.store, "mixed")


@pytest.mark.asyncio
async def test_an_old_session_continued_by_new_code_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = await _mixed(tmp_path, monkeypatch)
    session = next(s for s in bundle["streams"] if s["name"].startswith("AgentSession-"))
    labels = [event["metadata"].get("aj.chain") for event in session["events"]]
    assert None in labels
    assert "2" in labels
    assert labels == sorted(labels, key=lambda label: label is not None)  # 1s, then 2s
    ledger = next(s for s in bundle["streams"] if s["name"].startswith("AgentLedger-"))
    assert len(ledger["events"]) == 2
    assert all("aj.chain" not in event["metadata"] for event in ledger["events"])
    report = verify_bundle(bundle, TRUSTED)
    assert report.ok, report.text()
    async with Journal.open(f"sqlite:///{tmp_path / 'journal.db'}") as journal:
        redacted = await export_bundle(journal.store, "mixed", redact=True)
    assert verify_bundle(redacted, TRUSTED).ok


# -- tampering ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def v2_bundle(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    uri = f"sqlite:///{tmp_path_factory.mktemp('v2') / 'journal.db'}"
    asyncio.run(_write(uri, range(3)))

    async def export() -> dict[str, Any]:
        async with Journal.open(uri) as journal:
            return await export_bundle(journal.store, "mixed")

    bundle = asyncio.run(export())
    for name, event in _events(bundle):  # checkpoints stay format 1 (SCHEMA.md)
        assert event["metadata"].get("aj.chain") == (
            None if name.startswith("AgentLedger-") else "2"
        )
    assert verify_bundle(bundle, TRUSTED).ok
    return bundle


def _call_event(bundle: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A tool call in the middle of the session stream (it has a view commitment too)."""
    found = [
        (name, event)
        for name, event in _events(bundle)
        if name.startswith("AgentSession-")
        and event["metadata"].get("aj.item_type") == "function_call"
    ]
    return found[len(found) // 2]


def _edits() -> list[str]:
    return [
        "id",
        "type",
        "data",
        "data_sha256",
        "metadata:add",
        "metadata:$schema_version",
        "metadata:aj.index",
        "metadata:aj.next_index",
        "metadata:aj.call_id",
        "metadata:aj.item_type",
        "metadata:aj.redacted",
        "metadata:aj.chain",
        "metadata:aj.seq",
        "metadata:aj.prev",
        "drop:$schema_version",
        "drop:aj.index",
        "drop:aj.redacted",
        "drop:aj.chain",
        "drop:aj.seq",
        "drop:aj.prev",
    ]


@pytest.mark.parametrize("edit", _edits())
def test_a_tampered_format_2_event_fails_field_by_field(
    v2_bundle: dict[str, Any], edit: str
) -> None:
    bundle = copy.deepcopy(v2_bundle)
    name, event = _call_event(bundle)
    metadata = event["metadata"]
    if edit in ("id", "type"):
        event[edit] = event[edit][:-1] + ("0" if event[edit][-1] != "0" else "1")
    elif edit == "data":  # the data and its digest both changed: the chain still sees it
        event["data"] = event["data"].replace("lookup_order", "issue_refund")
        event["data_sha256"] = hashlib.sha256(event["data"].encode()).hexdigest()
    elif edit == "data_sha256":
        event["data_sha256"] = "0" * 64
    elif edit == "metadata:add":
        metadata["aj.extra"] = "1"
    elif edit.startswith("metadata:"):
        key = edit.removeprefix("metadata:")
        metadata[key] = metadata[key] + "0"
    else:
        del metadata[edit.removeprefix("drop:")]
    found = _first_problem(bundle, TRUSTED)
    assert (found.check, found.stream, found.revision) == ("integrity", name, event["revision"])
    assert edit not in ("metadata:add", "drop:aj.index") or found.message == (
        "the hash does not match the event"
    )


def test_each_field_of_a_format_2_record_is_bound() -> None:
    metadata = {"aj.chain": "2", "aj.seq": "3", "aj.prev": "cd" * 32, "aj.index": "1"}
    base = chain.chain_hash("S-1", 3, "id", "T", "ab" * 32, metadata)
    for changed in (
        chain.chain_hash("S-2", 3, "id", "T", "ab" * 32, metadata),
        chain.chain_hash("S-1", 4, "id", "T", "ab" * 32, metadata),
        chain.chain_hash("S-1", 3, "id2", "T", "ab" * 32, metadata),
        chain.chain_hash("S-1", 3, "id", "U", "ab" * 32, metadata),
        chain.chain_hash("S-1", 3, "id", "T", "ba" * 32, metadata),
        chain.chain_hash("S-1", 3, "id", "T", "ab" * 32, {**metadata, "aj.more": ""}),
    ):
        assert changed != base
    for key in metadata.keys() - {"aj.chain"}:  # a label it does not know is refused (above)
        edited = {**metadata, key: metadata[key] + "x"}
        assert chain.chain_hash("S-1", 3, "id", "T", "ab" * 32, edited) != base


@pytest.mark.parametrize("relabel", ["to format 1", "to format 3"])
def test_a_relabelled_format_2_event_fails(v2_bundle: dict[str, Any], relabel: str) -> None:
    bundle = copy.deepcopy(v2_bundle)
    name, event = _call_event(bundle)
    if relabel == "to format 1":
        del event["metadata"]["aj.chain"]
        message = "the hash does not match the event"
    else:
        event["metadata"]["aj.chain"] = "3"
        message = "the event names chain format '3'; this version knows 1 and 2"
    found = _first_problem(bundle, TRUSTED)
    assert (found.check, found.stream, found.revision, found.message) == (
        "integrity",
        name,
        event["revision"],
        message,
    )


def test_a_format_1_event_relabelled_format_2_fails() -> None:
    bundle = _fixture("nested.json")
    name, event = next(e for e in _events(bundle) if e[1]["type"] == "AssistantToolCallsGenerated")
    event["metadata"]["aj.chain"] = "2"
    found = _first_problem(bundle, _trusted_v1())
    assert (found.check, found.stream, found.revision, found.message) == (
        "integrity",
        name,
        event["revision"],
        "the hash does not match the event",
    )


@pytest.mark.parametrize("direction", ["2 to 1", "1 to 2"])
def test_relabelled_and_rehashed_the_checkpoint_still_fails(
    v2_bundle: dict[str, Any], direction: str
) -> None:
    """An attacker who relabels a stream's events and recomputes every hash and link under
    the new label is left with heads the signed checkpoint does not name."""
    if direction == "2 to 1":
        bundle, trusted = copy.deepcopy(v2_bundle), TRUSTED
    else:
        bundle, trusted = _fixture("nested.json"), _trusted_v1()
    stream = next(s for s in bundle["streams"] if s["name"].startswith("AgentSession-"))
    for event in stream["events"]:
        if direction == "2 to 1":
            del event["metadata"]["aj.chain"]
        else:
            event["metadata"]["aj.chain"] = "2"
    rechain(bundle, stream["name"])
    relink(bundle)
    report = verify_bundle(bundle, trusted)
    assert not report.ok
    assert {problem.check for problem in report.problems} == {"checkpoints"}, report.text()


def test_the_catalog_reports_a_chain_format_it_does_not_know() -> None:
    """``agentjournal sessions`` folds every event's chain: an unknown label is a broken chain
    there too, never a crash."""
    from datetime import UTC, datetime

    from agentjournal.read.catalog import Catalog
    from agentjournal.store.contract import RecordedEvent

    catalog = Catalog()
    prev, stream = chain.GENESIS, "AgentSession-a"
    for revision in range(2):
        data = json.dumps({"content": f"item {revision}"}).encode()
        metadata = {"$schema_version": "2", "aj.index": str(revision)}
        event_id = uuid.uuid4()
        prev = chain.seal(
            stream, revision, str(event_id), "UserMessageReceived", data, metadata, prev
        )
        if revision == 1:
            metadata["aj.chain"] = "9"
        catalog.fold(
            RecordedEvent(
                id=event_id,
                type="UserMessageReceived",
                data=data,
                metadata=metadata,
                stream=stream,
                revision=revision,
                position=revision,
                recorded_at=datetime.now(UTC),
            )
        )
    (row,) = catalog.rows({})
    assert row.integrity.state == "failed"
    assert row.integrity.problem == (
        f"{stream}@1: the event names a chain format this version does not know (broken chain)"
    )


# -- view commitments -----------------------------------------------------------------------

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text()
    | st.sampled_from(["lone \ud800 surrogate", "\U0001f600 astral", "\ue000 private"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text() | st.sampled_from(["\U0001f600", "\uffff", "a"]), inner, max_size=4
        )
    ),
    max_leaves=16,
)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(st.dictionaries(st.text(max_size=5), _json_values, max_size=5))
def test_a_view_made_from_data_digests_as_rfc8785(body: dict[str, Any]) -> None:
    """A view made by ``redaction.view`` is printed by orjson where that gives RFC 8785's
    bytes; a float, a key beyond U+FFFF, an integer beyond 64 bits or a lone surrogate
    anywhere in it takes the exact path: the digest is always the one a plain dict gets."""
    from agentjournal.ledger import redaction

    data = json.dumps(body).encode()  # NaN and Infinity too, as json.loads takes them
    parsed = json.loads(data)
    try:
        encoded = rfc8785.dumps(parsed)
    except (rfc8785.CanonicalizationError, UnicodeError):
        encoded = json.dumps(
            parsed, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode("utf-8", "surrogatepass")
    expected = hashlib.sha256(encoded).hexdigest()
    made = redaction._View(redaction._loads(data))
    assert redaction.view_digest(made) == expected
    assert redaction.view_digest(parsed) == expected


@pytest.mark.parametrize("written", ["before format 2", "since format 2"])
def test_the_newest_checkpoint_cannot_be_relabelled(
    v2_bundle: dict[str, Any], written: str
) -> None:
    """Nothing after the newest checkpoint pins its hash: were both formats allowed on the
    checkpoint stream, anyone could flip its label and recompute its hash."""
    if written == "before format 2":
        bundle, trusted = _fixture("nested.json"), _trusted_v1()
    else:  # a format 2 session's checkpoints are format 1 too
        bundle, trusted = copy.deepcopy(v2_bundle), TRUSTED
    ledger = next(s for s in bundle["streams"] if s["name"].startswith("AgentLedger-"))
    last = ledger["events"][-1]
    last["metadata"]["aj.chain"] = "2"
    rechain(bundle, ledger["name"])
    found = _first_problem(bundle, trusted)
    assert (found.check, found.stream, found.revision, found.message) == (
        "integrity",
        ledger["name"],
        last["revision"],
        "a checkpoint or key rotation is sealed in chain format 1 only (aj.chain)",
    )


def test_signed_streams_are_sealed_in_format_1() -> None:
    for stream in ("AgentLedger-s", "AgentKeys"):
        metadata: dict[str, str] = {}
        digest = chain.seal(stream, 0, "id", "T", b"{}", metadata, chain.GENESIS)
        assert "aj.chain" not in metadata
        assert (
            digest
            == hashlib.sha256(
                chain.record_bytes(
                    stream, 0, "id", "T", hashlib.sha256(b"{}").hexdigest(), metadata
                )
            ).hexdigest()
        )
        assert chain.record_bytes(stream, 0, "id", "T", "0" * 64, metadata).startswith(b"{")


def _floats_marked(value: Any) -> bool:
    from agentjournal.ledger import redaction

    if isinstance(value, dict):
        return all(_floats_marked(item) for item in value.values())
    if isinstance(value, list):
        return all(_floats_marked(item) for item in value)
    return not isinstance(value, float) or type(value) is redaction._Float


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(_json_values, st.sampled_from([None, 0, 2]), st.sampled_from([(",", ":"), (", ", ": ")]))
def test_view_data_parses_as_json_loads_parses_it(
    value: Any, indent: int | None, separators: tuple[str, str]
) -> None:
    """Views parse their data with orjson where it reads what ``json`` reads, else with
    ``json``: the same value either way, every float marked (``_Float``)."""
    from agentjournal.ledger import redaction

    text = json.dumps(value, indent=indent, separators=separators)
    for parsed in (redaction._loads(text.encode()), redaction._loads_text(text)):
        assert json.dumps(parsed) == json.dumps(json.loads(text))  # NaN != NaN: compare text
        assert [type(x) for x in _leaves(parsed)] == [
            redaction._Float if type(x) is float else type(x) for x in _leaves(json.loads(text))
        ]
        assert _floats_marked(parsed)


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]
