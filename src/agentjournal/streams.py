"""Stream names and the identifier rules of kurrent-agent-schema v2 (§2.4).

Every id that becomes part of a stream name is one *component* and must be:

* ASCII ``[A-Za-z0-9._-]`` only, 1 to 128 bytes;
* not start or end with ``-`` (a compound name joins components with a single
  ``-``, so a ``--`` never appears at a join);
* a GUID is written lowercase and dashless.

:func:`validate_id` enforces this and rewrites nothing but GUIDs: any other id
that breaks a rule is refused with :class:`~agentjournal.errors.InvalidInput`
naming the rule, because silently rewriting a user's id would file their
session under a name they never chose. The schema package's builders
(``agent_session_stream``, ``agent_subsession_stream``) only format strings;
this module validates the components before handing them over.

Agent names are free text, so they are turned into components by :func:`slug`,
and :func:`subagent_id` derives the id of a handoff's receiver from its name and
the handoff's call id. Readers should take a subsession's stream name from
``SubagentStarted.subsession_stream`` instead of parsing names.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
import uuid
from typing import Final

from kurrent_agent_schema import agent_session_stream, agent_subsession_stream
from kurrent_agent_schema.streams import eval_run_stream as _schema_eval_run_stream

from agentjournal.errors import InvalidInput

__all__ = [
    "EVAL_RUN_PREFIX",
    "KEYS_STREAM",
    "MAIN_BRANCH",
    "MAX_BRANCH_NAME",
    "MAX_ID_BYTES",
    "authority_stream",
    "branch_authority_stream",
    "branch_key",
    "branch_stream",
    "branch_subagent_id",
    "branches_stream",
    "continuation_id",
    "eval_run_stream",
    "feedback_run_id",
    "projection_stream",
    "ledger_stream",
    "session_of",
    "session_stream",
    "slug",
    "subagent_id",
    "subsession_stream",
    "validate_id",
]

MAX_ID_BYTES = 128
"""The longest id component a stream name may contain (schema v2 §2.4)."""

_VALID_ID = re.compile(r"[A-Za-z0-9._-]+")
_GUID = re.compile(
    r"(\{)?[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}(?(1)\})"
    r"|[0-9A-Fa-f]{32}"
)
_NOT_SLUG = re.compile(r"[^a-z0-9._]+")

_MAX_SLUG = 48
_SUBAGENT_PREFIX = "sub-"
_HASHED_SUFFIX_HEX = 24


def validate_id(value: str | uuid.UUID, what: str) -> str:
    """Return ``value`` as a valid stream-name component, or refuse it.

    GUIDs (a :class:`uuid.UUID`, the dashed ``8-4-4-4-12`` form in any case, with
    or without braces, or 32 hex digits) are normalised to 32 lowercase hex
    digits. Every other value is returned unchanged or refused.

    Args:
        value: The id to check.
        what: What the id is (``"session id"``, ``"agent id"``), for the message.

    Raises:
        InvalidInput: ``value`` is not a string, is empty, is longer than 128
            bytes, has a character outside ``[A-Za-z0-9._-]`` or starts or ends
            with ``-``.
    """
    if isinstance(value, uuid.UUID):
        return value.hex
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, got {type(value).__name__}")
    if _GUID.fullmatch(value) is not None:
        return uuid.UUID(value).hex
    if not value:
        raise InvalidInput(f"{what} must not be empty")
    if _VALID_ID.fullmatch(value) is None:
        bad = next(ch for ch in value if _VALID_ID.fullmatch(ch) is None)
        raise InvalidInput(
            f"{what} {value!r} contains {bad!r}: stream-name ids may use only ASCII "
            "letters, digits, '.', '_' and '-' (kurrent-agent-schema v2 §2.4)"
        )
    if len(value) > MAX_ID_BYTES:
        raise InvalidInput(
            f"{what} is {len(value)} bytes long: stream-name ids may have at most "
            f"{MAX_ID_BYTES} bytes (kurrent-agent-schema v2 §2.4)"
        )
    if value[0] == "-" or value[-1] == "-":
        raise InvalidInput(
            f"{what} {value!r} starts or ends with '-': '-' only separates the parts "
            "of a compound stream name (kurrent-agent-schema v2 §2.4)"
        )
    return value


def session_stream(session_id: str | uuid.UUID) -> str:
    """Return the session's stream name, ``AgentSession-{session_id}``.

    Raises:
        InvalidInput: ``session_id`` breaks an id rule (see :func:`validate_id`).
    """
    name: str = agent_session_stream(validate_id(session_id, "session id"))
    return name


def ledger_stream(session_id: str) -> str:
    """The checkpoint stream of a session tree, ``AgentLedger-{session_id}``."""
    return f"AgentLedger-{session_id}"


def eval_run_stream(run_id: str) -> str:
    """The stream of one eval run or experiment, ``EvalRun-{run_id}``.

    Raises:
        InvalidInput: ``run_id`` breaks an id rule (see :func:`validate_id`).
    """
    name: str = _schema_eval_run_stream(validate_id(run_id, "eval run id"))
    return name


EVAL_RUN_PREFIX: Final = eval_run_stream("x")[:-1]
"""``EvalRun-``: what every eval run's stream name starts with, before its run id."""


