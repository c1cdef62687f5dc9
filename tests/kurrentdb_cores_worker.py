"""A KurrentDB client in a process of its own, using a second core as the commands do:
``python tests/kurrentdb_cores_worker.py MODE URI ...`` (``tests/test_verify_kurrentdb.py``).

The server (a test double) is another process's, so this one is only a client, as an
application's is; it prints one JSON line of what happened:

- ``export URI FILE``: ``agentjournal trace export --all --jsonl FILE`` as the command line
  runs it, and the same spans' lines from one process;
- ``appended URI NAME...``: the export's two parts driven here, a writer appending a session
  for each NAME after the child sent its part and before this process reads its own;
- ``verify URI SESSION PUBKEY_FILE``: ``agentjournal verify`` as the command line runs it, on
  one process and then :data:`RUNS` times on two.

Counted: every fork and whether the child's result came back; every part of the trees folded
here that was the child's (the parent refolding it); every view the verifier checked here
(the child checks them all when it runs); the threads running, Python's by name, and the
kernel's count, each time a command judged whether a second core is free. That judgement
keeps its rules (two cores this process may use, no other thread) but the machine's load,
and the verifier forks for a tree of any size. The children are reaped before the line is
printed, and whether any is left is the kernel's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agentjournal import Journal, _forked
from agentjournal.audit.verify import _parallel
from agentjournal.cli import _trace_all, main
from two_parts import Sent, every_tree

RUNS = 4
"""How many times ``verify`` runs the command on two processes (a thread a library left
running keeps it on one process in some runs, not in all)."""

forks: list[bool] = []  # each fork: whether a child runs
results: list[bool] = []  # each child's result: whether it came back
refolded: list[Any] = []  # each of the child's parts folded here, and up to where
viewed: list[int] = []  # each check of views here, the verifier's (the child's, when it runs)
judged: list[tuple[list[str], int]] = []  # Python's threads and the kernel's count, each time


def spy() -> None:
    real_forked, real_result = _forked.forked, _forked.Child.result
    real_project, real_views = _trace_all._project, _parallel._views

    def forked(work: Any) -> Any:
        child = real_forked(work)
        forks.append(child is not None)
        return child

    def result(self: _forked.Child) -> Any:
        sent = real_result(self)
        results.append(sent is not None)
        return sent

    def project(store: Any, part: Any, *args: Any, **kwargs: Any) -> Any:
        if part is not None and part.index == 1:
            refolded.append(kwargs.get("until"))
        return real_project(store, part, *args, **kwargs)

    def views(*args: Any) -> Any:
        viewed.append(1)
        return real_views(*args)

    def core_to_spare() -> bool:
        judged.append((sorted(t.name for t in threading.enumerate()), _forked.threads()))
        return len(os.sched_getaffinity(0)) >= 2 and _forked.forking_safe()

    _forked.forked, _forked.Child.result = forked, result  # type: ignore[method-assign]
    _trace_all._project, _parallel._views = project, views  # type: ignore[assignment]
    _forked.core_to_spare = core_to_spare


def export(uri: str, file: str) -> dict[str, Any]:
    """The command's export, beside one process's."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = main(["trace", "export", "--all", "--jsonl", file, "--uri", uri])
    alone = asyncio.run(every_tree(uri, None, _trace_all._lines()))
    return {
        "code": code,
        "same": Path(file).read_text() == "".join(line for _, line in alone),
        **_spanned(alone),
    }


def appended(uri: str, late: list[str]) -> dict[str, Any]:
    """The export's two parts with a writer between them, beside one process's."""
    lines = _trace_all._lines()
    second = _trace_all._second_part(uri, lines)  # before any gRPC, as the command forks it
    try:
        sent = second.result() if second is not None else None
    finally:
        if second is not None:
            second.close()
    asyncio.run(append(uri, late))
    split = asyncio.run(every_tree(uri, Sent(sent), lines))
    alone = asyncio.run(every_tree(uri, None, lines))
    return {"same": split == alone, **_spanned(alone)}


def _spanned(lines: list[Any]) -> dict[str, Any]:
    sessions = {json.loads(line)["attributes"].get("agentjournal.session_id") for _, line in lines}
    return {"spans": len(lines), "sessions": sorted(sessions)}


async def append(uri: str, names: list[str]) -> None:
    async with Journal.open(uri) as journal:
        for name in names:
            await journal.session(name).add_items(
                [
                    {"role": "user", "content": name},
                    {"type": "function_call", "call_id": "c", "name": "t", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "c", "output": "ok"},
                ]
            )


def verify(uri: str, session: str, pubkey: str) -> dict[str, Any]:
    """The command on one process (a tree too small to fork for), then on two."""
    printed = []
    for least in (10**9, *[0] * RUNS):
        _parallel.MIN_EVENTS = least  # type: ignore[misc]
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = main(["verify", session, "--uri", uri, "--pubkey", pubkey])
        printed.append((code, out.getvalue()))
    return {
        "codes": sorted({code for code, _ in printed}),
        "same": all(run == printed[0] for run in printed),
        "last": printed[-1][1].splitlines()[-1],
    }


def reaped() -> bool:
    """Whether every child has ended and been reaped (the kernel says: none is left)."""
    deadline = time.monotonic() + 30
    while _forked._ended and time.monotonic() < deadline:
        time.sleep(0.01)
        _forked.reap()
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


if __name__ == "__main__":
    mode, uri, *rest = sys.argv[1:]
    spy()
    if mode == "verify":
        found = verify(uri, *rest)
    elif mode == "export":
        found = export(uri, *rest)
    else:
        found = appended(uri, rest)
    alone = reaped()
    print(
        json.dumps(
            {
                **found,
                "forks": forks,
                "results": results,
                "refolded": refolded,
                "viewed here": len(viewed),
                "judged": judged,
                "reaped": alone,
            }
        )
    )
