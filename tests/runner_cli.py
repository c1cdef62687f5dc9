"""Run ``agentjournal run`` as a real process: JSON on stdin, on stdout, JSON lines on stderr."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MANIFESTS = ROOT / "samples" / "manifests"
TOOLS = MANIFESTS / "tools.py"
SCRIPT = MANIFESTS / "script.yml"
MANAGER = "io.clawpedia.agents.jira-ticket-manager"
ADMIN = "io.clawpedia.agents.jira-admin"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"


@dataclass
class Invoked:
    """What one invocation returned and printed."""

    code: int
    stdout: str
    stderr: str
    logs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def output(self) -> dict[str, Any]:
        """The one JSON object on stdout (asserted to be exactly one line)."""
        lines = self.stdout.splitlines()
        assert len(lines) == 1, self.stdout + self.stderr
        found: dict[str, Any] = json.loads(lines[0])
        return found


def request(**changes: Any) -> dict[str, Any]:
    """A valid input object (the contract's example), with ``changes``."""
    base: dict[str, Any] = {
        "thread_id": "thread_abc123",
        "run_id": "run_abc123",
        "input_message": {"content": "What is the status of PROJ-123?", "role": "user"},
        "state": {},
        "config": {},
        "trace": {"trace_id": TRACE_ID, "parent_span_id": PARENT_SPAN},
    }
    base.update(changes)
    return base


def write_script(folder: Path, turns: dict[str, list[Any]], name: str = "script.json") -> Path:
    """A model script file (JSON) in ``folder``."""
    path = folder / name
    path.write_text(json.dumps(turns), encoding="utf-8")
    return path


async def invoke(
    *,
    uri: str | None,
    stdin: dict[str, Any] | bytes,
    script: Path | None = SCRIPT,
    agent: str = MANAGER,
    manifests: Path = MANIFESTS,
    tools: tuple[Path, ...] = (TOOLS,),
    guardrails: str | None = None,
    env: dict[str, str] | None = None,
) -> Invoked:
    """``agentjournal run ...`` in a child process (the test's loop keeps serving stubs)."""
    args = ["-m", "agentjournal.cli", "run", "--manifests", str(manifests), "--agent", agent]
    if uri is not None:
        args += ["--uri", uri]
    for tool in tools:
        args += ["--tools", str(tool)]
    if script is not None:
        args += ["--model-script", str(script)]
    if guardrails is not None:
        args += ["--guardrails", guardrails]
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("AGENTJOURNAL_") and name != "OPENAI_API_KEY"
    }
    environment.update(env or {})
    data = stdin if isinstance(stdin, bytes) else json.dumps(stdin).encode()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=environment,
    )
    out, err = await asyncio.wait_for(process.communicate(data), timeout=120)
    stderr = err.decode()
    logs = [_log_line(line) for line in stderr.splitlines() if line.strip()]
    return Invoked(process.returncode or 0, out.decode(), stderr, logs)


def _log_line(line: str) -> dict[str, Any]:
    try:
        parsed = json.loads(line)
    except ValueError:
        return {"not_json": line}
    return parsed if isinstance(parsed, dict) else {"not_json": line}
