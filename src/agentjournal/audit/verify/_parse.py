"""The structure stage: a bundle file's bytes parsed as strict JSON (:func:`parse_bundle`),
its fields checked and its events read into records (:func:`bundle_records`), and each
record's form checked whatever it was read from (:func:`check_forms`)."""

from __future__ import annotations

import json
import operator
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import repeat
from types import MappingProxyType
from typing import Any, Final

from agentjournal._gc import no_collection
from agentjournal._text import cut
from agentjournal.audit.bundle import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    BUNDLE_VERSIONS,
    EVAL_BUNDLE_FORMAT,
    EVAL_BUNDLE_VERSION,
    has_branches,
)
from agentjournal.audit.verify._report import Report
from agentjournal.errors import InvalidInput
from agentjournal.records import Record, TreeRecords
from agentjournal.streams import validate_id

_MAX_REVISION: Final = 2**63 - 1  # a stream revision is a signed 64-bit number everywhere


_BUNDLE_FIELDS: Final = {"format", "version", "session_id", "exported_at", "redacted", "streams"}
_STREAM_FIELDS: Final = {"name", "events"}
_EVENT_FIELDS: Final = frozenset(
    {"revision", "id", "type", "data", "data_sha256", "metadata", "view"}
)


def parse_bundle(raw: bytes) -> Any:
    """Parse a bundle file's bytes as strict JSON (the structure is checked by verification).

    Strict beyond :func:`json.loads`: the bytes must be UTF-8, names may not repeat within an
    object (two parsers could each pick a different one), and ``NaN``/``Infinity`` and numbers
    too large for a float are refused. An empty (or all-blank) file parses to None, which
    :func:`verify_bundle` reports as empty input. A JSON object comes back as
    :class:`Parsed`, which the verifier reads as vouched for (its text exactly ``str``):
    verify it as parsed, unchanged.

    Raises:
        InvalidInput: The bytes are not such JSON; the message says where.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInput(
            f"byte {error.start} (0x{raw[error.start]:02x}) is not UTF-8: a bundle is UTF-8 JSON"
        ) from None
    if not text.strip():
        return None
    try:
        with no_collection():  # a bundle is one large tree of acyclic objects
            parsed = json.loads(
                text,
                object_pairs_hook=_unique_names,
                parse_constant=_no_constant,
                parse_float=_finite_float,
            )
    except json.JSONDecodeError as error:
        raise InvalidInput(
            f"not JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except RecursionError:
        raise InvalidInput(
            "JSON nested too deeply (no bundle nests more than a few levels)"
        ) from None
    except ValueError as error:  # from the hooks, or an integer of over 4300 digits
        raise InvalidInput(f"not a bundle: {cut(str(error), 200)}") from None
    return Parsed(parsed) if type(parsed) is dict else parsed


class Parsed(dict[str, Any]):
    """A JSON object as :func:`parse_bundle` parsed it from a file: every text in it, each
    object's names too, is exactly a ``str``, every object exactly a ``dict``, every array
    exactly a ``list`` (JSON has no other kinds of text and containers). Reading it, the
    verifier need not look for a subclass of ``str`` (which could compare or hash as
    another text) among an event's metadata: a value that is not text at all is all it
    looks for. Verify it as parsed: what is put into it afterwards is not vouched for."""

    __slots__ = ()


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        counts = Counter(name for name, _ in pairs)
        repeated = next(name for name, count in counts.items() if count > 1)
        raise ValueError(f"the name {cut(repr(repeated), 60)} appears twice in one object")
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {cut(text, 40)} is too large")
    return value


def _unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode text (JSON can carry lone surrogates, UTF-8 cannot)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# A record of the wrong form and what is wrong with it (:func:`check_forms` reports it).
Unformed = tuple[Record, str]


def bundle_records(bundle: Any) -> TreeRecords:
    """A session bundle's session id and records (each record's form unchecked: see
    :func:`read_bundle`).

    Raises:
        InvalidInput: A field is missing, unknown or malformed (:class:`Malformed` for an
            event, with where it is).
    """
    return read_bundle(bundle)[0]


def read_bundle(bundle: Any) -> tuple[TreeRecords, list[Unformed]]:
    """:func:`bundle_records`, with each record's form checked as it is read (as
    :func:`check_forms` checks it): the records of the wrong form, in stream order, follow.

    Raises:
        InvalidInput: As :func:`bundle_records`.
    """
    if not isinstance(bundle, Mapping) or not bundle:
        raise InvalidInput("empty input: a bundle is a JSON object")
    if set(bundle) != _BUNDLE_FIELDS:
        extra, missing = set(bundle) - _BUNDLE_FIELDS, _BUNDLE_FIELDS - set(bundle)
        raise InvalidInput(
            f"bundle fields: unknown {cut(str(sorted(extra)), 200)}, missing {sorted(missing)}"
        )
    version = bundle["version"]
    if bundle["format"] != BUNDLE_FORMAT or type(version) is not int:
        raise InvalidInput(f"not an {BUNDLE_FORMAT} bundle")
    if version not in BUNDLE_VERSIONS:
        raise InvalidInput(
            f"an {BUNDLE_FORMAT} of version {version}; this verifier reads versions "
            f"{' and '.join(map(str, BUNDLE_VERSIONS))} (agentjournal 0.2 and later): verify it "
            "with the agentjournal that wrote it"
        )
    session_id = _checked_id(bundle["session_id"], "session_id")
    unformed: list[Unformed] = []
    streams = _bundle_streams(
        bundle, unformed, branches=version >= BUNDLE_VERSION, parsed=type(bundle) is Parsed
    )
    return TreeRecords(session_id, streams), unformed


def _checked_id(value: Any, what: str) -> str:
    """A bundle's session or run id: a non-empty string, written normalised."""
    if not isinstance(value, str) or not value or not _unicode(value):
        raise InvalidInput(f"{what} must be a non-empty string")
    if validate_id(value, what) != value:  # we write GUIDs normalised
        raise InvalidInput(f"{what} {cut(repr(value), 80)} is not written normalised")
    return value


