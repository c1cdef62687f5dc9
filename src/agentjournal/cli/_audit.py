"""The audit commands: ``verify``, ``bundle export``, ``bundle verify``, ``keygen [--rotate]``.

Each returns the process exit code: 0 OK, 2 the check failed (the data does not
verify, whatever is wrong with it), 1 a usage problem (a missing key, file,
folder or store). Trusted public keys come only from the command line, never
from the bundle. The commands that read a store never create one.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentjournal import ledger
from agentjournal._text import plural, shown_uri
from agentjournal.authority import Policy
from agentjournal.errors import InvalidInput, StoreUnavailable
from agentjournal.ledger.bundle import export_bundle
from agentjournal.ledger.verify import Report, parse_bundle, verify_bundle
from agentjournal.store import (
    AppendRequest,
    AppendResult,
    EventStore,
    NewEvent,
    open_store,
    store_uri,
)
from agentjournal.store.base import Expected, RecordedEvent
from agentjournal.streams import session_stream, validate_id

__all__ = [
    "DEFAULT_MAX_BYTES",
    "export_to_file",
    "keygen",
    "rotate",
    "trusted_keys",
    "verify_file",
    "verify_session",
]

DEFAULT_MAX_BYTES: Final = 256 * 1024 * 1024
"""The largest bundle ``bundle verify`` reads (the whole bundle is held in memory)."""


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
                    text = handle.read(64 * 1024)  # a key is a few hundred bytes
            except (OSError, UnicodeDecodeError) as error:
                raise InvalidInput(f"cannot read public key {value!r}: {error}") from None
        try:
            public = ledger.load_public_key(text)
        except InvalidInput as error:
            if text is value:
                raise InvalidInput(
                    f"--pubkey {value!r} is neither a key file nor a key ({error})"
                ) from None
            raise InvalidInput(f"{value} holds no public key: {error}") from None
        keys[ledger.key_id(public)] = public
    return keys


def _usage(message: str) -> int:
    print(f"agentjournal: {' '.join(message.split())}", file=sys.stderr)  # one line
    return 1


def _checked_time(value: str | None) -> str | None:
    """A ``--not-before`` value, refused unless it is an RFC 3339 time."""
    if value is not None:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise InvalidInput(f"--not-before {value!r} is not an RFC 3339 time") from None
    return value


@dataclass(frozen=True)
class _Anchors:
    """What a verify command trusts from outside the bundle."""

    keys: dict[str, Ed25519PublicKey]
    not_before: str | None
    policy: Policy | None

    def verify(self, bundle: Any, allow_uncovered: bool) -> Report:
        return verify_bundle(
            bundle,
            self.keys,
            allow_uncovered=allow_uncovered,
            not_before=self.not_before,
            policy=self.policy,
        )


def _verification_options(
    pubkeys: Sequence[str],
    allow_uncovered: bool,
    not_before: str | None,
    policy_file: str | None = None,
) -> _Anchors:
    """The trusted keys, anchor time and policy of a verify command.

    Raises:
        InvalidInput: A key, the time or the policy cannot be read, or no key is given.
    """
    keys = trusted_keys(pubkeys)
    if not keys and not allow_uncovered:
        raise InvalidInput("give the trusted public key with --pubkey (or --allow-uncovered)")
    policy = Policy.load(policy_file) if policy_file is not None else None
    return _Anchors(keys, _checked_time(not_before), policy)


async def _open_session(uri: str | None, session_id: str) -> tuple[EventStore, str]:
    """Open an existing store holding ``session_id`` (never creating either).

    Raises:
        InvalidInput: The session id is malformed or the session is not in the store.
        StoreUnavailable: There is no store at the URI, or it cannot be reached.
    """
    session_id = validate_id(session_id, "session id")
    target = store_uri(uri)
    store = await open_store(target, create=False)
    try:
        if await store.head(session_stream(session_id)) is None:
            raise InvalidInput(
                f"no session {session_id!r} in {shown_uri(target)}: check the id, or pass --uri"
            )
    except BaseException:
        await store.close()
        raise
    return store, session_id


class _BadEvent(Exception):
    """Raised by :class:`_CheckedReads` for a stored event no bundle could carry."""

    def __init__(self, stream: str, revision: int | None, message: str) -> None:
        super().__init__(message)
        self.stream, self.revision, self.message = stream, revision, message


class _CheckedReads:
    """An event store whose reads refuse damaged events, naming where they are.

    ``verify SESSION`` reads the tree through this, so bad bytes written straight
    into a store (data or metadata that is not UTF-8 JSON, a malformed id) are a
    failed check at a stream and revision, not a crash somewhere in the export.
    """

    def __init__(self, store: EventStore) -> None:
        self._store = store

    async def read(
        self,
        stream: str,
        *,
        from_revision: int | None = None,
        backwards: bool = False,
        limit: int | None = None,
    ) -> list[RecordedEvent]:
        try:
            found = await self._store.read(
                stream, from_revision=from_revision, backwards=backwards, limit=limit
            )
        except StoreUnavailable as error:  # e.g. a text column that is not UTF-8
            raise _BadEvent(stream, None, f"cannot be read: {error}") from None
        for event in found:
            _check_stored(event)
        return found

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        raise InvalidInput("verification does not write")

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        raise InvalidInput("verification does not write")

    async def head(self, stream: str) -> int | None:
        return await self._store.head(stream)

    async def read_all(
        self, *, from_position: int | None = None, limit: int | None = None
    ) -> list[RecordedEvent]:
        return await self._store.read_all(from_position=from_position, limit=limit)

    def subscribe(self, *, after_position: int | None = None) -> AsyncIterator[RecordedEvent]:
        return self._store.subscribe(after_position=after_position)

    async def close(self) -> None:
        await self._store.close()


def _check_stored(event: RecordedEvent) -> None:
    """Raise :class:`_BadEvent` unless ``event`` can be put in a bundle as it is."""
    where = (event.stream, event.revision)
    try:
        _ = event.id
    except (ValueError, TypeError):
        raise _BadEvent(*where, "the event id is not 16 bytes") from None
    try:
        metadata: Any = dict(event.metadata)
    except (ValueError, TypeError, RecursionError):
        raise _BadEvent(*where, "the metadata is not a UTF-8 JSON object") from None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise _BadEvent(*where, "the metadata does not map strings to strings")
    if not isinstance(event.type, str) or not isinstance(event.data, bytes):
        raise _BadEvent(*where, "the event type or data has the wrong column type")
    try:
        event.data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _BadEvent(*where, f"the data is not UTF-8 text (byte {error.start})") from None


async def verify_session(
    session_id: str,
    uri: str | None,
    pubkeys: Sequence[str],
    allow_uncovered: bool,
    not_before: str | None = None,
    *,
    policy_file: str | None = None,
) -> int:
    """``agentjournal verify SESSION``: verify the session tree as it is in the store.

    A missing store or session is a usage error (1); anything wrong with what
    is stored, including an event the store cannot even decode, fails (2).

    Raises:
        JournalError: The store cannot be opened or reached (a usage error: 1).
    """
    try:
        anchors = _verification_options(pubkeys, allow_uncovered, not_before, policy_file)
    except InvalidInput as error:
        return _usage(str(error))
    store, session_id = await _open_session(uri, session_id)
    try:
        bundle = await export_bundle(_CheckedReads(store), session_id)
    except _BadEvent as bad:
        failed = Report()
        failed.fail("integrity", bad.stream, bad.revision, bad.message)
        print(failed.text())
        return 2
    finally:
        await store.close()
    report = anchors.verify(bundle, allow_uncovered)
    print(report.text())
    return 0 if report.ok else 2


def _writable_folder(path: str) -> None:
    """Raise unless the folder ``path`` would be written in exists.

    Raises:
        InvalidInput: It does not exist (or is not a folder).
    """
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise InvalidInput(f"cannot write {path}: folder {folder} does not exist; create it first")


async def export_to_file(
    session_id: str, uri: str | None, output: str, redact: bool, checkpoint: bool
) -> int:
    """``agentjournal bundle export``: sign the heads first when a key is set, then write.

    Raises:
        JournalError: The store, the session or the output folder is missing, or
            the signing key cannot be read (a usage error: 1).
    """
    from agentjournal.journal import Journal  # loads the Agents SDK: only to sign

    _writable_folder(output)  # before anything is signed or read
    key = ledger.SigningKey.from_environment() if checkpoint else None
    store, session_id = await _open_session(uri, session_id)
    journal = Journal(store, store_uri(uri), signing_key=key)
    try:
        if key is not None:
            signed = await journal.session(session_id).checkpoint()
            if signed is not None:
                print(f"signed a checkpoint with {signed.key_id}")
        bundle = await export_bundle(store, session_id, redact=redact)
    finally:
        await journal.close()
    try:
        await asyncio.to_thread(_write_atomically, output, json.dumps(bundle, ensure_ascii=False))
    except OSError as error:
        return _usage(f"cannot write {output}: {error.strerror or error}")
    streams = bundle["streams"]
    count = sum(len(stream["events"]) for stream in streams)
    print(f"wrote {output}: {plural(len(streams), 'stream')}, {plural(count, 'event')}")
    return 0


def _write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that nothing half-written ever has the real name."""
    partial = f"{path}.partial"
    try:
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(partial, path)
    except BaseException:
        if os.path.exists(partial):
            os.unlink(partial)
        raise


