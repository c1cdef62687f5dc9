"""The live viewer: a Starlette application over one store (``agentjournal ui``) that
reads, and writes one thing only: a person's answer to a pending approval.

Routes (GET, but the one POST):

- ``/``: the sessions list: one page of the catalog's rows, filtered, searched and sorted by
  the query (``/api/sessions``'s parameters, see
  :mod:`agentjournal.read.catalog.query`), following the store.
- ``/sessions/{id}``: one session (``?at=N`` opens Replay before item ``#N``;
  ``?branch=B`` shows the branch line B); 404 page for a session (or
  branch) the store does not hold.
- ``/api/sessions``, ``/api/sessions/{id}``, ``/api/sessions/{id}/replay?at=N``: the
  same data as JSON (``&branch=B`` too), which an open page fetches again when told
  something changed.
- ``/api/sessions/{id}/compare?a=LINE&b=LINE``: two lines side by side from where they
  part (:func:`~agentjournal.ui.compare.compare_lines`; ``a`` is main by default).
- ``/experiments/{id}``, ``/api/experiments/{id}``: an experiment's sessions, each with
  its main line's and branch's scores and a link to its Compare tab
  (:func:`~agentjournal.ui.experiments.experiment_page`).
- ``/events``, ``/sessions/{id}/events``: server-sent events, one ``changed`` message
  (its data: the store position) whenever the store — or that session's tree,
  subsessions opened later included — has a new event after ``?after=POSITION``.
- ``/evals``, ``/evals/{run_id}`` (``/api/evals``, ``/api/evals/{run_id}`` as JSON): the
  eval runs that scored a session, and one run's page (:mod:`agentjournal.ui.evals`); a
  session's page carries its scores (``scores``) from every run that scored it.
- ``/static/…``: the page's CSS and script, shipped in the wheel.
- ``POST /api/sessions/{id}/approvals/{request_id}`` (``&branch=B`` too), JSON
  ``{"approve": bool, "by": NAME, "reason": TEXT}``: the answer, through
  :func:`agentjournal.read.approvals.answer` (``agentjournal approve``'s route:
  ``InterruptResolved``, recorded as given); only with a token (else 403), and only from
  the viewer's own origin (see below). 200 with the answer; 400 bad body; 404 no such
  session or request; 409 answered already (naming who answered), its call has run, or
  its subagent has ended; 403 a policy of the session names approvers for the tool.

With a token, every request must carry it: ``Authorization: Bearer TOKEN``, or the
cookie a page opened with ``?token=TOKEN`` got (for its own script's requests).
A POST with the cookie (not the header) must also come from the viewer's own origin
(its ``Origin`` header names this server's scheme, host and port) with a JSON body, so
no page of another origin, another port on the same host included, can answer for the
person whose browser holds the cookie.
Every response forbids framing and any other origin (Content-Security-Policy).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from agentjournal import events
from agentjournal.errors import (
    AlreadyResolved,
    ApproverNotAllowed,
    CodecError,
    InvalidInput,
    JournalError,
)
from agentjournal.records import opened_stream
from agentjournal.streams import (
    KEYS_STREAM,
    MAIN_BRANCH,
    authority_stream,
    branches_stream,
    ledger_stream,
    projection_stream,
    session_stream,
    validate_id,
)
from agentjournal.ui import page

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from agentjournal.read.catalog import SessionRow
    from agentjournal.shred.keys import SubjectKeyStore
    from agentjournal.store.contract import EventStore, RecordedEvent

COOKIE: Final = "agentjournal_ui_token"
"""The cookie a ``?token=`` visit sets, so the page's own requests carry the token."""

_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_PROJECTIONS: Final = projection_stream("x")[:-1]
_ASSETS: Final = {
    "ui.css": "text/css",
    "ui.js": "text/javascript",
    "evals.css": "text/css",
    "evals.js": "text/javascript",
}
_TICK: Final = 0.5
_KEEPALIVE_SECONDS: Final = 15.0


