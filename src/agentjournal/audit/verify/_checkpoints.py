"""The checkpoints stage: the trusted keys and the rotations they lead to, each checkpoint's
signature and place, the heads it names, and what the checkpoints together cover
(:func:`check_checkpoints`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from agentjournal import events
from agentjournal._text import plural
from agentjournal.audit.verify._report import Report
from agentjournal.audit.verify._tree import Tree
from agentjournal.errors import InvalidInput
from agentjournal.ledger.chain import CHAIN_KEYS, HASH_KEY, PREV_KEY
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import KEY_ROTATED, KeyRotation, signed_event_id, trusted_closure
from agentjournal.records import Record
from agentjournal.streams import KEYS_STREAM


def _trusted_keys(
    report: Report, tree: Tree, trusted: Mapping[str, Ed25519PublicKey]
) -> Mapping[str, Ed25519PublicKey]:
    """The caller's keys and those that valid rotations on ``AgentKeys`` lead to."""
    rotations: list[KeyRotation] = []
    for event in tree.streams.get(KEYS_STREAM, []):
        try:
            if event.type != KEY_ROTATED:
                raise InvalidInput(f"{event.type} does not belong on {KEYS_STREAM}")
            if _unchained(event.metadata) != _ROTATION_METADATA:
                raise InvalidInput("a key rotation carries metadata it was not written with")
            rotation = KeyRotation.decode(event.body)
            if event.id != str(signed_event_id(KEYS_STREAM, rotation.signature)):
                raise InvalidInput("the rotation's event id is not the one its signature gives")
            rotations.append(rotation)
        except InvalidInput as error:
            report.fail("checkpoints", event.stream, event.revision, str(error))
    keys = trusted_closure(trusted, rotations)
    if rotations:
        added = sorted(set(keys) - set(trusted))
        report.lines.append(
            f"keys: {plural(len(trusted), 'trusted key')} given; "
            f"{plural(len(rotations), 'rotation')} recorded; followed to "
            + (", ".join(added) if added else "no other key")
        )
    return keys


_ROTATION_METADATA: Final = {events.SCHEMA_VERSION_KEY: events.SCHEMA_VERSION_VALUE}


def _unchained(metadata: Mapping[str, str]) -> dict[str, str]:
    """Metadata without its chain keys (``aj.seq``, ``aj.prev``, ``aj.hash``)."""
    return {k: v for k, v in metadata.items() if k not in CHAIN_KEYS}


