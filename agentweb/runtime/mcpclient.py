"""Connections to MCP servers through the official SDK, for callers in ordinary threads.

One event loop per process runs in a daemon thread (``agentweb-mcp``) and holds every
server's session. A tool thread calls ``McpConnection.call`` and waits, bounded, for the
answer. A session that breaks — its process exited, it wrote something that is not
JSON-RPC, a call hung past the timeout, the HTTP server went away — is closed (a stdio
server's process stopped and reaped by the SDK) and the next call opens a new one; a call
that never reached a session that had died while idle is sent on a new one at once.

The wire carries a ``tools/call`` under the call's key, ``<run id>:<call id>`` (the
JSON-RPC request id), with ``_meta.idempotency_key`` set to it, so a server can recognise
a call it has seen. The run scopes it as our own tools scope theirs: call ids come from
the model and are unique within a run only (a scripted or local model may say ``call_0``
in every run), and a server that answers a key it has seen from its ledger would answer
another run's call with the first one's result and do nothing.

A stdio server runs with only the environment its entry names plus the SDK's minimal
defaults (HOME, LOGNAME, PATH, SHELL, TERM, USER), in this process's working directory;
its stderr lines go to this module's log with the server's name. Tool lists are read at
each (re)connection and again when the server says they changed (the 2025 notification,
or a 2026 ``subscriptions/listen`` stream); a listener (``set_listener``) hears of every
list and every failure, in a tool-pool thread, never on the loop.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import binascii
import concurrent.futures
import contextlib
import logging
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from .execution import shared_pool
from .mcpserver import CallOutcome, ServerConfig, ServerStatus, ToolInfo, listener
from .mcpwire import ENDED, SPAWNED, StderrLog, Wire, children, clip, garbage

__all__ = [
    "McpConnection",
    "McpFault",
    "close_all",
    "connection",
    "idempotency_key",
    "live_processes",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

CLOSE_WAIT = 10.0  # seconds a close waits for the SDK to stop a server's process


class McpFault(Exception):
    """A call or a listing that failed on the way; the message names the server and why."""


# -- the loop ------------------------------------------------------------------------------


class _Loop:
    """This process's MCP event loop, in a daemon thread; made again after a fork."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid() or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._run, args=(loop,), name="agentweb-mcp", daemon=True
                )
                thread.start()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    @staticmethod
    def _run(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.get())

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise


_LOOP = _Loop()


# -- connections ---------------------------------------------------------------------------


