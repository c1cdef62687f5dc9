"""The viewer without a browser: its data, its HTTP answers, its token, its commands.

The store holds real runs (``ui_support.write_store``: the demo with a policy, and a
session whose user message is HTML and script). The application runs on a real uvicorn
server on loopback; ``agentjournal ui`` runs once as a real process. The browser tests
are in ``test_ui_browser.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentjournal.cli._common import trusted_keys
from agentjournal.store import open_store
from agentjournal.testing.kurrentdb_double import ThreadedKurrentDBDouble
from agentjournal.ui.page import SCRIPTS, render, session_page
from cli_run import run
from stored_form import store_as_written
from ui_support import (
    HOSTILE,
    LISTED,
    Stored,
    serving,
    tamper,
    write_in_thread,
    write_listed,
    write_session,
    write_store,
)

TOKEN = "s3cret-token-for-the-viewer"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    return write_store(tmp_path_factory.mktemp("ui"))


@pytest.fixture(scope="module")
def url(stored: Stored) -> Iterator[str]:
    with serving(stored.uri, pubkey=stored.pubkey) as base:
        yield base


def _page(stored: Stored, session_id: str, uri: str | None = None) -> dict[str, object]:
    async def read() -> dict[str, object]:
        store = await open_store(uri or stored.uri, create=False)
        try:
            return await session_page(
                store, session_id, trusted_keys([str(stored.pubkey)]), every_history=True
            )
        finally:
            await store.close()

    return asyncio.run(read())


@pytest.mark.slow
def test_session_data_has_lanes_decisions_grants_and_a_verified_ledger(stored: Stored) -> None:
    data = _page(stored, "demo-1")
    events = data["events"]
    assert isinstance(events, list)
    assert [lane for lane in data["lanes"] if lane != "authority"] == [  # type: ignore[attr-defined]
        "triage",
        "billing",
        "refunds",
    ]
    modify = [e for e in events if e.get("decision") == "MODIFY"]
    assert len(modify) == 1
    assert modify[0]["agent"] == "billing"
    diff = modify[0]["diff"]
    assert any(op == "-" and "ann@example.com" in line for op, line in diff)
    assert any(op == "+" and "[REDACTED]" in line for op, line in diff)
    blocks = [e for e in events if e.get("decision") == "BLOCK"]
    assert [b["agent"] for b in blocks] == ["refunds"]
    assert {e["agent"] for e in events if e["kind"] == "AuthorityGranted"} >= {"triage"}
    assert data["integrity"]["ok"], data["integrity"]  # type: ignore[index]
    assert not any(e["failed"] for e in events)
    # Every event of the tree but the checkpoints is on the timeline, in commit order.
    positions = [e["position"] for e in events]
    assert positions == sorted(positions)
    # The export carries the history before every item; #0 has none before it.
    histories = data["replay"]["histories"]  # type: ignore[index]
    assert histories["0"] == []
    assert len(histories["3"]) == 3


def test_a_tampered_copy_fails_at_the_edited_event(stored: Stored, tmp_path: Path) -> None:
    copy, stream, revision = tamper(
        stored, tmp_path, b"refund of 1250 cents", b"refund of 9999 cents"
    )
    data = _page(stored, "demo-1", f"sqlite:///{copy}")
    assert not data["integrity"]["ok"]  # type: ignore[index]
    first = data["integrity"]["problems"][0]  # type: ignore[index]
    assert (first["stream"], first["revision"]) == (stream, revision)
    failed = [e for e in data["events"] if e["failed"]]  # type: ignore[attr-defined]
    assert [(e["stream"], e["revision"]) for e in failed] == [(stream, revision)]


def test_a_session_whose_page_failed_is_listed_failed_though_the_fold_passed(
    stored: Stored, tmp_path: Path
) -> None:
    copy = tmp_path / "copy.db"
    shutil.copy(stored.path, copy)
    with (
        serving(f"sqlite:///{copy}", pubkey=stored.pubkey) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):

        def listed() -> dict[str, Any]:
            rows = client.get("/api/sessions").json()["rows"]
            integrity: dict[str, Any] = next(
                r["integrity"] for r in rows if r["session_id"] == "demo-1"
            )
            return integrity

        assert listed()["state"] == "verified"  # folded (in memory)
        store_as_written(copy)  # the edit below is of the data as written
        with sqlite3.connect(copy) as db:  # an event changed after it was folded
            db.execute(
                "UPDATE events SET data = CAST(replace(CAST(data AS TEXT), "
                "'refund of 1250 cents', 'refund of 9999 cents') AS BLOB) "
                "WHERE instr(data, 'refund of 1250 cents') > 0"
            )
        assert listed()["state"] == "verified"  # the fold does not read it again
        page = client.get("/api/sessions/demo-1").json()["integrity"]
        assert page["state"] == "failed"
        after = listed()
        assert (after["state"], after["problem"]) == ("failed", page["problem"])
        assert after["checked_at"] == page["checked_at"]
        # Filters and the order see the full check too: never found, nor sorted, as sound.
        failed = client.get("/api/sessions?state=failed").json()["rows"]
        assert [r["session_id"] for r in failed] == ["demo-1"]
        verified = client.get("/api/sessions?state=verified&limit=500").json()["rows"]
        assert "demo-1" not in {r["session_id"] for r in verified}
        worst = client.get("/api/sessions?sort=integrity&order=asc&limit=1").json()["rows"]
        assert worst[0]["session_id"] == "demo-1"


def test_rendered_pages_carry_stored_values_only_as_inert_json(stored: Stored) -> None:
    data = _page(stored, "hostile-1")
    for inline in (False, True):
        page = render(data, inline=inline)
        # The only script elements are the data block and the viewer's own scripts (one
        # inline, else each linked).
        own = 1 if inline else len(SCRIPTS)
        assert len(re.findall(r"<script\b", page)) == 1 + own, page[:2000]
        assert "</script><b>" not in page
        assert "<img" not in page
        block = page.split('id="aj-data">', 1)[1].split("</script>", 1)[0]
        assert json.loads(block)["session_id"] == "hostile-1"
        assert json.loads(block)["replay"]["current"][0]["content"] == HOSTILE


def test_the_server_answers_pages_data_and_404s(url: str) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        index = client.get("/")
        assert index.status_code == 200
        assert "demo-1" in index.text
        assert "frame-ancestors 'none'" in index.headers["content-security-policy"]
        session = client.get("/sessions/demo-1")
        assert session.status_code == 200
        assert 'data-mode="live"' in session.text
        missing = client.get("/sessions/nope-1")
        assert missing.status_code == 404
        assert "no session &#x27;nope-1&#x27;" in missing.text
        assert client.get("/api/sessions/nope-1").status_code == 404
        assert client.get("/sessions/bad id").status_code == 404
        assert client.get("/static/ui.js").headers["content-type"].startswith("text/javascript")
        assert client.get("/static/../journal.db").status_code == 404
        rows = client.get("/api/sessions").json()["rows"]
        assert {row["session_id"] for row in rows} >= {"demo-1", "hostile-1"}
        assert client.get("/api/sessions/demo-1/replay?at=2").json()["items"][0]["role"] == "user"
        assert client.get("/api/sessions/demo-1/replay?at=x").status_code == 404


def test_without_a_token_only_loopback_host_names_are_answered(url: str) -> None:
    port = url.rsplit(":", 1)[1]
    with httpx.Client(base_url=url, timeout=30) as client:
        # A page at another name rebound to 127.0.0.1 (DNS rebinding) reads nothing.
        rebound = client.get("/api/sessions/demo-1", headers={"Host": f"evil.example:{port}"})
        assert rebound.status_code == 421
        assert "demo-1" not in rebound.text
        for name in ("localhost", "127.0.0.1", "[::1]"):
            answer = client.get("/api/sessions", headers={"Host": f"{name}:{port}"})
            assert answer.status_code == 200, name


def test_an_event_stream_announces_a_session_written_after_it_opened(
    stored: Stored, url: str
) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        after = client.get("/api/sessions").json()["position"]
        with client.stream("GET", f"/events?after={after}") as stream:
            lines = stream.iter_lines()
            assert next(lines).startswith(": following from")
            writer = threading.Thread(
                target=write_in_thread,
                args=(stored.uri, stored.pubkey.with_suffix(""), "sse-1", "hello"),
            )
            writer.start()
            try:
                assert next(line for line in lines if line) == "event: changed"
            finally:
                writer.join(60)
    with httpx.Client(base_url=url, timeout=30) as client:
        assert "sse-1" in {row["session_id"] for row in client.get("/api/sessions").json()["rows"]}


def test_a_token_is_required_by_header_query_or_the_cookie_it_sets(stored: Stored) -> None:
    with (
        serving(stored.uri, token=TOKEN) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        refused = client.get("/sessions/demo-1")
        assert refused.status_code == 401
        assert "demo-1" not in refused.text
        assert client.get("/", headers={"Authorization": "Bearer wrong-token"}).status_code == 401
        assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        opened = client.get(f"/?token={TOKEN}")
        assert opened.status_code == 200
        assert "HttpOnly" in opened.headers["set-cookie"]
        # The page's own requests (script, data, events) carry the cookie it got.
        assert client.get("/static/ui.js").status_code == 200
        assert client.get("/api/sessions/demo-1").status_code == 200


def test_view_writes_one_self_contained_file(stored: Stored, tmp_path: Path) -> None:
    out = tmp_path / "session.html"
    done = run(
        "view", "demo-1", "-o", str(out), "--uri", stored.uri, "--pubkey", str(stored.pubkey)
    )
    assert done.returncode == 0, done.stderr
    assert "VERIFIED: checkpoints signed by" in done.stderr
    page = out.read_text()
    assert "Content-Security-Policy" in page
    assert 'data-mode="file"' in page
    assert not re.search(r"""(src|href)=["']?(https?:|//|/static)""", page)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


