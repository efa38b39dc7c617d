"""A scriptable fake LLM server (OpenAI-compatible and Anthropic) over real localhost HTTP.

Tests enqueue ``Reply`` objects; each request takes the next one (or asks ``responder``).
Helpers build the JSON bodies and SSE event lists both providers send.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    json: Any = None  # a JSON body
    sse: list[Any] | None = None  # SSE: dict -> "data: {json}\n\n", str -> written verbatim
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before the status line
    stall_after: int | None = None  # SSE: stall after this many events
    stall: float = 0.0  # seconds of the stall
    drop: bool = False  # close the connection without any response
    done: bool = True  # SSE: end with data: [DONE]
    body: bytes | None = None  # raw body (overrides json)
    cut_after: int | None = None  # SSE: send this many events chunked, then drop the socket
    interval: float = 0.0  # SSE: seconds between events (a trickling reply)
    keep_alive: bool = False  # SSE: chunked, the connection kept open (as real providers do)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    json: Any
    peer: int = 0  # the client's port: requests over one kept-alive connection share it


class FakeLLMServer:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []
        self.responder: Callable[[Recorded], Reply] | None = None
        self.record = True
        self.disconnects = 0  # replies the client hung up on before they were complete
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    payload = json.loads(raw) if raw else None
                except ValueError:
                    payload = raw.decode("utf-8", "replace")
                req = Recorded(
                    "POST", self.path, dict(self.headers), payload, self.client_address[1]
                )
                server._serve(self, req)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"

    def enqueue(self, *replies: Reply | dict[str, Any]) -> FakeLLMServer:
        with self._lock:
            for r in replies:
                self.replies.append(r if isinstance(r, Reply) else Reply(json=r))
        return self

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeLLMServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- serving ------------------------------------------------------------------------------

    def _serve(self, h: BaseHTTPRequestHandler, req: Recorded) -> None:
        with self._lock:
            if self.record:
                self.requests.append(req)
            if self.replies:
                reply = self.replies.popleft()
            elif self.responder is not None:
                reply = self.responder(req)
            else:
                reply = Reply(status=500, json={"error": {"message": "fake: no reply enqueued"}})
        if reply.delay and self._hung_up_during(h, reply.delay):
            return
        if reply.drop:
            h.close_connection = True
            return
        if reply.sse is not None:
            self._serve_sse(h, reply)
            return
        body = reply.body if reply.body is not None else json.dumps(reply.json).encode()
        reason = h.responses.get(reply.status, ("",))[0]
        head = [
            f"HTTP/1.1 {reply.status} {reason}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            *(f"{k}: {v}" for k, v in reply.headers.items()),
        ]
        try:  # one write: status line, headers and body together
            h.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True

    def _serve_sse(self, h: BaseHTTPRequestHandler, reply: Reply) -> None:
        if reply.keep_alive:
            self._serve_chunked(h, reply)
            return
        h.close_connection = True
        if reply.cut_after is not None:
            self._serve_cut(h, reply)
            return
        try:
            h.send_response(reply.status)
            h.send_header("Content-Type", "text/event-stream")
            h.send_header("Connection", "close")
            for k, v in reply.headers.items():
                h.send_header(k, v)
            h.end_headers()
            for i, item in enumerate(reply.sse or []):
                if i and reply.interval and self._hung_up_during(h, reply.interval):
                    return
                if reply.stall_after is not None and i == reply.stall_after:
                    h.wfile.flush()
                    time.sleep(reply.stall)
                if isinstance(item, str):
                    h.wfile.write(item.encode())
                else:
                    h.wfile.write(f"data: {json.dumps(item)}\n\n".encode())
                h.wfile.flush()
            if reply.stall_after is not None and reply.stall_after >= len(reply.sse or []):
                time.sleep(reply.stall)
            if reply.done:
                h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            with self._lock:
                self.disconnects += 1

    def _hung_up_during(self, h: BaseHTTPRequestHandler, seconds: float) -> bool:
        """Wait ``seconds``; True (and counted) when the client closed the connection."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select([h.connection], [], [], min(left, 0.05))
            if ready and not h.connection.recv(1, socket.MSG_PEEK):
                with self._lock:
                    self.disconnects += 1
                h.close_connection = True
                return True
        return False

    @staticmethod
    def _serve_chunked(h: BaseHTTPRequestHandler, reply: Reply) -> None:
        """The whole SSE body in chunked encoding; the connection stays open."""
        items = [
            item if isinstance(item, str) else f"data: {json.dumps(item)}\n\n"
            for item in reply.sse or []
        ]
        if reply.done:
            items.append("data: [DONE]\n\n")
        head = f"HTTP/1.1 {reply.status} OK\r\nContent-Type: text/event-stream\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in reply.headers.items())
        head += "Transfer-Encoding: chunked\r\n\r\n"
        body = b"".join(f"{len(d):x}\r\n".encode() + d + b"\r\n" for d in map(str.encode, items))
        try:
            h.wfile.write(head.encode() + body + b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True

    @staticmethod
    def _serve_cut(h: BaseHTTPRequestHandler, reply: Reply) -> None:
        """A chunked SSE response whose connection dies mid-body."""
        head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        head += "Transfer-Encoding: chunked\r\n\r\n"
        h.wfile.write(head.encode())
        for item in (reply.sse or [])[: reply.cut_after]:
            data = (
                item.encode() if isinstance(item, str) else f"data: {json.dumps(item)}\n\n".encode()
            )
            h.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            h.wfile.flush()
        h.connection.shutdown(socket.SHUT_RDWR)


# -- OpenAI-compatible bodies ---------------------------------------------------------------


def oa_call(call_id: str | None, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str | dict) else json.dumps(arguments)
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": args}}
    if call_id is not None:
        out["id"] = call_id
    return out


def oa_reply(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    finish_reason: str | None = None,
    usage: tuple[int, int] = (10, 5),
    model: str = "fake-model",
    **message_extra: Any,
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, **message_extra}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    }


