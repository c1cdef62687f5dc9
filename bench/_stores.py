"""The generated stores the read-side benchmarks share, cached by their parameters.

* :func:`item_store` — N sessions of 100 items each, copies of one session the SDK's
  ``Runner`` wrote through a signing journal (five runs: triage hands off to billing,
  billing calls a tool eight times and answers; 20 items a run), each copy re-chained
  and re-signed (``bench/catalog.py``'s ``copy_of``) and written with the very read
  model changes the template's own writes carried, so a copy is stored exactly as a
  session the runner wrote (events and read model rows). Beside it, the SDK's
  ``SQLiteSession`` file holding the same items (``add_items`` of each session's
  ``get_items()``), for the disk comparison.
* :func:`event_store` — ``bench/list.py``'s store: 10,000 sessions, about 1,000,000
  events.

A store is written once into the temporary folder under a name that holds its
parameters and recipe version, and used again by every later run (``--rebuild``
writes it again). The benchmarks run on copies, so what they write (a saved catalog)
never reaches the cached file.
"""

from __future__ import annotations

import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal
from agentjournal.ledger import SigningKey
from agentjournal.store import open_store
from agentjournal.store.contract import (
    AppendRequest,
    ModelAdd,
    ModelChange,
    ModelClear,
    ModelOp,
    ModelRemove,
    RecordedEvent,
)
from catalog import copy_of

ITEMS_VERSION = 4  # the item store's recipe: a cached store of another recipe is written again
TEMPLATE = "tmplitems-000"
RUNS = 5
TOOL_TURNS = 8  # tool calls per run: 1 + 2 + 2 * 8 + 1 = 20 items a run
PER_COMMIT = 20  # sessions per append_many transaction
CONFIG = RunConfig(tracing_disabled=True)


@function_tool
def lookup_order(order_id: str) -> str:
    """Look up an order."""
    return f"order {order_id}: charged twice, 12.50 EUR each; refund pending"


def _agents() -> Agent[Any]:
    billing = Agent[Any](
        name="billing",
        model=ScriptedModel(
            [
                turn
                for run in range(RUNS)
                for turn in (
                    *(
                        [
                            function_call(
                                "lookup_order", {"order_id": f"{run}{n}"}, call_id=f"t{run}{n}"
                            )
                        ]
                        for n in range(TOOL_TURNS)
                    ),
                    [
                        assistant_message(
                            f"Run {run}: you were charged twice; refunded.", item_id=f"m{run}"
                        )
                    ],
                )
            ]
        ),
        tools=[lookup_order],
    )
    return Agent[Any](
        name="triage",
        model=ScriptedModel(
            [[function_call("transfer_to_billing", {}, call_id=f"h{run}")] for run in range(RUNS)]
        ),
        handoffs=[billing],
    )


@dataclass(frozen=True)
class Template:
    """One session the Runner wrote: its events, the read model change its writes made to
    each stream (None: none), and its items as ``get_items()`` returns them."""

    events: list[RecordedEvent]
    models: dict[str, str | None]
    ops: list[ModelOp]
    items: list[Any]


async def _template(uri: str, key: SigningKey) -> Template:
    async with Journal.open(uri, signing_key=key) as journal:
        store = journal.store
        models: dict[str, str | None] = {}
        ops: list[ModelOp] = []
        append_many = store.append_many

        async def recording(requests: Sequence[AppendRequest]) -> Any:
            for request in requests:
                if request.model is None:
                    models.setdefault(request.stream, None)
                    continue
                models[request.stream] = request.model.tree
                ops.extend(request.model.ops)
            return await append_many(requests)

        store.append_many = recording  # type: ignore[method-assign]
        session = journal.session(TEMPLATE, app_name="bench", user_id="u-1")
        start = _agents()
        for run in range(RUNS):
            await Runner.run(
                start,
                f"Why was I charged twice on order {run}?",
                session=session,
                hooks=session,
                run_config=CONFIG,
                max_turns=20,
            )
        items = await session.get_items()
        events = [e for e in await store.read_all() if TEMPLATE in e.stream]
        return Template(events, models, ops, items)


def _op(op: ModelOp, session_id: str) -> ModelOp:
    if isinstance(op, ModelAdd):
        stream = op.stream.replace(TEMPLATE, session_id)
        return ModelAdd(op.index, stream, op.revision, op.part, op.text, op.plain)
    if isinstance(op, ModelRemove):
        return ModelRemove(op.index, op.stream.replace(TEMPLATE, session_id), op.revision, op.part)
    assert isinstance(op, ModelClear), op
    return op


