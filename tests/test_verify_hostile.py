"""Hostile input to ``bundle verify`` and ``verify SESSION``: a failure to report, never a crash.

Whatever a bundle file or a store holds, verification ends with ``FAILED`` naming where, exit
2, and no traceback; usage errors (a missing file, no key) exit 1. The bundles are sessions the
SDK's real ``Runner`` wrote (``ledger_sessions.py``); the store cases damage a real SQLite file
the way a disk or an attacker would, bypassing the store's API.

Most cases call ``agentjournal.cli.main`` in this process (``cli_run.run``); a few run the
command as a real subprocess, where a traceback would reach stderr.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import copy
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentjournal import Journal
from agentjournal.audit.verify import parse_bundle, verify_bundle
from agentjournal.audit.verify._parse import _unique_names
from agentjournal.ledger.redaction import withholds
from cli_run import Ran, run
from ledger_sessions import KEY, TRUSTED, rechain, record, stream_of

BUNDLES = record()
WORK = Path(tempfile.mkdtemp(prefix="agentjournal-hostile-"))
atexit.register(shutil.rmtree, WORK, ignore_errors=True)
PUBKEY = WORK / "trusted.pem.pub"
PUBKEY.write_text(KEY.public_pem(), encoding="utf-8")


def original(name: str = "guarded") -> bytes:
    """A recorded bundle's file, as ``bundle export`` writes it."""
    return json.dumps(BUNDLES[name], ensure_ascii=False).encode()


def verify_bytes(raw: bytes, name: str = "bundle.json") -> Ran:
    path = WORK / name
    path.write_bytes(raw)
    return run("bundle", "verify", str(path), "--pubkey", str(PUBKEY))


def failed(result: Ran) -> str:
    """The FAILED line of a run that must have failed cleanly."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == ""
    assert "Traceback" not in result.stdout
    last = result.stdout.splitlines()[-1]
    assert last.startswith("FAILED: "), result.stdout
    return last


def with_event(edit: Callable[[dict[str, Any]], None], *, chain: bool = False) -> bytes:
    """The guarded bundle with ``edit`` applied to its first session event (re-chained if asked)."""
    bundle = copy.deepcopy(BUNDLES["guarded"])
    stream = stream_of(bundle, "AgentSession-")
    edit(stream["events"][1])
    if chain:
        rechain(bundle, stream["name"])
    return json.dumps(bundle).encode()  # ASCII escapes: lone surrogates survive as \\udXXX


class _Counted(str):
    """A name that counts the comparisons made with it."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _Counted.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_a_repeated_name_is_found_in_one_pass_over_the_object() -> None:
    # 2,000 names, the repeat last: a search per name would compare some 4 million pairs.
    names = [_Counted(f"n{i}") for i in range(2_000)] + [_Counted("n1999")]
    _Counted.compared = 0
    with pytest.raises(ValueError, match="the name 'n1999' appears twice in one object"):
        _unique_names([(name, 0) for name in names])
    assert _Counted.compared < 100, _Counted.compared


def test_recorded_bundles_verify() -> None:
    for name in BUNDLES:
        result = verify_bytes(original(name))
        assert result.returncode == 0, result.stdout
        assert result.stdout.splitlines()[-1].startswith("VERIFIED: ")


