"""``trace export --all`` in two parts (two processes) exports byte for byte what one
process exports: the same spans in the same order, the same evaluation events, the same
warnings, on a store of guardrail blocks and refusals, nested handoffs, branches with
continuations, eval scores (a sealed reason too) and a damaged event."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from typing import Any

import pytest

from agentjournal import Journal, _forked
from agentjournal.cli import _trace_all
from agentjournal.engine.evals import session_sealer
from agentjournal.read.traces import ProjectedSpan
from agentjournal.read.traces.parts import Part, in_order
from agentjournal.store import open_store
from damaged import add_damaged_session
from drive import Method
from eval_runs import Given, run_session, write_rating, write_run
from scenarios import run_turn
from test_trace_branches import _forks_and_branch_runs, _main_runs
from trace_scenarios import write_support
from two_parts import Sent, every_tree

SESSIONS = ("s1", "s2", "s3", "s4")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("parts")
    uri = f"sqlite:///{folder / 'journal.db'}"

    async def write() -> None:
        for name in SESSIONS:
            await write_support(uri, name)
        method: Method = "run"
        await _main_runs(uri, method)
        await _forks_and_branch_runs(uri, method)
        await run_session(uri, "e1", turns=2)
        async with Journal.open(uri, keys=folder / "keys.db") as journal:
            session = journal.session("sealed-1", user_id="alice")
            await run_turn("run", 0, session)
            sealer = await session_sealer(journal.store, "sealed-1", journal.keys)
            await write_run(
                journal.store,
                "judged",
                [Given("sealed-1", 1, "judge", 0.9, "pass", reason="secret-reason-77")],
                sealers={"sealed-1": sealer} if sealer is not None else None,
            )
            await write_run(
                journal.store,
                "nightly",
                [Given("e1", 1, "exact", 1.0, "pass"), Given("s1", 1, "exact", 0.5, "fail")],
            )
            await write_rating(journal.store, "e1", 2, 0.75, by="ana", label="good")
        await add_damaged_session(uri, "bad")

    asyncio.run(write())
    return uri


def _lines(spans: list[ProjectedSpan]) -> str:
    return "".join(json.dumps(span.as_json(), sort_keys=True) + "\n" for span in spans)


def _one_process(uri: str) -> list[ProjectedSpan]:
    return asyncio.run(every_tree(uri, None))


def test_two_processes_export_what_one_exports(
    mixed: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = _one_process(mixed)
    warned = capsys.readouterr().err
    assert warned.startswith("agentjournal: skipped AgentSession-bad@")
    monkeypatch.setattr(_forked, "core_to_spare", lambda: True)
    for output in (_trace_all._as_is, _trace_all._lines()):  # the spans (OTLP, console), the lines
        second = _trace_all._second_part(mixed, output)
        assert second is not None
        try:
            split = asyncio.run(every_tree(mixed, second, output))
        finally:
            second.close()
        assert split == [output(span) for span in alone]
        assert capsys.readouterr().err == warned
    assert "".join(text for _, text in split) == _lines(alone)
    text = _lines(alone)
    assert "gen_ai.evaluation.result" in text
    assert "secret-reason-77" not in text
    assert '"agentjournal.branch": "inside"' in text
    assert "agentjournal.guardrail" in text


def test_a_part_whose_child_failed_is_folded_here(
    mixed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    alone = _one_process(mixed)
    warned = capsys.readouterr().err
    failed = _forked.forked(lambda: 1 / 0)
    assert failed is not None
    try:
        split = asyncio.run(every_tree(mixed, failed))
    finally:
        failed.close()
    assert split == alone
    assert capsys.readouterr().err == warned


def test_each_part_folds_its_own_trees_and_both_fold_some(mixed: str) -> None:
    async def parts() -> list[Any]:
        store = await open_store(mixed, create=False)
        try:
            return [await _trace_all._project(store, Part(i, 2), _trace_all._as_is) for i in (0, 1)]
        finally:
            await store.close()

    first, second = asyncio.run(parts())
    assert first[1]
    assert second[1]
    sessions = [
        {s.attributes.get("agentjournal.session_id") for s in p[1]} for p in (first, second)
    ]
    assert not sessions[0] & sessions[1]
    placed = [list(zip(p[0], p[1], strict=True)) for p in (first, second)]
    assert in_order(placed) == _one_process(mixed)


def test_a_part_read_before_a_writer_appended_is_folded_again_to_where_this_one_read(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two parts of two moments would export a later session without an earlier one, which
    no one process can: the child's part is folded here again, to this process's end."""
    uri = f"sqlite:///{tmp_path / 'journal.db'}"
    for name in ("base-1", "base-2"):
        asyncio.run(write_support(uri, name))
    monkeypatch.setattr(_forked, "core_to_spare", lambda: True)
    child = _trace_all._second_part(uri, _trace_all._as_is)
    assert child is not None
    try:
        sent = child.result()
    finally:
        child.close()
    assert sent is not None
    for name in ("late-1", "late-2", "late-3", "late-4"):
        asyncio.run(write_support(uri, name))
    split = asyncio.run(every_tree(uri, Sent(sent)))
    assert split == _one_process(uri)
    assert {span.attributes.get("agentjournal.session_id") for span in split} >= {
        "late-1",
        "late-2",
        "late-3",
        "late-4",
    }


@pytest.mark.parametrize(
    ("stored", "why"),
    [
        (b'"abc"', "the metadata is not a UTF-8 JSON object"),
        (b"[1, 2]", "the metadata is not a UTF-8 JSON object"),
        (b'{"aj.seq": "\xff"}', "the metadata is not a UTF-8 JSON object"),
    ],
)
def test_an_event_whose_metadata_is_no_json_object_is_skipped_in_one_part_or_two(
    mixed: str,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stored: bytes,
    why: str,
) -> None:
    """On a session's top stream, where every part looks for turn marks first."""
    path = tmp_path / "damaged.db"
    with (
        contextlib.closing(sqlite3.connect(mixed.removeprefix("sqlite:///"))) as source,
        contextlib.closing(sqlite3.connect(path)) as copy,
    ):
        source.backup(copy)
        copy.execute(
            "UPDATE events SET metadata = ? WHERE revision = 1 AND stream_id = "
            "(SELECT id FROM streams WHERE name = 'AgentSession-s1')",
            (stored,),
        )
        copy.commit()
    uri = f"sqlite:///{path}"
    alone = _one_process(uri)
    warned = capsys.readouterr().err
    assert f"agentjournal: skipped AgentSession-s1@1: {why}" in warned
    assert alone
    monkeypatch.setattr(_forked, "core_to_spare", lambda: True)
    second = _trace_all._second_part(uri, _trace_all._as_is)
    assert second is not None
    try:
        assert asyncio.run(every_tree(uri, second)) == alone
    finally:
        second.close()
    assert capsys.readouterr().err == warned
