"""Catalog benchmark: ``agentjournal sessions`` on 10,000 sessions, first build and after.

Run: ``python bench/catalog.py`` (``--quick`` for a smoke run: 200 sessions).

The store is a SQLite file of N small sessions shaped like real ones: one session is
written by the SDK's ``Runner`` (``ScriptedModel``, offline) through a signing journal —
triage hands off to billing, billing looks an order up and answers: a session stream, a
subsession, a signed checkpoint, 15 events — and its events are copied N times under new
session ids, each copy re-chained (``aj.prev``/``aj.hash`` recomputed for its streams)
and its checkpoint re-signed over its own heads, many sessions per transaction. That
makes the store quickly; every copy is what a real run writes, so the catalog folds
and checks it as it would a real one.

Cases (each a fresh process-level call of :func:`agentjournal.read.catalog.refresh`, with the
signing key trusted, so every checkpoint's signature is checked once):

  first build       the store never catalogued: read the global order, fold, save
  no change         the next call: load the saved state, find nothing new
  after 10 new      ten more sessions written since: load, fold those, save
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from agents import Agent, RunConfig, Runner, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from _common import run_publishing, table
from agentjournal import Journal
from agentjournal._digests import data_digest
from agentjournal.ledger import SigningKey
from agentjournal.ledger.chain import GENESIS, HASH_KEY, PREV_KEY, SEQ_KEY, chain_hash
from agentjournal.ledger.checkpoints import CHECKPOINT, Checkpoint
from agentjournal.ledger.keys import signed_event_id
from agentjournal.read import catalog
from agentjournal.store import open_store
from agentjournal.store.contract import (
    AppendRequest,
    EventStore,
    NewEvent,
    RecordedEvent,
    StreamState,
)
from agentjournal.store.contract import event_id as derived_id

TEMPLATE = "tmpl-00000000"
PER_COMMIT = 50  # sessions per append_many transaction while building the store
CONFIG = RunConfig(tracing_disabled=True)


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: charged twice, 12.50 EUR each"


def support() -> Agent[Any]:
    billing = Agent[Any](
        name="billing",
        model=ScriptedModel(
            [
                [function_call("lookup_order", {"order_id": "42"}, call_id="t1")],
                [assistant_message("You were charged twice; I refunded one.", item_id="m1")],
            ]
        ),
        tools=[lookup_order],
    )
    return Agent[Any](
        name="triage",
        model=ScriptedModel([[function_call("transfer_to_billing", {}, call_id="h1")]]),
        handoffs=[billing],
    )


async def template(uri: str, key: SigningKey) -> list[RecordedEvent]:
    """One real session, written by the Runner; its events in global order."""
    async with Journal.open(uri, signing_key=key) as journal:
        session = journal.session(TEMPLATE, app_name="bench", user_id="u-1")
        await Runner.run(
            support(), "Why was I charged twice?", session=session, hooks=session, run_config=CONFIG
        )
        return [e for e in await journal.store.read_all() if TEMPLATE in e.stream]


def copy_of(
    events: Sequence[RecordedEvent],
    session_id: str,
    key: SigningKey,
    *,
    template: str = TEMPLATE,
    words: Mapping[str, str] | None = None,
) -> list[AppendRequest]:
    """The template's events for ``session_id``: one request per stream, re-chained, the
    checkpoint re-signed over the copy's heads; each of ``words`` replaced by its value
    in every event's data and metadata (placeholders the template was written with)."""
    streams: dict[str, list[NewEvent]] = {}
    hashes: dict[str, list[str]] = {}
    swaps = [(template, session_id), *(words or {}).items()]
    byte_swaps = [(old.encode(), new.encode()) for old, new in swaps]
    for event in events:
        stream = event.stream.replace(template, session_id)
        data = event.data
        for old_bytes, new_bytes in byte_swaps:
            data = data.replace(old_bytes, new_bytes)
        metadata = {}
        for k, v in event.metadata.items():
            if k not in (SEQ_KEY, PREV_KEY, HASH_KEY):
                for old, new in swaps:
                    v = v.replace(old, new)
                metadata[k] = v
        revision = len(streams.setdefault(stream, []))
        chain = hashes.setdefault(stream, [])
        prev = chain[-1] if chain else GENESIS
        new_id = derived_id("bench", session_id, stream, revision)
        if event.type == CHECKPOINT:
            signed = Checkpoint.decode(json.loads(event.data))
            heads = {
                name.replace(template, session_id): (
                    rev,
                    hashes[name.replace(template, session_id)][rev],
                )
                for name, (rev, _) in signed.heads.items()
            }
            checkpoint = Checkpoint.sign(
                key,
                session_id,
                heads,
                datetime.now(UTC),
                sequence=revision,
                previous=prev,
                metadata=metadata,
            )
            data = checkpoint.encode()
            new_id = signed_event_id(stream, checkpoint.signature)
        metadata[SEQ_KEY] = str(revision)
        metadata[PREV_KEY] = prev
        metadata[HASH_KEY] = chain_hash(
            stream, revision, str(new_id), event.type, data_digest(data), metadata
        )
        chain.append(metadata[HASH_KEY])
        streams[stream].append(NewEvent(event.type, data, metadata, new_id))
    return [
        AppendRequest(stream, batch, StreamState.NO_STREAM) for stream, batch in streams.items()
    ]


