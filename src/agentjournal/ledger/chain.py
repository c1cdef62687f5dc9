"""Per-stream hash chains (pure).

Every event agentjournal writes carries the chain keys in its metadata: ``aj.seq`` (its
revision: the position in its stream's chain), ``aj.prev`` (the previous event's hash; 64
zeros for revision 0), ``aj.chain`` (the record format, ``"2"``; absent on events written
before it) and ``aj.hash``, the hex SHA-256 of the event's *chain record*:

- **format 2** (written by this version): the compact JSON array
  ``[2, stream, revision, id, type, data_sha256, metadata]``, strings escaped as RFC 8785
  escapes them, ``metadata`` every key but ``aj.hash`` in code-point order (SCHEMA.md,
  "Chain records", has the full rules and a worked example);
- **format 1**: the RFC 8785 (JCS) canonical JSON of the object
  ``{"stream", "revision", "id", "type", "data_sha256", "metadata"}``.

``data_sha256`` is the hex SHA-256 of the event's data; ``metadata`` covers ``aj.seq``,
``aj.prev`` and ``aj.chain``. Because the data enters only as a digest, a payload can be
withheld from an export and the chain still verifies. A format 2 record starts with ``[``
and a format 1 record with ``{``, so no record of one format is a record of the other.
The signed streams (checkpoints, key rotations) are format 1 only (:func:`signed_stream`).
Appends are at exact revisions, so each stream's chain is linear.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import orjson
import rfc8785

from agentjournal._digests import data_digest
from agentjournal.errors import InvalidInput
from agentjournal.events import CHAIN_KEY, CHAIN_KEYS, GENESIS, HASH_KEY, PREV_KEY, SEQ_KEY
from agentjournal.streams import KEYS_STREAM, ledger_stream

__all__ = [
    "CHAIN_FORMAT",
    "CHAIN_KEY",
    "CHAIN_KEYS",
    "GENESIS",
    "HASH_KEY",
    "PREV_KEY",
    "SEQ_KEY",
    "chain_format",
    "chain_hash",
    "jcs",
    "record_bytes",
    "seal",
    "signed_stream",
]

CHAIN_FORMAT: Final = "2"
"""The chain record format new events are sealed with (``aj.chain``)."""


def jcs(value: Any) -> bytes:
    """RFC 8785 canonical JSON bytes.

    A value of ASCII object keys, strings, integers within 2**53, booleans and nulls (a
    checkpoint, a key rotation) is printed by orjson in one call: for such values RFC 8785
    is sorted compact JSON (see :func:`_record_bytes`), which orjson prints alike; anything
    else (a float, a wider integer or key, a lone surrogate, another type) goes through
    ``rfc8785``, which prints it or refuses it. ``tests/test_ledger_chain.py`` checks the
    two agree on random values.
    """
    if _plain(value):
        try:
            return orjson.dumps(value, option=_SORTED)
        except orjson.JSONEncodeError:  # a lone surrogate: rfc8785 refuses it
            pass
    encoded: bytes = rfc8785.dumps(value)
    return encoded


_SAFE_INTEGER: Final = 2**53 - 1  # the widest integer RFC 8785 prints


def _plain(value: Any) -> bool:
    """Whether ``value`` is made of exactly ``dict`` with ASCII ``str`` keys, ``list``,
    ``str``, ``bool``, None and ``int`` within :data:`_SAFE_INTEGER` (no subclass)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_SAFE_INTEGER <= value <= _SAFE_INTEGER)
    if kind is dict:
        return all(type(k) is str and k.isascii() and _plain(v) for k, v in value.items())
    if kind is list:
        return all(map(_plain, value))
    return False


_LEDGER_PREFIX: Final = ledger_stream("")


