"""The invocation contract of seed 000: one JSON object in on stdin, one JSON object out on stdout.

The JSON Schemas of both (``schemas/invocation-input.schema.json`` and
``schemas/invocation-output.schema.json``, shipped in this package) are made from
these models; a test checks the shipped files match them.

Input (every field mandatory, nothing else accepted)::

    {"thread_id": "thread_abc123", "run_id": "run_abc123",
     "input_message": {"role": "user", "content": "What is the status of PROJ-123?"},
     "state": {...}, "config": {...},
     "trace": {"trace_id": "<32 hex>", "parent_span_id": "<16 hex>"}}

``trace`` may instead carry ``traceparent`` (and ``tracestate``) as received in
HTTP headers. Output: ``thread_id``, ``run_id``, ``status`` (``completed``,
``interrupted``, ``blocked``, ``failed``), ``response`` (null unless completed),
``agent_id`` (the final agent), ``state``, ``handoffs``, ``approvals`` (the tool calls
that wait for a person: empty unless interrupted), ``trace`` and ``error`` (null when
completed or interrupted).

Approvals: a run that stops on a tool declared ``needs_approval`` answers
``status: "interrupted"`` with each waiting call in ``approvals`` (``request_id``,
``tool``, ``arguments``, ``agent``); the run is held on the thread
(``session.hold``). A later invocation on the same thread gives the answers in the
optional input field ``approvals`` (``[{"request_id", "approve", "by", "reason"}]``,
one for every waiting call) and ``input_message: null``: each answer is recorded and
the held run resumes (``session.resume``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from importlib import resources
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from agentjournal.errors import InvalidInput
from agentjournal.store.contract import MAX_EVENT_BYTES
from agentjournal.streams import validate_id

ERROR_CODES: Final = {
    "INVALID_INPUT": 1,
    "INVALID_MANIFEST": 1,
    "INVALID_SETUP": 1,
    "STORE_UNAVAILABLE": 1,
    "MODEL_ERROR": 3,
    "TOOL_ERROR": 3,
    "MAX_TURNS": 3,
    "JOURNAL_ERROR": 3,
    "STATE_NOT_RECORDED": 3,
    "RUN_ERROR": 3,
}
"""The runner's own ``error.code`` values and the exit code of each (a blocked run, exit
2, carries the guardrail's reason code or ``AUTHORITY_DENIED``)."""

MAX_STDIN_BYTES = 16 * 1024 * 1024
"""The largest stdin accepted (16 MiB); more is ``INVALID_INPUT``, read no further."""

_EVENT_ROOM = MAX_EVENT_BYTES - 64 * 1024  # what an event's data may take beside its metadata
MAX_CONTENT_UNITS = _EVENT_ROOM // 3
"""The largest ``input_message.content``, measured as its JSON string with every non-ASCII
character escaped (``json.dumps``): the content becomes one ``UserMessageReceived`` event,
which holds it twice (canonical and SDK item) and at worst a third time; so that it always
fits the largest event a store takes (``MAX_EVENT_BYTES``), about 5.5 MB of ASCII."""

MAX_STATE_BYTES = _EVENT_ROOM
"""The largest ``state`` (UTF-8 JSON): it is stored as one ``ThreadState`` event."""

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_SPAN_ID = re.compile(r"[0-9a-f]{16}")
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
# W3C Trace Context, tracestate: list-member = key "=" value, at most 32, comma-separated
# with optional spaces or tabs; empty members are allowed; keys are unique.
_TRACESTATE_KEY = re.compile(
    r"[a-z][_0-9a-z*/-]{0,255}|[a-z0-9][_0-9a-z*/-]{0,240}@[a-z][_0-9a-z*/-]{0,13}"
)
_TRACESTATE_VALUE = re.compile(r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]")
_TRACESTATE_MEMBERS = 32


