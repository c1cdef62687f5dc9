"""The tamper-evident ledger: per-stream hash chains and signed checkpoints (pure).

**Chain.** Every event agentjournal writes carries three metadata keys:
``aj.seq`` (its revision: the position in its stream's chain), ``aj.prev``
(the previous event's hash; 64 zeros for revision 0) and ``aj.hash``:

    sha256( JCS({"stream", "revision", "id", "type", "data_sha256", "metadata"}) )

where JCS is RFC 8785 canonical JSON, ``data_sha256`` the hex SHA-256 of the
event's data, and ``metadata`` every metadata key except ``aj.hash`` (so
``aj.seq`` and ``aj.prev`` are covered). Because the data enters only as a
digest, a payload can be withheld from an export and the chain still verifies.
Appends are at exact revisions, so each stream's chain is linear.

**Checkpoints.** An Ed25519 signature over the heads (revision and hash) of
every stream of a session tree, written as an ``agentjournal.Checkpoint``
event to ``AgentLedger-{session id}``. Against a checkpoint, a truncated tail
is detectable; without one it is not.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from agentjournal.errors import InvalidInput

__all__ = [
    "BUNDLE_FORMAT",
    "BUNDLE_VERSION",
    "CHAIN_KEYS",
    "CHECKPOINT",
    "GENESIS",
    "HASH_KEY",
    "PREV_KEY",
    "SEQ_KEY",
    "SIGNING_KEY_ENV",
    "SIGNING_KEY_FILE_ENV",
    "Checkpoint",
    "KEY_ROTATED",
    "KeyRotation",
    "SigningKey",
    "chain_hash",
    "data_digest",
    "key_id",
    "ledger_stream",
    "load_public_key",
    "seal",
    "signed_event_id",
    "trusted_closure",
    "value_digest",
]

SEQ_KEY: Final = "aj.seq"
PREV_KEY: Final = "aj.prev"
HASH_KEY: Final = "aj.hash"
GENESIS: Final = "0" * 64
CHECKPOINT: Final = "agentjournal.Checkpoint"
BUNDLE_FORMAT: Final = "agentjournal-bundle"
BUNDLE_VERSION: Final = 2
"""Version 2 adds each event's ``view`` (redacted bundles), the authority log and the keys."""
SIGNING_KEY_ENV: Final = "AGENTJOURNAL_SIGNING_KEY"
"""A base64 (or hex) Ed25519 private key seed of 32 bytes."""
SIGNING_KEY_FILE_ENV: Final = "AGENTJOURNAL_SIGNING_KEY_FILE"
"""A file holding a PEM (PKCS#8) Ed25519 private key, or its raw 32-byte seed in base64/hex."""