async def fill(
    store: EventStore, events: Sequence[RecordedEvent], key: SigningKey, first: int, count: int
) -> None:
    for start in range(first, first + count, PER_COMMIT):
        requests: list[AppendRequest] = []
        for number in range(start, min(first + count, start + PER_COMMIT)):
            requests.extend(copy_of(events, f"bench-{number:06d}", key))
        await store.append_many(requests)


async def timed(
    store: EventStore, keys: dict[str, Any]
) -> tuple[tuple[float, float], catalog.Listing]:
    """Wall and CPU seconds of one call (CPU: this machine's other load does not count)."""
    started, cpu = time.perf_counter(), time.process_time()
    listing = await catalog.refresh(store, keys=keys)
    return (time.perf_counter() - started, time.process_time() - cpu), listing


async def run(sessions: int) -> list[list[str]]:
    key = SigningKey.generate()
    keys = {key.key_id: key.public_key}
    with tempfile.TemporaryDirectory() as folder:
        uri = f"sqlite:///{os.path.join(folder, 'catalog.db')}"
        events = await template(uri, key)
        store = await open_store(uri)
        try:
            started = time.perf_counter()
            await fill(store, events, key, 0, sessions)
            built = time.perf_counter() - started
            total = len(await store.read_all(limit=None)) if sessions <= 1000 else None
            print(
                f"store: {sessions:,} sessions of {len(events)} events "
                f"({len({e.stream for e in events})} streams each) written in {built:.1f} s"
                + (f"; {total:,} events" if total else ""),
                file=sys.stderr,
            )
            first, listing = await timed(store, keys)
            assert len(listing.rows) == sessions + 1, len(listing.rows)
            states = {row.integrity.state for row in listing.rows}
            assert states == {"verified"}, states
            state = len(await _state(store))
            again, unchanged = await timed(store, keys)
            assert unchanged.folded == 0
            await fill(store, events, key, sessions, 10)
            after, grown = await timed(store, keys)
            assert len(grown.rows) == sessions + 11
        finally:
            await store.close()
    return [
        ["first build", *_seconds(first), f"{listing.folded:,}", f"{state / 1e6:.1f} MB state"],
        ["no change", *_seconds(again), "0", "load only"],
        ["after 10 new", *_seconds(after), f"{grown.folded:,}", "load, fold, save"],
    ]


def _seconds(times: tuple[float, float]) -> list[str]:
    return [f"{times[0]:.3f}", f"{times[1]:.3f}"]


async def _state(store: EventStore) -> bytes:
    from agentjournal.read import projections

    saved = await projections.load(store, catalog.NAME)
    return saved.state if saved is not None else b""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 sessions, for a smoke run")
    parser.add_argument("--sessions", type=int, default=10_000, help="sessions (default: 10,000)")
    args = parser.parse_args(argv)
    rows = asyncio.run(run(200 if args.quick else args.sessions))
    print(table(["case", "wall s", "cpu s", "events folded", "note"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("catalog", main, sys.argv[1:]))
