"""Offline verification of a session bundle (pure: no store, no network).

A bundle (:mod:`agentjournal.bundle` writes one) holds every stream of a
session tree with every event's revision, id, type, metadata, data digest and
(unless withheld) data. :func:`verify_bundle` checks, in order:

1. **Structure** — the format, no unknown or missing fields, no empty bundle.
2. **Integrity** — per stream: revisions 0, 1, 2, ... with no gap; each
   event's data matches its digest; ``aj.seq`` is its revision, ``aj.prev`` the
   previous event's hash, and ``aj.hash`` recomputes (:mod:`agentjournal.ledger`).
3. **Checkpoints** — each signed by a trusted key (keys come only from the
   caller, never from the bundle), naming heads that exist with those hashes;
   the last one covers every event: the session stream and open subsessions
   up to their heads, closed subsessions through the ``aj.closes_hash`` of
   their covered parent event. Anything after it is uncovered (a removed
   checkpoint or an unsigned tail) and fails unless allowed.
4. **Twins** — each handoff's ``SubagentStarted`` and each
   ``SubagentCompleted`` exist on both streams and name each other; a closed
   subsession ends with its completion, whose hash the parent recorded.
5. **Delegation** — each granted authority is narrower than its sender's
   (the run's recorded root grant, or the sender's own grant).
6. **Containment** — every executed tool call of a guarded session had an
   ALLOW or MODIFY decision, and every executed tool call of a session with a
   policy was within the calling agent's effective authority.

The report names the first bad stream and revision.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentjournal import events, ledger
from agentjournal.authority import Authority
from agentjournal.errors import CodecError, InvalidInput
from agentjournal.guardrails.actions import CALL_KINDS, call_of
from agentjournal.policy import Policy, ToolRule

__all__ = [
    "BUNDLE_FORMAT",
    "REDACTABLE",
    "Event",
    "Problem",
    "Report",
    "parse_bundle",
    "verify_bundle",
]

BUNDLE_FORMAT: Final = "agentjournal-bundle"
BUNDLE_VERSION: Final = 1
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
_BUNDLE_FIELDS: Final = {"format", "version", "session_id", "exported_at", "redacted", "streams"}
_STREAM_FIELDS: Final = {"name", "events"}
_EVENT_FIELDS: Final = {"revision", "id", "type", "data", "data_sha256", "metadata"}
REDACTABLE: Final = frozenset(
    {
        "UserMessageReceived",
        "AssistantTextGenerated",
        "AssistantThinkingGenerated",
        "ToolResultReceived",
        "OpenAIItemRecorded",
        "InterruptIssued",
        "InterruptResolved",
    }
)
"""Event types whose data a redacted bundle may withhold; any other withheld data fails."""


@dataclass(frozen=True)
class Event:
    """One event of a bundle; ``data`` is None when withheld."""

    stream: str
    revision: int
    id: str
    type: str
    data: str | None
    data_sha256: str
    metadata: Mapping[str, str]

    def body(self) -> dict[str, Any] | None:
        if self.data is None:
            return None
        try:
            parsed = json.loads(self.data)
        except (ValueError, RecursionError):
            return None
        return parsed if isinstance(parsed, dict) else None


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

    def text(self) -> str:
        """The readable report, ending with OK or FAILED and the first problem."""
        out = list(self.lines)
        out.extend(f"  problem: {problem}" for problem in self.problems[:20])
        if len(self.problems) > 20:
            out.append(f"  ... and {len(self.problems) - 20} more")
        out.append("OK" if self.ok else f"FAILED: {self.problems[0]}")
        return "\n".join(out)


def verify_bundle(
    bundle: Any,
    trusted: Mapping[str, Ed25519PublicKey],
    *,
    allow_uncovered: bool = False,
    not_before: str | None = None,
) -> Report:
    """Verify a parsed bundle against the trusted public keys (key id -> key).

    Args:
        bundle: The parsed JSON of a bundle.
        trusted: Key id -> public key; only these keys' checkpoints count.
        allow_uncovered: Report events after the last checkpoint as warnings.
        not_before: An RFC 3339 time the last checkpoint may not be older than.
            Without an outside anchor like this, a bundle cut back to an
            earlier checkpoint (and its signature) is indistinguishable from
            the session as it was then.
    """
    report = Report()
    try:
        session_id, streams = _parse(bundle)
    except _Malformed as error:
        report.fail("structure", error.stream, error.revision, str(error))
        return report
    except InvalidInput as error:
        report.fail("structure", "bundle", None, str(error))
        return report
    session_stream = f"AgentSession-{session_id}"
    total = sum(len(stream) for stream in streams.values())
    withheld = sum(1 for stream in streams.values() for e in stream if e.data is None)
    report.lines.append(
        f"session {session_id}: {_plural(len(streams), 'stream')}, {_plural(total, 'event')} "
        f"({withheld} withheld)"
    )
    if session_stream not in streams or not streams[session_stream]:
        report.fail("structure", session_stream, None, "the session stream is missing or empty")
        return report
    for name, stream in streams.items():
        _check_chain(report, name, stream)
    if report.problems:
        report.lines.append("integrity: FAILED")
        return report  # nothing built on a broken chain can be trusted
    report.lines.append(
        f"integrity: {_plural(total, 'event')} in {_plural(len(streams), 'stream')} chain correctly"
    )
    try:
        tree = _Tree(session_id, session_stream, streams)
    except _MALFORMED as error:
        report.fail("structure", session_stream, None, f"malformed lifecycle event: {error}")
        return report
    stages: list[tuple[str, Callable[[], None]]] = [
        ("twins", lambda: _check_twins(report, tree)),
        (
            "checkpoints",
            lambda: _check_checkpoints(report, tree, trusted, allow_uncovered, not_before),
        ),
        ("delegation", lambda: _check_delegation(report, tree)),
        ("containment", lambda: _check_containment(report, tree)),
    ]
    for check, stage in stages:
        try:
            stage()
        except _MALFORMED as error:  # a crafted event: a failure to report, never a crash
            report.fail(
                check, session_stream, None, f"malformed event: {type(error).__name__}: {error}"
            )
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
        raise InvalidInput(f"not a bundle: {_cut(str(error), 200)}") from None


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        names = [name for name, _ in pairs]
        repeated = next(name for name in names if names.count(name) > 1)
        raise ValueError(f"the name {_cut(repr(repeated), 60)} appears twice in one object")
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"the number {_cut(text, 40)} is too large")
    return value


def _plural(count: int, noun: str) -> str:
    """``1 event``, ``2 events``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _cut(text: str, limit: int) -> str:
    """``text``, cut to ``limit`` characters with "…" when it was longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _unicode(text: str) -> bool:
    """Whether ``text`` is valid Unicode text (JSON can carry lone surrogates, UTF-8 cannot)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parse(bundle: Any) -> tuple[str, dict[str, list[Event]]]:
    if not isinstance(bundle, Mapping) or not bundle:
        raise InvalidInput("empty input: a bundle is a JSON object")
    if set(bundle) != _BUNDLE_FIELDS:
        extra, missing = set(bundle) - _BUNDLE_FIELDS, _BUNDLE_FIELDS - set(bundle)
        raise InvalidInput(
            f"bundle fields: unknown {_cut(str(sorted(extra)), 200)}, missing {sorted(missing)}"
        )
    version = bundle["version"]
    if (
        bundle["format"] != BUNDLE_FORMAT
        or not isinstance(version, int)
        or isinstance(version, bool)
        or version != BUNDLE_VERSION
    ):
        raise InvalidInput(f"not an {BUNDLE_FORMAT} version {BUNDLE_VERSION} bundle")
    session_id = bundle["session_id"]
    if not isinstance(session_id, str) or not session_id or not _unicode(session_id):
        raise InvalidInput("session_id must be a non-empty string")
    if not isinstance(bundle["redacted"], bool) or not isinstance(bundle["exported_at"], str):
        raise InvalidInput("redacted must be true or false and exported_at a string")
    raw_streams = bundle["streams"]
    if not isinstance(raw_streams, list) or not raw_streams:
        raise InvalidInput("a bundle holds at least one stream")
    streams: dict[str, list[Event]] = {}
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
            raise InvalidInput(f"stream {_cut(repr(name), 200)} is malformed or repeated")
        streams[name] = [_event(name, e) for e in raw_events]
    return session_id, streams


class _Malformed(InvalidInput):
    """Raised by :func:`_event` for a malformed event, with where it is."""

    def __init__(self, stream: str, revision: int | None, message: str) -> None:
        super().__init__(message)
        self.stream, self.revision = stream, revision


def _event(stream: str, raw: Any) -> Event:
    if not isinstance(raw, Mapping) or set(raw) != _EVENT_FIELDS:
        raise _Malformed(stream, None, f"an event must have exactly {sorted(_EVENT_FIELDS)}")
    revision, metadata = raw["revision"], raw["metadata"]
    if not isinstance(revision, int) or isinstance(revision, bool):
        raise _Malformed(stream, None, "an event has a non-integer revision")
    if not 0 <= revision <= _MAX_REVISION:
        raise _Malformed(stream, None, "an event has a revision out of range")
    if not isinstance(metadata, dict) or not (
        set(map(type, metadata)) <= {str} and set(map(type, metadata.values())) <= {str}
    ):
        raise _Malformed(stream, revision, "metadata must map strings to strings")
    bad = next((k for k, v in metadata.items() if not (_unicode(k) and _unicode(v))), None)
    if bad is not None:
        raise _Malformed(
            stream, revision, f"metadata {_cut(repr(bad), 60)} is not valid Unicode text"
        )
    for name in ("id", "type", "data_sha256"):
        if not isinstance(raw[name], str) or not _unicode(raw[name]):
            raise _Malformed(stream, revision, f"{name} must be a string of Unicode text")
    if raw["data"] is not None and not isinstance(raw["data"], str):
        raise _Malformed(stream, revision, "data must be a string or null")
    return Event(
        stream, revision, raw["id"], raw["type"], raw["data"], raw["data_sha256"], metadata
    )


