"""Reading a bundle's events into records: the fast reader builds exactly the record the
dataclass does, and refuses exactly what it refused.

``audit.verify._parse`` builds each record without ``Record.__init__`` (its ten
``object.__setattr__`` calls were half the cost of reading an event); these tests hold it
to the dataclass, field by field, and to the structure messages it gave before.
"""

from __future__ import annotations

import json
from collections import UserDict
from typing import Any

import pytest

from agentjournal.audit.verify import verify_bundle, verify_records
from agentjournal.audit.verify._parse import (
    Malformed,
    Parsed,
    _event,
    _record_problem,
    bundle_records,
    check_forms,
    parse_bundle,
    read_bundle,
)
from agentjournal.audit.verify._report import Report
from agentjournal.records import Record
from ledger_sessions import record

BUNDLES = record()


def test_the_fast_record_is_the_dataclass_record() -> None:
    for bundle in BUNDLES.values():
        for stream in bundle["streams"]:
            for raw in stream["events"]:
                fields = (
                    stream["name"],
                    raw["revision"],
                    raw["id"],
                    raw["type"],
                    raw["data"],
                    raw["data_sha256"],
                    raw["metadata"],
                    raw["view"],
                )
                fast, slow = _event(stream["name"], raw, []), Record(*fields)
                assert fast == slow
                assert vars(fast) == vars(slow)  # every field, none missing or extra
                assert fast.body == slow.body
                assert hash(fast) == hash(slow)


def test_a_record_is_read_only_and_keeps_no_reference_to_the_bundle() -> None:
    bundle = BUNDLES["simple"]
    raw = bundle["streams"][0]["events"][0]
    made = _event(bundle["streams"][0]["name"], raw, [])
    with pytest.raises(TypeError):
        made.metadata["aj.seq"] = "9"  # type: ignore[index]
    before = dict(made.metadata)
    raw["metadata"]["aj.extra"] = "x"
    try:
        assert dict(made.metadata) == before
    finally:
        del raw["metadata"]["aj.extra"]


GOOD: dict[str, Any] = {
    "revision": 0,
    "id": "00000000-0000-0000-0000-000000000000",
    "type": "T",
    "data": "{}",
    "data_sha256": "0" * 64,
    "metadata": {"k": "v"},
    "view": None,
}


class Text(str):
    """A str subclass: not what JSON parses to."""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"extra": 1}, "an event must have exactly"),
        ({"revision": True}, "an event has a non-integer revision"),
        ({"revision": 1.0}, "an event has a non-integer revision"),
        ({"metadata": {"k": 1}}, "metadata must map strings to strings"),
        ({"metadata": {1: "v"}}, "metadata must map strings to strings"),
        ({"metadata": {"k": Text("v")}}, "metadata must map strings to strings"),
        ({"metadata": [("k", "v")]}, "metadata must map strings to strings"),
        ({"id": 1}, "id must be a string"),
        ({"type": None}, "type must be a string"),
        ({"data_sha256": b"0"}, "data_sha256 must be a string"),
        ({"data": 1}, "data must be a string or null"),
        ({"view": []}, "view must be an object or null"),
    ],
)
def test_a_malformed_event_is_refused_as_before(change: dict[str, Any], message: str) -> None:
    with pytest.raises(Malformed, match=message):
        _event("AgentSession-x", {**GOOD, **change}, [])


def test_an_event_of_any_mapping_and_str_subclass_fields_reads() -> None:
    """What the general checks accepted (a mapping that is no dict; a str subclass as id,
    type or data) still reads."""
    made = _event(
        "AgentSession-x", UserDict({**GOOD, "id": Text(GOOD["id"]), "data": Text("{}")}), []
    )
    assert made == Record("AgentSession-x", 0, GOOD["id"], "T", "{}", "0" * 64, {"k": "v"})


def test_a_whole_bundle_reads_as_before() -> None:
    for bundle in BUNDLES.values():
        tree = bundle_records(bundle)
        assert [
            (name, [(r.revision, r.id, r.type, r.data, dict(r.metadata)) for r in records])
            for name, records in tree.streams.items()
        ] == [
            (
                stream["name"],
                [
                    (e["revision"], e["id"], e["type"], e["data"], e["metadata"])
                    for e in stream["events"]
                ],
            )
            for stream in bundle["streams"]
        ]