def _copy(template: Template, session_id: str, key: SigningKey) -> list[AppendRequest]:
    """One copy in one write: its streams' requests, each with the read model change
    its template stream's writes carried; every op on the last modelled request (ops are
    applied as their request lands, once every stream they name exists)."""
    requests = copy_of(template.events, session_id, key, template=TEMPLATE)
    # The checkpoints last: each run's subsessions were written before its checkpoint,
    # and one stream's events stay together here, so no event follows the newest one.
    requests.sort(key=lambda request: request.stream.startswith("AgentLedger-"))
    trees = [template.models.get(r.stream.replace(session_id, TEMPLATE)) for r in requests]
    last = max(at for at, tree in enumerate(trees) if tree is not None)
    out = []
    for at, (request, tree) in enumerate(zip(requests, trees, strict=True)):
        model = None
        if tree is not None:
            ops = [_op(op, session_id) for op in template.ops] if at == last else []
            model = ModelChange(tree.replace(TEMPLATE, session_id), ops)
        out.append(AppendRequest(request.stream, request.events, request.expected, model))
    return out


@dataclass(frozen=True)
class ItemStore:
    """A cached item store: our SQLite file, the SDK's, their counts and the signing key."""

    ours: Path
    sdk: Path
    key: SigningKey
    sessions: int
    items: int
    events: int


def _checkpointed_size(path: Path) -> int:
    """Bytes of ``path`` and its WAL once the WAL is checkpointed into the file."""
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    wal = path.with_name(path.name + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def disk_bytes(path: Path) -> int:
    """What a store file takes on disk: the file and its WAL after a checkpoint."""
    return _checkpointed_size(path)


async def item_store(sessions: int, rebuild: bool = False, compress: bool = False) -> ItemStore:
    """The cached store of ``sessions`` sessions of 100 items (written when missing), its
    events stored as given or (``compress``) compressed."""
    form = "-zstd" if compress else ""
    folder = (
        Path(tempfile.gettempdir()) / f"agentjournal-bench-items-v{ITEMS_VERSION}-{sessions}{form}"
    )
    ours, sdk, key_file = folder / "items.db", folder / "sdk.db", folder / "key.pem"
    done = folder / "complete"
    if rebuild or not done.exists():
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        key = SigningKey.generate()
        key_file.write_text(key.private_pem())
        started = time.perf_counter()
        template = await _template(f"sqlite:///{folder / 'template.db'}", key)
        store = await open_store(f"sqlite:///{ours}" + ("?compress=zstd" if compress else ""))
        try:
            for start in range(0, sessions, PER_COMMIT):
                requests: list[AppendRequest] = []
                for number in range(start, min(sessions, start + PER_COMMIT)):
                    requests.extend(_copy(template, f"it-{number:06d}", key))
                await store.append_many(requests)
            snapshot = await store.read_model(f"AgentSession-it-{0:06d}")  # type: ignore[attr-defined]
            # The copies are stored as the runner stores a session: read model included.
            assert snapshot is not None
            assert len(snapshot.items) == len(template.items)
        finally:
            await store.close()
        for number in range(sessions):
            session = SQLiteSession(f"it-{number:06d}", str(sdk))
            await session.add_items(template.items)
            session.close()
        (folder / "counts").write_text(
            f"{len(template.items)} {len(template.events)}", encoding="utf-8"
        )
        done.write_text("")
        print(
            f"store: {sessions:,} sessions of {len(template.items)} items "
            f"({len(template.events)} events) written in {time.perf_counter() - started:.0f} s",
            file=sys.stderr,
        )
    else:
        print(f"store: {ours} (kept from an earlier run)", file=sys.stderr)
    per_items, per_events = map(int, (folder / "counts").read_text().split())
    return ItemStore(
        ours,
        sdk,
        SigningKey.from_file(key_file),
        sessions,
        sessions * per_items,
        sessions * per_events,
    )


async def event_store(sessions: int = 10_000, rebuild: bool = False) -> tuple[Path, SigningKey]:
    """``bench/list.py``'s cached store (10,000 sessions: about 1,000,000 events) and its key."""
    from list import prepared

    return await prepared(sessions, rebuild)


def working_copy(kept: Path, name: str) -> Path:
    """A copy of ``kept`` (its WAL checkpointed first) to run on, beside it."""
    _checkpointed_size(kept)
    path = kept.with_name(name)
    for suffix in ("", "-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    shutil.copyfile(kept, path)
    return path


def event_count(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        db.close()


def child_cpu() -> float:
    """CPU seconds of every child process ended so far (user and system)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime
