"""The usage read model and ``agentjournal usage``.

The pure fold (grouping, the legacy ``$usage`` rule, prices and their validation) on
records made here; then the command end to end, through the real CLI, on SQLite files
and the KurrentDB double, against sessions written by real ``Runner`` runs.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agentjournal import Journal, events
from agentjournal.errors import InvalidInput
from agentjournal.read.usage import (
    STAND_INS,
    Price,
    Prices,
    UsageFold,
    UsageReport,
    usage_of,
)
from agentjournal.records import Record, TreeRecords
from agentjournal.testing.kurrentdb_double import KurrentDBDouble
from agentjournal.tokens import ModelResponse, Usage
from agentjournal.walk import read_tree
from cli_run import on_a_terminal, run
from drive import drive
from usage_scenarios import Script, nested, parallel

# -- the fold, on records made here ---------------------------------------------------------


def responded(stream: str, revision: int, agent: str, model: str | None, k: int) -> Record:
    data = ModelResponse(
        "s1", agent, model, None, f"r{k}", Usage(1, 100 * k, 10 * k, 5 * k, k, 105 * k), None, "t"
    ).encode()
    return Record(stream, revision, f"id-{stream}-{revision}", events.MODEL_RESPONDED,
                  data.decode(), "", {events.RESPONSE_ID_KEY: f"r{k}"})  # fmt: skip


def assistant(stream: str, revision: int, response_id: str | None, tokens: int) -> Record:
    """An assistant event as a writer before ModelResponded left it: ``$usage`` on it."""
    usage = json.dumps({"input_tokens": str(tokens), "output_tokens": "1", "model": "old-model"})
    metadata = {events.USAGE_KEY: usage}
    if response_id is not None:
        metadata[events.RESPONSE_ID_KEY] = response_id
    data = json.dumps({"author_name": "triage", "content": "hi"})
    return Record(stream, revision, f"a-{stream}-{revision}", "AssistantTextGenerated", data, "",
                  metadata)  # fmt: skip


S = "AgentSession-s1"
A = "AgentSubsession-s1-sub-billing-h1"


def tree(*records: Record) -> TreeRecords:
    streams: dict[str, list[Record]] = {}
    for record in records:
        streams.setdefault(record.stream, []).append(record)
    return TreeRecords("s1", streams)


def test_rows_by_model_agent_and_session() -> None:
    records = tree(
        responded(S, 0, "triage", "m-small", 1),
        responded(A, 0, "billing", "m-large", 2),
        responded(A, 1, "billing", "m-small", 3),
    )
    by_model = usage_of(records, by="model")
    assert [(r.key, r.usage.requests, r.usage.input_tokens) for r in by_model.rows] == [
        ("m-small", 2, 400),
        ("m-large", 1, 200),
    ]
    assert by_model.total.usage == Usage(3, 600, 60, 30, 6, 630)
    by_agent = usage_of(records, by="agent")
    assert [(r.key, r.usage.requests) for r in by_agent.rows] == [("billing", 2), ("triage", 1)]
    assert [(r.key, r.usage.requests) for r in usage_of(records, by="session").rows] == [("s1", 3)]
    assert by_model.rows[0].cost is None  # no price table: no cost
    with pytest.raises(InvalidInput, match="grouped by one of model, agent, session"):
        usage_of(records, by="tool")  # type: ignore[arg-type]


def test_costs_cached_input_and_reasoning_at_their_prices() -> None:
    price = Price(Decimal("2"), Decimal("8"), cached_input=Decimal("0.5"))
    usage = Usage(1, 1_000_000, 400_000, 100_000, 30_000, 1_100_000)
    # 600k new input at 2 + 400k cached at 0.5 + 100k output (reasoning as output) at 8.
    assert price.cost(usage) == Decimal("1.2") + Decimal("0.2") + Decimal("0.8")
    priced_reasoning = Price(Decimal("2"), Decimal("8"), reasoning=Decimal("20"))
    # 70k output at 8 + 30k reasoning at 20, input all at 2.
    assert priced_reasoning.cost(usage) == Decimal("2") + Decimal("0.56") + Decimal("0.6")


def test_a_model_without_a_price_makes_its_rows_cost_unknown_never_zero() -> None:
    records = tree(
        responded(S, 0, "triage", "priced", 1),
        responded(S, 1, "triage", "unpriced", 2),
        responded(A, 0, "billing", None, 0),  # an unnamed model that used no tokens
    )
    prices = Prices.from_json({"models": {"priced": {"input": 1, "output": 2}}})
    by_model = {r.key: r.cost for r in usage_of(records, by="model", prices=prices).rows}
    assert by_model == {"priced": Decimal("0.00011"), "unpriced": None, None: Decimal(0)}
    by_agent = usage_of(records, by="agent", prices=prices)
    assert {r.key: r.cost for r in by_agent.rows} == {"triage": None, "billing": Decimal(0)}
    assert by_agent.total.cost is None  # part of it is unknown
    assert by_agent.priced


def test_legacy_usage_counts_once_per_response_and_only_before_model_responded() -> None:
    records = tree(
        # Written before the upgrade: two items of response r-old, one with no response id.
        assistant(S, 0, "r-old", 50),
        assistant(S, 1, "r-old", 50),
        assistant(S, 2, None, 7),
        # After it: the response's own event first, then its item with the $usage copy.
        responded(S, 3, "triage", "new-model", 1),
        assistant(S, 4, "r1", 100),
        # A subsession written before the upgrade counts by the same rule.
        assistant(A, 0, "r-sub", 9),
    )
    report = usage_of(records, by="model")
    assert {r.key: r.usage.requests for r in report.rows} == {"old-model": 3, "new-model": 1}
    assert report.total.usage.input_tokens == 50 + 7 + 100 + 9
    assert report.legacy == 3
    assert {r.key for r in usage_of(records, by="agent").rows} == {"triage"}


def test_the_global_order_learns_each_streams_session_from_the_events() -> None:
    started = Record(S, 0, "e0", events.SESSION_STARTED, "{}", "", {})
    opened = Record(S, 1, "e1", events.SUBAGENT_STARTED, json.dumps({"subsession_stream": A}),
                    "", {events.INDEX_KEY: "1"})  # fmt: skip
    fold = UsageFold()
    fold.add_all([started, opened, assistant(A, 0, "r-sub", 9), responded(S, 2, "t", None, 1)])
    assert {r.key: r.usage.requests for r in fold.report(by="session").rows} == {"s1": 2}


def test_an_unreadable_response_is_skipped_and_counted() -> None:
    bad = Record(S, 0, "x", events.MODEL_RESPONDED, '{"session_id": 1}', "", {})
    fold = UsageFold("s1")
    fold.add(bad)
    assert fold.unreadable == 1
    assert fold.report().total.usage == Usage()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([1, 2], "a mapping with one key, models"),
        ({"models": {}, "currency": "EUR"}, "one key, models (found ['currency', 'models'])"),
        ({"models": {}}, "models must map each model name to its prices"),
        ({"models": {"m": 3}}, "model 'm': give input and output"),
        ({"models": {"m": {"input": 1}}}, "model 'm': output is missing"),
        ({"models": {"m": {"input": -1, "output": 1}}}, "model 'm': input must be a non-negative"),
        ({"models": {"m": {"input": 1, "output": True}}}, "model 'm': output must be a number"),
        ({"models": {"m": {"input": 1, "output": "2"}}}, "model 'm': output must be a number"),
        ({"models": {"m": {"input": 1, "output": float("nan")}}}, "must be a non-negative"),
        ({"models": {"m": {"input": 1, "output": 1, "cache": 1}}}, "unknown field 'cache'"),
    ],
)
def test_a_bad_price_table_says_which_model_and_field(body: Any, says: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(says)):
        Prices.from_json(body)


# -- the command, end to end --------------------------------------------------------------


@dataclass
class Written:
    """A store written by real runs: two sessions, their scripts, a price file."""

    uri: str
    scripts: dict[str, Script]
    prices: Path


@pytest.fixture(params=["sqlite", "kurrentdb"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'usage.db'}"
        return
    with KurrentDBDouble.in_thread() as double:
        yield double.uri


async def write_sessions(uri: str, tmp_path: Path) -> Written:
    scripts = {"u-one": Script(), "u-two": Script()}
    async with Journal.open(uri) as journal:
        one = journal.session("u-one")
        await drive(nested(scripts["u-one"], models=("m-a", "m-b")), "refund", session=one,
                    hooks=one)  # fmt: skip
        two = journal.session("u-two")
        await drive(parallel(scripts["u-two"]), "hi", session=two, hooks=two)
    prices = tmp_path / "prices.yml"
    prices.write_text(
        "# USD per 1M tokens\nmodels:\n  m-a:\n    input: 2\n    cached_input: 0.5\n"
        "    output: 8\n  m-b: {input: 1, output: 4, reasoning: 10}\n",
        encoding="utf-8",
    )
    return Written(uri, scripts, prices)


def usage_json(*args: str) -> dict[str, Any]:
    result = run("usage", *args, "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def counts(usage: Usage) -> dict[str, int]:
    return usage.as_dict()


def without_cost(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k not in ("key", "cost_usd")}


def test_one_session_by_model_agent_and_session(backend: str, tmp_path: Path) -> None:
    written = asyncio.run(write_sessions(backend, tmp_path))
    script = written.scripts["u-one"]
    report = usage_json("u-one", "--uri", backend)
    assert report["session"] == "u-one"
    assert report["by"] == "model"
    assert without_cost(report["total"]) == counts(script.total())
    models = {row["key"]: row["requests"] for row in report["rows"]}
    assert models == {"m-a": 3, "m-b": 2}  # triage and refunds on m-a, billing on m-b
    agents = usage_json("u-one", "--by", "agent", "--uri", backend)
    assert {row["key"]: row["requests"] for row in agents["rows"]} == {
        "triage": 1,
        "billing": 2,
        "refunds": 2,
    }
    for row in agents["rows"]:
        expected = sum((u for _, agent, u in script.scripted if agent == row["key"]), Usage())
        assert without_cost(row) == counts(expected)
    sessions = usage_json("u-one", "--by", "session", "--uri", backend)
    assert [row["key"] for row in sessions["rows"]] == ["u-one"]


def test_every_session_with_prices(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = asyncio.run(write_sessions(backend, tmp_path))
    # Many pages: each event folded once. (``agentjournal.cli.usage`` is also the name of
    # the package's usage-error helper: take the module itself.)
    monkeypatch.setattr(importlib.import_module("agentjournal.cli.usage"), "PAGE", 7)
    everything = written.scripts["u-one"].total() + written.scripts["u-two"].total()
    report = usage_json("--by", "session", "--prices", str(written.prices), "--uri", backend)
    assert report["session"] is None
    assert report["priced"] is True
    rows = {row["key"]: row for row in report["rows"]}
    assert without_cost(rows["u-one"]) == counts(written.scripts["u-one"].total())
    assert without_cost(rows["u-two"]) == counts(written.scripts["u-two"].total())
    assert without_cost(report["total"]) == counts(everything)
    assert rows["u-one"]["cost_usd"] is not None  # m-a and m-b are priced
    assert rows["u-two"]["cost_usd"] is None  # its ScriptedModel names no model: unknown
    assert report["total"]["cost_usd"] is None
    by_model = usage_json("--prices", str(written.prices), "--uri", backend)
    costs = {row["key"]: row["cost_usd"] for row in by_model["rows"]}
    m_a = [u for _, agent, u in written.scripts["u-one"].scripted if agent != "billing"]
    expected_a = Prices.from_json(
        {"models": {"m-a": {"input": 2, "cached_input": 0.5, "output": 8}}}
    ).cost("m-a", sum(m_a, Usage()))
    assert costs["m-a"] == pytest.approx(float(expected_a or 0))
    assert costs[None] is None


def test_the_table_has_a_total_row_and_cost_unknown(backend: str, tmp_path: Path) -> None:
    written = asyncio.run(write_sessions(backend, tmp_path))
    result = run("usage", "--prices", str(written.prices), "--uri", backend)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "model",
        "requests",
        "input",
        "cached",
        "output",
        "reasoning",
        "total",
        "cost",
        "USD",
    ]
    total = written.scripts["u-one"].total() + written.scripts["u-two"].total()
    assert lines[-1].split()[:8] == ["total", *map(str, counts(total).values()), "unknown"]
    unnamed = next(line for line in lines if line.startswith("(unnamed)"))
    assert unnamed.split()[-1] == "unknown"  # usage without a price: never 0
    assert "\x1b[" not in result.stdout  # a pipe gets plain text


def test_a_session_written_before_model_responded_counts_by_usage(tmp_path: Path) -> None:
    db = tmp_path / "legacy.db"
    uri = f"sqlite:///{db}"
    script = Script()

    async def write() -> None:
        async with Journal.open(uri) as journal:
            session = journal.session("u-old")
            await drive(nested(script), "refund", session=session, hooks=session)

    asyncio.run(write())
    # What an older agentjournal wrote: the same events without the responses' own.
    raw = sqlite3.connect(db)
    raw.execute("DELETE FROM events WHERE type = ?", (events.MODEL_RESPONDED,))
    raw.commit()
    raw.close()
    report = usage_json("u-old", "--uri", uri)
    # The two handoff-only responses (resp-1, resp-3) were never recorded there.
    assert report["legacy_responses"] == 3
    kept = [u for response_id, _, u in script.scripted if response_id not in ("resp-1", "resp-3")]
    assert without_cost(report["total"]) == counts(sum(kept, Usage()))
    plain = run("usage", "u-old", "--uri", uri)
    assert "3 of these responses were counted from $usage" in plain.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--by", "tool"], "--by must be model, agent or session, not 'tool'"),
        (["--prices", "{missing}"], "cannot read prices"),
        (["--prices", "{not_yaml}"], "is not valid YAML at line 3"),
        (["--prices", "{negative}"], "model 'm-a': input must be a non-negative number, got -2"),
        (["--prices", "{unknown}"], "model 'm-a': unknown field 'discount'"),
        (["u-none"], "no session 'u-none'"),
        (["bad id!"], "session id"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(tmp_path: Path, args: list[str], says: str) -> None:
    uri = f"sqlite:///{tmp_path / 'usage.db'}"

    async def write() -> None:
        async with Journal.open(uri) as journal:
            session = journal.session("u-one")
            await drive(parallel(Script()), "hi", session=session, hooks=session)

    asyncio.run(write())
    files = {
        "missing": tmp_path / "missing.yml",
        "not_yaml": tmp_path / "not.yml",
        "negative": tmp_path / "negative.yml",
        "unknown": tmp_path / "unknown.yml",
    }
    files["not_yaml"].write_text("models:\n  m-a: [unclosed\n", encoding="utf-8")
    files["negative"].write_text("models: {m-a: {input: -2, output: 1}}\n", encoding="utf-8")
    files["unknown"].write_text(
        "models: {m-a: {input: 1, output: 1, discount: 3}}\n", encoding="utf-8"
    )
    filled = [arg.format(**{k: str(v) for k, v in files.items()}) for arg in args]
    for extra in ([], ["--json"]):
        result = run("usage", *filled, *extra, "--uri", uri)
        assert result.returncode == 1
        assert result.stdout == ""
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert says in result.stderr


def test_no_store_is_one_line_and_nothing_is_created(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    result = run("usage", "--uri", f"sqlite:///{missing}")
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert not missing.exists()


def test_help_shows_an_example() -> None:
    result = run("usage", "--help")
    assert result.returncode == 0
    assert "example: agentjournal usage support-4711 --by agent --prices prices.yml" in (
        " ".join(result.stdout.split())
    )


def test_a_tree_read_in_python_gives_what_the_command_prints(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'usage.db'}"
    written = asyncio.run(write_sessions(uri, tmp_path))

    async def read() -> UsageReport:
        async with Journal.open(uri) as journal:
            tree = await read_tree(journal.store, "u-one")
            return usage_of(tree, by="agent", prices=Prices.default())

    report = asyncio.run(read())
    assert report.as_dict() == {
        k: v
        for k, v in usage_json("u-one", "--by", "agent", "--uri", uri).items()
        if k != "session"
    }
    assert report.total.usage == written.scripts["u-one"].total()


@pytest.mark.slow
def test_on_a_terminal_a_rich_table(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'usage.db'}"
    written = asyncio.run(write_sessions(uri, tmp_path))
    shown = on_a_terminal("usage", "--by", "agent", "--prices", str(written.prices), "--uri", uri)
    assert "\x1b[" in shown  # styled
    assert "━" in shown or "─" in shown  # drawn as a table
    assert "billing" in shown
    assert "unknown" in shown


def test_a_damaged_event_is_named_in_one_line(tmp_path: Path) -> None:
    from damaged import add_damaged_session

    uri = f"sqlite:///{tmp_path / 'damaged.db'}"
    where = asyncio.run(add_damaged_session(uri, "bad"))
    done = run("usage", "bad", "--uri", uri)
    assert done.returncode == 1
    assert done.stderr == f"agentjournal: {where}: the data is not UTF-8 text (byte 0)\n"


# -- the maintained price table ----------------------------------------------------------------

_SOME = Usage(requests=1, input_tokens=1000, cached_input_tokens=200, output_tokens=100)


def test_a_named_model_is_priced_from_the_maintained_table() -> None:
    # gpt-4.1-mini: 0.40 input, 0.10 cached input, 1.60 output, USD per 1M tokens.
    assert Prices.default().cost("gpt-4.1-mini", _SOME) == Decimal("0.0005")
    assert Prices.default().cost("no-such-model-anywhere", _SOME) is None
    assert Prices.default().cost(None, _SOME) is None
    assert Prices.default().cost("no-such-model-anywhere", Usage()) == Decimal(0)


def test_the_demo_s_scripted_model_is_priced_as_the_model_it_stands_in_for() -> None:
    assert STAND_INS["scripted-demo"] == "gpt-4.1-mini"
    prices = Prices.default()
    assert prices.cost("scripted-demo", _SOME) == prices.cost("gpt-4.1-mini", _SOME)


def test_a_price_file_overrides_the_table_and_prices_models_as_others() -> None:
    prices = Prices.from_json(
        {
            "models": {
                "gpt-4.1-mini": {"input": 1, "output": 1},
                "our-finetune": {"as": "gpt-4.1"},
            }
        }
    )
    assert prices.cost("gpt-4.1-mini", _SOME) == Decimal("0.0011")  # the file's, not the table's
    assert prices.cost("our-finetune", _SOME) == Prices.default().cost("gpt-4.1", _SOME)
    assert prices.cost("our-finetune", _SOME) is not None
    alone = Prices(prices.models, prices.priced_as, maintained=False)
    assert alone.cost("gpt-4.1", _SOME) is None


@pytest.mark.parametrize(
    "entry",
    [{"as": ""}, {"as": 3}, {"as": "gpt-4.1", "input": 1}],
)
def test_a_bad_as_entry_is_one_clear_error(entry: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match="'as' names the model it is priced as"):
        Prices.from_json({"models": {"m": entry}})


def test_the_demo_s_usage_shows_costs_without_a_price_file(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'demo.db'}"
    assert run("demo", "--uri", uri, "--session", "d-1").returncode == 0
    report = usage_json("d-1", "--uri", uri)
    (row,) = report["rows"]
    assert row["key"] == "scripted-demo"
    assert row["cost_usd"] is not None
    assert Decimal(str(report["total"]["cost_usd"])) > 0


def test_an_alias_takes_the_file_s_price_first_and_a_dead_alias_is_refused() -> None:
    prices = Prices.from_json(
        {"models": {"gpt-4.1": {"input": 100, "output": 100}, "scripted-demo": {"as": " gpt-4.1 "}}}
    )
    assert prices.cost("scripted-demo", _SOME) == prices.cost("gpt-4.1", _SOME)
    assert prices.cost("scripted-demo", _SOME) == Decimal("0.11")  # the file's, not the table's
    own = Prices.from_json({"models": {"s": {"as": "x"}, "x": {"input": 1, "output": 1}}})
    assert own.cost("s", _SOME) == Decimal("0.0011")
    for entry, message in (
        ({"m": {"as": "no-such-model-anywhere"}}, "neither this file nor the maintained table"),
        ({"m": {"as": "m"}}, "not an alias"),
        ({"m": {"as": "n"}, "n": {"as": "gpt-4.1"}}, "not an alias"),
    ):
        with pytest.raises(InvalidInput, match=message):
            Prices.from_json({"models": entry})