SESSION = "AgentSession-guarded"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        pytest.param(b"", "FAILED: bundle: empty input", id="empty"),
        pytest.param(b" \n\t ", "FAILED: bundle: empty input", id="blank"),
        pytest.param(b"\x00" * 64, "not JSON at line 1 column 1", id="nul-bytes"),
        pytest.param(bytes(range(256)) * 16, "byte 128 (0x80) is not UTF-8", id="binary-junk"),
        pytest.param(b"\xef\xbb\xbf{}", "not JSON at line 1 column 1", id="utf8-bom"),
        pytest.param(
            original().replace(b'"revision": 3', b'"revision": 3\xff', 1),
            "is not UTF-8: a bundle is UTF-8 JSON",
            id="non-utf8-byte",
        ),
        pytest.param(
            original().replace(b"charged", "charg\xe9d".encode("latin-1"), 1),
            "is not UTF-8",
            id="latin1-text",
        ),
        pytest.param(b"[" * 200_000 + b"]" * 200_000, "nested too deeply", id="deep-array"),
        pytest.param(
            b'{"a":' * 200_000 + b"1" + b"}" * 200_000, "nested too deeply", id="deep-obj"
        ),
        pytest.param(original()[: len(original()) // 2], "not JSON at line 1", id="truncated"),
        pytest.param(b"123", "empty input: a bundle is a JSON object", id="a-number"),
        pytest.param(b'"\\ud800"', "empty input: a bundle is a JSON object", id="a-surrogate"),
        pytest.param(
            original().replace(b'"revision": 0', b'"revision": 1e999', 1),
            "the number 1e999 is too large",
            id="huge-float",
        ),
        pytest.param(
            original().replace(b'"revision": 0', b'"revision": ' + b"9" * 5000, 1),
            "Exceeds the limit",
            id="huge-int-literal",
        ),
        pytest.param(
            original().replace(b'"revision": 0', b'"revision": ' + b"9" * 4000, 1),
            "revision out of range",
            id="huge-revision",
        ),
        pytest.param(
            original().replace(b'"revision": 0', b'"revision": -1', 1),
            "revision out of range",
            id="negative-revision",
        ),
        pytest.param(
            original().replace(b'"revision": 0', b'"revision": NaN', 1),
            "NaN is not a JSON number",
            id="nan",
        ),
        pytest.param(
            original().replace(b'"version": 2', b'"version": 2.0', 1),
            "not an agentjournal-bundle bundle",
            id="float-version",
        ),
        pytest.param(
            original().replace(b'{"format": ', b'{"format": "x", "format": ', 1),
            "the name 'format' appears twice in one object",
            id="duplicate-name",
        ),
        pytest.param(
            with_event(lambda e: e["metadata"].update({"aj.trace": "\ud800"})),
            f"FAILED: {SESSION}@1: metadata 'aj.trace' is not valid Unicode text (structure)",
            id="surrogate-metadata-value",
        ),
        pytest.param(
            with_event(lambda e: e["metadata"].update({"\udfff": "x"})),
            f"{SESSION}@1: metadata '\\udfff' is not valid Unicode text",
            id="surrogate-metadata-name",
        ),
        pytest.param(
            with_event(lambda e: e.update(id="\ud800")),
            f"{SESSION}@1: id must be a string of Unicode text",
            id="surrogate-id",
        ),
        pytest.param(
            with_event(lambda e: e.update(data="\udc80" + e["data"])),
            f"FAILED: {SESSION}@1: the data is not valid UTF-8 text (integrity)",
            id="surrogate-data",
        ),
        pytest.param(
            with_event(lambda e: e.update(data="[" * 100_000 + "]" * 100_000), chain=True),
            "FAILED: ",
            id="deep-data-rechained",
        ),
        pytest.param(
            original().replace(b'"session_id": "guarded"', b'"session_id": "guarded -x"', 1),
            "FAILED: bundle: session_id 'guarded -x' contains ' ': stream-name ids may use only",
            id="session-id-off-the-id-rules",
        ),
        pytest.param(
            with_event(lambda e: e.update(revision=10**4000)),
            f"FAILED: {SESSION}: an event has a revision out of range (structure)",
            id="huge-revision-value",
        ),
    ],
)
def test_hostile_bundle_fails_naming_where(raw: bytes, says: str) -> None:
    assert says in failed(verify_bytes(raw))


def test_deep_nesting_inside_an_event_reaches_no_check_as_a_crash() -> None:
    """Deeply nested data that chains correctly: every stage still reports, none raises."""
    bundle = copy.deepcopy(BUNDLES["guarded"])
    for stream in bundle["streams"]:
        for event in stream["events"]:
            if event["type"] in ("SubagentStarted", "agentjournal.AuthorityGranted"):
                event["data"] = '{"a":' * 50_000 + "1" + "}" * 50_000
        rechain(bundle, stream["name"])
    report = verify_bundle(bundle, TRUSTED)
    assert not report.ok
    assert report.text().splitlines()[-1].startswith("FAILED: ")


def test_a_1_gb_file_is_refused_by_size_with_bounded_memory() -> None:
    big = WORK / "big.json"
    with big.open("wb") as handle:
        handle.truncate(1024**3)  # sparse: no disk used
    tracemalloc.start()
    try:
        code = run("bundle", "verify", str(big), "--pubkey", str(PUBKEY)).returncode
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        big.unlink()
    assert code == 2
    assert peak < 16 * 1024**2, peak  # the file was never read
    small = verify_bytes(original())
    assert small.returncode == 0
    path = WORK / "bundle.json"
    limited = run("bundle", "verify", str(path), "--pubkey", str(PUBKEY), "--max-bytes", "1000")
    assert "larger than 1000 bytes, the most this verifier reads" in failed(limited)


