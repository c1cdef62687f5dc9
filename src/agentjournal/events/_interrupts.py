"""Approvals on the record: a function tool's call that waits for a person
(``InterruptIssued``), the person's answer (``InterruptResolved``), and the paused run
(``agentjournal.RunPaused``).

The two interrupt events are canonical kurrent-agent-schema messages, printed with the
schema's ``to_json`` and read back as plain JSON (``from_json`` checks the shape first);
what the schema has no field for (the acting agent, the authority it held, who answered)
rides in ``extensions.agentjournal``. They are written with ``aj.interrupt`` in their
metadata, which tells them from the MCP approval *items* the codec writes as the same
types: these hold no item.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import rfc8785
from kurrent_agent_schema import InterruptIssued, InterruptResolved, from_json, to_json

from agentjournal._digests import value_digest
from agentjournal.errors import CodecError
from agentjournal.events._codec import EVENT_ID, TEXT, Event, json_body
from agentjournal.events._names import INTERRUPT_ISSUED, INTERRUPT_RESOLVED, RUN_PAUSED, RUN_RESUMED

TOOL_APPROVAL: Final = "tool_approval"
"""The kind of a function tool's approval (``InterruptIssued.kind``, ``aj.interrupt``)."""
APPROVAL_OUTCOMES: Final = ("approved", "rejected")
RUN_STATE: Final = "run_state"
"""``source`` of an answer no person gave through the journal: the SDK's own decision in the
run's ``RunState`` (``state.approve``/``state.reject``), recorded with the call's output."""
RUN_STATE_BY: Final = "RunState"
"""``by`` of such an answer: the run's state, not a named person."""
_EXTENSION: Final = "agentjournal"
SIGNED_APPROVAL: Final = "agentjournal-approval/1"
"""The ``format`` of the bytes an approver signs (:func:`approval_signed_bytes`)."""
SIGNED_KEYED_APPROVAL: Final = "agentjournal-approval-keyed/1"
"""The ``format`` of the bytes an approver signs in a sealed session: they hold the keyed
digests of the arguments and the reason, in place of their plain digests."""
KEYED_PREFIX: Final = "hmac-sha256:"
"""The prefix of a keyed digest (HMAC-SHA256 under a key derived from a subject's key)."""
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
_KEYED: Final = re.compile(r"hmac-sha256:[0-9a-f]{64}")
_KEY_ID: Final = re.compile(r"ed25519:[0-9a-f]{16}")
_SIGNATURE_TEXT: Final = 88  # base64 of a 64-byte Ed25519 signature