class McpConnection:
    """This process's connection to one server, opened on first use and re-made after a
    failure. Safe to use from any number of threads at once."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self._session: _Session | None = None
        self._lock: asyncio.Lock | None = None  # made on the loop
        self._closed = False
        self.sessions_opened = 0  # how many times it (re)connected (for tests and benches)
        self.lists_changed = 0  # how many list-changed signals the server sent

    def __repr__(self) -> str:
        return f"<McpConnection {self.config.name} {self.config.transport}>"

    # -- what threads call --

    def call(
        self, tool: str, arguments: dict[str, Any], *, call_id: str, run_id: str | None = None
    ) -> CallOutcome:
        """Call ``tool``; raises ``McpFault`` when the call failed on the way (a server's
        own ``isError`` answer is an outcome, not a fault)."""
        bound = self.config.connect_within + self.config.timeout + CLOSE_WAIT
        try:
            return _LOOP.run(self._call(tool, arguments, call_id, run_id), bound)
        except concurrent.futures.TimeoutError:
            raise self._fault(f"did not answer within {self.config.timeout:g} s") from None

    def list_tools(self) -> list[ToolInfo]:
        """The server's tools now (connecting if needed; read again when connected)."""
        bound = self.config.connect_within + self.config.timeout + CLOSE_WAIT
        try:
            return _LOOP.run(self._list(), bound)
        except concurrent.futures.TimeoutError:
            raise self._fault(f"did not list its tools within {self.config.timeout:g} s") from None

    def close(self, wait: float = CLOSE_WAIT) -> None:
        """Close the session (a stdio server's process is stopped); later calls reopen."""
        with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
            _LOOP.run(self._close_session(), wait)

    # -- on the loop --

    async def _call(
        self, tool: str, arguments: dict[str, Any], call_id: str, run_id: str | None
    ) -> CallOutcome:
        meta: dict[str, Any] = {}
        key = idempotency_key(call_id, run_id)
        if key:
            meta["idempotency_key"] = key
        if run_id:
            meta["agentweb/run_id"] = str(run_id)
        for attempt in (1, 2):
            session = await self._open()
            session.inflight += 1
            try:
                result = await session.client().call_tool(
                    tool,
                    arguments,
                    read_timeout_seconds=self.config.timeout,
                    meta=meta or None,  # type: ignore[arg-type]
                )
            except MCPError as exc:
                if (
                    exc.code == types.CONNECTION_CLOSED
                    and attempt == 1
                    and key
                    and key not in session.written
                    and session.broken
                ):
                    continue  # it died while idle and the call never left: a new session
                why = self._why(session, exc)
                raise self._fault(why, broken=session.broken or session.retired) from None
            except ValidationError as exc:
                session.retire("answered a call with a result that does not follow MCP")
                raise self._fault(
                    f"answered {tool!r} with a result that does not follow MCP: {_first(exc)}"
                ) from None
            except Exception as exc:  # a transport error the SDK did not wrap
                why = session.fault or f"{type(exc).__name__}: {clip(str(exc))}"
                session.retire(why)
                raise self._fault(why) from None
            finally:
                session.inflight -= 1
                session.close_if_idle()
            return _outcome(result)
        raise AssertionError("unreachable")

    async def _list(self) -> list[ToolInfo]:
        session = await self._open()
        if session.tools is not None and session.fresh:
            session.fresh = False  # just listed by the connection itself
            return list(session.tools)
        return list(await self._relist(session))

    async def _relist(self, session: _Session) -> tuple[ToolInfo, ...]:
        try:
            tools = await _list_tools(session.client(), self.config.timeout)
        except Exception as exc:
            why = self._why(session, exc)
            session.retire(why)
            raise self._fault(f"could not list its tools: {why}") from None
        session.tools = tools
        self._tell(ServerStatus("ready", "", tools))
        return tools

    async def _open(self) -> _Session:
        """The live session, opening one (and reading the tool list) when there is none."""
        current = self._session
        if current is not None and current.usable:
            return current
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            current = self._session
            if current is not None and current.usable:
                return current
            if current is not None:
                current.retire(current.fault or "replaced")
            session = _Session(self)
            self._session = session
            self.sessions_opened += 1
            session.start()
            try:
                await asyncio.wait_for(session.ready.wait(), self.config.connect_within)
            except TimeoutError:
                session.fault = f"did not finish connecting within {self.config.connect_within:g} s"
            if session.broken or session.fault:
                why = session.fault or "the connection closed while it was being opened"
                await session.close()
                raise self._fault(f"is unavailable: {why}") from None
            try:
                session.tools = await _list_tools(session.client(), self.config.timeout)
            except Exception as exc:
                why = self._why(session, exc)
                await session.close()
                raise self._fault(f"is unavailable: could not list its tools: {why}") from None
            session.fresh = True
            self._tell(ServerStatus("ready", "", session.tools))
            return session

    async def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def _tools_changed(self, session: _Session) -> None:
        """The server said its tools changed (a 2026 listen stream may say it twice, as
        an event and as a notification): read the list once more, once."""
        self.lists_changed += 1
        if session.relisting or not (session is self._session and session.usable):
            return
        session.relisting = True
        try:
            await asyncio.sleep(0.05)  # let the other copy of the signal arrive
            with contextlib.suppress(McpFault):
                await self._relist(session)
        finally:
            session.relisting = False

    # -- words --

    def _fault(self, why: str, *, broken: bool = True) -> McpFault:
        """The failure, in words; a broken connection is told to the listener too (a
        server's refusal of one call leaves it ready)."""
        fault = McpFault(f"MCP server {self.config.name!r} {why}")
        if broken:
            self._tell(ServerStatus("failed", str(fault)))
        return fault

    def _why(self, session: _Session, exc: BaseException) -> str:
        """Why a call failed, in words; a session it shows broken is not used again."""
        if session.fault:
            return f"{session.fault}; {self._next()}"
        if isinstance(exc, MCPError):
            if exc.code == types.REQUEST_TIMEOUT:
                # A hung server is stopped once its other calls have ended.
                session.retire(f"did not answer within {self.config.timeout:g} s")
            elif exc.code == types.CONNECTION_CLOSED:
                session.retire(ENDED)
            elif exc.code == types.PARSE_ERROR:
                session.retire(garbage(exc))
            else:
                return f"refused the call: {clip(exc.error.message)} (error {exc.code})"
            return f"{session.fault}; {self._next()}"
        return f"{type(exc).__name__}: {clip(str(exc))}"

    def _next(self) -> str:
        if self.config.command:
            return "it is started again for the next call"
        return "the next call connects again"

    def _tell(self, status: ServerStatus) -> None:
        tell_to = listener()
        if tell_to is None:
            return
        config = self.config

        def tell() -> None:
            try:
                tell_to(config, status)
            except Exception:
                log.warning("the MCP status listener failed", exc_info=True)

        shared_pool().submit(tell)