def test_view_to_standard_output_writes_utf_8_whatever_the_terminal_encodes(
    stored: Stored, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agentjournal.cli", "view", "demo-1", "-o", "-"],
        cwd=tmp_path,
        capture_output=True,
        env={**os.environ, "PYTHONIOENCODING": "latin-1", "AGENTJOURNAL_URI": stored.uri},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode("utf-8").startswith("<!doctype html>")
    assert "←".encode() in done.stdout  # the viewer's own arrows, in UTF-8


def test_view_to_standard_output_writes_the_page_there_and_no_file(
    stored: Stored, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    done = run("view", "demo-1", "-o", "-", "--uri", stored.uri)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("<!doctype html>")
    assert 'data-mode="file"' in done.stdout
    assert done.stderr.startswith("wrote standard output: session demo-1;")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["view", "nope-1", "-o", "{tmp}/x.html"], "no session 'nope-1'"),
        (["view", "demo-1", "-o", "{tmp}/missing/x.html"], "folder"),
        (["view", "demo-1", "-o", "{tmp}/x.html", "--at", "999"], "has no item #999"),
        (["ui", "--port", "70000"], "--port must be 0 to 65535, got 70000"),
        (["ui", "--host", "0.0.0.0"], "is not a loopback address: give a token"),
        (["ui", "--host", "0.0.0.0", "--token", "short"], "the token must be 16 to 512"),
        (["ui", "--uri", "sqlite:///{tmp}/none.db", "--port", "0"], "no store at"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(
    stored: Stored, tmp_path: Path, args: list[str], message: str
) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--uri" not in argv:
        argv += ["--uri", stored.uri]
    done = run(*argv)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr
    assert not (tmp_path / "x.html").exists()


def test_a_port_in_use_is_one_line(stored: Stored, url: str) -> None:
    port = url.rsplit(":", 1)[1]
    done = run("ui", "--uri", stored.uri, "--port", port)
    assert done.returncode == 1
    assert done.stderr == (
        f"agentjournal: port {port} on 127.0.0.1 is in use: stop what holds it, or choose "
        "another --port (0 picks a free one)\n"
    )


def test_without_the_service_extra_ui_says_what_to_install(
    stored: Stored, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if never installed: every starlette and uvicorn module, and what imported them.
    for name in list(sys.modules):
        if name.partition(".")[0] in ("starlette", "uvicorn"):
            monkeypatch.setitem(sys.modules, name, None)
        elif name in ("agentjournal.ui.app", "agentjournal.guardrails.service"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "starlette", None)
    done = run("ui", "--uri", stored.uri, "--port", "0")
    assert done.returncode == 1
    assert "pip install 'agentjournal[service]'" in done.stderr
    assert done.stderr.count("\n") == 1


@pytest.mark.slow
def test_agentjournal_ui_serves_as_a_real_process(stored: Stored) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
    command = [sys.executable, "-m", "agentjournal.cli", "ui", "--port", "0", "--uri", stored.uri]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        line = process.stdout.readline()
        found = re.search(r"serving (http://127\.0\.0\.1:\d+/) \(read-only\)", line)
        assert found, line + (process.stderr.read() if process.poll() is not None else "")
        answer = httpx.get(found.group(1) + "sessions/demo-1", timeout=30)
        assert answer.status_code == 200
        assert "demo-1" in answer.text
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C
        _, err = process.communicate(timeout=15)
    assert process.returncode == 0, err
    assert err.endswith("agentjournal ui: stopped\n"), err


def test_an_event_the_store_cannot_decode_is_a_failure_not_a_crash(
    stored: Stored, tmp_path: Path
) -> None:
    copy, stream, revision = tamper(stored, tmp_path, b"refund of 1250 cents", b"\xff\xfe")
    data = _page(stored, "demo-1", f"sqlite:///{copy}")
    assert not data["integrity"]["ok"]  # type: ignore[index]
    first = data["integrity"]["problems"][0]  # type: ignore[index]
    assert (first["stream"], first["revision"]) == (stream, revision)
    assert "not UTF-8" in first["message"]
    page = render(data, inline=True)
    assert "not UTF-8" in page


@pytest.mark.slow
def test_the_viewer_reads_kurrentdb_too(
    stored: Stored, kurrentdb_double: ThreadedKurrentDBDouble
) -> None:
    key = stored.pubkey.with_suffix("")
    asyncio.run(write_session(kurrentdb_double.uri, key, "kdb-1", "hello"))
    with (
        serving(kurrentdb_double.uri, pubkey=stored.pubkey) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        data = client.get("/api/sessions/kdb-1").json()
        assert data["integrity"]["ok"], data["integrity"]["text"]
        assert data["lanes"] == ["triage", "billing"]
        with client.stream("GET", f"/sessions/kdb-1/events?after={data['position']}") as stream:
            lines = stream.iter_lines()
            assert next(lines).startswith(": following from")
            writer = threading.Thread(
                target=write_in_thread, args=(kurrentdb_double.uri, key, "kdb-1", "more")
            )
            writer.start()
            try:
                assert next(line for line in lines if line) == "event: changed"
            finally:
                writer.join(60)
        assert "kdb-1" in {row["session_id"] for row in client.get("/api/sessions").json()["rows"]}


def test_odd_query_numbers_are_404s_not_500s(url: str) -> None:
    # isdigit() takes "²", and 5,000 digits is a number: both, and a bad /events?after=, 404.
    with httpx.Client(base_url=url, timeout=30) as client:
        for query in ("at=%C2%B2", "at=" + "9" * 5000, "at=-1"):
            assert client.get(f"/sessions/demo-1?{query}").status_code == 404, query
            assert client.get(f"/api/sessions/demo-1/replay?{query}").status_code == 404, query
        for query in ("after=abc", "after=%C2%B2", "after=" + "9" * 5000):
            assert client.get(f"/events?{query}").status_code == 404, query


def test_a_non_json_constant_in_stored_data_is_shown_as_text(
    stored: Stored, tmp_path: Path
) -> None:
    # NaN in a (tampered) event's data must neither blank the page nor make the API 500.
    copy, _, _ = tamper(stored, tmp_path, b'"refund of 1250 cents on order 42 accepted"', b"NaN")
    data = _page(stored, "demo-1", f"sqlite:///{copy}")
    assert not data["integrity"]["ok"]  # type: ignore[index]
    page = render(data, inline=True)
    assert "NaN" in page
    embedded = re.search(r'type="application/json"[^>]*>(.*?)</script>', page, re.S)
    assert embedded is not None
    json.loads(embedded[1], parse_constant=_strict)  # what the browser's JSON.parse accepts


def _strict(constant: str) -> None:
    raise AssertionError(f"{constant} in the page's JSON: the browser cannot parse it")


# -- the sessions list: server-side filters, search, sort and pages --------------------------


@pytest.fixture(scope="module")
def listed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stored, str]]:
    """The demo, ``hostile-1`` and :data:`LISTED` more sessions (``write_listed``); served."""
    stored = write_store(tmp_path_factory.mktemp("ui-list"))
    asyncio.run(write_listed(stored.uri, stored.pubkey.with_suffix("")))
    with serving(stored.uri, pubkey=stored.pubkey) as base:
        yield stored, base


def _list(base: str, query: str = "", status: int = 200) -> dict[str, Any]:
    answer = httpx.get(f"{base}/api/sessions{query}", timeout=30)
    assert answer.status_code == status, (query, answer.text)
    data: dict[str, Any] = answer.json()
    return data


def _ids(data: dict[str, Any]) -> list[str]:
    return [row["session_id"] for row in data["rows"]]


ALL = LISTED + 2  # the list's sessions, the demo's and hostile-1


def test_the_list_answers_one_page_newest_first_with_its_total(
    listed: tuple[Stored, str],
) -> None:
    _, base = listed
    data = _list(base)
    assert (data["total"], data["sessions"], data["offset"], data["limit"]) == (ALL, ALL, 0, 50)
    assert len(data["rows"]) == ALL
    lasts = [row["last_activity"] for row in data["rows"]]
    assert lasts == sorted(lasts, reverse=True)
    assert data["query"] == {}
    assert data["position"] > 0
    assert data["choices"]["app"] == ["agentjournal-demo", "bank", "shop", "travel"]
    assert "frontdesk" in data["choices"]["agent"]


def test_pages_cover_every_session_once_and_stop_at_the_end(listed: tuple[Stored, str]) -> None:
    _, base = listed
    seen: list[str] = []
    for offset in range(0, ALL, 10):
        page = _list(base, f"?sort=session&limit=10&offset={offset}")
        assert page["total"] == ALL
        assert len(page["rows"]) == min(10, ALL - offset)
        seen += _ids(page)
    assert seen == sorted(seen)
    assert len(set(seen)) == ALL
    past = _list(base, f"?limit=10&offset={ALL}")
    assert (past["rows"], past["total"]) == ([], ALL)
    assert len(_list(base, "?limit=500")["rows"]) == ALL
    assert len(_list(base, "?limit=1")["rows"]) == 1


@pytest.mark.parametrize(
    ("sort", "value"),
    [
        ("session", lambda r: r["session_id"]),
        ("app", lambda r: r["app"]),
        ("user", lambda r: r["user"]),
        ("agent", lambda r: r["agent"]),
        ("items", lambda r: r["items"]),
        ("blocks", lambda r: r["guardrail_blocks"]),
        ("refusals", lambda r: r["refusals"]),
        ("tokens", lambda r: r["tokens"]),
        ("branches", lambda r: len(r["branches"])),
        ("first", lambda r: r["first_activity"]),
        ("last", lambda r: r["last_activity"]),
        (
            "integrity",
            lambda r: ["failed", "unsigned", "untrusted", "verified"].index(
                r["integrity"]["state"]
            ),
        ),
    ],
)
def test_each_column_sorts_both_ways_ties_by_session_id(
    listed: tuple[Stored, str], sort: str, value: Any
) -> None:
    _, base = listed
    for order in ("asc", "desc"):
        rows = _list(base, f"?sort={sort}&order={order}&limit=500")["rows"]
        keys = [(value(r), r["session_id"]) for r in rows]
        assert keys == sorted(keys, reverse=order == "desc"), (sort, order)
    # Without an order, text columns go up and the others down.
    default = _list(base, f"?sort={sort}&limit=500")["rows"]
    up = sort in ("session", "app", "user", "agent")
    assert default == _list(base, f"?sort={sort}&order={'asc' if up else 'desc'}&limit=500")["rows"]


def test_each_filter_keeps_exactly_its_sessions(listed: tuple[Stored, str]) -> None:
    _, base = listed
    everyone = _list(base, "?limit=500")["rows"]

    def kept(query: str) -> set[str]:
        data = _list(base, f"?{query}&limit=500")
        assert data["total"] == len(data["rows"])
        return set(_ids(data))

    def where(test: Any) -> set[str]:
        return {r["session_id"] for r in everyone if test(r)}

    assert kept("app=shop") == where(lambda r: r["app"] == "shop") != set()
    assert kept("user=u-3") == where(lambda r: r["user"] == "u-3") != set()
    assert kept("agent=intake") == where(lambda r: r["agent"] == "intake") != set()
    for state in ("verified", "unsigned"):
        assert kept(f"state={state}") == where(lambda r, s=state: r["integrity"]["state"] == s)
    assert kept("state=failed") == set()
    assert kept("blocks=1") == where(lambda r: r["guardrail_blocks"] or r["refusals"]) != set()
    assert "demo-1" in kept("blocks=1")
    assert kept("branches=1") == {"list-03", "list-10", "list-17", "list-24"}
    assert kept("app=shop&branches=1") == {"list-03", "list-24"}
    assert kept("branches=0&blocks=0") == where(lambda r: True)
    middle = sorted(r["last_activity"] for r in everyone)[ALL // 2]
    since = kept(f"since={middle.replace('+', '%2B')}")
    assert since == where(lambda r: r["last_activity"] >= middle)
    until = kept(f"until={middle.replace('+', '%2B')}")
    assert until == where(lambda r: r["last_activity"] < middle)
    assert len(since) + len(until) == ALL
    assert kept("since=2999-01-01") == set()
    assert len(kept("until=2999-01-01T00:00:00Z")) == ALL


def test_search_finds_words_of_messages_tools_and_results_and_names(
    listed: tuple[Stored, str],
) -> None:
    _, base = listed

    def found(q: str) -> set[str]:
        return set(_ids(_list(base, f"?q={q}&limit=500")))

    assert found("4705") == {"list-05"}  # a tool call's arguments
    assert found("zephyrline") == {f"list-{n:02d}" for n in range(LISTED)}  # tool results
    assert found("ZEPHYR") == found("zephyrline")  # a word's beginning, any case
    assert found("passport") == {f"list-{n:02d}" for n in range(2, LISTED, 5)}  # user words
    assert found("passport+case+12") == {"list-12"}  # every word must match
    assert found("lookup_order") >= {"list-00"}  # a tool's name
    assert found("list-1") == {f"list-{n:02d}" for n in range(10, 20)}  # inside the session id
    assert found("travel+u-2") == {"list-02", "list-17"}  # app and user too
    assert found("frontdesk") >= {"list-01", "list-05"}  # the first agent
    assert found("refund") >= {"demo-1"}  # the demo's conversation
    assert found("nothing-like-this") == set()
    assert found("passport+nowhere") == set()
    # A hit among many stays sorted and paged like any list.
    data = _list(base, "?q=zephyrline&sort=session&order=desc&limit=7&offset=7")
    assert data["total"] == LISTED
    assert _ids(data) == [f"list-{n:02d}" for n in range(LISTED - 8, LISTED - 15, -1)]


def test_the_page_embeds_the_first_page_of_the_query_in_its_address(
    listed: tuple[Stored, str],
) -> None:
    _, base = listed
    page = httpx.get(f"{base}/?app=shop&sort=items&order=asc&limit=3", timeout=30)
    assert page.status_code == 200
    block = page.text.split('id="aj-data">', 1)[1].split("</script>", 1)[0]
    data = json.loads(block)
    assert data["query"] == {"app": "shop", "sort": "items", "order": "asc", "limit": "3"}
    assert data == _list(base, "?app=shop&sort=items&order=asc&limit=3")
    assert [row["app"] for row in data["rows"]] == ["shop"] * 3


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("?sort=colour", "sort must be one of session, app,"),
        ("?order=up", "order must be asc or desc"),
        ("?limit=0", "limit must be a whole number from 1 to 500"),
        ("?limit=501", "limit must be a whole number from 1 to 500"),
        ("?limit=%C2%B2", "limit must be a whole number"),
        ("?offset=-1", "offset must be a whole number"),
        ("?offset=" + "9" * 5000, "offset is longer than 256 characters"),
        ("?state=ok", "state must be one of verified, untrusted, unsigned, failed"),
        ("?blocks=yes", "blocks must be 1 or 0"),
        ("?since=yesterday", "since must be an ISO 8601 time"),
        ("?app=a&app=b", "give app once"),
        ("?colour=red", "unknown parameter 'colour'"),
        ("?q=" + "+".join("abcdefghijklmnopq"), "q has more than 16 words"),
    ],
)
def test_a_bad_query_is_a_400_in_one_line(
    listed: tuple[Stored, str], query: str, says: str
) -> None:
    _, base = listed
    data = _list(base, query, status=400)
    assert list(data) == ["error"]
    assert says in data["error"]
    assert "\n" not in data["error"]
    page = httpx.get(f"{base}/{query}", timeout=30)
    assert page.status_code == 400
    assert "bad request" in page.text


def test_a_session_written_since_is_in_the_next_page(listed: tuple[Stored, str]) -> None:
    stored, base = listed
    before = _list(base, "?q=gooseberry")
    assert before["total"] == 0
    asyncio.run(write_session(stored.uri, stored.pubkey.with_suffix(""), "late-1", "gooseberry"))
    after = _list(base, "?q=gooseberry")
    assert _ids(after) == ["late-1"]
    assert after["position"] > before["position"]
    assert _ids(_list(base, "?limit=1")) == ["late-1"]


def test_the_list_still_needs_the_token(stored: Stored) -> None:
    with (
        serving(stored.uri, token=TOKEN) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        refused = client.get("/api/sessions?q=demo&sort=session")
        assert refused.status_code == 401
        assert "demo-1" not in refused.text
        assert client.get("/api/sessions?colour=red").status_code == 401  # before any parsing
        allowed = client.get(
            "/api/sessions?q=demo&sort=session", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert _ids(allowed.json()) == ["demo-1"]
        # ?token= opens the page; it is no filter and never echoed into the query.
        opened = client.get(f"/?token={TOKEN}&q=demo")
        assert opened.status_code == 200
        assert TOKEN not in opened.text.split('id="aj-data">', 1)[1]


@pytest.mark.slow
def test_a_failed_page_check_stops_counting_once_the_session_writes_again(
    stored: Stored, tmp_path: Path
) -> None:
    """A page served while a tail no checkpoint covers is there says FAILED, and the list
    shows it; the checkpoint that covers the tail comes, and the list's own check (which
    sees it) stands again: a finished run is not a false alarm for ever."""
    from agentjournal.ledger import SigningKey

    copy = tmp_path / "copy.db"
    shutil.copy(stored.path, copy)
    uri = f"sqlite:///{copy}"
    key = SigningKey.from_file(str(stored.pubkey.with_suffix("")))

    async def add(signed: bool) -> None:
        from agentjournal import Journal

        async with Journal.open(uri, signing_key=key if signed else None) as journal:
            session = journal.session("demo-1")
            if signed:
                await session.checkpoint()
            else:
                await session.add_items([{"role": "user", "content": "one more"}])

    with (
        serving(uri, pubkey=stored.pubkey) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):

        def listed() -> str:
            rows = client.get("/api/sessions").json()["rows"]
            return str(next(r["integrity"]["state"] for r in rows if r["session_id"] == "demo-1"))

        asyncio.run(add(signed=False))
        assert client.get("/api/sessions/demo-1").json()["integrity"]["state"] == "failed"
        assert listed() == "failed"
        asyncio.run(add(signed=True))
        assert listed() == "verified"
        assert client.get("/api/sessions/demo-1").json()["integrity"]["state"] == "verified"


def test_the_list_says_how_far_the_first_reading_of_the_store_is(stored: Stored) -> None:
    """While the store is read for the first time (a minute for a million events), the list
    answers within ``warm_wait`` how far it is — 503, asking to come again — and the
    rows once it is done. The store's first read is held back until the test lets it go."""
    from starlette.testclient import TestClient

    from agentjournal.ui.app import create_app

    gate = threading.Event()

    class Held:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        async def read_all(self, **options: Any) -> Any:
            # The gate is the test thread's; this runs on the server's loop: poll it.
            while not gate.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            return await self.inner.read_all(**options)

    async def opened() -> Any:
        return Held(await open_store(stored.uri, create=False))

    app = create_app(opened, keys=trusted_keys([str(stored.pubkey)]), warm_wait=0.05)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        waiting = client.get("/api/sessions")
        assert waiting.status_code == 503
        assert waiting.headers["retry-after"] == "2"
        body = waiting.json()
        assert body["position"] == 0
        assert body["of"] > 0
        assert body["error"].startswith("the viewer is reading the store for the first time")
        page = client.get("/")
        assert page.status_code == 503
        assert '<meta http-equiv="refresh" content="2">' in page.text
        assert "reading the store for the first time" in page.text
        gate.set()
        listed = client.get("/api/sessions")
        assert listed.status_code == 200
        assert {row["session_id"] for row in listed.json()["rows"]} >= {"demo-1", "hostile-1"}