def check_checkpoints(
    report: Report,
    tree: Tree,
    trusted: Mapping[str, Ed25519PublicKey],
    allow_uncovered: bool,
    not_before: str | None,
) -> None:
    keys = _trusted_keys(report, tree, trusted)
    signed: list[tuple[Record, Checkpoint]] = []
    foreign: list[tuple[Record, str]] = []  # checkpoints by keys outside the trusted chain
    for event in tree.streams.get(tree.ledger_stream, []):
        where = ("checkpoints", event.stream, event.revision)
        if event.type != CHECKPOINT:
            report.fail(*where, f"{event.type} does not belong on the checkpoint stream")
            continue
        try:
            checkpoint = Checkpoint.decode(event.body)
        except InvalidInput as error:
            report.fail(*where, str(error))
            continue
        public = keys.get(checkpoint.key_id)
        if public is None:
            report.lines.append(
                f"  warning: {event.stream}@{event.revision}: signed by {checkpoint.key_id}, "
                "which is not a trusted key nor one a trusted key rotated to: not counted"
            )
            foreign.append((event, checkpoint.key_id))
            continue
        if not checkpoint.verify(public):
            report.fail(*where, "the signature is invalid")
            continue
        if checkpoint.session_id != tree.session_id:
            report.fail(*where, "a checkpoint of another session")
            continue
        if checkpoint.sequence != event.revision or checkpoint.previous != event.metadata.get(
            PREV_KEY
        ):
            report.fail(
                *where,
                f"signed for ledger revision {checkpoint.sequence}: the checkpoints were "
                "reordered or spliced",
            )
            continue
        if _unchained(event.metadata) != dict(checkpoint.metadata):
            report.fail(*where, "the checkpoint event's metadata is not what was signed")
            continue
        if event.id != str(signed_event_id(event.stream, checkpoint.signature)):
            report.fail(*where, "the checkpoint's event id is not the one its signature gives")
            continue
        for stream, (revision, digest) in checkpoint.heads.items():
            found = tree.streams.get(stream, [])
            if revision >= len(found):
                report.fail(
                    "checkpoints",
                    stream,
                    len(found),
                    f"the checkpoint at {event.stream}@{event.revision} names revision "
                    f"{revision}: the stream was truncated",
                )
            elif found[revision].metadata.get(HASH_KEY) != digest:
                report.fail(
                    "checkpoints",
                    stream,
                    revision,
                    f"the hash differs from the checkpoint at {event.stream}@{event.revision}",
                )
        signed.append((event, checkpoint))
    untrusted = (
        f"; {', '.join(sorted({key for _, key in foreign}))} is not a trusted key"
        if foreign
        else ""
    )
    report.foreign = sorted({key for _, key in foreign})
    if not signed:
        if not allow_uncovered:
            at = foreign[0][0].revision if foreign else None
            report.fail(
                "checkpoints",
                tree.ledger_stream,
                at,
                f"no trusted checkpoint{untrusted}",
                untrusted=True,
            )
        report.lines.append("checkpoints: none trusted (tail truncation is not detectable)")
        return
    # Each checkpoint was checked against the chains: what any of them covers is
    # covered (writers in several processes sign what each of them knew).
    covered: dict[str, int] = {}
    for _, checkpoint in signed:
        for stream, revision in _covered(tree, checkpoint).items():
            covered[stream] = max(covered.get(stream, -1), revision)
    uncovered = [
        (name, covered.get(name, -1) + 1)
        for name, stream in tree.streams.items()
        if name not in (tree.ledger_stream, KEYS_STREAM) and covered.get(name, -1) < len(stream) - 1
    ]
    last_event, last = signed[-1]  # the newest by sequence: the ledger's order is signed
    if tree.head(tree.ledger_stream) is not last_event:
        uncovered.append((tree.ledger_stream, last_event.revision + 1))
    names = sorted({c.key_id for _, c in signed})
    report.signers = names
    report.lines.append(
        f"checkpoints: {plural(len(signed), 'checkpoint')} signed by {', '.join(names)}; "
        f"the newest at "
        f"{last_event.stream}@{last_event.revision}, signed {last.signed_at}"
    )
    if not_before is not None and _instant(last.signed_at) < _instant(not_before):
        report.fail(
            "checkpoints",
            tree.ledger_stream,
            last_event.revision,
            f"the newest checkpoint ({last.signed_at}) is older than {not_before}: the session "
            "was cut back",
        )
    for name, revision in uncovered:
        message = f"events after the last checkpoint (not covered by a signature{untrusted})"
        if allow_uncovered:
            report.lines.append(f"  warning: {name}@{revision}: {message}")
            report.uncovered += len(tree.streams[name]) - revision
        else:
            report.fail("checkpoints", name, revision, message)


def _instant(text: str) -> datetime:
    """An RFC 3339 time; naive times are UTC."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _covered(tree: Tree, checkpoint: Checkpoint) -> dict[str, int]:
    """The last covered revision of each stream under ``checkpoint``.

    A covered closing event covers the whole subsession it closed: from the heads the
    checkpoint names, each stream whose covered part grows passes that on to the
    subsessions its newly covered closing events close (from an index built once per
    tree, so each closing event is looked at once per checkpoint, not once per pass
    over every event). A subsession's coverage only grows, up to its closing twin.
    """
    covered = {stream: revision for stream, (revision, _) in checkpoint.heads.items()}
    closers = tree.closers()
    done = dict.fromkeys(closers, 0)  # per stream: how many of its closers were looked at
    pending = [name for name in closers if name in covered]
    while pending:
        name = pending.pop()
        found, upto = closers[name], covered.get(name, -1)
        position = done[name]
        while position < len(found) and found[position][0] <= upto:
            _, child, twin = found[position]
            position += 1
            if covered.get(child, -1) < twin:
                covered[child] = twin
                if child in closers:
                    pending.append(child)
        done[name] = position
    return covered
