"""A small OTLP trace receiver on loopback, for the trace projector's tests.

Both transports of the OTLP exporters: HTTP (``POST /v1/traces``, a protobuf
``ExportTraceServiceRequest`` body) and gRPC (the ``TraceService`` servicer from
``opentelemetry.proto``). It decodes every request and keeps every span it received,
in order (a resent span is kept again: tests look at both the list and the distinct
ids). ``refuse`` makes it answer 503 / UNAVAILABLE, to test what an exporter does with it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

__all__ = ["Collector", "Received", "collector"]


@dataclass(frozen=True)
class Received:
    """One span as the collector decoded it."""

    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[tuple[str, dict[str, Any]]]
    status_code: int  # 0 unset, 1 ok, 2 error
    status_message: str
    resource: dict[str, Any]
    links: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind)


def _decode(request: trace_service_pb2.ExportTraceServiceRequest) -> list[Received]:
    found = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                found.append(
                    Received(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex() or None,
                        name=span.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={kv.key: _value(kv.value) for kv in span.attributes},
                        events=[
                            (e.name, {kv.key: _value(kv.value) for kv in e.attributes})
                            for e in span.events
                        ],
                        status_code=span.status.code,
                        status_message=span.status.message,
                        resource=resource,
                        links=[
                            (
                                link.trace_id.hex(),
                                link.span_id.hex(),
                                {kv.key: _value(kv.value) for kv in link.attributes},
                            )
                            for link in span.links
                        ],
                    )
                )
    return found


@dataclass
class Collector:
    """What the receiver got; thread-safe."""

    http_url: str = ""
    grpc_url: str = ""
    refuse: bool = False
    requests: int = 0
    spans: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _arrived: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self._arrived = threading.Condition(self._lock)

    def keep(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        with self._arrived:
            self.requests += 1
            self.spans.extend(_decode(request))
            self._arrived.notify_all()

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.spans)

    def ids(self) -> set[str]:
        """The distinct span ids received."""
        return {span.span_id for span in self.snapshot()}

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        """Wait until at least ``count`` distinct span ids arrived; return every span."""
        with self._arrived:
            self._arrived.wait_for(lambda: len({s.span_id for s in self.spans}) >= count, timeout)
            return list(self.spans)

    def clear(self) -> None:
        with self._lock:
            self.spans.clear()
            self.requests = 0


def _http_handler(sink: Collector) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            if sink.refuse:
                self.send_error(503)
                return
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            sink.keep(request)
            answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Servicer(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: Collector) -> None:
        self._sink = sink

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        if self._sink.refuse:
            context.abort(grpc.StatusCode.UNAVAILABLE, "refusing on purpose")
        self._sink.keep(request)
        return trace_service_pb2.ExportTraceServiceResponse()


@contextmanager
def collector() -> Iterator[Collector]:
    """An HTTP and a gRPC OTLP receiver on loopback, feeding one :class:`Collector`."""
    sink = Collector()
    http = ThreadingHTTPServer(("127.0.0.1", 0), _http_handler(sink))
    thread = threading.Thread(target=http.serve_forever, daemon=True)
    thread.start()
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(  # type: ignore[no-untyped-call]
        _Servicer(sink), server
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    sink.http_url = f"http://127.0.0.1:{http.server_address[1]}"
    sink.grpc_url = f"http://127.0.0.1:{port}"
    try:
        yield sink
    finally:
        server.stop(None)
        http.shutdown()
        http.server_close()
        thread.join(5)
