"""The wire under the MCP SDK's client: our request ids on it, and a stdio server's
stderr in our log (see ``mcpclient``)."""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections import deque
from typing import Any, Protocol

import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

__all__ = ["ENDED", "SPAWNED", "Peer", "StderrLog", "Wire", "children", "clip", "garbage"]

log = logging.getLogger("agentweb.runtime.mcpclient")

STDERR_LINE = 2000  # characters of one stderr line kept for the log
#: Why a session ended when its stream closed under it.
ENDED = "closed the connection during the call (it stopped or crashed)"


#: Process ids of the stdio servers this process started (for the leak checks).
SPAWNED: set[int] = set()


class Peer(Protocol):
    """What the wire tells the session it carries."""

    written: set[str]
    stderr: StderrLog | None

    def broke(self, why: str) -> None: ...


def children() -> list[int]:
    """This process's child processes (zombies included)."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{os.getpid()}/task"):
            with open(f"/proc/{os.getpid()}/task/{task}/children") as fh:
                found.extend(int(p) for p in fh.read().split())
    except OSError:
        pass
    return found


def clip(text: str, n: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n] + "…"


_PYDANTIC = re.compile(
    r"(Invalid JSON: [^\[]+?)\s*\[type=[^,]+, input_value=(.{0,120}?), input_type"
)


def garbage(exc: BaseException) -> str:
    """Words for what the server sent that is not JSON-RPC: what it was, and why not."""
    what = clip(str(exc))
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        what = f"{clip(str(first.get('input', '')), 80)!r} ({first.get('msg', 'invalid')})"
    elif found := _PYDANTIC.search(str(exc)):  # the HTTP transport's words for the same
        what = f"{found.group(2)} ({found.group(1).strip()})"
    return f"answered something that is not JSON-RPC: {what}"


class Wire:
    """The SDK's transport with the call's key on the wire: a ``tools/call`` goes out under
    its ``_meta.idempotency_key``, ``<run id>:<call id>`` (unless that key is already in
    flight), its answer comes
    back under the id the SDK chose. Also notes the stream's end and garbage on it."""

    def __init__(self, inner: Any, session: Peer) -> None:
        self.inner = inner
        self.session = session
        self.to_wire: dict[Any, str] = {}  # the SDK's request id -> the wire id
        self.from_wire: dict[str, Any] = {}

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self.inner.__aenter__()
        if self.session.stderr is not None:  # a stdio server: note its process
            pid = self.session.stderr.writer_pid()
            if pid is not None:
                SPAWNED.add(pid)
        return _Reader(read, self), _Writer(write, self)

    async def __aexit__(self, *exc: Any) -> Any:
        return await self.inner.__aexit__(*exc)

    def outgoing(self, item: SessionMessage) -> SessionMessage:
        message = item.message
        if isinstance(message, types.JSONRPCRequest) and message.method == "tools/call":
            meta = (message.params or {}).get("_meta") or {}
            key = meta.get("idempotency_key") if isinstance(meta, dict) else None
            if isinstance(key, str) and key:
                self.session.written.add(key)
                if key not in self.from_wire:
                    self.to_wire[message.id] = key
                    self.from_wire[key] = message.id
                    return SessionMessage(message.model_copy(update={"id": key}), item.metadata)
        elif (
            isinstance(message, types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
            and isinstance(message.params, dict)
            and message.params.get("requestId") in self.to_wire
        ):
            params = {**message.params, "requestId": self.to_wire[message.params["requestId"]]}
            return SessionMessage(message.model_copy(update={"params": params}), item.metadata)
        return item

    def incoming(self, item: Any) -> Any:
        if isinstance(item, Exception):
            self.session.broke(garbage(item))
            return item
        message = getattr(item, "message", None)
        if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
            wire = message.id
            if isinstance(wire, str) and wire in self.from_wire:
                sdk_id = self.from_wire.pop(wire)
                self.to_wire.pop(sdk_id, None)
                return SessionMessage(message.model_copy(update={"id": sdk_id}), item.metadata)
        return item

    def ended(self) -> None:
        self.session.broke(ENDED)


class _Reader:
    def __init__(self, inner: Any, wire: Wire) -> None:
        self._inner, self._wire = inner, wire

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __aiter__(self) -> _Reader:
        return self

    async def __anext__(self) -> Any:
        try:
            item = await self._inner.__anext__()
        except StopAsyncIteration:
            self._wire.ended()
            raise
        return self._wire.incoming(item)

    async def receive(self) -> Any:
        return self._wire.incoming(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Reader:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


class _Writer:
    def __init__(self, inner: Any, wire: Wire) -> None:
        self._inner, self._wire = inner, wire

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def send(self, item: SessionMessage, /) -> None:
        await self._inner.send(self._wire.outgoing(item))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _Writer:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


class StderrLog:
    """A pipe for a stdio server's stderr, read on the loop: each line goes to the log
    with the server's name. Ends when the server and its children closed their ends."""

    def __init__(self, server: str) -> None:
        self.server = server
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        self._read_fd = read_fd
        self.writer = os.fdopen(write_fd, "w")  # handed to the process; ours closes after
        self._buffer = b""
        self.recent: deque[str] = deque(maxlen=10)  # the last lines, told when it fails
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(read_fd, self._readable)

    def writer_pid(self) -> int | None:
        """The child process whose stderr is this pipe (the server just started)."""
        wanted = f"pipe:[{os.fstat(self._read_fd).st_ino}]"
        for pid in children():
            try:
                if os.readlink(f"/proc/{pid}/fd/2") == wanted:
                    return pid
            except OSError:
                continue
        return None

    def parent_done(self) -> None:
        """The process has its copy: close ours, so the pipe ends when the server does."""
        if not self.writer.closed:
            self.writer.close()

    def _readable(self) -> None:
        try:
            chunk = os.read(self._read_fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._flush(final=True)
            self._loop.remove_reader(self._read_fd)
            os.close(self._read_fd)
            return
        self._buffer += chunk
        self._flush()

    def _flush(self, final: bool = False) -> None:
        *lines, rest = self._buffer.split(b"\n")
        if rest and (final or len(rest) > 65536):  # the last line, or one without an end
            lines, rest = [*lines, rest], b""
        self._buffer = rest
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip("\r")
            if line.strip():
                self.recent.append(line[:STDERR_LINE])
                log.info(
                    "MCP server %s (stderr): %s",
                    self.server,
                    line[:STDERR_LINE],
                    extra={"mcp_server": self.server},
                )