def signed_stream(stream: str) -> bool:
    """Whether ``stream`` holds signed statements (``AgentLedger-{id}``, ``AgentKeys``): its
    events are sealed in chain format 1 only.

    Nothing after the newest checkpoint or key rotation pins its hash, so whoever holds a
    bundle could recompute that hash in either format if both were allowed there and flip
    the event's ``aj.chain``; one format makes the event exactly what was signed, and format
    1 is what such streams already hold.
    """
    return stream == KEYS_STREAM or stream.startswith(_LEDGER_PREFIX)


def chain_format(metadata: Mapping[str, str]) -> int | None:
    """The chain record format an event's metadata names: 1 without ``aj.chain``, 2 for
    ``"2"``; None for anything else (no record: the event cannot verify)."""
    named = metadata.get(CHAIN_KEY)
    if named is None:
        return 1
    return 2 if named == CHAIN_FORMAT else None


def _record_bytes(record: dict[str, Any], metadata: Mapping[str, str]) -> bytes:
    """The JCS bytes of a format 1 chain record.

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
        return jcs(record)
    except (UnicodeEncodeError, rfc8785.CanonicalizationError):
        raise _not_unicode(record["stream"], record["revision"]) from None


def _not_unicode(stream: str, revision: int) -> InvalidInput:
    # A lone surrogate: JSON text can hold one, UTF-8 (and so JCS) cannot.
    return InvalidInput(
        f"{stream}@{revision}: the event's id, type or metadata is not "
        "valid Unicode text (a lone surrogate); it cannot be chained"
    )


# Python's sorted compact JSON (``json.dumps`` with these settings, without its per-call
# set-up): the reference the orjson fast paths are checked against, and their fallback.
_sorted_json: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True
).encode
_SORTED: Final = orjson.OPT_SORT_KEYS


def record_bytes(
    stream: str,
    revision: int,
    event_id: str,
    type_: str,
    data_sha256: str,
    metadata: Mapping[str, str],
) -> bytes:
    """The chain record of one event, in the format its metadata names (``aj.chain``);
    ``metadata`` may hold ``aj.hash``, which the record leaves out.

    Raises:
        InvalidInput: A text field is not valid Unicode (a lone surrogate), or the
            metadata names a chain format this version does not know.
    """
    # A proxy's own copy is its dict's copy (dict() of a proxy goes key by key).
    covered = metadata.copy() if type(metadata) is MappingProxyType else dict(metadata)
    covered.pop(HASH_KEY, None)
    found = chain_format(covered)
    if found == 2:
        return _record_v2(stream, revision, event_id, type_, data_sha256, covered)
    if found == 1:
        return _record_v1(stream, revision, event_id, type_, data_sha256, covered)
    raise InvalidInput(
        f"{stream}@{revision}: the event names chain format {covered[CHAIN_KEY]!r}; "
        f"this version knows 1 and {CHAIN_FORMAT}"
    )


def _record_v2(
    stream: str,
    revision: int,
    event_id: str,
    type_: str,
    data_sha256: str,
    covered: dict[str, str],
) -> bytes:
    """``[2, stream, revision, id, type, data_sha256, metadata]`` as compact JSON with the
    metadata's keys in code-point order (``covered``: the metadata without ``aj.hash``).

    orjson prints exactly what ``json.dumps(..., sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)`` prints for arrays of strings, integers and string-to-string
    objects (``tests/test_ledger_chain.py`` checks random records); what it refuses (a
    lone surrogate, an integer beyond 64 bits) goes through ``json``, which prints the
    integer or refuses the surrogate the same way.
    """
    if type(revision) is not int:
        raise InvalidInput(f"{stream}: a revision must be an integer")
    return _sorted_compact(
        _v2(stream, revision, event_id, type_, data_sha256, covered), stream, revision
    )


def _v2(
    stream: str,
    revision: int,
    event_id: str,
    type_: str,
    data_sha256: str,
    covered: Mapping[str, str],
) -> list[Any]:
    return [2, stream, revision, event_id, type_, data_sha256, covered]


def v2_record(
    stream: str,
    revision: int,
    event_id: str,
    type_: str,
    data_sha256: str,
    covered: Mapping[str, str],
) -> bytes | None:
    """A format 2 chain record printed by orjson in one call, as :func:`record_bytes` prints
    it when orjson can; None where orjson refuses it (a lone surrogate, an integer beyond 64
    bits, a metadata value of another type): the caller then takes the exact path. For the
    readers that check many events (the verifier, the catalog)."""
    try:
        # The list written out here, not by _v2: a call less on every event a reader checks.
        return orjson.dumps(
            [2, stream, revision, event_id, type_, data_sha256, covered], option=_SORTED
        )
    except orjson.JSONEncodeError:
        return None


def _record_v1(
    stream: str,
    revision: int,
    event_id: str,
    type_: str,
    data_sha256: str,
    covered: dict[str, str],
) -> bytes:
    """The RFC 8785 bytes of ``{"stream", "revision", "id", "type", "data_sha256",
    "metadata"}`` (``covered``: the metadata without ``aj.hash``)."""
    record = {
        "data_sha256": data_sha256,
        "id": event_id,
        "metadata": covered,
        "revision": revision,
        "stream": stream,
        "type": type_,
    }
    if type(revision) is int and "".join(covered).isascii():
        # ASCII keys: RFC 8785 is sorted compact JSON (see ``_record_bytes``), which orjson
        # prints in one call.
        return _sorted_compact(record, stream, revision)
    return _record_bytes(record, covered)


def _sorted_compact(record: object, stream: str, revision: int) -> bytes:
    """``record`` as compact JSON with sorted keys: by orjson in one call, and what orjson
    refuses (a lone surrogate, an integer beyond 64 bits) through ``json``, which prints
    the integer or refuses the surrogate alike.

    Raises:
        InvalidInput: A string of the record is not Unicode text (a lone surrogate).
    """
    try:
        return orjson.dumps(record, option=_SORTED)
    except orjson.JSONEncodeError:
        pass
    try:
        return _sorted_json(record).encode()
    except UnicodeEncodeError:
        raise _not_unicode(stream, revision) from None


def chain_hash(
    stream: str,
    revision: int,
    event_id: str,
    type_: str,
    data_sha256: str,
    metadata: Mapping[str, str],
) -> str:
    """The hash of one event: hex SHA-256 of its chain record (:func:`record_bytes`;
    ``metadata`` may hold ``aj.hash``, which the record leaves out).

    Raises:
        InvalidInput: A text field is not valid Unicode (a lone surrogate), or the
            metadata names a chain format this version does not know.
    """
    record = record_bytes(stream, revision, event_id, type_, data_sha256, metadata)
    return hashlib.sha256(record).hexdigest()


def seal(
    stream: str,
    revision: int,
    event_id: str,
    type_: str,
    data: bytes,
    metadata: dict[str, str],
    prev: str,
    *,
    chain_format: int = 2,
) -> str:
    """Add the chain keys to ``metadata`` (in place) and return the event's hash.

    Events are sealed in chain format 2, but on the signed streams (:func:`signed_stream`),
    which are format 1 only. ``chain_format`` 1 seals as agentjournal did before format 2
    (no ``aj.chain``) everywhere: for tests of old sessions, never used by the write path.
    """
    metadata.pop(HASH_KEY, None)
    metadata[SEQ_KEY] = str(revision)
    metadata[PREV_KEY] = prev
    if chain_format == 2 and not signed_stream(stream):
        metadata[CHAIN_KEY] = CHAIN_FORMAT
        record = _record_v2(stream, revision, event_id, type_, data_digest(data), metadata)
    elif chain_format in (1, 2):
        metadata.pop(CHAIN_KEY, None)
        record = _record_v1(stream, revision, event_id, type_, data_digest(data), metadata)
    else:
        raise ValueError(f"no chain format {chain_format}")
    digest = hashlib.sha256(record).hexdigest()
    metadata[HASH_KEY] = digest
    return digest
