"""The read tools over sealed sessions: ``show``, ``replay``, ``tail``, ``view`` and the live
viewer show the content opened with ``--keys``, ``[erased]`` beside the erasure after it,
``[sealed]`` without keys, and never an envelope; bundles and traces carry the stored bytes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import Agent, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call

from agentjournal import Journal
from agentjournal.audit.verify import parse_bundle, verify_bundle
from agentjournal.engine.codec import exact_json
from agentjournal.shred.fields import ENVELOPE_PREFIX, ERASED, SEALED
from agentjournal.shred.sqlite_keys import open_key_file
from cli_run import run
from drive import drive
from ui_support import serving

SECRETS = ("IN-7c1e", "ARG-2d9a", "OUT-5f03", "FINAL-8b44")
"""alice's content in ``sealed-1``: her message, the call's arguments and output, the answer."""
BOB = "BOB-4e21"
ERASURE = "content of subject alice erased at "
TESTS = Path(__file__).resolve().parent


def _graph() -> Agent[Any]:
    @function_tool
    def lookup(order_id: str) -> str:
        """Look up an order."""
        return "OUT-5f03 shipped"

    steps = [
        [function_call("lookup", {"order_id": "ARG-2d9a"}, call_id="t1")],
        [assistant_message("FINAL-8b44 done", item_id="m1")],
    ]
    return Agent(name="triage", model=ScriptedModel(steps), tools=[lookup])


async def _write(uri: str, keys: Path) -> None:
    async with Journal.open(uri, keys=keys, signing_key=None) as journal:
        session = journal.session("sealed-1", user_id="alice")
        await drive(_graph(), "IN-7c1e where is my order", session=session, hooks=session)
        other = journal.session("other-1", user_id="bob")
        await other.add_items([{"role": "user", "content": f"{BOB} hello"}])


async def _get_items(uri: str, keys: Path, session_id: str) -> list[str]:
    async with Journal.open(uri, keys=keys, signing_key=None) as journal:
        items = await journal.session(session_id, user_id="alice").get_items()
    return [exact_json(item) for item in items]


class Sealed:
    """A store with alice's sealed ``sealed-1`` and bob's ``other-1``, and their key file."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "journal.db"
        self.uri = f"sqlite:///{self.path}"
        self.keys = folder / "keys.db"
        asyncio.run(_write(self.uri, self.keys))

    def erase(self) -> None:
        done = run(
            "erase", "--subject", "alice", "--reason", "GDPR request 88", "--as", "dpo",
            "--keys", str(self.keys), "--uri", self.uri,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr

    def run(self, *args: str, keys: bool = True) -> str:
        with_keys = ("--keys", str(self.keys)) if keys else ()
        done = run(*args, *with_keys, "--uri", self.uri)
        assert done.returncode == 0, done.stderr
        assert ENVELOPE_PREFIX not in done.stdout + done.stderr
        return done.stdout


@pytest.fixture
def sealed(tmp_path: Path) -> Sealed:
    return Sealed(tmp_path)


def _holds(text: str, *needles: str) -> list[str]:
    return [needle for needle in needles if needle in text]


def test_show_opens_sealed_content_with_the_keys_and_marks_it_sealed_without(
    sealed: Sealed,
) -> None:
    opened = sealed.run("show", "sealed-1")
    assert _holds(opened, "IN-7c1e", "OUT-5f03", "FINAL-8b44") == [
        "IN-7c1e",
        "OUT-5f03",
        "FINAL-8b44",
    ]
    assert SEALED not in opened
    as_json = sealed.run("show", "sealed-1", "--json")
    assert _holds(as_json, *SECRETS) == list(SECRETS)
    for shown in (
        sealed.run("show", "sealed-1", keys=False),
        sealed.run("show", "sealed-1", "--json", keys=False),
    ):
        assert SEALED in shown
        assert _holds(shown, *SECRETS) == []
    assert "integrity: UNSIGNED: the hash chains hold" in sealed.run("show", "sealed-1", keys=False)


def test_after_erasure_show_says_erased_beside_the_erasure_and_other_subjects_stay_readable(
    sealed: Sealed,
) -> None:
    sealed.erase()
    shown = sealed.run("show", "sealed-1")
    assert ERASED in shown
    assert _holds(shown, *SECRETS) == []
    (erasure,) = [line for line in shown.splitlines() if "SubjectErased" in line]
    assert f"{ERASURE}" in erasure
    assert erasure.endswith(" by dpo: GDPR request 88")
    assert "integrity: UNSIGNED: the hash chains hold" in shown
    assert BOB in sealed.run("show", "other-1")
    assert BOB not in sealed.run("show", "other-1", keys=False)


def test_replay_is_get_items_before_and_after_the_erasure(sealed: Sealed) -> None:
    before = sealed.run("replay", "sealed-1").splitlines()
    assert before == asyncio.run(_get_items(sealed.uri, sealed.keys, "sealed-1"))
    assert _holds("\n".join(before), *SECRETS) == list(SECRETS)
    without = sealed.run("replay", "sealed-1", keys=False)
    assert SEALED in without
    assert _holds(without, *SECRETS) == []
    assert len(without.splitlines()) == len(before)
    sealed.erase()
    after = sealed.run("replay", "sealed-1").splitlines()
    assert after == asyncio.run(_get_items(sealed.uri, sealed.keys, "sealed-1"))
    assert ERASED in "\n".join(after)
    assert _holds("\n".join(after), *SECRETS) == []
    described = sealed.run("replay", "sealed-1", "--approvals")
    assert ERASED in described


def test_the_keys_come_from_the_environment_as_erase_takes_them(sealed: Sealed) -> None:
    done = run(
        "replay", "sealed-1", "--uri", sealed.uri, env={"AGENTJOURNAL_KEYS": str(sealed.keys)}
    )
    assert done.returncode == 0, done.stderr
    assert _holds(done.stdout, *SECRETS) == list(SECRETS)


def test_view_writes_the_page_opened_with_the_keys_then_erased_beside_the_erasure(
    sealed: Sealed, tmp_path: Path
) -> None:
    page = tmp_path / "page.html"
    sealed.run("view", "sealed-1", "-o", str(page), "--at", "2")
    assert _holds(page.read_text(), *SECRETS) == list(SECRETS)
    sealed.run("view", "sealed-1", "-o", str(page), keys=False)
    text = page.read_text()
    assert SEALED in text
    assert _holds(text, *SECRETS) == []
    assert ENVELOPE_PREFIX not in text
    sealed.erase()
    sealed.run("view", "sealed-1", "-o", str(page))
    text = page.read_text()
    assert ERASED in text
    assert ERASURE in text
    assert _holds(text, *SECRETS) == []
    assert ENVELOPE_PREFIX not in text


@pytest.mark.slow
def test_the_live_viewer_shows_sealed_content_as_the_keys_allow(sealed: Sealed) -> None:
    def fetch(keys: bool) -> str:
        opener = open_key_file(sealed.keys, read_only=True, ttl=0) if keys else None
        try:
            with (
                serving(sealed.uri, subject_keys=opener) as url,
                httpx.Client(base_url=url, timeout=30) as client,
            ):
                pages = [
                    client.get("/api/sessions/sealed-1"),
                    client.get("/api/sessions/sealed-1/replay", params={"at": 3}),
                    client.get("/sessions/sealed-1"),
                ]
        finally:
            if opener is not None:
                opener.close()
        assert [answer.status_code for answer in pages] == [200, 200, 200]
        text = "\n".join(answer.text for answer in pages)
        assert ENVELOPE_PREFIX not in text
        return text

    assert _holds(fetch(keys=True), *SECRETS) == list(SECRETS)
    without = fetch(keys=False)
    assert SEALED in without
    assert _holds(without, *SECRETS) == []
    sealed.erase()
    after = fetch(keys=True)
    assert ERASED in after
    assert ERASURE in after
    assert _holds(after, *SECRETS) == []


@pytest.mark.slow
def test_tail_shows_what_it_follows_opened_then_erased_beside_the_erasure(
    sealed: Sealed, tmp_path: Path
) -> None:
    sealed.erase()
    out = tmp_path / "tail.jsonl"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTJOURNAL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "agentjournal.cli", "tail", "sealed-1", "--from-start", "--json"]
    argv += ["--keys", str(sealed.keys), "--uri", sealed.uri]
    with out.open("w") as handle:
        tail = subprocess.Popen(argv, stdout=handle, stderr=subprocess.PIPE, text=True, env=env)
        try:
            deadline = time.monotonic() + 60
            while "SubjectErased" not in out.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            tail.send_signal(signal.SIGINT)
            assert tail.wait(30) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    text = out.read_text()
    assert ERASED in text
    assert _holds(text, *SECRETS) == []
    assert ENVELOPE_PREFIX not in text
    (erasure,) = [line for line in lines if line["type"] == "agentjournal.SubjectErased"]
    assert erasure["description"].startswith(ERASURE)
    assert erasure["description"].endswith(" by dpo: GDPR request 88")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(
    "command",
    [
        ["show", "sealed-1"],
        ["replay", "sealed-1"],
        ["tail", "sealed-1", "--from-start"],
        ["view", "sealed-1", "-o", "OUT"],
        ["ui", "--port", "0"],
    ],
)
def test_a_bad_key_file_is_one_line_and_nothing_is_written(
    sealed: Sealed, tmp_path: Path, command: list[str]
) -> None:
    command = [str(tmp_path / "page.html") if arg == "OUT" else arg for arg in command]
    stored = _digest(sealed.path)
    for keys, said in (
        (tmp_path / "missing.db", "no key store at "),
        (sealed.path, "is not a key store"),  # the journal itself, by mistake
    ):
        done = run(*command, "--keys", str(keys), "--uri", sealed.uri)
        assert done.returncode == 1
        assert done.stdout == ""
        (line,) = done.stderr.splitlines()
        assert line.startswith("agentjournal: "), line
        assert said in line, line
    assert not (tmp_path / "missing.db").exists()
    assert not (tmp_path / "page.html").exists()
    assert _digest(sealed.path) == stored


