"""The catalog's cheap ledger check: chain links, the newest checkpoint against the heads
seen, and the status a row shows (pure).

Every event's chain hash is recomputed and its ``aj.prev`` must link its stream's previous
``aj.hash``; the newest checkpoint's signature must be valid under a trusted key over heads
equal to what the projection saw, and no event of the tree may come after it in the global
order (a tail no checkpoint can cover). ``agentjournal verify`` remains the full check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from agentjournal._digests import data_digest
from agentjournal.ledger.chain import (
    CHAIN_FORMAT,
    CHAIN_KEY,
    GENESIS,
    HASH_KEY,
    PREV_KEY,
    SEQ_KEY,
    chain_format,
    chain_hash,
    v2_record,
)
from agentjournal.ledger.checkpoints import Checkpoint
from agentjournal.ledger.integrity import Integrity
from agentjournal.records import DamagedEvent, stored_columns
from agentjournal.streams import ledger_stream

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentjournal.store.contract import RecordedEvent


def chain_problem(
    head: list[Any] | None, event: RecordedEvent, metadata: Mapping[str, str] | None = None
) -> str | None:
    """What breaks ``event``'s link to its stream's head (``[session, revision, hash]``,
    None before the stream's first event); None when it links. ``metadata``: the event's,
    when the caller holds it already."""
    revision, previous = (head[1], head[2]) if head is not None else (-1, GENESIS)
    if metadata is None:
        metadata = event.metadata
    here = event.revision
    if here != revision + 1:
        return f"revision {here} follows {revision}"
    if metadata.get(SEQ_KEY) != str(here) or HASH_KEY not in metadata:
        return "not hash-chained"
    if metadata.get(PREV_KEY) != previous:
        return "aj.prev does not link the previous event's hash"
    if chain_format(metadata) is None:  # no record to hash: chain_hash would refuse it
        return "the event names a chain format this version does not know"
    digest = chain_hash(
        event.stream, here, event.id_text, event.type, data_digest(event.data), metadata
    )
    if digest != metadata[HASH_KEY]:
        return "the event's hash does not match its content"
    return None


def unreadable(event: RecordedEvent) -> str:
    """What keeps ``event``'s chain link from being checked, in ``Record.of``'s words (its
    id or its metadata failing to read); the check fails on it anyway."""
    try:
        stored_columns(event)
    except DamagedEvent as damaged:
        return damaged.message
    return "the event cannot be read"


_sha256: Final = hashlib.sha256


def linked(
    head: list[Any] | None, event: RecordedEvent, metadata: Mapping[str, str], digest: str
) -> bool:
    """Whether ``event`` (its ``metadata`` and ``aj.hash``, ``digest``, at hand) links its
    stream's head and its chain hash holds, checked with the least work; False also for
    what it leaves to :func:`chain_problem` (a chain format 1 record, a record orjson
    cannot print), which then says what is wrong, if anything.

    A format 2 record printed by orjson in one call (``ledger.chain.v2_record``;
    ``tests/test_catalog_fast_fold.py`` holds the two checks to the same answer).
    """
    revision, previous = (head[1], head[2]) if head is not None else (-1, GENESIS)
    here = event.revision
    if (
        here != revision + 1
        or metadata.get(PREV_KEY) != previous
        or metadata.get(CHAIN_KEY) != CHAIN_FORMAT
        or metadata.get(SEQ_KEY) != str(here)
        or type(here) is not int
    ):
        return False
    # A store's metadata is a read-only proxy, whose own copy is its dict's copy.
    covered = metadata.copy() if type(metadata) is MappingProxyType else dict(metadata)
    covered.pop(HASH_KEY, None)
    data = _sha256(event.data).hexdigest()
    printed = v2_record(event.stream, here, event.id_text, event.type, data, covered)
    return printed is not None and _sha256(printed).hexdigest() == digest


def checkpoint_problem(
    streams: Mapping[str, list[Any]],
    checkpoint: Checkpoint,
    event: RecordedEvent,
    session_id: str,
    mark: dict[str, Any],
) -> str | None:
    """What is wrong with a checkpoint against the heads seen so far (None: nothing yet);
    heads below what was seen go to ``mark["pending"]``."""
    if checkpoint.session_id != session_id:
        return "a checkpoint of another session"
    if checkpoint.sequence != event.revision or checkpoint.previous != event.metadata.get(PREV_KEY):
        return f"signed for ledger revision {checkpoint.sequence}: reordered or spliced"
    for stream, (revision, digest) in sorted(checkpoint.heads.items()):
        seen = streams.get(stream)
        if seen is None or seen[0] != session_id:
            return f"it names {stream}, which the store does not hold for this session"
        if revision > seen[1]:
            return f"it names {stream}@{revision}: the stream ends at @{seen[1]} (truncated)"
        if revision == seen[1]:
            if digest != seen[2]:
                return f"{stream}@{revision} is not what the checkpoint signed"
        else:
            mark["pending"].append([stream, revision, digest])
    return None


def ledger_status(
    session_id: str, row: Mapping[str, Any], trusted: Mapping[str, Ed25519PublicKey]
) -> Integrity:
    """What the cheap check says of a session, as one of the four integrity states."""
    if row["broken"] is not None:
        return Integrity("failed", problem=f"{row['broken']} (broken chain)")
    mark = row["ck"]
    if mark is None:
        return Integrity("unsigned")
    where = f"{ledger_stream(session_id)}@{mark['rev']}"
    if mark.get("problem") is not None:
        return Integrity("failed", problem=f"{where}: {mark['problem']}")
    tail = _uncovered(row.get("tails", {}), trusted)
    if tail is not None:
        return Integrity(
            "failed",
            problem=f"{tail}: events after the last checkpoint (not covered by a signature)",
        )
    if mark["key"] not in trusted or mark["sig"] is None:
        return Integrity("untrusted", (mark["key"],))
    if mark["sig"] is False:
        return Integrity("failed", problem=f"{where}: the signature is invalid")
    return Integrity("verified", (mark["key"],))


def _uncovered(tails: Mapping[str, Any], trusted: Mapping[str, Any]) -> str | None:
    """The first event after the newest checkpoint of a trusted key (None: nothing after
    it, or no trusted key signed): what ``verify`` reports uncovered."""
    mine = [tail for key, tail in tails.items() if key in trusted]
    if not mine or any(tail is None for tail in mine):
        return None
    return str(max(mine)[1])