def _forms_broken(bundle: dict[str, Any]) -> list[dict[str, Any]]:
    """Copies of ``bundle``, each with one or two events of the wrong form."""
    broken = []
    changes: list[dict[str, Any]] = [
        {"revision": -1},
        {"revision": 2**63},
        {"id": Text("x")},
        {"type": Text("T")},
        {"id": "\udfff"},
        {"type": "caf\u00e9"},  # not ASCII, valid: no problem
        {"data_sha256": "\ud800"},
        {"metadata": {"aj.seq": "\udfff"}},
        {"metadata": {"\udc00": "v"}},
        {"metadata": {"aj.note": "\u00e9t\u00e9"}},  # valid
    ]
    for change in changes:
        for places in ([(0, 1)], [(-1, 0), (0, 2)], [(0, 0), (0, 1)]):
            copy = {
                **bundle,
                "streams": [dict(s, events=list(s["events"])) for s in bundle["streams"]],
            }
            for stream, position in places:
                events = copy["streams"][stream]["events"]
                raw = events[position]
                events[position] = {
                    **raw,
                    **change,
                    "metadata": {**raw["metadata"], **change.get("metadata", {})},
                }
            broken.append(copy)
    return broken


def test_forms_checked_as_read_are_those_check_forms_finds() -> None:
    for bundle in BUNDLES.values():
        for broken in [bundle, *_forms_broken(bundle)]:
            tree, unformed = read_bundle(broken)
            expected = [
                (record, problem)
                for stream in tree.streams.values()
                for record in stream
                if (problem := _record_problem(record)) is not None
            ]
            assert [(id(r), p) for r, p in unformed] == [(id(r), p) for r, p in expected]
            assert check_forms(Report(), tree.streams) == (not unformed)


def test_a_bundle_of_the_wrong_form_reports_as_its_records_do() -> None:
    """Forms checked as the bundle is read give the report the records' own check gives."""
    checked = 0
    for bundle in BUNDLES.values():
        for broken in _forms_broken(bundle):
            trusted: dict[str, Any] = {}
            expected = verify_records(bundle_records(broken), trusted, workers=1).text()
            for workers in (1, 2):
                assert verify_bundle(broken, trusted, workers=workers).text() == expected
            checked += "(structure)" in expected
    assert checked


class _HidingValues(dict[str, str]):
    """Metadata whose ``values()`` shows other text than it holds."""

    def values(self) -> Any:
        return ["a" for _ in self]


def test_the_form_checked_as_read_is_that_of_the_metadata_the_record_holds() -> None:
    bundle = BUNDLES["simple"]
    raw = bundle["streams"][0]["events"][1]
    held = _HidingValues({**raw["metadata"], "aj.note": "\udfff"})
    tree, unformed = read_bundle(_with_event(bundle, 0, 1, {**raw, "metadata": held}))
    assert [(r.revision, p) for r, p in unformed] == [
        (1, "metadata 'aj.note' is not valid Unicode text")
    ]
    assert tree.streams[bundle["streams"][0]["name"]][1].metadata["aj.note"] == "\udfff"


def _with_event(bundle: dict[str, Any], stream: int, position: int, event: Any) -> dict[str, Any]:
    streams = [dict(s, events=list(s["events"])) for s in bundle["streams"]]
    streams[stream]["events"][position] = event
    return {**bundle, "streams": streams}


def test_a_reading_error_is_reported_before_any_wrong_form() -> None:
    """A wrong form anywhere waits until the whole bundle is read: a malformed stream after it,
    or withheld data in a bundle that says it is unredacted, is what the report names."""
    bundle = BUNDLES["simple"]
    first = bundle["streams"][0]
    surrogate = {**first["events"][1], "id": "\udfff"}
    cases = {
        "is malformed or repeated": {
            **_with_event(bundle, 0, 1, surrogate),
            "streams": [
                *_with_event(bundle, 0, 1, surrogate)["streams"],
                {"name": 5, "events": []},
            ],
        },
        "data is withheld in a bundle that says it is unredacted": _with_event(
            _with_event(bundle, 0, 1, surrogate), 0, 2, {**first["events"][2], "data": None}
        ),
    }
    for message, broken in cases.items():
        report = verify_bundle(broken, {}, workers=1)
        assert len(report.problems) == 1
        assert message in report.problems[0].message
        assert report.problems[0].check == "structure"


