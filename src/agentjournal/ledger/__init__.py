"""The tamper-evident ledger: hash chains, signing keys, checkpoints, bundles and their
offline verification (pure but for :func:`export_bundle`, which reads a store; no network,
no Agents SDK).

- :mod:`~agentjournal.ledger.chain` — per-stream hash chains (pure).
- :mod:`~agentjournal.ledger.keys` — Ed25519 signing keys and their rotation (pure).
- :mod:`~agentjournal.ledger.checkpoints` — signed checkpoints of a tree's heads (pure).
- :mod:`~agentjournal.ledger.redaction` — what a redacted bundle shows of each event (pure).
- :mod:`~agentjournal.ledger.bundle` — the bundle format, and exporting a session tree.
- :mod:`~agentjournal.ledger.verify` — verifying a bundle (pure).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentjournal._lazy import exports

if TYPE_CHECKING:
    from agentjournal.ledger.bundle import BUNDLE_FORMAT, BUNDLE_VERSION, bundle_of, export_bundle
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
    from agentjournal.ledger.verify import (
        Problem,
        Report,
        parse_bundle,
        verify_bundle,
        verify_records,
    )

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
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
    "Problem",
    "Report",
    "SigningKey",
    "bundle_of",
    "chain_hash",
    "export_bundle",
    "key_id",
    "load_public_key",
    "parse_bundle",
    "seal",
    "signed_event_id",
    "trusted_closure",
    "verify_bundle",
    "verify_records",
]

_NAMES = {
    "BUNDLE_FORMAT": "agentjournal.ledger.bundle",
    "BUNDLE_VERSION": "agentjournal.ledger.bundle",
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
    "Problem": "agentjournal.ledger.verify",
    "Report": "agentjournal.ledger.verify",
    "SigningKey": "agentjournal.ledger.keys",
    "bundle_of": "agentjournal.ledger.bundle",
    "verify_records": "agentjournal.ledger.verify",
    "chain_hash": "agentjournal.ledger.chain",
    "export_bundle": "agentjournal.ledger.bundle",
    "key_id": "agentjournal.ledger.keys",
    "load_public_key": "agentjournal.ledger.keys",
    "parse_bundle": "agentjournal.ledger.verify",
    "seal": "agentjournal.ledger.chain",
    "signed_event_id": "agentjournal.ledger.keys",
    "trusted_closure": "agentjournal.ledger.keys",
    "verify_bundle": "agentjournal.ledger.verify",
}
__getattr__, __dir__ = exports(__name__, _NAMES)