def test_a_file_that_claims_no_size_is_read_only_up_to_the_limit() -> None:
    result = run("bundle", "verify", "/dev/zero", "--pubkey", str(PUBKEY), "--max-bytes", "4096")
    assert "FAILED: /dev/zero: larger than 4 KiB" in failed(result)


def run_process(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe\x00junk",
        b"[" * 500_000,
        with_event(lambda e: e["metadata"].update({"aj.trace": "\ud800"})),
    ],
    ids=["binary", "deep", "surrogate"],
)
def test_hostile_bundle_in_a_real_process(raw: bytes) -> None:
    path = WORK / "process.json"
    path.write_bytes(raw)
    result = run_process("bundle", "verify", str(path), "--pubkey", str(PUBKEY))
    assert result.returncode == 2, result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines()[-1].startswith("FAILED: ")


def test_huge_file_in_a_real_process() -> None:
    big = WORK / "big-process.json"
    with big.open("wb") as handle:
        handle.truncate(1024**3)
    try:
        result = run_process("bundle", "verify", str(big), "--pubkey", str(PUBKEY))
    finally:
        big.unlink()
    assert (result.returncode, result.stderr) == (2, "")
    assert "larger than 256 MiB" in result.stdout


# -- a store with bad data ------------------------------------------------------------------


