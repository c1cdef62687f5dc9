"""Approvals answered by named approvers: the policy that names them, and a whole run —
paused on a refund, answered (signed or not), resumed — written by the SDK's real Runner.

Shared by tests/test_approvals_signed.py and tests/test_approvals_verify.py.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentjournal import JournalSession
from agentjournal.authority import Approver, Policy
from drive import drive
from refund_authority import refund_policy
from test_approvals import ASK, graph

ANN = Ed25519PrivateKey.generate()
"""The approver the policy names for ``issue_refund``."""
MALLORY = Ed25519PrivateKey.generate()
"""A key no policy names."""


def public_text(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def approver(name: str = "ann", key: Ed25519PrivateKey = ANN, **named: Any) -> Approver:
    return Approver(name, public_text(key), **(named or {"tools": ("issue_refund",)}))


def approved_policy(*approvers: Approver) -> Policy:
    """The refund policy with ``approvers`` (default: ann, for ``issue_refund``)."""
    chosen = approvers or (approver(),)
    return dataclasses.replace(refund_policy(), approvers={a.name: a for a in chosen})


async def answered(
    session: JournalSession,
    *,
    approve: bool = True,
    key: Ed25519PrivateKey | None = ANN,
    ran: list[str] | None = None,
    resume: bool = True,
    guarded: bool = True,
) -> None:
    """Pause on the refund (guarded: under the session's policy), hold, answer as ann
    (signed with ``key``), and resume to the end."""
    ran = ran if ran is not None else []

    def guard(agent: Any) -> Any:
        return session.guard(agent) if guarded else agent

    paused: Any = await drive(guard(graph(ran)), ASK, session=session, hooks=session)
    await session.hold(paused)
    decide = session.approve if approve else session.reject
    await decide("r1", by="ann@example.com", reason="checked the order", key=key)
    if resume:
        await session.resume(guard(graph(ran, answer="Done.")))
