"""Review r18b of issue 18's fourth round: each test reproduces a finding of the review.

Real SQLite files, the real Runner with ``ScriptedModel`` where a run matters.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal
from agentjournal.audit.export import export_bundle
from agentjournal.audit.verify import verify_bundle
from agentjournal.authority import Policy, ToolRule
from agentjournal.engine.timeline import Entry, Timeline
from agentjournal.store.contract import (
    MODEL_REVISIONS,
    AppendRequest,
    ModelAdd,
    ModelChange,
    NewEvent,
    StreamState,
    model_key,
    model_place,
)
from agentjournal.store.sqlite import SQLiteEventStore
from ledger_sessions import KEY, TRUSTED

# A tool rule whose ceiling reads an argument: the view of a call to it reads the arguments.
_POLICY = Policy(tools={"t": ToolRule("s.x", {"spend": "amount"})})


async def _stored_and_verified(path: Path, arguments: Any) -> list[list[str]]:
    """Store one call to ``t`` with ``arguments``, read it back warm and cold; the verify
    reports of its full and its redacted bundle."""
    item: Any = {"type": "function_call", "call_id": "c1", "name": "t", "arguments": arguments}
    async with await Journal.open(f"sqlite:///{path}", signing_key=KEY) as journal:
        session = journal.session("args", policy=_POLICY)
        await session.add_items([item])
        assert await session.get_items() == [item]
        bundles = [
            await export_bundle(journal.store, "args", redact=redact) for redact in (False, True)
        ]
    async with await Journal.open(f"sqlite:///{path}") as journal:  # cold, from the file
        assert await journal.session("args", policy=_POLICY).get_items() == [item]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM events").fetchone() == (2,)
    return [verify_bundle(bundle, TRUSTED).lines for bundle in bundles]


@pytest.mark.parametrize("arguments", [5, {"amount": 1}, [1], 1.5, True])
async def test_a_function_call_whose_arguments_are_no_text_is_stored_exactly(
    tmp_path: Path, arguments: Any
) -> None:
    """The SDK's SQLiteSession keeps a ``function_call`` whose ``arguments`` is not a string;
    so does ours under a tool rule with ceilings (its view once raised a bare ValueError
    from sealing, nothing written), and its bundles verify as a text call's do (outside a
    run: no checkpoint, no authority log, in both)."""
    reports = await _stored_and_verified(tmp_path / "odd.db", arguments)
    assert reports == await _stored_and_verified(tmp_path / "text.db", '{"amount": 1}')
    assert "integrity: 2 events in 1 stream chain correctly" in reports[1]


@pytest.mark.parametrize("budget", [0, 200, 400, 10_000])
def test_a_bounded_modelled_timeline_drops_rows_without_making_entries(budget: int) -> None:
    """A full read from the read model of a session bigger than its cache budget (8 MiB by
    default: ~14k items of ~430 bytes) made an Entry of every row only to drop most of them
    at once (measured: a 30k-item cold ``get_items`` 122-218 ms, not 66-70 ms). The rows
    are cut as rows now, to what cutting the entries leaves."""
    texts = [json.dumps({"role": "user", "content": "x" * n}) for n in range(8)]
    rows = [(index, model_key(1, index, 0), text) for index, text in enumerate(texts)]
    lazy = Timeline.modelled(rows, {1: "S"}, -1, True)
    made = [Entry("S", index, 0, index, text, None, True) for index, text in enumerate(texts)]
    eager = Timeline.whole(made, -1)
    for timeline in (lazy, eager):
        timeline.budget = budget
        timeline.bound()
    assert (len(lazy), lazy.size, lazy.complete) == (len(eager), eager.size, eager.complete)
    assert lazy.items(None) == eager.items(None)
    assert not lazy._entries, "no entry made for the rows kept or dropped"
    assert lazy.entries == eager.entries


@pytest.mark.parametrize("revision", [MODEL_REVISIONS, 2 * MODEL_REVISIONS, -1])
async def test_an_item_at_a_revision_a_key_cannot_hold_makes_the_tree_not_current(
    tmp_path: Path, revision: int
) -> None:
    """``read_model`` refuses a tree whose heads reach MODEL_REVISIONS, but a model change
    naming a revision beyond its stream's head (or below 0) was kept: its packed key then
    read as another place — 2**32 as revision 0, 2**33 as revision 0 of the stream two
    numbers on (here the tree's own subsession). Such an item makes its tree not current,
    as an item of a part a key cannot hold does."""
    async with await SQLiteEventStore.open(tmp_path / "j.db") as store:
        tree, child, extra = "AgentSession-s", "AgentSubsession-s-a", "AgentSubsession-s-b"
        bare = ModelChange(tree)
        await store.append_many(
            [
                AppendRequest(stream, [NewEvent("X", b"{}")], StreamState.NO_STREAM, bare)
                for stream in (tree, child, extra)
            ]
        )
        assert await store.read_model(tree) is not None
        add = [ModelAdd(0, tree, revision, 0, "[0]")]
        await store.append_many(
            [
                AppendRequest(tree, [NewEvent("X", b"{}")], 0, ModelChange(tree, add)),
                AppendRequest(child, [NewEvent("X", b"{}")], 0, bare),
            ]
        )
        snapshot = await store.read_model(tree)
        assert snapshot is None, [model_place(key) for _, key, _ in snapshot.items]