# -- integrity ----------------------------------------------------------------------


def _check_chain(report: Report, name: str, stream: Sequence[Event]) -> None:
    prev = ledger.GENESIS
    for position, event in enumerate(stream):
        if event.revision != position:
            report.fail(
                "integrity",
                name,
                event.revision,
                f"expected revision {position}: an event was removed, added or moved",
            )
            return
        if event.data is None:
            if event.type not in REDACTABLE:
                report.fail("integrity", name, position, f"the data of {event.type} is withheld")
                return
        else:
            try:
                actual = hashlib.sha256(event.data.encode()).hexdigest()
            except UnicodeEncodeError:
                report.fail("integrity", name, position, "the data is not valid UTF-8 text")
                return
            if actual != event.data_sha256:
                report.fail("integrity", name, position, "the data does not match its digest")
                return
        metadata = event.metadata
        stored = metadata.get(ledger.HASH_KEY)
        if stored is None:
            report.fail("integrity", name, position, "the event is not chained (no aj.hash)")
            return
        if metadata.get(ledger.SEQ_KEY) != str(position):
            report.fail("integrity", name, position, "aj.seq does not match the revision")
            return
        if metadata.get(ledger.PREV_KEY) != prev:
            report.fail("integrity", name, position, "aj.prev is not the previous event's hash")
            return
        expected = ledger.chain_hash(
            name, position, event.id, event.type, event.data_sha256, metadata
        )
        if expected != stored:
            report.fail("integrity", name, position, "the hash does not match the event")
            return
        prev = stored


# -- the tree -----------------------------------------------------------------------