@pytest.fixture(scope="module")
def store_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite store holding session ``s``: two messages and a signed checkpoint."""
    path = tmp_path_factory.mktemp("hostile-store") / "store.db"

    async def write() -> None:
        async with Journal.open(f"sqlite:///{path}", signing_key=KEY) as journal:
            session = journal.session("s")
            await session.add_items([{"role": "user", "content": "hello"}])
            await session.add_items([{"role": "user", "content": "again"}])
            await session.checkpoint()

    asyncio.run(write())
    return path


def damaged(store: Path, tmp_path: Path, sql: str, *params: Any) -> Path:
    """A copy of ``store`` with one statement run straight on the file."""
    copy_ = tmp_path / "damaged.db"
    shutil.copy(store, copy_)
    with sqlite3.connect(copy_) as db:
        position = db.execute(
            "SELECT e.position FROM events e JOIN streams s ON s.id = e.stream_id "
            "WHERE s.name = 'AgentSession-s' AND e.revision = 1"
        ).fetchone()[0]
        db.execute(sql, (*params, position))
    return copy_


def test_the_store_verifies_before_damage(store_file: Path) -> None:
    result = run("verify", "s", "--uri", f"sqlite:///{store_file}", "--pubkey", str(PUBKEY))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("sql", "value", "says"),
    [
        (
            "UPDATE events SET data = ? WHERE position = ?",
            b'{"content": "\xff"}',
            "AgentSession-s@1: the data is not UTF-8 text (byte 13) (integrity)",
        ),
        (
            "UPDATE events SET data = ? WHERE position = ?",
            b'{"content": "changed"}',
            "AgentSession-s@1: the hash does not match the event (integrity)",
        ),
        (
            "UPDATE events SET metadata = ? WHERE position = ?",
            b"\xff\xfe",
            "AgentSession-s@1: the metadata is not a UTF-8 JSON object (integrity)",
        ),
        (
            "UPDATE events SET metadata = ? WHERE position = ?",
            b"[" * 100_000 + b"]" * 100_000,
            "AgentSession-s@1: the metadata is not a UTF-8 JSON object (integrity)",
        ),
        (
            "UPDATE events SET metadata = ? WHERE position = ?",
            b'{"aj.seq": 1}',
            "AgentSession-s@1: the metadata does not map strings to strings (integrity)",
        ),
        (
            "UPDATE events SET metadata = ? WHERE position = ?",
            b'{"aj.seq": "\\ud800"}',
            "AgentSession-s@1: metadata 'aj.seq' is not valid Unicode text (structure)",
        ),
        (
            "UPDATE events SET id = ? WHERE position = ?",
            b"\x01\x02",
            "AgentSession-s@1: the event id is not 16 bytes (integrity)",
        ),
        (
            "UPDATE events SET type = CAST(? AS TEXT) WHERE position = ?",
            b"\xffA",
            "AgentSession-s: cannot be read: ",
        ),
        *(
            (
                "UPDATE events SET recorded_at = ? WHERE position = ?",
                value,
                "AgentSession-s: cannot be read: AgentSession-s@1: the recorded time is not a time",
            )
            for value in ("x", b"\x00", 1e300, 2**63 - 1, -(2**63 - 1), 1.5)
        ),
    ],
    ids=[
        "data-not-utf8",
        "data-changed",
        "metadata-not-utf8",
        "metadata-deep",
        "metadata-number",
        "metadata-surrogate",
        "id-length",
        "type-not-utf8",
        "time-text",
        "time-blob",
        "time-huge-real",
        "time-past-9999",
        "time-before-1",
        "time-real",
    ],
)
def test_damaged_store_fails_naming_where(
    store_file: Path, tmp_path: Path, sql: str, value: bytes, says: str
) -> None:
    bad = damaged(store_file, tmp_path, sql, value)
    result = run("verify", "s", "--uri", f"sqlite:///{bad}", "--pubkey", str(PUBKEY))
    assert says in failed(result)


@pytest.mark.slow
def test_damaged_store_in_a_real_process(store_file: Path, tmp_path: Path) -> None:
    bad = damaged(store_file, tmp_path, "UPDATE events SET data = ? WHERE position = ?", b"\xff")
    result = run_process("verify", "s", "--uri", f"sqlite:///{bad}", "--pubkey", str(PUBKEY))
    assert (result.returncode, result.stderr) == (2, "")
    assert result.stdout.splitlines()[-1] == (
        "FAILED: AgentSession-s@1: the data is not UTF-8 text (byte 0) (integrity)"
    )


@pytest.mark.parametrize(
    "value",
    [b"\xff\xfe", b"{not json", b"[1]", b'"text"', b"[" * 100_000 + b"]" * 100_000],
    ids=["not-utf8", "not-json", "array", "string", "deep"],
)
def test_metadata_that_is_not_a_json_object_is_one_line_from_the_read_tools(
    store_file: Path, tmp_path: Path, value: bytes
) -> None:
    bad = damaged(store_file, tmp_path, "UPDATE events SET metadata = ? WHERE position = ?", value)
    uri = f"sqlite:///{bad}"
    says = "AgentSession-s@1: the metadata is not a UTF-8 JSON object"
    for argv in (("replay", "s"), ("show", "s"), ("usage", "s")):
        result = run(*argv, "--uri", uri)
        assert (result.returncode, result.stderr) == (1, f"agentjournal: {says}\n"), argv


# -- reports say what is true ----------------------------------------------------------------


def test_report_lines_say_what_was_checked(store_file: Path) -> None:
    plain = run("verify", "s", "--uri", f"sqlite:///{store_file}", "--pubkey", str(PUBKEY))
    lines = plain.stdout.splitlines()
    assert lines[0] == "session s: 2 streams, 4 events (0 withheld)"
    assert "twins: no subagents" in lines
    assert any(line.startswith("checkpoints: 1 checkpoint signed by ") for line in lines)
    assert "delegation: no authority was granted along a handoff" in lines
    assert "containment: no tool call ran" in lines
    # A session with a policy but no guardrail: no decisions were expected of it.
    nested = verify_bundle(BUNDLES["nested"], TRUSTED).text().splitlines()
    assert any(
        line.startswith("containment: ")
        and line.endswith(
            "; no guardrail: no decisions were expected; each within its agent's authority"
        )
        for line in nested
    ), nested
    guarded = verify_bundle(BUNDLES["guarded"], TRUSTED).text().splitlines()
    assert any(
        "each had an ALLOW or MODIFY decision; each within its agent's authority" in line
        for line in guarded
    ), guarded


# -- fuzzing -------------------------------------------------------------------------------


def _essence(parsed: Any) -> str | None:
    """What verification vouches for: the streams by name, withholdable data withheld.

    The header's ``exported_at`` and ``redacted`` are the exporter's claims, not signed;
    the order of the streams carries no meaning; anyone may withhold the data of an event
    that commits no view and holds conversation (its digest stays). Compared as canonical
    JSON text, so ``1`` and ``1.0`` or ``true`` differ.
    """
    try:
        streams = {
            stream["name"]: [
                {**event, "data": None} if _withholdable(event) else event
                for event in stream["events"]
            ]
            for stream in parsed["streams"]
        }
        return json.dumps([parsed["session_id"], streams], sort_keys=True)
    except (TypeError, KeyError, AttributeError, IndexError):
        return None


def _withholdable(event: dict[str, Any]) -> bool:
    """Whether redaction may withhold the event's data whole (no view is committed for it)."""
    return withholds(event["type"], event["metadata"]) and "aj.redacted" not in event["metadata"]


