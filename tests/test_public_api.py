"""The public surface: what each public package exports, that it is deliberate, and that the
entry points a stranger uses (verify a bundle, read a tree, use a store) import cheaply."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import agentjournal
import agentjournal.store
from agentjournal import (
    GuardrailClient,
    InvalidInput,
    Journal,
    RetriesExhausted,
    StoreError,
)
from agentjournal.engine import writer
from agentjournal.guardrails.rules import load_rules
from agentjournal.store import (
    AppendRequest,
    AppendResult,
    Expected,
    NewEvent,
    SQLiteEventStore,
    StreamState,
)

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "agentjournal"

TOP_LEVEL = {
    # errors
    "AlreadyResolved",
    "AlreadyResumed",
    "ApproverNotAllowed",
    "AuthorityDenied",
    "CodecError",
    "ConcurrencyError",
    "ExperimentTurnTaken",
    "GuardrailBlocked",
    "InvalidInput",
    "JournalError",
    "RetriesExhausted",
    "StoreError",
    "StoreUnavailable",
    "StreamDeleted",
    "StreamNotFound",
    "UndecodableEvent",
    "UnreadableMetadata",
    # writing sessions
    "Journal",
    "JournalSession",
    "GuardrailClient",
    "Policy",
    "Authority",
    "SigningKey",
    "Subagent",
    "Checkpoint",
    "TraceLogFilter",
    "continue_trace",
    # reading and proving them
    "read_tree",
    "TreeRecords",
    "Record",
    "DamagedEvent",
    "export_bundle",
    "verify_bundle",
    "Report",
    "Problem",
}
STORE = {
    "DEFAULT_URI",
    "MAX_EVENT_BYTES",
    "URI_ENV",
    "AppendRequest",
    "AppendResult",
    "EventStore",
    "Expected",
    "KurrentDBEventStore",
    "NewEvent",
    "RecordedEvent",
    "SQLiteEventStore",
    "StreamState",
    "event_id",
    "open_store",
    "store_uri",
}
API_PAGE = ROOT / "docs" / "api.md"
PACKAGES = re.findall(
    r"^\| `(agentjournal[a-z_.]*)` \|", API_PAGE.read_text(encoding="utf-8"), re.M
)
"""The public modules, as ``docs/api.md`` lists them: each declares ``__all__``."""


def _modules_declaring_all() -> set[str]:
    """Every module of the package whose source assigns ``__all__``."""
    found = set()
    for path in SRC.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(
            isinstance(node, ast.Assign | ast.AnnAssign)
            and any(
                isinstance(target, ast.Name) and target.id == "__all__"
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
            for node in tree.body
        ):
            parts = path.relative_to(SRC.parent).with_suffix("").parts
            found.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_the_public_modules_are_the_ones_the_api_page_lists() -> None:
    """A module declares ``__all__`` exactly when ``docs/api.md`` names it public: the
    internals (engine, SDK adapter, command line, viewer, submodules) declare none."""
    assert len(PACKAGES) == len(set(PACKAGES)) > 20
    assert _modules_declaring_all() == set(PACKAGES)


def test_the_top_level_exports_are_pinned() -> None:
    assert set(agentjournal.__all__) == TOP_LEVEL


def test_the_store_exports_are_pinned() -> None:
    assert set(agentjournal.store.__all__) == STORE


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert len(set(exported)) == len(exported), "a name is listed twice"
    for attribute in exported:
        assert getattr(module, attribute) is not None, attribute


@pytest.mark.parametrize("name", ["agentjournal", "agentjournal.store", "agentjournal.ledger"])
def test_unknown_name_is_an_attribute_error(name: str) -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        getattr(importlib.import_module(name), "NoSuchThing")  # noqa: B009


@pytest.mark.parametrize(
    "init", ["__init__.py", "store/__init__.py", "ledger/__init__.py", "guardrails/__init__.py"]
)
def test_lazy_names_are_the_names_type_checkers_see(init: str) -> None:
    """A package that loads its names on first use imports the same names for type
    checkers, from the same modules, and lists every one in ``__all__``."""
    tree = ast.parse((SRC / init).read_text(encoding="utf-8"))
    checked: dict[str, str] = {}
    eager: set[str] = set()
    lazy: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for inner in node.body:
                assert isinstance(inner, ast.ImportFrom)
                assert inner.module is not None
                checked.update({alias.name: inner.module for alias in inner.names})
        elif isinstance(node, ast.ImportFrom) and node.module not in ("__future__", "typing"):
            eager.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Assign | ast.Expr):
            for call in ast.walk(node):
                if isinstance(call, ast.Dict):
                    lazy.update(
                        {
                            ast.literal_eval(k): ast.literal_eval(v)
                            for k, v in zip(call.keys, call.values, strict=True)
                            if k is not None
                        }
                    )
    assert lazy, "no lazy names found"
    assert lazy == checked
    exported = set(importlib.import_module(_package(init)).__all__)
    assert set(lazy) <= exported
    assert exported - set(lazy) <= eager | _defined(tree)


def _package(init: str) -> str:
    return ".".join(["agentjournal", *Path(init).parent.parts])


def _defined(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


# -- light entry points ---------------------------------------------------------------------

HEAVY = ("agents", "openai", "httpx", "starlette", "uvicorn")


def _loaded(code: str) -> list[str]:
    """Which of :data:`HEAVY` (and gRPC) are loaded after running ``code`` in a fresh
    interpreter."""
    probe = (
        f"{code}\nimport sys, json\n"
        f"print(json.dumps([m for m in {[*HEAVY, 'grpc']!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT
    )
    loaded: list[str] = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.slow
@pytest.mark.parametrize(
    "module",
    [
        "agentjournal",
        "agentjournal.errors",
        "agentjournal.store",
        "agentjournal.records",
        "agentjournal.read.traces",
        "agentjournal.ledger",
        "agentjournal.audit.verify",
        "agentjournal.audit.bundle",
        "agentjournal.authority",
        "agentjournal.guardrails.protocol",
        "agentjournal.guardrails.actions",
        "agentjournal.engine.core",
        "agentjournal.cli",
        "agentjournal.read.usage",
    ],
)
def test_importing_loads_neither_the_sdk_nor_an_http_stack(module: str) -> None:
    assert _loaded(f"import {module}") == []


@pytest.mark.slow
def test_the_sdk_adapter_is_where_the_sdk_loads() -> None:
    """The probe above can fail: the session module does load the SDK."""
    assert "agents" in _loaded("import agentjournal.sdk.session")


@pytest.mark.slow
def test_verifying_a_bundle_from_the_command_line_loads_no_sdk(tmp_path: Path) -> None:
    """``agentjournal bundle verify`` end to end, on a real bundle, in a fresh interpreter."""
    _make_bundle(tmp_path)
    code = (
        "import sys\nfrom agentjournal.cli import main\n"
        f"code = main(['bundle', 'verify', {str(tmp_path / 'b.json')!r}, "
        f"'--pubkey', {str(tmp_path / 'k.pem.pub')!r}])\n"
        "assert code == 0, code"
    )
    assert _loaded(code) == []


def _make_bundle(folder: Path) -> None:
    script = f"""