def _bundle_streams(
    bundle: Mapping[str, Any], unformed: list[Unformed], *, branches: bool, parsed: bool = False
) -> dict[str, list[Record]]:
    """A bundle's streams read into records, each of the wrong form added to ``unformed``
    (``branches``: its version may carry branch streams; ``parsed``: it is :class:`Parsed`).

    Raises:
        InvalidInput: A stream is malformed or repeated (:class:`Malformed` for an event).
    """
    redacted = bundle["redacted"]
    if not isinstance(redacted, bool) or not isinstance(bundle["exported_at"], str):
        raise InvalidInput("redacted must be true or false and exported_at a string")
    raw_streams = bundle["streams"]
    if not isinstance(raw_streams, list) or not raw_streams:
        raise InvalidInput("a bundle holds at least one stream")
    streams: dict[str, list[Record]] = {}
    for raw in raw_streams:
        if not isinstance(raw, Mapping) or set(raw) != _STREAM_FIELDS:
            raise InvalidInput("each stream has exactly 'name' and 'events'")
        name, raw_events = raw["name"], raw["events"]
        if (
            not isinstance(name, str)
            or not _unicode(name)
            or not isinstance(raw_events, list)
            or name in streams
        ):
            raise InvalidInput(f"stream {cut(repr(name), 200)} is malformed or repeated")
        if not branches and has_branches([name]):
            raise InvalidInput(
                f"stream {cut(repr(name), 200)} holds a branch: only a version "
                f"{BUNDLE_VERSION} bundle carries branches"
            )
        records = streams[name] = [_event(name, e, unformed, parsed) for e in raw_events]
        # By identity, all in C (``None in`` compares by equality, which a caller's object
        # may answer as it likes).
        if not redacted and any(map(operator.is_, map(_data_of, records), repeat(None))):
            withheld = next(e for e in records if e.data is None)
            raise Malformed(
                name, withheld.revision, "data is withheld in a bundle that says it is unredacted"
            )
    return streams


