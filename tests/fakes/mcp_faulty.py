"""A faulty MCP server of our own, written with the official SDK, for the tests that
must see a server misbehave: it crashes, hangs, writes garbage on the wire, answers
``isError``, returns images and structured content, shows its environment, records
every side effect in a ledger file, and changes its tool list.

    python -m tests.fakes.mcp_faulty stdio
    python -m tests.fakes.mcp_faulty http PORT        # Streamable HTTP on 127.0.0.1

``FAULTY_LEDGER`` (a file path, from the server's own environment) receives one JSON line
per ``transfer`` and ``add_note`` call: the arguments, the request id and the
``_meta.idempotency_key`` it came with, and this process's id. ``transfer`` behaves like a
payment API: a key it has seen before is answered from the ledger, marked ``"replayed"``,
and moves nothing again.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import sys
import zlib
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent, ToolAnnotations

READ_ONLY = ToolAnnotations(readOnlyHint=True)
ADDITIVE = ToolAnnotations(readOnlyHint=False, destructiveHint=False)

#: The wire, duplicated before the SDK diverts fd 1 (prints from tools go to stderr).
_WIRE = os.dup(1)

server = MCPServer("faulty")


def png(width: int = 96, height: int = 64) -> bytes:
    """A small valid PNG: a red to blue gradient."""
    raw = b"".join(
        b"\x00"
        + b"".join(bytes((255 - x * 255 // width, 0, x * 255 // width)) for x in range(width))
        for _ in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def _ledger(tool: str, ctx: Context, replayed: bool = False, **arguments: Any) -> None:
    path = os.environ.get("FAULTY_LEDGER")
    if not path:
        return
    meta = ctx.request_context.meta or {}
    entry = {
        "replayed": replayed,
        "tool": tool,
        "arguments": arguments,
        "request_id": ctx.request_id,
        "idempotency_key": meta.get("idempotency_key"),
        "run_id": meta.get("agentweb/run_id"),
        "pid": os.getpid(),
    }
    with open(path, "a") as fh:
        fh.write(json.dumps(entry) + "\n")


@server.tool(annotations=READ_ONLY)
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def transfer(account: str, amount: float, ctx: Context) -> str:
    """Move money to an account (no annotations: high risk)."""
    key = (ctx.request_context.meta or {}).get("idempotency_key")
    path = os.environ.get("FAULTY_LEDGER")
    if key and path and os.path.exists(path):
        with open(path) as fh:
            seen = [json.loads(line) for line in fh if line.strip()]
        if any(e["idempotency_key"] == key and not e["replayed"] for e in seen):
            _ledger("transfer", ctx, replayed=True, account=account, amount=amount)
            return f"moved {amount:.2f} to {account}"
    _ledger("transfer", ctx, account=account, amount=amount)
    return f"moved {amount:.2f} to {account}"


@server.tool(annotations=ADDITIVE)
def add_note(note: str, ctx: Context) -> str:
    """Append a note (additive: medium risk)."""
    _ledger("add_note", ctx, note=note)
    return "noted"


@server.tool(annotations=READ_ONLY)
def crash() -> str:
    """Exit the whole server in the middle of the call."""
    sys.stderr.write("faulty: crashing now\n")
    sys.stderr.flush()
    os._exit(7)


@server.tool(annotations=READ_ONLY)
async def hang() -> str:
    """Never answer."""
    await asyncio.sleep(3600)
    return "too late"


@server.tool(annotations=READ_ONLY)
async def slow(seconds: float) -> str:
    """Answer after a while."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool(annotations=READ_ONLY)
async def garbage() -> str:
    """Write something that is not JSON-RPC on the wire instead of an answer."""
    os.write(_WIRE, b"this is not json {{{\n")
    await asyncio.sleep(3600)
    return "unreachable"


@server.tool(annotations=READ_ONLY)
def fail(message: str) -> str:
    """Answer with isError and the message."""
    raise ToolError(message)


@server.tool(annotations=READ_ONLY)
def picture() -> list[TextContent | ImageContent]:
    """A text and a PNG image."""
    data = base64.b64encode(png()).decode("ascii")
    return [
        TextContent(type="text", text="a red picture"),
        ImageContent(type="image", data=data, mimeType="image/png"),
    ]


@server.tool(annotations=READ_ONLY)
def weather(city: str) -> dict[str, Any]:
    """Structured content: an object."""
    return {"city": city, "temperature": 21.5, "conditions": ["sunny", "dry"]}


@server.tool(annotations=READ_ONLY)
def environment() -> str:
    """The server process's environment, as JSON."""
    return json.dumps(dict(os.environ), sort_keys=True)


@server.tool(annotations=READ_ONLY)
def headers(ctx: Context) -> dict[str, str]:
    """The HTTP headers of this request (Streamable HTTP only)."""
    return {k.lower(): v for k, v in (ctx.headers or {}).items()}


@server.tool(annotations=READ_ONLY)
async def grow(ctx: Context) -> str:
    """Add a tool named ``grown`` and say the tool list changed."""
    if "grown" not in {t.name for t in await server.list_tools()}:
        server.add_tool(_grown, name="grown", annotations=READ_ONLY)
    if (ctx.protocol_version or "") >= "2026":
        await ctx.notify_tools_changed()
    else:
        await ctx.session.send_tool_list_changed()
    return "grown"


def _grown() -> str:
    """A tool that appeared later."""
    return "I am new"


def main(argv: list[str]) -> None:
    sys.stderr.write(f"faulty: starting ({' '.join(argv) or 'stdio'}) pid {os.getpid()}\n")
    sys.stderr.flush()
    if argv and argv[0] == "http":
        server.run(transport="streamable-http", host="127.0.0.1", port=int(argv[1]))
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv[1:])