def arguments_digest(arguments: str) -> str:
    """``sha256:`` + hex SHA-256 of a call's arguments text (UTF-8): what an answer says it
    answers. Lone surrogates are kept as their bytes: a digest never fails."""
    return "sha256:" + hashlib.sha256(arguments.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class ApprovalAsked:
    """``InterruptIssued`` of a function tool call that waits for approval.

    Attributes:
        request_id: The call's id (the SDK's ``call_id``).
        tool_name: The tool.
        arguments: The call's arguments as the model gave them (``prompt`` on the wire).
        agent: The agent that made the call.
        authority: What that agent held then (the policy's JSON form), when the session
            has a policy.
        timestamp: When the run stopped for it.
        arguments_hmac: In a sealed session (``arguments`` sealed under the subject's
            key), the keyed digest of the arguments (``hmac-sha256:``, under that key): what
            the answer names, in the clear; empty in a plain session.
    """

    request_id: str
    tool_name: str
    arguments: str
    agent: str
    authority: dict[str, Any] | None
    timestamp: datetime
    arguments_hmac: str = ""

    def encode(self) -> bytes:
        """Its data: the schema's ``InterruptIssued`` JSON."""
        message = InterruptIssued(
            request_id=self.request_id,
            kind=TOOL_APPROVAL,
            tool_name=self.tool_name,
            prompt=self.arguments,
        )
        message.timestamp.FromDatetime(self.timestamp)
        extension: dict[str, Any] = {"agent": self.agent}
        if self.authority is not None:
            extension["authority"] = _compact(self.authority)
        if self.arguments_hmac:
            extension["arguments_hmac"] = self.arguments_hmac
        message.extensions[_EXTENSION].update(extension)
        text: str = to_json(message)
        return text.encode()

    @classmethod
    def decode(cls, data: bytes) -> ApprovalAsked:
        """Read it back.

        Raises:
            CodecError: The data is no function tool approval's ``InterruptIssued``.
        """
        body, extension = _canonical(InterruptIssued, INTERRUPT_ISSUED, data)
        if body.get("kind") != TOOL_APPROVAL:
            raise CodecError(f"{INTERRUPT_ISSUED}: kind must be {TOOL_APPROVAL!r}")
        authority = extension.get("authority")
        held = _parsed(authority, "authority") if authority is not None else None
        keyed = _optional(
            extension, "arguments_hmac", _KEYED, "hmac-sha256:<64 hex digits>", INTERRUPT_ISSUED
        )
        return cls(
            request_id=_text(body, "request_id", INTERRUPT_ISSUED),
            tool_name=_text(body, "tool_name", INTERRUPT_ISSUED),
            arguments=str(body.get("prompt", "")),
            agent=_text(extension, "agent", INTERRUPT_ISSUED),
            authority=held,
            timestamp=_time(body, INTERRUPT_ISSUED),
            arguments_hmac=keyed,
        )


@dataclass(frozen=True, slots=True)
class ApprovalDecided:
    """``InterruptResolved`` of a function tool call's approval: a person's answer, or the
    decision the run's own state held.

    Attributes:
        request_id: The call's id (the ``InterruptIssued`` it answers).
        outcome: ``approved`` or ``rejected``.
        reason: Why (``response`` on the wire; may be empty).
        by: Who answered (:data:`RUN_STATE_BY` when no one answered through the journal).
        issued: The event id of the ``InterruptIssued`` it answers.
        timestamp: When.
        arguments_digest: :func:`arguments_digest` of the arguments the question showed
            (empty on answers recorded before answers named them); in a sealed session
            their keyed digest instead (``hmac-sha256:``: the question's
            :attr:`ApprovalAsked.arguments_hmac`).
        reason_hmac: In a sealed session, the keyed digest of the reason (the reason is
            sealed; the signature covers this); empty in a plain session.
        key_id: The signing approver's key id (``ed25519:`` + 16 hex digits); empty when
            unsigned.
        signature: Base64 Ed25519 signature over :func:`approval_signed_bytes`; empty when
            unsigned.
        source: Where the answer came from when no one gave it through the journal
            (:data:`RUN_STATE`: the SDK's ``RunState``); None: through the journal
            (``approve``/``reject``).
    """

    request_id: str
    outcome: str
    reason: str
    by: str
    issued: str
    timestamp: datetime
    arguments_digest: str = ""
    key_id: str = ""
    signature: str = ""
    source: str | None = None
    reason_hmac: str = ""

    @property
    def signed(self) -> bool:
        """Whether an approver signed it."""
        return bool(self.signature)

    @property
    def keyed(self) -> bool:
        """Whether it names keyed digests (a sealed session's answer)."""
        return self.arguments_digest.startswith(KEYED_PREFIX)

    def encode(self) -> bytes:
        """Its data: the schema's ``InterruptResolved`` JSON."""
        message = InterruptResolved(
            request_id=self.request_id, outcome=self.outcome, response=self.reason
        )
        message.timestamp.FromDatetime(self.timestamp)
        extension = {"by": self.by, "issued": self.issued}
        if self.keyed:
            extension["arguments_hmac"] = self.arguments_digest
            extension["reason_hmac"] = self.reason_hmac
        elif self.arguments_digest:
            extension["arguments_sha256"] = self.arguments_digest
        if self.signature:
            extension["key_id"] = self.key_id
            extension["signature"] = self.signature
        if self.source is not None:
            extension["source"] = self.source
        message.extensions[_EXTENSION].update(extension)
        text: str = to_json(message)
        return text.encode()

    @classmethod
    def decode(cls, data: bytes) -> ApprovalDecided:
        """Read it back (answers without a digest or signature too).

        Raises:
            CodecError: The data is no function tool approval's ``InterruptResolved``, or
                its digest, key id or signature is malformed.
        """
        body, extension = _canonical(InterruptResolved, INTERRUPT_RESOLVED, data)
        outcome = body.get("outcome")
        if outcome not in APPROVAL_OUTCOMES:
            raise CodecError(
                f"{INTERRUPT_RESOLVED}: outcome must be one of {APPROVAL_OUTCOMES}, got "
                f"{_short(outcome)}"
            )
        digest = _optional(extension, "arguments_sha256", _DIGEST, "sha256:<64 hex digits>")
        keyed = _optional(extension, "arguments_hmac", _KEYED, "hmac-sha256:<64 hex digits>")
        reason = _optional(extension, "reason_hmac", _KEYED, "hmac-sha256:<64 hex digits>")
        if digest and keyed:
            raise CodecError(
                f"{INTERRUPT_RESOLVED}: arguments_sha256 and arguments_hmac exclude each other"
            )
        if bool(keyed) != bool(reason):
            raise CodecError(
                f"{INTERRUPT_RESOLVED}: arguments_hmac needs its reason_hmac, and back"
            )
        key_id = _optional(extension, "key_id", _KEY_ID, "ed25519:<16 hex digits>")
        signature = _signature(extension.get("signature"))
        if bool(key_id) != bool(signature):
            raise CodecError(f"{INTERRUPT_RESOLVED}: a signature needs its key_id, and back")
        source = extension.get("source")
        if source is not None and not isinstance(source, str):
            raise CodecError(f"{INTERRUPT_RESOLVED}: source must be a string, got {_short(source)}")
        return cls(
            request_id=_text(body, "request_id", INTERRUPT_RESOLVED),
            outcome=outcome,
            reason=str(body.get("response", "")),
            by=_text(extension, "by", INTERRUPT_RESOLVED),
            issued=_text(extension, "issued", INTERRUPT_RESOLVED),
            timestamp=_time(body, INTERRUPT_RESOLVED),
            arguments_digest=digest or keyed,
            key_id=key_id,
            signature=signature,
            source=source,
            reason_hmac=reason,
        )


def approval_signed_bytes(
    session_id: str, stream: str, decided: ApprovalDecided, *, reason_digest: str | None = None
) -> bytes:
    """The bytes an approver signs: RFC 8785 JSON of the session, the question's stream,
    the request, the question's event id, the arguments digest, the outcome, the digest of
    the reason, who, and when (UTC, microseconds).

    In a plain session (:data:`SIGNED_APPROVAL`) the digests are ``arguments_sha256`` and
    ``reason_sha256`` (``value_digest`` of the reason: the redaction marker's, so a redacted
    bundle still verifies; ``reason_digest`` when only that is known). A keyed answer's
    (:attr:`ApprovalDecided.keyed`, :data:`SIGNED_KEYED_APPROVAL`) are ``arguments_hmac``
    and ``reason_hmac``, the keyed digests it carries in the clear (``reason_digest``: the
    reason's keyed digest as a holder of the key recomputes it), so a verifier without the
    key checks the signature, and after erasure it confirms no guess."""
    if decided.keyed:
        digests = {
            "format": SIGNED_KEYED_APPROVAL,
            "arguments_hmac": decided.arguments_digest,
            "reason_hmac": reason_digest or decided.reason_hmac,
        }
    else:
        digests = {
            "format": SIGNED_APPROVAL,
            "arguments_sha256": decided.arguments_digest,
            "reason_sha256": reason_digest or value_digest(decided.reason),
        }
    return bytes(
        rfc8785.dumps(
            {
                **digests,
                "session_id": session_id,
                "stream": stream,
                "request_id": decided.request_id,
                "issued": decided.issued,
                "outcome": decided.outcome,
                "by": decided.by,
                "time": signed_time(decided.timestamp),
            }
        )
    )


def signed_time(when: datetime) -> str:
    """A time as the signature covers it: UTC, microseconds, ``Z``."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _optional(
    extension: dict[str, Any],
    key: str,
    form: re.Pattern[str],
    shown: str,
    type_: str = INTERRUPT_RESOLVED,
) -> str:
    value = extension.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or not form.fullmatch(value):
        raise CodecError(f"{type_}: {key} must be {shown}, got {_short(value)}")
    return value


def _signature(value: Any) -> str:
    if value is None:
        return ""
    raw = b""
    if isinstance(value, str) and len(value) == _SIGNATURE_TEXT:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
    if len(raw) != 64:
        raise CodecError(
            f"{INTERRUPT_RESOLVED}: signature must be base64 of 64 bytes, got {_short(value)}"
        )
    return str(value)


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


@dataclass(frozen=True, slots=True)
class RunPaused(Event):
    """``agentjournal.RunPaused``: a run stopped on approvals, with what resumes it.

    Attributes:
        state: The SDK's ``RunState`` as text (``result.to_state().to_string()``).
        requests: The approvals it waits for, recorded as ``InterruptIssued``: each
            ``{"request_id", "stream", "revision"}`` (the call id, and where the question
            is); the state may hold other interruptions too.
    """

    state: str = field(metadata=TEXT)
    requests: list[dict[str, Any]]

    EVENT_TYPE = RUN_PAUSED

    def __post_init__(self) -> None:
        if not isinstance(self.requests, list) or not all(
            isinstance(r, dict)
            and isinstance(r.get("request_id"), str)
            and isinstance(r.get("stream"), str)
            and isinstance(r.get("revision"), int)
            for r in self.requests
        ):
            raise CodecError(
                f"{RUN_PAUSED}: requests must be a list of {{request_id, stream, revision}}"
            )

    @property
    def request_ids(self) -> list[str]:
        """The call ids of the approvals it waits for."""
        return [str(r["request_id"]) for r in self.requests]

    @property
    def streams(self) -> list[str]:
        """The streams their questions are on, each once."""
        return list(dict.fromkeys(str(r["stream"]) for r in self.requests))


@dataclass(frozen=True, slots=True)
class RunResumed(Event):
    """``agentjournal.RunResumed``: a paused run taken up to be resumed.

    Written on the line's top stream before the resumed run starts, expecting that
    stream's head, so of two processes that resume one paused run exactly one runs it.

    Attributes:
        paused: The event id of the ``agentjournal.RunPaused`` it resumes.
        holder: Who took it up (``host:pid`` of the resuming process).
        retake: Whether a person took it up again after an earlier taker did not finish
            (its calls may or may not have run: see DESIGN "Approvals").
    """

    paused: str = field(metadata=EVENT_ID)
    holder: str = field(metadata=TEXT)
    retake: bool = False

    EVENT_TYPE = RUN_RESUMED

    def __post_init__(self) -> None:
        if not isinstance(self.retake, bool):
            raise CodecError(f"{RUN_RESUMED}: retake must be true or false, got {self.retake!r}")


def _canonical(kind: Any, type_: str, data: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The event's JSON object, checked against the schema, and its agentjournal extension."""
    try:
        from_json(kind, data.decode("utf-8"))
    except Exception as error:  # json_format.ParseError, UnicodeDecodeError
        raise CodecError(f"{type_} does not match the canonical schema: {error}") from None
    body = json_body(data, type_)
    extensions = body.get("extensions")
    extension = extensions.get(_EXTENSION) if isinstance(extensions, dict) else None
    if not isinstance(extension, dict):
        raise CodecError(f"{type_} has no extensions.{_EXTENSION} object")
    return body, extension


def _text(body: dict[str, Any], key: str, type_: str) -> str:
    value = body.get(key)
    if not isinstance(value, str) or not value:
        raise CodecError(f"{type_}: {key} must be a non-empty string, got {_short(value)}")
    return value


def _time(body: dict[str, Any], type_: str) -> datetime:
    value = body.get("timestamp")
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        raise CodecError(f"{type_}: timestamp is no RFC 3339 time: {_short(value)}") from None


def _compact(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _parsed(value: Any, key: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value) if isinstance(value, str) else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise CodecError(f"{INTERRUPT_ISSUED}: extensions.{_EXTENSION}.{key} is no JSON object")
    return parsed