def feedback_run_id(session_id: str) -> str:
    """The eval run that holds people's ratings of a session, ``feedback-{session_id}``."""
    return f"feedback-{validate_id(session_id, 'session id')}"


KEYS_STREAM = "AgentKeys"
"""The journal's key rotations (``agentjournal.KeyRotated``), one stream per store."""


def authority_stream(session_id: str) -> str:
    """The authority log of a session tree: policies in force and every grant, in order."""
    return f"AgentAuthority-{validate_id(session_id, 'session id')}"


def session_of(stream: str, *, logs: bool = False) -> str | None:
    """The session a stream is named for: ``AgentSession-{id}`` (with ``logs`` also
    ``AgentAuthority-{id}``, ``AgentLedger-{id}``, the branch registry
    ``AgentBranches-{id}`` and a branch's authority log ``AgentAuthority-{id}@{key}``)
    gives ``id``; anything else, or a name whose id breaks an id rule, gives None.

    The one place a session id is read back out of a stream name; a subsession's
    session (and a branch line's) must be learnt from the event that opened it instead.
    """
    makers = (
        (session_stream, authority_stream, ledger_stream, branches_stream)
        if logs
        else (session_stream,)
    )
    for make in makers:
        prefix = make("x")[:-1]
        if stream.startswith(prefix):
            session_id = stream[len(prefix) :]
            if make is authority_stream and _LINE_JOIN in session_id:
                session_id = session_id.split(_LINE_JOIN, 1)[0]  # a branch's own log
            try:
                named = make(validate_id(session_id, "session id"))
            except InvalidInput:
                return None
            own_log = make is authority_stream and stream.startswith(named + _LINE_JOIN)
            return session_id if stream == named or own_log else None
    return None


def projection_stream(name: str) -> str:
    """The saved state of a projection (a reader of the global log), ``AgentProjection-{name}``.

    Raises:
        InvalidInput: ``name`` breaks an id rule (see :func:`validate_id`).
    """
    return f"AgentProjection-{validate_id(name, 'projection name')}"


def subsession_stream(session_id: str | uuid.UUID, agent_id: str | uuid.UUID) -> str:
    """Return a subagent's stream name, ``AgentSubsession-{session_id}-{agent_id}``.

    Raises:
        InvalidInput: either id breaks an id rule (see :func:`validate_id`).
    """
    name: str = agent_subsession_stream(
        validate_id(session_id, "session id"), validate_id(agent_id, "agent id")
    )
    return name


def slug(name: str) -> str:
    """Turn an agent name into a stream-name component.

    Accents are dropped, letters lowercased, every run of characters outside
    ``[a-z0-9._]`` becomes one ``-``, leading and trailing ``-`` are removed and
    the result is cut to 48 characters. A name with nothing left becomes
    ``"agent"``. Different names can share a slug: make ids unique with
    something else (:func:`subagent_id` adds the call id).
    """
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    text = _NOT_SLUG.sub("-", ascii_name.lower()).strip("-")
    return text[:_MAX_SLUG].rstrip("-") or "agent"


def subagent_id(target_agent_name: str, call_id: str) -> str:
    """Return the id of a handoff's receiver: ``sub-{slug(target)}-{call id}``.

    The handoff's call id is used as it is when it is a valid component that
    fits; otherwise (odd characters, too long, empty) it is replaced by 24 hex
    digits of its SHA-256, so the result is always a valid id, deterministic,
    and distinct for distinct call ids.
    """
    prefix = f"{_SUBAGENT_PREFIX}{slug(target_agent_name)}-"
    budget = MAX_ID_BYTES - len(prefix)
    if (
        call_id
        and len(call_id) <= budget
        and _VALID_ID.fullmatch(call_id) is not None
        and call_id[0] != "-"
        and call_id[-1] != "-"
    ):
        return prefix + call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()
    return prefix + digest[:_HASHED_SUFFIX_HEX]


