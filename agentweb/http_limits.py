"""Answers for requests Daphne's HTTP parser (Twisted) refuses before Django sees them.

Twisted drops a connection whose request line or one header line is over 16 KiB without
a word, and answers headers over 16 KiB in total with a bare 400. Clients get a status
and a JSON body instead: 431 for headers that are too large, 400 for malformed ones.
Imported by the ASGI module, so it applies in the Daphne process only.
"""

from __future__ import annotations

import json
from typing import Any


def _response(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


TOO_LARGE = _response(
    431,
    "Request Header Fields Too Large",
    "headers_too_large",
    "the request line or its headers are over 16 KiB",
)
BAD_REQUEST = _response(400, "Bad Request", "bad_request", "the request could not be read")


def install() -> bool:
    """Patch Twisted's HTTP channel once; False where Twisted is not installed."""
    try:
        from twisted.web import http
    except ImportError:
        return False
    channel: Any = http.HTTPChannel
    if getattr(channel, "_agentweb_limits", False):
        return True

    def line_too_long(self: Any, line: bytes) -> None:
        self.transport.write(TOO_LARGE)
        self.transport.loseConnection()

    def bad_request(self: Any) -> None:
        too_large = self._receivedHeaderSize > self.totalHeadersSize
        self.transport.write(TOO_LARGE if too_large else BAD_REQUEST)
        self.loseConnection()

    channel.lineLengthExceeded = line_too_long
    channel._respondToBadRequestAndDisconnect = bad_request
    channel._agentweb_limits = True
    return True
