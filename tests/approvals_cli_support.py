"""Answering an approval from the command line, in this process, as a person would."""

from __future__ import annotations

import asyncio
import contextlib
import io

from agentjournal.cli import main as cli


async def answer_from_the_command_line(
    uri: str, session_id: str, request_id: str, *, by: str, approve: bool = True
) -> str:
    """``agentjournal approve|reject SESSION REQUEST --as BY``; its stdout (exit 0 asserted)."""
    out, err = io.StringIO(), io.StringIO()
    verb = "approve" if approve else "reject"
    argv = [verb, session_id, request_id, "--as", by, "--uri", uri]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = await asyncio.to_thread(cli, argv)
    assert code == 0, err.getvalue()
    return out.getvalue()


async def run_approve(
    uri: str, session_id: str, request_id: str, *, by: str, reason: str = ""
) -> tuple[int, str]:
    """``agentjournal approve SESSION REQUEST --as BY --reason REASON``: exit code, stderr."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["approve", session_id, request_id, "--as", by, "--reason", reason, "--uri", uri]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = await asyncio.to_thread(cli, argv)
    return code, err.getvalue()
