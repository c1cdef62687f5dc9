"""Signed checkpoints of a session tree's heads (pure).

An Ed25519 signature over the heads (revision and hash) of every stream of a
session tree, written as an ``agentjournal.Checkpoint`` event to
``AgentLedger-{session id}``. Against a checkpoint, a truncated tail is
detectable; without one it is not. A checkpoint also signs its own place on
the ledger stream and its event's metadata.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentjournal.errors import InvalidInput
from agentjournal.ledger.chain import CHAIN_KEYS, jcs
from agentjournal.ledger.keys import SigningKey, verified

__all__ = ["CHECKPOINT", "Checkpoint"]

CHECKPOINT: Final = "agentjournal.Checkpoint"


_CHECKPOINT_FIELDS: Final = frozenset(
    {"session_id", "heads", "sequence", "previous", "metadata", "key_id", "signed_at", "signature"}
)


@dataclass(frozen=True)
class Checkpoint:
    """Signed heads of a session tree, and the checkpoint's own place in its ledger stream.

    Attributes:
        session_id: The session.
        heads: Stream -> (revision, hash) of its last event when signed.
        sequence: The checkpoint's revision in ``AgentLedger-{session}``.
        previous: The ``aj.hash`` of the ledger event before it (:data:`GENESIS` at 0).
            Signing its own place means checkpoints cannot be reordered, even re-chained.
        metadata: The checkpoint event's own metadata but its chain keys: signed too, so
            nothing on the ledger stream is left unauthenticated.
        key_id: The signing key's id.
        signed_at: RFC 3339 UTC.
        signature: Base64 Ed25519 signature over :meth:`signed_bytes`.
    """

    session_id: str
    heads: Mapping[str, tuple[int, str]]
    sequence: int
    previous: str
    metadata: Mapping[str, str]
    key_id: str
    signed_at: str
    signature: str = ""

    def _fields(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "heads": {
                stream: {"revision": revision, "hash": digest}
                for stream, (revision, digest) in sorted(self.heads.items())
            },
            "sequence": self.sequence,
            "previous": self.previous,
            "metadata": dict(sorted(self.metadata.items())),
            "key_id": self.key_id,
            "signed_at": self.signed_at,
        }

    def signed_bytes(self) -> bytes:
        """The JCS bytes the signature covers (everything but the signature)."""
        return jcs(self._fields())

    @classmethod
    def sign(
        cls,
        key: SigningKey,
        session_id: str,
        heads: Mapping[str, tuple[int, str]],
        signed_at: datetime,
        *,
        sequence: int,
        previous: str,
        metadata: Mapping[str, str] | None = None,
    ) -> Checkpoint:
        """A checkpoint of ``heads`` signed by ``key``, to be written at ``sequence`` with
        ``metadata`` (its chain keys aside)."""
        unsigned = cls(
            session_id,
            dict(heads),
            sequence,
            previous,
            {k: v for k, v in (metadata or {}).items() if k not in CHAIN_KEYS},
            key.key_id,
            signed_at.isoformat(),
        )
        signature = base64.b64encode(key.private.sign(unsigned.signed_bytes())).decode()
        return dataclasses.replace(unsigned, signature=signature)

    def verify(self, public: Ed25519PublicKey) -> bool:
        """Whether the signature is valid under ``public``."""
        return verified(public, self.signature, self.signed_bytes())

    def encode(self) -> bytes:
        return jcs({**self._fields(), "signature": self.signature})

    @classmethod
    def decode(cls, body: Any) -> Checkpoint:
        """Read a checkpoint's JSON object (strict: unknown or missing fields are refused).

        Raises:
            InvalidInput: It is not a well-formed checkpoint.
        """
        if not _is_mapping(body) or set(body) != _CHECKPOINT_FIELDS:
            raise InvalidInput(f"a checkpoint has exactly {', '.join(sorted(_CHECKPOINT_FIELDS))}")
        heads: dict[str, tuple[int, str]] = {}
        raw_heads = body["heads"]
        if not _is_mapping(raw_heads):
            raise InvalidInput("checkpoint heads must be a mapping")
        for stream, head in raw_heads.items():
            if (
                not _is_mapping(head)
                or set(head) != {"revision", "hash"}
                or not _is_int(head["revision"])
                or not isinstance(head["hash"], str)
            ):
                raise InvalidInput(f"checkpoint head of {stream!r} is malformed")
            heads[str(stream)] = (head["revision"], head["hash"])
        for name in ("session_id", "previous", "key_id", "signed_at", "signature"):
            if not isinstance(body[name], str):
                raise InvalidInput(f"checkpoint {name} must be a string")
        if not _is_int(body["sequence"]):
            raise InvalidInput("checkpoint sequence must be an integer")
        metadata = body["metadata"]
        if not _is_mapping(metadata) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            raise InvalidInput("checkpoint metadata must map strings to strings")
        return cls(
            body["session_id"],
            heads,
            body["sequence"],
            body["previous"],
            dict(metadata),
            body["key_id"],
            body["signed_at"],
            body["signature"],
        )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, the ABC's check (slow) only for what is not a dict."""
    return type(value) is dict or isinstance(value, Mapping)