def create_app(
    open_store: Callable[[], Awaitable[EventStore]],
    *,
    keys: Mapping[str, Ed25519PublicKey] | None = None,
    token: str | None = None,
    closing: threading.Event | None = None,
    warm_wait: float = 2.0,
    subject_keys: SubjectKeyStore | None = None,
) -> Starlette:
    """The viewer over the store ``open_store`` opens when the application starts.

    Args:
        open_store: Opens the store (once, at startup; closed at shutdown).
        keys: The trusted public keys the ledger is verified against.
        token: When given, every request must carry it (see the module docs).
        closing: Set when the server shuts down: open event streams then end within
            half a second (a server waits for its open responses before it stops).
        warm_wait: How long a list request waits for the first reading of the store
            before it answers how far that reading is (503, the page refreshing itself).
        subject_keys: The key store sealed content is shown with: opened, ``[erased]``
            once its subject was erased; without it, ``[sealed]``. The caller closes it.
            The sessions list and its content search read the stored bytes: sealed
            content is never indexed.
    """
    closing = closing or threading.Event()
    trusted = dict(keys or {})
    state: dict[str, Any] = {}
    from agentjournal.read.catalog.live import LiveCatalog

    # The catalog and its content index, in memory: each request folds only what is new.
    live = LiveCatalog(trusted)
    # The full check of each session page served (its integrity), for the list: a
    # session whose page FAILED is never listed as sound on the catalog's cheaper check.
    checked: dict[str, dict[str, Any]] = {}

    def store() -> EventStore:
        opened: EventStore = state["store"]
        return opened

    def shown() -> EventStore:
        """The store as the pages show it: sealed content opened or marked."""
        from agentjournal.shred.keys import MemoryKeyStore
        from agentjournal.shred.sealing import OpeningStore

        opener = subject_keys if subject_keys is not None else MemoryKeyStore()
        return OpeningStore(store(), opener, shown=True)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state["store"] = await open_store()
        state["last"] = await page.last_position(state["store"])
        # The first fold reads the whole store (a minute for a million events): start it
        # now, so the first request waits only for what is left of it.
        warming = state["warming"] = asyncio.ensure_future(warm())
        try:
            yield
        finally:
            warming.cancel()
            with contextlib.suppress(BaseException):
                await warming
            await state["store"].close()

    async def warm() -> None:
        with contextlib.suppress(JournalError):  # the first request says what failed
            await live.refresh(store())

    async def sessions_json(request: Request) -> dict[str, Any] | Response:
        from agentjournal.read.catalog.query import parse_query

        try:
            query = parse_query(request.query_params.multi_items())
        except InvalidInput as error:
            return _bad(request, str(error))
        if not live.ready:
            # Still reading the store for the first time: wait a little, then say how far.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(state["warming"]), warm_wait)
            if not live.ready and not state["warming"].done():
                return _warming(request, live.position or 0, state["last"])
        try:
            snapshot = await live.refresh(store())
        except JournalError as error:
            return _unavailable(error)
        return page.sessions_data(
            snapshot.rows,
            query,
            position=snapshot.position,
            checked=checked,
            content=snapshot.index.matching,
        )

    async def index(request: Request) -> Response:
        data = await sessions_json(request)
        return data if isinstance(data, Response) else HTMLResponse(page.render(data, live=True))

    async def api_sessions(request: Request) -> Response:
        data = await sessions_json(request)
        return data if isinstance(data, Response) else JSONResponse(data)

    async def session_json(request: Request) -> dict[str, Any] | Response:
        try:
            session_id = validate_id(request.path_params["session"], "session id")
            at = _at(request)
            if await store().head(session_stream(session_id)) is None:
                raise InvalidInput(f"no session {session_id!r} in this store")
            data = await page.session_page(
                store(),
                session_id,
                trusted,
                at=at,
                branch=_branch(request),
                subject_keys=subject_keys,
            )
            checked[session_id] = data["integrity"]
            data["decide"] = token is not None
            data["scores"] = await session_scores(session_id, _branch(request))
            return data
        except InvalidInput as error:
            return _missing(request, str(error))
        except JournalError as error:  # the store is down or refused: say so, in one line
            return _unavailable(error)

    async def session(request: Request) -> Response:
        data = await session_json(request)
        if isinstance(data, Response):
            return data
        return HTMLResponse(page.render(data, live=True))

    async def api_session(request: Request) -> Response:
        data = await session_json(request)
        return data if isinstance(data, Response) else JSONResponse(data)

    async def api_replay(request: Request) -> Response:
        from agentjournal.read.lines import line_replay
        from agentjournal.read.replay import history_before
        from agentjournal.walk import read_tree

        try:
            session_id = validate_id(request.path_params["session"], "session id")
            at = _at(request)
            if at is None:
                raise InvalidInput("give ?at=INDEX")
            branch = _branch(request)
            if branch is not None:
                items = await line_replay(shown(), session_id, branch, at=at)
                return JSONResponse({"at": at, "items": items})
            tree = await read_tree(shown(), session_id)
            return JSONResponse({"at": at, "items": history_before(tree, at)})
        except InvalidInput as error:
            return _missing(request, str(error))
        except JournalError as error:
            return _unavailable(error)

    async def api_compare(request: Request) -> Response:
        from agentjournal.ui.compare import compare_lines

        try:
            session_id = validate_id(request.path_params["session"], "session id")
            a = request.query_params.get("a") or MAIN_BRANCH
            b = request.query_params.get("b")
            if not b or a == b:
                # What was asked cannot be answered, whatever the store holds: 400.
                return _bad(request, "give two different lines: ?a=LINE (main by default)&b=LINE")
            if await store().head(session_stream(session_id)) is None:
                raise InvalidInput(f"no session {session_id!r} in this store")
            return JSONResponse(await compare_lines(shown(), session_id, a, b))
        except InvalidInput as error:
            return _missing(request, str(error))
        except JournalError as error:
            return _unavailable(error)

    async def experiment_json(request: Request) -> dict[str, Any] | Response:
        from agentjournal.ui.experiments import experiment_page

        try:
            run_id = validate_id(request.path_params["run"], "experiment id")
            return await experiment_page(shown(), run_id)
        except InvalidInput as error:
            return _missing(request, str(error))
        except JournalError as error:
            return _unavailable(error)

    async def experiment(request: Request) -> Response:
        data = await experiment_json(request)
        if isinstance(data, Response):
            return data
        return HTMLResponse(page.render(data, title=f"experiment {data['run_id']}"))

    async def api_experiment(request: Request) -> Response:
        data = await experiment_json(request)
        return data if isinstance(data, Response) else JSONResponse(data)

    async def changes(request: Request) -> Response:
        try:
            after = _after(request)
        except InvalidInput as error:
            return _missing(request, str(error))
        return _event_stream(store(), after, None, closing)

    async def session_changes(request: Request) -> Response:
        from agentjournal.walk import walk_tree

        try:
            session_id = validate_id(request.path_params["session"], "session id")
            after = _after(request)
        except InvalidInput as error:
            return _missing(request, str(error))
        streams = {
            session_stream(session_id),
            authority_stream(session_id),
            ledger_stream(session_id),
        }
        with contextlib.suppress(Exception):  # a tree that does not exist yet has no streams
            from agentjournal.engine.fork import read_branches

            # Every line's streams (a page shows one line, and lists every branch).
            roots = [session_stream(session_id)]
            roots.extend(b.stream for b in await read_branches(store(), session_id))
            streams.add(branches_stream(session_id))
            for root in roots:
                async for name, _ in walk_tree(store(), root):
                    streams.add(name)
        return _event_stream(store(), after, streams, closing)

    async def decide(request: Request) -> Response:
        from agentjournal.read.approvals import UnknownRequest

        if token is None:
            return PlainTextResponse(
                "deciding needs the viewer's token (agentjournal ui --token ...)\n",
                status_code=403,
            )
        if not _same_origin(request, token):
            return PlainTextResponse(
                "cross-origin: an answer comes from the viewer's own page or with "
                "Authorization: Bearer TOKEN\n",
                status_code=403,
            )
        try:
            session_id = validate_id(request.path_params["session"], "session id")
            request_id = request.path_params["request"]
            branch = _branch(request)
        except InvalidInput as error:
            return _missing(request, str(error))
        try:
            approve, by, reason = _answer_of(await request.body())
        except InvalidInput as error:
            return _bad(request, str(error))
        try:
            if await store().head(session_stream(session_id)) is None:
                return _missing(request, f"no session {session_id!r} in this store")
            decided = await decide_approval(
                store(),
                session_id,
                branch,
                request_id,
                approve=approve,
                by=by,
                reason=reason,
            )
        except AlreadyResolved as error:
            return _answer(request, str(error), 409, "conflict")
        except ApproverNotAllowed as error:  # the policy names approvers: a signed answer
            return _answer(request, str(error), 403, "forbidden")
        except UnknownRequest as error:
            return _missing(request, str(error))
        except InvalidInput as error:  # settled: its call has run; or no such branch
            return _answer(request, " ".join(str(error).split()), 409, "conflict")
        except JournalError as error:
            return _unavailable(error)
        return JSONResponse(
            {
                "request_id": decided.request_id,
                "outcome": decided.outcome,
                "by": decided.by,
                "reason": decided.reason,
                "at": decided.timestamp.isoformat(),
            }
        )

    async def catalog_rows() -> list[SessionRow]:
        """The catalog's rows once its first reading is done (waiting a little for it);
        none before."""
        if not live.ready:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(state["warming"]), warm_wait)
            if not live.ready:
                return []
        return (await live.refresh(store())).rows

    async def session_scores(session_id: str, branch: str | None) -> dict[str, Any]:
        from agentjournal.ui.evals import session_scores_data

        row = next((r for r in await catalog_rows() if r.session_id == session_id), None)
        runs = row.eval_runs if row is not None else ()
        return await session_scores_data(shown(), session_id, runs, line=branch or MAIN_BRANCH)

    async def evals_json(request: Request) -> dict[str, Any] | Response:
        from agentjournal.ui.evals import runs_page

        try:
            rows = await catalog_rows()
            return await runs_page(shown(), (run for row in rows for run in row.eval_runs))
        except JournalError as error:
            return _unavailable(error)

    async def evals(request: Request) -> Response:
        data = await evals_json(request)
        if isinstance(data, Response):
            return data
        return HTMLResponse(page.render(data, live=True, title="eval runs"))

    async def api_evals(request: Request) -> Response:
        data = await evals_json(request)
        return data if isinstance(data, Response) else JSONResponse(data)

    async def eval_run_json(request: Request) -> dict[str, Any] | Response:
        from agentjournal.ui.evals import run_page

        try:
            run_id = validate_id(request.path_params["run"], "eval run id")
            return await run_page(shown(), run_id)
        except InvalidInput as error:
            return _missing(request, str(error))
        except JournalError as error:
            return _unavailable(error)

    async def eval_run(request: Request) -> Response:
        data = await eval_run_json(request)
        if isinstance(data, Response):
            return data
        return HTMLResponse(page.render(data, live=True, title=f"eval run {data['run_id']}"))

    async def api_eval_run(request: Request) -> Response:
        data = await eval_run_json(request)
        return data if isinstance(data, Response) else JSONResponse(data)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _ASSETS:
            return PlainTextResponse("not found", status_code=404)
        return Response(page.asset(name), media_type=_ASSETS[name])

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/api/sessions", api_sessions),
            Route("/api/sessions/{session}", api_session),
            Route("/api/sessions/{session}/replay", api_replay),
            Route("/api/sessions/{session}/compare", api_compare),
            Route("/experiments/{run}", experiment),
            Route("/api/experiments/{run}", api_experiment),
            Route("/events", changes),
            Route("/sessions/{session}", session),
            Route("/sessions/{session}/events", session_changes),
            Route("/static/{name}", static),
            Route("/evals", evals),
            Route("/api/evals", api_evals),
            Route("/evals/{run}", eval_run),
            Route("/api/evals/{run}", api_eval_run),
            Route("/api/sessions/{session}/approvals/{request}", decide, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.add_middleware(_Guard, token=token)
    return app


MAX_ANSWER_BYTES: Final = 16 * 1024
"""The largest body an answer (``{"approve", "by", "reason"}``) may have."""


def _answer_of(body: bytes) -> tuple[bool, str, str]:
    """``approve``, ``by`` and ``reason`` from an answer's JSON body.

    Raises:
        InvalidInput: The body is no such JSON object (one line says what is wrong).
    """
    if len(body) > MAX_ANSWER_BYTES:
        raise InvalidInput(f"the answer is larger than {MAX_ANSWER_BYTES} bytes")
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInput(
            'give a JSON object: {"approve": true or false, "by": NAME, "reason": TEXT}'
        ) from None
    if not isinstance(answer, dict):
        raise InvalidInput('give a JSON object: {"approve": ..., "by": ..., "reason": ...}')
    unknown = sorted(set(answer) - {"approve", "by", "reason"})
    if unknown:
        raise InvalidInput(f"unknown field {unknown[0][:40]!r}: give approve, by and reason")
    approve, by, reason = answer.get("approve"), answer.get("by"), answer.get("reason", "")
    if not isinstance(approve, bool):
        raise InvalidInput(f"approve must be true or false, got {approve!r:.40}")
    if not isinstance(by, str) or not by.strip():
        raise InvalidInput("an answer needs the name of who decides (by)")
    if not isinstance(reason, str):
        raise InvalidInput(f"reason must be text, got {reason!r:.40}")
    return approve, by, reason


async def decide_approval(
    store: EventStore,
    session_id: str,
    branch: str | None,
    request_id: str,
    *,
    approve: bool,
    by: str,
    reason: str,
) -> events.ApprovalDecided:
    """Answer an approval on a line (default: main) through
    :func:`agentjournal.read.approvals.answer`, as ``agentjournal approve`` does: the one
    write the viewer makes (one ``InterruptResolved``, hash-chained, unsigned).

    Raises:
        UnknownRequest: The line holds no approval request ``request_id``.
        AlreadyResolved: It was answered already (naming who answered).
        ApproverNotAllowed: A policy of the session names approvers for the tool.
        InvalidInput: Its call has run, its subagent has ended, or the branch is unknown.
    """
    from agentjournal.read.approvals import answer

    # No signing key: the viewer signs nothing; the application's next checkpoint (its
    # resume's) covers the answer, as it covers the question and the paused run.
    _, decided = await answer(
        store,
        session_id,
        request_id,
        branch=branch or MAIN_BRANCH,
        approve=approve,
        by=by,
        reason=reason,
    )
    return decided


def _same_origin(request: Request, token: str) -> bool:
    """Whether a POST is the viewer's own: it carries the token in its Authorization
    header (no browser adds that by itself), or it names this server as its ``Origin``
    and sends JSON (a form of another page can do neither)."""
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer ") and hmac.compare_digest(
        header[7:].strip().encode(), token.encode()
    ):
        return True
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.headers.get('host', '')}"
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return origin is not None and origin == own and kind == "application/json"