class _Tree:
    """Indexes over the bundle's streams."""

    def __init__(self, session_id: str, session_stream: str, streams: dict[str, list[Event]]):
        self.session_id = session_id
        self.session_stream = session_stream
        self.ledger_stream = ledger.ledger_stream(session_id)
        self.streams = streams
        self.by_id = {e.id: e for stream in streams.values() for e in stream}
        self._grants: list[Event] | None = None
        self._authorities: dict[str, Authority | None] = {}
        # Subsession stream -> the parent copy of the SubagentStarted that opened it.
        self.opened_by: dict[str, Event] = {}
        for stream in streams.values():
            for event in stream:
                if event.type == events.SUBAGENT_STARTED and events.INDEX_KEY in event.metadata:
                    body = event.body() or {}
                    child = body.get("subsession_stream")
                    if isinstance(child, str):
                        self.opened_by[child] = event

    def root_grants(self) -> list[Event]:
        """The run roots' ``AuthorityGranted`` events on the session stream, in order."""
        if self._grants is None:
            self._grants = [
                event
                for event in self.streams[self.session_stream]
                if event.type == events.AUTHORITY_GRANTED
            ]
        return self._grants

    def authority(self, event: Event) -> Authority | None:
        """The authority an ``AuthorityGranted`` or ``SubagentStarted`` records (parsed once)."""
        if event.id not in self._authorities:
            body = event.body() or {}
            raw = (
                body.get("authority")
                if event.type == events.AUTHORITY_GRANTED
                else events.granted_authority(body)
            )
            self._authorities[event.id] = None if raw is None else Authority.from_json(raw)
        return self._authorities[event.id]

    def head(self, stream: str) -> Event | None:
        found = self.streams.get(stream)
        return found[-1] if found else None


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
    for name in tree.streams:
        if name not in (tree.session_stream, tree.ledger_stream) and name not in tree.opened_by:
            report.fail("twins", name, None, "a subsession no handoff in the bundle opened")
    for stream in tree.streams.values():
        for event in stream:
            closes = event.metadata.get(events.CLOSES_KEY)
            if event.type != events.SUBAGENT_COMPLETED or closes is None:
                continue
            completed += 1
            mate = tree.by_id.get(event.metadata.get(events.TWIN_KEY, ""))
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
            elif event.metadata.get(events.CLOSES_HASH_KEY) != mate.metadata.get(ledger.HASH_KEY):
                report.fail(
                    "twins", event.stream, event.revision, "aj.closes_hash is not the subsession's"
                )
    if not any(p.check == "twins" for p in report.problems):
        report.lines.append(
            f"twins: {_plural(started, 'subagent')} started, {completed} closed, links ok"
            if started
            else "twins: no subagents"
        )


# -- checkpoints ----------------------------------------------------------------------


