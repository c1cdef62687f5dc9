"""The chain check reads an event's chain keys from its metadata's own copy: whatever
mapping holds the metadata (the read-only proxy of every record, or a plain dict), it
finds the same first problem and leaves the same call markers, and the events it passes
are those whose hash the reference chain functions recompute.

The bundles are the recorded sessions of ``ledger_sessions.py``, damaged by the
generators of ``test_verify_parallel.py`` and by edits of each chain key.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from agentjournal.audit.verify._integrity import Markers, first_problem
from agentjournal.audit.verify._parse import bundle_records
from agentjournal.ledger.chain import HASH_KEY, chain_hash
from agentjournal.records import Record
from ledger_sessions import record, stream_of
from test_verify_parallel import DAMAGE

BUNDLES = record()


def _metadata(bundle: dict[str, Any], prefix: str, at: int) -> dict[str, str]:
    metadata: dict[str, str] = stream_of(bundle, prefix)["events"][at]["metadata"]
    return metadata


def hash_removed(bundle: dict[str, Any]) -> None:
    del _metadata(bundle, "AgentSession-", 4)[HASH_KEY]


def chain_format_unknown(bundle: dict[str, Any]) -> None:
    _metadata(bundle, "AgentSession-", 3)["aj.chain"] = "3"


def format_2_on_the_ledger(bundle: dict[str, Any]) -> None:
    _metadata(bundle, "AgentLedger-", 0)["aj.chain"] = "2"


def prev_changed(bundle: dict[str, Any]) -> None:
    _metadata(bundle, "AgentSession-", 2)["aj.prev"] = "1" * 64


def seq_missing(bundle: dict[str, Any]) -> None:
    del _metadata(bundle, "AgentSubsession-", 1)["aj.seq"]


KEYS: dict[str, Callable[[dict[str, Any]], None]] = {
    "hash removed": hash_removed,
    "chain format unknown": chain_format_unknown,
    "format 2 on the ledger": format_2_on_the_ledger,
    "prev changed": prev_changed,
    "seq missing": seq_missing,
}
ALL_DAMAGE = {**DAMAGE, **KEYS}


def _with_dict_metadata(event: Record) -> Record:
    """The record with its metadata a plain dict (as a caller could build one)."""
    copied: Record = object.__new__(Record)
    vars(copied).update(vars(event), metadata=dict(event.metadata))
    return copied


def _checked(streams: dict[str, list[Record]]) -> tuple[list[Any], dict[tuple[str, int], Any]]:
    markers = Markers()
    found = [first_problem(n, stream, 0, len(stream), markers) for n, stream in streams.items()]
    placed = {
        (name, event.revision): markers[id(event)]
        for name, stream in streams.items()
        for event in stream
        if id(event) in markers
    }
    return found, placed


@pytest.mark.parametrize("name", ["guarded", "nested"])
@pytest.mark.parametrize("damage", ALL_DAMAGE)
def test_any_mapping_of_metadata_gives_the_same_problems(name: str, damage: str) -> None:
    bundle = copy.deepcopy(BUNDLES[name])
    ALL_DAMAGE[damage](bundle)
    streams = {n: list(s) for n, s in bundle_records(bundle).streams.items()}
    plain = {n: [_with_dict_metadata(e) for e in s] for n, s in streams.items()}
    assert all(type(e.metadata) is dict for s in plain.values() for e in s)
    proxied = _checked(streams)
    assert proxied == _checked(plain)
    if name == "guarded":  # the session the generators were written for: each is found
        assert (damage == "intact") is not any(proxied[0])


@pytest.mark.parametrize("damage", ALL_DAMAGE)
def test_the_events_passed_recompute_with_the_reference_chain(damage: str) -> None:
    bundle = copy.deepcopy(BUNDLES["guarded"])
    ALL_DAMAGE[damage](bundle)
    streams = bundle_records(bundle).streams
    for name, stream in streams.items():
        found = first_problem(name, stream, 0, len(stream))
        passed = len(stream) if found is None else found[0]
        for event in stream[:passed]:
            recomputed = chain_hash(
                name, event.revision, event.id, event.type, event.data_sha256, event.metadata
            )
            assert recomputed == event.metadata[HASH_KEY]
        if found is not None and found[2] == "the hash does not match the event":
            event = stream[found[0]]
            recomputed = chain_hash(
                name, event.revision, event.id, event.type, event.data_sha256, event.metadata
            )
            assert recomputed != event.metadata[HASH_KEY]
