"""Pending approvals in the viewer: the list's count and filter, a session's panel, and a
person's answer given from the viewer.

A real run stops for approval (the SDK's ``Runner`` with ``ScriptedModel``, the run held
with ``session.hold``) in a real SQLite file; the viewer runs on a real uvicorn server
on loopback and is asked over HTTP. An answer from the viewer goes through
``session.approve``/``session.reject``: read back through the API, and the stored run
resumes from it. The browser tests are in ``test_ui_browser.py``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agentjournal import Journal
from agentjournal import events as ev
from agentjournal.audit.verify import verify_records
from agentjournal.ledger import SigningKey
from agentjournal.read.catalog import Catalog
from agentjournal.store import open_store
from agentjournal.streams import session_stream
from agentjournal.ui.app import create_app
from agentjournal.walk import read_tree
from paused_graph import approval_graph
from ui_support import serving, write_paused

TOKEN = "s3cret-token-for-the-viewer"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
ARGUMENTS = '{"order_id":"42","amount_cents":1250}'


async def write_answered(uri: str, key: Path, session_id: str) -> None:
    """The same run, held, approved by bob and resumed: nothing waits."""
    await write_paused(uri, key, session_id)
    async with Journal.open(uri, signing_key=str(key)) as journal:
        session = journal.session(session_id)
        await session.approve("r1", by="bob")
        await session.resume(approval_graph(answer="Refunded."))


@pytest.fixture
def store_with_a_paused_run(tmp_path: Path) -> tuple[str, Path]:
    """A SQLite file holding ``paused-1`` (waiting) and ``done-1`` (answered and run),
    signed with a key whose public half is beside it."""
    key = SigningKey.generate()
    key_file = tmp_path / "k.pem"
    key_file.write_text(key.private_pem(), encoding="utf-8")
    (tmp_path / "k.pem.pub").write_text(key.public_pem(), encoding="utf-8")
    uri = f"sqlite:///{tmp_path / 'journal.db'}"

    async def write() -> None:
        await write_paused(uri, key_file, "paused-1")
        await write_answered(uri, key_file, "done-1")

    asyncio.run(write())
    return uri, key_file


@pytest.fixture
def viewer(store_with_a_paused_run: tuple[str, Path]) -> Iterator[httpx.Client]:
    """The viewer with a token: it may answer."""
    uri, key = store_with_a_paused_run
    with (
        serving(uri, pubkey=Path(f"{key}.pub"), token=TOKEN) as base,
        httpx.Client(base_url=base, timeout=30, headers=BEARER) as client,
    ):
        yield client


def _ids(client: httpx.Client, query: str = "") -> list[str]:
    answer = client.get(f"/api/sessions{query}")
    assert answer.status_code == 200, answer.text
    return [row["session_id"] for row in answer.json()["rows"]]


def _answer(
    client: httpx.Client, request: str = "r1", session: str = "paused-1", **body: Any
) -> httpx.Response:
    return client.post(f"/api/sessions/{session}/approvals/{request}", json=body)


async def _decisions(uri: str, session_id: str) -> list[ev.ApprovalDecided]:
    store = await open_store(uri, create=False)
    try:
        return [
            ev.ApprovalDecided.decode(e.data)
            for e in await store.read_all()
            if e.type == ev.INTERRUPT_RESOLVED and session_id in e.stream
        ]
    finally:
        await store.close()


async def _head(uri: str) -> int:
    store = await open_store(uri, create=False)
    try:
        return max((e.position for e in await store.read_all()), default=0)
    finally:
        await store.close()


# -- the list and the panel ------------------------------------------------------------


def test_the_list_counts_pending_approvals_and_filters_sessions_waiting_for_one(
    viewer: httpx.Client,
) -> None:
    rows = {r["session_id"]: r for r in viewer.get("/api/sessions").json()["rows"]}
    assert rows["paused-1"]["pending_approvals"] == 1
    assert rows["done-1"]["pending_approvals"] == 0  # answered and run
    assert _ids(viewer, "?approvals=1") == ["paused-1"]
    assert _ids(viewer, "?sort=approvals")[0] == "paused-1"
    assert viewer.get("/api/sessions?approvals=yes").status_code == 400


def test_a_session_page_lists_its_pending_approvals(viewer: httpx.Client) -> None:
    data = viewer.get("/api/sessions/paused-1").json()
    (pending,) = data["approvals"]
    assert (pending["agent"], pending["tool"], pending["arguments"], pending["request_id"]) == (
        "billing",
        "issue_refund",
        ARGUMENTS,
        "r1",
    )
    assert pending["asked_at"].startswith("20")
    assert pending["stream"] != session_stream("paused-1")  # billing's, the acting agent's
    assert data["decide"] is True
    assert viewer.get("/api/sessions/done-1").json()["approvals"] == []


def test_an_answer_from_the_viewer_is_recorded_and_empties_the_panel(
    viewer: httpx.Client, store_with_a_paused_run: tuple[str, Path]
) -> None:
    uri, key = store_with_a_paused_run
    done = _answer(viewer, approve=True, by="alice", reason="duplicate charge")
    assert done.status_code == 200, done.text
    assert {k: done.json()[k] for k in ("request_id", "outcome", "by", "reason")} == {
        "request_id": "r1",
        "outcome": "approved",
        "by": "alice",
        "reason": "duplicate charge",
    }
    (decided,) = asyncio.run(_decisions(uri, "paused-1"))
    assert (decided.outcome, decided.by, decided.reason) == (
        "approved",
        "alice",
        "duplicate charge",
    )
    assert viewer.get("/api/sessions/paused-1").json()["approvals"] == []
    assert _ids(viewer, "?approvals=1") == []

    async def resume_and_check() -> None:
        async with Journal.open(uri, signing_key=str(key)) as journal:
            session = journal.session("paused-1")
            assert await session.pending_approvals() == []
            result = await session.resume(approval_graph(answer="Refunded."))
            assert result.final_output == "Refunded."
            public = SigningKey.from_file(str(key))
            report = verify_records(
                await read_tree(journal.store, "paused-1"), {public.key_id: public.public_key}
            )
            assert report.ok, report.text()

    asyncio.run(resume_and_check())


def test_a_rejection_is_recorded_as_given(
    viewer: httpx.Client, store_with_a_paused_run: tuple[str, Path]
) -> None:
    done = _answer(viewer, approve=False, by="  Carol D. ", reason="")
    assert done.status_code == 200, done.text
    (decided,) = asyncio.run(_decisions(store_with_a_paused_run[0], "paused-1"))
    assert (decided.outcome, decided.by) == ("rejected", "  Carol D. ")


def test_a_second_answer_is_refused_naming_who_answered(viewer: httpx.Client) -> None:
    assert _answer(viewer, approve=True, by="alice").status_code == 200
    again = _answer(viewer, approve=False, by="mallory")
    assert again.status_code == 409
    assert again.json()["error"] == "approval request 'r1' was already approved by 'alice'"


def test_racing_answers_from_the_viewer_land_once(
    viewer: httpx.Client, store_with_a_paused_run: tuple[str, Path]
) -> None:
    base = str(viewer.base_url)

    async def race() -> list[int]:
        async with httpx.AsyncClient(base_url=base, timeout=30, headers=BEARER) as client:
            answers = await asyncio.gather(
                *(
                    client.post(
                        "/api/sessions/paused-1/approvals/r1",
                        json={"approve": n % 2 == 0, "by": f"person-{n}"},
                    )
                    for n in range(6)
                )
            )
        return sorted(a.status_code for a in answers)

    assert asyncio.run(race()) == [200, 409, 409, 409, 409, 409]
    assert len(asyncio.run(_decisions(store_with_a_paused_run[0], "paused-1"))) == 1


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        ("/api/sessions/paused-1/approvals/nope", {"approve": True, "by": "a"}, 404, "nope"),
        ("/api/sessions/missing-1/approvals/r1", {"approve": True, "by": "a"}, 404, "missing-1"),
        ("/api/sessions/done-1/approvals/r1", {"approve": True, "by": "a"}, 409, "bob"),
        ("/api/sessions/paused-1/approvals/r1", {"approve": True, "by": " "}, 400, "by"),
        ("/api/sessions/paused-1/approvals/r1", {"approve": True}, 400, "by"),
        ("/api/sessions/paused-1/approvals/r1", {"approve": "yes", "by": "a"}, 400, "approve"),
        ("/api/sessions/paused-1/approvals/r1", {"approve": True, "by": "a", "x": 1}, 400, "x"),
        ("/api/sessions/paused-1/approvals/r1", {"approve": True, "by": "a", "reason": 3}, 400, ""),
        ("/api/sessions/paused-1/approvals/r1", "not json", 400, "JSON"),
        ("/api/sessions/paused-1/approvals/r1", [1], 400, "JSON object"),
    ],
)
def test_a_bad_answer_is_refused_in_one_line_and_writes_nothing(
    viewer: httpx.Client,
    store_with_a_paused_run: tuple[str, Path],
    path: str,
    body: Any,
    status: int,
    says: str,
) -> None:
    uri = store_with_a_paused_run[0]
    before = asyncio.run(_head(uri))
    content = body if isinstance(body, str) else json.dumps(body)
    answer = viewer.post(path, content=content, headers={"Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert says in error
    assert "\n" not in error
    assert asyncio.run(_head(uri)) == before


# -- who may answer ----------------------------------------------------------------------


def test_without_a_token_there_are_no_buttons_and_an_answer_is_403(
    store_with_a_paused_run: tuple[str, Path],
) -> None:
    uri, key = store_with_a_paused_run
    before = asyncio.run(_head(uri))
    with (
        serving(uri, pubkey=Path(f"{key}.pub")) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        data = client.get("/api/sessions/paused-1").json()
        assert len(data["approvals"]) == 1  # shown ...
        assert data["decide"] is False  # ... but not answerable
        refused = _answer(client, approve=True, by="alice")
        assert refused.status_code == 403
        assert refused.text == "deciding needs the viewer's token (agentjournal ui --token ...)\n"
    assert asyncio.run(_head(uri)) == before


def test_an_answer_from_another_origin_is_refused(
    store_with_a_paused_run: tuple[str, Path],
) -> None:
    """The page's cookie alone is not enough: a form or script of another origin (another
    port on the same host is another origin, and the same site for the cookie) is
    refused; the viewer's own page (its Origin, JSON) and the Bearer header are not."""
    uri, key = store_with_a_paused_run
    before = asyncio.run(_head(uri))
    with serving(uri, pubkey=Path(f"{key}.pub"), token=TOKEN) as base:
        cookie = httpx.Client(base_url=base, timeout=30)
        with cookie:
            assert cookie.get(f"/?token={TOKEN}").status_code == 200  # sets the cookie
            assert "agentjournal_ui_token" in cookie.cookies
            path = "/api/sessions/paused-1/approvals/r1"
            body = json.dumps({"approve": True, "by": "mallory"})
            port = int(base.rsplit(":", 1)[1])
            form = "approve=true&by=mallory"
            attempts = [
                # a form posted from another port of the same host
                (form, "application/x-www-form-urlencoded", f"http://127.0.0.1:{port + 1}"),
                # script elsewhere sending JSON (the browser names its origin)
                (body, "application/json", "http://evil.example"),
                # no Origin at all
                (body, "application/json", None),
                # the viewer's own origin, but a form (text/plain needs no preflight)
                (body, "text/plain", base),
            ]
            for content, kind, origin in attempts:
                headers = {"Content-Type": kind}
                if origin is not None:
                    headers["Origin"] = origin
                refused = cookie.post(path, content=content, headers=headers)
                assert refused.status_code == 403, (kind, origin, refused.text)
                assert refused.text.startswith("cross-origin: ")
            assert asyncio.run(_head(uri)) == before
            # Without the cookie or the header: the guard's 401, before anything else.
            bare = httpx.post(base + path, content=body, timeout=30, headers={"Origin": base})
            assert bare.status_code == 401
            own = cookie.post(
                path, content=body, headers={"Content-Type": "application/json", "Origin": base}
            )
            assert own.status_code == 200, own.text
            assert own.json()["by"] == "mallory"


