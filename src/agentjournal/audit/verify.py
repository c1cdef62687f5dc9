"""Offline verification of a session bundle (pure: no store, no network).

A bundle (:mod:`agentjournal.audit.bundle` writes one) holds every stream of a
session tree with every event's revision, id, type, metadata, data digest and
data — or, in a redacted bundle, no data but a committed view
(:mod:`agentjournal.ledger.redaction`). :func:`verify_bundle` checks, in order:

1. **Structure** — the format, no unknown or missing fields, no empty bundle.
2. **Integrity** — per stream: revisions 0, 1, 2, ... with no gap; each
   event's data matches its digest; ``aj.seq`` is its revision, ``aj.prev`` the
   previous event's hash, and ``aj.hash`` recomputes (:mod:`agentjournal.ledger`);
   a view matches its commitment ``aj.redacted`` (recomputed from the data when
   the data is there); only the data redaction may withhold is withheld.
3. **Twins** — each handoff's ``SubagentStarted`` and each
   ``SubagentCompleted`` exist on both streams and name each other, the two
   copies of ``SubagentStarted`` grant the same authority; a closed subsession
   ends with its completion, whose hash the parent recorded.
   Then the branches (DESIGN §17.3) and the **guards**: each
   ``agentjournal.LineGuarded`` sits on a line's top stream and names the clear or
   reset it guards, which names it back (DESIGN §17.6).
4. **Checkpoints** — the trusted keys are the caller's (never the bundle's)
   and every key a chain of valid rotations on ``AgentKeys`` leads to from
   them; each checkpoint is signed by one, sits at the ledger position it
   signed, and names heads that exist with those hashes; together they cover
   every event (closed subsessions through the ``aj.closes_hash`` of their
   covered parent event). Anything after them is uncovered and fails unless
   allowed.
5. **Delegation** — the authority log replayed in order: each policy's digest
   recomputes (and is the caller's ``policy`` when one is given); each grant is
   recomputed from the policy it names — a run's first agent holds its entry
   met with what it last held (or, resuming inside an open subagent, with that
   subagent's grant), a handoff's receiver ``meet(sender's authority, its
   entry)`` — and every grant of the tree is on the log. Per line: a branch's
   log is its parent line's up to the entry its fork binds (recursively), then
   its own; each line's grants are on its own log (DESIGN §17.3). Without a
   log, each grant must be narrower than its sender's.
6. **Containment** — every executed tool call of a guarded session had an
   ALLOW or MODIFY decision about exactly that call, and every executed tool
   call of a session with a policy was within the calling agent's authority
   under the recorded policy's rule; every refusal is one the policy makes.
7. **Usage** — every ``agentjournal.ModelResponded`` is one this version
   reads, of this session, on a stream of its tree, with the response id its
   metadata names; the report totals their tokens.

The report names the first bad stream and revision.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentjournal import events
from agentjournal._calls import CALL_KINDS
from agentjournal._digests import value_digest
from agentjournal._gc import no_collection
from agentjournal._text import cut, plural
from agentjournal.audit.bundle import (
    BUNDLE_FORMAT,
    BUNDLE_VERSION,
    BUNDLE_VERSIONS,
    has_branches,
)
from agentjournal.authority import Authority, Gate, Policy, ToolRule, ceiling_inputs, meet
from agentjournal.errors import CodecError, InvalidInput
from agentjournal.events import Enforcement
from agentjournal.ledger import redaction
from agentjournal.ledger.chain import (
    CHAIN_FORMAT,
    CHAIN_KEY,
    CHAIN_KEYS,
    GENESIS,
    HASH_KEY,
    PREV_KEY,
    SEQ_KEY,
    chain_format,
    chain_hash,
    signed_stream,
)
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import KEY_ROTATED, KeyRotation, signed_event_id, trusted_closure
from agentjournal.records import Record, TreeRecords
from agentjournal.streams import (
    KEYS_STREAM,
    MAIN_BRANCH,
    authority_stream,
    branch_authority_stream,
    branch_stream,
    branches_stream,
    ledger_stream,
    session_stream,
    validate_id,
)
from agentjournal.tokens import ModelResponse, Usage

__all__ = ["Problem", "Report", "parse_bundle", "verify_bundle", "verify_records"]

# What a crafted event can make a check raise: each is a failure to report, never a crash
# (RecursionError: JSON nested deeper than the parser goes; LookupError: a missing key or
# index; OverflowError: a number too large for a float).
_MALFORMED: Final = (
    ValueError,
    TypeError,
    LookupError,
    AttributeError,
    RecursionError,
    OverflowError,
    InvalidInput,
    CodecError,
)
_MAX_REVISION: Final = 2**63 - 1  # a stream revision is a signed 64-bit number everywhere
_POSITIONS: Final = 2**64  # a store's global position is an unsigned 64-bit number at most
_BUNDLE_FIELDS: Final = {"format", "version", "session_id", "exported_at", "redacted", "streams"}
_STREAM_FIELDS: Final = {"name", "events"}
_EVENT_FIELDS: Final = frozenset(
    {"revision", "id", "type", "data", "data_sha256", "metadata", "view"}
)


@dataclass(frozen=True)
class Problem:
    """One failed check: where, and what."""

    check: str
    stream: str
    revision: int | None
    message: str

    def __str__(self) -> str:
        where = self.stream if self.revision is None else f"{self.stream}@{self.revision}"
        return f"{where}: {self.message} ({self.check})"


@dataclass
class Report:
    """What verification found."""

    lines: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def fail(self, check: str, stream: str, revision: int | None, message: str) -> None:
        self.problems.append(Problem(check, stream, revision, message))

    def failed(self, check: str) -> bool:
        """Whether a check of this kind has failed."""
        return any(problem.check == check for problem in self.problems)

    def text(self) -> str:
        """The readable report, ending with OK or FAILED and the first problem."""
        out = list(self.lines)
        out.extend(f"  problem: {problem}" for problem in self.problems[:20])
        if len(self.problems) > 20:
            out.append(f"  ... and {len(self.problems) - 20} more")
        out.append("OK" if self.ok else f"FAILED: {self.problems[0]}")
        # Forged data can carry lone surrogates into a message: shown escaped, never a crash.
        return "\n".join(out).encode("utf-8", "backslashreplace").decode("utf-8")


def verify_bundle(
    bundle: Any,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool = False,
    not_before: str | None = None,
    policy: Policy | None = None,
) -> Report:
    """Verify a parsed bundle against the trusted public keys (key id -> key).

    Args:
        bundle: The parsed JSON of a bundle.
        trusted: Key id -> public key; only these keys' checkpoints count, and those of
            keys a chain of valid rotations in the bundle leads to from them.
        allow_uncovered: Report events after the last checkpoint as warnings.
        not_before: An RFC 3339 time the last checkpoint may not be older than.
            Without an outside anchor like this, a bundle cut back to an
            earlier checkpoint (and its signature) is indistinguishable from
            the session as it was then.
        policy: The policy the session must have run under (an outside anchor,
            like the keys): every policy the bundle records must be this one.
    """
    # Verification makes records, views and markers by the thousand, none in a cycle: the
    # cyclic collector would scan them (and the bundle) again and again as they pile up.
    with no_collection():
        return _verify_bundle(
            bundle, trusted, allow_uncovered=allow_uncovered, not_before=not_before, policy=policy
        )


def _verify_bundle(
    bundle: Any,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool,
    not_before: str | None,
    policy: Policy | None,
) -> Report:
    try:
        tree = _parse(bundle)
    except _Malformed as error:
        report = Report()
        report.fail("structure", error.stream, error.revision, str(error))
        return report
    except InvalidInput as error:
        report = Report()
        report.fail("structure", "bundle", None, str(error))
        return report
    return _verify_records(  # already without the collector
        tree, trusted, allow_uncovered=allow_uncovered, not_before=not_before, policy=policy
    )


def verify_records(
    records: TreeRecords,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool = False,
    not_before: str | None = None,
    policy: Policy | None = None,
) -> Report:
    """Verify a session tree's records (from a bundle, or read from a store with
    :func:`agentjournal.walk.read_tree`); the arguments as for :func:`verify_bundle`."""
    with no_collection():  # as in verify_bundle
        return _verify_records(
            records, trusted, allow_uncovered=allow_uncovered, not_before=not_before, policy=policy
        )


def _verify_records(
    records: TreeRecords,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool,
    not_before: str | None,
    policy: Policy | None,
) -> Report:
    report = Report()
    session_id = records.session_id
    streams = {name: list(stream) for name, stream in records.streams.items()}
    root = session_stream(session_id)
    total = sum(len(stream) for stream in streams.values())
    withheld = sum(1 for stream in streams.values() for e in stream if e.data is None)
    report.lines.append(
        f"session {session_id}: {plural(len(streams), 'stream')}, {plural(total, 'event')} "
        f"({withheld} withheld)"
    )
    if root not in streams or not streams[root]:
        report.fail("structure", root, None, "the session stream is missing or empty")
        return report
    for stream in streams.values():
        problem = next(((r, p) for r in stream if (p := _record_problem(r)) is not None), None)
        if problem is not None:
            bad = problem[0]
            shown = bad.revision if 0 <= bad.revision <= _MAX_REVISION else None
            report.fail("structure", bad.stream, shown, problem[1])
            return report
    markers: _Markers = {}
    for name, stream in streams.items():
        _check_chain(report, name, stream, markers)
    if report.problems:
        report.lines.append("integrity: FAILED")
        return report  # nothing built on a broken chain can be trusted
    report.lines.append(
        f"integrity: {plural(total, 'event')} in {plural(len(streams), 'stream')} chain correctly"
    )
    try:
        tree = _Tree(session_id, root, streams, markers)
    except _MALFORMED as error:
        report.fail("structure", root, None, f"malformed lifecycle event: {error}")
        return report
    stages: list[tuple[str, Callable[[], None]]] = [
        ("twins", lambda: _check_twins(report, tree)),
        ("branches", lambda: _check_branches(report, tree)),
        ("guards", lambda: _check_guards(report, tree)),
        (
            "checkpoints",
            lambda: _check_checkpoints(report, tree, trusted, allow_uncovered, not_before),
        ),
        ("delegation", lambda: _check_authority(report, tree, policy)),
        ("containment", lambda: _check_containment(report, tree, policy)),
        ("usage", lambda: _check_responses(report, tree)),
    ]
    for check, stage in stages:
        try:
            stage()
        except _MALFORMED as error:  # a crafted event: a failure to report, never a crash
            report.fail(check, root, None, f"malformed event: {type(error).__name__}: {error}")
    return report


# -- structure ----------------------------------------------------------------------


def parse_bundle(raw: bytes) -> Any:
    """Parse a bundle file's bytes as strict JSON (the structure is checked by verification).

    Strict beyond :func:`json.loads`: the bytes must be UTF-8, names may not repeat within an
    object (two parsers could each pick a different one), and ``NaN``/``Infinity`` and numbers
    too large for a float are refused. An empty (or all-blank) file parses to None, which
    :func:`verify_bundle` reports as empty input.

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
            return json.loads(
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


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        names = [name for name, _ in pairs]
        repeated = next(name for name in names if names.count(name) > 1)
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


def _parse(bundle: Any) -> TreeRecords:
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
    session_id = bundle["session_id"]
    if not isinstance(session_id, str) or not session_id or not _unicode(session_id):
        raise InvalidInput("session_id must be a non-empty string")
    if validate_id(session_id, "session_id") != session_id:  # we write GUIDs normalised
        raise InvalidInput(f"session_id {cut(repr(session_id), 80)} is not written normalised")
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
        if version < BUNDLE_VERSION and has_branches([name]):
            raise InvalidInput(
                f"stream {cut(repr(name), 200)} holds a branch: only a version "
                f"{BUNDLE_VERSION} bundle carries branches"
            )
        streams[name] = [_event(name, e) for e in raw_events]
        withheld = next((e for e in streams[name] if e.data is None), None)
        if withheld is not None and not redacted:
            raise _Malformed(
                name, withheld.revision, "data is withheld in a bundle that says it is unredacted"
            )
    return TreeRecords(session_id, streams)


class _Malformed(InvalidInput):
    """Raised by :func:`_event` for a malformed event, with where it is."""

    def __init__(self, stream: str, revision: int | None, message: str) -> None:
        super().__init__(message)
        self.stream, self.revision = stream, revision


def _event(stream: str, raw: Any) -> Record:
    if not isinstance(raw, Mapping) or set(raw) != _EVENT_FIELDS:
        raise _Malformed(stream, None, f"an event must have exactly {sorted(_EVENT_FIELDS)}")
    revision, metadata = raw["revision"], raw["metadata"]
    if not isinstance(revision, int) or isinstance(revision, bool):
        raise _Malformed(stream, None, "an event has a non-integer revision")
    if not isinstance(metadata, dict) or not (
        set(map(type, metadata)) <= {str} and set(map(type, metadata.values())) <= {str}
    ):
        raise _Malformed(stream, revision, "metadata must map strings to strings")
    for name in ("id", "type", "data_sha256"):
        if not isinstance(raw[name], str):
            raise _Malformed(stream, revision, f"{name} must be a string")
    if raw["data"] is not None and not isinstance(raw["data"], str):
        raise _Malformed(stream, revision, "data must be a string or null")
    view = raw["view"]
    if view is not None and not isinstance(view, dict):
        raise _Malformed(stream, revision, "view must be an object or null")
    return Record(
        stream, revision, raw["id"], raw["type"], raw["data"], raw["data_sha256"], metadata, view
    )


def _record_problem(record: Record) -> str | None:
    """What is wrong with a record's form, whatever it was read from: a revision out of
    range, text that is not valid Unicode (a lone surrogate), if anything."""
    if not 0 <= record.revision <= _MAX_REVISION:
        return "an event has a revision out of range"
    metadata = record.metadata
    if "".join(
        (*metadata, *metadata.values(), record.id, record.type, record.data_sha256)
    ).isascii():
        return None  # all ASCII (nearly every event): nothing below can fail
    bad = next((k for k, v in record.metadata.items() if not (_unicode(k) and _unicode(v))), None)
    if bad is not None:
        return f"metadata {cut(repr(bad), 60)} is not valid Unicode text"
    for name in ("id", "type", "data_sha256"):
        if not _unicode(getattr(record, name)):
            return f"{name} must be a string of Unicode text"
    return None


# -- integrity ----------------------------------------------------------------------


# The call markers the integrity check computed with each tool call's view, by record
# (``id``: the records outlive the verification), for containment to use instead of
# computing each again (:func:`_call_marker`).
_Markers = dict[int, dict[str, Any]]


def _check_chain(
    report: Report, name: str, stream: Sequence[Record], markers: _Markers | None = None
) -> None:
    signed = signed_stream(name)
    prev = GENESIS
    for position, event in enumerate(stream):
        if event.revision != position:
            report.fail(
                "integrity",
                name,
                event.revision,
                f"expected revision {position}: an event was removed, added or moved",
            )
            return
        problem = _data_problem(event)
        if problem is not None:
            report.fail("integrity", name, position, problem)
            return
        metadata = event.metadata
        stored = metadata.get(HASH_KEY)
        if stored is None:
            report.fail("integrity", name, position, "the event is not chained (no aj.hash)")
            return
        if metadata.get(SEQ_KEY) != str(position):
            report.fail("integrity", name, position, "aj.seq does not match the revision")
            return
        if metadata.get(PREV_KEY) != prev:
            report.fail("integrity", name, position, "aj.prev is not the previous event's hash")
            return
        found = chain_format(metadata)
        if found == 2 and signed:
            report.fail(
                "integrity",
                name,
                position,
                "a checkpoint or key rotation is sealed in chain format 1 only (aj.chain)",
            )
            return
        if found is None:
            report.fail(
                "integrity",
                name,
                position,
                f"the event names chain format {cut(repr(metadata[CHAIN_KEY]), 40)}; "
                f"this version knows 1 and {CHAIN_FORMAT}",
            )
            return
        expected = chain_hash(name, position, event.id, event.type, event.data_sha256, metadata)
        if expected != stored:
            report.fail("integrity", name, position, "the hash does not match the event")
            return
        problem = _view_problem(event, markers)
        if problem is not None:
            report.fail("integrity", name, position, problem)
            return
        prev = stored


def _data_problem(event: Record) -> str | None:
    """Why the event's data (or its absence) is not what it may be, if it is not."""
    if event.data is None:
        if not redaction.withholds(event.type, event.metadata):
            return f"the data of {event.type} is withheld; it holds no conversation"
        if events.REDACTED_KEY in event.metadata and event.view is None:
            return f"the data of {event.type} is withheld without its committed view"
        return None
    if event.view is not None:
        return "an event with both its data and a view"
    try:
        actual = hashlib.sha256(event.data.encode()).hexdigest()
    except UnicodeEncodeError:
        return "the data is not valid UTF-8 text"
    return None if actual == event.data_sha256 else "the data does not match its digest"


def _view_problem(event: Record, markers: _Markers | None = None) -> str | None:
    """Why the event's view does not match its commitment ``aj.redacted``, if it does not.

    A view computed from the data leaves its call marker in ``markers`` where it is the
    one containment would compute (see :func:`_shared_marker`)."""
    committed = event.metadata.get(events.REDACTED_KEY)
    if committed is None:
        return None if event.view is None else "a view without a commitment (aj.redacted)"
    if event.view is not None:
        shown: Any = event.view
    else:
        assert event.data is not None
        try:
            shown = redaction.view(event.type, event.data.encode(), event.metadata)
        except ValueError as error:
            return str(error)
        if shown is None:
            return f"{event.type} carries a view commitment but has no view"
        if markers is not None:
            marker = _shared_marker(event, shown)
            if marker is not None:
                markers[id(event)] = marker
    if redaction.view_digest(shown) != committed:
        return "the redacted view does not match its commitment (aj.redacted)"
    return None


def _shared_marker(event: Record, shown: Mapping[str, Any]) -> dict[str, Any] | None:
    """The call marker in a view computed from the event's data, when it is what
    :func:`_call_marker` computes from the same data (the fields containment reads: call id,
    kind, name, payload digest, ceilings); None where the two could differ, so that
    containment computes it, and fails it, exactly as before: an item that looks withheld
    (``redaction.shown_call``), data ``Record.body`` refuses (``NaN``, ``Infinity``), a rule
    that is not JSON."""
    marker = redaction.shown_call(shown)
    if marker is None or event.data is None or "NaN" in event.data or "Infinity" in event.data:
        return None
    rule = event.metadata.get(events.TOOL_RULE_KEY)
    return marker if rule is None or _json_text(rule) else None


def _json_text(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


# -- the tree -----------------------------------------------------------------------


class _Tree:
    """Indexes over the bundle's streams."""

    def __init__(
        self,
        session_id: str,
        session_stream: str,
        streams: dict[str, list[Record]],
        markers: _Markers | None = None,
    ):
        self.session_id = session_id
        self.markers = markers if markers is not None else {}
        self.session_stream = session_stream
        self.ledger_stream = ledger_stream(session_id)
        self.authority_stream = authority_stream(session_id)
        self.streams = streams
        self.by_id = {e.id: e for stream in streams.values() for e in stream}
        self._grants: list[Record] | None = None
        self._closers: dict[str, list[tuple[int, str, int]]] | None = None
        self._authorities: dict[str, Authority | None] = {}
        self._line_logs: dict[str, str] | None = None
        self._ends: dict[str, Record] | None = None
        self.policies = _Policies()  # filled by the authority check
        # Subsession stream -> the parent copy of the SubagentStarted that opened it.
        self.opened_by: dict[str, Record] = {}
        for stream in streams.values():
            for event in stream:
                if event.opens is not None:
                    self.opened_by[event.opens] = event
        # Branches (DESIGN §17): the registry, the branches' own authority logs, and each
        # stream that begins with a BranchStarted (a line's top stream) or a
        # SubagentContinued (a continuation), its first event decoded (None: malformed,
        # which the branches check reports).
        self.registry_stream = branches_stream(session_id)
        self.line_log_prefix = f"{self.authority_stream}@"
        self.branch_prefix = branch_stream(session_id, "x")[:-1]
        self.started: dict[str, tuple[Record, events.BranchStarted | None]] = {}
        self.continued: dict[str, tuple[Record, events.SubagentContinued | None]] = {}
        for name, stream in streams.items():
            first = stream[0] if stream else None
            if first is not None and first.type == events.BRANCH_STARTED:
                self.started[name] = (first, _decoded(events.BranchStarted, first))
            elif first is not None and first.type == events.SUBAGENT_CONTINUED:
                self.continued[name] = (first, _decoded(events.SubagentContinued, first))
        # Each line's top stream by name (main's is the session stream).
        self.tops: dict[str, str] = {MAIN_BRANCH: session_stream}
        for name, (_, started) in self.started.items():
            if started is not None and started.branch_stream == name:
                self.tops.setdefault(started.branch, name)

    def is_tree_stream(self, name: str) -> bool:
        """Whether ``name`` is a stream of a line (the session stream, a branch's top
        stream, a subsession or continuation), not a log, the registry or the keys."""
        return name not in (
            self.ledger_stream,
            self.authority_stream,
            self.registry_stream,
            KEYS_STREAM,
        ) and not name.startswith(self.line_log_prefix)

    def is_top(self, name: str) -> bool:
        """Whether ``name`` is a line's top stream (where a run's first agent speaks)."""
        return name == self.session_stream or name in self.started

    def line_streams(self) -> dict[str, str]:
        """Each stream of a line -> its line's top stream: the top, the subsessions opened
        from it (any depth) and, on a branch, its continuations and what they opened."""
        owner: dict[str, str] = {}
        for top in (self.session_stream, *self.started):
            pending = [top]
            first = self.started.get(top)
            if first is not None and first[1] is not None:
                pending.extend(first[1].continuations.values())
            while pending:
                name = pending.pop()
                if name in owner or name not in self.streams:
                    continue
                owner[name] = top
                pending.extend(r.opens for r in self.streams[name] if r.opens is not None)
        return owner

    def opener(self, stream: str) -> Record | None:
        """The event that opened ``stream`` for the agent speaking there: the parent copy of
        its ``SubagentStarted``, or its ``SubagentContinued`` (a continuation holds the grant
        it copied from the subagent it continues); None for a line's top stream."""
        found = self.opened_by.get(stream)
        if found is None and self.continued.get(stream, (None, None))[1] is not None:
            found = self.continued[stream][0]
        return found

    def line_logs(self) -> dict[str, str]:
        """Each line's top stream -> its own authority log's stream (main's is the
        session's log; a branch's ``AgentAuthority-{id}@{key}``)."""
        if self._line_logs is None:
            self._line_logs = {self.session_stream: self.authority_stream}
            for name, (_, started) in self.started.items():
                if started is None or started.branch_stream != name:
                    continue
                try:
                    self._line_logs[name] = branch_authority_stream(self.session_id, started.branch)
                except InvalidInput:
                    continue  # a name no branch can have: its fork fails the branches check
        return self._line_logs

    def grants_on(self, stream: str) -> list[Record]:
        """The ``AuthorityGranted`` events on ``stream`` (runs started there, handoffs that
        opened no subsession), in order."""
        if self._grants is None:
            self._grants = [
                event
                for events_of in self.streams.values()
                for event in events_of
                if event.type == events.AUTHORITY_GRANTED
            ]
        return [grant for grant in self._grants if grant.stream == stream]

    def authority(self, event: Record) -> Authority | None:
        """The authority an ``AuthorityGranted``, ``SubagentStarted`` or
        ``SubagentContinued`` records (parsed once)."""
        if event.id not in self._authorities:
            body = event.body or {}
            if event.type == events.AUTHORITY_GRANTED:
                raw = body.get("authority")
            elif event.type == events.SUBAGENT_CONTINUED:
                continued = self.continued.get(event.stream, (None, None))[1]
                raw = continued.granted_authority if continued is not None else None
            else:
                raw = events.granted_authority(body)
            self._authorities[event.id] = None if raw is None else Authority.from_json(raw)
        return self._authorities[event.id]

    def closers(self) -> dict[str, list[tuple[int, str, int]]]:
        """Per stream, its events that cover another stream's events, in order: the
        revision, the other stream, and the last revision of it covered. A closing
        ``SubagentCompleted`` covers the subsession it closed through its twin; a
        ``BranchStarted`` (revision 0 of a branch) covers each parent-line place it binds
        (its base and authority log), a ``SubagentContinued`` the original it continues:
        the verifier checks those places hold the hashes recorded."""
        if self._closers is None:
            self._closers = {}
            for name, stream in self.streams.items():
                found: list[tuple[int, str, int]] = []
                places: list[events.StreamPlace] = []
                started = self.started.get(name, (None, None))[1]
                if started is not None:
                    places.extend(started.base)
                    if started.authority is not None:
                        places.append(started.authority)
                continued = self.continued.get(name, (None, None))[1]
                if continued is not None:
                    places.append(continued.continues)
                found.extend(
                    (0, place.stream, place.revision)
                    for place in places
                    if place.stream in self.streams and place.stream != name
                )
                for event in stream:
                    child = event.metadata.get(events.CLOSES_KEY)
                    if child and child in self.streams:
                        twin = self.twin_of(event)
                        if twin is not None and twin.stream == child:
                            found.append((event.revision, child, twin.revision))
                if found:
                    self._closers[name] = found
        return self._closers

    def twin_of(self, event: Record) -> Record | None:
        return self.by_id.get(event.metadata.get(events.TWIN_KEY, ""))

    def head(self, stream: str) -> Record | None:
        found = self.streams.get(stream)
        return found[-1] if found else None

    def ends(self) -> dict[str, Record]:
        """Each ended branch line's top stream -> its end, the first ``BranchDeleted`` on
        it. Anywhere on the stream, not only last: an event a key holder put after it must
        not make the line read as live (DESIGN §17.3, "The end of a line")."""
        if self._ends is None:
            self._ends = {}
            for name in self.started:
                end = next((e for e in self.streams[name] if e.type == events.BRANCH_DELETED), None)
                if end is not None:
                    self._ends[name] = end
        return self._ends


def _check_twins(report: Report, tree: _Tree) -> None:
    started = completed = 0
    for child, parent in tree.opened_by.items():
        started += 1
        events_of_child = tree.streams.get(child)
        if not events_of_child:
            report.fail("twins", parent.stream, parent.revision, f"subsession {child} is missing")
            continue
        twin = events_of_child[0]
        if (
            twin.type != events.SUBAGENT_STARTED
            or parent.metadata.get(events.TWIN_KEY) != twin.id
            or twin.metadata.get(events.TWIN_KEY) != parent.id
        ):
            report.fail("twins", child, 0, "SubagentStarted twins do not name each other")
        elif tree.authority(parent) != tree.authority(twin):
            report.fail(
                "twins", child, 0, "the two copies of SubagentStarted grant different authorities"
            )
    for name in tree.streams:
        if (
            tree.is_top(name)
            or name in tree.continued
            or not tree.is_tree_stream(name)
            or name in tree.opened_by
        ):
            continue  # a line's top stream or a continuation: the branches check's
        if name.startswith(tree.branch_prefix):
            report.fail("twins", name, 0, "a branch stream that does not begin with BranchStarted")
        else:
            report.fail("twins", name, None, "a subsession no handoff in the bundle opened")
    for stream in tree.streams.values():
        for event in stream:
            closes = event.metadata.get(events.CLOSES_KEY)
            if event.type != events.SUBAGENT_COMPLETED or closes is None:
                continue
            completed += 1
            mate = tree.twin_of(event)
            last = tree.head(closes)
            if (
                mate is None
                or mate.stream != closes
                or mate.type != events.SUBAGENT_COMPLETED
                or mate.metadata.get(events.TWIN_KEY) != event.id
            ):
                report.fail("twins", event.stream, event.revision, "SubagentCompleted has no twin")
            elif last is not mate:
                report.fail("twins", closes, mate.revision + 1, "events after the subagent closed")
            elif event.metadata.get(events.CLOSES_HASH_KEY) != mate.metadata.get(HASH_KEY):
                report.fail(
                    "twins", event.stream, event.revision, "aj.closes_hash is not the subsession's"
                )
    if not report.failed("twins"):
        report.lines.append(
            f"twins: {plural(started, 'subagent')} started, {completed} closed, links ok"
            if started
            else "twins: no subagents"
        )


# -- branches -------------------------------------------------------------------------


def _decoded(kind: Any, record: Record) -> Any:
    """``kind.decode`` of a record's data, or None when it is not such an event."""
    try:
        return kind.decode((record.data or "").encode())
    except (CodecError, UnicodeEncodeError, RecursionError):
        return None


def _check_branches(report: Report, tree: _Tree) -> None:
    """Every fork binds its branch to its parent line (DESIGN §17.3): ``BranchForked`` and
    ``BranchStarted`` name each other and agree; the places the branch continues hold
    the hashes it recorded (no rewritten history behind a fork); the cut, the base and
    the next index agree with the parent's events; each continuation matches what it
    continues; the registry names exactly the branches there are. One line per branch."""
    forks = [e for s in tree.streams.values() for e in s if e.type == events.BRANCH_FORKED]
    registry = tree.streams.get(tree.registry_stream, [])
    if not forks and not tree.started and not registry:
        _check_line_ends(report, tree)
        return
    failed = len(report.problems)
    for marker in forks:
        _check_marker(report, tree, marker)
    entries = _check_registry(report, tree, registry)
    lines: list[str] = []
    for name, (first, started) in tree.started.items():
        where = ("branches", name, 0)
        if started is None:
            report.fail(*where, "a BranchStarted that does not read as one")
            continue
        if started.branch_stream != name or started.session_id != tree.session_id:
            report.fail(*where, "the BranchStarted names another stream or session")
            continue
        if _stream_of(tree, started.branch) != name:
            # A branch's stream is named for it: a rename that keeps the stream is a forgery.
            named = cut(repr(started.branch), 80)
            report.fail(*where, f"the BranchStarted names branch {named}, not {name}'s")
            continue
        if not 0 <= started.cut.position < _POSITIONS:
            report.fail(
                *where,
                f"its cut's position {cut(str(started.cut.position), 40)} is not a store "
                "position (0 to 2**64 - 1)",
            )
            continue
        if entries.get(name) != first.id:
            report.fail(*where, f"branch {started.branch!r} has no entry in {tree.registry_stream}")
        twin = tree.twin_of(first)
        parent_top = tree.tops.get(started.parent)
        if twin is None or twin.type != events.BRANCH_FORKED:
            report.fail(*where, "its BranchForked is missing from the parent line")
            continue
        if parent_top is None or twin.stream != parent_top:
            report.fail(*where, f"forked from {twin.stream}, not from line {started.parent!r}")
            continue
        if not _check_prefix(report, tree, name, started, parent_top):
            continue
        problem = _metadata_problem(tree, first, started)
        if problem is not None:
            report.fail("branches", problem[0], 0, problem[1])
        else:
            size = len(tree.streams[name])
            place = started.base[0]
            lines.append(
                f"  branch {started.branch!r}: {name}, {plural(size, 'event')}; forked from "
                f"{started.parent} at {started.cut.kind} {started.cut.value}, bound to "
                f"{place.stream} at revision {place.revision}"
            )
    _check_line_ends(report, tree)
    if len(report.problems) == failed:
        count = len(tree.started)
        report.lines.append(
            f"branches: {count} {'branch' if count == 1 else 'branches'}, each bound to its "
            "parent line's chain; registry ok"
        )
        report.lines.extend(lines)


def _check_line_ends(report: Report, tree: _Tree) -> None:
    """A branch line that ended (a ``BranchDeleted`` is on its top stream, :meth:`_Tree.ends`)
    has nothing written after its end on that stream, and no subagent open: every subsession
    and continuation of the line was closed. What the end itself closed (``aj.line_end``:
    both copies of each ``SubagentCompleted`` name the ``BranchDeleted``) is on that line,
    closed ``cancelled``, and on the top stream right before the ``BranchDeleted`` (one
    write; DESIGN §17.3, "The end of a line")."""
    ends = {end.id: top for top, end in tree.ends().items()}  # the end's id -> its top stream
    marked = [
        event
        for stream in tree.streams.values()
        for event in stream
        if events.LINE_END_KEY in event.metadata
    ]
    if not ends and not marked:
        return
    owner = tree.line_streams()
    for event in marked:
        where = ("branches", event.stream, event.revision)
        end = event.metadata[events.LINE_END_KEY]
        top = ends.get(end)
        if event.type != events.SUBAGENT_COMPLETED:
            report.fail(*where, f"aj.line_end on {event.type}: only a line's end closes carry it")
        elif top is None or owner.get(event.stream) != top:
            report.fail(*where, "aj.line_end names no end of this stream's line")
        elif (twin := tree.twin_of(event)) is None or twin.metadata.get(events.LINE_END_KEY) != end:
            report.fail(*where, "a close the line's end wrote has a twin that does not name it")
        elif (outcome := (event.body or {}).get("outcome")) != "cancelled":
            shown = cut(repr(outcome), 40)
            report.fail(*where, f"the line's end closed this subagent {shown}, not 'cancelled'")
    closed = {
        event.metadata[events.CLOSES_KEY]
        for stream in tree.streams.values()
        for event in stream
        if event.type == events.SUBAGENT_COMPLETED and events.CLOSES_KEY in event.metadata
    }
    for end, top in ends.items():
        line = tree.streams[top]
        deleted = tree.ends()[top]
        if deleted.revision != len(line) - 1:
            # One line however many: nothing reads or writes an ended line again.
            report.fail(
                "branches",
                top,
                deleted.revision + 1,
                f"{plural(len(line) - 1 - deleted.revision, 'event')} written after its end "
                f"(its BranchDeleted at revision {deleted.revision})",
            )
        reason = (deleted.body or {}).get("reason")
        branch = cut(repr((deleted.body or {}).get("branch")), 80)
        for stream, its_top in owner.items():
            if its_top == top and stream != top and stream not in closed:
                report.fail(
                    "branches",
                    stream,
                    None,
                    f"left open on branch {branch}, which was {cut(str(reason), 20)}: the "
                    "end of a line closes every subagent open on it",
                )
        closes = [e.revision for e in line if e.metadata.get(events.LINE_END_KEY) == end]
        if closes != list(range(deleted.revision - len(closes), deleted.revision)):
            report.fail(
                "branches",
                top,
                deleted.revision,
                "the closes of the line's end are not right before its BranchDeleted",
            )


_GUARDED: Final = frozenset({events.SESSION_CLEARED, events.AUTHORITY_RESET})
"""What a ``LineGuarded`` may guard: a clear on a subagent's stream of its line, a reset on
its line's authority log."""


def _check_guards(report: Report, tree: _Tree) -> None:
    """Each ``agentjournal.LineGuarded`` (DESIGN §17.6) sits on a line's top stream and names
    the event it guards, which names it back (``aj.twin``): a ``SessionCleared`` on a
    subagent's stream of that line, or an ``AuthorityReset`` on that line's own log; and
    every clear or reset that names a guard has it. One line per guard that fails."""
    guards = 0
    owner: dict[str, str] | None = None
    for stream in tree.streams.values():
        for event in stream:
            if event.type == events.LINE_GUARDED:
                guards += 1
                if owner is None:
                    owner = tree.line_streams()
                problem = _guard_problem(tree, event, owner)
                if problem is not None:
                    report.fail("guards", event.stream, event.revision, problem)
            elif event.type in _GUARDED and events.TWIN_KEY in event.metadata:
                mate = tree.twin_of(event)
                if (
                    mate is None
                    or mate.type != events.LINE_GUARDED
                    or mate.metadata.get(events.TWIN_KEY) != event.id
                ):
                    report.fail(
                        "guards",
                        event.stream,
                        event.revision,
                        f"its {event.type} names a LineGuarded that is not there",
                    )
    if guards and not report.failed("guards"):
        report.lines.append(
            f"guards: {plural(guards, 'guard')} (LineGuarded), each beside the clear or reset it "
            "guards"
        )


def _guard_problem(tree: _Tree, guard: Record, owner: Mapping[str, str]) -> str | None:
    """Why a ``LineGuarded`` is not what its write made, if it is not."""
    body = _decoded(events.LineGuarded, guard)
    if body is None:
        return "a LineGuarded that does not read as one"
    if not tree.is_top(guard.stream):
        return "a LineGuarded off a line's top stream"
    mate = tree.twin_of(guard)
    if mate is None or mate.id != body.event or mate.stream != body.stream:
        return "the LineGuarded does not name the event it guards, or that event is missing"
    if mate.metadata.get(events.TWIN_KEY) != guard.id:
        return f"the {mate.type} it guards does not name it"
    if mate.type == events.SESSION_CLEARED:
        if mate.stream == guard.stream or owner.get(mate.stream) != guard.stream:
            return "it guards a SessionCleared that is not on a subagent's stream of its line"
    elif mate.type == events.AUTHORITY_RESET:
        if tree.line_logs().get(guard.stream) != mate.stream:
            return "it guards an AuthorityReset that is not on its line's authority log"
    else:
        return f"it guards a {cut(mate.type, 80)}, which nothing guards"
    return None


def _check_marker(report: Report, tree: _Tree, marker: Record) -> None:
    """A ``BranchForked`` on a line's top stream has its branch in the bundle, whose
    first event is its twin ``BranchStarted`` with the same fields."""
    where = ("branches", marker.stream, marker.revision)
    forked = _decoded(events.BranchForked, marker)
    if forked is None:
        report.fail(*where, "a BranchForked that does not read as one")
        return
    if not tree.is_top(marker.stream):
        report.fail(*where, "a BranchForked off a line's top stream")
        return
    branch = tree.streams.get(forked.branch_stream)
    if not branch:
        report.fail(
            *where, f"branch {forked.branch!r}: its stream {forked.branch_stream} is missing"
        )
        return
    first, started = tree.started.get(forked.branch_stream, (branch[0], None))
    if first.type != events.BRANCH_STARTED:
        report.fail(
            *where, f"branch {forked.branch!r}: its stream does not begin with BranchStarted"
        )
    elif (
        marker.metadata.get(events.TWIN_KEY) != first.id
        or first.metadata.get(events.TWIN_KEY) != marker.id
    ):
        report.fail(*where, "BranchForked and BranchStarted do not name each other")
    elif started is not None and any(
        getattr(forked, f.name) != getattr(started, f.name)
        for f in dataclasses.fields(events.BranchForked)
    ):
        report.fail(*where, "BranchForked and its BranchStarted disagree")


def _check_registry(report: Report, tree: _Tree, registry: Sequence[Record]) -> dict[str, str]:
    """Each registry entry names what is there: a ``BranchAdded`` the branch's
    ``BranchStarted`` (same name, parent, event id), a ``BranchRemoved`` the branch's end,
    its ``BranchDeleted`` (:meth:`_Tree.ends`; what follows an end the line-ends check
    reports); and every ended line has its one ``BranchRemoved``, or the registry would
    list as live a branch whose line ended. Returns branch stream -> the ``BranchStarted``
    id its ``BranchAdded`` names."""
    added: dict[str, str] = {}
    added_at: dict[str, int] = {}  # branch stream -> its BranchAdded's registry revision
    removed: set[str] = set()  # the branch streams a BranchRemoved names
    ends = tree.ends()
    for entry in registry:
        where = ("branches", entry.stream, entry.revision)
        if entry.type not in (events.BRANCH_ADDED, events.BRANCH_REMOVED):
            report.fail(*where, f"{entry.type} does not belong on the branch registry")
            continue
        kind = events.BranchAdded if entry.type == events.BRANCH_ADDED else events.BranchRemoved
        body = _decoded(kind, entry)
        if body is None:
            report.fail(*where, f"a {entry.type} that does not read as one")
            continue
        line = tree.streams.get(body.stream)
        if not line:
            report.fail(*where, f"branch {body.branch!r}: its stream {body.stream} is missing")
            continue
        misnamed = f"{body.stream} is not the stream of branch {cut(repr(body.branch), 80)}"
        named = _stream_of(tree, body.branch) == body.stream
        if entry.type == events.BRANCH_ADDED:
            started = tree.started.get(body.stream, (None, None))[1]
            if (
                line[0].id != body.event
                or started is None
                or (started.branch, started.parent) != (body.branch, body.parent)
            ):
                report.fail(*where, f"the entry of branch {body.branch!r} is not its fork")
            elif not named:
                report.fail(*where, misnamed)
            elif body.stream in added:
                report.fail(*where, f"branch {body.branch!r} is registered twice")
            else:
                added[body.stream] = body.event
                added_at[body.stream] = entry.revision
        else:
            if not named:
                report.fail(*where, misnamed)
            elif (end := ends.get(body.stream)) is None or end.id != body.event:
                report.fail(*where, f"branch {body.branch!r} was not deleted as the entry says")
            elif added_at.get(body.stream) is None:
                report.fail(*where, f"branch {body.branch!r} is removed before it is registered")
            elif body.stream in removed:
                report.fail(*where, f"branch {body.branch!r} is removed twice")
            # Named, even if wrongly: that entry's line says what is wrong, not a second one.
            removed.add(body.stream)
    for top, end in ends.items():
        if top not in removed:
            started = tree.started[top][1]
            named = cut(repr(started.branch if started is not None else top), 80)
            report.fail(
                "branches",
                top,
                end.revision,
                f"branch {named} ended here, but no BranchRemoved in {tree.registry_stream} "
                "says so",
            )
    if not report.failed("branches"):
        _check_registry_order(report, tree, added_at)
    return added


def _check_registry_order(report: Report, tree: _Tree, added_at: Mapping[str, int]) -> None:
    """The registry lists the forks in the order they were made, as far as a bundle (no
    positions) shows it: a branch after its parent branch (whose fork created the line it
    forks from), and the forks of one line in the order of their ``BranchForked`` markers
    on its top stream (each fork writes its marker and its entry at both exact heads in one
    transaction, so two forks of one line land in one order on both streams)."""
    where = ("branches", tree.registry_stream)
    for name, at in added_at.items():
        started = tree.started.get(name, (None, None))[1]
        parent = tree.tops.get(started.parent) if started is not None else None
        if started is not None and parent is not None and added_at.get(parent, -1) > at:
            report.fail(
                *where,
                at,
                f"branch {started.branch!r} is registered before its parent {started.parent!r}",
            )
            return
    for top in tree.tops.values():
        order = [
            added_at[forked.branch_stream]
            for marker in tree.streams.get(top, [])
            if marker.type == events.BRANCH_FORKED
            and (forked := _decoded(events.BranchForked, marker)) is not None
            and forked.branch_stream in added_at
        ]
        for before, after in itertools.pairwise(order):
            if before > after:
                report.fail(
                    *where,
                    after,
                    f"the forks of {top} are registered out of the order of their "
                    "BranchForked markers",
                )
                return


def _stream_of(tree: _Tree, branch: str) -> str | None:
    """The top stream a branch of this name has (None: no branch can have that name)."""
    try:
        return branch_stream(tree.session_id, branch)
    except InvalidInput:
        return None


def _metadata_problem(
    tree: _Tree, first: Record, started: events.BranchStarted
) -> tuple[str, str] | None:
    """Where and why the metadata readers follow on a fork's new streams is not what the
    fork wrote, if it is not: ``BranchStarted``'s ``aj.open`` names the outermost
    continuation (absent when none: a reader takes the branch's open chain from it), each
    continuation's the next one (absent on the innermost); ``aj.next_index`` on each is the
    fork's ``next_index``. (After the prefix check: the continuations are the base's open
    chain, each present.)"""
    chain = [started.continuations.get(place.stream) for place in started.base[1:]]
    firsts = [first]
    for stream in chain:
        found = tree.streams.get(stream or "")
        if not found:
            break  # missing: the continuations check reports it
        firsts.append(found[0])
    for n, event in enumerate(firsts):
        expected = chain[n] if n < len(chain) else None
        written = event.metadata.get(events.OPEN_KEY) or None
        if written != expected:
            shown = "no aj.open" if written is None else f"aj.open {cut(written, 120)}"
            wanted = "no open subagent" if expected is None else f"its continuation {expected}"
            return event.stream, f"{shown}, but the fork continues {wanted} there"
        index = event.metadata.get(events.NEXT_INDEX_KEY)
        if index != str(started.next_index):
            shown = "no aj.next_index" if index is None else f"aj.next_index {cut(index, 40)}"
            return event.stream, f"{shown}, but the fork's next index is {started.next_index}"
    return None


def _check_prefix(
    report: Report, tree: _Tree, name: str, started: events.BranchStarted, parent_top: str
) -> bool:
    """The branch's shared prefix is its parent's: each place it binds holds the hash it
    recorded, its base is the parent line's (or a line below it, for a cut in the parent's
    prefix), the cut is at its base, and its next index follows the prefix."""
    where = ("branches", name, 0)
    places = [*started.base, *([started.authority] if started.authority is not None else [])]
    for place in places:
        found = tree.streams.get(place.stream)
        if not found:
            report.fail(*where, f"the stream it continues, {place.stream}, is missing")
            return False
        if place.revision >= len(found) or found[place.revision].hash != place.hash:
            report.fail(
                *where,
                f"the shared prefix is not the parent's: {place.stream}@{place.revision} is not "
                "the event the fork bound (history behind the fork was rewritten, or the fork "
                "point forged)",
            )
            return False
    top = started.base[0]
    below = _lines_below(tree, parent_top)
    if top.stream not in below:
        report.fail(*where, f"its base {top.stream} is not on line {started.parent!r} or below")
        return False
    base_event = tree.streams[top.stream][top.revision]
    open_chain = [place.stream for place in started.base[1:]]
    opened = base_event.metadata.get(events.OPEN_KEY) or None
    if (open_chain[0] if open_chain else None) != opened or set(open_chain) != set(
        started.continuations
    ):
        report.fail(*where, "its base is not the parent's open subagents at the cut")
        return False
    if not _cut_at_base(tree, started, parent_top):
        report.fail(
            *where,
            f"the cut ({started.cut.kind} {started.cut.value}) is not where its base is: the "
            "cut was moved",
        )
        return False
    expected = _next_index(tree, started)
    if started.next_index != expected:
        report.fail(
            *where, f"next index {started.next_index}, but the parent's prefix gives {expected}"
        )
        return False
    own = next((r for r in tree.streams[name] if events.INDEX_KEY in r.metadata), None)
    if own is not None and own.metadata[events.INDEX_KEY] != str(started.next_index):
        report.fail(
            "branches",
            name,
            own.revision,
            f"the branch's first item is #{own.metadata[events.INDEX_KEY]}, not "
            f"#{started.next_index}",
        )
        return False
    problem = _authority_problem(tree, started)
    if problem is not None:
        report.fail(
            *where,
            f"its authority ({_shown(started.authority)}) is not the log in force at its cut: "
            f"{problem}",
        )
        return False
    return _check_continuations(report, tree, name, started)


def _reached(record: Record) -> str | None:
    """The stream whose events a prefix holds because it holds ``record``: the subsession a
    parent copy of ``SubagentStarted`` opens, or the one a ``SubagentCompleted`` closes
    (a continuation was opened by no event of its line: its close is what reaches it)."""
    if record.opens is not None:
        return record.opens
    if record.type == events.SUBAGENT_COMPLETED:
        return record.metadata.get(events.CLOSES_KEY) or None
    return None


def _prefix_ids(tree: _Tree, started: events.BranchStarted) -> set[str]:
    """The ids of the events before a fork's cut, on every line it continues: each base
    stream up to its base revision, a continuation's original up to the place it continues,
    a branch's parent line up to its own fork's base (recursively), and every subsession
    opened or closed in those parts (whole: it closed before the cut, unless it is itself
    bound). What the engine's ``prefix`` holds when it binds the authority log."""
    bound: dict[str, int] = {}
    places = list(started.base)
    while places:
        place = places.pop()
        if bound.get(place.stream, -1) >= place.revision:
            continue
        bound[place.stream] = place.revision
        below = tree.started.get(place.stream, (None, None))[1]
        if below is not None:
            places.extend(below.base)
        continued = tree.continued.get(place.stream, (None, None))[1]
        if continued is not None:
            places.append(continued.continues)
    found: set[str] = set()
    done: dict[str, int] = {}
    pending = list(bound.items())
    while pending:
        name, upto = pending.pop()
        if done.get(name, -1) >= upto:
            continue
        done[name] = upto
        for record in tree.streams.get(name, [])[: upto + 1]:
            found.add(record.id)
            child = _reached(record)
            if child is not None and child in tree.streams:
                pending.append((child, bound.get(child, len(tree.streams[child]) - 1)))
    return found


def _authority_problem(tree: _Tree, started: events.BranchStarted) -> str | None:
    """Why a fork's ``authority`` is not the log in force at its cut, if it is not.

    The engine binds the last entry before the cut on the log of the line whose own part
    holds the cut (the line of ``base[0]``), then the entries right after it that record
    grants made before the cut (one write's log entries follow its tree's events); when that
    log has none, what that line inherited at its own fork (None on main). A bundle holds no
    positions, so the verifier checks it through the grants the entries name: every grant
    entry up to the bound one is of a grant in the prefix, none after it is (a reset names
    no event: one between the cut and the next grant entry cannot be placed)."""
    top = started.base[0].stream
    log = tree.line_logs().get(top)
    if log is None:
        return None  # its fork is malformed: the branches check of that line reports it
    prefix = _prefix_ids(tree, started)

    def in_prefix(entry: Record) -> bool | None:
        """Whether a grant entry records a grant in the prefix (None: not a grant entry)."""
        if entry.type != events.AUTHORITY_HELD:
            return None
        return (entry.body or {}).get("event") in prefix

    entries = tree.streams.get(log, [])
    place = started.authority
    if place is not None and place.stream == log:
        if any(in_prefix(entry) is False for entry in entries[: place.revision + 1]):
            return f"{log}@{place.revision} records grants made after the cut"
        if any(in_prefix(entry) for entry in entries[place.revision + 1 :]):
            return f"{log} records grants made before the cut after {log}@{place.revision}"
        return None
    if any(in_prefix(entry) for entry in entries):
        return f"{log} records grants made before the cut, but the fork binds another log"
    below = tree.started.get(top, (None, None))[1]
    inherited = below.authority if below is not None else None
    if place != inherited:
        return f"{top}'s line inherited {_shown(inherited)}, not {_shown(place)}"
    return None


def _shown(place: events.StreamPlace | None) -> str:
    return "no authority log" if place is None else f"{place.stream}@{place.revision}"


def _continued_fields(continued: events.SubagentContinued) -> tuple[str, str, str]:
    return continued.agent_type, continued.source_agent, continued.call_id


def _started_fields(data: str) -> tuple[str, str, str]:
    subagent, _ = events.decode_subagent_started(data.encode())
    return subagent.agent_name, subagent.source_agent, subagent.call_id


def _lines_below(tree: _Tree, top: str) -> list[str]:
    """``top`` and the top streams of the lines below it, nearest first."""
    found = [top]
    while found[-1] in tree.started and len(found) <= len(tree.started):
        started = tree.started[found[-1]][1]
        parent = tree.tops.get(started.parent) if started is not None else None
        if parent is None or parent in found:
            break
        found.append(parent)
    return found


def _cut_at_base(tree: _Tree, started: events.BranchStarted, parent_top: str) -> bool:
    """Whether the cut is where the base is: after revision R of the parent's top stream
    for a revision cut; for an index or turn cut, the item that starts the branch's own
    part (#next_index) is the event right after the base on one of the base streams (the
    top stream's, or an open subagent's: a cut inside a subagent falls on its stream)."""
    at, top = started.cut, started.base[0]
    if at.kind == "revision":
        return top.stream == parent_top and top.revision == at.value
    want = str(started.next_index)
    for place in started.base:
        stream = tree.streams.get(place.stream, [])
        following = stream[place.revision + 1] if place.revision + 1 < len(stream) else None
        if following is not None and following.metadata.get(events.INDEX_KEY) == want:
            return at.kind != "index" or at.value == started.next_index
    return False


def _next_index(tree: _Tree, started: events.BranchStarted) -> int:
    """One more than the largest message index before the cut (0: none): on each base
    stream up to its base revision, in every subsession opened or closed there (whole: it
    closed before the cut, or is itself a base stream; a continuation closed before the
    cut is reached through its close), and the prefix of a base line."""
    bound = {place.stream: place.revision for place in started.base}
    largest = -1
    pending = list(bound)
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        stream = tree.streams.get(name, [])
        upto = bound.get(name, len(stream) - 1)
        for record in stream[: upto + 1]:
            index = _number(record.metadata.get(events.INDEX_KEY))
            if index is not None:
                largest = max(largest, index)
            child = _reached(record)
            if child is not None:
                pending.append(child)
        below = tree.started.get(name, (None, None))[1]
        if below is not None:  # the base line is a branch: its own prefix is before it
            largest = max(largest, below.next_index - 1)
    return largest + 1


def _check_continuations(
    report: Report, tree: _Tree, name: str, started: events.BranchStarted
) -> bool:
    """Each continuation begins with a ``SubagentContinued`` naming the ``BranchStarted``,
    continuing the original at its base place, with the original's agent, call and grant
    (the original's ``SubagentStarted``, or its ``SubagentContinued`` when the original is a
    continuation itself)."""
    bases = {place.stream: place for place in started.base[1:]}
    first = tree.started[name][0]
    for original, stream in started.continuations.items():
        where = ("branches", stream, 0)
        record, continued = tree.continued.get(stream, (None, None))
        opener = tree.opened_by.get(original)
        twin = tree.streams.get(original, [None])[0]
        if record is None or continued is None:
            report.fail(*where, f"the continuation of {original} is missing or malformed")
            return False
        if (
            record.metadata.get(events.TWIN_KEY) != first.id
            or continued.subsession_stream != stream
        ):
            report.fail(*where, "the continuation does not name its BranchStarted")
            return False
        if continued.continues != bases.get(original):
            report.fail(*where, "the continuation continues another place than the fork's base")
            return False
        # The original is a subsession a handoff opened (on the parent line, or on a branch
        # below it), or itself a continuation: a fork of a branch inside its continuations.
        # That one is checked against what it continues by its own branch's check.
        below = tree.continued.get(original, (None, None))[1]
        if below is not None:
            if (
                _continued_fields(continued) != _continued_fields(below)
                or continued.granted_authority != below.granted_authority
            ):
                report.fail(*where, "the continuation does not match the subagent it continues")
                return False
            continue
        if opener is None or twin is None or twin.type != events.SUBAGENT_STARTED:
            report.fail(*where, f"the subagent it continues, {original}, is not in the bundle")
            return False
        if twin.data is not None and (  # a redacted bundle shows the handoff as a view
            _continued_fields(continued) != _started_fields(twin.data)
            or continued.granted_authority != events.granted_authority(twin.body or {})
        ):
            report.fail(*where, "the continuation does not match the subagent it continues")
            return False
    return True


# -- checkpoints ----------------------------------------------------------------------


def _trusted_keys(
    report: Report, tree: _Tree, trusted: Mapping[str, Ed25519PublicKey]
) -> Mapping[str, Ed25519PublicKey]:
    """The caller's keys and those that valid rotations on ``AgentKeys`` lead to."""
    rotations: list[KeyRotation] = []
    for event in tree.streams.get(KEYS_STREAM, []):
        try:
            if event.type != KEY_ROTATED:
                raise InvalidInput(f"{event.type} does not belong on {KEYS_STREAM}")
            if _unchained(event.metadata) != _ROTATION_METADATA:
                raise InvalidInput("a key rotation carries metadata it was not written with")
            rotation = KeyRotation.decode(event.body)
            if event.id != str(signed_event_id(KEYS_STREAM, rotation.signature)):
                raise InvalidInput("the rotation's event id is not the one its signature gives")
            rotations.append(rotation)
        except InvalidInput as error:
            report.fail("checkpoints", event.stream, event.revision, str(error))
    keys = trusted_closure(trusted, rotations)
    if rotations:
        added = sorted(set(keys) - set(trusted))
        report.lines.append(
            f"keys: {plural(len(trusted), 'trusted key')} given; "
            f"{plural(len(rotations), 'rotation')} recorded; followed to "
            + (", ".join(added) if added else "no other key")
        )
    return keys


_ROTATION_METADATA: Final = {events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE}


def _unchained(metadata: Mapping[str, str]) -> dict[str, str]:
    """Metadata without its chain keys (``aj.seq``, ``aj.prev``, ``aj.hash``)."""
    return {k: v for k, v in metadata.items() if k not in CHAIN_KEYS}


def _check_checkpoints(
    report: Report,
    tree: _Tree,
    trusted: Mapping[str, Ed25519PublicKey],
    allow_uncovered: bool,
    not_before: str | None,
) -> None:
    keys = _trusted_keys(report, tree, trusted)
    signed: list[tuple[Record, Checkpoint]] = []
    foreign: list[tuple[Record, str]] = []  # checkpoints by keys outside the trusted chain
    for event in tree.streams.get(tree.ledger_stream, []):
        where = ("checkpoints", event.stream, event.revision)
        if event.type != CHECKPOINT:
            report.fail(*where, f"{event.type} does not belong on the checkpoint stream")
            continue
        try:
            checkpoint = Checkpoint.decode(event.body)
        except InvalidInput as error:
            report.fail(*where, str(error))
            continue
        public = keys.get(checkpoint.key_id)
        if public is None:
            report.lines.append(
                f"  warning: {event.stream}@{event.revision}: signed by {checkpoint.key_id}, "
                "which is not a trusted key nor one a trusted key rotated to: not counted"
            )
            foreign.append((event, checkpoint.key_id))
            continue
        if not checkpoint.verify(public):
            report.fail(*where, "the signature is invalid")
            continue
        if checkpoint.session_id != tree.session_id:
            report.fail(*where, "a checkpoint of another session")
            continue
        if checkpoint.sequence != event.revision or checkpoint.previous != event.metadata.get(
            PREV_KEY
        ):
            report.fail(
                *where,
                f"signed for ledger revision {checkpoint.sequence}: the checkpoints were "
                "reordered or spliced",
            )
            continue
        if _unchained(event.metadata) != dict(checkpoint.metadata):
            report.fail(*where, "the checkpoint event's metadata is not what was signed")
            continue
        if event.id != str(signed_event_id(event.stream, checkpoint.signature)):
            report.fail(*where, "the checkpoint's event id is not the one its signature gives")
            continue
        for stream, (revision, digest) in checkpoint.heads.items():
            found = tree.streams.get(stream, [])
            if revision >= len(found):
                report.fail(
                    "checkpoints",
                    stream,
                    len(found),
                    f"the checkpoint at {event.stream}@{event.revision} names revision "
                    f"{revision}: the stream was truncated",
                )
            elif found[revision].metadata.get(HASH_KEY) != digest:
                report.fail(
                    "checkpoints",
                    stream,
                    revision,
                    f"the hash differs from the checkpoint at {event.stream}@{event.revision}",
                )
        signed.append((event, checkpoint))
    untrusted = (
        f"; {', '.join(sorted({key for _, key in foreign}))} is not a trusted key"
        if foreign
        else ""
    )
    if not signed:
        if not allow_uncovered:
            at = foreign[0][0].revision if foreign else None
            report.fail("checkpoints", tree.ledger_stream, at, f"no trusted checkpoint{untrusted}")
        report.lines.append("checkpoints: none trusted (tail truncation is not detectable)")
        return
    # Each checkpoint was checked against the chains: what any of them covers is
    # covered (writers in several processes sign what each of them knew).
    covered: dict[str, int] = {}
    for _, checkpoint in signed:
        for stream, revision in _covered(tree, checkpoint).items():
            covered[stream] = max(covered.get(stream, -1), revision)
    uncovered = [
        (name, covered.get(name, -1) + 1)
        for name, stream in tree.streams.items()
        if name not in (tree.ledger_stream, KEYS_STREAM) and covered.get(name, -1) < len(stream) - 1
    ]
    last_event, last = signed[-1]  # the newest by sequence: the ledger's order is signed
    if tree.head(tree.ledger_stream) is not last_event:
        uncovered.append((tree.ledger_stream, last_event.revision + 1))
    names = sorted({c.key_id for _, c in signed})
    report.lines.append(
        f"checkpoints: {plural(len(signed), 'checkpoint')} signed by {', '.join(names)}; "
        f"the newest at "
        f"{last_event.stream}@{last_event.revision}, signed {last.signed_at}"
    )
    if not_before is not None and _instant(last.signed_at) < _instant(not_before):
        report.fail(
            "checkpoints",
            tree.ledger_stream,
            last_event.revision,
            f"the newest checkpoint ({last.signed_at}) is older than {not_before}: the session "
            "was cut back",
        )
    for name, revision in uncovered:
        message = f"events after the last checkpoint (not covered by a signature{untrusted})"
        if allow_uncovered:
            report.lines.append(f"  warning: {name}@{revision}: {message}")
        else:
            report.fail("checkpoints", name, revision, message)


def _instant(text: str) -> datetime:
    """An RFC 3339 time; naive times are UTC."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _covered(tree: _Tree, checkpoint: Checkpoint) -> dict[str, int]:
    """The last covered revision of each stream under ``checkpoint``.

    A covered closing event covers the whole subsession it closed: from the heads the
    checkpoint names, each stream whose covered part grows passes that on to the
    subsessions its newly covered closing events close (from an index built once per
    tree, so each closing event is looked at once per checkpoint, not once per pass
    over every event). A subsession's coverage only grows, up to its closing twin.
    """
    covered = {stream: revision for stream, (revision, _) in checkpoint.heads.items()}
    closers = tree.closers()
    done = dict.fromkeys(closers, 0)  # per stream: how many of its closers were looked at
    pending = [name for name in closers if name in covered]
    while pending:
        name = pending.pop()
        found, upto = closers[name], covered.get(name, -1)
        position = done[name]
        while position < len(found) and found[position][0] <= upto:
            _, child, twin = found[position]
            position += 1
            if covered.get(child, -1) < twin:
                covered[child] = twin
                if child in closers:
                    pending.append(child)
        done[name] = position
    return covered


# -- authority ----------------------------------------------------------------------


def _grant_at(tree: _Tree, stream: str, revision: int) -> Record | None:
    """The grant of the agent speaking on ``stream`` at ``revision``: the newest
    ``AuthorityGranted`` before it on that stream (a run's root, a run resumed there, a handoff
    that opened no subsession), else the ``SubagentStarted`` that opened the stream (or, on a
    continuation, its ``SubagentContinued``, which carries the grant it copied)."""
    grants = tree.grants_on(stream)
    position = bisect.bisect_left(grants, revision, key=lambda grant: grant.revision)
    if position:
        return grants[position - 1]
    return tree.opener(stream)


def _authority_at(tree: _Tree, stream: str, revision: int) -> Authority | None:
    """The effective authority of the agent speaking on ``stream`` at ``revision``."""
    grant = _grant_at(tree, stream, revision)
    return tree.authority(grant) if grant is not None else None


def _cause_of(grant: Record) -> str | None:
    """``run`` or ``handoff`` for a grant event; None for anything else."""
    if grant.type == events.SUBAGENT_STARTED:
        return "handoff" if events.INDEX_KEY in grant.metadata else None
    if grant.type == events.AUTHORITY_GRANTED:
        cause = (grant.body or {}).get("cause")
        return cause if cause in ("run", "handoff") else None
    return None


def _agent_of(grant: Record) -> Any:
    """The agent a grant is for (``AuthorityGranted.agent``, ``SubagentStarted.agent_type``)."""
    body = grant.body or {}
    return body.get("agent" if grant.type == events.AUTHORITY_GRANTED else "agent_type")


class _Policies:
    """The policies an authority log recorded, by digest."""

    def __init__(self) -> None:
        self.by_digest: dict[str, Policy] = {}

    def get(self, digest: str | None) -> Policy:
        if digest is None or digest not in self.by_digest:
            raise InvalidInput(f"policy {digest} is not on the authority log")
        return self.by_digest[digest]


def _check_authority(report: Report, tree: _Tree, anchor: Policy | None) -> None:
    """Every grant recomputed from its line's authority log (see the module docs).

    Main's log is the session's; a branch's is the log it inherits at its fork — the line
    whose log ``BranchStarted.authority`` names, replayed up to that entry (itself after
    what *it* inherited, and so on down the lines) — followed by the branch's own
    ``AgentAuthority-{id}@{key}``. Each grant is checked on its own line only (the streams
    of a line: :meth:`_Tree.line_streams`), so a grant on the parent after the fork never
    widens the branch, and the branch's log may name only the branch's grants."""
    grants = [
        event
        for stream in tree.streams.values()
        for event in stream
        if event.type == events.AUTHORITY_GRANTED
        or (
            event.type == events.SUBAGENT_STARTED
            and events.INDEX_KEY in event.metadata
            and tree.authority(event) is not None
        )
    ]
    lines = _LineLogs(report, tree, anchor)
    if not lines.any_entry():
        if anchor is not None and grants:
            report.fail("delegation", tree.session_stream, None, "grants without a recorded policy")
        _check_narrowing(report, tree, grants)
        return
    by_line: dict[str, list[Record]] = {}
    for grant in grants:
        by_line.setdefault(lines.line_of(grant.stream), []).append(grant)
    unlogged: list[Record] = []
    replays: list[tuple[str, _LogReplay]] = []
    for top in (tree.session_stream, *tree.started):
        replay = lines.replay(top)
        if replay is None:  # no log of its own and none inherited: nothing to recompute from
            unlogged.extend(by_line.get(top, ()))
            continue
        replays.append((top, replay))
        for grant in by_line.get(top, ()):
            if grant.id not in replay.logged:
                report.fail(
                    "delegation",
                    grant.stream,
                    grant.revision,
                    "a grant the authority log does not hold",
                )
    if unlogged:
        if anchor is not None:
            first = unlogged[0]
            report.fail(
                "delegation", first.stream, first.revision, "grants without a recorded policy"
            )
        _check_narrowing(report, tree, unlogged, summary=False)
    if not report.failed("delegation"):
        digests = ", ".join(sorted(tree.policies.by_digest))
        report.lines.append(
            f"delegation: {plural(len(tree.policies.by_digest), 'policy')} recorded"
            + (" (the one given)" if anchor is not None else f" ({digests})")
            + f"; {plural(len(grants), 'grant')}, each recomputed from its policy"
            + (f" on its line's log ({len(replays)} lines)" if len(replays) > 1 else "")
        )
        for top, replay in replays:
            started = tree.started.get(top, (None, None))[1]
            where = "" if started is None else f" on branch {started.branch!r}"
            for agent, reason in replay.resets:
                report.lines.append(
                    f"  reset{where}: {agent} may start from its policy entry again: {reason}"
                )


class _LineLogs:
    """Each line's authority log replayed once, a branch's from the state its parent's
    replay had at the entry the fork binds (DESIGN §17.3)."""

    def __init__(self, report: Report, tree: _Tree, anchor: Policy | None) -> None:
        self.report, self.tree, self.anchor = report, tree, anchor
        self.logs = tree.line_logs()  # top -> its own log
        self.owners = {log: top for top, log in self.logs.items()}  # log -> its line's top
        self.owner = tree.line_streams()  # stream -> its line's top
        # The places forks inherit (log -> revisions): the replay keeps its state there.
        self.wanted: dict[str, set[int]] = {}
        for _, started in tree.started.values():
            if started is not None and started.authority is not None:
                place = started.authority
                self.wanted.setdefault(place.stream, set()).add(place.revision)
        self.states: dict[tuple[str, int], _LogReplay] = {}
        self.done: dict[str, _LogReplay | None] = {}
        self.active: set[str] = set()

    def any_entry(self) -> bool:
        """Whether any line's log has an entry (else no policy was ever in force)."""
        return any(self.tree.streams.get(log) for log in self.logs.values())

    def line_of(self, stream: str) -> str:
        """The top stream of the line ``stream`` is on (main's when it is on none)."""
        return self.owner.get(stream, self.tree.session_stream)

    def replay(self, top: str) -> _LogReplay | None:
        """The line's log replayed (None: the line has no log, own or inherited)."""
        if top in self.done:
            return self.done[top]
        if top in self.active:
            return None  # forks inheriting from each other in a ring: reported below
        self.active.add(top)
        tree = self.tree
        started = tree.started.get(top, (None, None))[1]
        log = self.logs.get(top)
        replay: _LogReplay | None = None
        if started is not None and log is not None and started.authority is not None:
            place = started.authority
            source = self.owners.get(place.stream)
            if source is not None:
                self.replay(source)
            inherited = self.states.get((place.stream, place.revision))
            replay = _LogReplay(self.report, tree, self.anchor, top, self.owner)
            if inherited is None:
                self.report.fail(
                    "delegation",
                    top,
                    0,
                    f"the authority log it inherits ({place.stream}@{place.revision}) is not "
                    "a line's log replayed there",
                )
            else:
                replay.inherit(inherited, started.next_index)
        entries = tree.streams.get(log, []) if log is not None else []
        if entries and replay is None:
            replay = _LogReplay(self.report, tree, self.anchor, top, self.owner)
        wanted = self.wanted.get(log or "", set())
        for entry in entries:
            assert replay is not None
            try:
                replay.apply(entry)
            except InvalidInput as error:
                self.report.fail("delegation", entry.stream, entry.revision, str(error))
            if entry.revision in wanted:
                kept = _LogReplay(self.report, tree, self.anchor, top, self.owner)
                kept.inherit(replay, None)
                self.states[(entry.stream, entry.revision)] = kept
        self.active.discard(top)
        self.done[top] = replay
        return replay


class _LogReplay:
    """One line's authority log applied in order: what every agent holds, which grants it
    names, the policies recorded on it (inherited ones included)."""

    def __init__(
        self,
        report: Report,
        tree: _Tree,
        anchor: Policy | None,
        top: str,
        owner: Mapping[str, str],
    ) -> None:
        self.report, self.tree, self.anchor = report, tree, anchor
        self.top, self.owner = top, owner
        self.policies = _Policies()
        self.held: dict[str, Any] = {}
        self.logged: set[str] = set()
        self.resets: list[tuple[str, str]] = []
        self._last: dict[str, int] = {}  # stream -> revision of the last grant named on it
        self._next_index = 0  # the newest aj.next_index of a grant named so far

    def inherit(self, state: _LogReplay, next_index: int | None) -> None:
        """Start from ``state`` (what a fork's bound entry leaves every agent holding, and
        the policies recorded up to it). A branch's own grants are on its own streams and
        its message indexes go on from its ``next_index``, which a cut inside a write may
        put below the last inherited grant's write's."""
        self.policies.by_digest = dict(state.policies.by_digest)
        self.held = dict(state.held)
        self._last = dict(state._last)
        self._next_index = (
            state._next_index if next_index is None else min(state._next_index, next_index)
        )

    def apply(self, entry: Record) -> None:
        """Apply one entry.

        Raises:
            InvalidInput: The entry is malformed or names what is not there.
        """
        body = entry.body
        if body is None:
            raise InvalidInput(f"{entry.type} is not a JSON object")
        data = json.dumps(body).encode()
        if entry.type == events.POLICY_RECORDED:
            self._policy(entry, events.PolicyRecorded.decode(data))
        elif entry.type == events.AUTHORITY_RESET:
            reset = events.AuthorityReset.decode(data)
            self.policies.get(reset.policy)
            after = {name: value for name, value in self.held.items() if name != reset.agent}
            self._advance(entry, reset.held, after)
            self.resets.append((reset.agent, reset.reason))
        elif entry.type == events.AUTHORITY_HELD:
            self._grant(entry, events.AuthorityHeld.decode(data))
        else:
            raise InvalidInput(f"{entry.type} does not belong on the authority log")

    def _policy(self, entry: Record, recorded: events.PolicyRecorded) -> None:
        where = ("delegation", entry.stream, entry.revision)
        policy = Policy.from_json(recorded.policy)
        if policy.digest != recorded.digest:
            self.report.fail(*where, "the policy does not match its digest")
        elif self.anchor is not None and recorded.digest != self.anchor.digest:
            self.report.fail(
                *where, f"the session ran under policy {recorded.digest}, not the one given"
            )
        self.policies.by_digest[recorded.digest] = policy
        self.tree.policies.by_digest[recorded.digest] = policy  # for containment's rules

    def _grant(self, entry: Record, record: events.AuthorityHeld) -> None:
        tree = self.tree
        policy = self.policies.get(record.policy)
        grant = tree.by_id.get(record.event)
        if grant is None or grant.stream != record.stream or _cause_of(grant) != record.cause:
            raise InvalidInput(f"the {record.cause} grant {record.event} is not in the tree")
        if self.owner.get(grant.stream, tree.session_stream) != self.top:
            raise InvalidInput(
                f"the log of line {self.top} names {grant.stream}@{grant.revision}, a grant of "
                "another line"
            )
        self._in_order(grant)
        agent = _agent_of(grant)
        if agent != record.agent:
            raise InvalidInput(f"the grant is for {agent!r}, its log entry for {record.agent!r}")
        granted = tree.authority(grant)
        own = policy.authority_of(record.agent)
        sender: Authority | None = None
        if record.cause == "handoff":
            sender = _authority_at(tree, grant.stream, grant.revision)
            expected = meet(sender, own) if sender is not None else None
        else:
            expected = _run_root(tree, grant, own, self.held.get(record.agent))
        at = ("delegation", grant.stream, grant.revision)
        if expected is None or granted is None:
            self.report.fail(*at, "a grant without the sender's authority")
        elif sender is not None and not granted.is_narrower_than(sender):
            self.report.fail(*at, f"the authority granted to {agent} is wider than its sender's")
        elif granted != expected:
            self.report.fail(
                *at,
                f"{agent} was granted {granted.to_json()}, but the policy gives "
                f"{expected.to_json()}",
            )
        elif Authority.from_json(record.authority) != granted:
            self.report.fail(
                "delegation", entry.stream, entry.revision, "the log entry differs from its grant"
            )
        self.logged.add(grant.id)
        self._advance(entry, record.held, {**self.held, record.agent: record.authority})

    def _in_order(self, grant: Record) -> None:
        """The log names grants in the order they were written: by revision on each stream,
        and never back in the session's message order (``aj.next_index``).

        Raises:
            InvalidInput: It does not (entries were moved, e.g. to hide a reset).
        """
        index = _number(grant.metadata.get(events.NEXT_INDEX_KEY)) or 0
        if grant.revision <= self._last.get(grant.stream, -1) or index < self._next_index:
            raise InvalidInput(
                f"the authority log names {grant.stream}@{grant.revision} out of the order "
                "it was written"
            )
        self._last[grant.stream] = grant.revision
        self._next_index = index

    def _advance(self, entry: Record, recorded: Any, expected: dict[str, Any]) -> None:
        """Take ``expected`` as what every agent holds, failing if the entry says otherwise."""
        if not isinstance(recorded, Mapping) or {
            name: Authority.from_json(value) for name, value in recorded.items()
        } != {name: Authority.from_json(value) for name, value in expected.items()}:
            self.report.fail(
                "delegation", entry.stream, entry.revision, "what every agent holds does not add up"
            )
        self.held = expected


def _number(raw: str | None) -> int | None:
    """A metadata value as a non-negative int (ASCII digits only), else None."""
    return int(raw) if raw is not None and raw.isascii() and raw.isdigit() else None


def _run_root(tree: _Tree, grant: Record, own: Authority, last: Any) -> Authority:
    """What a run's first agent may hold: its entry met with what it last held, or —
    resuming inside an open subagent — with that subagent's grant (nothing without one)."""
    if not tree.is_top(grant.stream):
        opener = tree.opener(grant.stream)
        opened = tree.authority(opener) if opener is not None else None
        return meet(own, opened) if opened is not None else Authority()
    return meet(own, Authority.from_json(last)) if last is not None else own


def _check_narrowing(
    report: Report, tree: _Tree, grants: list[Record], *, summary: bool = True
) -> None:
    """Without a log: each handoff grant is narrower than its sender's authority (on a
    line with no log while another line has one, ``summary`` is off: the caller sums up)."""
    checked = 0
    for opener in grants:
        if opener.type != events.SUBAGENT_STARTED:
            continue
        checked += 1
        granted = tree.authority(opener)
        sender = _authority_at(tree, opener.stream, opener.revision)
        where = ("delegation", opener.stream, opener.revision)
        if sender is None:
            report.fail(*where, "a grant without the sender's authority")
        elif granted is not None and not granted.is_narrower_than(sender):
            report.fail(*where, "the authority granted is wider than its sender's")
    if summary and not report.failed("delegation"):
        report.lines.append(
            f"delegation: no policy recorded; {plural(checked, 'grant')}, "
            "each narrower than its sender's"
            if checked
            else "delegation: no authority was granted along a handoff"
        )


# -- containment ----------------------------------------------------------------------


def _check_containment(report: Report, tree: _Tree, anchor: Policy | None) -> None:
    executed = guarded = bounded = 0
    for name, stream in tree.streams.items():
        index = _CallIndex(stream)
        for event in stream:
            meta = event.metadata
            kind = meta.get(events.ITEM_TYPE_KEY, "")
            if kind not in CALL_KINDS:
                continue
            call_id = meta.get(events.CALL_ID_KEY, "")
            decided = index.latest(index.decisions, call_id, event.revision)
            refused = index.latest(index.refusals, call_id, event.revision)
            marker = _call_marker(event, tree.markers)
            where = ("containment", name, event.revision)
            if (marker.get("call_id"), marker.get("kind")) != (call_id, kind):
                report.fail(*where, "the call's aj.call_id or aj.item_type is not the call's own")
                continue
            stopped = next(
                (r for r in (decided, refused) if r is not None and _stops(r.get("enforcement"))),
                None,
            )
            if stopped is not None:
                # Refused before it ran: a refusal as its output, or the run ended there.
                if stopped.get("enforcement") != "tool_refused" and index.ran(
                    call_id, event.revision, kind
                ):
                    report.fail(*where, f"tool call {call_id} ran although its run was stopped")
                continue
            executed += 1  # it ran, or may have: an output is no proof either way
            if meta.get(events.GUARDED_KEY) == "1":
                guarded += 1
                if decided is None or decided.get("decision") not in ("ALLOW", "MODIFY"):
                    report.fail(
                        *where, f"tool call {call_id} ran without an ALLOW or MODIFY decision"
                    )
                elif decided.get("payload_digest") != marker.get("payload_digest"):
                    report.fail(*where, f"the decision on {call_id} was about another call")
            if anchor is not None and meta.get(events.POLICY_KEY) != anchor.digest:
                report.fail(*where, f"tool call {call_id} ran without the policy given")
            elif events.TOOL_RULE_KEY in meta:
                bounded += 1
                _check_within(report, tree, event, marker, decided)
    for stream in tree.streams.values():
        for event in stream:
            if event.type == events.AUTHORITY_REFUSED:
                try:
                    _check_refusal(report, tree, event)
                except InvalidInput as error:
                    report.fail("containment", event.stream, event.revision, str(error))
            elif event.type == events.GUARDRAIL_DECIDED:
                problem = _decision_problem(event.body or {})
                if problem is not None:
                    report.fail("containment", event.stream, event.revision, problem)
    opaque = sum(
        event.metadata.get(events.OPAQUE_KEY) == "1"
        for stream in tree.streams.values()
        for event in stream
    )
    if opaque:
        report.lines.append(
            f"  note: {plural(opaque, 'opaque item')} (encrypted, or naming no kind) could not "
            "be inspected: calls or handoffs inside them are not checked"
        )
    if not report.failed("containment"):
        report.lines.append(_containment_line(executed, guarded, bounded))


def _containment_line(executed: int, guarded: int, bounded: int) -> str:
    """What containment found, saying only what was checked."""
    if not executed:
        return "containment: no tool call ran"
    if guarded == executed:
        decided = "each had an ALLOW or MODIFY decision"
    elif guarded:
        decided = f"{guarded} guarded, each with an ALLOW or MODIFY decision"
    else:
        decided = "no guardrail: no decisions were expected"
    if bounded == executed:
        within = "each within its agent's authority"
    elif bounded:
        within = f"{bounded} under the policy, each within its agent's authority"
    else:
        within = "no policy: no authority to check"
    return f"containment: {plural(executed, 'executed tool call')}; {decided}; {within}"


_ENFORCED: Final = {
    "ALLOW": {Enforcement.PROCEEDED},
    "MODIFY": {Enforcement.MODIFIED},
    "BLOCK": {Enforcement.TOOL_REFUSED, Enforcement.RUN_STOPPED, Enforcement.UNENFORCEABLE},
}


def _decision_problem(body: Mapping[str, Any]) -> str | None:
    """Why a ``GuardrailDecided`` contradicts itself, if it does: an enforcement that does
    not follow from the decision, a payload (or its view's digest) other than its digest."""
    decision, enforcement = body.get("decision"), body.get("enforcement")
    if enforcement not in _ENFORCED.get(str(decision), ()):
        return f"a {decision} decision carried out as {enforcement!r}"
    for name in ("payload", "modified_payload"):
        value: Any = body.get(name)
        recorded = body.get(f"{name}_digest")
        if value is None and name == "modified_payload":
            found = None
        elif redaction.is_withheld(value):
            found = value.get("withheld")
        else:
            found = value_digest(value)
        if found != recorded:
            return f"the {name} is not the one its digest names"
    return None


def _stops(enforcement: Any) -> bool:
    """Whether a decision or refusal carried out this way kept its call from running."""
    return enforcement in (
        Enforcement.TOOL_REFUSED,
        Enforcement.RUN_STOPPED,
        Enforcement.UNENFORCEABLE,
    )


def _call_marker(event: Record, markers: _Markers) -> dict[str, Any]:
    """The call's marker (name, payload digest, ceiling inputs): from its view, or computed
    from its data exactly as the view was (by the integrity check, when it did)."""
    shared = markers.get(id(event))
    if shared is not None:
        return shared
    body = event.body or {}
    if event.type == "OpenAIItemRecorded":
        item: Any = body.get("item")
    else:
        item = body.get("extensions", {}).get("openai", {}).get("item_json")
    if redaction.is_withheld(item):
        return dict(item)
    if isinstance(item, str):
        item = json.loads(item)
    rule = json.loads(event.metadata.get(events.TOOL_RULE_KEY, "null"))
    return redaction.call_marker(item, rule if isinstance(rule, Mapping) else None)


class _CallIndex:
    """One stream's tool outputs, guardrail decisions and refusals, by call id."""

    def __init__(self, stream: Sequence[Record]) -> None:
        self.outputs: dict[tuple[str, str], list[int]] = {}  # (call kind, call id)
        self.decisions: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        self.refusals: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for event in stream:
            meta = event.metadata
            kind = meta.get(events.ITEM_TYPE_KEY, "")
            if kind.endswith("_output") and kind.removesuffix("_output") in CALL_KINDS:
                key = (kind.removesuffix("_output"), meta.get(events.CALL_ID_KEY, ""))
                self.outputs.setdefault(key, []).append(event.revision)
            elif event.type in (events.GUARDRAIL_DECIDED, events.AUTHORITY_REFUSED):
                body = event.body
                if body is not None and isinstance(body.get("call_id"), str):
                    table = (
                        self.decisions if event.type == events.GUARDRAIL_DECIDED else self.refusals
                    )
                    table.setdefault(body["call_id"], []).append((event.revision, body))

    def ran(self, call_id: str, revision: int, kind: str) -> bool:
        """Whether an output of the call follows ``revision``."""
        return any(r > revision for r in self.outputs.get((kind, call_id), ()))

    @staticmethod
    def latest(
        table: dict[str, list[tuple[int, dict[str, Any]]]], call_id: str, revision: int
    ) -> dict[str, Any] | None:
        """The newest entry for the call before ``revision``."""
        found = None
        for at, body in table.get(call_id, ()):
            if at >= revision:
                break
            found = body
        return found


def _check_within(
    report: Report,
    tree: _Tree,
    event: Record,
    marker: Mapping[str, Any],
    decided: dict[str, Any] | None,
) -> None:
    where = ("containment", event.stream, event.revision)
    call_id = event.metadata.get(events.CALL_ID_KEY)
    name = str(marker.get("name", ""))
    try:
        policy = tree.policies.get(event.metadata.get(events.POLICY_KEY))
        authority = _authority_at(tree, event.stream, event.revision)
    except InvalidInput as error:
        report.fail(*where, f"tool call {call_id}: {error}")
        return
    rule = policy.tools.get(name)
    recorded = json.loads(event.metadata[events.TOOL_RULE_KEY])
    if rule is None:
        report.fail(*where, f"tool call {call_id} ran with no rule in the policy")
        return
    if recorded != {"scope": rule.scope, "ceilings": dict(rule.ceilings)}:
        report.fail(*where, f"tool call {call_id} carries another rule than its policy's")
        return
    if authority is None:
        report.fail(*where, f"tool call {call_id} ran with no recorded authority")
        return
    inputs = marker.get("ceilings", {})
    if decided is not None and decided.get("decision") == "MODIFY":
        inputs = _modified_inputs(decided, rule)
    refusal = policy.check_inputs(authority, name, inputs)
    if refusal is not None:
        report.fail(*where, f"tool call {call_id} ran beyond authority: {refusal.reason}")


def _modified_inputs(decided: Mapping[str, Any], rule: ToolRule) -> Any:
    modified: Any = decided["modified_payload"]
    if redaction.is_withheld(modified):
        return modified.get("ceilings", {})
    return ceiling_inputs(modified["function"]["arguments"], rule.ceilings.values())


def _check_refusal(report: Report, tree: _Tree, event: Record) -> None:
    """An ``AuthorityRefused`` is a refusal its policy makes, of what the agent held."""
    where = ("containment", event.stream, event.revision)
    body = event.body or {}
    policy = tree.policies.get(event.metadata.get(events.POLICY_KEY))
    authority = Authority.from_json(body["authority"])
    grant = _grant_at(tree, event.stream, event.revision)
    if (
        grant is not None
        and _agent_of(grant) == body["agent"]
        and tree.authority(grant) != authority
    ):
        report.fail(*where, "the refusal records another authority than the agent held")
        return
    subject, gate = body["subject"], body["gate"]
    if body["kind"] == "handoff":
        wrong = policy.check_handoff(authority, subject, gate) is None
    elif gate in (Gate.TOOL_VISIBILITY, Gate.MCP_VISIBILITY):
        wrong = policy.visible(authority, subject) is None
    else:
        # A call not stored (the run stopped first) reads as absent arguments: a ceiling
        # that reads one then refuses, so only a refusal no argument explains fails.
        inputs = _refused_inputs(tree, event, body) or {}
        wrong = policy.check_inputs(authority, subject, inputs) is None
    if wrong:
        report.fail(*where, f"the policy allows what was refused: {subject} ({gate})")


def _refused_inputs(tree: _Tree, event: Record, body: Mapping[str, Any]) -> Any:
    """The ceiling inputs of a refused call: from its item on the stream, when it was stored."""
    call_id = body.get("call_id")
    for other in tree.streams[event.stream][event.revision + 1 :]:
        if (
            other.metadata.get(events.CALL_ID_KEY) == call_id
            and other.metadata.get(events.ITEM_TYPE_KEY) in CALL_KINDS
        ):
            return _call_marker(other, tree.markers).get("ceilings", {})
    return None  # the run stopped before the call was stored: only its scope is known


# -- usage ------------------------------------------------------------------------------


def _check_responses(report: Report, tree: _Tree) -> None:
    """Each ``ModelResponded`` reads as one, belongs to this session's tree and names the
    response its metadata does; the report totals what they record."""
    total, count = Usage(), 0
    for name, stream in tree.streams.items():
        for event in stream:
            if event.type != events.MODEL_RESPONDED:
                continue
            where = ("usage", name, event.revision)
            if not tree.is_tree_stream(name):
                report.fail(*where, f"a model response does not belong on {name}")
                continue
            try:
                response = ModelResponse.decode((event.data or "").encode())
            except ValueError as error:
                report.fail(*where, f"an unreadable model response: {cut(str(error), 200)}")
                continue
            if response.session_id != tree.session_id:
                report.fail(*where, "a model response of another session")
            elif event.metadata.get(events.RESPONSE_ID_KEY) not in (None, response.response_id):
                report.fail(*where, "aj.response_id is not the response's id")
            else:
                count += 1
                total += response.usage
    if count and not report.failed("usage"):
        report.lines.append(
            f"usage: {plural(count, 'model response')}; {total.input_tokens} input "
            f"({total.cached_input_tokens} cached), {total.output_tokens} output "
            f"({total.reasoning_tokens} reasoning) tokens"
        )
