"""Signed answers to approvals, and what makes one count (pure).

An answer (``InterruptResolved``, :class:`~agentjournal.events.ApprovalDecided`) names the
digest of the arguments it answers and, when an approver signed it, the key id and an
Ed25519 signature over :func:`~agentjournal.events.approval_signed_bytes`. A tool the
policy names approvers for (:meth:`~agentjournal.authority.Policy.approvers_for`) is
answered only by an answer one of them signed. The same check runs when a person answers
(:func:`~agentjournal.engine.approvals.resolve`), when a stored run is resumed
(:meth:`~agentjournal.sdk.approvals.ApprovalsAPI.resumable`) and in the offline verifier
(:mod:`agentjournal.audit.verify._approvals`).
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentjournal import events
from agentjournal.authority import Approver, Policy
from agentjournal.ledger.keys import SigningKey, key_id, verified

__all__ = ["AnswerCheck", "check_answer", "sign_answer"]


def sign_answer(
    decided: events.ApprovalDecided,
    key: Ed25519PrivateKey | SigningKey,
    *,
    session_id: str,
    stream: str,
) -> events.ApprovalDecided:
    """``decided`` with the key's id and its signature over what it says (the question's
    ``stream`` of session ``session_id``)."""
    private = key.private if isinstance(key, SigningKey) else key
    signed = dataclasses.replace(decided, key_id=key_id(private.public_key()), signature="")
    signature = private.sign(events.approval_signed_bytes(session_id, stream, signed))
    return dataclasses.replace(signed, signature=base64.b64encode(signature).decode())


@dataclass(frozen=True, slots=True)
class AnswerCheck:
    """What :func:`check_answer` found.

    Attributes:
        problem: Why the answer does not count (None: it counts).
        approver: The named approver whose signature verified, if one did.
        approvers: The approvers the policy names for the tool.
    """

    problem: str | None
    approver: Approver | None = None
    approvers: tuple[Approver, ...] = ()


def check_answer(
    policies: tuple[Policy, ...],
    decided: events.ApprovalDecided,
    *,
    session_id: str,
    stream: str,
    tool_name: str,
    asked_digest: str | None,
    reason_digest: str | None = None,
) -> AnswerCheck:
    """Whether an answer counts for the question it names.

    Args:
        policies: The policies in force (none: no approvers are named).
        decided: The answer.
        session_id: The session.
        stream: The question's stream (where the answer is).
        tool_name: The question's tool.
        asked_digest: :func:`~agentjournal.events.arguments_digest` of the question's
            arguments (None: unknown, e.g. withheld without a view).
        reason_digest: The digest of the answer's reason when a redacted view withheld it
            (``decided.reason`` is then empty).

    It counts when its arguments digest (if any) is the question's; a signed answer's
    signature verifies against the approver of its key id; and, when any policy names
    approvers for the tool, the answer is signed by one that every such policy names.
    """
    if decided.arguments_digest and asked_digest not in (None, decided.arguments_digest):
        return AnswerCheck("the answer is for other arguments than the question's")
    named = [policy.approvers_for(tool_name) for policy in policies]
    required = [approvers for approvers in named if approvers]
    every = tuple({a.key_id: a for approvers in named for a in approvers}.values())
    if not decided.signed:
        if required:
            names = ", ".join(a.name for a in required[0])
            return AnswerCheck(
                f"the answer is not signed; {tool_name} needs one signed by {names}",
                approvers=every,
            )
        return AnswerCheck(None, approvers=every)
    if not decided.arguments_digest and required:
        return AnswerCheck("a signed answer names no arguments digest", approvers=every)
    signer = next((a for a in every if a.key_id == decided.key_id), None)
    if signer is None:
        if required:
            return AnswerCheck(
                f"signed by {decided.key_id}, which is no approver of {tool_name}",
                approvers=every,
            )
        return AnswerCheck(None, approvers=every)  # a key no policy names: not checkable
    signed = events.approval_signed_bytes(session_id, stream, decided, reason_digest=reason_digest)
    if not verified(signer.key, decided.signature, signed):
        return AnswerCheck(
            f"the signature of {signer.name} ({signer.key_id}) does not verify", approvers=every
        )
    if any(signer.key_id not in {a.key_id for a in approvers} for approvers in required):
        return AnswerCheck(
            f"{signer.name} is not an approver of {tool_name} under every policy in force",
            approvers=every,
        )
    return AnswerCheck(None, signer, every)