def _check_tracestate(header: str) -> None:
    """Refuse a ``tracestate`` that breaks the W3C grammar (it is sent on in HTTP headers)."""
    keys: list[str] = []
    for member in header.split(","):
        member = member.strip(" \t")
        if not member:
            continue
        key, equals, value = member.partition("=")
        if not equals or _TRACESTATE_KEY.fullmatch(key) is None:
            raise ValueError(
                "tracestate: expected comma-separated key=value members with W3C keys "
                "(lowercase letters, digits, _-*/ and one optional @)"
            )
        if _TRACESTATE_VALUE.fullmatch(value) is None:
            raise ValueError(
                f"tracestate: the value of {key!r} must be 1-256 printable ASCII characters "
                "without ',' or '=' (W3C)"
            )
        keys.append(key)
    if len(keys) > _TRACESTATE_MEMBERS:
        raise ValueError(f"tracestate: at most {_TRACESTATE_MEMBERS} members (W3C)")
    if len(set(keys)) != len(keys):
        raise ValueError("tracestate: a key appears twice (W3C)")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class InputMessage(_Strict):
    """The latest user message that triggered this invocation."""

    content: str = Field(min_length=1)
    role: Literal["user"]

    @field_validator("content")
    @classmethod
    def _fits_one_event(cls, value: str) -> str:
        # Checked here, not by the store: a message too large for its event would fail the
        # run's first write, after the store was created (nothing else would be written).
        if len(value) * 12 > MAX_CONTENT_UNITS and len(json.dumps(value)) > MAX_CONTENT_UNITS:
            raise ValueError(
                f"too large: at most {MAX_CONTENT_UNITS} characters as a JSON string "
                "(it must fit one event of the journal)"
            )
        return value


class TraceIn(_Strict):
    """W3C trace context: ``trace_id`` and ``parent_span_id``, or ``traceparent``.

    ``tracestate`` may accompany either form.
    """

    trace_id: str | None = None
    parent_span_id: str | None = None
    traceparent: str | None = None
    tracestate: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> TraceIn:
        ids = self.trace_id is not None or self.parent_span_id is not None
        if ids == (self.traceparent is not None):
            raise ValueError(
                "expected trace_id and parent_span_id, or traceparent (exactly one of the forms)"
            )
        if ids:
            if self.trace_id is None or _TRACE_ID.fullmatch(self.trace_id) is None:
                raise ValueError("trace_id: expected 32 lowercase hex digits")
            if int(self.trace_id, 16) == 0:
                raise ValueError("trace_id: must not be all zeros (W3C)")
            if self.parent_span_id is None or _SPAN_ID.fullmatch(self.parent_span_id) is None:
                raise ValueError("parent_span_id: expected 16 lowercase hex digits")
            if int(self.parent_span_id, 16) == 0:
                raise ValueError("parent_span_id: must not be all zeros (W3C)")
        else:
            match = _TRACEPARENT.fullmatch(self.traceparent or "")
            if match is None or not int(match[1], 16) or not int(match[2], 16):
                raise ValueError("traceparent: expected 00-<32 hex>-<16 hex>-<2 hex> (W3C)")
        if self.tracestate is not None:
            _check_tracestate(self.tracestate)
        return self

    def header(self) -> tuple[str, str | None]:
        """``traceparent`` and ``tracestate`` for this context."""
        if self.traceparent is not None:
            return self.traceparent, self.tracestate
        return f"00-{self.trace_id}-{self.parent_span_id}-01", self.tracestate

    def ids(self) -> tuple[str, str]:
        """The trace id and the parent span id."""
        parts = self.header()[0].split("-")
        return parts[1], parts[2]


class ApprovalAnswer(_Strict):
    """A person's answer to a tool call that waits for approval (``approvals`` of the
    input): which call, approve or not, who decides, why."""

    request_id: str = Field(min_length=1)
    approve: bool
    by: str = Field(min_length=1)
    reason: str = ""

    @field_validator("by")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("expected the name of who decides")
        return value