async def _list_tools(client: Client, timeout: float) -> tuple[ToolInfo, ...]:
    found: list[ToolInfo] = []
    cursor: str | None = None
    async with asyncio.timeout(timeout):
        for _ in range(100):  # a paginator that never ends cannot hang us
            page = await client.list_tools(cursor=cursor, cache_mode="bypass")
            found.extend(_info(t) for t in page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
    return tuple(found)


def idempotency_key(call_id: str, run_id: str | None) -> str:
    """What a call goes to its server under: ``<run id>:<call id>`` (the call id alone
    outside a run; empty without a call id)."""
    if not call_id:
        return ""
    return f"{run_id}:{call_id}" if run_id else call_id


def _info(tool: types.Tool) -> ToolInfo:
    notes = tool.annotations
    annotations: dict[str, Any] = {}
    if notes is not None:
        for wire, value in (
            ("readOnlyHint", notes.read_only_hint),
            ("destructiveHint", notes.destructive_hint),
            ("idempotentHint", notes.idempotent_hint),
            ("openWorldHint", notes.open_world_hint),
        ):
            if value is not None:
                annotations[wire] = value
    title = tool.title or (notes.title if notes is not None else None) or ""
    return ToolInfo(
        name=tool.name,
        input_schema=dict(tool.input_schema),
        description=tool.description or "",
        title=title,
        annotations=annotations,
    )


def _outcome(result: types.CallToolResult) -> CallOutcome:
    out = CallOutcome(is_error=bool(result.is_error), structured=result.structured_content)
    for block in result.content:
        if isinstance(block, types.TextContent):
            out.texts.append(block.text)
        elif isinstance(block, types.ImageContent):
            try:
                out.images.append((base64.b64decode(block.data, validate=True), block.mime_type))
            except (binascii.Error, ValueError):
                out.notes.append(f"an image ({block.mime_type}) was not valid base64")
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                out.texts.append(res.text)
            else:
                out.notes.append(f"binary resource {res.uri} ({res.mime_type or 'unknown type'})")
        elif isinstance(block, types.ResourceLink):
            out.notes.append(f"resource link: {block.name} {block.uri}")
        else:
            kind = getattr(block, "type", type(block).__name__)
            out.notes.append(f"{kind} content was left out")
    return out


def _first(exc: ValidationError) -> str:
    errors = exc.errors()
    if not errors:
        return clip(str(exc))
    loc = ".".join(str(p) for p in errors[0].get("loc", ()))
    return clip(f"{loc}: {errors[0].get('msg', '')}")


# -- one session ---------------------------------------------------------------------------


class _Session:
    """One connection: a task holds the SDK's transport and client open until asked to
    close, or until the transport ends. ``fault`` says why it broke."""

    def __init__(self, owner: McpConnection) -> None:
        self.owner = owner
        self.config = owner.config
        self.ready = asyncio.Event()
        self.closing = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self._client: Client | None = None
        self.fault = ""  # why it broke, in words
        self.broken = False  # the transport ended (EOF, a crash, garbage)
        self.retired = False  # no new calls; closed once its calls have ended
        self.inflight = 0
        self.written: set[str] = set()  # keys of the tools/call requests sent
        self.tools: tuple[ToolInfo, ...] | None = None
        self.fresh = False
        self.relisting = False
        self.stderr: StderrLog | None = None

    @property
    def usable(self) -> bool:
        return self.ready.is_set() and not (self.broken or self.retired or self.closing.is_set())

    def client(self) -> Client:
        if self._client is None:
            raise MCPError(code=types.CONNECTION_CLOSED, message="not connected")
        return self._client

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._hold())

    def retire(self, why: str) -> None:
        if not self.fault:
            self.fault = why
        self.retired = True
        self.close_if_idle()

    def close_if_idle(self) -> None:
        if (self.retired or self.broken) and self.inflight == 0:
            self.closing.set()

    def broke(self, why: str) -> None:
        """The transport ended or carried garbage: close now (its calls fail with ``why``)."""
        if not self.fault:
            self.fault = why
        self.broken = True
        self.closing.set()

    async def close(self) -> None:
        self.retired = True
        self.closing.set()
        task = self.task
        if task is None or task.done():
            return
        if not self.ready.is_set():
            task.cancel()  # still connecting: nothing to wind down politely
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(asyncio.shield(task), CLOSE_WAIT)

    async def _hold(self) -> None:
        listen: asyncio.Task[None] | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack)
                client = Client(
                    Wire(transport, self),
                    cache=None,
                    message_handler=self._on_message,
                    client_info=types.Implementation(name="agentweb", version="1"),
                )
                try:
                    await stack.enter_async_context(client)
                finally:
                    if self.stderr is not None:
                        self.stderr.parent_done()
                self._client = client
                self.ready.set()
                caps = client.server_capabilities.tools
                if caps is not None and caps.list_changed and _is_modern(client):
                    listen = asyncio.get_running_loop().create_task(self._listen(client))
                await self.closing.wait()
                if listen is not None:
                    listen.cancel()
                    with contextlib.suppress(BaseException):
                        await listen
        except asyncio.CancelledError:
            if not self.fault:
                self.fault = "the connection was cancelled"
        except BaseException as exc:
            if not self.fault:
                self.fault = _describe(exc, self.config)
        finally:
            self.broken = True
            self._client = None
            self.ready.set()
            if self.stderr is not None:
                self.stderr.parent_done()
                if self.fault and self.stderr.recent:  # why it failed, at the log's level
                    log.warning(
                        "MCP server %s %s; its last lines on stderr:\n%s",
                        self.config.name,
                        self.fault,
                        "\n".join(self.stderr.recent),
                        extra={"mcp_server": self.config.name},
                    )

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        config = self.config
        if config.command:
            self.stderr = StderrLog(config.name)
            params = StdioServerParameters(
                command=config.command[0],
                args=list(config.command[1:]),
                env=dict(config.env),
                cwd=config.cwd,
            )
            return stdio_client(params, errlog=self.stderr.writer)
        http = httpx2.AsyncClient(
            headers=dict(config.headers),
            timeout=httpx2.Timeout(30.0, read=config.timeout + 5),
        )
        await stack.enter_async_context(http)
        return streamable_http_client(config.url, http_client=http)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            asyncio.get_running_loop().create_task(self.owner._tools_changed(self))
        elif isinstance(message, Exception):
            self.broke(garbage(message))

    async def _listen(self, client: Client) -> None:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    await self.owner._tools_changed(self)
        except (ListenNotSupportedError, MCPError, RuntimeError, TimeoutError):
            log.debug("MCP server %r: no list-changed stream", self.config.name, exc_info=True)


