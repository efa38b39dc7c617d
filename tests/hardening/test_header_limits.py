"""Oversized and malformed request headers reach a real Daphne and get a JSON answer
(431 or 400) instead of a dropped connection."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import start_web

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def web(stack_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    proc, url = start_web(stack_env, Path(tmp_path_factory.mktemp("headers")))
    yield url
    proc.stop()


def raw(url: str, request: bytes) -> tuple[int, dict[str, Any], bytes]:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data, "the server closed the connection without an answer"
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body), head


def test_one_huge_header_is_431_json(web: str) -> None:
    request = b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 20_000
    status, body, head = raw(web, request + b"\r\n\r\n")
    assert status == 431
    assert body["error"]["code"] == "headers_too_large"
    assert b"application/json" in head


def test_many_headers_over_the_total_are_431_json(web: str) -> None:
    headers = b"".join(b"X-H%d: %s\r\n" % (n, b"b" * 1000) for n in range(30))
    status, body, _ = raw(web, b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
    assert status == 431 and body["error"]["code"] == "headers_too_large"


def test_a_malformed_request_line_is_400_json(web: str) -> None:
    status, body, _ = raw(web, b"NONSENSE\r\n\r\n")
    assert status == 400 and body["error"]["code"] == "bad_request"


def test_ordinary_headers_still_reach_the_app(web: str) -> None:
    response = httpx.get(f"{web}/api/nope", headers={"X-Ok": "c" * 7000}, timeout=10)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