class InvocationInput(_Strict):
    """The one JSON object an invocation reads from stdin.

    ``approvals`` is optional: with answers in it (one for every call the thread's held
    run waits for, each request once), ``input_message`` must be null and the held run
    resumes; ``input_message`` null without answers resumes the held run with the answers
    already on the record (given by ``agentjournal approve``, the viewer or code); else
    ``input_message`` is the user's message.

    At most 16 MiB, strict JSON (no key twice in an object, no NaN or Infinity).
    ``input_message.content`` and ``state`` must each fit one event of the journal
    (content: at most 5,567,226 characters as a JSON string with non-ASCII escaped;
    state: at most 16,701,680 bytes of JSON). ``trace.traceparent`` and
    ``trace.tracestate`` follow W3C Trace Context (``tracestate``: at most 32
    comma-separated ``key=value`` members, keys unique).
    """

    thread_id: str
    run_id: str = Field(min_length=1, max_length=256)
    input_message: InputMessage | None
    state: dict[str, Any]
    config: dict[str, Any]
    trace: TraceIn
    approvals: list[ApprovalAnswer] = Field(default_factory=list)

    @model_validator(mode="after")
    def _message_or_answers(self) -> InvocationInput:
        if self.approvals and self.input_message is not None:
            raise ValueError(
                "input_message must be null when approvals are given: the held run resumes"
            )
        asked = Counter(answer.request_id for answer in self.approvals)
        twice = sorted(r for r, count in asked.items() if count > 1)
        if twice:
            raise ValueError(f"approvals: request {twice[0]!r} is answered twice")
        return self

    @field_validator("state")
    @classmethod
    def _state_fits_one_event(cls, value: dict[str, Any]) -> dict[str, Any]:
        size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
        if size > MAX_STATE_BYTES:
            raise ValueError(f"too large: {size} bytes as JSON, at most {MAX_STATE_BYTES}")
        return value

    @field_validator("thread_id")
    @classmethod
    def _thread(cls, value: str) -> str:
        # It names the session's streams; kept as given (the journal normalises a GUID).
        try:
            validate_id(value, "thread_id")
        except InvalidInput as error:
            raise ValueError(str(error)) from None
        return value


class HandoffRecord(_Strict):
    """One ``system::handoff`` that happened: from, to, input, the call's id."""

    from_agent_id: str = Field(alias="from")
    to_agent_id: str = Field(alias="to")
    input: str
    call_id: str

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


class TraceOut(_Strict):
    """The ids of the invocation's root span and its parent (from the input)."""

    trace_id: str
    span_id: str
    parent_span_id: str


class ErrorInfo(_Strict):
    """Why an invocation did not complete: a machine-readable code and one line."""

    code: str
    message: str


class ApprovalAsked(_Strict):
    """A tool call that waits for a person's approval (``approvals`` of the output)."""

    request_id: str
    tool: str
    arguments: str
    agent: str


class InvocationOutput(_Strict):
    """The one JSON object an invocation writes to stdout (``agentjournal run``).

    ``status`` and the process's exit code: ``completed`` (exit 0; ``response`` is the
    final answer, ``error`` null); ``interrupted`` (exit 4: the run stopped on tools
    declared ``needs_approval``, and is held on the thread; ``approvals`` lists each
    waiting call, ``response`` and ``error`` are null; answer them with ``approvals`` in a
    later invocation's input); ``blocked`` (exit 2: a guardrail blocked the input, a
    handoff or the final response, or the authority policy refused; ``error.code`` is the
    guardrail's reason code, or ``AUTHORITY_DENIED``); ``failed`` with exit 3 when the run
    started (``MODEL_ERROR``: the model or the SDK; ``TOOL_ERROR``: a tool failure that
    ended the run — a tool body that raises is an error output the model sees, not
    this; ``MAX_TURNS``; ``JOURNAL_ERROR``: the store failed during the run;
    ``STATE_NOT_RECORDED``; ``RUN_ERROR``: anything else), or with exit 1 when nothing ran
    and nothing was written (``INVALID_INPUT``: stdin, or ``approvals`` that do not answer
    exactly the calls the thread's held run waits for; ``INVALID_MANIFEST``;
    ``INVALID_SETUP``: the command line, ``--tools``, ``--model-script``, ``--uri`` or no
    model; ``STORE_UNAVAILABLE``: the store could not be opened or read); then
    ``agent_id`` and ``trace`` are null, and so are ``thread_id`` and ``run_id`` when the
    input itself was not read. No ``error.message`` holds a value of the input's
    ``config``.
    """

    thread_id: str | None
    run_id: str | None
    status: Literal["completed", "interrupted", "blocked", "failed"]
    response: str | None
    agent_id: str | None
    state: dict[str, Any]
    handoffs: list[HandoffRecord]
    approvals: list[ApprovalAsked]
    trace: TraceOut | None
    error: ErrorInfo | None

    def to_json(self) -> str:
        """The object as one line of JSON."""
        return json.dumps(self.model_dump(mode="json", by_alias=True), ensure_ascii=False)