def _check_checkpoints(
    report: Report,
    tree: _Tree,
    trusted: Mapping[str, Ed25519PublicKey],
    allow_uncovered: bool,
    not_before: str | None,
) -> None:
    signed: list[tuple[Event, ledger.Checkpoint]] = []
    for event in tree.streams.get(tree.ledger_stream, []):
        if event.type != ledger.CHECKPOINT:
            continue
        body = event.body()
        try:
            checkpoint = ledger.Checkpoint.decode(body)
        except InvalidInput as error:
            report.fail("checkpoints", event.stream, event.revision, str(error))
            continue
        public = trusted.get(checkpoint.key_id)
        if public is None:
            report.fail(
                "checkpoints",
                event.stream,
                event.revision,
                f"signed by {checkpoint.key_id}, which is not a trusted key",
            )
            continue
        if not checkpoint.verify(public):
            report.fail("checkpoints", event.stream, event.revision, "the signature is invalid")
            continue
        if checkpoint.session_id != tree.session_id:
            report.fail(
                "checkpoints", event.stream, event.revision, "a checkpoint of another session"
            )
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
            elif found[revision].metadata.get(ledger.HASH_KEY) != digest:
                report.fail(
                    "checkpoints",
                    stream,
                    revision,
                    f"the hash differs from the checkpoint at {event.stream}@{event.revision}",
                )
        signed.append((event, checkpoint))
    if not signed:
        if not allow_uncovered:
            report.fail("checkpoints", tree.ledger_stream, None, "no trusted checkpoint")
        report.lines.append("checkpoints: none trusted (tail truncation is not detectable)")
        return
    last_event, last = signed[-1]
    # Each checkpoint was checked against the chains: what any of them covers is
    # covered (writers in several processes sign what each of them knew).
    covered: dict[str, int] = {}
    for _, checkpoint in signed:
        for stream, revision in _covered(tree, checkpoint).items():
            covered[stream] = max(covered.get(stream, -1), revision)
    uncovered = [
        (name, covered.get(name, -1) + 1)
        for name, stream in tree.streams.items()
        if name != tree.ledger_stream and covered.get(name, -1) < len(stream) - 1
    ]
    if tree.head(tree.ledger_stream) is not last_event:
        uncovered.append((tree.ledger_stream, last_event.revision + 1))
    keys = sorted({c.key_id for _, c in signed})
    report.lines.append(
        f"checkpoints: {_plural(len(signed), 'checkpoint')} signed by {', '.join(keys)}; "
        f"the last at {last_event.stream}@{last_event.revision}, signed {last.signed_at}"
    )
    newest = max((checkpoint.signed_at for _, checkpoint in signed), key=_instant)
    if not_before is not None and _instant(newest) < _instant(not_before):
        report.fail(
            "checkpoints",
            tree.ledger_stream,
            last_event.revision,
            f"the newest checkpoint ({newest}) is older than {not_before}: the session was "
            "cut back",
        )
    for name, revision in uncovered:
        message = "events after the last checkpoint (not covered by a signature)"
        if allow_uncovered:
            report.lines.append(f"  warning: {name}@{revision}: {message}")
        else:
            report.fail("checkpoints", name, revision, message)


