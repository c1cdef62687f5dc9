"""The write side of the tamper-evident ledger: how events are sealed and heads signed
(pure: no store, no network, no Agents SDK).

- :mod:`~agentjournal.ledger.chain` — per-stream hash chains.
- :mod:`~agentjournal.ledger.keys` — Ed25519 signing keys and their rotation.
- :mod:`~agentjournal.ledger.checkpoints` — signed checkpoints of a tree's heads.
- :mod:`~agentjournal.ledger.redaction` — the committed redacted view of each event.
- :mod:`~agentjournal.ledger.integrity` — the four integrity states a reader is told.

Verifying what was sealed, offline, is :mod:`agentjournal.audit`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentjournal._lazy import exports

if TYPE_CHECKING:
    from agentjournal.ledger.chain import (
        CHAIN_KEYS,
        GENESIS,
        HASH_KEY,
        PREV_KEY,
        SEQ_KEY,
        chain_hash,
        seal,
    )
    from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
    from agentjournal.ledger.keys import (
        KEY_ROTATED,
        SIGNING_KEY_ENV,
        SIGNING_KEY_FILE_ENV,
        KeyRotation,
        SigningKey,
        key_id,
        load_public_key,
        signed_event_id,
        trusted_closure,
    )

__all__ = [
    "CHAIN_KEYS",
    "CHECKPOINT",
    "GENESIS",
    "HASH_KEY",
    "KEY_ROTATED",
    "PREV_KEY",
    "SEQ_KEY",
    "SIGNING_KEY_ENV",
    "SIGNING_KEY_FILE_ENV",
    "Checkpoint",
    "KeyRotation",
    "SigningKey",
    "chain_hash",
    "key_id",
    "load_public_key",
    "seal",
    "signed_event_id",
    "trusted_closure",
]

_NAMES = {
    "CHAIN_KEYS": "agentjournal.ledger.chain",
    "CHECKPOINT": "agentjournal.ledger.checkpoints",
    "GENESIS": "agentjournal.ledger.chain",
    "HASH_KEY": "agentjournal.ledger.chain",
    "KEY_ROTATED": "agentjournal.ledger.keys",
    "PREV_KEY": "agentjournal.ledger.chain",
    "SEQ_KEY": "agentjournal.ledger.chain",
    "SIGNING_KEY_ENV": "agentjournal.ledger.keys",
    "SIGNING_KEY_FILE_ENV": "agentjournal.ledger.keys",
    "Checkpoint": "agentjournal.ledger.checkpoints",
    "KeyRotation": "agentjournal.ledger.keys",
    "SigningKey": "agentjournal.ledger.keys",
    "chain_hash": "agentjournal.ledger.chain",
    "key_id": "agentjournal.ledger.keys",
    "load_public_key": "agentjournal.ledger.keys",
    "seal": "agentjournal.ledger.chain",
    "signed_event_id": "agentjournal.ledger.keys",
    "trusted_closure": "agentjournal.ledger.keys",
}
__getattr__, __dir__ = exports(__name__, _NAMES)
