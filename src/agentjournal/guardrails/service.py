"""The reference guardrail service: ``agentjournal guardrail serve``.

A real HTTP service (Starlette on uvicorn) implementing ``POST /v1/validate``
with the rules of :mod:`agentjournal.guardrails.rules`. It also serves its
OpenAPI document at ``/openapi.json`` and ``GET /health``. Each request's
``traceparent`` is read and logged with the decision (``trace_id``/``span_id``
fields), so the service's log lines join the caller's trace.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentjournal.guardrails.protocol import ValidateRequest, ValidateResponse, parse_traceparent
from agentjournal.guardrails.rules import RuleSet, decide

__all__ = ["create_app", "openapi", "running", "serve"]

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


def serve(rules: RuleSet, *, host: str = "127.0.0.1", port: int = 8787) -> None:
    """Serve until interrupted (the ``agentjournal guardrail serve`` command)."""
    uvicorn.run(create_app(rules), host=host, port=port, log_level="info")
