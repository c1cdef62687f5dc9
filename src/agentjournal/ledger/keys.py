"""Ed25519 signing keys and their rotation (pure).

A :class:`SigningKey` signs checkpoints (:mod:`agentjournal.ledger.checkpoints`).
A :class:`KeyRotation` is the old key's signed statement that the new one may
sign from now on; a verifier that trusts the old key follows it
(:func:`trusted_closure`). Signed ledger events take their ids from their
signatures (:func:`signed_event_id`), so nothing of them is unsigned.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentjournal.errors import InvalidInput
from agentjournal.ledger.chain import jcs

__all__ = [
    "KEY_ROTATED",
    "SIGNING_KEY_ENV",
    "SIGNING_KEY_FILE_ENV",
    "KeyRotation",
    "SigningKey",
    "key_id",
    "load_public_key",
    "signed_event_id",
    "trusted_closure",
    "verified",
]

SIGNING_KEY_ENV: Final = "AGENTJOURNAL_SIGNING_KEY"
"""A base64 (or hex) Ed25519 private key seed of 32 bytes."""
SIGNING_KEY_FILE_ENV: Final = "AGENTJOURNAL_SIGNING_KEY_FILE"
"""A file holding a PEM (PKCS#8) Ed25519 private key, or its raw 32-byte seed in base64/hex."""


KEY_FILE_MOST: Final = 64 * 1024
"""The most of a key file read (:meth:`SigningKey.from_file`): a key is a few hundred bytes."""

_SIGNED_IDS: Final = uuid.UUID("6b3f0f0e-5a59-4d3c-9d8e-2f1c7a0b9e41")


def signed_event_id(stream: str, signature: str) -> uuid.UUID:
    """The id of a signed ledger event (a checkpoint, a key rotation), derived from its
    signature: what the signature does not cover of the event, its id, it determines."""
    return uuid.uuid5(_SIGNED_IDS, f"{stream}\x1f{signature}")


def key_id(public: Ed25519PublicKey) -> str:
    """``ed25519:`` + the first 16 hex digits of SHA-256 of the raw public key."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def _raw32(text: str) -> bytes | None:
    text = text.strip()
    for decode in (bytes.fromhex, base64.b64decode):
        try:
            raw = decode(text)
        except (ValueError, binascii.Error):
            continue
        if len(raw) == 32:
            return raw
    return None


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 private key and its id.

    Attributes:
        private: The key.
        key_id: ``ed25519:`` + 16 hex digits (recorded on each checkpoint).
    """

    private: Ed25519PrivateKey

    @property
    def key_id(self) -> str:
        return key_id(self.private.public_key())

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private.public_key()

    @classmethod
    def generate(cls) -> SigningKey:
        """A new random key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_text(cls, text: str) -> SigningKey:
        """Read a PEM (PKCS#8) key or a raw 32-byte seed in hex or base64.

        Raises:
            InvalidInput: The text is no Ed25519 private key.
        """
        if "-----BEGIN" in text:
            try:
                key = serialization.load_pem_private_key(text.encode(), password=None)
            except (ValueError, TypeError) as error:
                raise InvalidInput(f"not a PEM private key: {error}") from None
            if not isinstance(key, Ed25519PrivateKey):
                raise InvalidInput("the PEM key is not an Ed25519 key")
            return cls(key)
        raw = _raw32(text)
        if raw is None:
            raise InvalidInput("an Ed25519 seed is 32 bytes in hex or base64, or a PEM key")
        return cls(Ed25519PrivateKey.from_private_bytes(raw))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> SigningKey:
        """Read a key file (see :meth:`from_text`)."""
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read(KEY_FILE_MOST)  # a key is a few hundred bytes
        except OSError as error:
            reason = error.strerror or str(error)
            raise InvalidInput(f"cannot read signing key {os.fspath(path)}: {reason}") from None
        except UnicodeDecodeError:
            raise InvalidInput(f"{os.fspath(path)} is no key file (not text)") from None
        try:
            return cls.from_text(text)
        except InvalidInput as error:
            raise InvalidInput(f"{os.fspath(path)} holds no signing key: {error}") from None

    @classmethod
    def from_environment(cls) -> SigningKey | None:
        """``$AGENTJOURNAL_SIGNING_KEY_FILE``, else ``$AGENTJOURNAL_SIGNING_KEY``, else None.

        Raises:
            InvalidInput: The variable set names no key; the message starts with its name.
        """
        path = os.environ.get(SIGNING_KEY_FILE_ENV)
        text = None if path else os.environ.get(SIGNING_KEY_ENV)
        try:
            if path:
                return cls.from_file(path)
            return cls.from_text(text) if text else None
        except InvalidInput as error:
            name = SIGNING_KEY_FILE_ENV if path else SIGNING_KEY_ENV
            raise InvalidInput(f"${name}: {error}") from None

    def private_pem(self) -> str:
        return self.private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()

    def public_pem(self) -> str:
        return self.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode()


def load_public_key(text: str) -> Ed25519PublicKey:
    """Read a PEM public key or a raw 32-byte public key in hex or base64.

    Raises:
        InvalidInput: The text is no Ed25519 public key.
    """
    if "-----BEGIN" in text:
        try:
            key = serialization.load_pem_public_key(text.encode())
        except (ValueError, TypeError) as error:
            raise InvalidInput(f"not a PEM public key: {error}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise InvalidInput("the PEM key is not an Ed25519 key")
        return key
    raw = _raw32(text)
    if raw is None:
        raise InvalidInput("an Ed25519 public key is 32 bytes in hex or base64, or PEM")
    return Ed25519PublicKey.from_public_bytes(raw)


KEY_ROTATED: Final = "agentjournal.KeyRotated"
_ROTATION_FIELDS: Final = frozenset(
    {"old_key_id", "new_key_id", "new_public_key", "rotated_at", "signature"}
)


@dataclass(frozen=True)
class KeyRotation:
    """The old key's signed statement that checkpoints may from now on be signed by a new key.

    Recorded as ``agentjournal.KeyRotated`` on the journal's ``AgentKeys`` stream by
    ``agentjournal keygen --rotate``; a verifier that trusts the old key follows it to the
    new one. It adds trust; it does not withdraw the old key's.

    Attributes:
        old_key_id: The signing key's id.
        new_key_id: The new key's id.
        new_public_key: The new raw public key, base64.
        rotated_at: RFC 3339 UTC.
        signature: Base64 Ed25519 signature by the old key over :meth:`signed_bytes`.
    """

    old_key_id: str
    new_key_id: str
    new_public_key: str
    rotated_at: str
    signature: str = ""

    def _fields(self) -> dict[str, Any]:
        return {
            "old_key_id": self.old_key_id,
            "new_key_id": self.new_key_id,
            "new_public_key": self.new_public_key,
            "rotated_at": self.rotated_at,
        }

    def signed_bytes(self) -> bytes:
        """The JCS bytes the signature covers (everything but the signature)."""
        return jcs(self._fields())

    @classmethod
    def sign(cls, old: SigningKey, new: Ed25519PublicKey, rotated_at: datetime) -> KeyRotation:
        """``old`` hands over to ``new``."""
        raw = new.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        unsigned = cls(
            old.key_id, key_id(new), base64.b64encode(raw).decode(), rotated_at.isoformat()
        )
        signature = base64.b64encode(old.private.sign(unsigned.signed_bytes())).decode()
        return dataclasses.replace(unsigned, signature=signature)

    def new_key(self) -> Ed25519PublicKey | None:
        """The new public key, if it is one and its id is the one stated."""
        try:
            public = load_public_key(self.new_public_key)
        except InvalidInput:
            return None
        return public if key_id(public) == self.new_key_id else None

    def verify(self, old: Ed25519PublicKey) -> bool:
        """Whether ``old`` signed this rotation."""
        return verified(old, self.signature, self.signed_bytes())

    def encode(self) -> bytes:
        return jcs({**self._fields(), "signature": self.signature})

    @classmethod
    def decode(cls, body: Any) -> KeyRotation:
        """Read a rotation's JSON object (strict).

        Raises:
            InvalidInput: It is not a well-formed rotation.
        """
        if not isinstance(body, Mapping) or set(body) != _ROTATION_FIELDS:
            raise InvalidInput(f"a key rotation has exactly {', '.join(sorted(_ROTATION_FIELDS))}")
        if not all(isinstance(body[name], str) for name in _ROTATION_FIELDS):
            raise InvalidInput("every field of a key rotation is a string")
        return cls(
            body["old_key_id"],
            body["new_key_id"],
            body["new_public_key"],
            body["rotated_at"],
            body["signature"],
        )


def trusted_closure(
    trusted: Mapping[str, Ed25519PublicKey], rotations: Iterable[KeyRotation]
) -> dict[str, Ed25519PublicKey]:
    """The trusted keys and every key a chain of valid rotations from them leads to.

    A rotation counts only when a key already trusted signed it and its new key is
    what it says; the result does not depend on the rotations' order.
    """
    keys = dict(trusted)
    pending = list(rotations)
    changed = True
    while changed:
        changed = False
        for rotation in list(pending):
            old = keys.get(rotation.old_key_id)
            new = rotation.new_key()
            if old is not None and new is not None and rotation.verify(old):
                keys.setdefault(rotation.new_key_id, new)
                pending.remove(rotation)
                changed = True
    return keys


def verified(public: Ed25519PublicKey, signature: str, signed: bytes) -> bool:
    try:
        public.verify(base64.b64decode(signature, validate=True), signed)
    except (InvalidSignature, ValueError, binascii.Error):
        return False
    return True
