"""What a session writes is byte for byte what ``data/write_bytes.json`` pins.

How events are planned, identified, validated and inserted (ids from a cached hash
prefix, ``orjson`` in the items' round-trip check, a compare-and-set head update, one
multi-row insert) may change; what is stored may not. A fixed scenario — every kind of
item, odd text and numbers, several writes, a pop and a clear — is written with the
nonces, clock and random ids pinned, and every stored row (stream, revision, position,
id, type, data, metadata bytes) must equal ``data/write_bytes.json``:
``python tests/test_write_bytes.py`` prints it. Regenerate it only for a deliberate
change of the stored format, after checking field by field that nothing else moved.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import agentjournal.engine.stamps as stamps
from agentjournal import JournalSession
from agentjournal.store.sqlite import SQLiteEventStore
from agentjournal.store.sqlite._stored import Unpacker

EXPECTED = Path(__file__).parent / "data" / "write_bytes.json"

_BIG = 2**70 + 1


def _writes() -> list[list[Any]]:
    return [
        [
            {
                "role": "user",
                "content": 'Why was I charged twice? \u00e9\u4e2d\U0001f600 "q" \\ \x01',
            },
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}],
            },
        ],
        [
            {
                "arguments": '{"order_id": "A-1", "n": 3, "x": 1.5e-07, '
                '"deep": {"l": [1, 2.0, null]}}',
                "call_id": "call_1",
                "name": "lookup_order",
                "type": "function_call",
                "id": "fc_1",
            },
            {
                "call_id": "call_1",
                "output": "two charges of 12.50 EUR",
                "type": "function_call_output",
            },
            {
                "call_id": "call_2",
                "output": [{"type": "input_text", "text": "a part"}],
                "type": "function_call_output",
            },
        ],
        [
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "think \u00fc"}],
                "encrypted_content": "opaque",
            },
            {
                "type": "web_search_call",
                "id": "ws_1",
                "status": "completed",
                "big": _BIG,
                "f": -0.0,
            },
            {"__enc__": 1, "v": 1, "kid": "k", "payload": "ZW5j"},
            {"role": "system", "content": "be brief"},
            {
                "type": "mcp_approval_request",
                "id": "mcpr_1",
                "name": "delete",
                "arguments": "{}",
                "server_label": "s",
            },
            {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True},
        ],
        [{"role": "user", "content": "lone \ud800 surrogate"}],
    ]


class _Nonces:
    def __init__(self) -> None:
        self._count = itertools.count()

    def next(self) -> str:
        return f"fixed-nonce-{next(self._count)}"


class _Clock(datetime):
    @classmethod
    def now(cls, tz: Any = None) -> _Clock:
        return cls(2026, 12, 1, 10, 0, 0, 123000, tzinfo=UTC)


class _Uuid:
    """``uuid`` as the engine sees it, with a counter for ``uuid4`` (pops and clears)."""

    def __init__(self) -> None:
        self._count = itertools.count(1)

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=next(self._count), version=4)

    def __getattr__(self, name: str) -> Any:
        return getattr(uuid, name)


_PINNED = (
    (stamps, "_NONCES", _Nonces),
    (stamps, "datetime", lambda: _Clock),
    (stamps, "uuid", _Uuid),
)


@contextmanager
def _pinned() -> Iterator[None]:
    saved = [(module, name, getattr(module, name)) for module, name, _ in _PINNED]
    for module, name, make in _PINNED:
        setattr(module, name, make())
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


async def _scenario(path: str) -> None:
    store = await SQLiteEventStore.open(path)
    try:
        session = JournalSession(store, "bytes-1")
        writes = _writes()
        for items in writes[:3]:
            await session.add_items(items)
        await session.pop_item()
        await session.add_items(writes[3])
        await session.clear_session()
        await session.add_items(writes[0])
    finally:
        await store.close()


def stored_rows() -> list[dict[str, Any]]:
    """Write the scenario into a fresh file; every stored event, as JSON-able rows."""
    with tempfile.TemporaryDirectory() as directory, _pinned():
        path = f"{directory}/bytes.db"
        asyncio.run(_scenario(path))
        db = sqlite3.connect(path)
        # The values as written: the file holds them in its stored form (compressed).
        unpack = Unpacker(db).unpack
        try:
            rows = [
                (*row[:5], unpack(row[5], row[7]), unpack(row[6], row[7]))
                for row in db.execute(
                    "SELECT s.name, e.revision, e.position, e.id, e.type, e.data, e.metadata, "
                    "e.dictionary FROM events e JOIN streams s ON s.id = e.stream_id "
                    "ORDER BY e.position"
                )
            ]
        finally:
            db.close()
    return [
        {
            "stream": name,
            "revision": revision,
            "position": position,
            "id": bytes(id_).hex(),
            "type": type_,
            "data": bytes(data).hex(),
            "metadata": bytes(metadata).hex(),
        }
        for name, revision, position, id_, type_, data, metadata in rows
    ]


def test_events_are_stored_byte_for_byte_as_before() -> None:
    expected = json.loads(EXPECTED.read_text())
    rows = stored_rows()
    assert len(rows) == len(expected) > 10
    for got, want in zip(rows, expected, strict=True):
        assert got == want, (
            f"{want['stream']}@{want['revision']} ({want['type']}) differs: "
            f"data {bytes.fromhex(got['data'])!r} vs {bytes.fromhex(want['data'])!r}; "
            f"metadata {bytes.fromhex(got['metadata'])!r} vs {bytes.fromhex(want['metadata'])!r}"
        )


if __name__ == "__main__":  # print the rows, to regenerate data/write_bytes.json deliberately
    json.dump(stored_rows(), sys.stdout, indent=1)
    print()