def _jcs(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes."""
    encoded: bytes = rfc8785.dumps(value)
    return encoded


def _record_bytes(record: dict[str, Any], metadata: Mapping[str, str]) -> bytes:
    """The JCS bytes of a chain record.

    For a record whose keys are all ASCII (every record we write), RFC 8785
    and Python's sorted compact JSON without ASCII escaping give the same
    bytes: JCS escapes exactly the characters ``json`` escapes, the same way,
    and orders keys by UTF-16 code units, which for ASCII is code-point order.
    That path is six times faster; anything else goes through ``rfc8785``.
    ``tests/test_ledger_chain.py`` checks the two agree on random records.
    """
    try:
        if "".join(metadata).isascii():
            return json.dumps(
                record, sort_keys=True, separators=(",", ":"), ensure_ascii=False
            ).encode()
        return _jcs(record)
    except (UnicodeEncodeError, rfc8785.CanonicalizationError):
        # A lone surrogate: JSON text can hold one, UTF-8 (and so JCS) cannot.
        raise InvalidInput(
            f"{record['stream']}@{record['revision']}: the event's id, type or metadata is not "
            "valid Unicode text (a lone surrogate); it cannot be chained"
        ) from None


def ledger_stream(session_id: str) -> str:
    """The checkpoint stream of a session tree."""
    return f"AgentLedger-{session_id}"


def value_digest(value: Any) -> str:
    """``sha256:`` + hex SHA-256 of ``value`` as JSON with sorted keys, no whitespace, UTF-8.

    The digest of a payload a guardrail judged, of a withheld value in a redacted view, and of a
    string a ceiling reads. Lone surrogates are kept as their bytes (``surrogatepass``): a digest
    never fails on data a model or a forged bundle produced.
    """
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_SIGNED_IDS: Final = uuid.UUID("6b3f0f0e-5a59-4d3c-9d8e-2f1c7a0b9e41")


def signed_event_id(stream: str, signature: str) -> uuid.UUID:
    """The id of a signed ledger event (a checkpoint, a key rotation), derived from its
    signature: what the signature does not cover of the event, its id, it determines."""
    return uuid.uuid5(_SIGNED_IDS, f"{stream}\x1f{signature}")


def data_digest(data: bytes) -> str:
    """Hex SHA-256 of an event's data."""
    return hashlib.sha256(data).hexdigest()


def chain_hash(
    stream: str,
    revision: int,
    event_id: str,
    type_: str,
    data_sha256: str,
    metadata: Mapping[str, str],
) -> str:
    """The hash of one event (``metadata`` without ``aj.hash``).

    Raises:
        InvalidInput: A text field is not valid Unicode (a lone surrogate).
    """
    covered = {k: v for k, v in metadata.items() if k != HASH_KEY}
    record = {
        "stream": stream,
        "revision": revision,
        "id": event_id,
        "type": type_,
        "data_sha256": data_sha256,
        "metadata": covered,
    }
    return hashlib.sha256(_record_bytes(record, covered)).hexdigest()


def seal(
    stream: str,
    revision: int,
    event_id: str,
    type_: str,
    data: bytes,
    metadata: dict[str, str],
    prev: str,
) -> str:
    """Add the chain keys to ``metadata`` (in place) and return the event's hash."""
    metadata.pop(HASH_KEY, None)
    metadata[SEQ_KEY] = str(revision)
    metadata[PREV_KEY] = prev
    digest = chain_hash(stream, revision, event_id, type_, data_digest(data), metadata)
    metadata[HASH_KEY] = digest
    return digest


# -- keys ---------------------------------------------------------------------------


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
                text = handle.read(64 * 1024)  # a key is a few hundred bytes
        except OSError as error:
            reason = error.strerror or str(error)
            raise InvalidInput(f"cannot read signing key {os.fspath(path)}: {reason}") from None
        except UnicodeDecodeError:
            raise InvalidInput(f"{os.fspath(path)} is no key file (not text)") from None
        return cls.from_text(text)

    @classmethod
    def from_environment(cls) -> SigningKey | None:
        """``$AGENTJOURNAL_SIGNING_KEY_FILE``, else ``$AGENTJOURNAL_SIGNING_KEY``, else None."""
        path = os.environ.get(SIGNING_KEY_FILE_ENV)
        if path:
            return cls.from_file(path)
        text = os.environ.get(SIGNING_KEY_ENV)
        return cls.from_text(text) if text else None

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


# -- checkpoints --------------------------------------------------------------------


_CHECKPOINT_FIELDS: Final = frozenset(
    {"session_id", "heads", "sequence", "previous", "metadata", "key_id", "signed_at", "signature"}
)
CHAIN_KEYS: Final = frozenset({SEQ_KEY, PREV_KEY, HASH_KEY})


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
        return _jcs(self._fields())

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
        return _verified(public, self.signature, self.signed_bytes())

    def encode(self) -> bytes:
        return _jcs({**self._fields(), "signature": self.signature})

    @classmethod
    def decode(cls, body: Any) -> Checkpoint:
        """Read a checkpoint's JSON object (strict: unknown or missing fields are refused).

        Raises:
            InvalidInput: It is not a well-formed checkpoint.
        """
        if not isinstance(body, Mapping) or set(body) != _CHECKPOINT_FIELDS:
            raise InvalidInput(f"a checkpoint has exactly {', '.join(sorted(_CHECKPOINT_FIELDS))}")
        heads: dict[str, tuple[int, str]] = {}
        raw_heads = body["heads"]
        if not isinstance(raw_heads, Mapping):
            raise InvalidInput("checkpoint heads must be a mapping")
        for stream, head in raw_heads.items():
            if (
                not isinstance(head, Mapping)
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
        if not isinstance(metadata, Mapping) or not all(
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


# -- key rotation ---------------------------------------------------------------------

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
        return _jcs(self._fields())

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
        return _verified(old, self.signature, self.signed_bytes())

    def encode(self) -> bytes:
        return _jcs({**self._fields(), "signature": self.signature})

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


def _verified(public: Ed25519PublicKey, signature: str, signed: bytes) -> bool:
    try:
        public.verify(base64.b64decode(signature, validate=True), signed)
    except (InvalidSignature, ValueError, binascii.Error):
        return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