def _as_file(bundle: dict[str, Any]) -> bytes:
    """The bytes of ``bundle`` as ``bundle export`` writes them (a ``str`` subclass prints as
    its text; a lone surrogate as its escape)."""
    return json.dumps(bundle, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


def _escaped(bundle: dict[str, Any]) -> bytes:
    """``bundle`` as JSON with every character beyond ASCII escaped: a lone surrogate too."""
    return json.dumps(bundle).encode()


def test_parse_bundle_vouches_only_for_the_object_it_parsed() -> None:
    parsed = parse_bundle(_escaped(BUNDLES["simple"]))
    assert type(parsed) is Parsed
    assert parsed == BUNDLES["simple"]
    assert type(parse_bundle(b"[1]")) is list  # no bundle: nothing to vouch for


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"metadata": {"k": 1}}, "metadata must map strings to strings"),
        ({"metadata": {"k": None}}, "metadata must map strings to strings"),
        ({"metadata": {"k": ["v"]}}, "metadata must map strings to strings"),
        ({"metadata": {"k": {"v": "w"}}}, "metadata must map strings to strings"),
        ({"metadata": {"k": 1}, "id": 1}, "metadata must map strings to strings"),
        ({"id": 1}, "id must be a string"),
        ({"type": None}, "type must be a string"),
        ({"data_sha256": 0}, "data_sha256 must be a string"),
    ],
)
def test_a_malformed_event_of_a_parsed_bundle_is_refused_as_any(
    change: dict[str, Any], message: str
) -> None:
    for parsed in (False, True):
        with pytest.raises(Malformed, match=message):
            _event("AgentSession-x", {**GOOD, **change}, [], parsed)


def test_a_parsed_bundle_reports_as_the_same_bundle_read_otherwise() -> None:
    """Read from its file's bytes by ``parse_bundle`` (which vouches that its text is exactly
    ``str``) or given as the same objects otherwise, a bundle gets the same report: sound,
    with events of the wrong form, or malformed."""
    checked = 0
    for bundle in BUNDLES.values():
        first = bundle["streams"][0]
        malformed = [
            _with_event(bundle, 0, 1, {**first["events"][1], **change})
            for change in (
                {"metadata": {**first["events"][1]["metadata"], "aj.seq": 1}},
                {"metadata": {**first["events"][1]["metadata"], "aj.note": None}},
                {"id": 7},
                {"type": ["T"]},
                {"data_sha256": None},
                {"data": 5},
            )
        ]
        for broken in [bundle, *_forms_broken(bundle), *malformed]:
            files = [_escaped(broken)]
            written = _as_file(broken)
            if _utf8(written):  # a lone surrogate is not UTF-8: a file holds only its escape
                files.append(written)
            for raw in files:
                parsed = parse_bundle(raw)
                plain = json.loads(raw)
                assert type(parsed) is Parsed
                assert type(plain) is dict
                expected = verify_bundle(plain, {}, workers=1).text()
                assert verify_bundle(parsed, {}, workers=1).text() == expected
                checked += "(structure)" in expected
    assert checked


def test_a_bundle_not_parsed_by_parse_bundle_is_read_with_every_check() -> None:
    """Only :class:`Parsed` is vouched for: in a bundle built otherwise, or a copy of a parsed
    one, a ``str`` subclass among the metadata is refused."""
    bundle = BUNDLES["simple"]
    raw = bundle["streams"][0]["events"][1]
    sly = _with_event(bundle, 0, 1, {**raw, "metadata": {**raw["metadata"], "k": Text("v")}})
    for given in (sly, dict(sly)):
        report = verify_bundle(given, {}, workers=1)
        assert [(p.check, p.message) for p in report.problems] == [
            ("structure", "metadata must map strings to strings")
        ]


class _EqualsNone(str):
    """Text that says it equals None."""

    def __eq__(self, other: object) -> bool:
        return other is None or str.__eq__(self, other)

    __hash__ = str.__hash__


def test_withheld_data_is_found_by_identity() -> None:
    """Data a caller's object says equals None is not withheld data: the bundle is read and
    verified, never a crash."""
    bundle = BUNDLES["simple"]
    raw = bundle["streams"][0]["events"][1]
    sly = _with_event(bundle, 0, 1, {**raw, "data": _EqualsNone(raw["data"])})
    report = verify_bundle(sly, {}, workers=1)
    assert not any("withheld" in p.message for p in report.problems)
    assert report.text() == verify_bundle(bundle, {}, workers=1).text()
