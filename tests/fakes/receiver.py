"""An HTTP receiver for what agentweb POSTs out (webhooks, Slack posts, replies), over real
loopback HTTP (optionally HTTPS with a test CA), that checks signatures and fails on
purpose.

    with Receiver(secret="s3cret") as hooks:       # verifies X-Agentweb-Signature
        hooks.fail(3)                              # the next 3 POSTs get 500
        hooks.hang(1)                              # the next one gets no answer until close
        hooks.slow(2.0)                            # every answer waits 2 s
        hooks.wait_for(1)                          # -> accepted deliveries (2xx answered)
        hooks.accepted[0].json, .headers, .body, .delivery_id

A POST whose signature does not verify is answered 401 (as a real receiver would) and
kept in ``rejected`` with the reason. ``accepted`` holds each delivery as it arrived,
repeats included; ``unique()`` drops repeats by delivery id, as a receiver would.
``Receiver(secret=None)`` checks nothing (Slack's incoming webhooks, response_url) and
answers ``ok``. ``respond(fn)`` lets a test answer itself: ``fn(Hit) -> (status, body)``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agentweb.signing import AGENTWEB_SIGNATURE, AGENTWEB_TIMESTAMP, BadSignature, verify_agentweb
from tests.fakes.tls import TestCA


@dataclass
class Hit:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float = field(default_factory=time.monotonic)
    wall: float = field(default_factory=time.time)  # to compare with stored timestamps
    status: int = 0  # what the receiver answered
    reason: str = ""  # why it refused, when it did

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def delivery_id(self) -> str | None:
        header = self.headers.get("x-agentweb-delivery")
        if header:
            return header
        try:
            data = self.json
        except ValueError:
            return None
        return data.get("delivery_id") if isinstance(data, dict) else None


@dataclass
class _Plan:
    kind: str  # "fail" | "hang" | "drop"
    status: int = 500


class Receiver:
    def __init__(self, secret: str | None = None, *, ca: TestCA | None = None) -> None:
        self.secret = secret
        self.accepted: list[Hit] = []
        self.rejected: list[Hit] = []  # bad signatures, and planned failures
        self.hits: list[Hit] = []  # every POST, in arrival order
        self.responder: Callable[[Hit], tuple[int, bytes]] | None = None
        self._plan: deque[_Plan] = deque()
        self._delay = 0.0
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._stopping = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                hit = Hit(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                receiver._serve(self, hit)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.scheme = "http"
        if ca is not None:
            self._httpd.socket = ca.server_context().wrap_socket(
                self._httpd.socket, server_side=True
            )
            self.scheme = "https"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    # -- what a test asks for ------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def url(self, path: str = "/hook") -> str:
        host = "localhost" if self.scheme == "https" else "127.0.0.1"
        return f"{self.scheme}://{host}:{self.port}{path}"

    def fail(self, times: int, status: int = 500) -> None:
        with self._lock:
            self._plan.extend(_Plan("fail", status) for _ in range(times))

    def hang(self, times: int = 1) -> None:
        """The next ``times`` POSTs get no answer until ``release()`` or ``close()``."""
        with self._lock:
            self._plan.extend(_Plan("hang") for _ in range(times))

    def drop(self, times: int = 1) -> None:
        """The next ``times`` POSTs: the connection is closed without an answer."""
        with self._lock:
            self._plan.extend(_Plan("drop") for _ in range(times))

    def slow(self, seconds: float) -> None:
        self._delay = seconds

    def release(self) -> None:
        self._released.set()

    def respond(self, fn: Callable[[Hit], tuple[int, bytes]] | None) -> None:
        self.responder = fn

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Hit]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.accepted) >= count:
                    return list(self.accepted)
            time.sleep(0.02)
        raise AssertionError(
            f"{len(self.accepted)} of {count} deliveries accepted in {timeout}s "
            f"(rejected: {[h.reason for h in self.rejected][:5]})"
        )

    def unique(self) -> list[Hit]:
        seen: set[str | None] = set()
        out = []
        with self._lock:
            for hit in self.accepted:
                if hit.delivery_id not in seen:
                    seen.add(hit.delivery_id)
                    out.append(hit)
        return out

    def close(self) -> None:
        self._stopping = True
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- serving ------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler, hit: Hit) -> None:
        with self._lock:
            self.hits.append(hit)
            plan = self._plan.popleft() if self._plan else None
        if self._delay:
            time.sleep(self._delay)
        if plan is not None and plan.kind == "hang":
            self._released.wait()
            handler.close_connection = True
            self._record(hit, 0, "hung", rejected=True)
            return
        if plan is not None and plan.kind == "drop":
            handler.close_connection = True
            self._record(hit, 0, "dropped", rejected=True)
            with contextlib.suppress(OSError):
                handler.connection.shutdown(socket.SHUT_RDWR)
            return
        if plan is not None:
            self._answer(handler, plan.status, b'{"error": "planned failure"}')
            self._record(hit, plan.status, "planned failure", rejected=True)
            return
        if self.secret is not None:
            try:
                verify_agentweb(
                    self.secret,
                    hit.body,
                    hit.headers.get(AGENTWEB_TIMESTAMP.lower()),
                    hit.headers.get(AGENTWEB_SIGNATURE.lower()),
                )
            except BadSignature as exc:
                self._answer(handler, 401, json.dumps({"error": str(exc)}).encode())
                self._record(hit, 401, str(exc), rejected=True)
                return
        if self.responder is not None:
            status, body = self.responder(hit)
        else:
            status, body = 200, b"ok"
        self._answer(handler, status, body)
        self._record(hit, status, "", rejected=not 200 <= status < 300)

    def _record(self, hit: Hit, status: int, reason: str, *, rejected: bool) -> None:
        hit.status, hit.reason = status, reason
        with self._lock:
            (self.rejected if rejected else self.accepted).append(hit)

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        reason = handler.responses.get(status, ("",))[0]
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        try:  # one write: a second small one would wait for the client's delayed ACK
            handler.wfile.write(head.encode() + body)
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True
