"""An eval run verifies like a session: its chain, its events against the schema, its
totals, its signed checkpoint, in the store and as a bundle; a score rewritten in the
SQLite file afterwards fails; a redacted bundle keeps the scores and withholds what was
judged; a bundle whose totals lie fails."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from agentjournal import Journal
from agentjournal.audit.export import eval_run_records, export_eval_bundle
from agentjournal.audit.verify import parse_bundle, verify_bundle, verify_eval_records
from agentjournal.engine.eval_events import RunStart, RunTotals, SessionScore, TurnScore
from agentjournal.engine.evals import EvalWriter
from agentjournal.evals.run import run_eval
from agentjournal.ledger import SigningKey
from eval_sessions import AnswerScorer, record_support
from stored_form import store_as_written

KEY = SigningKey.generate()
TRUSTED = {KEY.key_id: KEY.public_key}


async def scored(path: Path, *, signed: bool = True) -> str:
    uri = f"sqlite:///{path}"
    async with Journal.open(uri) as journal:
        await record_support(journal, "support-1")
        await run_eval(
            journal.store,
            [AnswerScorer(), AnswerScorer("refund", "12.50")],
            [("support-1", "main")],
            run_id="r",
            signing_key=KEY if signed else None,
        )
    return uri


async def verified(uri: str, trusted: dict[str, object] | None = None) -> str:
    async with Journal.open(uri) as journal:
        records = await eval_run_records(journal.store, "r")
    report = verify_eval_records("r", records, TRUSTED if trusted is None else trusted)  # type: ignore[arg-type]
    return report.text() if report.ok else "FAILED " + report.text()


async def test_a_signed_eval_run_verifies_in_the_store_and_as_a_bundle(tmp_path: Path) -> None:
    uri = await scored(tmp_path / "j.db")
    text = await verified(uri)
    assert "eval: 6 turn scores, 1 session score, completed, average 0.833" in text
    assert "checkpoints: 1 checkpoint signed by" in text
    assert text.endswith(f"VERIFIED by {KEY.key_id}") or "VERIFIED" in text
    async with Journal.open(uri) as journal:
        bundle = await export_eval_bundle(journal.store, "r")
    assert [s["name"] for s in bundle["streams"]] == ["EvalRun-r", "AgentLedger-EvalRun-r"]
    parsed = parse_bundle(json.dumps(bundle).encode())
    report = verify_bundle(parsed, TRUSTED)
    assert report.ok, report.text()
    assert report.integrity.state == "verified"
    untrusted = verify_bundle(parsed, {})
    assert not untrusted.ok


async def test_a_score_rewritten_in_the_file_fails_verification(tmp_path: Path) -> None:
    uri = await scored(tmp_path / "j.db")
    store_as_written(tmp_path / "j.db")  # the edit below is of the data as written
    with sqlite3.connect(tmp_path / "j.db") as db:
        changed = db.execute(
            "UPDATE events SET data = CAST(replace(CAST(data AS TEXT), '\"score\": 0.0', "
            "'\"score\": 1.0') AS BLOB) WHERE type = 'TurnScored' AND "
            "CAST(data AS TEXT) LIKE '%\"score\": 0.0%'"
        ).rowcount
    assert changed == 1  # refund's score of turn 3
    text = await verified(uri)
    assert text.startswith("FAILED")
    assert "EvalRun-r@6: the hash does not match the event (integrity)" in text


async def test_an_event_cut_from_the_end_fails_against_the_checkpoint(tmp_path: Path) -> None:
    uri = await scored(tmp_path / "j.db")
    with sqlite3.connect(tmp_path / "j.db") as db:
        db.execute("DELETE FROM events WHERE type = 'EvalRunCompleted'")
    text = await verified(uri)
    assert text.startswith("FAILED")
    assert "the stream was truncated" in text


async def test_a_redacted_bundle_keeps_the_scores_and_withholds_what_was_judged(
    tmp_path: Path,
) -> None:
    uri = await scored(tmp_path / "j.db")
    async with Journal.open(uri) as journal:
        bundle = await export_eval_bundle(journal.store, "r", redact=True)
    text = json.dumps(bundle)
    for judged in ("charged twice", "12.50", "Thanks!", "answer: "):
        assert judged not in text
    events = bundle["streams"][0]["events"]
    turns = [e for e in events if e["type"] == "TurnScored"]
    assert all(e["data"] is None for e in turns)
    view = turns[0]["view"]
    assert view["score"] == 1.0
    assert view["score_label"] == "pass"
    assert view["turn_index"] == 1
    assert view["session_id"] == "support-1"
    assert view["extensions"]["agentjournal"]["scorer"] == "answered"
    for withheld in ("input", "output", "reason"):
        assert set(view[withheld]) == {"withheld"}
    started, completed = events[0], events[-1]
    assert started["data"] is not None  # the scorers and the totals are no conversation
    assert completed["data"] is not None
    report = verify_bundle(parse_bundle(json.dumps(bundle).encode()), TRUSTED)
    assert report.ok, report.text()
    assert "(7 withheld)" in report.text()
    # A view changed in the bundle no longer matches its commitment.
    turns[0]["view"]["score"] = 0.0
    forged = verify_bundle(parse_bundle(json.dumps(bundle).encode()), TRUSTED)
    assert not forged.ok
    assert "does not match its commitment" in forged.text()


async def test_totals_that_are_not_those_of_the_scores_fail(tmp_path: Path) -> None:
    async with Journal.open(f"sqlite:///{tmp_path / 'j.db'}") as journal:
        writer = await EvalWriter.open(journal.store, "r")
        start = RunStart("r", "eval", (("s", "main"),), ({"name": "a", "version": "1"},))
        await writer.start(start)
        await writer.add(
            [
                TurnScore("s", "main", 1, "a", "1", 0.25),
                TurnScore("s", "main", 2, "a", "1", 0.75),
                SessionScore("s", "main", 0.5, "pass"),
            ]
        )
        await writer.complete(RunTotals("", 2, 0.9, 0.0, {}, {}, {}, 1))
        records = await eval_run_records(journal.store, "r")
    report = verify_eval_records("r", records, {}, allow_uncovered=True)
    assert not report.ok
    assert "EvalRunCompleted says the average is 0.9; its scores' is 0.5" in report.text()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda b: b.update(run_id="other"), "EvalRun-r is not a stream of eval run other"),
        (lambda b: b.update(version=9), "of version 9"),
        (lambda b: b.pop("run_id"), "missing ['run_id']"),
    ],
)
async def test_a_malformed_eval_bundle_fails_its_structure(
    tmp_path: Path, edit: object, message: str
) -> None:
    uri = await scored(tmp_path / "j.db", signed=False)
    async with Journal.open(uri) as journal:
        bundle = await export_eval_bundle(journal.store, "r")
    edit(bundle)  # type: ignore[operator]
    report = verify_bundle(parse_bundle(json.dumps(bundle).encode()), {}, allow_uncovered=True)
    assert not report.ok
    assert message in report.text()


class _Text(str):
    """A str subclass: not what JSON parses to."""


async def test_an_eval_bundle_is_read_with_the_checks_its_source_needs(tmp_path: Path) -> None:
    """Parsed by ``parse_bundle``, a metadata value that is not text is refused; built
    otherwise, a subclass of ``str`` among the metadata is refused too."""
    uri = await scored(tmp_path / "j.db")
    async with Journal.open(uri) as journal:
        bundle = await export_eval_bundle(journal.store, "r")
    event = bundle["streams"][0]["events"][1]
    refused = "metadata must map strings to strings"
    event["metadata"] = {**event["metadata"], "aj.note": 7}
    report = verify_bundle(parse_bundle(json.dumps(bundle).encode()), TRUSTED)
    assert [(p.check, p.message) for p in report.problems] == [("structure", refused)]
    event["metadata"] = {**event["metadata"], "aj.note": _Text("seven")}
    report = verify_bundle(bundle, TRUSTED)
    assert [(p.check, p.message) for p in report.problems] == [("structure", refused)]
