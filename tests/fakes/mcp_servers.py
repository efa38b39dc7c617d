"""Real MCP servers for the tests: the reference server ``@modelcontextprotocol/server-
everything`` from npm (stdio and Streamable HTTP), ``mcp-server-time`` from PyPI, and our
faulty server (``tests.fakes.mcp_faulty``), as ``ServerConfig``s or as HTTP processes on
loopback ports. A test that finds no Node.js skips with the reason."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agentweb.runtime.mcpserver import ServerConfig
from tests.fakes import node_tools

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = "@modelcontextprotocol/server-everything"


def everything_script() -> str:
    """The reference server's entry point (installed once, at its pinned version)."""
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed (the MCP reference server runs on it)")
    try:
        folder = node_tools.ensure(EVERYTHING)
    except node_tools.Unavailable as exc:
        pytest.skip(str(exc))
    return str(folder / "node_modules" / EVERYTHING / "dist" / "index.js")


def everything_stdio(name: str = "everything", **kw: Any) -> ServerConfig:
    return ServerConfig.stdio(name, f"node {everything_script()} stdio", **kw)


def faulty_command() -> str:
    return f"{sys.executable} -m tests.fakes.mcp_faulty"


def faulty_stdio(name: str = "faulty", env: dict[str, str] | None = None, **kw: Any) -> Any:
    kw.setdefault("cwd", str(ROOT))
    return ServerConfig.stdio(name, faulty_command(), env=env, **kw)


def time_stdio(name: str = "clock", **kw: Any) -> ServerConfig:
    """``mcp-server-time`` (PyPI, requirements-dev.txt), a 2026-era Python server."""
    return ServerConfig.stdio(name, f"{sys.executable} -m mcp_server_time", **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the MCP server exited with {proc.returncode} before listening")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"the MCP server did not listen on {port} within {timeout} s")


@contextmanager
def http_server(kind: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Start ``kind`` ("everything" or "faulty") over Streamable HTTP; yields its URL."""
    port = free_port()
    if kind == "everything":
        args = ["node", everything_script(), "streamableHttp"]
    else:
        args = [sys.executable, "-m", "tests.fakes.mcp_faulty", "http", str(port)]
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        env={**os.environ, **(env or {}), "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.kill()
        proc.wait(10)


def zombies(pids: list[int]) -> list[int]:
    """Those of ``pids`` that have exited and not been reaped."""
    found = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            found.append(pid)
    return found


class GarbageHttpServer:
    """A Streamable HTTP MCP server of a few lines that speaks the 2025 handshake and
    lists one tool, ``echo``, then answers every ``tools/call`` with a body that is not
    JSON-RPC (as a broken proxy or a crashed backend's error page would)."""

    TOOL = {"name": "echo", "inputSchema": {"type": "object"}, "annotations": {}}

    def __init__(self) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        outer = self
        self.calls = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # no server-initiated stream
                self.send_response(405)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_DELETE(self) -> None:
                self.do_GET()

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                method, rid = body.get("method"), body.get("id")
                if rid is None:  # a notification
                    self._send(202, b"")
                elif method == "initialize":
                    result = {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "garbage", "version": "1"},
                    }
                    self._send(200, json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}))
                elif method == "tools/list":
                    result = {"tools": [outer.TOOL]}
                    self._send(200, json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}))
                elif method == "tools/call":
                    outer.calls += 1
                    self._send(200, b"<html>502 Bad Gateway</html>")
                else:  # server/discover and the rest: not here (the client falls back)
                    error = {"code": -32601, "message": "Method not found"}
                    self._send(200, json.dumps({"jsonrpc": "2.0", "id": rid, "error": error}))

            def _send(self, status: int, data: bytes | str) -> None:
                raw = data.encode() if isinstance(data, str) else data
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/mcp"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