import asyncio, json
from agentjournal import Journal, SigningKey, export_bundle
async def main():
    key = SigningKey.generate()
    open({str(folder / "k.pem")!r}, "w").write(key.private_pem())
    open({str(folder / "k.pem.pub")!r}, "w").write(key.public_pem())
    async with Journal.open({f"sqlite:///{folder / 's.db'}"!r}, signing_key=key) as journal:
        session = journal.session("s1")
        await session.add_items([{{"role": "user", "content": "hi"}}])
        await session.checkpoint()
        bundle = await export_bundle(journal.store, "s1")
    open({str(folder / "b.json")!r}, "w").write(json.dumps(bundle))
asyncio.run(main())
"""
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)


# -- the README's Python blocks import what exists ------------------------------------------


def test_every_import_the_readme_shows_exists() -> None:
    text = "\n".join(
        path.read_text(encoding="utf-8")
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    )
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    imports = [
        (match.group(1), [n.strip() for n in match.group(2).split(",")])
        for block in blocks
        for match in re.finditer(r"^from (agentjournal[\w.]*) import ([\w, ]+)$", block, re.M)
    ]
    assert imports, "the README shows no import"
    for module, names in imports:
        loaded = importlib.import_module(module)
        for name in names:
            assert hasattr(loaded, name), f"README: from {module} import {name}"


# -- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: GuardrailClient("ftp://127.0.0.1"), "http"),
        (lambda: GuardrailClient("http://127.0.0.1", timeout=0), "timeout"),
        (lambda: GuardrailClient("http://127.0.0.1", max_body_bytes=0), "max_body_bytes"),
        (lambda: load_rules("rules: ["), "YAML"),
        (lambda: load_rules("rules: [{kind: nope}]"), "rules"),
    ],
)
def test_bad_input_to_a_public_call_is_invalid_input(make: Any, says: str) -> None:
    with pytest.raises(InvalidInput, match=says):
        make()


class _Contested(SQLiteEventStore):
    """A real SQLite store where another writer always appends to ``contested`` first."""

    contested = "AgentSession-s1"
    lost = 0

    async def _rival(self, streams: list[str]) -> None:
        if self.contested in streams:
            self.lost += 1
            rival = NewEvent(type="UserMessageReceived", data=b"{}")
            await super().append(self.contested, [rival], expected=StreamState.ANY)

    async def append(
        self, stream: str, events: Sequence[NewEvent], *, expected: Expected
    ) -> AppendResult:
        await self._rival([stream])
        return await super().append(stream, events, expected=expected)

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[AppendResult]:
        await self._rival([request.stream for request in requests])
        return await super().append_many(requests)


async def test_losing_every_race_is_retries_exhausted_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "CONFLICT_RETRIES", 4)
    store = await _Contested.open(tmp_path / "s.db")
    assert isinstance(store, _Contested)
    journal = Journal(store, "sqlite:///s.db")
    try:
        session = journal.session("s1")
        with pytest.raises(RetriesExhausted) as raised:
            await session.add_items([{"role": "user", "content": "hello"}])
        assert isinstance(raised.value, StoreError)
        assert raised.value.attempts == 4
        assert raised.value.stream == "AgentSession-s1"
        assert "lost to another writer" in str(raised.value)
        assert "no stream" not in str(raised.value)
        stored = await store.read("AgentSession-s1")
        assert store.lost == 4
        assert [event.data for event in stored] == [b"{}"] * 4  # only the rival's events
    finally:
        await store.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "missing"),
    [(["demo"], "starlette"), (["guardrail", "serve", "--port", "0"], "uvicorn")],
)
def test_a_command_needing_the_service_extra_says_how_to_install_it(
    argv: list[str], missing: str, tmp_path: Path
) -> None:
    """Without the ``[service]`` extra (its module made unimportable), one line says which
    extra to install, and nothing is written."""
    code = (
        f"import sys\nsys.modules[{missing!r}] = None\n"
        f"from agentjournal.cli import main\nsys.exit(main({argv!r}))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert run.returncode == 1, run.stderr
    assert run.stderr.count("\n") == 1
    assert f"{missing} is missing" in run.stderr
    assert "pip install 'agentjournal[service]'" in run.stderr
    assert list(tmp_path.iterdir()) == []


def _resolves(dotted: str) -> bool:
    """Whether ``agentjournal.a.b.c`` names a module, or an attribute of one."""
    parts = dotted.split(".")
    for cut_at in range(len(parts), 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut_at]))
        except ImportError:
            continue
        for attribute in parts[cut_at:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def test_every_dotted_name_the_code_and_docs_mention_exists() -> None:
    """Docstrings and docs name modules and objects that exist: a moved module leaves no
    stale reference behind. Checked: every Sphinx role (``:mod:`agentjournal.x```) and every
    name with two or more parts after ``agentjournal`` (one part is also an event type, a
    span or a logger name: ``agentjournal.ItemPopped``, ``agentjournal.run``)."""
    role = re.compile(r":(?:mod|class|func|meth|data|attr|exc):`~?(agentjournal(?:\.\w+)*)`")
    dotted = re.compile(r"(?<![\w/.-])agentjournal(?:\.[A-Za-z_]\w*){2,}")
    files = [
        *SRC.rglob("*.py"),
        *(ROOT / name for name in ("README.md", "DESIGN.md", "SCHEMA.md")),
        *(ROOT / "docs").glob("*.md"),
    ]
    stale = set()
    for path in files:
        text = path.read_text(encoding="utf-8")
        for name in {*role.findall(text), *dotted.findall(text)}:
            if not _resolves(name):
                stale.add(f"{path.relative_to(ROOT)}: {name}")
    assert sorted(stale) == []
