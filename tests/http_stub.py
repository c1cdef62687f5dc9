"""A real HTTP/1.1 server on loopback whose replies a test scripts, for fault injection.

Each request is parsed (headers and a Content-Length body), recorded, and
answered by the test's handler: ``(status, content_type, body, delay)``. The
server speaks plain sockets so a handler can send what a proper framework
would refuse to: wrong content types, malformed or huge bodies, slow replies.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Self


@dataclass
class Received:
    """One request the stub received."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    content_type: str = "application/json"
    body: bytes = b"{}"
    delay: float = 0.0


Handler = Callable[[Received], Reply | Awaitable[Reply]]


@dataclass
class HttpStub:
    """Serve ``handler`` on 127.0.0.1 (see the module docs)."""

    handler: Handler
    received: list[Received] = field(default_factory=list)
    _server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                _, path, _ = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while (header := await reader.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = header.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Received(path, headers, body)
                self.received.append(request)
                reply = self.handler(request)
                if not isinstance(reply, Reply):
                    reply = await reply
                if reply.delay:
                    await asyncio.sleep(reply.delay)
                writer.write(
                    f"HTTP/1.1 {reply.status} X\r\ncontent-type: {reply.content_type}\r\n"
                    f"content-length: {len(reply.body)}\r\n\r\n".encode()
                    + reply.body
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()