def _is_modern(client: Client) -> bool:
    return (client.protocol_version or "") >= "2026"


def _describe(exc: BaseException, config: ServerConfig) -> str:
    """Why a session could not be opened or ended, in words."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return f"cannot start {config.command[0]!r}: no such program"
    if isinstance(exc, PermissionError):
        return f"cannot start {config.command[0]!r}: permission denied"
    if isinstance(exc, httpx2.ConnectError):
        return f"cannot connect to {config.url}: {clip(str(exc)) or 'connection refused'}"
    if isinstance(exc, httpx2.HTTPStatusError):
        return f"{config.url} answered HTTP {exc.response.status_code}"
    if isinstance(exc, MCPError):
        if exc.code == types.CONNECTION_CLOSED:
            return "closed the connection before it was ready (it exited?)"
        return f"refused the connection: {clip(exc.error.message)} (error {exc.code})"
    return f"{type(exc).__name__}: {clip(str(exc))}"


# -- this process's connections ------------------------------------------------------------

_connections: dict[str, McpConnection] = {}
_connections_lock = threading.Lock()
_connections_pid = os.getpid()


def connection(config: ServerConfig) -> McpConnection:
    """This process's connection to the server ``config`` names (one per name); a config
    that changed closes the old connection and makes a new one."""
    global _connections_pid
    with _connections_lock:
        if _connections_pid != os.getpid():  # a forked child owns none of its parent's
            _connections.clear()
            _connections_pid = os.getpid()
        found = _connections.get(config.name)
        if found is not None and found.config == config:
            return found
        made = McpConnection(config)
        _connections[config.name] = made
    if found is not None:
        _close_soon(found)
    return made


def forget(name: str) -> None:
    """Close and drop the connection to ``name`` (the server was removed)."""
    with _connections_lock:
        found = _connections.pop(name, None)
    if found is not None:
        _close_soon(found)


def _close_soon(conn: McpConnection) -> None:
    _LOOP.submit(conn._close_session())


def close_all(wait: float = CLOSE_WAIT) -> None:
    """Close every connection of this process (stdio servers stopped), bounded by ``wait``."""
    with _connections_lock:
        found = list(_connections.values())
        _connections.clear()
    if not found:
        return

    async def close() -> None:
        await asyncio.gather(*(c._close_session() for c in found), return_exceptions=True)

    with contextlib.suppress(concurrent.futures.TimeoutError, RuntimeError):
        _LOOP.run(close(), wait)


def live_processes() -> list[int]:
    """The stdio servers this process started that still exist, reaped ones forgotten
    (a zombie still exists): for tests and the bench, no leaks."""
    mine = set(children())
    for pid in list(SPAWNED):
        if pid not in mine:
            SPAWNED.discard(pid)
    return sorted(SPAWNED)


atexit.register(close_all, 5.0)