def test_a_bundle_carries_the_sealed_bytes_and_verifies_offline_before_and_after(
    sealed: Sealed, tmp_path: Path
) -> None:
    env = {"AGENTJOURNAL_KEYS": str(sealed.keys)}  # a bundle never opens content
    for step in ("before", "after"):
        if step == "after":
            sealed.erase()
        for redact in ([], ["--redact"]):
            bundle = tmp_path / f"{step}{len(redact)}.json"
            argv = ["bundle", "export", "sealed-1", "-o", str(bundle), *redact]
            done = run(*argv, "--uri", sealed.uri, env=env)
            assert done.returncode == 0, done.stderr
            raw = bundle.read_text()
            assert _holds(raw, *SECRETS) == []
            assert (ENVELOPE_PREFIX in raw) is not bool(redact)
            report = verify_bundle(parse_bundle(raw.encode()), {}, allow_uncovered=True)
            assert report.ok, report.text()
            assert (ERASURE in report.text()) is (step == "after")


def test_trace_export_carries_no_content_with_the_keys_set(sealed: Sealed, tmp_path: Path) -> None:
    spans = tmp_path / "spans.jsonl"
    env = {"AGENTJOURNAL_KEYS": str(sealed.keys)}
    done = run("trace", "export", "sealed-1", "--jsonl", str(spans), "--uri", sealed.uri, env=env)
    assert done.returncode == 0, done.stderr
    text = spans.read_text()
    assert "execute_tool lookup" in text
    assert _holds(text, *SECRETS) == []
    assert ENVELOPE_PREFIX not in text
