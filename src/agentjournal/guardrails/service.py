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
import math
import re
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, Literal

import uvicorn
from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentjournal.errors import InvalidInput
from agentjournal.guardrails.protocol import (
    ActionType,
    ToolCallPayload,
    ValidateRequest,
    ValidateResponse,
    parse_traceparent,
)
from agentjournal.guardrails.rules import RuleSet, decide

logger = logging.getLogger("agentjournal.guardrails.service")


DEFAULT_MAX_BODY = 256 * 1024
"""The default request body limit in bytes: a validate request is an action, not a file."""

DEFAULT_READ_TIMEOUT = 10.0
"""Seconds a client has to send a whole request body before it is answered 408."""

MAX_DEPTH = 64
"""How deep arrays and objects may nest in a request body (and in a tool call's arguments):
an action is not that deep, and the rules, their redaction and the answer's encoding then never
meet a recursion limit. Deeper is 422."""

_REF_PREFIX = "#/components/schemas/"


class ErrorDetail(BaseModel):
    """One problem with a request body (pydantic's location and message)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    loc: list[str | int]
    msg: str
    type: str


class ErrorResponse(BaseModel):
    """The body of every 400, 408, 413 and 422 answer: one line, then the details."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    error: str
    details: list[ErrorDetail] = []


class Health(BaseModel):
    """The body of ``GET /health``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["ok"]


def _schema(model: type[BaseModel], components: dict[str, Any]) -> dict[str, Any]:
    """``model``'s JSON Schema with its ``$defs`` moved into ``components``; returns a $ref.

    pydantic nests shared definitions under ``$defs`` and refers to them as
    ``#/$defs/Name``; inside an OpenAPI document that pointer resolves against
    the document root, where there is no ``$defs``. Every definition therefore
    moves to ``components/schemas`` and every reference is rewritten to match.
    """
    schema = model.model_json_schema(ref_template=_REF_PREFIX + "{model}", mode="serialization")
    components.update(schema.pop("$defs", {}))
    components[model.__name__] = schema
    return {"$ref": _REF_PREFIX + model.__name__}


def _with(schema: dict[str, Any], **properties: dict[str, Any]) -> dict[str, Any]:
    """An object ``schema`` with some of its properties' schemas replaced."""
    return {
        **{key: value for key, value in schema.items() if key != "title"},
        "properties": {**schema["properties"], **properties},
    }


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_DAY: Final = 86_400.0
"""The longest read timeout (seconds): past it a timer overflows, and no client is that slow."""


def openapi(*, max_body: int = DEFAULT_MAX_BODY) -> dict[str, Any]:
    """The service's OpenAPI 3.1 document, from the protocol's own models.

    Every ``$ref`` points into ``components/schemas``; the document lists every
    status the service answers with (the body limit ``max_body`` is stated in
    the 413 description).
    """
    components: dict[str, Any] = {}
    request = ValidateRequest.model_json_schema(ref_template=_REF_PREFIX + "{model}")
    components.update(request.pop("$defs", {}))
    # A TOOL_CALL's payload is a tool call; the other actions' payloads are any JSON.
    tool_call = _schema(ToolCallPayload, components)
    others = [kind.value for kind in ActionType if kind is not ActionType.TOOL_CALL]
    components["ValidateRequest"] = {
        "title": request["title"],
        "description": "The body of POST /v1/validate: a TOOL_CALL's payload is a tool call",
        "oneOf": [
            _with(request, action_type={"const": ActionType.TOOL_CALL.value}, payload=tool_call),
            _with(request, action_type={"enum": others}),
        ],
    }
    response = _schema(ValidateResponse, components)
    error = _schema(ErrorResponse, components)
    health = _schema(Health, components)
    header = {"type": "string"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "agentjournal reference guardrail", "version": "1"},
        "paths": {
            "/v1/validate": {
                "post": {
                    "operationId": "validate",
                    "summary": "Validate an action: ALLOW, BLOCK or MODIFY",
                    "parameters": [
                        {
                            "name": "traceparent",
                            "in": "header",
                            "required": False,
                            "description": "W3C trace context; logged with the decision. "
                            "A malformed value is ignored (the body's trace is used).",
                            "schema": header,
                        },
                        {
                            "name": "tracestate",
                            "in": "header",
                            "required": False,
                            "description": "W3C vendor trace state; accepted and not interpreted.",
                            "schema": header,
                        },
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": _REF_PREFIX + "ValidateRequest"}
                            }
                        },
                    },
                    "responses": {
                        "200": _json(response, "The decision"),
                        "400": _json(error, "The body is not JSON (or Content-Length is invalid)"),
                        "408": _json(error, "The body did not arrive within the read timeout"),
                        "413": _json(error, f"The body is larger than {max_body} bytes"),
                        "422": _json(
                            error,
                            "The body is JSON but does not follow the contract: a field is "
                            f"missing or mistyped, it nests deeper than {MAX_DEPTH} levels, a "
                            "string holds a lone surrogate, or a TOOL_CALL payload is not a "
                            "tool call ({id, type, function: {name, arguments}})",
                        ),
                        "500": _json(error, "The rules could not decide (the caller blocks)"),
                    },
                }
            },
            "/health": {
                "get": {
                    "operationId": "health",
                    "responses": {"200": _json(health, "Alive")},
                }
            },
        },
        "components": {"schemas": components},
    }