ESSENCE = {name: _essence(bundle) for name, bundle in BUNDLES.items()}

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON value (dict keys and list indexes)."""
    found = [path]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _nodes(child, (*path, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _nodes(child, (*path, index))
    return found


def _mutate_structure(data: st.DataObject, bundle: Any) -> Any:
    paths = _nodes(bundle)[1:]
    path = data.draw(st.sampled_from(paths))
    parent = bundle
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    kind = data.draw(
        st.sampled_from(["delete", "replace", "edit-text", "duplicate", "swap", "rename"])
    )
    if kind == "delete":
        del parent[last]
    elif kind == "replace":
        parent[last] = data.draw(JSON_VALUES)
    elif kind == "edit-text" and isinstance(parent[last], str):
        text = parent[last]
        at = data.draw(st.integers(0, len(text)))
        parent[last] = text[:at] + data.draw(st.text(min_size=1, max_size=3)) + text[at + 1 :]
    elif kind == "duplicate" and isinstance(parent, list):
        parent.insert(last, copy.deepcopy(parent[last]))
    elif kind == "swap" and isinstance(parent, list) and len(parent) > 1:
        other = data.draw(st.integers(0, len(parent) - 1))
        parent[last], parent[other] = parent[other], parent[last]
    elif kind == "rename" and isinstance(parent, dict):
        parent[data.draw(st.text(max_size=6))] = parent.pop(last)
    else:
        parent[last] = None
    streams = bundle.get("streams") if isinstance(bundle, dict) else None
    if data.draw(st.booleans()) and isinstance(streams, list):  # the attacker re-chains
        for stream in streams:
            # What the attacker's tool cannot re-chain is left as it is.
            with contextlib.suppress(Exception):
                rechain(bundle, stream["name"])
    return bundle


def _mutate_bytes(data: st.DataObject, raw: bytes) -> bytes:
    at = data.draw(st.integers(0, len(raw) - 1))
    kind = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate", "repeat"]))
    if kind == "flip":
        return raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1 :]
    if kind == "insert":
        return raw[:at] + data.draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    if kind == "delete":
        return raw[:at] + raw[at + data.draw(st.integers(1, 64)) :]
    if kind == "truncate":
        return raw[:at]
    end = min(len(raw), at + data.draw(st.integers(1, 200)))
    return raw[:end] + raw[at:end] + raw[end:]


@pytest.mark.slow
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_fuzz_mutated_bundles_fail_cleanly_or_are_unmodified(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(BUNDLES)))
    if data.draw(st.booleans()):
        raw = _mutate_bytes(data, original(name))
    else:
        mutated = _mutate_structure(data, copy.deepcopy(BUNDLES[name]))
        ascii_only = data.draw(st.booleans())
        raw = json.dumps(mutated, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    result = verify_bytes(raw, "fuzz.json")
    assert result.returncode in (0, 2), result.stdout + result.stderr
    assert result.stderr == ""
    assert "Traceback" not in result.stdout
    if result.returncode == 0:
        assert _essence(parse_bundle(raw)) == ESSENCE[name], "a modified bundle verified"
    else:
        # Failed, or its checkpoints cut away (or re-signed by another key): proved nothing.
        refused = ("FAILED: ", "UNSIGNED: ", "SIGNED BY AN UNTRUSTED KEY: ")
        assert result.stdout.splitlines()[-1].startswith(refused)


# -- forged data that would reach a message or a view ------------------------------------------


def _rechained(edit: Callable[[dict[str, Any]], None]) -> bytes:
    """The guarded bundle edited, every stream re-chained (an attacker without the key)."""
    bundle = copy.deepcopy(BUNDLES["guarded"])
    edit(bundle)
    for stream in bundle["streams"]:
        rechain(bundle, stream["name"])
    return json.dumps(bundle).encode()


def _checkpoint_key_surrogate(bundle: dict[str, Any]) -> None:
    event = stream_of(bundle, "AgentLedger-")["events"][0]
    body = json.loads(event["data"])
    body["key_id"] = "ed25519:\ud800"
    event["data"] = json.dumps(body)


def _tool_call_shape(bundle: dict[str, Any]) -> None:
    stream = stream_of(bundle, "AgentSession-")
    event = next(e for e in stream["events"] if e["type"] == "AssistantToolCallsGenerated")
    event["data"] = json.dumps({"extensions": [], "tool_calls": 5})


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_checkpoint_key_surrogate, "signed by ed25519:\\ud800"),
        (_tool_call_shape, "AssistantToolCallsGenerated data is malformed"),
    ],
    ids=["surrogate-in-a-message", "viewed-data-of-another-shape"],
)
def test_forged_data_fails_instead_of_crashing(
    edit: Callable[[dict[str, Any]], None], says: str
) -> None:
    assert says in verify_bytes(_rechained(edit)).stdout
    failed(verify_bytes(_rechained(edit)))


def test_a_damaged_subagent_start_in_the_store(store_file: Path, tmp_path: Path) -> None:
    """Export and verify both read a SubagentStarted that is no JSON object without a crash."""
    copy_ = tmp_path / "handoff.db"

    async def write() -> None:
        from guardrail_scenarios import graph, run

        async with Journal.open(f"sqlite:///{copy_}", signing_key=KEY) as journal:
            await run(graph().triage, journal.session("h"))
            await journal.session("h").checkpoint()

    asyncio.run(write())
    with sqlite3.connect(copy_) as db:
        db.execute(
            "UPDATE events SET data = ? WHERE type = 'SubagentStarted' AND position = "
            "(SELECT MIN(position) FROM events WHERE type = 'SubagentStarted')",
            (b"[1, 2]",),
        )
    uri = f"sqlite:///{copy_}"
    assert "(integrity)" in failed(run("verify", "h", "--uri", uri, "--pubkey", str(PUBKEY)))
    exported = run(
        "bundle", "export", "h", "--uri", uri, "-o", str(tmp_path / "b.json"), "--redact"
    )
    assert exported.returncode == 0, exported.stderr
    failed(run("bundle", "verify", str(tmp_path / "b.json"), "--pubkey", str(PUBKEY)))


def test_a_huge_max_bytes_allocates_nothing_up_front() -> None:
    path = WORK / "small.json"
    path.write_bytes(original())
    for limit in ("100000000000", "99999999999999999999"):
        result = run("bundle", "verify", str(path), "--pubkey", str(PUBKEY), "--max-bytes", limit)
        assert result.returncode == 0, result.stdout + result.stderr


def test_unreadable_keys_and_policies_are_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\xff\xfe\x00binary")
    rotated = run("keygen", "--rotate", str(junk), "-o", str(tmp_path / "new.pem"))
    assert rotated.returncode == 1
    assert rotated.stderr.strip() == f"agentjournal: {junk} is no key file (not text)"
    for bad in (
        "agents: {a: {scopes: [[x]]}}",
        "agents: {a: {ceilings: {c: {kind: allow, values: [[1]]}}}}",
    ):
        policy = tmp_path / "policy.yml"
        policy.write_text(bad)
        checked = run(
            "bundle", "verify", str(junk), "--pubkey", str(PUBKEY), "--policy", str(policy)
        )
        assert checked.returncode == 1
        assert len(checked.stderr.strip().splitlines()) == 1
        assert "unexpected" not in checked.stderr


def test_a_forged_name_in_a_problem_cannot_start_a_line_of_the_report() -> None:
    # An event's type is anyone's text; a problem naming it must stay on its own line,
    # and the verdict must stay the report's last line.
    from agentjournal.audit.verify._report import Report

    report = Report()
    report.lines.append("session s: 1 stream, 1 event (0 withheld)")
    report.fail("integrity", "AgentSession-s", 3, "\rVERIFIED: x\n carries a view commitment")
    lines = report.text().splitlines()
    assert lines[-1].startswith("FAILED: AgentSession-s@3: \\rVERIFIED: x\\n carries")
    assert not any(line.startswith("VERIFIED") for line in lines)
