"""What the viewer's tests share: a store written by real runs, a tampered copy, a server.

:func:`write_store` runs the demo (real ``Runner``, the reference guardrail service on
loopback, a policy, signed checkpoints) and a session whose user message is HTML and
script; :func:`tamper` edits one event's data in a copy of the SQLite file;
:func:`serving` runs the viewer's application on a real uvicorn server on loopback.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from agentjournal import Journal
from agentjournal.cli._common import trusted_keys
from agentjournal.shred.keys import SubjectKeyStore
from agentjournal.store import open_store
from agentjournal.ui.app import create_app
from cli_run import run
from drive import drive
from handoff_scenarios import single, top_level
from stored_form import store_as_written

T = TypeVar("T")

POLICY = Path(__file__).parent.parent / "samples" / "policy.yml"

HOSTILE = (
    '<script>window.__pwned = 1</script><img src="/x.png" onerror="window.__pwned = 2">'
    "</pre></script><b>bold?</b> &amp; done"
)
"""A user message that would run script and load an image if it were ever markup."""


@dataclass(frozen=True)
class Stored:
    """A store the viewer reads, and the public key that signed it."""

    path: Path
    uri: str
    pubkey: Path


def write_store(folder: Path) -> Stored:
    """The demo as ``demo-1`` (with a policy: grants) and ``hostile-1`` (HTML in a message)."""
    path = folder / "journal.db"
    uri = f"sqlite:///{path}"
    key = folder / "journal.pem"
    demo = run(
        "demo", "--uri", uri, "--session", "demo-1", "--key", str(key), "--policy", str(POLICY)
    )
    assert demo.returncode == 0, demo.stderr
    asyncio.run(write_session(uri, key, "hostile-1", HOSTILE))
    return Stored(path, uri, Path(f"{key}.pub"))


async def write_session(uri: str, key: Path | None, session_id: str, text: str) -> None:
    """One run with a handoff (triage -> billing) and one without, signed with ``key``
    (None: unsigned)."""
    async with Journal.open(uri, signing_key=None if key is None else str(key)) as journal:
        session = journal.session(session_id, app_name="shop", user_id="u-1")
        await drive(single(), text, session=session, hooks=session)
        await drive(top_level(), "and again", session=session, hooks=session)


async def write_paused(uri: str, key: Path | str, session_id: str) -> None:
    """triage -> billing, whose refund (call ``r1``) waits for a person; the run held
    (``session.hold``), signed with ``key``."""
    from paused_graph import approval_graph

    async with Journal.open(uri, signing_key=str(key)) as journal:
        session = journal.session(session_id, app_name="shop", user_id="u-9")
        paused: Any = await drive(
            approval_graph(), "Refund order 42", session=session, hooks=session
        )
        await session.hold(paused)


def in_thread(function: Callable[..., T], *args: Any) -> T:
    """``function(*args)`` on a thread of its own, to its end: Playwright's sync API keeps
    an event loop running on the test's thread, where ``asyncio.run`` may not run."""
    done: list[T] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            done.append(function(*args))
        except BaseException as error:  # raised again on the test's thread
            failure.append(error)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), f"{function.__name__} did not finish"
    if failure:
        raise failure[0]
    return done[0]


def write_in_thread(uri: str, key: Path, session_id: str, text: str) -> None:
    """:func:`write_session` on a thread of its own (its own event loop), to its end."""
    in_thread(asyncio.run, write_session(uri, key, session_id, text))


def tamper(
    stored: Stored, folder: Path, needle: bytes, replacement: bytes
) -> tuple[Path, str, int]:
    """A copy of the store with ``needle`` replaced in the data of the one event holding
    it: the copy's path and that event's stream and revision."""
    copy = folder / "tampered.db"
    shutil.copy(stored.path, copy)
    store_as_written(copy)  # the edit below is of the data as written
    with sqlite3.connect(copy) as db:
        found = db.execute(
            "SELECT e.position, s.name, e.revision, e.data FROM events e "
            "JOIN streams s ON s.id = e.stream_id WHERE instr(e.data, ?) > 0",
            (needle,),
        ).fetchall()
        assert len(found) == 1, found
        position, stream, revision, data = found[0]
        db.execute(
            "UPDATE events SET data = ? WHERE position = ?",
            (bytes(data).replace(needle, replacement), position),
        )
    return copy, stream, revision


