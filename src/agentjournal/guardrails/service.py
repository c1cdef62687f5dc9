"""The reference guardrail service: ``agentjournal guardrail serve``.

A real HTTP service (Starlette on uvicorn) implementing ``POST /v1/validate``
with the rules of :mod:`agentjournal.guardrails.rules`. It also serves its
OpenAPI document at ``/openapi.json`` and ``GET /health``. Each request's
``traceparent`` is read and logged with the decision (``trace_id``/``span_id``
fields), so the service's log lines join the caller's trace.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentjournal.errors import InvalidInput
from agentjournal.guardrails.protocol import ValidateRequest, ValidateResponse, parse_traceparent
from agentjournal.guardrails.rules import RuleSet, decide

__all__ = ["bind", "create_app", "openapi", "running", "serve"]

logger = logging.getLogger("agentjournal.guardrails.service")


def openapi() -> dict[str, Any]:
    """The service's OpenAPI 3.1 document, from the protocol's own models."""
    return {
        "openapi": "3.1.0",
        "info": {"title": "agentjournal reference guardrail", "version": "1"},
        "paths": {
            "/v1/validate": {
                "post": {
                    "summary": "Validate an action: ALLOW, BLOCK or MODIFY",
                    "parameters": [
                        {"name": "traceparent", "in": "header", "schema": {"type": "string"}},
                        {"name": "tracestate", "in": "header", "schema": {"type": "string"}},
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": ValidateRequest.model_json_schema()}
                        },
                    },
                    "responses": {
                        "200": {
                            "description": "The decision",
                            "content": {
                                "application/json": {"schema": ValidateResponse.model_json_schema()}
                            },
                        },
                        "400": {"description": "The request does not follow the contract"},
                    },
                }
            },
            "/health": {"get": {"responses": {"200": {"description": "Alive"}}}},
        },
    }


def create_app(rules: RuleSet) -> Starlette:
    """Return the ASGI app deciding with ``rules``."""

    async def validate(request: Request) -> Response:
        trace = parse_traceparent(request.headers.get("traceparent", ""))
        try:
            body = ValidateRequest.model_validate_json(await request.body())
        except ValidationError as error:
            return JSONResponse({"error": json.loads(error.json())}, status_code=400)
        answer = decide(body, rules)
        logger.info(
            "%s %s %s: %s %s",
            body.action_type,
            body.action_id,
            body.source_agent_id,
            answer.decision,
            answer.reason_code or "",
            extra={
                "trace_id": trace.trace_id if trace else body.trace.trace_id,
                "span_id": trace.span_id if trace else body.trace.span_id,
            },
        )
        return JSONResponse(answer.model_dump(mode="json"))

    async def document(request: Request) -> Response:
        return JSONResponse(openapi())

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(
        routes=[
            Route("/v1/validate", validate, methods=["POST"]),
            Route("/openapi.json", document, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


@asynccontextmanager
async def running(rules: RuleSet, *, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve on ``host`` (port 0: a free one) while the block runs; yields the base URL."""
    config = uvicorn.Config(
        create_app(rules), host=host, port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                task.result()  # raises why it could not start
            await asyncio.sleep(0.01)
        bound = server.servers[0].sockets[0].getsockname()
        yield f"http://{bound[0]}:{bound[1]}"
    finally:
        server.should_exit = True
        await task


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host`` and ``port`` (0: a free port), not yet listening.

    Binding before the server starts lets the caller say which port it got, and
    turns a port in use into one clear error instead of a server that exits.

    Raises:
        InvalidInput: The port is in use, not allowed, or the host cannot be resolved.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as error:
        raise InvalidInput(f"cannot resolve --host {host!r}: {error}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart over TIME_WAIT
        sock.bind(address)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise InvalidInput(
                f"port {port} on {host} is in use: stop what holds it, or choose another "
                "--port (0 picks a free one)"
            ) from None
        raise InvalidInput(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    return sock


def serve(
    rules: RuleSet,
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve until interrupted (the ``agentjournal guardrail serve`` command).

    Args:
        rules: The rules to decide with.
        host: The address to listen on.
        port: The port; 0 picks a free one.
        ready: Called with the base URL (the port actually bound) before serving.

    Raises:
        InvalidInput: The port is in use or the host cannot be resolved.
    """
    sock = bind(host, port)
    try:
        # Listening before `ready`: a client told the URL is queued until uvicorn accepts.
        sock.listen(2048)
        bound = sock.getsockname()
        shown = f"[{bound[0]}]" if sock.family == socket.AF_INET6 else bound[0]
        if ready is not None:
            ready(f"http://{shown}:{bound[1]}")
        server = uvicorn.Server(uvicorn.Config(create_app(rules), log_level="info"))
        server.run(sockets=[sock])
    finally:
        sock.close()