class _TooLarge(Exception):
    """Raised by :func:`_read_bounded` for a file over the limit (before reading it all)."""


def _read_bounded(path: str, max_bytes: int) -> bytes:
    """The bytes of ``path``, reading at most ``max_bytes + 1`` whatever the file claims.

    Raises:
        OSError: The file cannot be read.
        _TooLarge: It holds more than ``max_bytes``.
    """
    chunks: list[bytes] = []
    read = 0
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > max_bytes:  # refused before reading a byte
            raise _TooLarge(size)
        while chunk := handle.read(1 << 20):  # a pipe or device claims no size
            read += len(chunk)
            if read > max_bytes:
                raise _TooLarge(read)
            chunks.append(chunk)
    return b"".join(chunks)


def _amount(count: int) -> str:
    """``1.0 GiB``, ``256 MiB``, ``17 bytes``."""
    value, unit = float(count), "bytes"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{count} bytes" if unit == "bytes" else f"{value:.4g} {unit}"


def verify_file(
    path: str,
    pubkeys: Sequence[str],
    allow_uncovered: bool,
    not_before: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    *,
    policy_file: str | None = None,
) -> int:
    """``agentjournal bundle verify``: offline, from the file and the given keys alone.

    Whatever the file holds — not UTF-8, not JSON, nested too deeply, too
    large, a crafted bundle — it is a failed check (2) naming where, never a
    crash. A file that cannot be opened is a usage error (1).
    """
    try:
        anchors = _verification_options(pubkeys, allow_uncovered, not_before, policy_file)
    except InvalidInput as error:
        return _usage(str(error))
    try:
        raw = _read_bounded(path, max_bytes)
    except _TooLarge:
        print(
            f"FAILED: {path}: larger than {_amount(max_bytes)}, the most this verifier reads "
            "into memory (raise --max-bytes to verify it)"
        )
        return 2
    except OSError as error:
        return _usage(f"cannot read {path}: {error.strerror or error}")
    try:
        bundle = parse_bundle(raw)
    except InvalidInput as error:
        print(f"FAILED: {path}: {error}")
        return 2
    report = anchors.verify(bundle, allow_uncovered)
    print(report.text())
    return 0 if report.ok else 2


