"""The conformance suite every EventStore must pass.

Subclass :class:`EventStoreConformance` once per backend in a ``Test*`` class
and provide two fixtures::

    class TestMyStore(EventStoreConformance):
        @pytest.fixture
        def store_uri(self, tmp_path) -> str | None:
            return "sqlite:///" + str(tmp_path / "events.db")   # None: no multi-process tests

        @pytest.fixture
        async def store(self, store_uri) -> AsyncIterator[EventStore]:
            store = await open_store(store_uri)
            yield store
            await store.close()

A store that keeps a read model (a ``read_model`` method, see
:mod:`agentjournal.store.contract`) is held to its promises by the ``model`` tests;
every other store must accept a request that carries a model change and store
its events exactly as without it.

``store_uri`` must reach the same store from another OS process (via
:func:`agentjournal.store.open_store`). Every test writes to streams with a
unique suffix and looks at global-order reads only for its own streams, so the
suite can run against a shared server that holds other data.

Requires pytest and pytest-asyncio (``asyncio_mode = "auto"``).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence

import pytest

from agentjournal.errors import ConcurrencyError, InvalidInput, StreamNotFound
from agentjournal.store.abilities import abilities_of
from agentjournal.store.contract import (
    MAX_EVENT_BYTES,
    AppendRequest,
    EventStore,
    ModelAdd,
    ModelChange,
    ModelClear,
    ModelCopy,
    ModelOp,
    ModelRemove,
    ModelSnapshot,
    NewEvent,
    RecordedEvent,
    StreamState,
    event_id,
    model_place,
)

__all__ = ["EventStoreConformance", "make_events"]


def make_events(count: int, *, prefix: str = "e", start: int = 0) -> list[NewEvent]:
    """Return ``count`` distinct events with JSON data and string metadata."""
    return [
        NewEvent(
            type="Tested",
            data=json.dumps({"n": n, "text": f"{prefix}-{n} ✓"}).encode(),
            metadata={"prefix": prefix, "n": str(n)},
            id=event_id("conformance", prefix, n),
        )
        for n in range(start, start + count)
    ]


async def _positions(store: EventStore, *streams: str) -> list[int]:
    return [e.position for stream in streams for e in await store.read(stream)]


def _same(recorded: Sequence[RecordedEvent], sent: Sequence[NewEvent]) -> None:
    assert [(e.id, e.type, e.data, dict(e.metadata)) for e in recorded] == [
        (e.id, e.type, e.data, dict(e.metadata)) for e in sent
    ]


async def _model(store: EventStore, tree: str) -> ModelSnapshot | None:
    model = abilities_of(store).read_model
    if model is None:
        pytest.skip("this store keeps no read model")
    return await model.read_model(tree)


def _visible(snapshot: ModelSnapshot | None) -> list[tuple[int, str, int, int, str]] | None:
    if snapshot is None:
        return None
    names = snapshot.names
    placed = [(i, *model_place(key), t) for i, key, t in snapshot.items]
    return [(i, names[s], r, p, t) for i, s, r, p, t in placed]


class EventStoreConformance:
    """Abstract conformance tests; see the module docstring for how to use it."""

    @pytest.fixture
    def store_uri(self) -> str | None:
        """A URI another process can open the same store with, or None."""
        return None

    @pytest.fixture
    async def store(self) -> EventStore:
        """An open store; subclasses must override this fixture."""
        raise NotImplementedError("subclass EventStoreConformance and provide a store fixture")

    @pytest.fixture
    def stream(self) -> str:
        """A stream name no other test uses."""
        return f"Conformance-{uuid.uuid4().hex}"

    # -- the read model (optional) ---------------------------------------------

    async def _modelled_write(self, store: EventStore, stream: str) -> tuple[str, str]:
        """A tree of two streams, written with model changes: two items, one on each."""
        child = f"{stream}-child"
        ops = [ModelAdd(0, stream, 0, 0, '{"a":1}'), ModelAdd(1, child, 0, 0, '{"b":2}')]
        await store.append_many(
            [
                AppendRequest(stream, make_events(1), StreamState.NO_STREAM, ModelChange(stream)),
                AppendRequest(
                    child,
                    make_events(1, prefix="c"),
                    StreamState.NO_STREAM,
                    ModelChange(stream, ops),
                ),
            ]
        )
        return stream, child

    async def test_model_changes_leave_events_unchanged(
        self, store: EventStore, stream: str
    ) -> None:
        tree, child = await self._modelled_write(store, stream)
        _same(await store.read(tree), make_events(1))
        _same(await store.read(child), make_events(1, prefix="c"))

    async def test_model_holds_the_visible_items(self, store: EventStore, stream: str) -> None:
        tree, child = await self._modelled_write(store, stream)
        snapshot = await _model(store, tree)
        assert _visible(snapshot) == [(0, tree, 0, 0, '{"a":1}'), (1, child, 0, 0, '{"b":2}')]
        assert snapshot is not None
        assert dict(snapshot.heads) == {tree: 0, child: 0}
        assert (snapshot.last.stream, snapshot.last.revision) == (tree, 0)
        assert snapshot.floor == -1

    async def test_model_removes_and_clears(self, store: EventStore, stream: str) -> None:
        tree, child = await self._modelled_write(store, stream)
        more = make_events(2, prefix="m")
        ops: list[ModelOp] = [
            ModelAdd(2, tree, 1, 0, "[2]"),
            ModelRemove(1, child, 0, 0),
            ModelAdd(3, tree, 2, 0, "[3]"),
        ]
        await store.append_many([AppendRequest(tree, more, 0, ModelChange(tree, ops))])
        assert _visible(await _model(store, tree)) == [
            (0, tree, 0, 0, '{"a":1}'),
            (2, tree, 1, 0, "[2]"),
            (3, tree, 2, 0, "[3]"),
        ]
        ops = [ModelClear(2), ModelAdd(1, tree, 3, 0, "[1]"), ModelAdd(4, tree, 3, 1, "[4]")]
        await store.append_many(
            [AppendRequest(tree, make_events(1, prefix="k"), 2, ModelChange(tree, ops))]
        )
        snapshot = await _model(store, tree)
        # Index 1 was added after a clear through 2: hidden, as a timeline hides it.
        assert _visible(snapshot) == [(3, tree, 2, 0, "[3]"), (4, tree, 3, 1, "[4]")]
        assert snapshot is not None
        assert snapshot.floor == 2

    async def test_model_falls_behind_for_good_after_a_plain_append(
        self, store: EventStore, stream: str
    ) -> None:
        tree, child = await self._modelled_write(store, stream)
        await store.append(child, make_events(1, prefix="foreign"), expected=0)
        assert await _model(store, tree) is None
        ops = [ModelAdd(2, tree, 1, 0, "[2]")]
        await store.append_many(
            [AppendRequest(tree, make_events(1, prefix="m"), 0, ModelChange(tree, ops))]
        )
        assert await _model(store, tree) is None  # the child's foreign event is not modelled

    async def test_model_of_a_stream_written_before_is_not_current(
        self, store: EventStore, stream: str
    ) -> None:
        await store.append(stream, make_events(1), expected=StreamState.NO_STREAM)
        ops = [ModelAdd(0, stream, 1, 0, "[0]")]
        await store.append_many(
            [AppendRequest(stream, make_events(1, prefix="m"), 0, ModelChange(stream, ops))]
        )
        assert await _model(store, stream) is None

    async def test_model_of_a_retry_is_applied_once(self, store: EventStore, stream: str) -> None:
        await self._modelled_write(store, stream)
        before = _visible(await _model(store, stream))
        await self._modelled_write(store, stream)  # the same ids at the same revisions
        assert _visible(await _model(store, stream)) == before

    async def test_model_of_a_conflict_is_not_applied(self, store: EventStore, stream: str) -> None:
        tree, child = await self._modelled_write(store, stream)
        before = _visible(await _model(store, tree))
        ops: list[ModelOp] = [ModelAdd(2, tree, 1, 0, "[2]"), ModelClear(1)]
        with pytest.raises(ConcurrencyError):
            await store.append_many(
                [
                    AppendRequest(tree, make_events(1, prefix="x"), 0, ModelChange(tree, ops)),
                    AppendRequest(child, make_events(1, prefix="y"), 5, ModelChange(tree)),
                ]
            )
        assert _visible(await _model(store, tree)) == before

    async def test_model_of_concurrent_writes_each_all_or_nothing(
        self, store: EventStore, stream: str
    ) -> None:
        trees = [f"{stream}-{n}" for n in range(6)]

        async def write(tree: str, expected: int | StreamState) -> None:
            ops = [ModelAdd(0, tree, 0, 0, f'"{tree}"')]
            await store.append_many(
                [AppendRequest(tree, make_events(1), expected, ModelChange(tree, ops))]
            )

        # Concurrent writes may share a transaction (group commit): the conflicting ones
        # change nothing, the others all land with their model changes.
        outcomes = await asyncio.gather(
            *(write(t, StreamState.NO_STREAM if n % 2 else 3) for n, t in enumerate(trees)),
            return_exceptions=True,
        )
        for n, (tree, outcome) in enumerate(zip(trees, outcomes, strict=True)):
            if n % 2:
                assert outcome is None
                assert _visible(await _model(store, tree)) == [(0, tree, 0, 0, f'"{tree}"')]
            else:
                assert isinstance(outcome, ConcurrencyError)
                assert await _model(store, tree) is None

    async def _copied(
        self, store: EventStore, source: str, heads: dict[str, int], *, below: int = 2
    ) -> str:
        """A new tree started as a copy of ``source``'s rows below ``below`` (a branch)."""
        branch = f"{source}-branch"
        await store.append_many(
            [
                AppendRequest(
                    branch,
                    make_events(1, prefix="b"),
                    StreamState.NO_STREAM,
                    ModelChange(branch, [ModelCopy(source, below, heads)]),
                )
            ]
        )
        return branch

    async def test_model_copy_starts_a_tree_as_another_s_prefix(
        self, store: EventStore, stream: str
    ) -> None:
        tree, child = await self._modelled_write(store, stream)
        ops: list[ModelOp] = [ModelAdd(2, tree, 1, 0, "[2]")]
        await store.append_many(
            [AppendRequest(tree, make_events(1, prefix="m"), 0, ModelChange(tree, ops))]
        )
        branch = await self._copied(store, tree, {tree: 1, child: 0})
        snapshot = await _model(store, branch)
        # The rows keep their places on the source's streams, which the snapshot names.
        assert _visible(snapshot) == [(0, tree, 0, 0, '{"a":1}'), (1, child, 0, 0, '{"b":2}')]
        assert snapshot is not None
        assert dict(snapshot.heads) == {branch: 0}
        assert snapshot.floor == -1
        # Then the new tree changes on its own: a copied row removed by its source place.
        ops = [ModelRemove(1, child, 0, 0), ModelAdd(2, branch, 1, 0, "[b2]")]
        await store.append_many(
            [AppendRequest(branch, make_events(1, prefix="c"), 0, ModelChange(branch, ops))]
        )
        assert _visible(await _model(store, branch)) == [
            (0, tree, 0, 0, '{"a":1}'),
            (2, branch, 1, 0, "[b2]"),
        ]
        source = _visible(await _model(store, tree))  # the source is its own
        assert source is not None
        assert [index for index, *_ in source] == [0, 1, 2]

    async def test_model_copy_keeps_the_source_s_floor(
        self, store: EventStore, stream: str
    ) -> None:
        tree, child = await self._modelled_write(store, stream)
        ops: list[ModelOp] = [ModelClear(1), ModelAdd(2, tree, 1, 0, "[2]")]
        await store.append_many(
            [AppendRequest(tree, make_events(1, prefix="m"), 0, ModelChange(tree, ops))]
        )
        branch = await self._copied(store, tree, {tree: 1, child: 0}, below=3)
        snapshot = await _model(store, branch)
        assert _visible(snapshot) == [(2, tree, 1, 0, "[2]")]
        assert snapshot is not None
        assert snapshot.floor == 1

    async def test_model_copy_is_refused_unless_the_source_is_at_its_heads(
        self, store: EventStore, stream: str
    ) -> None:
        tree, child = await self._modelled_write(store, stream)
        moved = await self._copied(store, tree, {tree: 0, child: 1})  # the child is at 0
        assert await _model(store, moved) is None
        assert await _model(store, tree) is not None  # the source is untouched
        missing = await self._copied(store, f"{tree}-child", {tree: 0, child: 0})
        assert await _model(store, missing) is None  # the child is no tree's root

    async def test_model_copy_is_refused_from_a_source_not_current(
        self, store: EventStore, stream: str
    ) -> None:
        tree, child = await self._modelled_write(store, stream)
        await store.append(child, make_events(1, prefix="foreign"), expected=0)
        branch = await self._copied(store, tree, {tree: 0, child: 1})
        assert await _model(store, branch) is None

    async def test_model_copy_only_starts_a_tree(self, store: EventStore, stream: str) -> None:
        tree, child = await self._modelled_write(store, stream)
        other = f"{stream}-other"
        await store.append_many(
            [AppendRequest(other, make_events(1), StreamState.NO_STREAM, ModelChange(other))]
        )
        copy = ModelCopy(tree, 2, {tree: 0, child: 0})
        await store.append_many(
            [AppendRequest(other, make_events(1, prefix="x"), 0, ModelChange(other, [copy]))]
        )
        assert await _model(store, other) is None  # not at the tree's start: not current

    # -- append ---------------------------------------------------------------

    async def test_append_to_new_stream_and_read_back(self, store: EventStore, stream: str) -> None:
        events = make_events(3)
        result = await store.append(stream, events, expected=StreamState.NO_STREAM)
        assert result.stream == stream
        assert result.revision == 2
        recorded = await store.read(stream)
        _same(recorded, events)
        assert [e.revision for e in recorded] == [0, 1, 2]
        assert all(e.stream == stream for e in recorded)
        positions = [e.position for e in recorded]
        assert positions == sorted(set(positions))
        assert result.position == positions[-1]
        assert all(e.recorded_at.tzinfo is not None for e in recorded)

    async def test_revisions_are_gapless_across_appends(
        self, store: EventStore, stream: str
    ) -> None:
        await store.append(stream, make_events(2), expected=StreamState.NO_STREAM)
        result = await store.append(stream, make_events(3, start=2), expected=1)
        assert result.revision == 4
        assert [e.revision for e in await store.read(stream)] == [0, 1, 2, 3, 4]
        assert await store.head(stream) == 4

    async def test_head_of_missing_stream_is_none(self, store: EventStore, stream: str) -> None:
        assert await store.head(stream) is None

    async def test_wrong_exact_revision_conflicts_with_actual(
        self, store: EventStore, stream: str
    ) -> None:
        await store.append(stream, make_events(2), expected=StreamState.NO_STREAM)
        with pytest.raises(ConcurrencyError) as raised:
            await store.append(stream, make_events(1, prefix="x"), expected=0)
        assert raised.value.stream == stream
        assert raised.value.actual == 1
        assert raised.value.expected == 0
        with pytest.raises(ConcurrencyError):
            await store.append(stream, make_events(1, prefix="y"), expected=5)
        assert await store.head(stream) == 1

    async def test_exact_revision_on_missing_stream_conflicts(
        self, store: EventStore, stream: str
    ) -> None:
        with pytest.raises(ConcurrencyError) as raised:
            await store.append(stream, make_events(1), expected=0)
        assert raised.value.actual is None
        assert await store.head(stream) is None

    async def test_stream_states(self, store: EventStore, stream: str) -> None:
        with pytest.raises(ConcurrencyError):
            await store.append(stream, make_events(1), expected=StreamState.EXISTS)
        await store.append(stream, make_events(1), expected=StreamState.ANY)
        with pytest.raises(ConcurrencyError) as raised:
            await store.append(stream, make_events(1, prefix="n"), expected=StreamState.NO_STREAM)
        assert raised.value.actual == 0
        await store.append(stream, make_events(1, prefix="x"), expected=StreamState.EXISTS)
        await store.append(stream, make_events(1, prefix="a"), expected=StreamState.ANY)
        assert await store.head(stream) == 2

    async def test_empty_append_only_checks_expected(self, store: EventStore, stream: str) -> None:
        result = await store.append(stream, [], expected=StreamState.ANY)
        assert result.revision == -1
        assert await store.head(stream) is None
        await store.append(stream, make_events(2), expected=StreamState.NO_STREAM)
        assert (await store.append(stream, [], expected=1)).revision == 1
        with pytest.raises(ConcurrencyError):
            await store.append(stream, [], expected=0)

    async def test_data_and_metadata_kept_exactly(self, store: EventStore, stream: str) -> None:
        odd = NewEvent(
            type="Odd.type:v2$x-y_z",
            data='{"z": 1, "a": [1.0, 2], "s": "ünïcødé \\u0000 🚀"}'.encode(),
            metadata={"ключ": "значение", "$schema_version": "2", "empty": ""},
        )
        await store.append(stream, [odd], expected=StreamState.NO_STREAM)
        (recorded,) = await store.read(stream)
        assert recorded.data == odd.data
        assert dict(recorded.metadata) == dict(odd.metadata)
        assert recorded.type == odd.type
        assert recorded.id == odd.id

    # -- idempotency ----------------------------------------------------------

    async def test_retry_at_same_revision_is_idempotent(
        self, store: EventStore, stream: str
    ) -> None:
        first = await store.append(stream, make_events(2), expected=StreamState.NO_STREAM)
        again = await store.append(stream, make_events(2), expected=StreamState.NO_STREAM)
        assert again.revision == first.revision == 1
        later = make_events(3, start=2)
        second = await store.append(stream, later, expected=1)
        assert (await store.append(stream, later, expected=1)).revision == second.revision
        assert [e.revision for e in await store.read(stream)] == [0, 1, 2, 3, 4]

    async def test_partial_id_match_is_a_conflict(self, store: EventStore, stream: str) -> None:
        await store.append(stream, make_events(2), expected=StreamState.NO_STREAM)
        mixed = [*make_events(1), *make_events(1, prefix="other")]
        with pytest.raises(ConcurrencyError):
            await store.append(stream, mixed, expected=StreamState.NO_STREAM)
        longer = make_events(3)
        with pytest.raises(ConcurrencyError):
            await store.append(stream, longer, expected=StreamState.NO_STREAM)
        assert await store.head(stream) == 1

    async def test_append_many_retry_is_idempotent(self, store: EventStore, stream: str) -> None:
        requests = [
            AppendRequest(stream + "-a", make_events(2, prefix="a"), StreamState.NO_STREAM),
            AppendRequest(stream + "-b", make_events(1, prefix="b"), StreamState.NO_STREAM),
        ]
        first = await store.append_many(requests)
        again = await store.append_many(requests)
        assert [r.revision for r in again] == [r.revision for r in first] == [1, 0]
        assert len(await store.read(stream + "-a")) == 2
        assert len(await store.read(stream + "-b")) == 1

    # -- append_many ------------------------------------------------------------

    async def test_append_many_writes_every_stream(self, store: EventStore, stream: str) -> None:
        await store.append(stream + "-b", make_events(1, prefix="b0"), expected=StreamState.ANY)
        results = await store.append_many(
            [
                AppendRequest(stream + "-a", make_events(2, prefix="a"), StreamState.NO_STREAM),
                AppendRequest(stream + "-b", make_events(3, prefix="b"), 0),
            ]
        )
        assert [(r.stream, r.revision) for r in results] == [(stream + "-a", 1), (stream + "-b", 3)]
        _same(await store.read(stream + "-a"), make_events(2, prefix="a"))
        _same((await store.read(stream + "-b"))[1:], make_events(3, prefix="b"))
        assert results[-1].position == max(await _positions(store, stream + "-a", stream + "-b"))

    async def test_append_many_is_all_or_nothing(self, store: EventStore, stream: str) -> None:
        await store.append(stream + "-b", make_events(2, prefix="b"), expected=StreamState.ANY)
        with pytest.raises(ConcurrencyError) as raised:
            await store.append_many(
                [
                    AppendRequest(stream + "-a", make_events(2, prefix="a"), StreamState.NO_STREAM),
                    AppendRequest(stream + "-b", make_events(1, prefix="x"), 0),
                ]
            )
        assert raised.value.stream == stream + "-b"
        assert raised.value.actual == 1
        assert await store.head(stream + "-a") is None
        with pytest.raises(StreamNotFound):
            await store.read(stream + "-a")
        assert await store.head(stream + "-b") == 1

    async def test_append_many_refuses_a_stream_twice_case_insensitively(
        self, store: EventStore, stream: str
    ) -> None:
        with pytest.raises(InvalidInput):
            await store.append_many(
                [
                    AppendRequest(stream + "-a", make_events(1), StreamState.ANY),
                    AppendRequest(
                        stream.upper() + "-A", make_events(1, prefix="u"), StreamState.ANY
                    ),
                ]
            )
        assert await store.head(stream + "-a") is None

    async def test_append_many_refuses_empty_requests(self, store: EventStore, stream: str) -> None:
        with pytest.raises(InvalidInput):
            await store.append_many([])
        with pytest.raises(InvalidInput):
            await store.append_many(
                [
                    AppendRequest(stream + "-a", make_events(1), StreamState.ANY),
                    AppendRequest(stream + "-b", [], StreamState.ANY),
                ]
            )
        assert await store.head(stream + "-a") is None

    async def test_append_many_events_are_in_global_order(
        self, store: EventStore, stream: str
    ) -> None:
        results = await store.append_many(
            [
                AppendRequest(stream + "-a", make_events(2, prefix="a"), StreamState.NO_STREAM),
                AppendRequest(stream + "-b", make_events(2, prefix="b"), StreamState.NO_STREAM),
            ]
        )
        start = min(await _positions(store, stream + "-a", stream + "-b"))
        ours = [
            e
            for e in await store.read_all(from_position=start)
            if e.stream.startswith(stream) and e.position <= results[-1].position
        ]
        assert [(e.stream, e.revision) for e in ours] == [
            (stream + "-a", 0),
            (stream + "-a", 1),
            (stream + "-b", 0),
            (stream + "-b", 1),
        ]

    # -- bad input --------------------------------------------------------------

    @pytest.mark.parametrize(
        "bad",
        [
            NewEvent(type="has space", data=b"{}"),
            NewEvent(type="", data=b"{}"),
            NewEvent(type="T", data=b"{}", metadata={"n": 1}),  # type: ignore[dict-item]
            NewEvent(type="T", data="not bytes"),  # type: ignore[arg-type]
            NewEvent(type="T", data=b"x" * (MAX_EVENT_BYTES + 1)),
            NewEvent(type="$system", data=b"{}"),
            NewEvent(type="T", data=b"{}", metadata={"$schema.name": "x"}),
            NewEvent(type="Tested\n", data=b"{}"),
            NewEvent(type="T", data=b"{}", id=uuid.UUID(int=0)),
            NewEvent(type="T", data=b"{}", metadata={"": "empty key"}),
            NewEvent(type="T" * 100, data=b"x" * (MAX_EVENT_BYTES - 199)),
        ],
        ids=[
            "type-space",
            "type-empty",
            "metadata-int",
            "data-str",
            "too-large",
            "type-system",
            "metadata-reserved",
            "type-trailing-newline",
            "id-nil",
            "metadata-empty-key",
            "too-large-with-its-type",
        ],
    )
    async def test_bad_events_are_refused_and_nothing_is_written(
        self, store: EventStore, stream: str, bad: NewEvent
    ) -> None:
        with pytest.raises(InvalidInput):
            await store.append(stream, [*make_events(1), bad], expected=StreamState.ANY)
        with pytest.raises(InvalidInput):
            await store.append_many(
                [
                    AppendRequest(stream + "-ok", make_events(1), StreamState.ANY),
                    AppendRequest(stream, [bad], StreamState.ANY),
                ]
            )
        assert await store.head(stream) is None
        assert await store.head(stream + "-ok") is None

    @pytest.mark.parametrize(
        "name", ["", "has space", "$system", "tab\there", "ü-non-ascii", "trailing-newline\n"]
    )
    async def test_bad_stream_names_are_refused(self, store: EventStore, name: str) -> None:
        with pytest.raises(InvalidInput):
            await store.append(name, make_events(1), expected=StreamState.ANY)
        with pytest.raises(InvalidInput):
            await store.read(name)

    @pytest.mark.parametrize("expected", [-1, -2, True, "0", 1.0])
    async def test_bad_expected_is_refused(
        self, store: EventStore, stream: str, expected: object
    ) -> None:
        with pytest.raises(InvalidInput):
            await store.append(stream, make_events(1), expected=expected)  # type: ignore[arg-type]
        assert await store.head(stream) is None

    # -- reads ------------------------------------------------------------------

    async def test_read_missing_stream_raises(self, store: EventStore, stream: str) -> None:
        with pytest.raises(StreamNotFound) as raised:
            await store.read(stream)
        assert raised.value.stream == stream

    async def test_read_windows(self, store: EventStore, stream: str) -> None:
        events = make_events(10)
        await store.append(stream, events, expected=StreamState.NO_STREAM)

        async def revisions(**kwargs: object) -> list[int]:
            return [e.revision for e in await store.read(stream, **kwargs)]  # type: ignore[arg-type]

        assert await revisions(from_revision=7) == [7, 8, 9]
        assert await revisions(limit=3) == [0, 1, 2]
        assert await revisions(from_revision=2, limit=2) == [2, 3]
        assert await revisions(backwards=True, limit=3) == [9, 8, 7]
        assert await revisions(backwards=True, from_revision=4, limit=2) == [4, 3]
        assert await revisions(backwards=True) == list(range(9, -1, -1))
        assert await revisions(limit=0) == []
        assert await revisions(from_revision=10) == []
        _same(await store.read(stream, backwards=True, limit=2), events[:-3:-1])

    async def test_read_all_is_one_global_order(self, store: EventStore, stream: str) -> None:
        first = await store.append(
            stream + "-a", make_events(1, prefix="a0"), expected=StreamState.NO_STREAM
        )
        await store.append(
            stream + "-b", make_events(1, prefix="b0"), expected=StreamState.NO_STREAM
        )
        await store.append(stream + "-a", make_events(1, prefix="a1"), expected=0)
        await store.append(stream + "-b", make_events(1, prefix="b1"), expected=0)
        everything = await store.read_all(from_position=first.position)
        ours = [e for e in everything if e.stream.startswith(stream)]
        assert [(e.stream[len(stream) :], e.revision) for e in ours] == [
            ("-a", 0),
            ("-b", 0),
            ("-a", 1),
            ("-b", 1),
        ]
        positions = [e.position for e in everything]
        assert positions == sorted(set(positions))
        assert everything[0].position == first.position
        limited = await store.read_all(from_position=first.position, limit=2)
        assert [e.position for e in limited] == positions[:2]

    # -- subscriptions ----------------------------------------------------------

    async def test_subscription_catches_up_then_follows_live(
        self, store: EventStore, stream: str
    ) -> None:
        await store.append(stream, make_events(3), expected=StreamState.NO_STREAM)
        start = (await store.read(stream, limit=1))[0].position
        received: list[RecordedEvent] = []
        got_live = asyncio.Event()

        async def consume() -> None:
            async for event in store.subscribe(after_position=start - 1 if start else None):
                if event.stream == stream:
                    received.append(event)
                    if len(received) == 5:
                        got_live.set()
                        return

        task = asyncio.create_task(consume())
        try:
            for _ in range(200):
                if len(received) == 3:
                    break
                await asyncio.sleep(0.01)
            assert [e.revision for e in received] == [0, 1, 2]
            await store.append(stream, make_events(2, start=3), expected=2)
            await asyncio.wait_for(got_live.wait(), 2.0)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert [e.revision for e in received] == [0, 1, 2, 3, 4]
        _same(received, make_events(5))

    async def test_subscription_resumes_after_a_position(
        self, store: EventStore, stream: str
    ) -> None:
        await store.append(stream, make_events(2), expected=StreamState.NO_STREAM)
        second = (await store.read(stream))[1]
        await store.append(stream, make_events(2, start=2), expected=1)
        received: list[int] = []

        async def consume() -> None:
            async for event in store.subscribe(after_position=second.position):
                if event.stream == stream:
                    received.append(event.revision)
                    if len(received) == 2:
                        return

        await asyncio.wait_for(consume(), 5.0)
        assert received == [2, 3]

    # -- concurrency ------------------------------------------------------------

    async def test_racing_tasks_one_winner_per_revision(
        self, store: EventStore, stream: str
    ) -> None:
        await store.append(stream, make_events(1, prefix="seed"), expected=StreamState.NO_STREAM)

        async def contender(n: int) -> bool:
            try:
                await store.append(stream, make_events(1, prefix=f"c{n}"), expected=0)
            except ConcurrencyError:
                return False
            return True

        outcomes = await asyncio.gather(*(contender(n) for n in range(16)))
        assert outcomes.count(True) == 1
        assert await store.head(stream) == 1

    async def test_racing_tasks_with_retry_land_everything_once(
        self, store: EventStore, stream: str
    ) -> None:
        async def writer(name: str, count: int) -> None:
            for n in range(count):
                event = make_events(1, prefix=name, start=n)
                while True:
                    head = await store.head(stream)
                    expected = StreamState.NO_STREAM if head is None else head
                    try:
                        await store.append(stream, event, expected=expected)
                        break
                    except ConcurrencyError:
                        await asyncio.sleep(0)

        await asyncio.gather(*(writer(f"w{w}", 10) for w in range(8)))
        recorded = await store.read(stream)
        assert [e.revision for e in recorded] == list(range(80))
        assert len({e.id for e in recorded}) == 80

    async def test_several_processes_write_one_stream(
        self, store: EventStore, store_uri: str | None, stream: str
    ) -> None:
        if store_uri is None:
            pytest.skip("this store cannot be reached from another process")
        writers, count = 4, 15
        started = time.monotonic()
        processes = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agentjournal.testing.store_writer",
                store_uri,
                stream,
                str(count),
                f"p{w}",
                stderr=subprocess.PIPE,
            )
            for w in range(writers)
        ]
        for process in processes:
            _, stderr = await asyncio.wait_for(process.communicate(), 120)
            assert process.returncode == 0, stderr.decode()
        assert time.monotonic() - started < 120
        recorded = await store.read(stream)
        assert [e.revision for e in recorded] == list(range(writers * count))
        assert len({e.id for e in recorded}) == writers * count
        per_writer: dict[str, list[int]] = {}
        for event in recorded:
            body = json.loads(event.data)
            per_writer.setdefault(body["writer"], []).append(body["n"])
        assert per_writer == {f"p{w}": list(range(count)) for w in range(writers)}
