"""A local OTLP/HTTP trace receiver: accepts ``POST /v1/traces`` (protobuf), keeps or
discards the spans. For tests (spans from other processes) and the tracing bench."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class SinkSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    status_code: int = 0
    service: str = ""
    process: str = ""


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(x) for x in v.array_value.values)
    return getattr(v, kind) if kind else None


class OtlpSink:
    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self.spans: list[SinkSpan] = []
        self.requests = 0
        self.lock = threading.Lock()
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                sink.receive(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def receive(self, body: bytes) -> None:
        with self.lock:
            self.requests += 1
        if not self.keep:
            return
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        out = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    out.append(
                        SinkSpan(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            status_code=span.status.code,
                            service=str(resource.get("service.name", "")),
                            process=str(resource.get("agentweb.process", "")),
                        )
                    )
        with self.lock:
            self.spans.extend(out)

    def of_trace(self, trace_id: str) -> list[SinkSpan]:
        with self.lock:
            return [s for s in self.spans if s.trace_id == trace_id]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> OtlpSink:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