_EVAL_BUNDLE_FIELDS: Final = {"format", "version", "run_id", "exported_at", "redacted", "streams"}


def is_eval_bundle(bundle: Any) -> bool:
    """Whether ``bundle`` says it is an eval run's (``agentjournal-eval-bundle``)."""
    return isinstance(bundle, Mapping) and bundle.get("format") == EVAL_BUNDLE_FORMAT


def eval_bundle_records(bundle: Any) -> tuple[str, dict[str, list[Record]]]:
    """An eval run's bundle read into its run id and its streams' records.

    Raises:
        InvalidInput: A field is missing, unknown or malformed (:class:`Malformed` for an
            event, with where it is).
    """
    if not isinstance(bundle, Mapping) or set(bundle) != _EVAL_BUNDLE_FIELDS:
        found = set(bundle) if isinstance(bundle, Mapping) else set()
        extra, missing = found - _EVAL_BUNDLE_FIELDS, _EVAL_BUNDLE_FIELDS - found
        raise InvalidInput(
            f"eval bundle fields: unknown {cut(str(sorted(extra)), 200)}, missing {sorted(missing)}"
        )
    version = bundle["version"]
    if type(version) is not int or version != EVAL_BUNDLE_VERSION:
        raise InvalidInput(
            f"an {EVAL_BUNDLE_FORMAT} of version {cut(repr(version), 40)}; this verifier reads "
            f"version {EVAL_BUNDLE_VERSION}: verify it with the agentjournal that wrote it"
        )
    run_id = _checked_id(bundle["run_id"], "run_id")
    # the verifier checks their forms
    streams = _bundle_streams(bundle, [], branches=True, parsed=type(bundle) is Parsed)
    return run_id, streams


class Malformed(InvalidInput):
    """Raised by :func:`_event` for a malformed event, with where it is."""

    def __init__(self, stream: str, revision: int | None, message: str) -> None:
        super().__init__(message)
        self.stream, self.revision = stream, revision


_data_of: Final = operator.attrgetter("data")


def _event(stream: str, raw: Any, unformed: list[Unformed], parsed: bool = False) -> Record:
    """An event of ``stream`` read into a record, added to ``unformed`` if of the wrong form
    (``parsed``: read from a :class:`Parsed` bundle).

    Raises:
        Malformed: It is not an event.
    """
    # Exact types first, on every line: a parsed bundle holds nothing else, and the
    # isinstance checks of the general case cost more than the rest of reading an event.
    if (type(raw) is not dict and not isinstance(raw, Mapping)) or raw.keys() != _EVENT_FIELDS:
        raise Malformed(stream, None, f"an event must have exactly {sorted(_EVENT_FIELDS)}")
    revision, metadata = raw["revision"], raw["metadata"]
    if type(revision) is not int and (not isinstance(revision, int) or isinstance(revision, bool)):
        raise Malformed(stream, None, "an event has a non-integer revision")
    if not isinstance(metadata, dict):
        raise Malformed(stream, revision, "metadata must map strings to strings")
    metadata = dict(metadata)  # the record's own: what is checked is what it holds
    id_, type_, data_sha256, data, view = (
        raw["id"],
        raw["type"],
        raw["data_sha256"],
        raw["data"],
        raw["view"],
    )
    ascii_: bool | None = None  # whether the metadata, id, type and digest are all ASCII
    if parsed:
        # Its text is exactly ``str``: joining the values fails only where one is not text
        # (or the id, type or digest, which the checks below name), and the join is the
        # form's own check for text that is not valid Unicode.
        try:
            ascii_ = _ascii(metadata, id_, type_, data_sha256)
        except TypeError:
            ascii_ = None  # not known: the checks below find what is not text
    if ascii_ is None and not _strings(metadata):
        raise Malformed(stream, revision, "metadata must map strings to strings")
    exact = type(id_) is str and type(type_) is str and type(data_sha256) is str
    if not exact:
        for name, value in (("id", id_), ("type", type_), ("data_sha256", data_sha256)):
            if not isinstance(value, str):  # the value read, never a second look
                raise Malformed(stream, revision, f"{name} must be a string")
    if data is not None and not isinstance(data, str):
        raise Malformed(stream, revision, "data must be a string or null")
    if view is not None and not isinstance(view, dict):
        raise Malformed(stream, revision, "view must be an object or null")
    # The record, built without the frozen dataclass's ``__init__`` (its ten
    # ``object.__setattr__`` calls were half the cost of reading an event), here rather than
    # in a function of its own (a call with eight arguments, a tenth of the rest): the same
    # fields, the metadata copied (above) and read-only as ``Record.__post_init__`` makes it
    # (``tests/test_verify_parse.py`` compares the two).
    record: Record = _new(Record)
    _set(  # the whole __dict__ at once (a frozen dataclass refuses only its own setattr)
        record,
        "__dict__",
        {
            "stream": stream,
            "revision": revision,
            "id": id_,
            "type": type_,
            "data": data,
            "data_sha256": data_sha256,
            "metadata": MappingProxyType(metadata),
            "view": view,
            "position": None,
            "recorded_at": None,
        },
    )
    # Its form, as check_forms checks it (all ASCII, nearly every event: nothing can fail).
    if ascii_ is None:
        ascii_ = exact and _ascii(metadata, id_, type_, data_sha256)
    if not (exact and 0 <= revision <= _MAX_REVISION and ascii_):
        problem = _record_problem(record)
        if problem is not None:
            unformed.append((record, problem))
    return record