def _instant(text: str) -> datetime:
    """An RFC 3339 time; naive times are UTC."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _covered(tree: _Tree, checkpoint: ledger.Checkpoint) -> dict[str, int]:
    """The last covered revision of each stream under ``checkpoint``."""
    covered = {stream: revision for stream, (revision, _) in checkpoint.heads.items()}
    changed = True
    while changed:  # a covered closing event covers the whole subsession it closed
        changed = False
        for name, stream in tree.streams.items():
            for event in stream[: covered.get(name, -1) + 1]:
                child = event.metadata.get(events.CLOSES_KEY)
                if child and covered.get(child, -1) < len(tree.streams.get(child, [])) - 1:
                    twin = tree.by_id.get(event.metadata.get(events.TWIN_KEY, ""))
                    if twin is not None and twin.stream == child:
                        covered[child] = twin.revision
                        changed = True
    return covered


# -- delegation and containment ---------------------------------------------------------


def _authority_at(tree: _Tree, stream: str, revision: int) -> Authority | None:
    """The effective authority of the agent speaking on ``stream`` at ``revision``."""
    if stream == tree.session_stream:
        grants = tree.root_grants()
        position = bisect.bisect_left(grants, revision, key=lambda grant: grant.revision)
        return tree.authority(grants[position - 1]) if position else None
    opener = tree.opened_by.get(stream)
    return tree.authority(opener) if opener is not None else None


def _check_delegation(report: Report, tree: _Tree) -> None:
    checked = 0
    for child, opener in tree.opened_by.items():
        try:
            granted = tree.authority(opener)
            if granted is None:
                continue
            sender = _authority_at(tree, opener.stream, opener.revision)
        except InvalidInput as error:
            report.fail("delegation", opener.stream, opener.revision, str(error))
            continue
        checked += 1
        if sender is None:
            report.fail(
                "delegation",
                opener.stream,
                opener.revision,
                "a grant without the sender's authority",
            )
        elif not granted.is_narrower_than(sender):
            report.fail(
                "delegation",
                opener.stream,
                opener.revision,
                f"the authority granted to {child} is wider than its sender's",
            )
    if not any(p.check == "delegation" for p in report.problems):
        report.lines.append(
            f"delegation: {_plural(checked, 'grant')}, each narrower than its sender's"
            if checked
            else "delegation: no authority was granted along a handoff"
        )


def _check_containment(report: Report, tree: _Tree) -> None:
    executed = guarded = ruled = 0
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
            if not index.ran(call_id, event.revision, kind):
                continue
            if refused is not None and refused.get("enforcement") == "tool_refused":
                continue
            if decided is not None and decided.get("decision") == "BLOCK":
                continue  # refused by the guardrail: the output is the refusal
            executed += 1
            guarded += meta.get(events.GUARDED_KEY) == "1"
            ruled += events.TOOL_RULE_KEY in meta
            if meta.get(events.GUARDED_KEY) == "1" and (
                decided is None or decided.get("decision") not in ("ALLOW", "MODIFY")
            ):
                report.fail(
                    "containment",
                    name,
                    event.revision,
                    f"tool call {call_id} ran without an ALLOW or MODIFY decision",
                )
            rule_text = meta.get(events.TOOL_RULE_KEY)
            if rule_text is not None:
                _check_within(report, tree, event, rule_text, decided)
    if not any(p.check == "containment" for p in report.problems):
        report.lines.append(_containment_line(executed, guarded, ruled))


def _containment_line(executed: int, guarded: int, ruled: int) -> str:
    """What containment found, saying only what was checked."""
    if not executed:
        return "containment: no tool call ran"
    if guarded == executed:
        decided = "each had an ALLOW or MODIFY decision"
    elif guarded:
        decided = f"{guarded} guarded, each with an ALLOW or MODIFY decision"
    else:
        decided = "no guardrail: no decisions were expected"
    if ruled == executed:
        within = "each within its agent's authority"
    elif ruled:
        within = f"{ruled} under the policy, each within its agent's authority"
    else:
        within = "no policy: no authority to check"
    return f"containment: {_plural(executed, 'executed tool call')}; {decided}; {within}"


class _CallIndex:
    """One stream's tool outputs, guardrail decisions and refusals, by call id."""

    def __init__(self, stream: Sequence[Event]) -> None:
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
                body = event.body()
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
    report: Report, tree: _Tree, event: Event, rule_text: str, decided: dict[str, Any] | None
) -> None:
    where = ("containment", event.stream, event.revision)
    call_id = event.metadata.get(events.CALL_ID_KEY)
    try:
        raw_rule = json.loads(rule_text)
        authority = _authority_at(tree, event.stream, event.revision)
    except (ValueError, InvalidInput) as error:
        report.fail(*where, f"unreadable rule or authority: {error}")
        return
    if raw_rule is None:
        report.fail(*where, f"tool call {call_id} ran with no rule in the policy")
        return
    if authority is None:
        report.fail(*where, f"tool call {call_id} ran with no recorded authority")
        return
    rule = ToolRule(raw_rule["scope"], raw_rule.get("ceilings", {}))
    item = _item(event)
    call = call_of(item) if item is not None else None
    name = call.name if call is not None else "tool"
    arguments: str | None = call.arguments if call is not None else None
    if decided is not None and decided.get("decision") == "MODIFY":
        arguments = decided["modified_payload"]["function"]["arguments"]
    if arguments is None:
        if not authority.holds(rule.scope):
            report.fail(*where, f"tool call {call_id} ran without scope {rule.scope}")
        return  # withheld: the ceilings cannot be checked
    refusal = Policy(tools={name: rule}).check_call(authority, name, arguments)
    if refusal is not None:
        report.fail(*where, f"tool call {call_id} ran beyond authority: {refusal.reason}")


def _item(event: Event) -> dict[str, Any] | None:
    body = event.body()
    if body is None:
        return None
    text = body.get("extensions", {}).get("openai", {}).get("item_json")
    if isinstance(text, str):
        try:
            item = json.loads(text)
        except ValueError:
            return None
        return item if isinstance(item, dict) else None
    return None