class _Refused(Exception):
    """A request body the service will not read further (answered with ``status``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(status: int, message: str, details: list[ErrorDetail] | None = None) -> Response:
    body = ErrorResponse(error=message, details=details or [])
    # A refused body may be partly unread: closing the connection stops the client sending it.
    headers = {"connection": "close"} if status in (408, 413) else None
    return JSONResponse(body.model_dump(mode="json"), status_code=status, headers=headers)


async def _read_body(request: Request, max_body: int) -> bytes:
    """The request body, refused as soon as it is known to exceed ``max_body`` bytes.

    Content-Length is checked before a byte is read; a chunked body (no length)
    is counted while it streams in, so neither ever sits whole in memory.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise _Refused(400, f"invalid Content-Length {declared[:40]!r}")
        if int(declared) > max_body:
            raise _Refused(
                413, f"body of {declared} bytes is larger than the {max_body}-byte limit"
            )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body:
            raise _Refused(413, f"body is larger than the {max_body}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    rules: RuleSet,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
) -> Starlette:
    """Return the ASGI app deciding with ``rules``.

    Args:
        rules: The rules to decide with.
        max_body: The largest request body in bytes; a larger one is answered 413
            before it is read in full.
        read_timeout: Seconds a client has to send the whole body; then 408.

    Raises:
        InvalidInput: ``max_body`` or ``read_timeout`` is not positive.
    """
    if max_body < 1:
        raise InvalidInput(f"the body limit must be at least 1 byte, not {max_body}")
    if not 0 < read_timeout <= _DAY:
        raise InvalidInput(
            f"the read timeout must be positive seconds, at most a day, not {read_timeout}"
        )
    document = openapi(max_body=max_body)

    async def validate(request: Request) -> Response:
        trace = parse_traceparent(request.headers.get("traceparent", ""))
        try:
            async with asyncio.timeout(read_timeout):
                raw = await _read_body(request, max_body)
        except _Refused as refused:
            return _error(refused.status, str(refused))
        except TimeoutError:
            return _error(408, f"the body did not arrive within {read_timeout:g} s")
        try:  # NaN and Infinity are not JSON: never let them turn into null in a MODIFY
            parsed = json.loads(raw, parse_constant=_not_json, parse_float=_finite)
        except (ValueError, RecursionError):
            return _error(400, "the body is not JSON")
        problem = _unfit(parsed, "the body")
        if problem is not None:
            return _refused(422, problem)
        try:
            body = ValidateRequest.model_validate(parsed)
            if body.action_type is ActionType.TOOL_CALL:
                call = ToolCallPayload.model_validate(body.payload)
                problem = _unfit_arguments(call.function.arguments)
                if problem is not None:
                    return _refused(422, problem)
        except ValidationError as error:
            where = ["payload"] if error.title == ToolCallPayload.__name__ else []
            details = [
                ErrorDetail(loc=[*where, *e["loc"]], msg=e["msg"], type=e["type"])
                for e in error.errors(include_url=False, include_input=False)
            ]
            logger.warning("refused (422): %s", details[0].msg if details else error.title)
            return _error(422, "the body does not follow the contract", details)
        try:
            answer = decide(body, rules)
            answered = answer.model_dump(mode="json")
        except Exception as error:  # one line, never a traceback: the caller blocks on 5xx
            logger.error("could not decide %s: %s: %s", body.action_id, type(error).__name__, error)
            return _error(500, "the rules could not decide this request")
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
        return JSONResponse(answered)

    async def served_document(request: Request) -> Response:
        return JSONResponse(document)

    async def health(request: Request) -> Response:
        return JSONResponse(Health(status="ok").model_dump(mode="json"))

    return Starlette(
        routes=[
            Route("/v1/validate", validate, methods=["POST"]),
            Route("/openapi.json", served_document, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


@asynccontextmanager
async def running(
    rules: RuleSet,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    max_body: int = DEFAULT_MAX_BODY,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
) -> AsyncIterator[str]:
    """Serve on ``host`` (port 0: a free one) while the block runs; yields the base URL."""
    config = uvicorn.Config(
        create_app(rules, max_body=max_body, read_timeout=read_timeout),
        host=host,
        port=port,
        log_level="warning",
        lifespan="off",
        timeout_keep_alive=_keep_alive(read_timeout),
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


def _keep_alive(read_timeout: float) -> int:
    """uvicorn's idle keep-alive timeout: idle connections go no later than a body must come."""
    return max(1, min(5, int(read_timeout)))


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
    max_body: int = DEFAULT_MAX_BODY,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
) -> None:
    """Serve until interrupted (the ``agentjournal guardrail serve`` command).

    Args:
        rules: The rules to decide with.
        host: The address to listen on.
        port: The port; 0 picks a free one.
        ready: Called with the base URL (the port actually bound) before serving.
        max_body: The largest request body in bytes (larger: 413, refused unread).
        read_timeout: Seconds a client has to send a whole body (slower: 408).

    Raises:
        InvalidInput: The port is in use, the host cannot be resolved, or a
            limit is not positive.
    """
    app = create_app(rules, max_body=max_body, read_timeout=read_timeout)
    sock = bind(host, port)
    try:
        # Listening before `ready`: a client told the URL is queued until uvicorn accepts.
        sock.listen(2048)
        bound = sock.getsockname()
        shown = f"[{bound[0]}]" if sock.family == socket.AF_INET6 else bound[0]
        if ready is not None:
            ready(f"http://{shown}:{bound[1]}")
        config = uvicorn.Config(app, log_level="info", timeout_keep_alive=_keep_alive(read_timeout))
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
    finally:
        sock.close()


def _refused(status: int, message: str) -> Response:
    logger.warning("refused (%d): %s", status, message)
    return _error(status, message)


def _unfit(value: Any, where: str) -> str | None:
    """What makes a parsed JSON value unfit to decide on: nesting deeper than
    :data:`MAX_DEPTH`, or a string (or key) holding a lone surrogate, which no UTF-8
    answer can carry. Walked without recursion."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item) is not None:
                return f"{where}: a string holds a lone surrogate (not UTF-8 text)"
        elif isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                return f"{where}: nested deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                pending.extend((key, depth) for key in item)
                pending.extend((child, depth + 1) for child in item.values())
            else:
                pending.extend((child, depth + 1) for child in item)
    return None


def _unfit_arguments(arguments: str) -> str | None:
    """:func:`_unfit` for a tool call's arguments, when they are JSON (the rules read them)."""
    if _SURROGATE.search(arguments) is not None:
        return f"{_ARGUMENTS}: a lone surrogate (not UTF-8 text)"
    try:
        parsed = json.loads(arguments, parse_constant=_not_json)
    except RecursionError:
        return f"{_ARGUMENTS}: nested deeper than {MAX_DEPTH} levels"
    except ValueError:
        return None  # not JSON (a custom tool's raw input): the rules see it as text
    return _unfit(parsed, _ARGUMENTS)


_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_ARGUMENTS: Final = "the tool call's arguments"


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999 reads as infinity, which JSON cannot say either
        raise ValueError(f"{text} is not a finite number")
    return value