def oa_chunk(
    delta: dict[str, Any] | None = None, finish_reason: str | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}],
    }


def oa_text_chunks(text: str, size: int = 4) -> list[dict[str, Any]]:
    chunks = [oa_chunk({"role": "assistant", "content": ""})]
    chunks += [oa_chunk({"content": text[i : i + size]}) for i in range(0, len(text), size)]
    chunks.append(oa_chunk({}, "stop"))
    return chunks


def oa_call_chunks(
    calls: list[tuple[str | None, str, str]],
    *,
    split: int = 6,
    finish_reason: str | None = "tool_calls",
    index: bool = True,
) -> list[dict[str, Any]]:
    """Streamed tool calls ``(id, name, arguments JSON text)``: the name and id first,
    then the arguments in pieces; ``index=False`` for gateways that send no index."""
    chunks = [oa_chunk({"role": "assistant", "content": None})]
    for n, (call_id, name, args) in enumerate(calls):
        head: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": ""}}
        if call_id is not None:
            head["id"] = call_id
        if index:
            head["index"] = n
        chunks.append(oa_chunk({"tool_calls": [head]}))
        for i in range(0, len(args), split):
            piece: dict[str, Any] = {"function": {"arguments": args[i : i + split]}}
            if index:
                piece["index"] = n
            chunks.append(oa_chunk({"tool_calls": [piece]}))
    if finish_reason is not None:
        chunks.append(oa_chunk({}, finish_reason))
    return chunks


def an_error_event(message: str, kind: str = "overloaded_error") -> str:
    body = json.dumps({"type": "error", "error": {"type": kind, "message": message}})
    return f"event: error\ndata: {body}\n\n"


def oa_usage_chunk(prompt: int = 10, completion: int = 5) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
    }


# -- Anthropic bodies -----------------------------------------------------------------------


def an_reply(
    text: str | None = None,
    tool_uses: list[tuple[str, str, dict[str, Any]]] | None = None,
    *,
    thinking: str | None = None,
    stop_reason: str | None = None,
    usage: tuple[int, int] = (12, 6),
) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if thinking:
        content.append({"type": "thinking", "thinking": thinking, "signature": "sig"})
    if text:
        content.append({"type": "text", "text": text})
    for call_id, name, args in tool_uses or []:
        content.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": "claude-fake",
        "content": content,
        "stop_reason": stop_reason or ("tool_use" if tool_uses else "end_turn"),
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def an_stream(
    text: str | None = None,
    tool_uses: list[tuple[str, str, str]] | None = None,
    *,
    thinking: str | None = None,
    usage: tuple[int, int] = (12, 6),
    split: int = 5,
    stop_reason: str | None = None,
    no_input_deltas: bool = False,
) -> list[Any]:
    """Anthropic SSE events (with ``event:`` lines); tool input JSON given as text, split.

    ``no_input_deltas``: a tool_use block with no ``input_json_delta`` at all (what the API
    streams for a call without arguments)."""
    ev: list[Any] = []

    def add(kind: str, data: dict[str, Any]) -> None:
        ev.append(f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n")

    add(
        "message_start",
        {
            "message": {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": "claude-fake",
                "content": [],
                "usage": {"input_tokens": usage[0], "output_tokens": 1},
            }
        },
    )
    ev.append('event: ping\ndata: {"type": "ping"}\n\n')
    idx = 0
    if thinking:
        add(
            "content_block_start",
            {"index": idx, "content_block": {"type": "thinking", "thinking": ""}},
        )
        add(
            "content_block_delta",
            {"index": idx, "delta": {"type": "thinking_delta", "thinking": thinking}},
        )
        add("content_block_stop", {"index": idx})
        idx += 1
    if text:
        add("content_block_start", {"index": idx, "content_block": {"type": "text", "text": ""}})
        for i in range(0, len(text), split):
            add(
                "content_block_delta",
                {"index": idx, "delta": {"type": "text_delta", "text": text[i : i + split]}},
            )
        add("content_block_stop", {"index": idx})
        idx += 1
    for call_id, name, args_json in tool_uses or []:
        add(
            "content_block_start",
            {
                "index": idx,
                "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
            },
        )
        for i in range(0, 0 if no_input_deltas else len(args_json), split):
            add(
                "content_block_delta",
                {
                    "index": idx,
                    "delta": {"type": "input_json_delta", "partial_json": args_json[i : i + split]},
                },
            )
        add("content_block_stop", {"index": idx})
        idx += 1
    add(
        "message_delta",
        {
            "delta": {"stop_reason": stop_reason or ("tool_use" if tool_uses else "end_turn")},
            "usage": {"output_tokens": usage[1]},
        },
    )
    add("message_stop", {})
    return ev