def keygen(output: str) -> int:
    """``agentjournal keygen -o FILE``: a new signing key (mode 600); prints the public key."""
    try:
        key = _new_key_files(output)
    except InvalidInput as error:
        return _usage(str(error))
    print(f"wrote {output} (private, keep it secret) and {output}.pub; key id {key.key_id}")
    return 0


def _new_key_files(output: str) -> ledger.SigningKey:
    """Write a new key to ``output`` (mode 600) and its public key to ``output.pub``.

    Raises:
        InvalidInput: Either file exists or the folder does not; nothing is written.
    """
    public = f"{output}.pub"
    for path in (output, public):
        if os.path.exists(path):
            raise InvalidInput(f"{path} exists; refusing to overwrite a key")
    _writable_folder(output)
    key = ledger.SigningKey.generate()
    descriptor = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(key.private_pem())
    with open(public, "x", encoding="utf-8") as handle:
        handle.write(key.public_pem())
    return key


async def rotate(old_file: str, output: str, uri: str | None) -> int:
    """``agentjournal keygen --rotate OLD -o NEW``: a new key, and OLD's signed hand-over to it
    recorded on the store's ``AgentKeys`` stream. All or nothing: if the rotation cannot be
    recorded, the new key files are removed.

    Raises:
        JournalError: The old key or the store cannot be read (a usage error: 1).
    """
    from agentjournal.journal import Journal  # loads the Agents SDK

    old = ledger.SigningKey.from_file(old_file)
    target = store_uri(uri)
    store = await open_store(target, create=False)  # a missing store: no rotation to record
    try:
        new = _new_key_files(output)
    except InvalidInput as error:
        await store.close()
        return _usage(str(error))
    try:
        async with Journal(store, target) as journal:
            await journal.rotate_key(old, new)
    except BaseException:
        for path in (output, f"{output}.pub"):
            os.unlink(path)
        raise
    print(
        f"wrote {output} (private, keep it secret) and {output}.pub; key id {new.key_id}\n"
        f"recorded in {shown_uri(target)}: {old.key_id} hands over to {new.key_id}; "
        f"sign with the new key from now on (AGENTJOURNAL_SIGNING_KEY_FILE={output})"
    )
    return 0
