"""Workbench tests: a data directory of their own, a local web server, no remote network."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentweb.runtime.tools import ToolContext
from tests.runs.conftest import enqueued, people  # noqa: F401 - fixtures of the run tests
from tests.runtime.conftest import (  # noqa: F401 - fixtures shared with the runtime tests
    _no_remote_network,
    anthropic_model,
    fake_llm,
    openai_model,
)

PNG_1x1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108020000009077"
    "53de0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
)


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "data"
    monkeypatch.setenv("AGENTWEB_DATA_DIR", str(path))
    monkeypatch.delenv("AGENTWEB_HTTP_ALLOW", raising=False)
    return path


@pytest.fixture
def ctx() -> ToolContext:
    return ToolContext(call_id="c1", run_id="77")


class Site:
    """A local web server: files from a folder plus a few scripted routes."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.hits: list[str] = []
        self.redirects: dict[str, str] = {}
        site = self

        class Handler(SimpleHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                site.hits.append(self.path)
                target = site.redirects.get(self.path)
                if target is not None:
                    self.send_response(302)
                    self.send_header("Location", target)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                super().do_GET()

        handler = functools.partial(Handler, directory=str(root))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def write(self, name: str, content: str | bytes) -> None:
        data = content.encode() if isinstance(content, str) else content
        (self.root / name).write_bytes(data)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    root = tmp_path / "site"
    root.mkdir()
    server = Site(root)
    try:
        yield server
    finally:
        server.close()
