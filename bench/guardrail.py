"""Guardrail benchmark: what checking every tool call against the reference service costs.

Run: ``python bench/guardrail.py`` (``--quick`` for a smoke run). The reference
guardrail service (``agentjournal guardrail serve``, with PII redaction and a
deny list) runs on loopback in this process's event loop's reach (its own
thread). Machines here are noisy: sides alternate round by round, and the
table gives p50/p95 over rounds.

Cases:
  (a) one ``/v1/validate`` round trip of a TOOL_CALL (client, HTTP, service)
      in ms;
  (b) a ``Runner.run`` of ``CALLS`` tool-call turns and a final message, per
      tool call in ms, for: the SDK's ``SQLiteSession``; ``JournalSession``
      without a guardrail; with the guardrail through the hooks; and with
      ``session.guard(agent)`` as well. Each run also checks the agent's input
      and final response, so the per-call figure includes those two checks
      spread over the calls. The overhead rows are the guarded run minus the
      unguarded journal run of the same round, per tool call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from _common import run_publishing, table
from agentjournal import Journal
from agentjournal.guardrails import ActionType, GuardrailClient, TraceRef
from agentjournal.guardrails.rules import load_rules
from agentjournal.guardrails.service import running

CONFIG = RunConfig(tracing_disabled=True)
RULES = load_rules(
    """
rules:
  - kind: deny_tools
    tools: [delete_account]
  - kind: redact_pii
"""
)
TRACE = TraceRef(trace_id="4bf92f3577b34da6a3ce929d0e0e4736", span_id="00f067aa0ba902b7")


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: shipped"


def agent(calls: int) -> Agent[Any]:
    steps: list[Any] = [
        [function_call("lookup_order", {"order_id": str(n)}, call_id=f"c{n}")] for n in range(calls)
    ]
    steps.append([assistant_message("All your orders have shipped.")])
    return Agent(name="support", model=ScriptedModel(steps), tools=[lookup_order])


@contextmanager
def service() -> Iterator[str]:
    """The reference service on loopback in a thread of its own (its own event loop)."""
    ready: list[str] = []
    started = threading.Event()
    loop = asyncio.new_event_loop()
    stop = asyncio.Event()

    async def serve() -> None:
        async with running(RULES) as url:
            ready.append(url)
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    started.wait(timeout=30)
    try:
        yield ready[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        loop.close()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def round_trips(url: str, count: int) -> list[float]:
    payload = {
        "id": "c1",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": "42"})},
    }
    times = []
    async with GuardrailClient(url) as client:
        for _ in range(count):
            verdict = await client.validate(
                ActionType.TOOL_CALL, payload, source_agent_id="b", thread_id="t", trace=TRACE
            )
            assert verdict.decision.value == "ALLOW", verdict
            times.append(verdict.latency_ms)
    return times


async def run_cases(directory: str, url: str, calls: int, rounds: int) -> list[list[str]]:
    journal = await Journal.open(f"sqlite:///{os.path.join(directory, 'aj.db')}")
    client = GuardrailClient(url)
    counter = 0

    def fresh_id() -> str:
        nonlocal counter
        counter += 1
        return f"s{counter}"

    async def sdk() -> None:
        session = SQLiteSession(fresh_id(), os.path.join(directory, "sdk.db"))
        await Runner.run(
            agent(calls),
            "where are my orders?",
            session=session,
            run_config=CONFIG,
            max_turns=calls + 2,
        )

    def journal_run(guardrails: bool, guard: bool) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            session = journal.session(fresh_id(), guardrails=client if guardrails else None)
            runnable = session.guard(agent(calls)) if guard else agent(calls)
            hooks: Any = session
            await Runner.run(
                runnable,
                "where are my orders?",
                session=session,
                hooks=hooks,
                run_config=CONFIG,
                max_turns=calls + 2,
            )

        return go

    sides: dict[str, Callable[[], Awaitable[None]]] = {
        "SQLiteSession": sdk,
        "JournalSession": journal_run(False, False),
        "+ guardrail (hooks)": journal_run(True, False),
        "+ guardrail (hooks + guard)": journal_run(True, True),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for go in sides.values():  # warm up every side once
            await go()
        for _ in range(rounds):
            for name, go in sides.items():
                started = time.perf_counter()
                await go()
                times[name].append(1000 * (time.perf_counter() - started) / calls)
    finally:
        await client.aclose()
        await journal.close()
    base = statistics.median(times["SQLiteSession"])
    rows = [
        [
            f"(b) per tool call: {name}",
            f"{pct(values, 0.5):.2f}",
            f"{pct(values, 0.95):.2f}",
            f"{statistics.median(values) / base:.2f}",
        ]
        for name, values in times.items()
    ]
    for name in ("+ guardrail (hooks)", "+ guardrail (hooks + guard)"):
        overhead = [g - j for g, j in zip(times[name], times["JournalSession"], strict=True)]
        rows.append(
            [f"(b) overhead {name}", f"{pct(overhead, 0.5):.2f}", f"{pct(overhead, 0.95):.2f}", ""]
        )
    return rows


async def main_async(calls: int, rounds: int, trips: int) -> None:
    with service() as url, tempfile.TemporaryDirectory() as directory:
        latencies = await round_trips(url, trips)
        rows = [
            [
                "(a) /v1/validate round trip (TOOL_CALL)",
                f"{pct(latencies, 0.5):.2f}",
                f"{pct(latencies, 0.95):.2f}",
                "",
            ]
        ]
        rows.extend(await run_cases(directory, url, calls, rounds))
    print(f"{calls} tool calls per run, {rounds} rounds; ratio = p50 / SQLiteSession p50")
    print(table(["case", "p50 ms", "p95 ms", "ratio"], rows))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    calls, rounds, trips = (4, 3, 20) if args.quick else (20, 30, 500)
    asyncio.run(main_async(calls, rounds, trips))
    return 0


if __name__ == "__main__":
    sys.exit(run_publishing("guardrail", main, sys.argv[1:]))
