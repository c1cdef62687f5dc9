"""The one error tree of agentjournal.

Every error the library raises on purpose derives from :class:`JournalError`;
driver errors (``sqlite3``, ``grpc``, ``kurrentdbclient``) are translated at
the store boundary and never leak through the public API.

::

    JournalError
    ├── InvalidInput (also ValueError)   bad arguments; nothing was written
    │   ├── BranchDeleted                the branch this session is on was deleted
    │   ├── AlreadyResolved              an approval request was answered already
    │   └── ApproverNotAllowed           an answer is not signed by an approver of its tool
    ├── StoreError                       the event store failed
    │   ├── ConcurrencyError             expected revision did not match
    │   ├── RetriesExhausted             other writers kept winning, every retry
    │   ├── StreamNotFound               the stream does not exist
    │   ├── StreamDeleted                the stream was deleted or tombstoned
    │   ├── StoreUnavailable             the store cannot be reached or is busy
    │   └── UndecodableEvent             the store holds an event it cannot hand out
    │       └── UnreadableMetadata (also ValueError)   an event's metadata is not a JSON object
    ├── CodecError                       an item or event cannot be translated
    ├── GuardrailBlocked                 a guardrail decision stopped the run
    └── AuthorityDenied                  an action was outside the agent's authority
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlreadyResolved",
    "ApproverNotAllowed",
    "AuthorityDenied",
    "BranchDeleted",
    "CodecError",
    "ConcurrencyError",
    "GuardrailBlocked",
    "InvalidInput",
    "JournalError",
    "RetriesExhausted",
    "StoreError",
    "StoreUnavailable",
    "StreamDeleted",
    "StreamNotFound",
    "UndecodableEvent",
    "UnreadableMetadata",
]


class JournalError(Exception):
    """Root of every error agentjournal raises on purpose."""


class InvalidInput(JournalError, ValueError):
    """Raised when an argument is malformed; nothing has been written."""


class BranchDeleted(InvalidInput):
    """Raised when the branch a session is on was deleted (by any session object, in any
    process): nothing is written to it again, so a stale object cannot bring it back.
    Switch to another branch (``switch_to_branch``). Nothing has been written.

    Attributes:
        session_id: The session.
        branch: The deleted branch's name.
        reason: ``deleted`` (``delete_branch``) or ``cleared`` (``clear_session``).
    """

    def __init__(self, session_id: str, branch: str, reason: str = "deleted") -> None:
        super().__init__(
            f"branch {branch!r} of session {session_id} was {reason}: switch to another "
            "branch (switch_to_branch)"
        )
        self.session_id = session_id
        self.branch = branch
        self.reason = reason


class AlreadyResolved(InvalidInput):
    """Raised when an approval request was answered already (by anyone, in any process):
    each request has exactly one answer on the record. Nothing has been written.

    Attributes:
        request_id: The request (the tool call's id).
        outcome: The answer on record: ``approved`` or ``rejected``.
        by: Who gave it.
    """

    def __init__(self, request_id: str, outcome: str, by: str) -> None:
        self.request_id = request_id
        self.outcome = outcome
        self.by = by
        super().__init__(f"approval request {request_id!r} was already {outcome} by {by!r}")


class AlreadyResumed(InvalidInput):
    """Raised when a paused run was taken up to be resumed already (by any process): at
    most one process resumes a paused run. Nothing has been written.

    Attributes:
        stream: The line's top stream, where the run was held.
        holder: Who took it up last (``host:pid``; None: its calls ran without a
            recorded taker).
        at: When (the store's commit time; None with ``holder``).
        ran: Whether every call it waited for has run since (the resume finished its
            calls); when False, the taker may have stopped before or during them, and a
            person may take it up again with ``retake=True``.
    """

    def __init__(self, stream: str, holder: str | None, at: str | None, *, ran: bool) -> None:
        self.stream = stream
        self.holder = holder
        self.at = at
        self.ran = ran
        who = f" by {holder} at {at}" if holder is not None else ""
        if ran:
            detail = "its calls have run"
        else:
            detail = (
                "its calls have not all run: if that process stopped, a person who has "
                "checked what the tools did may take it up again (retake=True)"
            )
        super().__init__(f"the paused run on {stream} was resumed already{who}; {detail}")


class ExperimentTurnTaken(InvalidInput):
    """Raised when another run of the same experiment holds the turn this one would run
    (``agentjournal.ExperimentTurnTaken`` with no ``agentjournal.ExperimentTurn`` after
    it): of two runs of one experiment, one runs each turn. This run's take of it is not
    written; turns it ran before stay.

    Attributes:
        session: The session whose branch holds the turn.
        turn: The turn's number.
        holder: Who took it (``host:pid``; when a run that took the turn from this one
            has finished it already, ``"a run that finished it"``).
        running: True: that run's process still runs (on this host); None: this host cannot
            tell (another host, boot or process namespace; ``retake=True`` when it has
            stopped); False: it took the turn from this run while this run was running it
            (with ``retake``), and this run's mark of the turn was refused.
    """

    def __init__(self, session: str, turn: int, holder: str, *, running: bool | None) -> None:
        self.session = session
        self.turn = turn
        self.holder = holder
        self.running = running
        if running:
            detail = (
                "whose process still runs: wait for it to finish (if that run has stopped "
                "and its process lives on, run the experiment again with --retake)"
            )
        elif running is None:
            detail = (
                "where this host cannot tell whether it still runs (another host or process "
                "namespace): if that run has stopped, run the experiment again with --retake"
            )
        else:
            detail = (
                "while this run ran it (retake): this run's mark of the turn was refused, "
                "and what it wrote in the turn after being passed over stays on the branch"
            )
        super().__init__(
            f"turn {turn} of session {session}'s experiment branch was taken by {holder}, {detail}"
        )


class ApproverNotAllowed(InvalidInput):
    """Raised when an answer to an approval is not signed by one of the approvers the policy
    names for its tool (no key, a key it does not name, or a recorded answer whose signature
    or arguments digest does not verify). Nothing has been written, and a run is not resumed
    on such an answer.

    Attributes:
        request_id: The request (the tool call's id).
        tool_name: The tool.
        reason: What is wrong.
    """

    def __init__(self, request_id: str, tool_name: str, reason: str) -> None:
        self.request_id = request_id
        self.tool_name = tool_name
        self.reason = reason
        super().__init__(f"approval request {request_id!r} ({tool_name}): {reason}")


class StoreError(JournalError):
    """Raised when the event store fails to carry out a request."""


class ConcurrencyError(StoreError):
    """Raised when a stream is not at the revision the writer expected.

    Attributes:
        stream: The stream whose state did not match.
        expected: What the writer expected: an exact revision or a state name
            (``"any"``, ``"no_stream"``, ``"exists"``).
        actual: The stream's current revision, ``None`` when it does not exist.
    """

    def __init__(self, stream: str, expected: int | str, actual: int | None) -> None:
        self.stream = stream
        self.expected = expected
        self.actual = actual
        shown = "no stream" if actual is None else f"revision {actual}"
        super().__init__(
            f"stream {stream!r} is at {shown}, the writer expected {expected}: "
            "read the stream again and retry from its current revision"
        )


class RetriesExhausted(StoreError):
    """Raised when a session's write lost to other writers on every retry; nothing was written.

    Attributes:
        stream: The stream the last attempt conflicted on.
        attempts: How many attempts were made.
    """

    def __init__(self, stream: str, attempts: int) -> None:
        self.stream = stream
        self.attempts = attempts
        super().__init__(
            f"{attempts} attempts to write to {stream!r} each lost to another writer; "
            "nothing was written: retry later, or write less concurrently to one session"
        )


class StreamNotFound(StoreError):
    """Raised when reading a stream that does not exist.

    Attributes:
        stream: The missing stream.
    """

    def __init__(self, stream: str) -> None:
        self.stream = stream
        super().__init__(f"stream {stream!r} does not exist")


class StreamDeleted(StoreError):
    """Raised when writing to or reading from a deleted or tombstoned stream.

    Attributes:
        stream: The deleted stream.
    """

    def __init__(self, stream: str) -> None:
        self.stream = stream
        super().__init__(f"stream {stream!r} has been deleted")


class StoreUnavailable(StoreError):
    """Raised when the store cannot be reached, times out or stays busy."""


class UndecodableEvent(StoreError):
    """Raised when the store holds an event it cannot hand out: e.g. a SQLite text column
    that is not UTF-8 (written by something other than agentjournal). Reading it again
    fails the same way; it is damage, not an outage.

    Attributes:
        stream: The stream read.
    """

    def __init__(self, stream: str, message: str) -> None:
        self.stream = stream
        super().__init__(message)


class UnreadableMetadata(UndecodableEvent, ValueError):
    """Raised when a stored event's metadata, parsed when first asked for, is not a UTF-8
    JSON object (written by something other than agentjournal). Its message starts with
    ``stream@revision``. Also a ``ValueError``, as a parse error is.
    """

    def __init__(self, stream: str, revision: int) -> None:
        super().__init__(stream, f"{stream}@{revision}: the metadata is not a UTF-8 JSON object")
        self.revision = revision


class CodecError(JournalError):
    """Raised when an SDK item or a stored event cannot be translated."""


class GuardrailBlocked(JournalError):
    """Raised when a guardrail decision stops the run (the decision is on the stream).

    It ends ``Runner.run`` (and a streamed run's ``stream_events``) when an
    agent's input or final response is blocked, when a tool call or handoff is
    blocked and no ``session.guard(agent)`` wrapper can refuse it in the run's
    place, when a MODIFY cannot be enforced, and when a decision could not be
    recorded (then nothing was acted on).

    Attributes:
        action_type: ``AGENT_INPUT``, ``TOOL_CALL``, ``AGENT_HANDOFF`` or ``AGENT_RESPONSE``.
        action_id: The id sent to the guardrail.
        reason_code: The guardrail's reason, or the runner's (``GUARDRAIL_UNAVAILABLE``,
            ``GUARDRAIL_UNENFORCEABLE``, ``DECISION_NOT_RECORDED``, ...).
        reason_message: Human-readable reason.
        subject: What was acted on: the tool, the handoff target, the agent.
        verdict: The full :class:`~agentjournal.guardrails.Verdict`.
    """

    def __init__(
        self,
        *,
        action_type: str,
        action_id: str,
        reason_code: str | None,
        reason_message: str | None,
        subject: str,
        verdict: Any,
    ) -> None:
        self.action_type = action_type
        self.action_id = action_id
        self.reason_code = reason_code
        self.reason_message = reason_message
        self.subject = subject
        self.verdict = verdict
        super().__init__(
            f"guardrail blocked {action_type} of {subject!r} ({reason_code or 'no reason code'}"
            f"{': ' + reason_message if reason_message else ''}); the decision is recorded "
            f"as action {action_id}"
        )


class AuthorityDenied(JournalError):
    """Raised when an action outside the running agent's authority stops the run.

    The refusal is on the stream (``agentjournal.AuthorityRefused``) before this is raised.

    Attributes:
        gate: The gate that refused (``invocation`` for a call the model made).
        agent: The agent that would have acted.
        subject: The tool, or the handoff's receiver.
        reason: Why.
        scope: The scope that was needed, if a scope was the problem.
        ceiling: The ceiling that refused, if one did.
    """

    def __init__(
        self,
        *,
        gate: str,
        agent: str,
        subject: str,
        reason: str,
        scope: str | None = None,
        ceiling: str | None = None,
    ) -> None:
        self.gate = gate
        self.agent = agent
        self.subject = subject
        self.reason = reason
        self.scope = scope
        self.ceiling = ceiling
        super().__init__(
            f"{agent!r} may not use {subject!r}: {reason} (refused at the {gate} gate; "
            "the refusal is recorded on the stream)"
        )
