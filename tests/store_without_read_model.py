"""A store wrapper without a read model: it has no ``read_model`` and passes no model
changes on, so the engine reads and writes events only (the read model's tests compare
against it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from agentjournal.store.contract import (
    AppendRequest,
    AppendResult,
    Expected,
    NewEvent,
    RecordedEvent,
)
from agentjournal.store.sqlite import SQLiteEventStore


class WithoutReadModel:
    """A store wrapper without ``read_model``: the engine reads and writes events only."""

    def __init__(self, inner: SQLiteEventStore) -> None:
        self.inner = inner

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        return await self.inner.append(stream, events, expected=expected)

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        # Rebuilt field by field, as a wrapper that knows nothing of model changes would.
        return await self.inner.append_many(
            [AppendRequest(r.stream, r.events, r.expected) for r in requests]
        )

    async def read(self, stream: str, **options: Any) -> list[RecordedEvent]:
        return await self.inner.read(stream, **options)

    async def head(self, stream: str) -> int | None:
        return await self.inner.head(stream)

    async def read_all(self, **options: Any) -> list[RecordedEvent]:
        return await self.inner.read_all(**options)

    def subscribe(self, **options: Any) -> AsyncIterator[RecordedEvent]:
        return self.inner.subscribe(**options)

    async def close(self) -> None:
        pass