def test_only_the_answer_is_written(store_with_a_paused_run: tuple[str, Path]) -> None:
    """Through the application, in process: one ``InterruptResolved``, nothing else (no
    checkpoint: the viewer holds no signing key)."""
    from starlette.testclient import TestClient

    uri = store_with_a_paused_run[0]

    async def types_after(position: int) -> list[str]:
        store = await open_store(uri, create=False)
        try:
            return [e.type for e in await store.read_all() if e.position > position]
        finally:
            await store.close()

    before = asyncio.run(_head(uri))
    app = create_app(lambda: open_store(uri, create=False), token=TOKEN)
    with TestClient(app, base_url="http://127.0.0.1") as client:
        done = client.post(
            "/api/sessions/paused-1/approvals/r1",
            json={"approve": True, "by": "alice"},
            headers=BEARER,
        )
        assert done.status_code == 200, done.text
    assert asyncio.run(types_after(before)) == [ev.INTERRUPT_RESOLVED]


# -- the catalog's fold ----------------------------------------------------------------


def test_the_catalog_folds_pending_approvals_asked_answered_and_run(
    store_with_a_paused_run: tuple[str, Path],
) -> None:
    """Event by event over the stored order: asked -> 1; answered -> 0; a question whose
    call ran without an answer on record (resumed by the SDK alone) -> 0."""
    uri = store_with_a_paused_run[0]

    async def stored() -> list[Any]:
        store = await open_store(uri, create=False)
        try:
            return list(await store.read_all())
        finally:
            await store.close()

    recorded = asyncio.run(stored())
    catalog = Catalog()
    counts: list[int] = []
    for event in recorded:
        catalog.fold(event)
        row = catalog.row("done-1", {})
        if row is not None and event.type in (ev.INTERRUPT_ISSUED, ev.INTERRUPT_RESOLVED):
            counts.append(row.pending_approvals)
    assert counts == [1, 0]
    paused = catalog.row("paused-1", {})
    assert paused is not None
    assert paused.pending_approvals == 1
    # Without its answer, the call's output settles it.
    unanswered = Catalog()
    for event in recorded:
        if event.type != ev.INTERRUPT_RESOLVED:
            unanswered.fold(event)
    done = unanswered.row("done-1", {})
    assert done is not None
    assert done.pending_approvals == 0
    # A state of the version before is folded again from the start.
    state = json.loads(catalog.dump())
    state["v"] -= 1
    assert Catalog.load(json.dumps(state).encode()) is None


def test_a_tool_whose_policy_names_approvers_cannot_be_answered_from_the_viewer(
    tmp_path: Path,
) -> None:
    """The viewer signs nothing: under a recorded policy that names ann as the refund's
    approver its answer is 403, saying whose signature it needs, and nothing is written."""
    from approval_sessions import approved_policy
    from drive import drive
    from test_approvals import ASK, graph

    uri = f"sqlite:///{tmp_path / 'journal.db'}"

    async def write() -> None:
        async with Journal.open(uri) as journal:
            session = journal.session("named-1", policy=approved_policy())
            paused: Any = await drive(session.guard(graph([])), ASK, session=session, hooks=session)
            await session.hold(paused)

    asyncio.run(write())
    with (
        serving(uri, token=TOKEN) as base,
        httpx.Client(base_url=base, timeout=30, headers=BEARER) as client,
    ):
        refused = _answer(client, session="named-1", approve=True, by="bob")
    assert refused.status_code == 403, refused.text
    assert "needs one signed by ann" in refused.json()["error"]
    assert asyncio.run(_decisions(uri, "named-1")) == []