_INDEX = re.compile(r"[0-9]{1,18}")
"""An index or position in a query: ASCII digits only (``isdigit`` takes "²"), and short
enough that ``int`` never meets its digit limit."""


def _at(request: Request) -> int | None:
    raw = request.query_params.get("at")
    if raw is None or raw == "":
        return None
    if not _INDEX.fullmatch(raw):
        raise InvalidInput(f"at must be an item index (0 or more), got {raw[:40]!r}")
    return int(raw)


def _forked_stream(event: RecordedEvent) -> str | None:
    """The branch stream a ``BranchForked`` names (it commits before the branch's first
    event), so a page follows branches forked after it opened."""
    if event.type != events.BRANCH_FORKED:
        return None
    try:
        return events.BranchForked.decode(event.data).branch_stream
    except CodecError:
        return None


def _branch(request: Request) -> str | None:
    """``?branch=B``: a line of the session (None: main)."""
    raw = request.query_params.get("branch")
    return None if raw in (None, "", MAIN_BRANCH) else raw


def _after(request: Request) -> int | None:
    raw = request.query_params.get("after")
    if raw is None or raw == "":
        return None
    if not _INDEX.fullmatch(raw):
        raise InvalidInput(f"after must be a store position, got {raw[:40]!r}")
    return int(raw)