@contextmanager
def serving(
    uri: str,
    *,
    pubkey: Path | None = None,
    token: str | None = None,
    subject_keys: SubjectKeyStore | None = None,
) -> Iterator[str]:
    """The viewer over ``uri`` on a real uvicorn server on loopback (showing sealed content
    with ``subject_keys``); yields its base URL."""
    import uvicorn

    from agentjournal.guardrails.service import bind

    keys = trusted_keys([str(pubkey)]) if pubkey is not None else {}
    closing = threading.Event()
    app = create_app(
        lambda: open_store(uri, create=False),
        keys=keys,
        token=token,
        closing=closing,
        subject_keys=subject_keys,
    )
    sock = bind("127.0.0.1", 0)
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    _wait(lambda: server.started or not thread.is_alive())
    assert server.started, "the viewer did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        closing.set()  # open event streams end, then the server stops
        server.should_exit = True
        thread.join(15)
        sock.close()
        assert not thread.is_alive(), "the viewer did not stop"


def _wait(done: Callable[[], bool], seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(0.02)


async def write_forked_in_handoff(uri: str, key: str, session_id: str = "paused-1") -> None:
    """triage hands off to billing, whose refund waits for a person; the session is forked
    there (``rejected``: billing goes on on the branch), then the refund is approved on
    main ("Refunded.") and rejected on the branch ("Not refunded."), signed."""
    from paused_graph import approval_graph, resumed

    async with Journal.open(uri, signing_key=key) as journal:
        main = journal.session(session_id, app_name="shop", user_id="u-2")
        paused: Any = await drive(approval_graph(), "Refund order 42", session=main, hooks=main)
        assert paused.interruptions
        saved = paused.to_state().to_string()
        await main.fork(name="rejected")
        line = journal.session(session_id, branch="rejected")
        for session, approve, text in ((line, False, "Not refunded."), (main, True, "Refunded.")):
            graph = approval_graph(answer=text)
            await resumed(graph, saved, approve=approve, session=session, hooks=session)


LISTED = 30
"""How many sessions :func:`write_listed` writes."""
APPS = ("shop", "bank", "travel")
AGENTS = ("triage", "frontdesk", "concierge", "intake")
TOPICS = ("parcel", "invoice", "passport", "mortgage", "voucher")


async def write_listed(uri: str, key: Path, count: int = LISTED) -> None:
    """``count`` small signed sessions ``list-00``…: three apps, five users, four first
    agents, one of five topics in the user's words, an order number in a tool call and
    its result, a varying number of items, and a branch on every seventh."""
    async with Journal.open(uri, signing_key=str(key)) as journal:
        for number in range(count):
            session = journal.session(
                f"list-{number:02d}",
                app_name=APPS[number % 3],
                user_id=f"u-{number % 5}",
                agent_name=AGENTS[number % 4],
            )
            topic = TOPICS[number % 5]
            order = 4700 + number
            items: list[Any] = [
                {"role": "user", "content": f"Where is my {topic}? Case {number}."},
                {
                    "type": "function_call",
                    "name": "lookup_order",
                    "arguments": f'{{"order_id": "{order}"}}',
                    "call_id": f"call-{number}",
                },
                {
                    "type": "function_call_output",
                    "call_id": f"call-{number}",
                    "output": f"order {order} shipped by Zephyrline",
                },
            ]
            items += [{"role": "user", "content": "thanks"}] * (number % 4)
            await session.add_items(items)
            if number % 7 == 3:
                await session.fork(name="retry")
