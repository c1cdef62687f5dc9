"""A group commit of the SQLite store gives each write what it would get committed alone, one
after the other: the same results and refusals, the same rows, the same read model.

Random groups mixing conflicts, new streams, retries of the same event ids, several streams a
write, model changes (some refused), a compressed store's first write, and writes that fail
half-way (a row another writer left in the way), are written once through ``_write_group`` and
once write by write through ``_write_sync`` on a second file; the outcomes and the files
(less commit times) must match, and the store's cache of stream ids must name what the file
holds after every rolled-back try.
"""

from __future__ import annotations

import json
import random
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentjournal.store.contract import AppendRequest, AppendResult, Expected, NewEvent, StreamState
from agentjournal.store.model import (
    ModelAdd,
    ModelChange,
    ModelClear,
    ModelCopy,
    ModelOp,
    ModelRemove,
)
from agentjournal.store.sqlite import SQLiteEventStore

_STREAMS = [f"AgentSession-t{i}" for i in range(3)] + [
    f"AgentSubsession-t{i}-sub" for i in range(3)
]


class _Writes:
    """Random writes against what the generator believes the heads are."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.heads: dict[str, int] = {}
        self.ids: list[uuid.UUID] = []
        self.next_index: dict[str, int] = {}

    def event(self) -> NewEvent:
        rng = self.rng
        if self.ids and rng.random() < 0.15:
            id_ = rng.choice(self.ids)  # a retry's id (or a duplicate on another stream)
        else:
            id_ = uuid.UUID(int=rng.getrandbits(128))
            self.ids.append(id_)
        text = "hello world " * rng.choice([1, 5, 50])
        return NewEvent("t.x", json.dumps({"text": text}).encode(), {"k": "v"}, id_)

    def expected(self, stream: str) -> Expected:
        rng, head = self.rng, self.heads.get(stream)
        pick = rng.random()
        if pick < 0.6 and head is not None:
            return head
        if pick < 0.7:
            return StreamState.NO_STREAM
        if pick < 0.8:
            return StreamState.ANY
        if pick < 0.85:
            return StreamState.EXISTS
        return rng.randint(0, 6)

    def model(self, stream: str, count: int) -> ModelChange | None:
        rng = self.rng
        pick = rng.random()
        if pick < 0.05:
            return None
        tree = "AgentSession-" + stream.split("-")[1]
        ops: list[ModelOp] = []
        if pick < 0.8:  # the engine's kind: adds at the next indexes
            base = self.heads.get(stream, -1)
            for k in range(count):
                index = self.next_index.get(tree, 0)
                self.next_index[tree] = index + 1
                ops.append(ModelAdd(index, stream, base + 1 + k, 0, f'{{"i":{index}}}', True))
            if rng.random() < 0.1 and self.next_index.get(tree):
                ops.append(ModelClear(rng.randint(0, self.next_index[tree])))
            return ModelChange(tree, ops)
        for _ in range(rng.randint(0, 3)):  # anything, including what the store refuses
            kind = rng.random()
            if kind < 0.6:
                ops.append(
                    ModelAdd(
                        rng.randint(-1, 8),
                        rng.choice([stream, *_STREAMS, "AgentSession-nowhere"]),
                        rng.randint(0, 6),
                        rng.randint(0, 1),
                        '{"t":"hello there"}',
                        rng.random() < 0.8,
                    )
                )
            elif kind < 0.8:
                ops.append(ModelRemove(rng.randint(-1, 8), stream, rng.randint(0, 6), 0))
            elif kind < 0.9:
                ops.append(ModelClear(rng.randint(0, 4)))
            else:
                source = rng.choice(_STREAMS[:3])
                ops.insert(
                    0, ModelCopy(source, rng.randint(0, 5), {source: self.heads.get(source, 0)})
                )
        return ModelChange(rng.choice([tree, *_STREAMS]), ops)

    def write(self) -> list[AppendRequest]:
        rng = self.rng
        streams = (
            rng.sample(_STREAMS, rng.randint(2, 3))
            if rng.random() < 0.3
            else [rng.choice(_STREAMS)]
        )
        requests = []
        for stream in streams:
            events = [
                self.event()
                for _ in range(rng.choice([0, 1, 1, 2, 3] if len(streams) == 1 else [1, 2]))
            ]
            requests.append(
                AppendRequest(
                    stream, events, self.expected(stream), self.model(stream, len(events))
                )
            )
        return requests


def _described(outcome: list[AppendResult] | BaseException) -> Any:
    if isinstance(outcome, BaseException):
        return type(outcome).__name__, str(outcome).split(".db")[-1]
    return [(r.stream, r.revision, r.position) for r in outcome]


def _contents(db: sqlite3.Connection) -> Any:
    return (
        db.execute("SELECT id, name, head, tree, modelled FROM streams ORDER BY id").fetchall(),
        db.execute(
            "SELECT position, stream_id, revision, id, type, data, metadata, dictionary "
            "FROM events ORDER BY position"
        ).fetchall(),
        db.execute("SELECT * FROM items ORDER BY tree, idx").fetchall(),
        db.execute("SELECT * FROM trees ORDER BY tree").fetchall(),
        db.execute("SELECT id, content FROM dictionaries ORDER BY id").fetchall(),
    )


def _in_the_way(path: Path, rng: random.Random) -> None:
    """Another writer's row at the revision after a stream's head (its head not moved): the
    next write to that stream fails half-way, on the unique (stream, revision) index."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        rows = db.execute("SELECT id, head FROM streams ORDER BY id").fetchall()
        if rows:
            stream_id, head = rng.choice(rows)
            db.execute(
                "INSERT OR IGNORE INTO events(stream_id, revision, id, type, data, metadata, "
                "recorded_at) VALUES (?, ?, ?, 'x', x'7b7d', x'7b7d', 0)",
                (stream_id, head + 1, uuid.UUID(int=rng.getrandbits(128)).bytes),
            )
    finally:
        db.close()