# -- branches -----------------------------------------------------------------------------

MAIN_BRANCH = "main"
"""The name of a session's main line (its ``AgentSession-{id}`` stream); no branch may take it."""

MAX_BRANCH_NAME = 1000
"""The longest branch name, in characters."""

_LITERAL_KEY = re.compile(r"[a-z0-9_][a-z0-9_.-]{0,47}")
_KEY_SLUG = 24
_KEY_HEX = 20
_LINE_JOIN = "@"  # never in a valid id, so "{id}@{key}" splits one way only


def branch_key(name: str) -> str:
    """The stream-name key of a branch called ``name``.

    A name matching ``[a-z0-9_][a-z0-9_.-]{0,47}`` (the SDK's generated names do) is its
    own key; any other becomes ``{slug[:24] or "branch"}~{20 hex of its SHA-256}``. A
    literal key never holds ``~``, so the two forms never meet; keys are lowercase, so
    the streams of two branches never differ only in case (KurrentDB compares names of
    one transaction case-insensitively).

    Raises:
        InvalidInput: ``name`` is not a string, is blank, is longer than 1,000
            characters, or is ``"main"`` (the main line's name).
    """
    if not isinstance(name, str):
        raise InvalidInput(f"branch name must be a string, got {type(name).__name__}")
    if not name.strip():
        raise InvalidInput("branch name must not be blank")
    if len(name) > MAX_BRANCH_NAME:
        raise InvalidInput(
            f"branch name is {len(name)} characters long: at most {MAX_BRANCH_NAME} are allowed"
        )
    if name == MAIN_BRANCH:
        raise InvalidInput(f"{MAIN_BRANCH!r} is the main line's name: a branch cannot take it")
    if _LITERAL_KEY.fullmatch(name) is not None:
        return name
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    text = _NOT_SLUG.sub("-", ascii_name.lower()).strip("-")[:_KEY_SLUG].rstrip("-")
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{text or 'branch'}~{digest[:_KEY_HEX]}"


def branch_stream(session_id: str, name: str) -> str:
    """A branch's top stream, ``AgentBranch-{session_id}@{branch_key(name)}``.

    Readers take a branch's stream from its events (``BranchForked.branch_stream``),
    never from its name.

    Raises:
        InvalidInput: the session id breaks an id rule, or the name is refused
            (:func:`branch_key`).
    """
    return f"AgentBranch-{validate_id(session_id, 'session id')}{_LINE_JOIN}{branch_key(name)}"


def branch_authority_stream(session_id: str, name: str) -> str:
    """A branch's own authority log, ``AgentAuthority-{session_id}@{branch_key(name)}``.

    Raises:
        InvalidInput: as :func:`branch_stream`.
    """
    return f"{authority_stream(session_id)}{_LINE_JOIN}{branch_key(name)}"


def branches_stream(session_id: str) -> str:
    """The session's branch registry, ``AgentBranches-{session_id}`` (one per session).

    Raises:
        InvalidInput: the session id breaks an id rule.
    """
    return f"AgentBranches-{validate_id(session_id, 'session id')}"


def _line_hashed_id(target_agent_name: str, *parts: str) -> str:
    # A JSON array, not a joined string: no call id can make one list read as another.
    text = json.dumps(list(parts), ensure_ascii=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode("ascii", "surrogatepass")).hexdigest()
    return f"{_SUBAGENT_PREFIX}{slug(target_agent_name)}-{digest[:_HASHED_SUFFIX_HEX]}"


def branch_subagent_id(target_agent_name: str, line_stream: str, call_id: str) -> str:
    """The id of a handoff's receiver on a branch: ``sub-{slug(target)}-{24 hex}``.

    The hex is SHA-256 of the JSON array ``[line_stream, call_id]``: two lines share message indexes
    and models reuse call ids, so the main line's ``{call id}`` (or ``.{index}``) suffix
    would name the same stream on two lines. Always a valid id.
    """
    return _line_hashed_id(target_agent_name, line_stream, call_id)


def continuation_id(target_agent_name: str, line_stream: str, original: str) -> str:
    """The id of a subagent's continuation on a branch forked while it was open.

    The hex is SHA-256 of the JSON array ``[line_stream, "continues", original]``: a
    three-element array, so never the hash of a :func:`branch_subagent_id`.
    """
    return _line_hashed_id(target_agent_name, line_stream, "continues", original)
