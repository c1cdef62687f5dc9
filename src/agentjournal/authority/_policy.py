"""The authority policy: what each agent may do, and what each tool needs (pure).

Declare it in Python::

    policy = Policy(
        agents={
            "triage": Authority.of("billing.*", "kb.*", spend=Cap(50_000)),
            "billing": Authority.of("billing.read", "billing.refund", spend=Cap(5_000)),
        },
        tools={"issue_credit": ToolRule("billing.refund", {"spend": "amount_cents"})},
    )

or in YAML (:meth:`Policy.load`)::

    agents:
      triage:
        scopes: [billing.*, kb.*]
        ceilings:
          spend: {kind: cap, limit: 50000}
          egress: {kind: ranked, order: [none, internal, any], level: internal}
    tools:
      issue_credit:
        scope: billing.refund
        ceilings: {spend: amount_cents}
        approval: {above: [spend]}       # beyond the cap: a person decides
      kb_export: {scope: kb.export, ceilings: {egress: destination}, approval: always}
    visibility: true

An agent's entry is what it holds when it starts a run, and what it requests
when it receives a handoff: it is then granted ``meet(sender's effective
authority, its entry)``. An agent without an entry holds nothing. A tool
names the scope a call needs and which argument each ceiling reads (a dotted
path into the call's JSON arguments). A tool without a rule is refused.

A tool's ``approval`` makes a call wait for a person instead of running or being
refused (:class:`ApprovalRule`): ``always`` (every call within the agent's
authority asks), or ``{above: [ceiling, ...]}`` (a call within the agent's
scopes whose arguments are beyond one of the named ceilings of its authority
asks, instead of being refused; beyond any other ceiling, or outside its scopes,
it is refused as without the rule). The call then runs only with exactly the
arguments a person approved (:meth:`Policy.check_call` with ``approved``).

``visibility: false`` switches the three visibility gates off (tools, MCP
tools, handoffs are all offered); the invocation gate is always on.

``approvers:`` names the people whose signed answer a tool call's approval needs::

    approvers:
      ann:
        public_key: 3q2+7w...=     # base64 of the raw 32-byte Ed25519 public key
        tools: [issue_refund]
        scopes: [billing.*]        # or every tool whose rule's scope these cover

A tool with named approvers (:meth:`Policy.approvers_for`) is approved or rejected only by
an answer one of them signed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentjournal._digests import value_digest
from agentjournal._yaml import read_yaml
from agentjournal.authority import (
    AllowList,
    Authority,
    Cap,
    Ceiling,
    DenyList,
    Ranked,
    ceiling_at_most,
    excess,
    validate_scope,
)
from agentjournal.errors import InvalidInput


class Gate:
    """Where a refusal happened (the ``gate`` field of ``AuthorityDenied``)."""

    TOOL_VISIBILITY: Final = "tool_visibility"
    MCP_VISIBILITY: Final = "mcp_visibility"
    HANDOFF_VISIBILITY: Final = "handoff_visibility"
    INVOCATION: Final = "invocation"


@dataclass(frozen=True, slots=True)
class ApprovalRule:
    """When a call of a tool waits for a person's approval (a tool rule's ``approval``).

    Attributes:
        always: Every call within the agent's authority asks.
        above: Ceiling names: a call beyond one of them (and within everything else)
            asks instead of being refused.
    """

    always: bool = False
    above: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.always == bool(self.above):
            raise InvalidInput("approval is 'always' or {above: [ceiling, ...]}, one of the two")
        if not all(isinstance(name, str) and name for name in self.above):
            raise InvalidInput(f"approval above must list ceiling names, got {list(self.above)!r}")
        object.__setattr__(self, "above", tuple(sorted(set(self.above))))  # one form, any order

    @classmethod
    def from_json(cls, body: Any) -> ApprovalRule:
        """Read ``always`` or ``{"above": [ceiling, ...]}``.

        Raises:
            InvalidInput: Anything else.
        """
        if body == "always":
            return cls(always=True)
        above = body.get("above") if isinstance(body, Mapping) and set(body) == {"above"} else None
        if not isinstance(above, list | tuple) or not above:
            raise InvalidInput(
                f"approval must be 'always' or {{above: [ceiling, ...]}}, got {body!r}"
            )
        return cls(above=tuple(above))

    def to_json(self) -> Any:
        """``"always"`` or ``{"above": [sorted ceiling names]}``."""
        return "always" if self.always else {"above": sorted(self.above)}


@dataclass(frozen=True, slots=True)
class ToolRule:
    """What calling a tool needs.

    Attributes:
        scope: The scope a call needs (exact, no wildcard).
        ceilings: Ceiling name -> the argument (dotted path) whose value it limits.
        approval: When a call waits for a person instead (None: never).
    """

    scope: str
    ceilings: Mapping[str, str] = field(default_factory=dict)
    approval: ApprovalRule | None = None

    def __post_init__(self) -> None:
        if validate_scope(self.scope).endswith(".*"):
            raise InvalidInput(f"a tool needs one exact scope, not the wildcard {self.scope!r}")
        for name, path in self.ceilings.items():
            if not isinstance(name, str) or not isinstance(path, str) or not path:
                raise InvalidInput(f"tool ceiling {name!r} must name an argument, got {path!r}")
        if self.approval is not None and not isinstance(self.approval, ApprovalRule):
            raise InvalidInput(f"a tool's approval must be an ApprovalRule, got {self.approval!r}")
        unknown = sorted(set(self.approval.above if self.approval else ()) - set(self.ceilings))
        if unknown:
            raise InvalidInput(
                f"approval above {unknown} names no ceiling of the tool "
                f"(its ceilings: {sorted(self.ceilings)})"
            )

    @classmethod
    def from_json(cls, name: str, body: Any) -> ToolRule:
        """Read tool ``name``'s rule from its YAML/JSON form (the module docs).

        Raises:
            InvalidInput: One line naming the tool and what is wrong.
        """
        if not isinstance(body, Mapping) or set(body) - {"scope", "ceilings", "approval"}:
            raise InvalidInput(
                f"tool {name!r} needs 'scope' and optional 'ceilings' and 'approval'"
            )
        ceilings = body.get("ceilings") or {}
        if not isinstance(ceilings, Mapping):
            raise InvalidInput(f"tool {name!r}: 'ceilings' must map ceiling -> argument")
        try:
            approval = ApprovalRule.from_json(body["approval"]) if "approval" in body else None
            return cls(body.get("scope"), dict(ceilings), approval)  # type: ignore[arg-type]
        except InvalidInput as error:
            raise InvalidInput(f"tool {name!r}: {error}") from None

    def to_json(self) -> dict[str, Any]:
        """The canonical form: scope, sorted ceilings and, when set, the approval (a rule
        without one has the form it had before approvals, so its policy's digest too)."""
        body: dict[str, Any] = {
            "scope": self.scope,
            "ceilings": dict(sorted(self.ceilings.items())),
        }
        if self.approval is not None:
            body["approval"] = self.approval.to_json()
        return body

    def approvable(self, ceiling: str | None) -> bool:
        """Whether a call beyond ``ceiling`` asks a person instead of being refused."""
        return ceiling is not None and self.approval is not None and ceiling in self.approval.above


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why an action is outside an agent's authority.

    Attributes:
        gate: Which gate refused (:class:`Gate`).
        reason: Human-readable reason.
        scope: The scope that was needed, if a scope was the problem.
        ceiling: The ceiling that refused, if one did.
        limit: That ceiling as JSON.
        value: The argument value the ceiling refused.
    """

    gate: str
    reason: str
    scope: str | None = None
    ceiling: str | None = None
    limit: Any = None
    value: Any = None


_MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class Approver:
    """A person whose signed answer approves or rejects calls of some tools.

    Attributes:
        name: Who (the policy's key for the entry).
        public_key: Base64 of the raw 32-byte Ed25519 public key.
        tools: Tools whose calls they answer.
        scopes: Scope patterns: they answer calls of every tool whose rule's scope these cover.
    """

    name: str
    public_key: str
    tools: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInput(f"an approver needs a name, got {self.name!r}")
        _public_key(self.name, self.public_key)
        if not all(isinstance(tool, str) and tool for tool in self.tools):
            raise InvalidInput(f"approver {self.name!r}: 'tools' must be a list of tool names")
        for scope in self.scopes:
            validate_scope(scope)
        if not self.tools and not self.scopes:
            raise InvalidInput(f"approver {self.name!r} names no 'tools' and no 'scopes'")

    @property
    def key(self) -> Ed25519PublicKey:
        """The public key."""
        return _public_key(self.name, self.public_key)

    @property
    def key_id(self) -> str:
        """``ed25519:`` + 16 hex digits, as the ledger names keys (``ledger.keys.key_id``)."""
        raw = base64.b64decode(self.public_key, validate=True)
        return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]

    @classmethod
    def from_json(cls, name: Any, body: Any) -> Approver:
        """One ``approvers:`` entry.

        Raises:
            InvalidInput: Unknown fields or wrong types.
        """
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"an approver's name must be text, got {name!r}")
        if not isinstance(body, Mapping) or set(body) - {"public_key", "tools", "scopes"}:
            raise InvalidInput(
                f"approver {name!r} needs 'public_key' and 'tools' and/or 'scopes', nothing else"
            )
        tools, scopes = body.get("tools") or [], body.get("scopes") or []
        if not isinstance(tools, list) or not isinstance(scopes, list):
            raise InvalidInput(f"approver {name!r}: 'tools' and 'scopes' must be lists")
        return cls(name, body.get("public_key"), tuple(tools), tuple(scopes))  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        """Its canonical form (lists sorted, each name once)."""
        return {
            "public_key": self.public_key,
            "tools": sorted(set(self.tools)),
            "scopes": sorted(set(self.scopes)),
        }


def _public_key(name: str, text: Any) -> Ed25519PublicKey:
    try:
        raw = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise InvalidInput(
            f"approver {name!r}: public_key must be base64 of a raw 32-byte Ed25519 public key"
        )
    return Ed25519PublicKey.from_public_bytes(raw)


@dataclass(frozen=True)
class Policy:
    """One policy for all four gates: per-agent authority and per-tool rules.

    Args:
        agents: Agent name -> the authority it holds (starting a run) or requests (receiving a
            handoff).
        tools: Tool name (function or MCP tool) -> what a call needs.
        visibility: Whether the three visibility gates hide what an agent may not use.
        approvers: Name -> who may sign answers to approvals of which tools.
    """

    agents: Mapping[str, Authority] = field(default_factory=dict)
    tools: Mapping[str, ToolRule] = field(default_factory=dict)
    visibility: bool = True
    approvers: Mapping[str, Approver] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: Any) -> Policy:
        """Read a policy from its YAML/JSON form (see the module docs).

        Raises:
            InvalidInput: Unknown fields, malformed scopes or ceilings, wrong types.
        """
        if not isinstance(body, Mapping):
            raise InvalidInput("a policy must be a mapping with 'agents' and 'tools'")
        extra = set(body) - {"agents", "tools", "visibility", "approvers"}
        if extra:
            raise InvalidInput(f"unknown policy fields {sorted(extra)}")
        agents, tools = body.get("agents") or {}, body.get("tools") or {}
        visibility = body.get("visibility", True)
        if not isinstance(agents, Mapping) or not isinstance(tools, Mapping):
            raise InvalidInput("'agents' and 'tools' must be mappings")
        if not isinstance(visibility, bool):
            raise InvalidInput(f"'visibility' must be true or false, got {visibility!r}")
        rules = {str(name): ToolRule.from_json(str(name), rule) for name, rule in tools.items()}
        return cls(
            agents={str(name): Authority.from_json(value) for name, value in agents.items()},
            tools=rules,
            visibility=visibility,
            approvers=_approvers_from_json(body.get("approvers")),
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Policy:
        """Read a policy from a YAML file.

        Raises:
            InvalidInput: The file cannot be read or holds no valid policy.
        """
        name = os.fspath(path)
        body = read_yaml(path, "policy")
        try:
            return cls.from_json(body)
        except InvalidInput as error:
            raise InvalidInput(f"policy {name}: {error}") from None

    def to_json(self) -> dict[str, Any]:
        """The canonical form: what :meth:`from_json` reads, every mapping in sorted order."""
        return {
            "agents": {name: self.agents[name].to_json() for name in sorted(self.agents)},
            "tools": {name: self.tools[name].to_json() for name in sorted(self.tools)},
            "visibility": self.visibility,
            **self._approvers_json(),
        }

    @cached_property
    def digest(self) -> str:
        """``sha256:`` + hex SHA-256 of the RFC 8785 bytes of :meth:`to_json`.

        Two policies that grant and require exactly the same have the same
        digest, however they were written (YAML order, redundant scopes).
        """
        return "sha256:" + hashlib.sha256(rfc8785.dumps(self.to_json())).hexdigest()

    def _approvers_json(self) -> dict[str, Any]:
        """``approvers`` of :meth:`to_json`, only when some are named: a policy without
        approvers keeps the form (and digest) it always had."""
        if not self.approvers:
            return {}
        return {
            "approvers": {name: self.approvers[name].to_json() for name in sorted(self.approvers)}
        }

    def approvers_for(self, tool: str) -> tuple[Approver, ...]:
        """Who may answer an approval of a call of ``tool``: the approvers that name the tool,
        or whose scopes cover its rule's scope (none: any answer will do)."""
        rule = self.tools.get(tool)
        return tuple(
            approver
            for _, approver in sorted(self.approvers.items())
            if tool in approver.tools
            or (rule is not None and Authority.of(*approver.scopes).holds(rule.scope))
        )

    def authority_of(self, agent: str) -> Authority:
        """What ``agent`` holds or requests; nothing when the policy does not name it."""
        return self.agents.get(agent) or Authority()

    def visible(self, authority: Authority, tool: str) -> Refusal | None:
        """Whether an agent with ``authority`` may see ``tool`` (its scope only)."""
        rule = self.tools.get(tool)
        if rule is None:
            return Refusal(Gate.TOOL_VISIBILITY, f"tool {tool!r} has no rule in the policy")
        if not authority.holds(rule.scope):
            return Refusal(
                Gate.TOOL_VISIBILITY, f"scope {rule.scope!r} is not held", scope=rule.scope
            )
        return None

    def check_call(
        self, authority: Authority, tool: str, arguments: str, *, approved: bool = False
    ) -> Refusal | None:
        """The invocation gate for a tool call: scope, then each ceiling on its argument.

        The decision is :meth:`check_inputs` on the call's :func:`ceiling_inputs`, the same
        procedure a verifier runs on a redacted view; the arguments add the refused value.
        ``approved``: a person approved exactly these arguments (see :meth:`check_inputs`).
        """
        rule = self.tools.get(tool)
        refusal = self.check_inputs(
            authority, tool, self._inputs(tool, arguments), approved=approved
        )
        if refusal is None or refusal.ceiling is None or rule is None:
            return refusal
        path = rule.ceilings[refusal.ceiling]
        value = _argument(_parsed(arguments), path)
        if value is _MISSING:
            return refusal
        return Refusal(
            refusal.gate,
            f"{path}={value!r} is beyond ceiling {refusal.ceiling!r}",
            scope=refusal.scope,
            ceiling=refusal.ceiling,
            limit=refusal.limit,
            value=value,
        )

    def asks(self, authority: Authority, tool: str, arguments: str) -> bool:
        """Whether a call waits for a person's approval: :meth:`asks_inputs` on its
        :func:`ceiling_inputs`."""
        return self.asks_inputs(authority, tool, self._inputs(tool, arguments))

    def asks_inputs(
        self, authority: Authority, tool: str, inputs: Mapping[str, CeilingInput]
    ) -> bool:
        """Whether a call with these ceiling inputs waits for a person's approval: its tool
        has an ``approval`` rule, the call is within the agent's authority once approved,
        and the rule is ``always`` or the call is beyond one of the ceilings it names.
        A call refused even when approved (outside the scopes, beyond another ceiling, an
        argument missing) asks nothing: it is refused."""
        rule = self.tools.get(tool)
        if rule is None or rule.approval is None:
            return False
        if self.check_inputs(authority, tool, inputs, approved=True) is not None:
            return False
        return rule.approval.always or self.check_inputs(authority, tool, inputs) is not None

    def _inputs(self, tool: str, arguments: str) -> dict[str, CeilingInput]:
        rule = self.tools.get(tool)
        return ceiling_inputs(arguments, rule.ceilings.values() if rule is not None else ())

    def check_inputs(
        self,
        authority: Authority,
        tool: str,
        inputs: Mapping[str, CeilingInput],
        *,
        approved: bool = False,
    ) -> Refusal | None:
        """The invocation gate on a call's ceiling inputs (argument path -> what a ceiling
        reads of it, :func:`ceiling_inputs`): exactly what :meth:`check_call` decides.

        ``approved``: a person approved the call, so a value beyond a ceiling its tool's
        ``approval: {above: [...]}`` names is no refusal (the argument must still be there);
        the scope and every other ceiling still apply."""
        gate = Gate.INVOCATION
        rule = self.tools.get(tool)
        if rule is None:
            return Refusal(gate, f"tool {tool!r} has no rule in the policy")
        if not authority.holds(rule.scope):
            return Refusal(gate, f"scope {rule.scope!r} is not held", scope=rule.scope)
        if not rule.ceilings:
            return None
        if any(found.get("type") == "invalid" for found in inputs.values()):
            return Refusal(gate, "the arguments are not JSON", scope=rule.scope)
        for name, path in rule.ceilings.items():
            ceiling = authority.ceilings.get(name)
            if ceiling is None:
                continue  # no limit on this dimension
            found = inputs.get(path, _ABSENT_INPUT)
            if found.get("absent"):
                return Refusal(
                    gate,
                    f"argument {path!r} that ceiling {name!r} reads is missing",
                    scope=rule.scope,
                    ceiling=name,
                    limit=ceiling.to_json(),
                )
            if not input_permits(ceiling, found) and not (approved and rule.approvable(name)):
                return Refusal(
                    gate,
                    f"{path} is beyond ceiling {name!r}",
                    scope=rule.scope,
                    ceiling=name,
                    limit=ceiling.to_json(),
                )
        return None

    def check_handoff(self, sender: Authority, receiver: str, gate: str) -> Refusal | None:
        """Whether the receiver's request asks for nothing beyond the sender's authority."""
        request = self.authority_of(receiver)
        beyond = excess(request, sender)
        if beyond is None:
            return None
        wider = sorted(scope for scope in request.scopes if not sender.holds(scope))
        looser = sorted(
            name
            for name, ceiling in request.ceilings.items()
            if name in sender.ceilings and not ceiling_at_most(ceiling, sender.ceilings[name])
        )
        return Refusal(
            gate,
            f"{receiver!r} requests {beyond}",
            scope=wider[0] if wider else None,
            ceiling=None if wider or not looser else looser[0],
            limit=None if wider or not looser else sender.ceilings[looser[0]].to_json(),
            value=None if wider or not looser else request.ceilings[looser[0]].to_json(),
        )


def _approvers_from_json(body: Any) -> dict[str, Approver]:
    if body is None:
        return {}
    if not isinstance(body, Mapping):
        raise InvalidInput("'approvers' must map a name to {public_key, tools, scopes}")
    return {str(name): Approver.from_json(name, entry) for name, entry in body.items()}


# -- ceiling inputs ---------------------------------------------------------------------

CeilingInput = dict[str, Any]
"""What a ceiling reads of one argument: ``{"int": n}``, ``{"sha256": digest}`` (a string),
``{"absent": true}``, ``{"type": "invalid"}`` (the arguments are not JSON) or ``{"type":
"<JSON type>"}``. A redacted view keeps these instead of the arguments."""

_ABSENT_INPUT: Final[CeilingInput] = {"absent": True}
_JSON_TYPES: Final = {bool: "boolean", float: "number", list: "array", dict: "object"}


def ceiling_inputs(arguments: str, paths: Iterable[str]) -> dict[str, CeilingInput]:
    """What the ceilings reading ``paths`` (dotted argument paths) see of a call's arguments."""
    wanted = sorted(set(paths))
    if not wanted:
        return {}
    parsed = _parsed(arguments)
    if parsed is _MISSING:
        return {path: {"type": "invalid"} for path in wanted}
    return {path: _input(_argument(parsed, path)) for path in wanted}


def input_permits(ceiling: Ceiling, found: Mapping[str, Any]) -> bool:
    """Whether ``ceiling`` permits the argument ``found`` stands for: exactly
    ``ceiling.permits(value)`` — a cap permits only integers, the other kinds only strings,
    and a string is recognised by its digest."""
    if "int" in found:
        return isinstance(ceiling, Cap) and ceiling.permits(found["int"])
    text = found.get("sha256")
    if not isinstance(text, str):
        return False
    if isinstance(ceiling, Ranked):
        allowed = ceiling.order[: ceiling.order.index(ceiling.level) + 1]
        return text in {value_digest(level) for level in allowed}
    if isinstance(ceiling, AllowList):
        return text in {value_digest(value) for value in ceiling.values}
    if isinstance(ceiling, DenyList):
        return text not in {value_digest(value) for value in ceiling.values}
    return False  # a cap (the value is no integer) and Nothing


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    # TypeError: arguments that are no text at all (a stored item's ``5`` or ``{...}``,
    # which the SDK's SQLiteSession keeps too): not JSON text, as unparseable text is not.
    except (ValueError, TypeError, RecursionError):
        return _MISSING


def _input(value: Any) -> CeilingInput:
    if value is _MISSING:
        return dict(_ABSENT_INPUT)
    if isinstance(value, int) and not isinstance(value, bool):
        return {"int": value}
    if isinstance(value, str):
        return {"sha256": value_digest(value)}
    return {"type": _JSON_TYPES.get(type(value), "null")}


def _argument(arguments: Any, path: str) -> Any:
    value = arguments
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value