def _unavailable(error: JournalError) -> Response:
    reason = " ".join(str(error).split())
    return PlainTextResponse(f"the store could not be read: {reason}\n", status_code=503)


def _warming(request: Request, position: int, last: int) -> Response:
    """The list while the store is read for the first time: how far, and to ask again."""
    share = f" ({100 * position // last}%)" if last else ""
    message = (
        f"the viewer is reading the store for the first time: through position {position} "
        f"of {last}{share}; the list appears when it is done"
    )
    headers = {"Retry-After": "2"}
    if request.url.path.startswith("/api/"):
        body = {"error": message, "position": position, "of": last}
        return JSONResponse(body, status_code=503, headers=headers)
    return HTMLResponse(page.waiting(message), status_code=503, headers=headers)


def _bad(request: Request, message: str) -> Response:
    """A query the list does not take: 400, the reason in one line."""
    return _answer(request, " ".join(message.split()), 400, "bad request")


def _missing(request: Request, message: str) -> Response:
    return _answer(request, message, 404, "not found")


def _answer(request: Request, message: str, status: int, title: str) -> Response:
    """An error as JSON to the API and the event streams, as a page to a person."""
    if request.url.path.startswith("/api/") or request.url.path.endswith("/events"):
        return JSONResponse({"error": message}, status_code=status)
    return HTMLResponse(page.not_found(message, title=title), status_code=status)


