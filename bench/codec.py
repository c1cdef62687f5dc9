"""Codec benchmark: microseconds per item to encode and decode, next to the SDK's own costs.

Run: ``python bench/codec.py`` (``--quick`` for a smoke run). For a realistic
mix of session items it times :func:`agentjournal.engine.codec.encode_item`,
:func:`~agentjournal.engine.codec.decode_event`, the JSON round trip the SDK's
``SQLiteSession`` does per item (``json.dumps`` + ``json.loads``), and a whole
``SQLiteSession`` ``add_items`` + ``get_items`` per item (in memory), so the
codec's share of a session write and read is visible. Machines here are noisy:
each figure is the best of several rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import timeit
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from agents import SQLiteSession
from agents.items import TResponseInputItem

from _common import run_publishing
from agentjournal.engine.codec import decode_event, encode_item

TS = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

MIX: list[dict[str, Any]] = [
    {"content": "Why was I charged twice for order 4711? It shows up two times.", "role": "user"},
    {
        "id": "rs_68a1",
        "summary": [{"text": "Check the ledger for duplicate captures.", "type": "summary_text"}],
        "type": "reasoning",
        "encrypted_content": "gAAAAB" + "x" * 400,
    },
    {
        "arguments": '{"order_id":4711,"include_refunds":true,"limit":20}',
        "call_id": "call_Q1w2E3r4T5y6U7i8O9p0",
        "name": "lookup_charges",
        "type": "function_call",
        "id": "fc_68a1",
        "status": "completed",
    },
    {
        "call_id": "call_Q1w2E3r4T5y6U7i8O9p0",
        "output": '[{"id":"ch_1","amount":42.5},{"id":"ch_2","amount":42.5}]',
        "type": "function_call_output",
    },
    {
        "arguments": "{}",
        "call_id": "call_handoff_1",
        "name": "transfer_to_billing",
        "type": "function_call",
        "id": "fc_68a2",
    },
    {
        "call_id": "call_handoff_1",
        "output": '{"assistant": "billing"}',
        "type": "function_call_output",
    },
    {
        "id": "msg_68a3",
        "content": [
            {
                "annotations": [],
                "text": "You were charged twice; I have refunded the duplicate (ch_2). "
                "It will show within 5 business days — sorry about that!",
                "type": "output_text",
                "logprobs": [],
            }
        ],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
    {
        "id": "ws_68a4",
        "action": {"type": "search", "query": "refund policy duplicate charge"},
        "status": "completed",
        "type": "web_search_call",
    },
]


def per_item_us(work: Callable[[], object], items: int, number: int, rounds: int) -> float:
    """Best-of-rounds microseconds per item for ``work`` covering ``items`` items."""
    best = min(timeit.repeat(work, number=number, repeat=rounds))
    return best / number / items * 1e6


def encode_all() -> list[tuple[str, bytes]]:
    out = []
    for index, item in enumerate(MIX):
        event = encode_item(item, message_index=index, author="triage", timestamp=TS)
        out.append((event.type, event.data))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args(argv)
    number, rounds = (50, 2) if args.quick else (2000, 7)

    events = encode_all()
    for (_, data), item in zip(events, MIX, strict=True):
        assert decode_event(_, data) == item
    n = len(MIX)

    def decode_all() -> None:
        for event_type, data in events:
            decode_event(event_type, data)

    def sdk_json() -> None:
        for item in MIX:
            json.loads(json.dumps(item))

    rows = [
        ("encode_item", per_item_us(encode_all, n, number, rounds)),
        ("decode_event", per_item_us(decode_all, n, number, rounds)),
        ("SQLiteSession json.dumps+loads", per_item_us(sdk_json, n, number, rounds)),
    ]
    by_kind = []
    for item, (event_type, data) in zip(MIX, events, strict=True):
        kind = str(item.get("type", "message"))

        def one_encode(item: dict[str, Any] = item) -> None:
            encode_item(item, message_index=7, author="triage", timestamp=TS)

        def one_decode(event_type: str = event_type, data: bytes = data) -> None:
            decode_event(event_type, data)

        by_kind.append(
            (
                kind,
                event_type,
                per_item_us(one_encode, 1, number, rounds),
                per_item_us(one_decode, 1, number, rounds),
                len(data),
            )
        )

    session_rounds = 20 if args.quick else 200
    best = float("inf")
    for _ in range(3):
        session = SQLiteSession("bench")
        items: list[TResponseInputItem] = [json.loads(json.dumps(item)) for item in MIX]

        async def cycle(session: SQLiteSession = session, items: Any = items) -> None:
            for _ in range(session_rounds):
                await session.add_items(items)
                await session.get_items(limit=n)

        start = time.perf_counter()
        asyncio.run(cycle())
        best = min(best, (time.perf_counter() - start) / session_rounds / n * 1e6)
        session.close()
    rows.append(("SQLiteSession add_items+get_items (memory)", best))

    print(f"per item, mix of {n} items, best of {rounds} rounds")
    for label, micros in rows:
        print(f"  {label:44} {micros:8.1f} us")
    total = rows[0][1] + rows[1][1]
    print(f"  {'codec encode+decode':44} {total:8.1f} us")
    print("by item:")
    for kind, event_type, enc, dec, size in by_kind:
        print(f"  {kind:22} {event_type:28} enc {enc:6.1f} us  dec {dec:6.1f} us  {size:5d} B")
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("codec", main, sys.argv[1:]))
