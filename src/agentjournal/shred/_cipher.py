"""The cipher of subject content: AES-GCM under a subject's key, and keyed digests (pure).

A field's plaintext is sealed with a fresh 96-bit nonce and the event's stream and id
(and the field's path) as associated data, so a ciphertext moved to another event or
field does not open. A keyed digest is an HMAC-SHA256 under a key derived from the
subject's key: it lets the holder of the key compare values, and after the key is
destroyed it confirms no guess.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
_DIGEST_LABEL: Final = b"agentjournal content digest v1"


class Unopenable(Exception):
    """Raised when a ciphertext does not open under its key (altered, moved or truncated)."""


def new_key() -> bytes:
    """A fresh AES-256 key."""
    return AESGCM.generate_key(bit_length=KEY_BYTES * 8)


def associated(stream: str, event_id: str, path: str) -> bytes:
    """The associated data of one field of one event."""
    return f"{stream}\n{event_id}\n{path}".encode()


def encrypt(
    key: bytes, plaintext: bytes, aad: bytes, *, nonce: Callable[[int], bytes] = os.urandom
) -> bytes:
    """``nonce || ciphertext || tag`` of ``plaintext`` under ``key``."""
    fresh = nonce(NONCE_BYTES)
    return fresh + AESGCM(key).encrypt(fresh, plaintext, aad)


def decrypt(key: bytes, sealed: bytes, aad: bytes) -> bytes:
    """The plaintext of :func:`encrypt`'s output.

    Raises:
        Unopenable: Wrong key, wrong associated data, or altered bytes.
    """
    if len(sealed) < NONCE_BYTES + 16:
        raise Unopenable("ciphertext too short")
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad)
    except InvalidTag as error:
        raise Unopenable("ciphertext does not open under its key") from error


def digest_key(key: bytes) -> bytes:
    """The key of :func:`keyed_digest`, derived from a subject's key (never the key itself)."""
    return hmac.new(key, _DIGEST_LABEL, hashlib.sha256).digest()


def keyed_digest(key: bytes, value: str) -> str:
    """``hmac-sha256:<hex>`` of ``value`` under the digest key of the subject key ``key``."""
    mac = hmac.new(digest_key(key), value.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return "hmac-sha256:" + mac.hexdigest()