def parse_input(raw: bytes) -> InvocationInput:
    """Check stdin's bytes: exactly one JSON object matching :class:`InvocationInput`.

    Raises:
        InvalidInput: Over :data:`MAX_STDIN_BYTES`, empty, not UTF-8, not JSON, trailing
            data, not an object, or a field breaks the contract (the message names it;
            ``content`` and ``state`` must each fit one event).
    """
    if len(raw) > MAX_STDIN_BYTES:
        raise InvalidInput(f"stdin is larger than {MAX_STDIN_BYTES} bytes (16 MiB)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("stdin is not UTF-8") from None
    if not text.strip():
        raise InvalidInput("stdin is empty: expected one JSON object")
    try:
        # One value (trailing data is a JSONDecodeError, "Extra data"); a key twice in an
        # object is refused, not "last one wins"; NaN and Infinity are not JSON.
        document = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        raise InvalidInput(
            f"stdin is not one JSON object: {error.msg} at line {error.lineno}, "
            f"column {error.colno}"
        ) from None
    except RecursionError:
        raise InvalidInput("stdin is nested too deeply") from None
    except _Refused as refused:
        raise InvalidInput(f"stdin is not one JSON object: {refused}") from None
    if not isinstance(document, dict):
        raise InvalidInput(f"stdin must hold a JSON object, not {type(document).__name__}")
    try:
        return InvocationInput.model_validate(document)
    except ValidationError as error:
        problem = error.errors()[0]
        field = ".".join(str(part) for part in problem["loc"]) or "(object)"
        message = str(problem["msg"]).removeprefix("Value error, ")
        if problem["type"] == "missing":
            message = "missing (every field of the input is mandatory)"
        elif problem["type"] == "extra_forbidden":
            message = "not a field of the invocation input"
        raise InvalidInput(f"stdin: field {field}: {message}") from None


class _Refused(ValueError):
    """A JSON document the contract refuses though ``json`` would take it."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _Refused(f"key {key!r} appears twice in one object")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise _Refused(f"{name} is not a JSON value")


def schema_files() -> dict[str, dict[str, Any]]:
    """The shipped JSON Schemas, by file name."""
    folder = resources.files("agentjournal.runner") / "schemas"
    return {
        name: json.loads((folder / name).read_text(encoding="utf-8"))
        for name in ("invocation-input.schema.json", "invocation-output.schema.json")
    }


def model_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schemas the models make, by the file name they are shipped as."""
    made = {
        "invocation-input.schema.json": InvocationInput.model_json_schema(),
        "invocation-output.schema.json": InvocationOutput.model_json_schema(
            by_alias=True, mode="serialization"
        ),
    }
    for name, schema in made.items():
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"agentjournal/runner/{name}"
    return made


if __name__ == "__main__":  # regenerate the shipped schemas: python -m agentjournal.runner.contract
    folder = resources.files("agentjournal.runner") / "schemas"
    for name, schema in model_schemas().items():
        path = folder / name
        with resources.as_file(path) as target:
            target.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")