def _strings(metadata: dict[Any, Any]) -> bool:
    """Whether ``metadata`` maps strings (exactly ``str``) to strings."""
    for key, value in metadata.items():  # a loop: half the cost of a set of their types
        if type(key) is not str or type(value) is not str:
            return False
    return True


_new: Final = object.__new__
_set: Final = object.__setattr__


def check_forms(report: Report, streams: Mapping[str, Sequence[Record]]) -> bool:
    """Whether every record's form is right, whatever it was read from; else the first
    wrong one fails the structure check."""
    for stream in streams.values():
        problem = next(((r, p) for r in stream if (p := _record_problem(r)) is not None), None)
        if problem is not None:
            fail_form(report, *problem)
            return False
    return True


def _ascii(metadata: Mapping[str, str], id_: str, type_: str, data_sha256: str) -> bool:
    """Whether an event's metadata, id, type and data digest are all ASCII: then none of
    them can be text that is not valid Unicode."""
    return "".join((*metadata, *metadata.values(), id_, type_, data_sha256)).isascii()


def fail_form(report: Report, record: Record, problem: str) -> None:
    """Fail the structure check at a record of the wrong form."""
    shown = record.revision if 0 <= record.revision <= _MAX_REVISION else None
    report.fail("structure", record.stream, shown, problem)


def _record_problem(record: Record) -> str | None:
    """What is wrong with a record's form, whatever it was read from: a revision out of
    range, an id or type that is not exactly a ``str`` (a subclass may hash or compare as
    another type: the checks find events by type), text that is not valid Unicode (a lone
    surrogate), if anything."""
    if not 0 <= record.revision <= _MAX_REVISION:
        return "an event has a revision out of range"
    if type(record.type) is not str or type(record.id) is not str:
        return "an event's id and type must be strings"
    metadata = record.metadata
    if _ascii(metadata, record.id, record.type, record.data_sha256):
        return None  # nearly every event: nothing below can fail
    bad = next((k for k, v in record.metadata.items() if not (_unicode(k) and _unicode(v))), None)
    if bad is not None:
        return f"metadata {cut(repr(bad), 60)} is not valid Unicode text"
    for name in ("id", "type", "data_sha256"):
        if not _unicode(getattr(record, name)):
            return f"{name} must be a string of Unicode text"
    return None