def _event_stream(
    store: EventStore, after: int | None, streams: set[str] | None, closing: threading.Event
) -> Response:
    """Server-sent events: ``changed`` for each new event of ``streams`` (every stream but
    the projections' own saves when None), learning subsessions as they open; a comment
    every 15 s of quiet (a dead client is noticed); the end when ``closing`` is set."""

    async def messages() -> AsyncIterator[str]:
        start = after if after is not None else await page.last_position(store)
        # A comment first: the browser's EventSource reports the stream open at once.
        yield f": following from {start}\n\n"
        events = store.subscribe(after_position=start)
        step: asyncio.Future[RecordedEvent] | None = None
        quiet = 0
        try:
            while not closing.is_set():
                if step is None:
                    step = asyncio.ensure_future(anext(events))
                done, _ = await asyncio.wait({step}, timeout=_TICK)
                if not done:
                    quiet += 1
                    if quiet * _TICK >= _KEEPALIVE_SECONDS:
                        quiet = 0
                        yield ": still here\n\n"
                    continue
                event, step, quiet = step.result(), None, 0
                if event.stream.startswith(_PROJECTIONS):
                    continue  # the catalog's own saves (a list page refreshing) are no news
                if streams is not None:
                    if event.stream not in streams and event.stream != KEYS_STREAM:
                        continue
                    child = opened_stream(event) or _forked_stream(event)
                    if child is not None:
                        streams.add(child)
                yield f"event: changed\ndata: {json.dumps(event.position)}\n\n"
        finally:
            if step is not None:
                step.cancel()
                with contextlib.suppress(BaseException):
                    await step
            with contextlib.suppress(Exception):
                await events.aclose()  # type: ignore[attr-defined]

    return StreamingResponse(
        messages(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _loopback_name(host: str) -> bool:
    """Whether the Host a request names is a loopback address or ``localhost``."""
    import ipaddress

    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Guard:
    """Every response: no framing, no other origin; with a token, no answer without it;
    without one, no answer to a Host that is not loopback."""

    def __init__(self, app: Any, *, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if self.token is None and not _loopback_name(request.url.hostname or ""):
            # Without a token the viewer answers only to loopback names: a page elsewhere
            # that rebinds its own host name to 127.0.0.1 must not read the store.
            response = PlainTextResponse(
                "misdirected: without a token this viewer answers only at 127.0.0.1, ::1 "
                "or localhost\n",
                status_code=421,
            )
            await response(scope, receive, send)
            return
        from_query = request.query_params.get("token")
        if self.token is not None and not self._allowed(request, from_query):
            response = PlainTextResponse(
                "unauthorized: give the viewer's token (Authorization: Bearer TOKEN, or "
                "?token=TOKEN in the address)\n",
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        set_cookie = self.token is not None and from_query is not None

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"content-security-policy", _POLICY.encode()))
                headers.append((b"x-content-type-options", b"nosniff"))
                headers.append((b"referrer-policy", b"no-referrer"))
                if set_cookie:
                    cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                    headers.append((b"set-cookie", cookie.encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)

    def _allowed(self, request: Request, from_query: str | None) -> bool:
        assert self.token is not None
        expected = self.token.encode()
        offered: list[str] = []
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            offered.append(header[7:].strip())
        if from_query is not None:
            offered.append(from_query)
        cookie = request.cookies.get(COOKIE)
        if cookie is not None:
            offered.append(cookie)
        return any(hmac.compare_digest(value.encode(), expected) for value in offered)


def serve(
    app: Starlette,
    *,
    host: str,
    port: int,
    ready: Callable[[str], None],
    closing: threading.Event,
) -> None:
    """Serve ``app`` until interrupted: bind first (a port in use is one clear error), call
    ``ready`` with the URL actually bound, then run uvicorn on that socket; on SIGINT or
    SIGTERM set ``closing`` (the one ``app`` was made with) so open event streams end.

    Raises:
        InvalidInput: The port is in use or not allowed, or the host cannot be resolved.
    """
    import socket

    import uvicorn

    from agentjournal.guardrails.service import bind

    sock = bind(host, port)
    try:
        sock.listen(2048)
        bound = sock.getsockname()
        shown = f"[{bound[0]}]" if sock.family == socket.AF_INET6 else bound[0]
        ready(f"http://{shown}:{bound[1]}")
        config = uvicorn.Config(
            app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5
        )

        class Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: Any) -> None:
                closing.set()  # a threading.Event: safe from a signal handler
                super().handle_exit(sig, frame)

        Server(config).run(sockets=[sock])
    finally:
        sock.close()
