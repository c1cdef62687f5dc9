"""Authority and the policy that grants it (pure).

An :class:`Authority` is a set of scopes and named, typed ceilings; :func:`meet`
is the only way to make a receiver's authority from its sender's, so authority
can only narrow along a delegation chain. A :class:`Policy` gives each agent an
authority and each tool the scope it needs and the arguments its ceilings read.
"""

from __future__ import annotations

from agentjournal.authority._model import (
    NOTHING,
    AllowList,
    Authority,
    Cap,
    Ceiling,
    DenyList,
    Nothing,
    Ranked,
    ceiling_at_most,
    ceiling_from_json,
    covers,
    excess,
    meet,
    meet_ceilings,
    validate_scope,
)
from agentjournal.authority._policy import (
    ApprovalRule,
    Approver,
    CeilingInput,
    Gate,
    Policy,
    Refusal,
    ToolRule,
    ceiling_inputs,
    input_permits,
)

__all__ = [
    "NOTHING",
    "AllowList",
    "ApprovalRule",
    "Approver",
    "Authority",
    "Cap",
    "Ceiling",
    "CeilingInput",
    "DenyList",
    "Gate",
    "Nothing",
    "Policy",
    "Ranked",
    "Refusal",
    "ToolRule",
    "ceiling_at_most",
    "ceiling_from_json",
    "ceiling_inputs",
    "covers",
    "excess",
    "input_permits",
    "meet",
    "meet_ceilings",
    "validate_scope",
]
