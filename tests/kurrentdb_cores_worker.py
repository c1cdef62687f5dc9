"""A KurrentDB client in a process of its own, using a second core as the commands do:
``python tests/kurrentdb_cores_worker.py MODE URI ...`` (``tests/test_verify_kurrentdb.py``).

The server (a test double) is another process's, so this one is only a client, as an
application's is; it prints one JSON line of what happened:

- ``export URI``: ``trace export --all`` in two parts (the child forked before any gRPC, as
  the command forks it), then in one;
- ``appended URI NAME...``: the same, but a writer appends a session for each NAME after the
  child sent its part and before this process reads its own;
- ``verify URI SESSION PUBKEY_FILE``: ``agentjournal verify`` as the command line runs it, on
  one process and then four times on two.

Every fork the commands make is counted, with whether the child's result came back; what was
folded again here because the child's part ended elsewhere (``until``); and, for
``verify``, the Python threads running when the verifier decided whether forking is safe.
Whatever machine load there is, a second core counts as free (forking is still only where it
is safe). The children are reaped before the line is printed.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sys
import threading
import time
from typing import Any

from agentjournal import Journal, _forked
from agentjournal.audit.verify import _parallel
from agentjournal.cli import _trace_all, main
from two_parts import Sent, every_tree

forks: list[bool] = []  # each fork: whether a child runs
results: list[bool] = []  # each child's result: whether it came back
refolded: list[int] = []  # each part folded here up to another process's end
threads: list[list[str]] = []  # the Python threads when the verifier judged forking safe


def spy() -> None:
    real_forked, real_result, real_project = (
        _forked.forked,
        _forked.Child.result,
        _trace_all._project,
    )
    real_safe = _forked.forking_safe

    def forked(work: Any) -> Any:
        child = real_forked(work)
        forks.append(child is not None)
        return child

    def result(self: _forked.Child) -> Any:
        sent = real_result(self)
        results.append(sent is not None)
        return sent

    def project(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("until") is not None:
            refolded.append(kwargs["until"])
        return real_project(*args, **kwargs)

    def forking_safe() -> bool:
        threads.append(sorted(thread.name for thread in threading.enumerate()))
        return real_safe()

    _forked.forked, _forked.Child.result = forked, result  # type: ignore[method-assign]
    _trace_all._project = project
    _forked.core_to_spare = real_safe  # whatever the load: only the safety rule
    _parallel.forking_pays = lambda events: forking_safe()


def export(uri: str, late: list[str]) -> dict[str, Any]:
    lines = _trace_all._lines()
    second = _trace_all._second_part(uri, lines)  # before any gRPC, as the command forks it
    if late:
        try:
            sent = second.result() if second is not None else None
        finally:
            if second is not None:
                second.close()
        asyncio.run(append(uri, late))
        split = asyncio.run(every_tree(uri, Sent(sent), lines))
    else:
        try:
            split = asyncio.run(every_tree(uri, second, lines))
        finally:
            if second is not None:
                second.close()
    alone = asyncio.run(every_tree(uri, None, lines))
    return {
        "spans": len(alone),
        "same": split == alone,
        "sessions": sorted(
            {json.loads(line)["attributes"].get("agentjournal.session_id") for _, line in alone}
        ),
    }


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
    """The command on one process, then ``RUNS`` times on two (a thread gRPC left running
    would keep it on one in some of them)."""
    printed = []
    spied = _parallel.forking_pays
    for pays in (lambda events: False, *[spied] * RUNS):
        _parallel.forking_pays = pays
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = main(["verify", session, "--uri", uri, "--pubkey", pubkey])
        printed.append((code, out.getvalue()))
    return {
        "codes": sorted({code for code, _ in printed}),
        "same": all(run == printed[0] for run in printed),
        "last": printed[-1][1].splitlines()[-1],
    }


RUNS = 4


def reaped() -> None:
    deadline = time.monotonic() + 30
    while _forked._ended and time.monotonic() < deadline:
        time.sleep(0.01)
        _forked.reap()


if __name__ == "__main__":
    mode, uri, *rest = sys.argv[1:]
    spy()
    if mode == "verify":
        found = verify(uri, *rest)
    else:
        found = export(uri, rest if mode == "appended" else [])
    reaped()
    print(
        json.dumps(
            {
                **found,
                "forks": forks,
                "results": results,
                "refolded": len(refolded),
                "threads": threads,
                "left": len(_forked._ended),
            }
        )
    )
