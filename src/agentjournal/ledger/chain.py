"""Per-stream hash chains (pure).

Every event agentjournal writes carries three metadata keys: ``aj.seq`` (its
revision: the position in its stream's chain), ``aj.prev`` (the previous
event's hash; 64 zeros for revision 0) and ``aj.hash``:

    sha256( JCS({"stream", "revision", "id", "type", "data_sha256", "metadata"}) )

where JCS is RFC 8785 canonical JSON, ``data_sha256`` the hex SHA-256 of the
event's data, and ``metadata`` every metadata key except ``aj.hash`` (so
``aj.seq`` and ``aj.prev`` are covered). Because the data enters only as a
digest, a payload can be withheld from an export and the chain still verifies.
Appends are at exact revisions, so each stream's chain is linear.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, Final

import rfc8785

from agentjournal._digests import data_digest
from agentjournal.errors import InvalidInput

__all__ = ["CHAIN_KEYS", "GENESIS", "HASH_KEY", "PREV_KEY", "SEQ_KEY", "chain_hash", "jcs", "seal"]

SEQ_KEY: Final = "aj.seq"
PREV_KEY: Final = "aj.prev"
HASH_KEY: Final = "aj.hash"
GENESIS: Final = "0" * 64
CHAIN_KEYS: Final = frozenset({SEQ_KEY, PREV_KEY, HASH_KEY})


def jcs(value: Any) -> bytes:
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
        return jcs(record)
    except (UnicodeEncodeError, rfc8785.CanonicalizationError):
        raise _not_unicode(record["stream"], record["revision"]) from None


def _not_unicode(stream: str, revision: int) -> InvalidInput:
    # A lone surrogate: JSON text can hold one, UTF-8 (and so JCS) cannot.
    return InvalidInput(
        f"{stream}@{revision}: the event's id, type or metadata is not "
        "valid Unicode text (a lone surrogate); it cannot be chained"
    )


# The compact sorted JSON of a metadata object, and of one string (``json.dumps`` with
# these settings, without its per-call set-up).
_metadata_json: Final = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True
).encode
_string_json: Final = json.encoder.encode_basestring


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
    if type(revision) is int and "".join(covered).isascii():
        # The record's JSON put together from its parts: the same bytes as
        # ``_record_bytes`` (its keys are ASCII and already in sorted order), without
        # building the record and sorting it per event — the verifier's hot path.
        try:
            encoded = (
                '{"data_sha256":'
                + _string_json(data_sha256)
                + ',"id":'
                + _string_json(event_id)
                + ',"metadata":'
                + _metadata_json(covered)
                + ',"revision":'
                + str(revision)
                + ',"stream":'
                + _string_json(stream)
                + ',"type":'
                + _string_json(type_)
                + "}"
            ).encode()
        except UnicodeEncodeError:
            raise _not_unicode(stream, revision) from None
        return hashlib.sha256(encoded).hexdigest()
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
