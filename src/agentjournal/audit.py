"""The audit commands: ``verify``, ``bundle export``, ``bundle verify``, ``keygen``.

Each returns the process exit code: 0 OK, 2 the check failed, 1 a usage
problem (a missing key, an unreadable file). Trusted public keys come only
from the command line, never from the bundle.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentjournal import ledger
from agentjournal.bundle import export_bundle
from agentjournal.errors import InvalidInput
from agentjournal.journal import DEFAULT_URI, URI_ENV, Journal
from agentjournal.verify import verify_bundle

__all__ = ["export_to_file", "keygen", "trusted_keys", "verify_file", "verify_session"]


def trusted_keys(values: Sequence[str]) -> dict[str, Ed25519PublicKey]:
    """Read ``--pubkey`` values: each a key file's path or the key itself.

    Raises:
        InvalidInput: A value is neither a readable key file nor a key.
    """
    keys: dict[str, Ed25519PublicKey] = {}
    for value in values:
        text = value
        if os.path.isfile(value):
            try:
                with open(value, encoding="utf-8") as handle:
                    text = handle.read()
            except OSError as error:
                raise InvalidInput(f"cannot read public key {value!r}: {error}") from None
        public = ledger.load_public_key(text)
        keys[ledger.key_id(public)] = public
    return keys


def _usage(message: str) -> int:
    print(f"agentjournal: {message}", file=sys.stderr)
    return 1


def _checked_time(value: str | None) -> str | None:
    """A ``--not-before`` value, refused unless it is an RFC 3339 time."""
    if value is not None:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"--not-before {value!r} is not an RFC 3339 time") from None
    return value


def _verification_options(
    pubkeys: Sequence[str], allow_uncovered: bool, not_before: str | None
) -> tuple[dict[str, Ed25519PublicKey], str | None]:
    """The trusted keys and anchor time of a verify command.

    Raises:
        InvalidInput: A key or the time cannot be read, or no key is given.
    """
    keys = trusted_keys(pubkeys)
    if not keys and not allow_uncovered:
        raise InvalidInput("give the trusted public key with --pubkey (or --allow-uncovered)")
    return keys, _checked_time(not_before)


async def verify_session(
    session_id: str,
    uri: str | None,
    pubkeys: Sequence[str],
    allow_uncovered: bool,
    not_before: str | None = None,
) -> int:
    """``agentjournal verify SESSION``: verify the session tree as it is in the store."""
    try:
        keys, not_before = _verification_options(pubkeys, allow_uncovered, not_before)
    except InvalidInput as error:
        return _usage(str(error))
    async with Journal.open(uri or os.environ.get(URI_ENV) or DEFAULT_URI) as journal:
        bundle = await export_bundle(journal.store, session_id)
    report = verify_bundle(bundle, keys, allow_uncovered=allow_uncovered, not_before=not_before)
    print(report.text())
    return 0 if report.ok else 2


async def export_to_file(
    session_id: str, uri: str | None, output: str, redact: bool, checkpoint: bool
) -> int:
    """``agentjournal bundle export``: sign the heads first when a key is set, then write."""
    async with Journal.open(uri or os.environ.get(URI_ENV) or DEFAULT_URI) as journal:
        if checkpoint and journal.signing_key is not None:
            signed = await journal.session(session_id).checkpoint()
            if signed is not None:
                print(f"signed a checkpoint with {signed.key_id}")
        bundle = await export_bundle(journal.store, session_id, redact=redact)
    await asyncio.to_thread(_write_atomically, output, json.dumps(bundle, ensure_ascii=False))
    count = sum(len(stream["events"]) for stream in bundle["streams"])
    print(f"wrote {output}: {len(bundle['streams'])} streams, {count} events")
    return 0


def _write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that nothing half-written ever has the real name."""
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(partial, path)


def verify_file(
    path: str, pubkeys: Sequence[str], allow_uncovered: bool, not_before: str | None = None
) -> int:
    """``agentjournal bundle verify``: offline, from the file and the given keys alone."""
    try:
        keys, not_before = _verification_options(pubkeys, allow_uncovered, not_before)
    except InvalidInput as error:
        return _usage(str(error))
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        return _usage(f"cannot read {path!r}: {error}")
    try:
        bundle = json.loads(text) if text.strip() else None
    except ValueError as error:
        print(f"FAILED: {path} is not JSON: {error}")
        return 2
    report = verify_bundle(bundle, keys, allow_uncovered=allow_uncovered, not_before=not_before)
    print(report.text())
    return 0 if report.ok else 2


def keygen(output: str) -> int:
    """``agentjournal keygen -o FILE``: a new signing key (mode 600); prints the public key."""
    if os.path.exists(output):
        return _usage(f"{output} exists; refusing to overwrite a key")
    key = ledger.SigningKey.generate()
    descriptor = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(key.private_pem())
    public = f"{output}.pub"
    with open(public, "w", encoding="utf-8") as handle:
        handle.write(key.public_pem())
    print(f"wrote {output} (private, keep it secret) and {public}; key id {key.key_id}")
    return 0