def _ids_cached_truly(store: SQLiteEventStore, db: sqlite3.Connection) -> bool:
    cached = dict(store._writes._stream_ids)
    held = dict(db.execute("SELECT name, id FROM streams").fetchall())
    # A stale id is allowed only for a name the file does not hold (a creation rolled back),
    # which _claim's name check then misses; a held name must be cached as what it is.
    return all(held.get(name) in (None, number) for name, number in cached.items())


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize(
    "seed", [0, *(pytest.param(seed, marks=pytest.mark.slow) for seed in range(1, 12))]
)
def test_a_group_commit_gives_each_write_what_it_gets_alone(
    tmp_path: Path, seed: int, compress: bool
) -> None:
    grouped_path, alone_path = tmp_path / "grouped.db", tmp_path / "alone.db"
    grouped = SQLiteEventStore.connect(grouped_path, compress=compress)
    alone = SQLiteEventStore.connect(alone_path, compress=compress)
    writes = _Writes(seed)
    in_the_way = random.Random(seed)
    try:
        for _ in range(50):
            group = [writes.write() for _ in range(writes.rng.randint(2, 5))]
            if in_the_way.random() < 0.15:
                _in_the_way(grouped_path, random.Random(seed))
                _in_the_way(alone_path, random.Random(seed))
            outcomes = grouped._writes._write_group(group)
            one_by_one: list[list[AppendResult] | BaseException] = []
            for requests in group:
                try:
                    one_by_one.append(alone._writes._write_sync(requests))
                except Exception as error:  # compared, not handled
                    one_by_one.append(error)
            assert [_described(o) for o in outcomes] == [_described(o) for o in one_by_one]
            for outcome in outcomes:
                if not isinstance(outcome, BaseException):
                    for result in outcome:
                        writes.heads[result.stream] = result.revision
            assert _ids_cached_truly(grouped, grouped._db)
        recorded = "SELECT count(*) FROM events"
        assert grouped._db.execute(recorded).fetchone() == alone._db.execute(recorded).fetchone()
        assert _contents(grouped._db) == _contents(alone._db)
    finally:
        grouped.close_sync()
        alone.close_sync()
